#!/usr/bin/python3
"""PyTorch's non-private SGD step on the same MLP, batch and thread counts as `dpgossip bench step`.

Usage (normally run for you by `dpgossip bench step --baseline torch`):
  OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 tools/bench_torch_mlp.py \
      --widths 784,256,256,10 --activation relu --threads 1,2 --batch 256 --seconds 1 --repeats 5

Prints one JSON object per thread count, the step row of dpgossip's benchmarks (StepRow in
apps/bench/row.h, whose reader accepts exactly these keys): backend, mode ("sgd"), threads, batch,
samples_per_second (the median over `repeats` timed windows after a warm-up of 10 steps and
seconds / 4). Needs Debian's python3-torch.

Debian's torch runs its matrix products in the system BLAS (OpenBLAS), whose thread pool
torch.set_num_threads does not limit: without set_blas_threads below, the "1 thread" row would
run its GEMMs on every core.
"""
import argparse
import ctypes
import json
import statistics
import time

import torch


def set_blas_threads(threads):
    """Sets the thread count of every OpenBLAS loaded in this process; returns how many it set."""
    done = 0
    paths = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "blas" in path.rsplit("/", 1)[-1] and ".so" in path:
                paths.add(path)
    for path in sorted(paths):
        lib = ctypes.CDLL(path)
        if hasattr(lib, "openblas_set_num_threads"):
            lib.openblas_set_num_threads(ctypes.c_int(threads))
            done += 1
    return done


def build(widths, activation):
    act = torch.nn.ReLU if activation == "relu" else torch.nn.Tanh
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(act())
    return torch.nn.Sequential(*layers)


def rate(widths, activation, batch, seconds, repeats):
    torch.manual_seed(0)
    model = build(widths, activation)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    x = torch.randn(batch, widths[0])
    y = torch.randint(0, widths[-1], (batch,))
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    # Warm-up: 10 steps and a quarter of the timed seconds, as `dpgossip bench step` does.
    warm_until = time.perf_counter() + seconds / 4
    warm = 0
    while warm < 10 or time.perf_counter() < warm_until:
        step()
        warm += 1
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        steps = 0
        while True:
            step()
            steps += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds / repeats:
                break
        rates.append(steps * batch / elapsed)
    return statistics.median(rates)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--widths", default="784,256,256,10")
    p.add_argument("--activation", choices=["relu", "tanh"], default="relu")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    widths = [int(w) for w in a.widths.split(",")]
    for t in [int(t) for t in a.threads.split(",")]:
        torch.set_num_threads(t)
        set_blas_threads(t)
        r = rate(widths, a.activation, a.batch, a.seconds, a.repeats)
        print(json.dumps({"backend": "torch", "mode": "sgd", "threads": t, "batch": a.batch,
                          "samples_per_second": r}), flush=True)


if __name__ == "__main__":
    main()
