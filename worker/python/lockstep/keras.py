"""Keras 3 (TensorFlow backend) through Lockstep's parameter servers.

The tutorial's code, changed in three lines:

    import lockstep.keras
    model.compile(optimizer=lockstep.keras.SyncOptimizer("adam"),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(lockstep.keras.shard((x_train, y_train), batch_size=64),
              epochs=5)

SyncOptimizer is a Keras optimizer whose update exchanges through Lockstep:
Keras computes the gradients as usual, the optimizer pushes them all (one
call into the C++ client from a tf.py_function) and assigns the version the
servers answer with, which ran the optimizer. It joins the job when Keras
builds it -- while the train function is traced, before its first step
runs -- so rank 0's initial weights become version 0 and every worker's
first forward pass already uses them. A train-step override would have to
replace Model.train_step for every model class; an optimizer is what
Keras's own API hands over, works with fit, evaluate and custom loops
(optimizer.apply), and keeps the three-line change.

Non-trainable float variables (batch-norm moving mean and variance) travel
as state, as lockstep_worker's do: each worker pushes what its forward pass
made of them and every worker gets the workers' mean back.

Limits: the gradients leave when Keras has computed all of them (no overlap
with backprop inside a compiled step); XLA compilation is turned off for
the train step (py_function cannot be compiled).
"""

import warnings
import weakref

import numpy as np
import tensorflow as tf
import keras

from lockstep import _native
from lockstep import data as _data
from lockstep import errors as _errors
from lockstep._keras_distributed import (DistributedOptimizer, exchange,
                                         float_state, join, names, relative)
from lockstep.job import _interruptible, current_job
from lockstep.cluster import Cluster
from lockstep.errors import LockstepError

__all__ = ["DistributedOptimizer", "SyncOptimizer", "shard", "save_safetensors", "load_safetensors",
           "Cluster", "LockstepError", "current_job"]


class SyncOptimizer(keras.optimizers.Optimizer):
    """A Keras optimizer whose step runs on Lockstep's servers.

    Args:
      optimizer: sgd, momentum, adam or adamw, with Keras's defaults for
        what is not given.
      learning_rate, momentum, nesterov, beta_1, beta_2, epsilon,
        weight_decay: its settings.
      sync, backup_workers, staleness, total_steps, cluster: as for
        lockstep.job.Job; other keyword arguments go to it too.
    """

    def __init__(self, optimizer="adam", learning_rate=None, momentum=None,
                 nesterov=None, beta_1=None, beta_2=None, epsilon=None,
                 weight_decay=None, sync="sync", backup_workers=0, staleness=None,
                 total_steps=0, cluster=None, name="lockstep_sync",
                 **job_options):
        if learning_rate is None:
            learning_rate = _native.optimizer_defaults(optimizer)["learning_rate"]
        super().__init__(learning_rate=learning_rate, name=name)
        self._lockstep = dict(
            optimizer=optimizer, learning_rate=learning_rate,
            momentum=momentum, nesterov=nesterov, beta_1=beta_1,
            beta_2=beta_2, epsilon=epsilon, weight_decay=weight_decay,
            sync=sync, backup_workers=backup_workers, staleness=staleness,
            total_steps=total_steps, cluster=cluster, **job_options)
        self.job = None

    def build(self, variables):
        super().build(variables)
        model = self._model()
        self._state = float_state(model)
        self.job, self._layout = join(model, list(variables), self._state,
                                      **self._lockstep)

    def _model(self):
        """The model compile() gave this optimizer to, or None."""
        ref = self.__dict__.get("_lockstep_model")
        return ref() if ref is not None else None

    def _backend_apply_gradients(self, grads, trainable_variables):
        # Every variable travels, in build order, then the state; the reply
        # is the next version of each.
        parts = exchange(self, self.job, self._layout, grads,
                         trainable_variables, self._state)
        for part, v in zip(parts, list(self._trainable_variables) +
                           self._state):
            v.assign(part)

    def update_step(self, gradient, variable, learning_rate):
        raise NotImplementedError("SyncOptimizer updates on the servers")

    def get_config(self):
        config = super().get_config()
        config.update({k: v for k, v in self._lockstep.items()
                       if k != "cluster"})
        return config

    def save_safetensors(self, path):
        """The job's weights as a safetensors file keyed by variable path."""
        self.job.save_safetensors(path)


def _compile_hook(model_class):
    """Model.compile, told about a SyncOptimizer: it learns its model (for
    the state variables and names), and the train step runs without XLA,
    which Keras's "auto" picks on a GPU and which cannot run a py_function.
    Model.fit with one: Ctrl-C ends the process at once, as it ends
    lockstep_worker, rather than waiting for a step the servers hold (the
    wait runs on a TensorFlow thread, where Python cannot interrupt it)."""
    original = model_class.compile
    original_fit = model_class.fit

    def compile(self, *args, **kwargs):
        optimizer = kwargs.get("optimizer", args[0] if args else None)
        if isinstance(optimizer, SyncOptimizer):
            kwargs["jit_compile"] = False
            # Past Keras's attribute tracking: a reference, not a child.
            optimizer.__dict__["_lockstep_model"] = weakref.ref(self)
        return original(self, *args, **kwargs)

    def fit(self, *args, **kwargs):
        if not isinstance(getattr(self, "optimizer", None), SyncOptimizer):
            return original_fit(self, *args, **kwargs)
        with _interruptible():
            return original_fit(self, *args, **kwargs)

    compile.__doc__ = original.__doc__
    fit.__doc__ = original_fit.__doc__
    model_class.compile = compile
    model_class.fit = fit


_compile_hook(keras.Model)


def shard(data: tuple, batch_size: int, epochs: "int | None" = None,
          **kwargs) -> "tf.data.Dataset":
    """This worker's batches as a tf.data.Dataset, one epoch per iteration.

    data: (features, labels) numpy arrays. Each time Keras iterates the
    dataset (each epoch of fit) it yields the rest of the epoch the job is
    in, in lockstep_worker's order (lockstep.data.Shard).
    """
    x, y = (np.asarray(a) for a in data)
    s = _data.Shard((x, y), batch_size=batch_size, epochs=epochs, ahead=True,
                    **kwargs)
    spec = (tf.TensorSpec((batch_size,) + x.shape[1:], tf.as_dtype(x.dtype)),
            tf.TensorSpec((batch_size,) + y.shape[1:], tf.as_dtype(y.dtype)))
    dataset = tf.data.Dataset.from_generator(lambda: iter(s),
                                             output_signature=spec)
    # Keras sizes its progress bar and epochs by the cardinality. It is
    # floor(N / (W*B)) when an iteration starts at an epoch's first step,
    # as it does unless the worker restarted in the middle of one (see
    # docs/python.md, Limits).
    cluster = kwargs.get("job").cluster if kwargs.get("job") else \
        Cluster.from_env()
    steps = len(y) // (cluster.num_workers * batch_size)
    return dataset.apply(tf.data.experimental.assert_cardinality(steps))


# fit(shuffle=True), its default, does not apply to a dataset; ours is
# already in Lockstep's order.
warnings.filterwarnings("ignore", message=r"`shuffle=True` was passed")


def _model_names(model):
    return relative(model, names(model.weights))


def save_safetensors(model: "keras.Model", path: "str | os.PathLike") -> None:
    """Writes the model's weights keyed by variable path ("dense/kernel")."""
    variables = list(model.weights)
    flat = np.concatenate([np.asarray(v.numpy(), np.float32).reshape(-1)
                           for v in variables]) if variables else \
        np.zeros(0, np.float32)
    _native.write_safetensors(
        str(path), list(zip(_model_names(model),
                            [list(v.shape) for v in variables])), flat)


def load_safetensors(model: "keras.Model", path: "str | os.PathLike") -> None:
    """Loads a safetensors file into the model's variables of the same paths.

    Keras numbers layers per process ("dense", then "dense_1"): a model
    built in a fresh process (or after keras.utils.clear_session()) gets
    the names the file was written with. LockstepError names a variable the
    file lacks or holds with another shape.
    """
    variables = list(model.weights)
    found = {name: (tuple(shape), values)
             for name, shape, values in _native.read_safetensors(str(path))}
    names = _model_names(model)
    for name, v in zip(names, variables):
        if name not in found:
            raise _errors.error("FAILED_PRECONDITION",
                                f"{path} has no tensor {name!r}")
        if found[name][0] != tuple(v.shape):
            raise _errors.error("FAILED_PRECONDITION",
                                f"tensor {name!r} is {found[name][0]} in "
                                f"{path}, {tuple(v.shape)} in the model")
    for name, v in zip(names, variables):
        v.assign(found[name][1].reshape(found[name][0]))
