#!/usr/bin/python3
"""One PyTorch training loop, synchronized two ways, for side-by-side
figures (tests/bench/python_bench.sh runs it):

  lockstep: lockstep.torch.SyncOptimizer through Lockstep's servers (run it
            under lockstep_launch -- ...; the servers run Adam);
  summation: lockstep.torch.DistributedOptimizer over torch.optim.Adam:
            the servers only average, every worker runs Adam;
  ddp:      torch.nn.parallel.DistributedDataParallel over gloo, Adam on
            every worker (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set).

The model (mlp: 784-128-10 on Fashion-MNIST; resnet20: CIFAR-sized random
images), the batch per worker, the data order (Lockstep's sampler for
both), one thread per worker and Adam's settings are the same. Rank 0
prints "examples_per_sec=X" over the timed steps after the warm-up ones.

usage: torch_sync_bench.py MODE MODEL BATCH STEPS [WARMUP]
"""

import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "worker", "python",
                                "examples"))


def data(model):
    from lockstep import _native
    if model == "mlp":
        x, y = _native.load_idx("/usr/share/datasets/fashion-mnist", True)
    else:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((4096, 3, 32, 32)).astype(np.float32)
        y = rng.integers(0, 10, 4096).astype(np.int32)
    return torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))


def make(model):
    torch.manual_seed(0)
    if model == "mlp":
        return torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(),
                                   torch.nn.Linear(128, 10))
    from torch_resnet20 import resnet20
    return resnet20()


def main():
    mode, model_name = sys.argv[1], sys.argv[2]
    batch, steps = int(sys.argv[3]), int(sys.argv[4])
    warmup = int(sys.argv[5]) if len(sys.argv) > 5 else 5
    torch.set_num_threads(1)
    x, y = data(model_name)
    model = make(model_name)
    from lockstep import _native
    if mode == "lockstep":
        import lockstep.torch as ls
        opt = ls.SyncOptimizer(model, optimizer="adam", lr=1e-3)
        rank, workers = opt.rank, opt.num_workers
        step_fn = opt.step
        zero = opt.zero_grad
        net = model
    elif mode == "summation":
        import lockstep.torch as ls
        adam = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
        opt = ls.DistributedOptimizer(adam, model)
        rank, workers = opt.rank, opt.num_workers
        step_fn = opt.step
        zero = opt.zero_grad
        net = model
    else:
        import torch.distributed as dist
        rank, workers = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        dist.init_process_group("gloo", rank=rank, world_size=workers)
        net = torch.nn.parallel.DistributedDataParallel(model)
        adam = torch.optim.Adam(net.parameters(), lr=1e-3, eps=1e-7)
        step_fn = adam.step
        zero = adam.zero_grad
    sampler = _native.ShardedSampler(len(y), workers, rank, batch, 42)
    start = None
    for step in range(warmup + steps):
        if step == warmup:
            start = time.perf_counter()
        index = torch.from_numpy(sampler.batch_indices(step))
        xb, yb = x.index_select(0, index), y.index_select(0, index)
        zero()
        F.cross_entropy(net(xb), yb).backward()
        step_fn()
    seconds = time.perf_counter() - start
    if rank == 0:
        print(f"examples_per_sec={steps * batch * workers / seconds:.1f}",
              flush=True)
        if mode in ("lockstep", "summation"):
            # Where the client's time went, per step (all steps, warm-up too).
            t = opt.job.timings()
            per = {k: 1e3 * v / max(1, t["steps"]) for k, v in t.items()
                   if k.endswith("_seconds")}
            print("client_ms_per_step " + " ".join(
                f"{k[:-8]}={v:.3f}" for k, v in per.items()) +
                f" step={1e3 * seconds / steps:.3f}", flush=True)
    if mode == "ddp":
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
