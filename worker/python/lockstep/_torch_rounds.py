"""DistributedOptimizer(..., sync="localsgd" | "diloco"): the user's own
optimizer as the inner one of LocalSGD or DiLoCo.

Each step runs the wrapped optimizer on this worker's own gradient (clip,
schedule and accumulate as in one process: nothing leaves during
backward). Lockstep sees a step as the change it made to the weights: the
job's inner optimizer is SGD at learning rate 1 on that change, which puts
the weights where the user's step put them (an exact subtraction wherever
a weight moves by less than half its size, and within a rounding of it
otherwise; the parameters then take the job's copy, so both agree to the
bit). Every local_steps steps the round ends: the workers' mean change of
weights goes to the servers, which apply the outer optimizer (LocalSGD's
plain average, DiLoCo's Nesterov momentum), keep it in their checkpoints,
and send every worker the same new weights. The wrapped optimizer's own
state (Adam's moments) stays each worker's, as with a named inner
optimizer.
"""

import torch

from lockstep._torch_model import join_as_rank0, optimizer_tensors
from lockstep.errors import error
from lockstep.job import Job


# The job's inner optimizer is SGD at rate 1 on each step's change: no
# setting of its own may be given (the wrapped optimizer has them).
INNER_SETTINGS = ("optimizer", "learning_rate", "momentum", "nesterov",
                  "beta_1", "beta_2", "epsilon", "weight_decay",
                  "lr_schedule")


class RoundsExchange:
    """The job and the step of a DistributedOptimizer in rounds."""

    rounds = True
    synchronized = False
    passes = ()

    def __init__(self, optimizer, model, cluster, job_options):
        params, fixed, buffers = optimizer_tensors(optimizer, model)
        if "inner_state_dir" in job_options:
            raise error("INVALID_ARGUMENT", "inner_state_dir saves a named "
                        "optimizer's state; DistributedOptimizer's is the "
                        "torch optimizer it wraps (save its state_dict)")
        inner = [k for k in INNER_SETTINGS if k in job_options]
        if inner:
            raise error("INVALID_ARGUMENT", "DistributedOptimizer runs the "
                        "optimizer it wraps; it takes no "
                        f"{', '.join(sorted(inner))}")
        self.frozen = fixed
        state = fixed + buffers
        self.job = Job([(n, p.shape) for n, p in params],
                       [(n, t.shape) for n, t in state], optimizer="sgd",
                       learning_rate=1.0, cluster=cluster, **job_options)
        self.params = [p for _, p in params]
        self.state = [t for _, t in state]
        self.weights = torch.from_numpy(self.job.weights)
        self.gradient = torch.from_numpy(self.job.gradient)
        join_as_rank0(self.job, self.weights, self.params + self.state)

    def view(self, flat, t):
        return flat[t.offset:t.end].view(t.shape)

    def synchronize(self):
        raise error("FAILED_PRECONDITION",
                    f"sync={self.job.rounds!r} averages no gradients: each "
                    "worker steps on its own, and the rounds exchange "
                    "weights; clip before step() as in one process")

    def step(self, inner_step):
        """The wrapped optimizer's step `inner_step`, then the job's: a
        local step, or the round's exchange; the parameters then hold the
        job's weights."""
        job = self.job
        job.begin()
        try:
            inner_step()
        except BaseException:
            self.abandon()
            raise
        with torch.no_grad():
            for t, p in zip(job.tensors, self.params):
                # The change the step made, as the job's SGD at rate 1 takes
                # it: weights - change = the step's weights. (copy_ brings a
                # GPU or low-precision parameter over as float32.)
                slot = self.view(self.gradient, t)
                slot.copy_(p.detach())
                torch.sub(self.view(self.weights, t), slot, out=slot)
            for t, value in zip(job.state_tensors, self.state):
                self.view(self.gradient, t).copy_(value)
        job.ready(0, job.weights.size)
        job.finish()
        self.load()

    def load(self):
        """The job's weights into the parameters, and its averaged state
        into the buffers."""
        job = self.job
        with torch.no_grad():
            for t, p in zip(job.tensors, self.params):
                p.copy_(self.view(self.weights, t))
            # The mean running statistics; frozen parameters are everyone's.
            for t, b in zip(job.state_tensors[len(self.frozen):],
                            self.state[len(self.frozen):]):
                b.copy_(self.view(self.weights, t))

    def end_step(self):
        pass

    def abandon(self):
        # The job goes back to its weights before the step (or the round's
        # start): so do the parameters, or the next change would carry the
        # abandoned step.
        self.job.abandon()
        self.load()
