"""A PyTorch worker for the precision tests (bfloat16 and float16 models).

A two-layer network (optionally with batch norm) of --dtype trained with
SGD for --steps steps on a fixed synthetic data set, each step's global
batch W x B split among the W workers:
  --mode=sync   lockstep.torch.SyncOptimizer (the servers' SGD);
  --mode=dist   torch.optim.SGD with momentum wrapped by DistributedOptimizer;
  --mode=plain  the oracle for dist: one process, no Lockstep, batch W x B.
The initial weights are rank 0's seed, rounded through --init_round first
(so a float32 run can start where a bfloat16 one does). Each layer computes
in its parameters' dtype unless --compute says otherwise (PyTorch 1.13 has
no float16 matmul on the CPU), or under torch.autocast with --autocast.
Writes the model's tensors widened to
float32 as .npz (--out, "{rank}" replaced) and, in sync mode on rank 0,
the servers' masters through SyncOptimizer.save_safetensors (--masters).
"""

import argparse
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--mode", default="sync", choices=["sync", "dist", "plain"])
p.add_argument("--dtype", default="float32")
p.add_argument("--compute", default="", help="every layer's compute dtype")
p.add_argument("--init_round", default="")
p.add_argument("--mixed", action="store_true",
               help="only the first layer in --dtype, the rest float32")
p.add_argument("--bn", action="store_true")
p.add_argument("--freeze", action="store_true", help="freeze fc1")
p.add_argument("--autocast", default="",
               help="run forward under torch.autocast to this dtype")
p.add_argument("--workers", type=int, default=2)
p.add_argument("--batch", type=int, default=16, help="per worker")
p.add_argument("--steps", type=int, default=10)
p.add_argument("--lr", type=float, default=0.1)
p.add_argument("--out", default="")
p.add_argument("--masters", default="")
args = p.parse_args()

rank = 0 if args.mode == "plain" else int(os.environ["LOCKSTEP_RANK"])
torch.manual_seed(1000 + rank)  # Only rank 0's initial weights may count.
rng = np.random.default_rng(7)
x = torch.from_numpy(rng.standard_normal((640, 20)).astype(np.float32))
y = torch.from_numpy(rng.integers(0, 4, 640).astype(np.int64))
dtype = getattr(torch, args.dtype)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 16)
        self.bn = nn.BatchNorm1d(16) if args.bn else None
        self.fc2 = nn.Linear(16, 4)

    def forward(self, h):
        for layer in (self.fc1, self.bn, self.fc2):
            if layer is None:
                continue
            c = getattr(torch, args.compute) if args.compute else \
                layer.weight.dtype
            h = h.to(c)
            if layer is self.bn:
                h = F.relu(layer(h))
            else:
                h = F.linear(h, layer.weight.to(c), layer.bias.to(c))
        return h


model = Net()
if args.init_round:
    model.to(getattr(torch, args.init_round)).float()
if args.mixed:
    model.fc1.to(dtype)
else:
    model.to(dtype)

if args.freeze:
    model.fc1.requires_grad_(False)

if args.mode == "sync":
    import lockstep.torch as ls
    opt = ls.SyncOptimizer(model, optimizer="sgd", lr=args.lr)
else:
    trained = [q for q in model.parameters() if q.requires_grad]
    opt = torch.optim.SGD(trained, lr=args.lr, momentum=0.9)
    if args.mode == "dist":
        import lockstep.torch as ls
        opt = ls.DistributedOptimizer(opt, model)

initial = {k: v.float().numpy().copy() for k, v in model.state_dict().items()}
global_batch = args.workers * args.batch
for step in range(args.steps):
    begin = (step * global_batch) % len(x)
    if args.mode != "plain":
        begin += rank * args.batch
    size = global_batch if args.mode == "plain" else args.batch
    xb, yb = x[begin:begin + size], y[begin:begin + size]
    opt.zero_grad()
    with torch.autocast("cpu", dtype=getattr(torch, args.autocast or
                                             "bfloat16"),
                        enabled=bool(args.autocast)):
        loss = F.cross_entropy(model(xb), yb)
    loss.backward()
    if args.mode == "dist":
        opt.synchronize()
    for name, q in model.named_parameters():
        if q.requires_grad and q.grad.dtype != q.dtype:
            raise SystemExit(f"{name}: .grad is {q.grad.dtype}, the "
                             f"parameter {q.dtype}")
    opt.step()
dtypes = sorted({str(t.dtype) for t in model.state_dict().values()})
print(f"done {args.steps} steps, dtypes {' '.join(dtypes)}", flush=True)
if args.out:
    final = {k: v.float().numpy() for k, v in model.state_dict().items()}
    final.update({"initial." + k: v for k, v in initial.items()})
    np.savez(args.out.format(rank=rank), **final)
if args.masters and args.mode == "sync" and rank == 0:
    opt.save_safetensors(args.masters)
