#!/usr/bin/env python3
"""Checks stallwatch's GPU memory and CUDA Graph accounting against PyTorch on a real GPU.

Run while `stallwatch run --listen 127.0.0.1:PORT --window 1s` traces this host. Each phase
does something PyTorch reports on (torch.cuda.memory_reserved(): the bytes its caching
allocator got from cudaMalloc), waits three windows and prints one JSON line with PyTorch's
figure beside the daemon's /metrics for this process's cgroup:
  alloc     tensors of known sizes: live device bytes vs memory_reserved()
  pinned    a pinned host tensor: live host bytes
  free      empty_cache(): freed bytes, live back to what is still reserved
  oom       a request far beyond the GPU: alloc failures (+ a cuda_oom chain in explain)
  recapture a CUDA graph captured and instantiated again every step for --recapture seconds
  steady    one graph captured once and replayed for --steady seconds
With --expandable, PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True must be set by the caller:
then the allocator maps cuMemCreate handles instead of calling cudaMalloc.
"""
import argparse
import json
import os
import re
import time
import urllib.request

import torch


def scrape(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r'^(stallwatch_cuda_memory_\w+|stallwatch_cuda_call_duration_seconds_(?:count|sum))\{(.*)\} (\S+)$', line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2)))
        out.setdefault(m.group(1), []).append((labels, float(m.group(3))))
    return out


def total(samples, name, cgroup, **match):
    return sum(v for labels, v in samples.get(name, [])
               if labels.get("cgroup") == cgroup and all(labels.get(k) == w for k, w in match.items()))


def my_cgroup():
    for line in open("/proc/self/cgroup"):
        if line.startswith("0::"):
            return line.strip()[3:] or "/"
    return "/"


def report(port, window, phase, cg, extra):
    time.sleep(3 * window)
    m = scrape(port)
    row = {"phase": phase, "cgroup": cg,
           "torch_reserved": torch.cuda.memory_reserved(),
           "torch_allocated": torch.cuda.memory_allocated(),
           "sw_live_device": total(m, "stallwatch_cuda_memory_live_bytes", cg, kind="device"),
           "sw_live_host": total(m, "stallwatch_cuda_memory_live_bytes", cg, kind="host"),
           "sw_allocated": {l["call"]: v for l, v in m.get("stallwatch_cuda_memory_allocated_bytes_total", []) if l.get("cgroup") == cg},
           "sw_freed": {l["call"]: v for l, v in m.get("stallwatch_cuda_memory_freed_bytes_total", []) if l.get("cgroup") == cg},
           "sw_failures": {l["call"]: v for l, v in m.get("stallwatch_cuda_memory_alloc_failures_total", []) if l.get("cgroup") == cg and v},
           "sw_graph_calls": {l["call"]: v for l, v in m.get("stallwatch_cuda_call_duration_seconds_count", [])
                              if l.get("cgroup") == cg and ("Graph" in l["call"] or "Capture" in l["call"])}}
    row.update(extra)
    print(json.dumps(row), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=19465)
    p.add_argument("--window", type=float, default=1.0)
    p.add_argument("--recapture", type=float, default=25)
    p.add_argument("--steady", type=float, default=20)
    p.add_argument("--label", default="default")
    a = p.parse_args()
    cg = my_cgroup()
    dev = torch.device("cuda")
    torch.zeros(1, device=dev)  # context
    report(a.port, a.window, a.label + ":start", cg, {})
    keep = [torch.empty(n, dtype=torch.uint8, device=dev) for n in (3 << 20, 64 << 20, 512 << 20, 1 << 30)]
    report(a.port, a.window, a.label + ":alloc", cg, {"tensor_bytes": sum(t.numel() for t in keep)})
    pinned = torch.empty(256 << 20, dtype=torch.uint8, pin_memory=True)
    report(a.port, a.window, a.label + ":pinned", cg, {"pinned_bytes": pinned.numel()})
    del keep[2:]
    torch.cuda.empty_cache()
    report(a.port, a.window, a.label + ":free", cg, {})
    try:
        torch.empty(1 << 50, dtype=torch.uint8, device=dev)  # 1 PiB
        oom = "no error"
    except torch.OutOfMemoryError as e:
        oom = str(e).splitlines()[0][:160]
    report(a.port, a.window, a.label + ":oom", cg, {"torch_error": oom})
    # cuBLAS must create its handle and workspace before a capture (torch.cuda.graphs docs):
    # warm up on the side stream first.
    x = torch.randn(1024, 1024, device=dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            (x @ x).relu_()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    if a.recapture > 0:
        end = time.time() + a.recapture
        steps = 0
        while time.time() < end:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.stream(s):
                with torch.cuda.graph(g, stream=s):
                    y = (x @ x).relu_()
            g.replay()
            torch.cuda.synchronize()
            steps += 1
        report(a.port, a.window, a.label + ":recapture", cg, {"captures": steps})
    if a.steady > 0:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.stream(s):
            with torch.cuda.graph(g, stream=s):
                y = (x @ x).relu_()
        end = time.time() + a.steady
        steps = 0
        while time.time() < end:
            g.replay()
            torch.cuda.synchronize()
            steps += 1
        report(a.port, a.window, a.label + ":steady", cg, {"replays": steps})


if __name__ == "__main__":
    main()
