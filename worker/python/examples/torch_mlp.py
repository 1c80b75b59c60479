"""The tutorial's MLP (784-128-10, Adam, batch 64 per worker, 5 epochs) in
PyTorch on Fashion-MNIST, trained through Lockstep's parameter servers.

    lockstep_launch --ps=1 --workers=2 -- python3 torch_mlp.py

The servers run Adam on the master weights; each worker computes gradients
on its shard of every global batch. In a Kubeflow TrainJob, rank 0's
progress shows in the TrainJob's status (lockstep.TrainerStatus).
"""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import lockstep.torch as ls
import lockstep

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--batch_size", type=int, default=64)
parser.add_argument("--lr", type=float, default=0.001)
parser.add_argument("--save", default="", help="safetensors file for rank 0")
args = parser.parse_args()

x, y = (torch.from_numpy(a) for a in lockstep.load_idx(args.data_dir, True))
x_test, y_test = (torch.from_numpy(a) for a in lockstep.load_idx(args.data_dir, False))
y, y_test = y.long(), y_test.long()

model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
opt = ls.SyncOptimizer(model, optimizer="adam", lr=args.lr)
data = ls.shard((x, y), batch_size=args.batch_size)
status = lockstep.TrainerStatus(data.steps_per_epoch * args.epochs, args.epochs,
                                examples_per_step=args.batch_size * opt.num_workers)
for epoch in range(data.epoch_of(opt.version), args.epochs):
    start, seen, loss_sum, correct = time.perf_counter(), 0, 0.0, 0
    for xb, yb in data:  # The rest of this epoch, from the servers' version.
        opt.zero_grad()
        logits = model(xb)
        loss = F.cross_entropy(logits, yb)
        loss.backward()  # Each layer's gradient leaves as backward makes it.
        opt.step()       # Waits for the next version, already in the model.
        seen += len(yb)
        loss_sum += loss.item() * len(yb)
        correct += (logits.argmax(1) == yb).sum().item()
        status.step(opt.version, epoch + 1, loss=loss_sum / seen,
                    accuracy=correct / seen)
    status.epoch_end(epoch + 1, opt.version)
    if opt.rank == 0 and seen:
        rate = seen * opt.num_workers / (time.perf_counter() - start)
        print(f"Epoch {epoch + 1}/{args.epochs} - loss {loss_sum / seen:.4f} "
              f"- accuracy {correct / seen:.4f} - {rate:.0f} examples/s")
if opt.rank == 0:
    with torch.no_grad():
        logits = model(x_test)
    test_accuracy = (logits.argmax(1) == y_test).float().mean().item()
    test_loss = F.cross_entropy(logits, y_test).item()
    print(f"Test accuracy {test_accuracy:.4f} - test loss {test_loss:.4f}")
    status.finish(opt.version, test_loss=test_loss, test_accuracy=test_accuracy)
    if args.save:
        ls.save_safetensors(model, args.save)
