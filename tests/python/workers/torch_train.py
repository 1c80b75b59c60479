"""A PyTorch worker for the tests: trains a small model through Lockstep.

Prints "step N loss L" per step and "done version V" at the end; rank 0
writes the final weights with --out (safetensors).
"""

import argparse
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import lockstep.torch as ls
from lockstep import _native

p = argparse.ArgumentParser()
p.add_argument("--model", default="mlp", choices=["mlp", "bn", "other"])
p.add_argument("--optimizer", default="sgd")
p.add_argument("--lr", type=float, default=0.1)
p.add_argument("--batch", type=int, default=16)
p.add_argument("--steps", type=int, default=20)
p.add_argument("--data", default="synthetic", choices=["synthetic", "fashion"])
p.add_argument("--examples", type=int, default=640)
p.add_argument("--init_from_lockstep", default="",
               help="lockstep_worker's safetensors dump of a 784-128-10 MLP")
p.add_argument("--out", default="",
               help="safetensors file; {rank} in it writes one per rank")
p.add_argument("--nan_at", type=int, default=-1)
p.add_argument("--step_sleep_ms", type=int, default=0)
p.add_argument("--sync", default="sync")
p.add_argument("--local_steps", type=int, default=0,
               help="localsgd, diloco: steps between exchanges")
p.add_argument("--inner_state_dir", default=None,
               help="localsgd, diloco: where the inner state is saved")
p.add_argument("--distributed", action="store_true",
               help="DistributedOptimizer over torch.optim's --optimizer")
p.add_argument("--freeze", action="store_true",
               help="freeze the first layer (requires_grad=False)")
args = p.parse_args()

rank = int(os.environ["LOCKSTEP_RANK"])
# Each rank draws different initial weights: only rank 0's may count.
torch.manual_seed(1000 + rank)

if args.data == "fashion":
    x, y = _native.load_idx("/usr/share/datasets/fashion-mnist", True)
else:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((args.examples, 20)).astype(np.float32)
    y = rng.integers(0, 4, args.examples).astype(np.int32)
x, y = torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))
features, classes = x.shape[1], int(y.max()) + 1

if args.model == "mlp":
    model = nn.Sequential(nn.Linear(features, 128 if args.data == "fashion"
                                    else 16), nn.ReLU(),
                          nn.Linear(128 if args.data == "fashion" else 16,
                                    classes))
elif args.model == "other":  # Differs from "mlp" in one tensor's shape.
    model = nn.Sequential(nn.Linear(features, 17), nn.ReLU(),
                          nn.Linear(17, classes))
else:
    model = nn.Sequential(nn.Linear(features, 16), nn.BatchNorm1d(16),
                          nn.ReLU(), nn.Linear(16, classes))

if args.init_from_lockstep:
    # lockstep_worker's Mlp keeps kernels as [in, out]; nn.Linear as [out, in].
    found = {n: (s, v) for n, s, v in
             _native.read_safetensors(args.init_from_lockstep)}
    with torch.no_grad():
        for i, layer in enumerate([model[0], model[2]]):
            shape, kernel = found[f"dense_{i}/kernel"]
            layer.weight.copy_(torch.from_numpy(kernel).view(*shape).t())
            layer.bias.copy_(torch.from_numpy(found[f"dense_{i}/bias"][1]))

if args.freeze:
    model[0].requires_grad_(False)

rounds = {"local_steps": args.local_steps} if args.local_steps else {}
if args.inner_state_dir:
    rounds["inner_state_dir"] = args.inner_state_dir
if args.distributed:  # Rounds of the user's own torch optimizer.
    inner = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}[args.optimizer]
    opt = ls.DistributedOptimizer(inner(model.parameters(), lr=args.lr), model,
                                  sync=args.sync, **rounds)
else:
    opt = ls.SyncOptimizer(model, optimizer=args.optimizer, lr=args.lr,
                           sync=args.sync, **rounds)
print(f"joined at version {opt.version}", flush=True)
loss = None
for xb, yb in ls.shard((x, y), batch_size=args.batch, epochs=100):
    # Rounds of local steps: the version counts rounds, next_step steps.
    step = opt.job.next_step if args.local_steps else opt.version
    if step >= args.steps:
        break
    opt.zero_grad()
    loss = F.cross_entropy(model(xb), yb)
    if step == args.nan_at:  # Gradients leave during backward: poison it.
        loss = loss * float("nan")
    loss.backward()
    if args.step_sleep_ms:
        time.sleep(args.step_sleep_ms / 1000)
    opt.step()
    print(f"step {step} loss {loss.item():.6f}", flush=True)
print(f"done version {opt.version} rejoins {opt.job.rejoins}", flush=True)
if args.out and (rank == 0 or "{rank}" in args.out):
    ls.save_safetensors(model, args.out.format(rank=rank))
