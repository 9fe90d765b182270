#!/usr/bin/python3
"""Time to a target accuracy and accuracy at a fixed time, per run, from metrics files.

Usage:
  /usr/bin/python3 tools/time_to_accuracy.py METRICS.jsonl [MORE.jsonl ...] --target ACC \\
      [--at SECONDS] [--runs RUN1,RUN2] [-o OUT.md]

From each run's "epoch" lines (test accuracy of the released model at the end of each epoch,
and wall_s, the seconds since its training started): the wall time of the first epoch whose
test accuracy reaches ACC (a fraction, e.g. 0.80; "-" when none does), and, with --at, the
accuracy of the last epoch ended by SECONDS ("-" when none was). Both are read at epoch ends:
a run that crossed the target mid-epoch is counted at the end of that epoch. Also its final
accuracy, wall time and epsilon from its summary line. One markdown table row per run, in file
order (--runs: the named runs, in that order), to stdout or written atomically to OUT.md.
Exits 1 naming the file and line of a malformed metrics line, a missing file or run, or OUT
when it cannot be written; 2 on a bad --target or --at.
"""
import argparse
import sys

import metrics


def first_reaching(run, target):
    """Wall seconds at the first epoch end whose test accuracy is at least `target`."""
    for r in run.epochs:
        acc, wall = r.get("test_accuracy"), r.get("wall_s")
        if metrics.is_finite(acc) and metrics.is_finite(wall) and acc >= target:
            return wall
    return None


def accuracy_at(run, seconds):
    """The test accuracy of the last epoch that ended by `seconds`."""
    best = None
    for r in run.epochs:
        acc, wall = r.get("test_accuracy"), r.get("wall_s")
        if metrics.is_finite(acc) and metrics.is_finite(wall) and wall <= seconds:
            best = acc
    return best


def fmt(value, spec):
    return format(value, spec) if metrics.is_finite(value) else "-"


def table(runs, target, at):
    head = ["run", "algo", f"time to {100 * target:g}% (s)"]
    if at is not None:
        head.append(f"accuracy at {at:g} s (%)")
    head += ["final accuracy (%)", "wall s", "epsilon"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for run in runs.values():
        s = run.summary or {}
        cells = [run.name, run.algo, fmt(first_reaching(run, target), ".1f")]
        if at is not None:
            acc = accuracy_at(run, at)
            cells.append(fmt(100 * acc if acc is not None else None, ".2f"))
        final = s.get("test_accuracy")
        cells += [fmt(100 * final if metrics.is_finite(final) else None, ".2f"),
                  fmt(s.get("wall_s"), ".1f"), fmt(s.get("epsilon"), ".3g")]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("metrics", nargs="+", help="metrics files (JSON lines)")
    p.add_argument("--target", type=float, required=True, help="target test accuracy (0..1)")
    p.add_argument("--at", type=float, help="a wall time in seconds")
    p.add_argument("--runs", help="comma-separated run ids to keep, in that order")
    p.add_argument("-o", "--out", help="markdown file to write (default: stdout)")
    args = p.parse_args(argv)
    if not 0 < args.target <= 1:
        p.error(f"--target: {args.target} is not a fraction in (0, 1]")
    if args.at is not None and not (metrics.is_finite(args.at) and args.at > 0):
        p.error(f"--at: {args.at} is not a positive number of seconds")
    try:
        runs = metrics.select(metrics.group_by_run(metrics.load(args.metrics)), args.runs)
        text = table(runs, args.target, args.at)
        if args.out:
            metrics.check_output(args.out)
            metrics.write_atomically(args.out, lambda f: f.write(text.encode("utf-8")))
        else:
            sys.stdout.write(text)
    except metrics.MetricsError as e:
        print(f"time_to_accuracy: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
