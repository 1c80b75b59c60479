"""A PyTorch worker for the DistributedOptimizer tests, and its oracle.

With --plain it is the oracle: one process, no Lockstep, the whole global
batch (W x B) each step. Otherwise it is rank LOCKSTEP_RANK of W workers,
each taking its B examples of the same global batch, with AdamW and a
OneCycleLR schedule wrapped by lockstep.torch.DistributedOptimizer, the
mean gradient clipped after synchronize(), and a frozen first layer that
only rank 0's seed may decide. Writes the final weights and Adam's moments
as .npz (--out, "{rank}" replaced); --case runs a refusal instead.
"""

import argparse
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--plain", action="store_true")
p.add_argument("--workers", type=int, default=2)
p.add_argument("--batch", type=int, default=16, help="per worker")
p.add_argument("--steps", type=int, default=20)
p.add_argument("--passes", type=int, default=1,
               help="backward passes a step (the batch split among them)")
p.add_argument("--clip", type=float, default=0.2)
p.add_argument("--out", default="")
p.add_argument("--case", default="", choices=["", "no_backward"])
args = p.parse_args()

rank = 0 if args.plain else int(os.environ["LOCKSTEP_RANK"])
torch.manual_seed(1000 + rank)  # Only rank 0's initial weights may count.
rng = np.random.default_rng(7)
x = torch.from_numpy(rng.standard_normal((640, 20)).astype(np.float32))
y = torch.from_numpy(rng.integers(0, 4, 640).astype(np.int64))

model = nn.Sequential(nn.Linear(20, 16), nn.ReLU(), nn.Linear(16, 16),
                      nn.ReLU(), nn.Linear(16, 4))
model[0].requires_grad_(False)
opt = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad],
                        lr=1e-3, weight_decay=0.05)
if not args.plain:
    import lockstep.torch as ls
    opt = ls.DistributedOptimizer(opt, model,
                                  backward_passes_per_step=args.passes)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05,
                                            total_steps=args.steps)

if args.case == "no_backward":
    from lockstep.errors import LockstepError
    try:
        opt.step()
        print("no_backward: stepped", flush=True)
    except LockstepError as e:
        print(f"no_backward: {e.code_name}: {e.message}", flush=True)
    raise SystemExit(0)

global_batch = args.workers * args.batch
clipped = 0
for step in range(args.steps):
    begin = (step * global_batch) % len(x)
    if args.plain:
        xb, yb = x[begin:begin + global_batch], y[begin:begin + global_batch]
    else:
        mine = begin + rank * args.batch
        xb, yb = x[mine:mine + args.batch], y[mine:mine + args.batch]
    opt.zero_grad()
    part = len(xb) // args.passes
    for i in range(args.passes):
        loss = F.cross_entropy(model(xb[i * part:(i + 1) * part]),
                               yb[i * part:(i + 1) * part])
        (loss / args.passes).backward()
    if not args.plain:
        opt.synchronize()  # .grad holds the workers' mean: clip that.
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
    clipped += int(norm > args.clip)
    opt.step()
    sched.step()
print(f"done {args.steps} steps, clipped {clipped}, lr "
      f"{opt.param_groups[0]['lr']:.8f}", flush=True)
if args.out:
    out = {f"model.{k}": v.numpy() for k, v in model.state_dict().items()}
    for i, (key, value) in enumerate(opt.state_dict()["state"].items()):
        out[f"exp_avg.{i}"] = value["exp_avg"].numpy()
        out[f"exp_avg_sq.{i}"] = value["exp_avg_sq"].numpy()
    np.savez(args.out.format(rank=rank), **out)
