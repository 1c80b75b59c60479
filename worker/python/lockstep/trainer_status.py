"""Progress in a Kubeflow TrainJob's status, as lockstep_worker reports it.

Kubeflow Trainer (v2.2, its TrainJob progress proposal) shows a TrainJob's
progress, time left and latest metrics in status.trainerStatus, which the
training pushes to an endpoint Trainer gives the pod
(KUBEFLOW_TRAINER_STATUS_SERVER_URL, with its CA and a projected token).
TrainerStatus posts there from rank 0 with lockstep_worker's own reporter
(the C++ one: same body, same TLS, same token handling). Anywhere else (no
endpoint, or not rank 0) it does nothing, so a script calls it
unconditionally:

    status = lockstep.TrainerStatus(total_steps=steps_per_epoch * epochs,
                                    epochs=epochs)
    for epoch in ...:
        for batch in ...:
            ...
            status.step(step, epoch + 1, loss=..., accuracy=...)
        status.epoch_end(epoch + 1, step)
    status.finish(step, test_loss=..., test_accuracy=...)

Posts go out on a thread of the reporter's, at most every `every_s` seconds
and at each epoch's first step, so a slow or absent endpoint never holds a
step; a refused post is said once on stderr and the job goes on.
lockstep.keras.callbacks.TrainerStatusCallback does this for model.fit().
"""

import time

from lockstep import _native
from lockstep.cluster import Place
from lockstep.job import current_job

__all__ = ["TrainerStatus"]


def _rank():
    job = current_job()
    return job.cluster.rank if job is not None else Place.from_env().rank


class TrainerStatus:
    """Rank 0's reports to the TrainJob's status endpoint (see the module's
    doc). `total_steps` and `epochs` are the whole job's; examples_per_step
    (all workers' examples in one step) gives the rate reported; `rank`
    defaults to the joined job's, else the environment's."""

    def __init__(self, total_steps, epochs=0, *, examples_per_step=0,
                 every_s=30.0, rank=None):
        if min(total_steps, epochs, examples_per_step, every_s) < 0:
            raise ValueError("TrainerStatus: total_steps, epochs, "
                             "examples_per_step and every_s must not be "
                             "negative")
        self.total_steps = int(total_steps)
        self.epochs = int(epochs)
        self.examples_per_step = int(examples_per_step)
        # None where the pod was given no endpoint: then nothing more is
        # asked (a script run by hand has no rank to read either).
        self._reporter = _native.trainer_status_reporter(float(every_s))
        if self._reporter is not None and (
                _rank() if rank is None else rank) != 0:
            self._reporter = None
        self._last = None  # (time, step) of the previous step() call

    @property
    def active(self):
        """True where reports are sent: rank 0 given an endpoint."""
        return self._reporter is not None

    def step(self, step, epoch=0, *, loss=0.0, accuracy=0.0,
             examples_per_second=None):
        """Step `step` (global steps done, from 1) of epoch `epoch` (from
        1) has ended; loss and accuracy: the epoch's running figures.
        examples_per_second: measured between calls from examples_per_step
        unless given."""
        if self._reporter is None:
            return
        now = time.monotonic()
        if examples_per_second is None:
            examples_per_second = 0.0
            if self._last is not None and now > self._last[0]:
                examples_per_second = (self.examples_per_step *
                                       (step - self._last[1]) /
                                       (now - self._last[0]))
        self._last = (now, step)
        self._reporter.step(int(step), self.total_steps, int(epoch),
                            self.epochs, float(loss), float(accuracy),
                            float(examples_per_second))

    def epoch_end(self, epoch, step, *, val_loss=None, val_accuracy=None):
        """Epoch `epoch` ended at global step `step`; its validation
        figures, if any, go with the next reports."""
        if self._reporter is None:
            return
        if (val_loss is None) != (val_accuracy is None):
            raise ValueError("TrainerStatus.epoch_end: give val_loss and "
                             "val_accuracy together, or neither")
        self._reporter.epoch_end(
            int(epoch), int(step),
            None if val_loss is None else float(val_loss),
            None if val_accuracy is None else float(val_accuracy))

    def finish(self, steps, *, test_loss=None, test_accuracy=None):
        """The job's end: progress 100 and the test figures, posted before
        this returns (within the post's timeout). Nothing is sent after."""
        if self._reporter is None:
            return
        self._reporter.finish(int(steps),
                              -1.0 if test_loss is None else float(test_loss),
                              -1.0 if test_accuracy is None
                              else float(test_accuracy))
        self._reporter = None
