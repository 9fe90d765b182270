#!/usr/bin/python3
"""Scaling plot: throughput and time to a target accuracy against the number of peers.

Usage:
  /usr/bin/python3 tools/plot_scaling.py METRICS.jsonl [MORE.jsonl ...] -o OUT.png \\
      --target ACC [--runs RUN1,RUN2] [--last N] [--title T]

Runs whose ids differ only in their peer count (the sweep's names, ALGO[-TOPOLOGY]-nPEERS-sSEED
[-NETWORK][-SLOWDOWN]: the "-nP-" part) form one curve, labelled with the id less that part. From
each run's summary line (a run without one is left out, with a note on stderr): left, samples/s
against peers; right, the wall time of the first epoch whose test accuracy reached ACC (a
fraction; runs that never did are left out of that panel, with a note). Runs of one peer are
drawn as a dashed line across both panels. Log-2 peer axis. The PNG is written atomically.
Exits 1 naming the file and line of a malformed metrics line, a missing file, or OUT when it is
not a regular file or cannot be written; 2 on a bad --target.
"""
import os
import re
import sys

import metrics
import time_to_accuracy

PEERS = re.compile(r"-n(\d+)(?=-|$)")


def note(text):
    print(f"plot_scaling: {text}", file=sys.stderr)


def curves(runs, target):
    """{label: [(peers, samples/s, seconds to target or None)]}, each sorted by peers."""
    out = {}
    for run in runs.values():
        s = run.summary
        if s is None:
            note(f"run {run.name} left out: no summary line (did it finish?)")
            continue
        peers = s.get("peers")
        if not metrics.is_finite(peers):
            note(f"run {run.name} left out: no peer count")
            continue
        label = PEERS.sub("", run.name, count=1)
        reached = time_to_accuracy.first_reaching(run, target)
        if reached is None:
            note(f"run {run.name} never reached {100 * target:g}%")
        out.setdefault(label, []).append((int(peers), s.get("samples_per_second"), reached))
    return {k: sorted(v) for k, v in out.items()}


def plot(runs, out, target, title=None):
    data = curves(runs, target)
    if not data:
        raise metrics.NoData("no run with a summary line in: " + (", ".join(runs) or "none"))
    fig, (left, right) = metrics.new_figure(1, 2, figsize=(13, 5))
    i = 0
    for label, points in data.items():
        if all(p == 1 for p, _, _ in points):  # one peer: the reference
            for ax, value in ((left, points[0][1]), (right, points[0][2])):
                if metrics.is_finite(value):
                    ax.axhline(value, color="black", linestyle="--", linewidth=1,
                               label=metrics.literal(label))
            continue
        color = f"C{i % 10}"
        style = "-" if i < 10 else "--"
        i += 1
        xs = [p for p, v, _ in points if metrics.is_finite(v)]
        left.plot(xs, [v for _, v, _ in points if metrics.is_finite(v)], marker="o",
                  color=color, linestyle=style, label=metrics.literal(label))
        reached = [(p, t) for p, _, t in points if t is not None]
        right.plot([p for p, _ in reached], [t for _, t in reached], marker="o", color=color,
                   linestyle=style, label=metrics.literal(label))
    for ax, ylabel in ((left, "samples/s"), (right, f"seconds to {100 * target:g}% test accuracy")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("peers")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    left.legend(fontsize="x-small")
    metrics.save_figure(fig, out, title or "scaling")


def main(argv=None):
    p = metrics.plot_arguments(__doc__)
    p.add_argument("--target", type=float, required=True, help="target test accuracy (0..1)")
    args = p.parse_args(argv)
    if not 0 < args.target <= 1:
        p.error(f"--target: {args.target} is not a fraction in (0, 1]")
    try:
        metrics.check_title(args.title)
        metrics.check_output(args.out)
        runs = metrics.last(metrics.select(metrics.group_by_run(metrics.load(args.metrics)),
                                           args.runs), args.last)
        plot(runs, args.out, args.target, title=args.title)
    except metrics.MetricsError as e:
        print(f"{os.path.basename(sys.argv[0])}: error: {e}", file=sys.stderr)
        return 1
    print(f"plot_scaling: wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
