#!/usr/bin/python3
"""PyTorch's SGD and DP-SGD step on the same MLP, batch and thread counts as `dpgossip bench step`.

Usage (normally run for you by `dpgossip bench step --baseline torch`):
  OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 tools/bench_torch_mlp.py \
      --widths 784,256,256,10 --activation relu --threads 1,2 --batch 256 --seconds 1 --repeats 5 \
      [--device cpu|cuda|cuda:N] [--modes sgd,dpsgd] [--clip-norm 1.0] [--sigma 1.0]

Prints one JSON object per (thread count, mode), the step row of dpgossip's benchmarks (StepRow
in runtime/core/bench_row.h, whose reader accepts exactly these keys): backend ("torch"), device
("cpu", "cuda:0", ...), mode, threads, batch, samples_per_second (the median over `repeats` timed windows
after a warm-up of 10 steps and seconds / 4). Needs Debian's python3-torch (or any torch; dpsgd
needs torch.func, torch >= 2.0, or the functorch package of older releases).

Modes:
  sgd    the non-private step: forward, mean cross-entropy, backward, torch.optim.SGD (lr 1e-3,
         momentum 0.9), as dpgossip's plain step.
  dpsgd  DP-SGD: per-sample gradients with torch.func (vmap(grad(loss)) over functional_call),
         each sample's gradient clipped to total L2 norm --clip-norm over all parameters
         (factor min(1, C / (norm + 1e-6)), Opacus's rule), the clipped sum, Gaussian noise
         N(0, (sigma * C)^2) on every coordinate (torch.normal on the device), division by the
         batch size and a plain SGD update (lr 0.1). Memory: the per-sample gradients take
         batch x parameters floats (about 17.7 GB for 784-256-256-10 at batch 16384).

--device cuda[:N] puts the model and the data on that GPU and calls torch.cuda.synchronize()
before reading the clock at the start and the end of each timed window (the loop stops queueing
steps once the host clock passes the window; the rate counts the time until they all finished).
The thread count is still applied (torch.set_num_threads, OpenBLAS) and printed as given: on a GPU
it bounds only the host side of the step, so rows of different thread counts time the same GPU
work.

Debian's torch runs its matrix products in the system BLAS (OpenBLAS), whose thread pool
torch.set_num_threads does not limit: without set_blas_threads below, the "1 thread" row would
run its GEMMs on every core.
"""
import argparse
import ctypes
import json
import re
import statistics
import sys
import time

import torch
import torch.nn.functional as F

MODES = ("sgd", "dpsgd")
DP_LR = 0.1


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


def per_sample_api():
    """(functional_call, grad, vmap): torch.func's (torch >= 2.0), else functorch's grad and vmap
    with torch.nn.utils.stateless.functional_call (torch 1.12-1.13); exits naming what is missing."""
    try:
        from torch.func import functional_call, grad, vmap
        return functional_call, grad, vmap
    except ImportError:
        pass
    try:
        from functorch import grad, vmap
    except ImportError:
        sys.exit("bench_torch_mlp.py: --modes dpsgd needs torch.func (torch >= 2.0) or the "
                 "functorch package; torch %s has neither" % torch.__version__)
    try:
        from functorch import functional_call
    except ImportError:
        try:
            from torch.nn.utils.stateless import functional_call
        except ImportError:
            sys.exit("bench_torch_mlp.py: --modes dpsgd needs functional_call (torch.func, "
                     "functorch or torch.nn.utils.stateless); torch %s has none" %
                     torch.__version__)
    return functional_call, grad, vmap


def parse_device(text):
    """torch.device of "cpu", "cuda" or "cuda:N" (checked to exist), with its row name."""
    if text != "cpu" and not re.fullmatch(r"cuda(:[0-9]+)?", text):
        sys.exit("bench_torch_mlp.py: --device: expected cpu, cuda or cuda:N, got %r" % text)
    if text == "cpu":
        return torch.device("cpu"), "cpu"
    if not torch.cuda.is_available():
        sys.exit("bench_torch_mlp.py: --device %s: this torch (%s) sees no CUDA device" %
                 (text, torch.__version__))
    index = int(text.split(":")[1]) if ":" in text else torch.cuda.current_device()
    if index >= torch.cuda.device_count():
        sys.exit("bench_torch_mlp.py: --device %s: only %d CUDA device(s)" %
                 (text, torch.cuda.device_count()))
    return torch.device("cuda", index), "cuda:%d" % index


def build(widths, activation):
    act = torch.nn.ReLU if activation == "relu" else torch.nn.Tanh
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(act())
    return torch.nn.Sequential(*layers)


def per_sample_grads_fn(model):
    """f(params, x, y) -> {name: [batch, *shape]}: each sample's gradient of its cross-entropy."""
    functional_call, grad, vmap = per_sample_api()

    def loss_one(params, xi, yi):
        out = functional_call(model, params, (xi.unsqueeze(0),))
        return F.cross_entropy(out, yi.unsqueeze(0))

    return vmap(grad(loss_one), in_dims=(None, 0, 0))


def dp_step_fn(model, clip_norm, sigma, lr=DP_LR):
    """One DP-SGD step on `model`'s parameters in place; returns the noisy mean gradient."""
    per_sample = per_sample_grads_fn(model)
    params = dict(model.named_parameters())

    def step(x, y):
        detached = {k: p.detach() for k, p in params.items()}
        g = per_sample(detached, x, y)
        batch = x.shape[0]
        # Each sample's total norm as Opacus takes it: the norm of the per-parameter norms
        # (norm(2, dim) is several times faster than pow(2).sum on CPU).
        norms = torch.stack([v.reshape(batch, -1).norm(2, dim=1) for v in g.values()], dim=1)
        factor = torch.clamp(clip_norm / (norms.norm(2, dim=1) + 1e-6), max=1.0)
        noisy = {}
        with torch.no_grad():
            for k, p in params.items():
                summed = torch.einsum("b,b...->...", factor, g[k])
                noise = torch.normal(0.0, sigma * clip_norm, size=tuple(p.shape), device=p.device,
                                     dtype=p.dtype)
                noisy[k] = (summed + noise) / batch
                p.sub_(noisy[k], alpha=lr)
        return noisy

    return step


def rate(widths, activation, batch, seconds, repeats, mode, device, clip_norm, sigma):
    torch.manual_seed(0)
    model = build(widths, activation).to(device)
    x = torch.randn(batch, widths[0], device=device)
    y = torch.randint(0, widths[-1], (batch,), device=device)
    if mode == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
        loss_fn = torch.nn.CrossEntropyLoss()

        def step():
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            opt.step()
    else:
        dp = dp_step_fn(model, clip_norm, sigma)

        def step():
            dp(x, y)

    cuda = device.type == "cuda"

    def now():
        if cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter()

    # Warm-up: 10 steps and a quarter of the timed seconds, as `dpgossip bench step` does.
    warm_until = time.perf_counter() + seconds / 4
    warm = 0
    while warm < 10 or time.perf_counter() < warm_until:
        step()
        warm += 1
    rates = []
    for _ in range(repeats):
        start = now()
        steps = 0
        while True:
            step()
            steps += 1
            if time.perf_counter() - start >= seconds / repeats:
                break
        elapsed = now() - start
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
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    p.add_argument("--modes", default="sgd", help="comma-separated: sgd, dpsgd (default sgd)")
    p.add_argument("--clip-norm", type=float, default=1.0, help="dpsgd: per-sample L2 bound C")
    p.add_argument("--sigma", type=float, default=1.0, help="dpsgd: noise std / C")
    a = p.parse_args()
    widths = [int(w) for w in a.widths.split(",")]
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    for m in modes:
        if m not in MODES:
            p.error("--modes: expected sgd and/or dpsgd, got %r" % m)
    if not modes:
        p.error("--modes: empty")
    if a.batch < 1 or a.repeats < 1 or not a.seconds > 0:
        p.error("--batch and --repeats must be at least 1, --seconds positive")
    if not a.clip_norm > 0 or not a.sigma >= 0:
        p.error("--clip-norm must be positive, --sigma non-negative")
    device, device_name = parse_device(a.device)
    if "dpsgd" in modes:
        per_sample_api()  # fail before any timing when neither torch.func nor functorch exists
    for t in [int(t) for t in a.threads.split(",")]:
        torch.set_num_threads(t)
        set_blas_threads(t)
        for mode in modes:
            r = rate(widths, a.activation, a.batch, a.seconds, a.repeats, mode, device,
                     a.clip_norm, a.sigma)
            print(json.dumps({"backend": "torch", "device": device_name, "mode": mode,
                              "threads": t, "batch": a.batch, "samples_per_second": r}),
                  flush=True)


if __name__ == "__main__":
    main()
