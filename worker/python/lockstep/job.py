"""One worker's part in a Lockstep job, independent of any framework.

A Job holds the model's flat float32 vectors as numpy arrays -- weights
(parameters, then state such as batch-norm statistics) and gradient, laid
out as the model signature lists the tensors -- and a connection to the
parameter servers through lockstep._native, the C++ worker's own client.
The framework adapters (lockstep.torch, lockstep.keras) make the model's
tensors views of these arrays where they can, so received weights land in
the model without a copy and gradients leave without one.

One step: begin(), ready(begin, end) as ranges of the gradient become
final (pushes leave at once), finish() waits for the next version. A
retryable failure (a restarted server, an eviction) registers again and
carries on from the servers' version, as lockstep_worker does.

Externally synchronized: one training thread.
"""

import atexit
import sys
import threading

import numpy as np

from lockstep import _native
from lockstep.cluster import Cluster
from lockstep import errors as _errors
# Re-exported: the adapters import it from here.
from lockstep._signals import interruptible as _interruptible  # noqa: F401
from lockstep.errors import LockstepError, error, install_exit_codes
# The modes and optimizers are the C++ definitions' (re-exported here);
# Tensor and check_modes are what Job uses of the module.
from lockstep._job_settings import (  # noqa: F401
    AVERAGE, OPTIMIZERS, ROUNDS_MODES, SYNC_MODES, Tensor, check_modes)

# 0: auto, as lockstep_worker --chunk_bytes=auto (common/model/chunk_plan.h).
DEFAULT_CHUNK_BYTES = 0

_current = None  # The Job this process joined last (for lockstep.shard).
_joined = threading.Condition()


def current_job(wait_s=0):
    """The Job this process joined last, or None.

    wait_s > 0 waits that long for one to join (a data pipeline's thread
    that starts before the framework has built its optimizer).
    """
    with _joined:
        _joined.wait_for(lambda: _current is not None and _current.joined,
                         timeout=wait_s)
        return _current


def average(values, name="", timeout_s=600.0):
    """The mean of `values` over the workers of the job this process joined
    (Job.average): a script's metrics, averaged as Horovod's allreduce of
    a metric would be."""
    job = current_job()
    if job is None:
        raise error("FAILED_PRECONDITION",
                    "lockstep.average: this process has joined no job yet")
    return job.average(values, name, timeout_s)


def _bad(message):
    return error("INVALID_ARGUMENT", message)


class Job:
    """A worker's membership of a job: layout, flat buffers, the client.

    Args:
      tensors: [(name, shape)] of the trainable parameters, in the order the
        flat vectors hold them.
      state_tensors: [(name, shape)] of the model state averaged over the
        workers instead of optimized (batch-norm moving mean and variance).
      optimizer: sgd, momentum, adam or adamw, run on the servers; its
        settings default to Keras's (lockstep_worker's) for that optimizer.
        Or AVERAGE, the summation mode: the servers only average, and what
        `weights` receives each step is the workers' mean gradient (the
        model's values only at join), for an optimizer of the worker's own
        (lockstep.torch.DistributedOptimizer). Sync mode only, without
        backup workers, and a worker can join it only at its start.
      sync: sync (the default), async or ssp; backup_workers (sync) and
        staleness (ssp; default 1) as lockstep_worker's flags. Or localsgd
        or diloco: `optimizer` then runs on this worker for local_steps
        steps (default 10) between exchanges, `weights` holding this
        worker's own weights within a round, and the servers apply the
        outer optimizer (outer_lr, outer_momentum: lockstep_worker's
        --outer_* flags) to the workers' mean change; next_step counts
        local steps, version rounds. inner_state_dir (lockstep_worker's
        --inner_state_dir): a folder where the optimizer's state is saved
        before each round's push, for a replacement of this rank to go on
        with.
      total_steps: the job's length in global steps, checked against every
        other worker's at registration (0: not checked).
      cluster: a Cluster; default Cluster.from_env().
      lr_schedule: how the learning rate follows the step, a dict of
        lockstep_worker's --lr_* flags without "lr_", e.g.
        {"schedule": "piecewise", "boundaries": [100], "values": [0.1, 0.01]}
        or {"schedule": "cosine", "decay_steps": 1000, "warmup_steps": 100};
        default: the constant rate.
    """

    def __init__(self, tensors, state_tensors=(), *, optimizer="adam",
                 learning_rate=None, momentum=None, nesterov=None, beta_1=None,
                 beta_2=None, epsilon=None, weight_decay=None, sync="sync",
                 backup_workers=0, staleness=None, local_steps=None,
                 outer_lr=None, outer_momentum=None, inner_state_dir=None,
                 chunk_bytes=DEFAULT_CHUNK_BYTES, total_steps=0, cluster=None,
                 lr_schedule=None,
                 push_window=-1, push_thread=False, connect_timeout_s=60.0,
                 step_timeout_s=300.0, rejoin_timeout_s=300.0):
        # A refusal from here on (bad settings, a malformed address) exits
        # with its code (2), as one after the join does.
        install_exit_codes()
        rounds, local_steps = check_modes(optimizer, sync, backup_workers,
                                          local_steps, outer_lr,
                                          outer_momentum, inner_state_dir)
        self.cluster = cluster if cluster is not None else Cluster.from_env()
        self.tensors, offset = [], 0
        for name, shape in tensors:
            self.tensors.append(Tensor(name, shape, offset))
            offset = self.tensors[-1].end
        self.num_parameters = offset
        self.state_tensors = []
        for name, shape in state_tensors:
            self.state_tensors.append(Tensor(name, shape, offset))
            offset = self.state_tensors[-1].end
        if offset == 0:
            raise _bad("the model has no parameters to train")
        self.weights = np.zeros(offset, dtype=np.float32)
        self.gradient = np.zeros(offset, dtype=np.float32)
        settings = _native.optimizer_defaults(optimizer)
        for key, value in (("learning_rate", learning_rate),
                           ("momentum", momentum), ("nesterov", nesterov),
                           ("beta_1", beta_1), ("beta_2", beta_2),
                           ("epsilon", epsilon),
                           ("weight_decay", weight_decay)):
            if value is not None:
                settings[key] = value
        self.optimizer = optimizer
        self.settings = settings
        self.lr_schedule = dict(lr_schedule or {})
        self.learning_rate(0)  # Refuses a bad schedule now, not at join.
        # The signature's mode: rounds are synchronous steps.
        self.sync = "sync" if rounds else sync
        self.rounds = rounds
        self.local_steps = local_steps if rounds else 0
        self.backup_workers = backup_workers
        # As lockstep_worker's --staleness: 1 unless given (SSP only).
        self.staleness = (staleness if staleness is not None else 1) \
            if sync == "ssp" else 0
        self.chunk_bytes = chunk_bytes
        self.total_steps = total_steps
        self.connect_timeout_s = connect_timeout_s
        c = self.cluster
        self._client = _native.Client(
            c.servers, c.rank, wire_dtype=c.wire_dtype,
            push_window=push_window, push_thread=push_thread,
            connect_timeout_s=connect_timeout_s,
            step_timeout_s=step_timeout_s, rejoin_timeout_s=rejoin_timeout_s,
            seed=c.seed, tls_ca=c.tls_ca, tls_cert=c.tls_cert,
            tls_key=c.tls_key, tls_server_name=c.tls_server_name,
            token_file=c.token_file, standby_servers=c.standby_servers,
            rounds=rounds, local_steps=self.local_steps, outer_lr=outer_lr,
            outer_momentum=outer_momentum,
            inner_state_dir=inner_state_dir or "")
        self.version = -1   # The weights' version once joined.
        self.steps = 0      # Steps this worker took part in.
        self._next_step = 0  # The session's: the step to compute next.
        self.joined = False
        self._left = False
        self._step = None   # The step under way, or None.
        self._readied = set()  # Ranges handed over in that step (begin).

    @property
    def rank(self):
        return self.cluster.rank

    @property
    def num_workers(self):
        return self.cluster.num_workers

    @property
    def summation(self):
        """True in the summation mode: `weights` receives mean gradients."""
        return self.optimizer == AVERAGE

    @property
    def synchronous(self):
        return self.sync == "sync"

    @property
    def rejoins(self):
        return self._client.rejoins

    @property
    def next_step(self):
        """The global step this worker computes next, as the step session says.

        Synchronous: the weights' version, so that after a rejoin the data
        order follows the servers. Async and SSP: this worker's own count.
        LocalSGD and DiLoCo: the local step, version * local_steps at the
        start of each round.
        """
        return self._next_step

    def learning_rate(self, step=None):
        """The learning rate the servers apply at `step` (default: next_step).

        From `learning_rate` and `lr_schedule` as lockstep_worker's --lr and
        --lr_* flags give them (docs/flags.md).
        """
        step = self.next_step if step is None else step
        return _native.learning_rate_at(self.settings["learning_rate"],
                                        self.lr_schedule, max(step, 0))

    def signature(self):
        return [(t.name, list(t.shape)) for t in self.tensors], \
               [(t.name, list(t.shape)) for t in self.state_tensors]

    def join(self, timeout_s=None):
        """Registers and fills `weights` with the version to start from.

        Rank 0's `weights` as they are now become version 0 when the job has
        none; every other rank receives them. A model that differs from
        rank 0's is refused (FAILED_PRECONDITION naming the tensor).
        """
        global _current
        install_exit_codes()
        tensors, state = self.signature()
        s = self.settings
        with _interruptible():
            joined = self._client.join(
                tensors, state, self.optimizer, s["learning_rate"],
                s["momentum"], bool(s["nesterov"]), s["beta_1"], s["beta_2"],
                s["epsilon"], s["weight_decay"], self.chunk_bytes,
                self.num_workers, len(self.cluster.servers), self.sync,
                self.backup_workers, self.staleness, self.total_steps,
                self.weights, self.gradient,
                timeout_s if timeout_s is not None else self.connect_timeout_s,
                lr_schedule=self.lr_schedule)
        self.version = joined.version
        self._next_step = joined.next_step
        self.joined = True
        self._left = False
        if self.summation and self.version != 0:
            self.leave("failed", "joined a summation-mode job after its start")
            raise error("FAILED_PRECONDITION",
                        f"joined a summation-mode job at version "
                        f"{self.version}: its weights live on the workers, "
                        "so a worker can join it only at its start")
        with _joined:
            if _current is None:
                atexit.register(_leave_at_exit)
                _errors.before_exit.append(_leave_at_exit)
            _current = self
            _joined.notify_all()
        return self.version

    def begin(self):
        """Starts the step next_step; gradient ranges may then be readied."""
        if not self.joined:
            raise _bad("join the job before the first step")
        if self._step is not None:
            return
        self._step = self._client.begin_step()
        self._readied.clear()

    @property
    def in_step(self):
        return self._step is not None

    def ready(self, begin, end):
        """gradient[begin:end] is final for this step: pushes what it completes.

        Each range once a step: a second backward pass before the step ends
        would hand it over again (and overwrite a gradient being sent).
        """
        if self._step is None:
            self.begin()
        if begin in self._readied:
            raise _bad(f"the gradient at [{begin}, {end}) was handed over "
                       f"twice in step {self._step}: Lockstep pushes during "
                       "backward, so a step takes one backward pass (no "
                       "gradient accumulation across passes)")
        self._readied.add(begin)
        self._client.gradient_ready(begin, end)

    def finish(self):
        """Pushes the rest, waits for the next version; returns it.

        After a retryable failure the worker registers again (for at most
        rejoin_timeout_s since the last step that succeeded) and `weights`
        holds the version to go on from; the step's gradient is dropped.
        """
        if self._step is None:
            self.begin()
        self._step = None
        rejoins = self.rejoins
        with _interruptible():
            outcome = self._client.finish_step()
        if outcome.stopped:
            raise error("CANCELLED", "the step failed after a stop signal")
        if self.summation and self.rejoins != rejoins:
            raise error("FAILED_PRECONDITION",
                        "the servers were lost and this worker joined again: "
                        "a summation-mode job keeps its weights on the "
                        "workers and cannot go on; restart it from a "
                        "checkpoint of your own")
        self.version = outcome.version
        self._next_step = outcome.next_step
        if outcome.applied:
            self.steps += 1
        return self.version

    def abandon(self):
        """Ends a step whose gradient is not to be pushed (a failed backward).

        Replies to what was already pushed may have written parts of the
        next version into `weights`: the session reads them again at the
        version the job is at, so every tensor is of one version.
        """
        if self._step is not None:
            self._step = None
            with _interruptible():
                self._client.abandon_step()

    def leave(self, reason="finished", detail=""):
        """Says this worker is done; the servers finish when all have left.

        reason: "finished" (every step it had run: in a synchronous job a
        rank whose steps others still need then ends their steps with an
        error naming it, as the ranks ran uneven data), "failed" (the job
        ends as failed unless a replacement finishes; `detail` says why in
        the servers' log) or "stopped" (a signal: a replacement may come).
        At exit the package leaves by itself: "failed" after an uncaught
        exception, "stopped" after Ctrl-C, else "finished".
        """
        if not self.joined or self._left:
            return
        self.abandon()
        self._left = True
        with _interruptible():
            self._client.leave(reason, detail)

    def average(self, values, name="", timeout_s=600.0):
        """The element-wise mean of `values` over the job's workers.

        For metrics (a validation loss, an accuracy), not gradients. Every
        worker must call it as often, with the same name and number of
        values: the call waits (up to timeout_s) until all have, and ranks
        that disagree get FAILED_PRECONDITION saying how. Between steps
        only. Returns a list of floats. In a job of fixed membership (not
        elastic); parameter servers check the name, all-reduce does not.
        """
        if not self.joined:
            raise error("FAILED_PRECONDITION", "average: join the job first")
        if self._step is not None:
            raise _bad("average: a step is under way; call it between steps")
        values = [float(v) for v in values]
        with _interruptible():
            return self._client.average(str(name), values, float(timeout_s))

    def timings(self):
        """Client-side seconds spent encoding, sending, waiting, decoding."""
        return self._client.timings()

    def save_safetensors(self, path, names=None):
        """Writes the weights (parameters, then state) as a safetensors file.

        `names` maps a tensor name of the signature to the one to write.
        """
        names = names or {}
        tensors = [(names.get(t.name, t.name), list(t.shape))
                   for t in self.tensors + self.state_tensors]
        _native.write_safetensors(str(path), tensors, self.weights)


def _leave_at_exit():
    job = _current
    if job is None or not job.joined or job._left:
        return
    reason, detail = _errors.fatal or ("finished", "")
    try:
        job.leave(reason, detail)
    except LockstepError as e:  # The servers may be gone already.
        print(f"lockstep worker {job.rank}: could not leave the job: {e}",
              file=sys.stderr)
