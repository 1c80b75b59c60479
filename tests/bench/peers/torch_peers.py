#!/usr/bin/python3
"""The PyTorch programs `lockstep_bench peers` runs beside Lockstep.

Each is what a user would write instead of Lockstep, with PyTorch's own
distributed pieces on loopback (CPU, gloo, TensorPipe RPC), one process per
worker and one thread per process as Lockstep's workers use:

  ddp-mlp         DistributedDataParallel training the tutorial MLP
                  (784-128-10, Adam 1e-3) on Fashion-MNIST; examples/s over
                  epochs 2..E and the test accuracy.
  rpc-ps-mlp      the same model through a synchronous RPC parameter server:
                  the server waits for every worker's gradients, averages
                  them, steps Adam and answers each with the new weights.
  rpc-ps-comm     that server's communication alone: W workers push an
                  N-element fp32 gradient and get the SGD-updated weights.
  allreduce-comm  gloo all-reduce of N fp32 among W processes.

The last line of output is `key=value` pairs (step_seconds, examples_per_sec,
test_accuracy, ...). Every program first checks one exchange against the
value it must give and exits 1 if it differs, so a figure is never timed on a
wrong result. Needs Debian's python3-torch and, for the MLPs,
dataset-fashion-mnist. Ports are picked free at start.
"""
import argparse
import gzip
import os
import socket
import statistics
import struct
import sys
import threading
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp

DATA_DIR = "/usr/share/datasets/fashion-mnist"
LEARNING_RATE = 1e-3
COMM_SGD_RATE = 0.01


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_idx(path):
    """An IDX file (images as rows of bytes, or labels) as a numpy array."""
    with gzip.open(path) as f:
        raw = f.read()
    magic, count = struct.unpack(">II", raw[:8])
    if magic == 2051:
        rows, cols = struct.unpack(">II", raw[8:16])
        return np.frombuffer(raw, np.uint8, offset=16).reshape(count, rows * cols)
    if magic == 2049:
        return np.frombuffer(raw, np.uint8, offset=8)
    raise ValueError(f"{path}: not an IDX image or label file (magic {magic})")


def load_split(data_dir, split):
    images = read_idx(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz"))
    return (torch.from_numpy(images.astype(np.float32) / 255),
            torch.from_numpy(labels.astype(np.int64)))


def tutorial_mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(),
                               torch.nn.Linear(128, 10))


def accuracy(model, data_dir):
    images, labels = load_split(data_dir, "t10k")
    with torch.no_grad():
        return (model(images).argmax(1) == labels).float().mean().item()


class Epochs:
    """Worker `rank`'s batches: epoch e shuffles with seed e, and step s takes
    rows [(s*W + rank)*B, (s*W + rank + 1)*B) of that order."""

    def __init__(self, examples, workers, rank, batch, max_steps):
        self.examples, self.workers, self.rank, self.batch = (
            examples, workers, rank, batch)
        self.steps = examples // (batch * workers)
        if max_steps > 0:
            self.steps = min(self.steps, max_steps)

    def batches(self, epoch):
        order = torch.randperm(self.examples,
                               generator=torch.Generator().manual_seed(epoch))
        for step in range(self.steps):
            first = (step * self.workers + self.rank) * self.batch
            yield order[first:first + self.batch]


def spawn(target, processes, *args):
    """Runs target(rank, *args, results) in `processes` spawned processes;
    returns what rank 0 put on the queue. A process that fails fails all."""
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    procs = [ctx.Process(target=target, args=(rank, *args, results))
             for rank in range(processes)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    bad = [p.exitcode for p in procs if p.exitcode != 0]
    if bad:
        sys.exit(f"torch_peers: a process exited with {bad[0]}")
    if results.empty():
        sys.exit("torch_peers: rank 0 reported nothing")
    return results.get()


def check(condition, what):
    if not condition:
        print(f"torch_peers: check failed: {what}", file=sys.stderr, flush=True)
        sys.exit(1)


# --- DistributedDataParallel -------------------------------------------------

def ddp_rank(rank, args, port, results):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=args.workers)
    images, labels = load_split(args.data_dir, "train")
    model = tutorial_mlp()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.Adam(ddp.parameters(), lr=LEARNING_RATE)
    loss_fn = torch.nn.CrossEntropyLoss()
    epochs = Epochs(len(images), args.workers, rank, args.batch, args.max_steps)
    start = None
    for epoch in range(args.epochs):
        if epoch == 1:
            dist.barrier()
            start = time.perf_counter()
        for rows in epochs.batches(epoch):
            optimizer.zero_grad()
            loss_fn(ddp(images[rows]), labels[rows]).backward()
            optimizer.step()
    dist.barrier()
    elapsed = time.perf_counter() - start
    # Every replica must hold the same weights after synchronous training.
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(args.workers)]
    dist.all_gather(gathered, flat)
    check(all(torch.equal(g, flat) for g in gathered),
          "DDP replicas ended with different weights")
    if rank == 0:
        timed = epochs.steps * (args.epochs - 1)
        results.put(dict(examples_per_sec=timed * args.batch * args.workers / elapsed,
                         steps_per_sec=timed / elapsed,
                         test_accuracy=accuracy(model, args.data_dir)))
    dist.destroy_process_group()


# --- RPC parameter server ----------------------------------------------------

class SyncServer:
    """Holds the weights; answers a push once every worker's has arrived."""

    def __init__(self, workers, weights, step):
        self.workers = workers
        self.weights = weights    # list of tensors
        self.step = step          # step(mean_grads) updates self.weights
        self.sums = [torch.zeros_like(w) for w in weights]
        self.arrived = 0
        self.lock = threading.Lock()
        self.answer = torch.futures.Future()

    @staticmethod
    @rpc.functions.async_execution
    def push_pull(server_rref, grads):
        self = server_rref.local_value()
        with self.lock:
            for total, grad in zip(self.sums, grads):
                total.add_(grad)
            self.arrived += 1
            answer = self.answer
            if self.arrived == self.workers:
                for total in self.sums:
                    total.div_(self.workers)
                self.step(self.sums)
                for total in self.sums:
                    total.zero_()
                self.arrived = 0
                self.answer = torch.futures.Future()
                answer.set_result([w.detach().clone() for w in self.weights])
        return answer


def adam_server(workers):
    model = tutorial_mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    params = list(model.parameters())

    def step(mean_grads):
        for p, g in zip(params, mean_grads):
            p.grad = g.clone()
        optimizer.step()

    return SyncServer(workers, [p.data for p in params], step)


def sgd_server(workers, n):
    weights = [torch.zeros(n)]

    def step(mean_grads):
        weights[0].add_(mean_grads[0], alpha=-COMM_SGD_RATE)

    return SyncServer(workers, weights, step)


def rpc_mlp_worker(rank, args, server_rref):
    images, labels = load_split(args.data_dir, "train")
    model = tutorial_mlp()
    loss_fn = torch.nn.CrossEntropyLoss()
    epochs = Epochs(len(images), args.workers, rank, args.batch, args.max_steps)
    start = None
    for epoch in range(args.epochs):
        if epoch == 1:
            start = time.perf_counter()
        for rows in epochs.batches(epoch):
            model.zero_grad()
            loss_fn(model(images[rows]), labels[rows]).backward()
            fresh = rpc.rpc_sync(server_rref.owner(), SyncServer.push_pull,
                                 args=(server_rref,
                                       [p.grad for p in model.parameters()]))
            with torch.no_grad():
                for p, w in zip(model.parameters(), fresh):
                    p.copy_(w)
    return time.perf_counter() - start, epochs.steps * (args.epochs - 1)


def rpc_comm_worker(rank, args, server_rref):
    grad = torch.full((args.params,), float(rank + 1))
    # Check one exchange: the mean of 1..W, one SGD step from zero.
    fresh = rpc.rpc_sync("server", SyncServer.push_pull, args=(server_rref, [grad]))
    expected = -COMM_SGD_RATE * (args.workers + 1) / 2
    check(torch.allclose(fresh[0], torch.full_like(grad, expected)),
          f"first RPC-PS step gave {fresh[0][0].item()}, not {expected}")
    times = []
    for _ in range(args.warmup + args.iters):
        t0 = time.perf_counter()
        rpc.rpc_sync("server", SyncServer.push_pull, args=(server_rref, [grad]))
        times.append(time.perf_counter() - t0)
    return statistics.median(times[args.warmup:])


def rpc_process(rank, args, port, results):
    torch.set_num_threads(1)
    options = rpc.TensorPipeRpcBackendOptions(
        num_worker_threads=16, rpc_timeout=300,
        init_method=f"tcp://127.0.0.1:{port}")
    name = "server" if rank == 0 else f"worker{rank - 1}"
    rpc.init_rpc(name, rank=rank, world_size=args.workers + 1,
                 rpc_backend_options=options)
    if rank == 0:
        server = (adam_server(args.workers) if args.program == "rpc-ps-mlp"
                  else sgd_server(args.workers, args.params))
        server_rref = rpc.RRef(server)
        body = rpc_mlp_worker if args.program == "rpc-ps-mlp" else rpc_comm_worker
        calls = [rpc.rpc_async(f"worker{r}", body, args=(r, args, server_rref))
                 for r in range(args.workers)]
        answers = [c.wait() for c in calls]
        if args.program == "rpc-ps-mlp":
            elapsed = max(a[0] for a in answers)
            timed = answers[0][1]
            model = tutorial_mlp()
            with torch.no_grad():
                for p, w in zip(model.parameters(), server.weights):
                    p.copy_(w)
            results.put(dict(
                examples_per_sec=timed * args.batch * args.workers / elapsed,
                steps_per_sec=timed / elapsed,
                test_accuracy=accuracy(model, args.data_dir)))
        else:
            results.put(dict(step_seconds=max(answers)))
    rpc.shutdown()


# --- gloo all-reduce ---------------------------------------------------------

def allreduce_rank(rank, args, port, results):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=args.workers)
    tensor = torch.full((args.params,), float(rank + 1))
    dist.all_reduce(tensor)
    expected = args.workers * (args.workers + 1) / 2
    check(torch.equal(tensor, torch.full_like(tensor, expected)),
          f"first all-reduce gave {tensor[0].item()}, not {expected}")
    times = []
    for _ in range(args.warmup + args.iters):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(tensor)
        times.append(time.perf_counter() - t0)
    if rank == 0:
        median = statistics.median(times[args.warmup:])
        results.put(dict(step_seconds=median,
                         algbw_gbytes_per_sec=args.params * 4 / median / 1e9))
    dist.destroy_process_group()


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description="PyTorch peer programs for lockstep_bench peers.")
    parser.add_argument("program", choices=["ddp-mlp", "rpc-ps-mlp",
                                            "rpc-ps-comm", "allreduce-comm"])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64,
                        help="MLPs: examples per worker per step")
    parser.add_argument("--epochs", type=int, default=3,
                        help="MLPs: epochs; epoch 1 is not timed")
    parser.add_argument("--max_steps", type=int, default=0,
                        help="MLPs: steps per epoch at most (0: a whole epoch)")
    parser.add_argument("--data_dir", default=DATA_DIR)
    parser.add_argument("--params", type=int, default=101770,
                        help="comm: fp32 elements exchanged per step")
    parser.add_argument("--iters", type=int, default=100,
                        help="comm: timed exchanges")
    parser.add_argument("--warmup", type=int, default=2,
                        help="comm: untimed exchanges before them")
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    if args.program.endswith("-mlp"):
        if args.epochs < 2:
            parser.error("--epochs must be at least 2: epoch 1 is not timed")
        if args.batch < 1:
            parser.error("--batch must be at least 1")
        path = os.path.join(args.data_dir, "train-images-idx3-ubyte.gz")
        if not os.path.exists(path):
            parser.error(f"no {path}: install dataset-fashion-mnist or "
                         "pass --data_dir")
    elif args.params < 1 or args.iters < 1 or args.warmup < 0:
        parser.error("--params and --iters must be positive, --warmup >= 0")
    return args


def main(argv):
    args = parse_args(argv)
    port = free_port()
    if args.program == "ddp-mlp":
        figures = spawn(ddp_rank, args.workers, args, port)
    elif args.program == "allreduce-comm":
        figures = spawn(allreduce_rank, args.workers, args, port)
    else:
        figures = spawn(rpc_process, args.workers + 1, args, port)
    fields = " ".join(f"{k}={v:.6g}" for k, v in figures.items())
    print(f"{args.program} workers={args.workers} {fields}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
