"""ResNet-20 (He et al. v1, as Keras's cifar10_resnet example builds it) in
PyTorch on CIFAR-10's binary files, trained through Lockstep. Batch-norm
running statistics travel as state: every worker ends with their mean.

    lockstep_launch --ps=1 --workers=2 -- \\
        python3 torch_resnet20.py --data_dir=DIR/cifar-10-batches-bin

DIR holds data_batch_1.bin ... data_batch_5.bin and test_batch.bin (the
"binary version" from the CIFAR-10 authors' page); --synthetic trains on
random images instead, for a smoke test without the files.
"""

import argparse

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F


class Basic(nn.Module):
    """ResNet v1 basic block: conv-BN-ReLU-conv-BN + shortcut, ReLU."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1)
        self.b1 = nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1)
        self.b2 = nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01)
        self.short = (nn.Conv2d(cin, cout, 1, stride)
                      if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        return torch.relu(self.b2(self.c2(y)) + self.short(x))


def resnet20(classes=10):
    layers = [nn.Conv2d(3, 16, 3, 1, 1), nn.BatchNorm2d(16, eps=1e-3),
              nn.ReLU()]
    cin = 16
    for stage, width in enumerate((16, 32, 64)):
        for block in range(3):
            stride = 2 if stage > 0 and block == 0 else 1
            layers.append(Basic(cin, width, stride))
            cin = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, classes)]
    return nn.Sequential(*layers)


def main():
    import lockstep.torch as ls
    import lockstep

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", default="")
    parser.add_argument("--synthetic", type=int, default=0, metavar="N",
                        help="train on N random images instead of files")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=0.001)
    parser.add_argument("--max_steps", type=int, default=0)
    args = parser.parse_args()
    if args.synthetic:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((args.synthetic, 32, 32, 3)).astype(np.float32)
        y = rng.integers(0, 10, args.synthetic).astype(np.int32)
        x_test, y_test = x[:256], y[:256]
    elif args.data_dir:
        x, y = lockstep.load_cifar10(args.data_dir, True)
        x_test, y_test = lockstep.load_cifar10(args.data_dir, False)
    else:
        parser.error("give --data_dir (CIFAR-10 binary files) or --synthetic")

    def tensors(images, labels):  # NHWC from the reader; PyTorch takes NCHW.
        return (torch.from_numpy(images).permute(0, 3, 1, 2).contiguous(),
                torch.from_numpy(labels).long())

    x, y = tensors(x, y)
    model = resnet20()
    opt = ls.SyncOptimizer(model, optimizer="adam", lr=args.lr)
    data = ls.shard((x, y), batch_size=args.batch_size, epochs=args.epochs)
    model.train()
    for xb, yb in data:
        if args.max_steps and opt.version >= args.max_steps:
            break
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        if opt.rank == 0 and opt.version % 50 == 0:
            print(f"step {opt.version} - loss {loss.item():.4f}", flush=True)
    if opt.rank == 0:
        model.eval()
        xt, yt = tensors(x_test, y_test)
        with torch.no_grad():
            correct = sum((model(xt[i:i + 500]).argmax(1) == yt[i:i + 500])
                          .sum().item() for i in range(0, len(yt), 500))
        print(f"Test accuracy {correct / len(yt):.4f} after {opt.version} steps")


if __name__ == "__main__":
    main()
