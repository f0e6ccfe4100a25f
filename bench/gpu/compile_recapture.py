#!/usr/bin/env python3
"""torch.compile(mode="reduce-overhead") fed one input shape, then a new shape every step.

CUDA Graph trees record a graph per distinct input shape: the first phase records once and
replays; the second makes it record again and again (until PyTorch's own re-record limit stops
it using graphs), the graph_recapture pattern. Prints one JSON line per phase.
"""
import argparse
import json
import time

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steady", type=float, default=25)
    p.add_argument("--varying", type=float, default=25)
    p.add_argument("--pace", type=float, default=0.1, help="seconds between new shapes")
    a = p.parse_args()
    dev = torch.device("cuda")
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                                torch.nn.Linear(4096, 1024)).to(dev)
    step = torch.compile(model, mode="reduce-overhead")
    t0 = time.time()
    x = torch.randn(64, 1024, device=dev)
    with torch.no_grad():
        n = 0
        while time.time() < t0 + a.steady:
            step(x)
            torch.cuda.synchronize()
            n += 1
        print(json.dumps({"phase": "steady", "steps": n, "seconds": time.time() - t0}), flush=True)
        t1 = time.time()
        n = 0
        size = 65
        while time.time() < t1 + a.varying:
            step(torch.randn(size, 1024, device=dev))
            torch.cuda.synchronize()
            size += 1
            n += 1
            time.sleep(a.pace)
        print(json.dumps({"phase": "varying", "steps": n, "distinct_shapes": n,
                          "seconds": time.time() - t1}), flush=True)


if __name__ == "__main__":
    main()
