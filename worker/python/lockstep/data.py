"""This worker's part of every global batch: lockstep_worker's data order.

Each epoch the N training examples are shuffled with a permutation that
depends only on (N, seed, epoch); global step s takes the W*B positions
after s*W*B, and worker r the B of them starting at r*B
(worker/data/sharded_sampler.h, which this calls). So W workers with batch B see
exactly the examples one worker with batch W*B sees, and every worker runs
the same floor(N / (W*B)) steps an epoch.

The step comes from the job: in synchronous training it is the weights'
version, so a worker that registered again after a fault (or a restarted
script) goes on with the batch the servers are at.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional, Tuple

import numpy as np

from lockstep import _native
from lockstep.errors import error


def _bad(message):
    return error("INVALID_ARGUMENT", message)


class Shard:
    """Iterates this worker's batches, one (features, labels) per step.

    Args:
      data: a pair (features, labels) of arrays indexed by example (numpy
        arrays, or anything the `take` function indexes), an object with
        __len__ and __getitem__ returning (features, label) per example (a
        PyTorch Dataset), or a PyTorch DataLoader (its dataset and
        batch_size are used; its own shuffling is not).
      batch_size: examples per worker per step (default: the DataLoader's).
      epochs: iterate until the end of this many epochs; None: to the end
        of the epoch the job is in (one `for` loop per epoch).
      job: the lockstep Job (default: the one this process joined).
      take: gathers a batch, take(data, indices) -> (features, labels);
        the framework adapters pass their own so batches are their tensors.
      ahead: yield the steps of the epoch in order without waiting for
        the job to take each (for pipelines that prefetch, like tf.data);
        the job's step is read once, when an iteration starts, and a job
        not yet joined is waited for (up to wait_s seconds).
    """

    def __init__(self, data: Any, batch_size: Optional[int] = None,
                 epochs: Optional[int] = None, job: Any = None,
                 seed: Optional[int] = None,
                 take: Optional[Callable[[Any, np.ndarray], Any]] = None,
                 ahead: bool = False, wait_s: float = 300.0) -> None:
        if hasattr(data, "dataset") and hasattr(data, "batch_size"):
            batch_size = batch_size or data.batch_size
            data = data.dataset
        if batch_size is None:
            raise _bad("shard: batch_size is needed (or a DataLoader)")
        if isinstance(data, (tuple, list)) and len(data) == 2:
            self._num_examples = len(data[1])
            if len(data[0]) != self._num_examples:
                raise _bad(f"shard: {len(data[0])} feature rows but "
                           f"{self._num_examples} labels")
        elif hasattr(data, "__len__") and hasattr(data, "__getitem__"):
            self._num_examples = len(data)
        else:
            raise _bad("shard: data must be (features, labels) or a "
                       "Dataset with __len__ and __getitem__")
        self.data = data
        self.batch_size = int(batch_size)
        self.epochs = epochs
        self._job = job
        self._seed = seed
        self._take = take or take_numpy
        self._ahead = ahead
        self._wait_s = wait_s if ahead else 0
        self._sampler = None

    def _bind(self):
        if self._job is None:
            from lockstep.job import current_job
            self._job = current_job(self._wait_s)
        if self._job is None or not self._job.joined:
            raise _bad("shard: create the SyncOptimizer (which joins the "
                       "job) before iterating over the data")
        if self._sampler is None:
            job = self._job
            seed = self._seed if self._seed is not None else job.cluster.seed
            self._sampler = _native.ShardedSampler(
                self._num_examples, job.num_workers, job.rank,
                self.batch_size, seed)
        return self._job

    @property
    def steps_per_epoch(self) -> int:
        """floor(N / (W * B)); known before the job is joined."""
        if self._job is None:
            from lockstep.job import current_job
            self._job = current_job()
        if self._job is not None:
            workers = self._job.num_workers
        else:
            from lockstep.cluster import Cluster
            workers = Cluster.from_env().num_workers
        return self._num_examples // (workers * self.batch_size)

    @property
    def total_steps(self) -> int:
        """Global steps in `epochs` epochs (0 when epochs is None)."""
        return self.steps_per_epoch * self.epochs if self.epochs else 0

    def epoch_of(self, step: int) -> int:
        return step // self.steps_per_epoch

    def __len__(self) -> int:
        """Steps left in what one iteration covers, from the job's step now."""
        job = self._bind()
        step = job.next_step
        return max(0, self._end(step) - step)

    def _end(self, step):
        per_epoch = self.steps_per_epoch
        if self.epochs:
            return per_epoch * self.epochs
        return (step // per_epoch + 1) * per_epoch

    def __iter__(self) -> Iterator[Any]:
        job = self._bind()
        end = self._end(job.next_step)
        if self._ahead:
            for step in range(job.next_step, end):
                yield self._take(self.data, self._sampler.batch_indices(step))
            return
        progress = None
        while True:
            step = job.next_step
            if step >= end:
                return
            # Steps taken and rejoins: one of them moves between batches.
            now = (job.steps, job.rejoins)
            if now == progress:
                raise _bad(f"shard: step {step} was not taken; call the "
                           "optimizer's step() once per batch")
            progress = now
            yield self._take(self.data, self._sampler.batch_indices(step))


def take_numpy(data: Any, indices: np.ndarray) -> Tuple[np.ndarray,
                                                        np.ndarray]:
    """The examples `indices` of `data` as numpy arrays (features, labels)."""
    if isinstance(data, (tuple, list)) and len(data) == 2:
        return np.asarray(data[0])[indices], np.asarray(data[1])[indices]
    pairs = [data[int(i)] for i in indices]
    return (np.stack([np.asarray(p[0]) for p in pairs]),
            np.asarray([p[1] for p in pairs]))


def shard(data: Any, batch_size: Optional[int] = None,
          epochs: Optional[int] = None, **kwargs: Any) -> Shard:
    """This worker's batches of `data`; see Shard."""
    return Shard(data, batch_size=batch_size, epochs=epochs, **kwargs)


def load_idx(directory: str, train: bool = True) -> Tuple[np.ndarray,
                                                          np.ndarray]:
    """An MNIST-format (IDX) split as lockstep_worker reads it: float32
    features in [0, 1], shape (N, 784), and int32 labels. Debian's
    dataset-fashion-mnist puts Fashion-MNIST in
    /usr/share/datasets/fashion-mnist."""
    return _native.load_idx(str(directory), bool(train))


def load_cifar10(directory: str, train: bool = True) -> Tuple[np.ndarray,
                                                              np.ndarray]:
    """CIFAR-10's binary files as lockstep_worker reads them: float32
    images (N, 32, 32, 3), normalized per channel, and int32 labels."""
    return _native.load_cifar10(str(directory), bool(train))
