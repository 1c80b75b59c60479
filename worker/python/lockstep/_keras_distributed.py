"""lockstep.keras.DistributedOptimizer: any Keras optimizer on the workers'
mean gradient, through the servers' summation mode, and the exchange both
Keras optimizers of the package share.

    opt = keras.optimizers.AdamW(keras.optimizers.schedules.CosineDecay(...))
    model.compile(optimizer=lockstep.keras.DistributedOptimizer(opt, model),
                  loss=...)

The servers only average; every worker's Keras optimizer then runs its own
update (learning-rate schedule, clipping, weight decay, EMA) on the same
mean gradient, so every worker keeps the same weights.
"""

import numpy as np
import tensorflow as tf
import keras

from lockstep import errors as _errors
from lockstep.errors import LockstepError
from lockstep.job import AVERAGE, Job


def refusal(code, message):
    """A LockstepError to raise before the job is joined: the exit code is
    Lockstep's (2 for a refusal), not Python's 1."""
    _errors.install_exit_codes()
    return _errors.error(code, message)


def _tracing_for_xla():
    """Whether TensorFlow is tracing a function it will compile with XLA
    (tf.function(jit_compile=True), or Keras's train step under
    jit_compile). TensorFlow's own test, which has no public name; False
    where it is missing."""
    try:
        from tensorflow.python.framework import ops
        from tensorflow.python.ops import control_flow_util
        return bool(control_flow_util.GraphOrParentsInXlaContext(
            ops.get_default_graph()))
    except (ImportError, AttributeError):
        return False


def refuse_xla(optimizer, model):
    """Refuses XLA, which cannot compile the exchange (a tf.py_function):
    a model compiled with this optimizer and jit_compile on (Keras's "auto"
    turns it on where there is a GPU), or a step traced for XLA."""
    compiled = model is not None and getattr(model, "compiled", False) and \
        getattr(model, "optimizer", None) is optimizer
    if (compiled and model.jit_compile) or _tracing_for_xla():
        raise refusal("INVALID_ARGUMENT",
                      f"{type(optimizer).__name__} exchanges through a "
                      "tf.py_function, which XLA cannot compile: compile "
                      "the model with jit_compile=False (Keras's default, "
                      "\"auto\", turns XLA on where there is a GPU), and "
                      "do not wrap the step in tf.function(jit_compile=True)")


def names(variables):
    """Unique tensor names: each variable's path ("dense/kernel")."""
    out, seen = [], set()
    for i, v in enumerate(variables):
        name = getattr(v, "path", None) or getattr(v, "name", None) or f"v{i}"
        if name in seen:
            name = f"{name}_{i}"
        seen.add(name)
        out.append(name)
    return out


def relative(model, tensor_names):
    """Variable paths without the model's own name in front ("dense/kernel"),
    so a job's signature and its files do not depend on what Keras named
    the model instance."""
    if model is None:
        return tensor_names
    prefix = model.name + "/"
    return [n[len(prefix):] if n.startswith(prefix) else n
            for n in tensor_names]


def float_state(model):
    """The model's float non-trainable variables (batch-norm statistics)."""
    if model is None:
        return []
    return [v for v in model.non_trainable_variables
            if keras.backend.standardize_dtype(v.dtype) == "float32"]


def join(model, variables, state, **job_options):
    """A joined Job over variables and state; rank 0's values everywhere.

    Returns (job, layout): layout is [(begin, end, shape)] of variables
    then state in the flat vectors.
    """
    for v in list(variables) + list(state):
        if keras.backend.standardize_dtype(v.dtype) != "float32":
            raise refusal("INVALID_ARGUMENT",
                          f"variable {v.path} is {v.dtype}; Lockstep "
                          "trains float32 variables")
    # Eagerly, also when Keras builds the optimizer while tracing a step.
    with tf.init_scope():
        job = Job(list(zip(relative(model, names(variables)),
                           [tuple(v.shape) for v in variables])),
                  list(zip(relative(model, names(state)),
                           [tuple(v.shape) for v in state])),
                  **job_options)
        everything = list(zip(job.tensors + job.state_tensors,
                              list(variables) + list(state)))
        for t, v in everything:
            job.weights[t.offset:t.end] = np.asarray(v.numpy()).reshape(-1)
        job.join()
        for t, v in everything:
            v.assign(job.weights[t.offset:t.end].reshape(t.shape))
    return job, [(t.offset, t.end, t.shape) for t, _ in everything]


def exchange(optimizer, job, layout, grads, trainable_variables, state):
    """Pushes every built variable's gradient (zeros for one Keras filtered
    out), then the state; returns what the servers answer, split as
    `layout`: the next version (server optimizers) or the mean gradient
    (summation mode), as tensors."""
    given = {optimizer._var_key(v): g
             for g, v in zip(grads, trainable_variables)}
    parts = []
    for v in optimizer._trainable_variables:
        g = given.get(optimizer._var_key(v))
        if g is None:
            g = tf.zeros(v.shape, tf.float32)
        parts.append(tf.reshape(tf.cast(g, tf.float32), [-1]))
    for v in state:
        parts.append(tf.reshape(v.value, [-1]))
    flat = tf.concat(parts, axis=0)

    def step(values):
        np.copyto(job.gradient, values.numpy())
        try:
            job.ready(0, job.weights.size)
            job.finish()
        except LockstepError as e:
            # TensorFlow re-raises it as an UnknownError: keep its exit code.
            raise _errors.remember(e)
        return job.weights

    new = tf.py_function(step, [flat], Tout=tf.float32)
    new = tf.ensure_shape(new, [job.weights.size])
    return [tf.reshape(new[begin:end], shape)
            for begin, end, shape in layout]


def DistributedOptimizer(optimizer, model=None, **job_options):
    """Wraps a Keras optimizer so that it updates with the workers' mean
    gradient (Horovod's lockstep.keras counterpart).

    Returns an optimizer of a subclass of `optimizer`'s class made from its
    config (schedules included); make it before the optimizer is built.
    `model` (optional) names the tensors after the model's variables and
    averages its batch-norm statistics as state. Keyword arguments go to
    lockstep.job.Job. Compile with jit_compile=False: the exchange is a
    py_function, which XLA cannot compile, and an XLA step is refused.
    """
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise refusal("INVALID_ARGUMENT",
                      "DistributedOptimizer wraps a keras.optimizers."
                      f"Optimizer, got {type(optimizer).__name__}")
    if isinstance(optimizer, _Distributed):
        raise refusal("INVALID_ARGUMENT",
                      "the optimizer is a DistributedOptimizer already")
    if optimizer.built:
        raise refusal("FAILED_PRECONDITION",
                      "wrap the optimizer before it is built (before "
                      "compile() or its first apply())")
    cls = type(type(optimizer).__name__, (_Distributed, type(optimizer)), {})
    wrapped = cls.from_config(optimizer.get_config())
    # Past Keras's attribute tracking: plain references.
    wrapped.__dict__["_lockstep_model"] = model
    wrapped.__dict__["_lockstep_options"] = dict(job_options)
    wrapped.__dict__["job"] = None
    return wrapped


class _Distributed:
    """Put before the wrapped Keras optimizer's class."""

    def build(self, variables):
        super().build(variables)
        model = self.__dict__["_lockstep_model"]
        refuse_xla(self, model)
        if self.__dict__.get("job") is not None:
            return
        state = float_state(model)
        job, layout = join(model, list(variables), state, optimizer=AVERAGE,
                           **self.__dict__["_lockstep_options"])
        self.__dict__.update(job=job, _lockstep_layout=layout,
                             _lockstep_state=state)

    def _backend_apply_gradients(self, grads, trainable_variables):
        refuse_xla(self, self.__dict__["_lockstep_model"])
        state = self.__dict__["_lockstep_state"]
        layout = self.__dict__["_lockstep_layout"]
        parts = exchange(self, self.job, layout, grads, trainable_variables,
                         state)
        variables = list(self._trainable_variables)
        for part, v in zip(parts[len(variables):], state):
            v.assign(part)
        return super()._backend_apply_gradients(parts[:len(variables)],
                                                variables)
