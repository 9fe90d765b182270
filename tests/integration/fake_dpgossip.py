#!/usr/bin/python3
"""A stand-in for `dpgossip launch --peers P -- train ...` that writes synthetic metrics lines.

Used by test_tools.sh to exercise tools/plot_*.py and tools/sweep.py without training anything:
  fake_dpgossip.py launch --peers 8 -- train --algo gossip --topology ring --seed 1 \\
      --run-name NAME --metrics FILE --json [--epochs 4] [--swap-to exponential] \\
      [--no-consensus-lines] [--exit-code N] [--sleep S]
It appends the lines rank 0 of `dpgossip train` writes (docs/TOOLS.md): one "epoch" line per
epoch, for gossip a "consensus" line every 5 steps, one "summary" line at the end (also printed
with --json). The consensus distance follows noisy gossip, CD <- rho^2 CD + 1e-6, with rho
from the topology; --swap-to switches topology halfway. Other flags are ignored.
"""
import argparse
import json
import math
import sys
import time

STEPS_PER_EPOCH = 50
CONSENSUS_EVERY = 5


def rho_of(topology, peers):
    if topology == "ring":
        return (1 + 2 * math.cos(2 * math.pi / peers)) / 3
    return {"exponential": 0.6, "torus": 0.8, "complete": 0.0}.get(topology, 0.9)


def parse(argv):
    if argv[:1] != ["launch"] or "train" not in argv:
        sys.exit(f"fake_dpgossip: want 'launch ... -- train ...', got {argv}")
    launch = argparse.ArgumentParser()
    launch.add_argument("--peers", type=int, required=True)
    la, _ = launch.parse_known_args(argv[1:argv.index("--")])
    p = argparse.ArgumentParser()
    for flag in ("--algo", "--topology", "--run-name", "--metrics", "--swap-to"):
        p.add_argument(flag)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--exit-code", type=int, default=0)
    p.add_argument("--sleep", type=float, default=0)
    p.add_argument("--json", action="store_true")
    p.add_argument("--no-consensus-lines", action="store_true")
    a, _ = p.parse_known_args(argv[argv.index("train") + 1:])
    a.peers = la.peers
    return a


def lines(a):
    """The metrics lines of one run, in the order train writes them."""
    gossip = a.algo == "gossip"
    base = {"run": a.run_name, "algo": a.algo, "peers": a.peers}
    topology, cd, step = a.topology, 1.0, 0
    last = a.swap_to or topology
    final = 0.86 - (0.1 * rho_of(last, a.peers) if gossip else 0) + 0.002 * a.seed
    for epoch in range(1, a.epochs + 1):
        for _ in range(STEPS_PER_EPOCH):
            if gossip and a.swap_to and step == a.epochs * STEPS_PER_EPOCH // 2:
                topology = a.swap_to
            rho = rho_of(topology, a.peers)
            cd = rho * rho * cd + 1e-6
            step += 1
            if gossip and not a.no_consensus_lines and step % CONSENSUS_EVERY == 0:
                yield dict(base, kind="consensus", step=step, round=step,
                           epoch=step / STEPS_PER_EPOCH, wall_s=0.01 * step,
                           consensus_distance=cd, topology=topology, rho=rho)
        acc = final * (1 - 0.4 * math.exp(-epoch))
        line = dict(base, kind="epoch", epoch=epoch, step=step, wall_s=0.01 * step,
                    loss=1.5 - acc, train_accuracy=acc - 0.01, test_accuracy=acc,
                    test_loss=1.6 - acc, epsilon=0.75 * epoch, samples_per_second=5000.0, lr=0.1)
        if gossip:
            line.update(topology=topology, rho=rho, consensus_distance=cd,
                        peer_test_accuracy=[acc - 0.02 * math.sqrt(cd) - 0.002 * (i % 3)
                                            for i in range(a.peers)],
                        peer_test_loss=[1.6 - acc + 0.01 * i for i in range(a.peers)])
        yield line
    rho = rho_of(topology, a.peers) if gossip else 0.0
    yield dict(base, kind="summary", test_accuracy=final, epsilon=0.75 * a.epochs,
               topology=topology if gossip else "allreduce", rho=rho, spectral_gap=1 - rho,
               wall_s=0.01 * step, steps=step, noise_multiplier=1.1, config={"seed": a.seed})


def main():
    a = parse(sys.argv[1:])
    time.sleep(a.sleep)
    if a.exit_code:
        print(f"fake_dpgossip: failing with {a.exit_code} as asked", file=sys.stderr)
        return a.exit_code
    with open(a.metrics, "a", encoding="utf-8") as f:
        for line in lines(a):
            f.write(json.dumps(line) + "\n")
            summary = line
    if a.json:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
