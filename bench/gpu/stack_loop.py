#!/usr/bin/env python3
"""A real PyTorch loop whose synchronize calls are made from known lines (issue #17): the
main thread trains a small MLP and waits in settle(); a second thread waits on its own stream in
aux_wait(). validate_stacks.sh checks that stallwatch names these lines (the SITE- marks)."""
import sys
import threading
import time

import torch


def settle():
    torch.cuda.synchronize()  # SITE-SETTLE


def step(model, opt, x):
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    settle()  # SITE-STEP


def aux_wait(stream, a, deadline):
    while time.time() < deadline:
        with torch.cuda.stream(stream):
            for _ in range(8):
                a = (a @ a).clamp_(-1, 1)
        stream.synchronize()  # SITE-AUX


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 20
    dev = torch.device("cuda")
    model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(6)]).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    x = torch.randn(4096, 4096, device=dev)
    deadline = time.time() + seconds
    aux = threading.Thread(target=aux_wait, name="aux",
                           args=(torch.cuda.Stream(), torch.randn(2048, 2048, device=dev), deadline))
    aux.start()
    steps = 0
    while time.time() < deadline:
        step(model, opt, x)  # SITE-LOOP
        steps += 1
    aux.join()
    print(f"stack_loop: {steps} steps, python {sys.version.split()[0]}, torch {torch.__version__}", flush=True)


if __name__ == "__main__":
    main()
