"""Keras 3 (TensorFlow backend) through Lockstep's parameter servers.

The tutorial's code, changed in three lines:

    import lockstep.keras
    model.compile(optimizer=lockstep.keras.SyncOptimizer("adam", model=model),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"],
                  jit_compile=False)
    model.fit(lockstep.keras.shard((x_train, y_train), batch_size=64),
              epochs=5, callbacks=[lockstep.keras.InterruptibleCallback()])

Importing it changes nothing in Keras: what it does, it does through the
optimizer, the dataset and the callbacks the script hands to Keras.

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
made of them and every worker gets the workers' mean back. The optimizer
finds them in the model it is given (model=).

Limits: the gradients leave when Keras has computed all of them (no overlap
with backprop inside a compiled step); XLA cannot compile the exchange (a
py_function), so a step compiled with XLA is refused: compile with
jit_compile=False.
"""

import contextlib
import os
import warnings
from typing import Iterator

import numpy as np
import tensorflow as tf
import keras

from lockstep import _native
from lockstep import _keras_callbacks as callbacks
from lockstep import data as _data
from lockstep import errors as _errors
from lockstep._keras_callbacks import (InterruptibleCallback,
                                       MetricAverageCallback, rank,
                                       rank0_only, size)
from lockstep._keras_distributed import (DistributedOptimizer, exchange,
                                         float_state, join, names, refusal,
                                         refuse_xla, relative)
from lockstep._signals import interruptible as _interruptible
from lockstep.job import current_job
from lockstep.cluster import Cluster, Place
from lockstep.errors import LockstepError

__all__ = ["DistributedOptimizer", "SyncOptimizer", "shard", "save_safetensors",
           "load_safetensors", "callbacks", "MetricAverageCallback",
           "InterruptibleCallback", "rank0_only", "interruptible", "rank",
           "size", "Cluster", "LockstepError", "current_job"]

_NO_MODEL = ("SyncOptimizer needs the model it trains, for its batch-norm "
             "statistics and tensor names: SyncOptimizer(\"adam\", "
             "model=model). (lockstep.keras no longer patches "
             "keras.Model.compile to tell it; also pass jit_compile=False "
             "to compile, and for Ctrl-C during fit, "
             "callbacks=[lockstep.keras.InterruptibleCallback()].)")


class SyncOptimizer(keras.optimizers.Optimizer):
    """A Keras optimizer whose step runs on Lockstep's servers.

    Args:
      optimizer: sgd, momentum, adam or adamw, with Keras's defaults for
        what is not given.
      model: the keras.Model it trains (keyword; required): the optimizer
        averages its float non-trainable variables (batch-norm statistics)
        as state and names the job's tensors after its variables.
      learning_rate, momentum, nesterov, beta_1, beta_2, epsilon,
        weight_decay: its settings.
      sync, backup_workers, staleness, total_steps, cluster: as for
        lockstep.job.Job; other keyword arguments go to it too.

    Compile with jit_compile=False: a step compiled with XLA is refused.
    """

    def __init__(self, optimizer="adam", learning_rate=None, momentum=None,
                 nesterov=None, beta_1=None, beta_2=None, epsilon=None,
                 weight_decay=None, sync="sync", backup_workers=0, staleness=None,
                 total_steps=0, cluster=None, name="lockstep_sync", *,
                 model=None, **job_options):
        if model is None:
            raise refusal("INVALID_ARGUMENT", _NO_MODEL)
        if not isinstance(model, keras.layers.Layer):
            raise refusal("INVALID_ARGUMENT",
                          "SyncOptimizer(model=...) takes the keras.Model it "
                          f"trains, got {type(model).__name__}")
        if learning_rate is None:
            learning_rate = _native.optimizer_defaults(optimizer)["learning_rate"]
        super().__init__(learning_rate=learning_rate, name=name)
        self._lockstep = dict(
            optimizer=optimizer, learning_rate=learning_rate,
            momentum=momentum, nesterov=nesterov, beta_1=beta_1,
            beta_2=beta_2, epsilon=epsilon, weight_decay=weight_decay,
            sync=sync, backup_workers=backup_workers, staleness=staleness,
            total_steps=total_steps, cluster=cluster, **job_options)
        # Past Keras's attribute tracking: a reference, not a child.
        self.__dict__["_lockstep_model"] = model
        self.job = None

    def build(self, variables):
        model = self.__dict__["_lockstep_model"]
        refuse_xla(self, model)
        known = {id(v) for v in model.trainable_variables}
        for v in variables:
            if id(v) not in known:
                raise refusal("INVALID_ARGUMENT",
                              f"SyncOptimizer updates {v.path}, which is not "
                              f"a trainable variable of its model "
                              f"{model.name!r}: pass model= the model it "
                              "trains")
        super().build(variables)
        self._state = float_state(model)
        self.job, self._layout = join(model, list(variables), self._state,
                                      **self._lockstep)

    def _backend_apply_gradients(self, grads, trainable_variables):
        refuse_xla(self, self.__dict__["_lockstep_model"])
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


@contextlib.contextmanager
def interruptible() -> "Iterator[None]":
    """Ctrl-C ends the process at once inside the block (a fit() or a custom
    loop), as InterruptibleCallback does for one fit(); see there."""
    with _interruptible():
        yield


def shard(data: "tuple | tf.data.Dataset", batch_size: int,
          epochs: "int | None" = None, **kwargs) -> "tf.data.Dataset":
    """This worker's batches as a tf.data.Dataset, one epoch per iteration.

    data: (features, labels) numpy arrays, or a tf.data.Dataset of single
    examples (not batched).

    Arrays: each time Keras iterates the dataset (each epoch of fit) it
    yields the rest of the epoch the job is in, in lockstep_worker's order
    (lockstep.data.Shard).

    A Dataset: in the order it yields, global step s takes its W*B elements
    from s*W*B on and worker r the B of them from s*W*B + r*B on (W
    workers, B = batch_size), so W workers see what one process with batch
    W*B sees. The last W*B - 1 elements at most are dropped: every worker
    has floor(N / (W*B)) batches. Every worker must make the same dataset,
    in the same order: shuffle with a seed (dataset.shuffle(n, seed=S)),
    and the same global seed on every worker (keras.utils.set_random_seed
    sets it too). It starts from its first element at each iteration,
    wherever the job is.
    """
    if isinstance(data, tf.data.Dataset):
        return _shard_dataset(data, batch_size, epochs, kwargs)
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


def _shard_dataset(dataset, batch_size, epochs, kwargs):
    if epochs is not None or set(kwargs) - {"job"}:
        raise refusal("INVALID_ARGUMENT",
                      "shard(dataset) takes batch_size and job only; a "
                      "dataset gives one epoch per iteration "
                      "(dataset.repeat() for more), in its own order")
    job = kwargs.get("job")
    place = job.cluster if job is not None else Place.from_env()
    b, r = int(batch_size), place.rank
    if b < 1:
        raise refusal("INVALID_ARGUMENT",
                      f"shard: batch_size must be positive, got {batch_size}")
    # One global batch, then this worker's slice of it: every worker has
    # the same number of batches whatever the dataset's length, known or not.
    global_batches = dataset.batch(place.num_workers * b, drop_remainder=True)
    # map() hands a tuple's parts over as arguments.
    is_tuple = isinstance(global_batches.element_spec, tuple)

    def mine(*parts):
        element = parts if is_tuple else parts[0]
        return tf.nest.map_structure(lambda t: t[r * b:(r + 1) * b], element)

    return global_batches.map(mine)


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
