#!/usr/bin/env python3
"""A small but real PyTorch training loop for validating stallwatch on a GPU host.

A convolutional network trains on synthetic images that DataLoader workers build on the CPU
(with some per-sample work, as real augmentation has). Every --report seconds it prints one JSON
line: steps done, steps per second and the median step time, so a run with and without the
daemon, or with and without a CPU hog on the same cores, can be compared.

--launch-bound replaces the network with a loop the CPU limits: each step launches --launches
small matmuls (64x64, no CUDA graph) and synchronizes once, as inference decode without graphs
does. --progress FILE keeps the step count in the first 8 bytes of FILE (native byte order,
mmap'd: no system call per step), for bench/job_cost.sh's on/off rounds.

--gpu-bound makes each step 8 large matmuls (bf16, --matrix square, 8192 by default)
and one synchronize: the GPU runs near its power limit, so a lowered limit slows every step
(bench/gpu/wave3.sh's power-cap check of gpu_throttle).
"""
import argparse
import json
import mmap
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class Synthetic(Dataset):
    def __init__(self, n, size, work):
        self.n, self.size, self.work = n, size, work

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.rand(3, self.size, self.size, generator=g)
        for _ in range(self.work):  # stand-in for decoding and augmentation
            x = (x * 1.0001).clamp_(0, 1)
        return x, i % 10


def net():
    return nn.Sequential(
        nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(128, 256, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(256, 10))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--report", type=float, default=5)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--work", type=int, default=4)
    p.add_argument("--label", default="run")
    p.add_argument("--launch-bound", action="store_true")
    p.add_argument("--launches", type=int, default=64)
    p.add_argument("--gpu-bound", action="store_true")
    p.add_argument("--matrix", type=int, default=8192)
    p.add_argument("--progress", default=None)
    a = p.parse_args()
    counter = None
    if a.progress:
        with open(a.progress, "wb") as f:
            f.write(bytes(8))
        fd = os.open(a.progress, os.O_RDWR)
        counter = memoryview(mmap.mmap(fd, 8)).cast("Q")
    if a.launch_bound:
        return run_steps(a, counter, launch_step(a), {"launches": a.launches})
    if a.gpu_bound:
        return run_steps(a, counter, gpu_step(a), {"matrix": a.matrix, "matmuls": 8})
    return run_steps(a, counter, train_step(a), {})


def train_step(a):
    dev = torch.device("cuda")
    model = net().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    data = DataLoader(Synthetic(10**9, a.size, a.work), batch_size=a.batch,
                      num_workers=a.workers, persistent_workers=a.workers > 0, shuffle=False)
    it = iter(data)

    def step():
        x, y = next(it)
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        loss.item()  # synchronizes, as logging the loss does in real loops
    return step


def launch_step(a):
    dev = torch.device("cuda")
    x = torch.rand(64, 64, device=dev)
    w = torch.rand(64, 64, device=dev) / 64

    def step():
        y = x
        for _ in range(a.launches):
            y = torch.mm(y, w)
        y.sum().item()
    return step


def gpu_step(a):
    dev = torch.device("cuda")
    x = torch.rand(a.matrix, a.matrix, device=dev, dtype=torch.bfloat16)
    w = torch.rand(a.matrix, a.matrix, device=dev, dtype=torch.bfloat16) / a.matrix

    def step():
        y = x
        for _ in range(8):
            y = torch.mm(y, w)
        torch.cuda.synchronize()
    return step


def run_steps(a, counter, step, header):
    """Runs step() for a.seconds, reporting every a.report seconds and counting into counter."""
    print(json.dumps({"label": a.label, "pid": os.getpid(), "torch": torch.__version__,
                      "device": torch.cuda.get_device_name(0), **header}), flush=True)
    start = last = time.monotonic()
    steps, times = 0, []
    while True:
        t0 = time.monotonic()
        step()
        now = time.monotonic()
        times.append(now - t0)
        steps += 1
        if counter is not None:
            counter[0] = steps
        if now - last >= a.report or now - start >= a.seconds:
            print(json.dumps({"label": a.label, "t": round(now - start, 1), "steps": steps,
                              "steps_per_s": round(len(times) / (now - last), 2),
                              "median_step_ms": round(statistics.median(times) * 1e3, 3)}),
                  flush=True)
            last, times = now, []
        if now - start >= a.seconds:
            return 0


if __name__ == "__main__":
    sys.exit(main())
