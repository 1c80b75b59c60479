"""lockstep.torch.DistributedOptimizer: the user's own optimizer on the
workers' mean gradient, through the servers' summation mode.

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    opt = ls.DistributedOptimizer(opt, model)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, ...)
    for x, y in ls.shard((features, labels), batch_size=64):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()  # pushes leave as it runs
        opt.step()      # waits for the mean gradient, then AdamW's step
        sched.step()

The servers only average (the job's optimizer is "average"); every worker
receives the same mean gradient into its parameters' .grad and runs the
wrapped optimizer on it, so every worker keeps the same weights, and
param_groups, state_dict, schedulers, clipping after synchronize() and
custom optimizers behave as in one process with the whole batch.

Parameters may be float32, bfloat16 or float16, mixed in one model: each
gradient is widened to float32 when it is pushed, the servers average in
float32, and the mean is rounded to nearest into .grad in the parameter's
dtype, so the wrapped optimizer steps in the model's dtype, as plain
PyTorch would.

A parameter no worker has a gradient for in a step (its .grad None on
every worker) keeps .grad None, so the wrapped optimizer skips it as in
one process; one only some workers used gets the mean with the others
counting as zero, as DistributedDataParallel gives it. Each worker tells
which of its parameters had a gradient in one float per parameter tensor,
averaged with the state ("lockstep/used").
"""

import contextlib

import torch

from lockstep._torch_model import (grad_hook, join_as_rank0,
                                   optimizer_tensors)
from lockstep._torch_rounds import RoundsExchange
from lockstep.errors import error, install_exit_codes
from lockstep.job import AVERAGE, ROUNDS_MODES, Job


# The state tensor of one flag per trainable parameter tensor: 1.0 where
# this worker had a gradient in the step, 0.0 where .grad was None. Its mean
# is 0.0 exactly when no worker had one. torch joins module names with
# "."; a model with a tensor of this name is refused.
USED = "lockstep/used"


def _bad(message):
    return error("INVALID_ARGUMENT", message)


def DistributedOptimizer(optimizer, model, backward_passes_per_step=1,
                         cluster=None, **job_options):
    """Wraps `optimizer` so that it steps on the workers' mean gradient.

    Returns an instance of a subclass of the optimizer's own class sharing
    its param_groups and state, as Horovod's DistributedOptimizer does: an
    lr_scheduler, a checkpoint's state_dict or a trainer that holds the
    optimizer see a torch.optim.Optimizer. Joining the job happens here:
    rank 0's parameters, frozen parameters and float buffers become every
    worker's.

    Args:
      optimizer: any torch.optim.Optimizer over the model's parameters.
      model: the torch.nn.Module those parameters belong to (float32,
        bfloat16 or float16 tensors).
      backward_passes_per_step: backward passes to accumulate locally before
        one exchange (their gradients add up, as in plain PyTorch).
      cluster: a lockstep.Cluster (default: from the environment).
      Other keyword arguments go to lockstep.job.Job (chunk_bytes,
      timeouts, total_steps). With sync="localsgd" or "diloco" (and
      local_steps, outer_lr, outer_momentum) the wrapped optimizer takes
      the local steps of each round instead (lockstep/_torch_rounds.py).

    step() synchronizes (unless synchronize() already did this step), then
    runs the wrapped optimizer's step. To clip the mean gradient, call
    synchronize(), clip, then step(). A step with no backward pass is
    refused, not taken with zero gradients.
    """
    install_exit_codes()  # A refusal below exits 2, as after a join.
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise _bad("DistributedOptimizer wraps a torch.optim.Optimizer, got "
                   f"{type(optimizer).__name__}")
    if isinstance(optimizer, _Distributed):
        raise _bad("the optimizer is a DistributedOptimizer already")
    if not isinstance(model, torch.nn.Module):
        raise _bad("DistributedOptimizer(optimizer, model) needs the "
                   f"torch.nn.Module, got {type(model).__name__}")
    if int(backward_passes_per_step) < 1:
        raise _bad("backward_passes_per_step must be at least 1, got "
                   f"{backward_passes_per_step}")
    cls = type(type(optimizer).__name__, (_Distributed, type(optimizer)), {})
    wrapped = cls.__new__(cls)
    wrapped.__dict__.update(optimizer.__dict__)
    if job_options.get("sync") in ROUNDS_MODES:
        wrapped._lockstep = RoundsExchange(wrapped, model, cluster,
                                           job_options)
    else:
        wrapped._lockstep = _Exchange(wrapped, model,
                                      int(backward_passes_per_step), cluster,
                                      job_options)
    return wrapped


class _Exchange:
    """The job, the hooks and the step's bookkeeping of one wrapper."""

    rounds = False

    def __init__(self, optimizer, model, passes, cluster, job_options):
        # Frozen parameters travel as state: each worker sends its own
        # (rank 0's since the join) and never loads the mean back.
        params, self.frozen, self.buffers = optimizer_tensors(optimizer,
                                                              model)
        state = self.frozen + self.buffers
        if USED in (n for n, _ in params + state):
            raise _bad(f"the model has a tensor named {USED!r}, the name "
                       "DistributedOptimizer gives its own state")
        # The flags go last, after the model's state: every worker builds
        # the same signature from the same model.
        self.job = Job([(n, p.shape) for n, p in params],
                       [(n, t.shape) for n, t in state] +
                       [(USED, (len(params),))], optimizer=AVERAGE,
                       cluster=cluster, **job_options)
        self.params = [p for _, p in params]
        self.state = [t for _, t in state]
        self.passes_per_step = passes
        self.passes = [0] * len(self.params)
        self.pushed = [False] * len(self.params)
        self.used = [0.0] * len(self.params)  # This step's flags.
        self.synchronized = False
        self.skip = False
        job = self.job
        self.weights = torch.from_numpy(job.weights)
        self.gradient = torch.from_numpy(job.gradient)
        self.hooks = [grad_hook(p, lambda i=i: self.on_gradient(i))
                      for i, p in enumerate(self.params)]
        join_as_rank0(job, self.weights, self.params + self.state)

    def view(self, flat, t):
        return flat[t.offset:t.end].view(t.shape)

    def on_gradient(self, i):
        """Autograd's: p.grad holds one more backward pass."""
        self.passes[i] += 1
        if self.synchronized:
            raise error("FAILED_PRECONDITION",
                        "a backward pass after synchronize() and before "
                        "step(): its gradient would not be averaged")
        if self.passes[i] > self.passes_per_step:
            raise _bad(f"more than backward_passes_per_step="
                       f"{self.passes_per_step} backward passes before "
                       "step(); pass a larger backward_passes_per_step to "
                       "accumulate")
        if self.passes[i] == self.passes_per_step:
            self.push(i)

    def push(self, i):
        job, p = self.job, self.params[i]
        t = job.tensors[i]
        slot = self.view(self.gradient, t)
        if p.grad is None:
            slot.zero_()  # Unused by this worker's forward pass.
            self.used[i] = 0.0
        elif p.grad.is_sparse:
            raise _bad(f"parameter {t.name} has a sparse gradient; Lockstep "
                       "averages dense ones")
        else:
            slot.copy_(p.grad.detach())
            self.used[i] = 1.0
        self.pushed[i] = True
        job.ready(t.offset, t.end)

    def synchronize(self):
        if self.synchronized:
            return
        if not any(self.passes):
            raise error("FAILED_PRECONDITION",
                        "step() or synchronize() without a backward pass: "
                        "call loss.backward() first (a step on zero "
                        "gradients would still move the weights)")
        job = self.job
        with torch.no_grad():
            for i, done in enumerate(self.pushed):
                if not done:
                    self.push(i)
            for t, value in zip(job.state_tensors, self.state):
                self.view(self.gradient, t).copy_(value)
            used = job.state_tensors[-1]
            self.view(self.gradient, used).copy_(
                torch.tensor(self.used, dtype=torch.float32))
            job.ready(job.num_parameters, job.weights.size)
            job.finish()  # Refused after a rejoin: see Job.finish.
            anyone = self.view(self.weights, used).tolist()
            for t, p, u in zip(job.tensors, self.params, anyone):
                mean = self.view(self.weights, t)
                if u == 0.0:  # No worker's: skipped, as in one process.
                    p.grad = None
                elif p.grad is None:
                    p.grad = mean.to(p.device, p.dtype, copy=True)
                else:
                    p.grad.copy_(mean)
            # The workers' mean running statistics; frozen parameters are
            # everyone's already.
            for t, b in zip(job.state_tensors[len(self.frozen):-1],
                            self.state[len(self.frozen):]):
                b.copy_(self.view(self.weights, t))
        self.synchronized = True

    def end_step(self):
        self.passes = [0] * len(self.params)
        self.pushed = [False] * len(self.params)
        self.used = [0.0] * len(self.params)
        self.synchronized = False

    def abandon(self):
        self.job.abandon()
        self.end_step()


class _Distributed:
    """Put before the wrapped optimizer's class (DistributedOptimizer)."""

    def synchronize(self):
        """Exchanges this step's gradients: .grad then holds their mean.

        Pushes whatever backward has not pushed yet and waits for the mean.
        step() afterwards does not exchange again (clip in between).
        """
        self._lockstep.synchronize()

    @contextlib.contextmanager
    def skip_synchronize(self):
        """step() inside it only steps (after a synchronize() of yours)."""
        self._lockstep.skip = True
        try:
            yield
        finally:
            self._lockstep.skip = False

    def step(self, closure=None):
        """synchronize() unless done, then the wrapped optimizer's step.

        A closure runs first (its backward passes are this step's); the
        wrapped step then runs without it. Returns the closure's loss.
        """
        exchange = self._lockstep
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if exchange.rounds:  # The wrapped step is a local one.
            exchange.step(super().step)
            return loss
        if not exchange.skip:
            exchange.synchronize()
        try:
            super().step()
        finally:
            exchange.end_step()
        return loss

    def zero_grad(self, *args, **kwargs):
        """The wrapped optimizer's; a step begun and not taken is dropped."""
        exchange = self._lockstep
        if exchange.job.in_step or exchange.synchronized or any(
                exchange.passes):
            exchange.abandon()
        return super().zero_grad(*args, **kwargs)

    @property
    def job(self):
        return self._lockstep.job

    @property
    def rank(self):
        return self._lockstep.job.rank

    @property
    def num_workers(self):
        return self._lockstep.job.num_workers

    @property
    def version(self):
        """The steps the job has taken (the servers' version)."""
        return self._lockstep.job.version

    def leave(self):
        """Leaves the job (also done at exit)."""
        self._lockstep.job.leave()
