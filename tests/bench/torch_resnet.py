#!/usr/bin/python3
"""PyTorch baseline for Lockstep's CPU ResNets: the same topologies
(ResNet-20 for CIFAR, He et al. v1 as in Keras's cifar10_resnet example;
ResNet-50 as keras.applications.ResNet50 with a 10-class head), 32x32x3
inputs, batch B, one thread, Adam; prints median images/s of training steps
(forward + backward + update) after a warm-up.

usage: torch_resnet.py MODEL BATCH STEPS   (MODEL: resnet20 | resnet50)
"""
import os
import statistics
import sys
import time

import torch
from torch import nn


# ResNet-20 is the Python package's example model, so the two cannot drift.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "worker", "python", "examples"))
from torch_resnet20 import resnet20  # noqa: E402


class Bottleneck(nn.Module):
    """Keras ResNet50 bottleneck: 1x1 (stride), 3x3, 1x1 x4 + shortcut."""

    def __init__(self, cin, width, stride, project):
        super().__init__()
        eps = 1.001e-5
        self.c1 = nn.Conv2d(cin, width, 1, stride)
        self.b1 = nn.BatchNorm2d(width, eps=eps)
        self.c2 = nn.Conv2d(width, width, 3, 1, 1)
        self.b2 = nn.BatchNorm2d(width, eps=eps)
        self.c3 = nn.Conv2d(width, 4 * width, 1)
        self.b3 = nn.BatchNorm2d(4 * width, eps=eps)
        self.short = (nn.Sequential(nn.Conv2d(cin, 4 * width, 1, stride),
                                    nn.BatchNorm2d(4 * width, eps=eps))
                      if project else nn.Identity())

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        y = torch.relu(self.b2(self.c2(y)))
        return torch.relu(self.b3(self.c3(y)) + self.short(x))


def resnet50(classes):
    layers = [nn.ZeroPad2d(3), nn.Conv2d(3, 64, 7, 2), nn.BatchNorm2d(64, eps=1.001e-5),
              nn.ReLU(), nn.ZeroPad2d(1), nn.MaxPool2d(3, 2)]
    cin = 64
    for stage, (width, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3))):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            layers.append(Bottleneck(cin, width, stride, block == 0))
            cin = 4 * width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, classes)]
    return nn.Sequential(*layers)


def main():
    name, batch, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = {"resnet20": resnet20, "resnet50": resnet50}[name](10)
    params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(batch, 3, 32, 32)
    y = torch.randint(0, 10, (batch,))
    loss_fn = nn.CrossEntropyLoss()
    times = []
    for step in range(steps + 2):
        start = time.perf_counter()
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
        if step >= 2:  # Warm-up steps are not counted.
            times.append(time.perf_counter() - start)
    print(f"torch {name} params={params} batch={batch} "
          f"images_per_sec={batch / statistics.median(times):.1f}")


if __name__ == "__main__":
    main()
