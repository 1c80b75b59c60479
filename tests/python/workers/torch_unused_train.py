"""A PyTorch worker for DistributedOptimizer's unused parameters, and its
oracle.

The model has a trunk and a head that every step uses, and three branches
whose use varies: `never` is never called; `some` is called by every
worker on steps 0, 3, 6, ... and by none on the others; `routed` adds its
output only for the examples a route mask marks, so by step % 4 no worker
(0), rank 0 only (1), both (2) or rank 1 only (3) uses it. With
--passes=2 rank 0's routed examples of step 1 fall in its first pass only.
AdamW with weight decay then skips a parameter in a step exactly when its
.grad is None.

With --plain it is the oracle: one process, no Lockstep, the whole global
batch (W x B) each step. Otherwise rank LOCKSTEP_RANK of W workers with
DistributedOptimizer (--passes=1: synchronize() then step() inside
skip_synchronize(); --passes=2: step() alone). Writes (--out, "{rank}"
replaced) the initial and final weights, AdamW's state by parameter name,
and for steps 0-3 routed.weight's gradient before (local.S) and after
(mean.S) the exchange where it is not None.
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
p.add_argument("--batch", type=int, default=8, help="per worker")
p.add_argument("--steps", type=int, default=20)
p.add_argument("--passes", type=int, default=1)
p.add_argument("--out", default="")
args = p.parse_args()

rank = 0 if args.plain else int(os.environ["LOCKSTEP_RANK"])
B, W = args.batch, args.workers
rng = np.random.default_rng(11)
n = args.steps * W * B
x = torch.from_numpy(rng.standard_normal((n, 8)).astype(np.float32))
y = torch.from_numpy(rng.integers(0, 3, n).astype(np.int64))
route = np.zeros(n, dtype=bool)
for step in range(args.steps):
    first = step * W * B  # Rank r's examples: first + r*B ... + B.
    users = {0: (), 1: (0,), 2: (0, 1), 3: (1,)}[step % 4]
    for r in users:
        route[first + r * B:first + r * B + 3] = True  # The first pass's.
route = torch.from_numpy(route)


class Net(nn.Module):

    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(8, 16)
        self.head = nn.Linear(16, 3)
        self.never = nn.Linear(16, 3)
        self.some = nn.Linear(16, 3)
        self.routed = nn.Linear(16, 3)

    def forward(self, xb, mask, step):
        h = torch.relu(self.trunk(xb))
        out = self.head(h)
        if step % 3 == 0:
            out = out + self.some(h)
        if bool(mask.any()):
            extra = torch.zeros_like(out)
            extra[mask] = self.routed(h[mask])
            out = out + extra
        return out


torch.manual_seed(1000 + rank)  # Only rank 0's initial weights may count.
model = Net()
opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)
if not args.plain:
    import lockstep.torch as ls
    opt = ls.DistributedOptimizer(opt, model,
                                  backward_passes_per_step=args.passes)
out = {f"init.{k}": v.clone().numpy() for k, v in model.state_dict().items()}

for step in range(args.steps):
    begin = step * W * B
    if not args.plain:
        begin += rank * B
    size = W * B if args.plain else B
    xb, yb, mb = (t[begin:begin + size] for t in (x, y, route))
    opt.zero_grad(set_to_none=True)  # torch 1.13's default is zeros.
    part = size // args.passes
    for i in range(args.passes):
        s = slice(i * part, (i + 1) * part)
        loss = F.cross_entropy(model(xb[s], mb[s], step), yb[s])
        (loss / args.passes).backward()
    g = model.routed.weight.grad
    if step < 4 and g is not None:
        out[f"local.{step}"] = g.clone().numpy()
    if args.plain:
        opt.step()
    elif args.passes == 1:
        opt.synchronize()
        with opt.skip_synchronize():
            opt.step()
    else:
        opt.step()
    # step() leaves .grad alone: what the exchange left there.
    g = model.routed.weight.grad
    if step < 4 and g is not None:
        out[f"mean.{step}"] = g.clone().numpy()
print(f"done {args.steps} steps", flush=True)
names = {id(q): k for k, q in model.named_parameters()}
for group in opt.param_groups:
    for q in group["params"]:
        for key, value in opt.state.get(q, {}).items():
            out[f"{key}.{names[id(q)]}"] = np.asarray(value)
out.update({f"model.{k}": v.numpy() for k, v in model.state_dict().items()})
if args.out:
    np.savez(args.out.format(rank=rank), **out)
