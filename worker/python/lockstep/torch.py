"""Synchronous data-parallel PyTorch through Lockstep's parameter servers.

    import lockstep.torch as ls
    opt = ls.SyncOptimizer(model, optimizer="adam", lr=1e-3)
    for x, y in ls.shard((features, labels), batch_size=64):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()   # pushes leave as it runs
        opt.step()                                # waits for version v + 1

The servers keep the master weights and run the optimizer; this process
computes gradients. The model's parameters and float buffers (batch-norm
running statistics) become views of the job's flat weights array, and their
.grad views of its gradient array, so replies land in the model and
gradients leave without a copy. Each parameter's gradient is pushed as soon
as autograd has accumulated it (a hook on its AccumulateGrad node, as
Horovod does), the last layers first. Rank 0's initial weights become
version 0; every worker starts from them.

Parameters and buffers may be float32, bfloat16 or float16; the servers
keep float32 masters. A bfloat16 or float16 tensor (and any on a GPU) is
staged instead of viewed: its gradient is widened to float32 into the
push buffer when it is ready, and each new version is rounded to nearest
into it after step(). Parameters on a GPU are staged through host memory
the same way.
"""

import numpy as np
import torch

from lockstep import data as _data
from lockstep import _native
from lockstep._torch_distributed import DistributedOptimizer
from lockstep._torch_model import (check_dtypes, float_buffers, frozen,
                                   grad_hook, set_buffer, trainable)
from lockstep.cluster import Cluster, Place
from lockstep.errors import LockstepError, error, install_exit_codes
from lockstep.job import Job, current_job

__all__ = ["DistributedOptimizer", "SyncOptimizer", "shard", "save_safetensors", "load_safetensors",
           "local_rank", "rank", "size", "Cluster", "LockstepError",
           "current_job"]


def _bad(message):
    return error("INVALID_ARGUMENT", message)


def _place():
    """The joined job's cluster, else the environment's place (Place)."""
    job = current_job()
    return job.cluster if job is not None else Place.from_env()


def rank():
    """This worker's rank: the joined job's, else the environment's
    (LOCKSTEP_RANK, torchrun's RANK, Kubeflow Trainer's PET_*, TF_CONFIG)."""
    return _place().rank


def size():
    """The job's worker count, read as rank() is (LOCKSTEP_WORKERS first)."""
    return _place().num_workers


def local_rank():
    """This worker's index among its host's workers (LOCAL_RANK, which
    lockstep_launch and torchrun set; 0 when unset): the GPU to use, as in
    torch.cuda.set_device(lockstep.torch.local_rank())."""
    return _place().local_rank


class SyncOptimizer:
    """Joins the job and replaces the optimizer: zero_grad(), step().

    Args:
      model: a torch.nn.Module whose parameters and float buffers are
        float32, bfloat16 or float16 (the servers keep float32 masters).
      optimizer: sgd, momentum, adam or adamw, run on the servers with
        Keras's defaults for what is not given (Adam's epsilon is 1e-7,
        not PyTorch's 1e-8).
      lr, momentum, nesterov, betas, eps, weight_decay: its settings.
      sync, backup_workers, staleness: the synchronization (sync default).
        sync="localsgd" or "diloco" (with local_steps, outer_lr,
        outer_momentum) runs `optimizer` on this worker for local_steps
        steps, then the servers' outer optimizer on the workers' mean
        change (lockstep.job.Job); step() then waits only every
        local_steps steps.
      total_steps: the job's length, checked against every worker's (0:
        unchecked); `ls.shard(..., epochs=E).total_steps` gives it.
      cluster: a lockstep.Cluster (default: from the environment that
        lockstep_launch or the Kubernetes manifests set).
      Other keyword arguments go to lockstep.job.Job.
    """

    def __init__(self, model, optimizer="adam", lr=None, momentum=None,
                 nesterov=None, betas=None, eps=None, weight_decay=None,
                 sync="sync", backup_workers=0, staleness=None, total_steps=0,
                 cluster=None, **job_options):
        install_exit_codes()  # A refusal below exits 2, as after a join.
        if not isinstance(model, torch.nn.Module):
            raise _bad("SyncOptimizer(model, ...) takes the torch.nn.Module, "
                       f"got {type(model).__name__}; to keep a torch.optim "
                       "optimizer of your own, wrap it: "
                       "DistributedOptimizer(optimizer, model)")
        self.model = model
        params = trainable(model)
        if not params:
            raise _bad("the model has no trainable parameters")
        check_dtypes(params, "parameter", "trains")
        buffers = float_buffers(model)
        check_dtypes(buffers, "buffer", "averages")
        # Frozen parameters travel as state after the buffers (a model
        # without them keeps its signature): rank 0's at the join, each
        # worker's own afterwards, never the mean loaded back.
        fixed = frozen(model)
        check_dtypes(fixed, "frozen parameter", "keeps")
        beta_1, beta_2 = betas if betas is not None else (None, None)
        self.job = Job([(n, p.shape) for n, p in params],
                       [(n, b.shape) for n, b in buffers + fixed],
                       optimizer=optimizer, learning_rate=lr,
                       momentum=momentum, nesterov=nesterov, beta_1=beta_1,
                       beta_2=beta_2, epsilon=eps, weight_decay=weight_decay,
                       sync=sync, backup_workers=backup_workers,
                       staleness=staleness, total_steps=total_steps,
                       cluster=cluster, **job_options)
        job = self.job
        self._weights = torch.from_numpy(job.weights)
        self._gradient = torch.from_numpy(job.gradient)
        self._params = [p for _, p in params]
        self._staged = []  # (tensor, host view) for parameters off the CPU.
        self._staged_state = []  # The same for buffers off the CPU.
        self._viewed = set()  # Parameters that are views of the job's arrays.
        self._frozen = []  # (frozen parameter, its Tensor in the job).
        self._readied = 0  # Gradients handed over in this step.
        # Version counters after the last hand-over: the viewed gradients'
        # (one, shared by the views of the array) and each staged one's.
        self._version = None
        self._staged_versions = {}
        with torch.no_grad():
            for index, (t, (name, p)) in enumerate(zip(job.tensors, params)):
                host = self._weights[t.offset:t.end].view(t.shape)
                host.copy_(p.detach())
                if _viewable(p):
                    p.data = host
                    p.grad = self._gradient[t.offset:t.end].view(t.shape)
                    self._viewed.add(index)
                else:
                    self._staged.append((p, host))
            for t, (name, f) in zip(job.state_tensors[len(buffers):], fixed):
                self._weights[t.offset:t.end].copy_(f.detach().reshape(-1))
                self._frozen.append((f, t))
            for t, (name, b) in zip(job.state_tensors, buffers):
                host = self._weights[t.offset:t.end].view(t.shape)
                host.copy_(b.detach())
                if _viewable(b):
                    set_buffer(model, name, host)
                else:
                    self._staged.append((b, host))
                    self._staged_state.append((b, host))
        self._hooks = []
        for index, p in enumerate(self._params):
            self._hooks.append(self._hook(index, p))
        job.join()
        self._load_staged()
        with torch.no_grad():  # Rank 0's frozen parameters, everywhere.
            for f, t in self._frozen:
                f.copy_(self._weights[t.offset:t.end].view(t.shape))

    def _hook(self, index, p):
        return grad_hook(p, lambda: self._ready(index))

    def _ready(self, index):
        job = self.job
        t = job.tensors[index]
        p = self._params[index]
        slot = self._gradient[t.offset:t.end].view(t.shape)
        if p.grad is None:
            slot.zero_()
        elif p.grad.data_ptr() != slot.data_ptr():
            # A fresh .grad (zero_grad(set_to_none=True)) or a GPU one.
            slot.copy_(p.grad.detach())
            if index in self._viewed:
                p.grad = slot
        if index in self._viewed:
            self._version = self._gradient._version
        else:
            self._staged_versions[index] = p.grad._version \
                if p.grad is not None else None
        self._readied += 1
        job.ready(t.offset, t.end)

    def _check_handed_over(self):
        """Refuses a step whose gradients were pushed and then changed.

        Each gradient left as backward made it; an in-place change after
        that (clip_grad_norm_, a GradScaler's unscale_) would be silently
        ignored, so it is refused (torch's version counters tell).
        """
        changed = self._version is not None and \
            self._gradient._version != self._version
        for index, version in self._staged_versions.items():
            grad = self._params[index].grad
            changed |= grad is not None and grad._version != version
        if self._readied == 0:
            message = ("step() without a backward pass: call loss.backward() "
                       "first (a step on zero gradients would still move the "
                       "weights)")
        elif changed:
            message = ("a gradient changed after backward() had pushed it "
                       "(clip_grad_norm_ or another in-place change): "
                       "SyncOptimizer would ignore the change. To clip the "
                       "averaged gradient, use DistributedOptimizer: "
                       "backward(), synchronize(), clip, step()")
        else:
            return
        self.job.abandon()
        self._end_step()
        raise error("FAILED_PRECONDITION", message)

    def _end_step(self):
        self._readied = 0
        self._version = None
        self._staged_versions.clear()

    def _load_staged(self):
        with torch.no_grad():
            for tensor, host in self._staged:
                tensor.copy_(host)

    @property
    def rank(self):
        return self.job.rank

    @property
    def num_workers(self):
        return self.job.num_workers

    @property
    def version(self):
        return self.job.version

    def zero_grad(self, set_to_none=False):
        """Zeroes the gradients in place (they stay views of the job's)."""
        del set_to_none  # The views are what the pushes read.
        self.job.abandon()  # A step begun but not taken is not pushed.
        self._end_step()
        self._gradient.zero_()
        for index, p in enumerate(self._params):
            if p.grad is not None and index not in self._viewed:
                p.grad.zero_()

    def step(self, closure=None):
        """Pushes what backward has not, waits for the next version, loads it.

        Returns the closure's loss when one is given, like torch.optim.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._check_handed_over()
        self._end_step()
        job = self.job
        if job.state_tensors:
            # This worker's updated running statistics go out with the
            # gradient; the workers' mean comes back.
            with torch.no_grad():
                for tensor, host in self._staged_state:
                    host.copy_(tensor)
                begin = job.num_parameters
                job.gradient[begin:] = job.weights[begin:]
                for f, t in self._frozen:  # This worker's own.
                    self._gradient[t.offset:t.end].copy_(f.reshape(-1))
            job.ready(begin, job.weights.size)
        job.finish()
        self._load_staged()
        return loss

    def leave(self):
        """Leaves the job (also done at exit)."""
        self.job.leave()

    def save_safetensors(self, path):
        """Writes the model as ls.save_safetensors does, but the trainable
        parameters as the servers' float32 masters of this version (for a
        bfloat16 or float16 parameter, more than the model holds)."""
        masters = {}
        for t, (name, _) in zip(self.job.tensors, trainable(self.model)):
            masters[name] = self._weights[t.offset:t.end]
        _write_safetensors(self.model, path, masters)


def _viewable(t):
    """Whether t can become a view of the job's flat float32 arrays."""
    return t.device.type == "cpu" and t.is_contiguous() and \
        t.dtype == torch.float32


def _take_torch(data, indices):
    if isinstance(data, (tuple, list)) and len(data) == 2:
        index = torch.from_numpy(indices)

        def take(a):  # Each array gathered once, as a tensor.
            if torch.is_tensor(a):
                return a.index_select(0, index)
            return torch.from_numpy(np.asarray(a)[indices])

        return take(data[0]), take(data[1])
    from torch.utils.data import default_collate
    return default_collate([data[int(i)] for i in indices])


def shard(data, batch_size=None, epochs=None, **kwargs):
    """This worker's batches as tensors; see lockstep.data.Shard."""
    kwargs.setdefault("take", _take_torch)
    return _data.Shard(data, batch_size=batch_size, epochs=epochs, **kwargs)


def save_safetensors(model, path):
    """Writes every parameter (frozen ones too) and buffer, keyed by name, so
    that a strict load_state_dict of the file succeeds. Values are float32
    (an integer buffer such as num_batches_tracked too; exact below 2**24),
    a bfloat16 or float16 tensor's widened exactly: the model's own values.
    SyncOptimizer.save_safetensors writes the servers' float32 masters.
    """
    _write_safetensors(model, path, {})


def _write_safetensors(model, path, replaced):
    """save_safetensors, with `replaced` {name: float32 tensor} written for
    those names instead of the model's values."""
    tensors = list(model.named_parameters()) + [
        (n, b) for n, b in model.named_buffers() if b is not None]
    flat = torch.cat([replaced.get(n, t).detach().to("cpu", torch.float32)
                      .reshape(-1) for n, t in tensors])
    _native.write_safetensors(str(path), [(n, list(t.shape))
                                          for n, t in tensors], flat.numpy())


def load_safetensors(model, path):
    """Loads a safetensors file into the model's tensors of the same names.

    Raises LockstepError naming a trainable parameter or float buffer the
    file lacks, or a tensor it holds with another shape; frozen parameters
    and integer buffers load when the file has them (files from before
    they were written do not), and the file's other tensors are ignored.
    A bfloat16 or float16 tensor receives the file's float32 values
    rounded to nearest.
    """
    found = {name: (shape, values)
             for name, shape, values in _native.read_safetensors(str(path))}
    required = dict(trainable(model) + float_buffers(model))
    tensors = dict(required)
    for name, t in list(model.named_parameters()) + list(
            model.named_buffers()):
        if name in found and t is not None:
            tensors.setdefault(name, t)
    for name, t in tensors.items():
        if name not in found:
            raise error("FAILED_PRECONDITION",
                        f"{path} has no tensor {name!r}")
        shape, values = found[name]
        if tuple(shape) != tuple(t.shape):
            raise error("FAILED_PRECONDITION",
                        f"tensor {name!r} is {tuple(shape)} in {path}, "
                        f"{tuple(t.shape)} in the model")
    with torch.no_grad():
        for name, t in tensors.items():
            t.copy_(torch.from_numpy(found[name][1]).view(t.shape))
