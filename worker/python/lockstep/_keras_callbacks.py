"""lockstep.keras.callbacks: what Horovod's Keras users add to fit().

    model.fit(data, epochs=5, callbacks=[
        lockstep.keras.callbacks.MetricAverageCallback(),  # first
        lockstep.keras.callbacks.rank0_only(
            keras.callbacks.ModelCheckpoint("model.weights.h5",
                                            save_weights_only=True)),
        lockstep.keras.callbacks.InterruptibleCallback(),
        lockstep.keras.callbacks.TrainerStatusCallback()])  # Kubeflow

None of them changes anything in Keras outside the fit() it is given to.
"""

import hashlib

import numpy as np
import keras

from lockstep._keras_distributed import refusal as _refuse
from lockstep.cluster import Place
from lockstep._signals import interruptible as _interruptible
from lockstep.job import current_job
from lockstep.trainer_status import TrainerStatus

__all__ = ["InterruptibleCallback", "MetricAverageCallback",
           "TrainerStatusCallback", "rank", "rank0_only", "size"]


def _place():
    """The joined job's cluster, else the environment's place."""
    job = current_job()
    return job.cluster if job is not None else Place.from_env()


def rank() -> int:
    """This worker's rank: the joined job's, else the environment's
    (LOCKSTEP_RANK, torchrun's RANK, TF_CONFIG; lockstep.cluster)."""
    return _place().rank


def size() -> int:
    """The job's worker count, read as rank() is."""
    return _place().num_workers


def rank0_only(callback: "keras.callbacks.Callback"
               ) -> "keras.callbacks.Callback":
    """`callback` on rank 0; on every other rank a callback that does
    nothing. For what writes files (ModelCheckpoint, TensorBoard,
    CSVLogger): every worker holds the same weights, so one copy is
    written. Put MetricAverageCallback before it when it reads metrics
    (save_best_only, monitor)."""
    if not isinstance(callback, keras.callbacks.Callback):
        raise _refuse("INVALID_ARGUMENT", "rank0_only takes a keras.callbacks."
                      f"Callback, got {type(callback).__name__}")
    return callback if rank() == 0 else keras.callbacks.Callback()


def _fingerprint(keys):
    """Eight whole numbers in [0, 256) naming the sorted keys: their mean
    over the workers equals every worker's own only when all agree."""
    digest = hashlib.sha256("\0".join(keys).encode()).digest()
    return [float(b) for b in digest[:8]]


def _scalar(key, value):
    array = np.asarray(value, dtype=np.float64)
    if array.size != 1:
        raise _refuse("INVALID_ARGUMENT",
                      f"MetricAverageCallback averages scalars; log {key!r} "
                      f"has shape {array.shape}")
    return float(array.reshape(()))


class MetricAverageCallback(keras.callbacks.Callback):
    """Replaces every epoch-end log (loss, metrics, val_*) by its mean over
    the workers, so that what the later callbacks see (ModelCheckpoint's
    monitor, EarlyStopping, ReduceLROnPlateau, the progress bar, History)
    is the job's and the same on every worker. Put it first in the list.

    Each worker's value is the metric of its own examples; the mean of the
    workers' values is the job's value when every worker saw as many
    examples (lockstep.keras.shard makes it so), as a mean metric over one
    process's whole data would give. Through Job.average: every worker
    must log the same keys (the same compiled metrics, and validation on
    every worker or none), which is checked first; different keys end
    the worker with FAILED_PRECONDITION naming them.
    """

    def on_epoch_end(self, epoch, logs=None):
        if logs is None:
            return
        job = current_job()
        if job is None or not job.joined:
            raise _refuse("FAILED_PRECONDITION",
                          "MetricAverageCallback averages through the job, "
                          "and this process has joined none: compile with "
                          "lockstep.keras.SyncOptimizer or "
                          "DistributedOptimizer")
        keys = sorted(logs)
        values = [_scalar(k, logs[k]) for k in keys]
        mine = _fingerprint(keys)
        # Whole numbers: every worker's own equals the mean only when all
        # agree, whatever order the servers add them in.
        mean = job.average(mine, name="lockstep.keras.MetricAverage.keys")
        if any(abs(m - o) > 1e-3 for m, o in zip(mean, mine)):
            raise _refuse(
                "FAILED_PRECONDITION",
                f"MetricAverageCallback at the end of epoch {epoch + 1}: "
                f"the workers log different keys (this worker, rank "
                f"{job.rank}: {', '.join(keys)}); compile the same metrics "
                "on every worker, and validate on every worker or on none")
        if not keys:
            return
        mean = job.average(values, name="lockstep.keras.MetricAverage.values")
        for key, value in zip(keys, mean):
            logs[key] = float(value)


class InterruptibleCallback(keras.callbacks.Callback):
    """Ctrl-C (SIGINT) ends the process at once during fit(), as it ends
    lockstep_worker, instead of waiting for a step the servers hold: the
    wait runs on a TensorFlow thread, where Python cannot interrupt it.
    SIGINT has its default action from the start of training to its end
    (lockstep.keras.interruptible() is the same as a `with` block); a
    handler the script installed itself is left alone. If fit() raises,
    the default action stays until the process ends."""

    def on_train_begin(self, logs=None):
        self._scope = _interruptible()
        self._scope.__enter__()

    def on_train_end(self, logs=None):
        scope, self._scope = getattr(self, "_scope", None), None
        if scope is not None:
            scope.__exit__(None, None, None)


class TrainerStatusCallback(keras.callbacks.Callback):
    """fit()'s progress, time left, loss and accuracy (and val_* at each
    epoch's end) in a Kubeflow TrainJob's status, from rank 0 through
    lockstep.TrainerStatus; nothing anywhere else. examples_per_step: the
    job's examples in one step (all workers'), for the rate it reports.
    The job's end is reported when fit() returns (progress 100)."""

    def __init__(self, examples_per_step=0, every_s=30.0):
        super().__init__()
        self._examples_per_step = examples_per_step
        self._every_s = every_s
        self._status = None
        self._epoch = 0
        self._steps = 0

    def on_train_begin(self, logs=None):
        per_epoch = int(self.params.get("steps") or 0)
        epochs = int(self.params.get("epochs") or 0)
        self._status = TrainerStatus(per_epoch * epochs, epochs,
                                     examples_per_step=self._examples_per_step,
                                     every_s=self._every_s)
        self._per_epoch = per_epoch

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        logs = logs or {}
        self._steps = self._epoch * self._per_epoch + batch + 1
        self._status.step(self._steps, self._epoch + 1,
                          loss=float(logs.get("loss", 0.0)),
                          accuracy=float(logs.get("accuracy", 0.0)))

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        if "val_loss" in logs and "val_accuracy" in logs:
            self._status.epoch_end(epoch + 1, self._steps,
                                   val_loss=float(logs["val_loss"]),
                                   val_accuracy=float(logs["val_accuracy"]))
        else:
            self._status.epoch_end(epoch + 1, self._steps)

    def on_train_end(self, logs=None):
        if self._status is not None:
            self._status.finish(self._steps)
