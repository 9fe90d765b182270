#!/usr/bin/python3
"""Final test accuracy of every run against the spectral gap of its topology.

Usage:
  /usr/bin/python3 tools/plot_gap.py METRICS.jsonl [MORE.jsonl ...] -o OUT.png \\
      [--runs RUN1,RUN2] [--title T]

One point per run, from its "summary" line (the last one, if a run name was reused): x the
spectral gap 1 - rho of the gossip matrix (log axis), y the final test accuracy of the released
model. Colour and marker tell the topology (for gossip, the label of the last phase), each point
is labelled with its run id. All-reduce runs (and single-process ones) sit at gap 1 (their
summary's, or 1 when it has none) as black stars, with a dotted line at their accuracy for
reference. A run without a summary line (it did
not finish) or a gossip run without a spectral_gap is left out, with a note on stderr.
--runs keeps only the named runs. The PNG is written atomically.
Exits 1 naming the file and line of a malformed metrics line, or the missing file, or OUT when
it is not a regular file or cannot be written (docs/TOOLS.md lists the errors).
"""
import sys
from typing import NamedTuple

import metrics

MARKERS = "os^Dv<>PXhp"
REFERENCE_ALGOS = ("allreduce", "single")  # exact averaging: gap 1 when the summary omits it


class Point(NamedTuple):
    run: str
    topology: str
    gap: float
    accuracy: float
    reference: bool  # an exact average (all-reduce, single): drawn as the reference


def point(run):
    """The run's (gap, accuracy) point, or None with a note on stderr."""
    s = run.summary
    if s is None:
        return note(run.name, "has no summary line (did it finish?)")
    algo = s.get("algo") or run.algo
    reference = algo in REFERENCE_ALGOS
    gap = s.get("spectral_gap")
    if gap is None and reference:
        gap = 1.0
    if not metrics.is_finite(gap) or not metrics.is_finite(s.get("test_accuracy")):
        return note(run.name, f"its summary ({s['_where']}) has no spectral_gap or test_accuracy")
    topology = algo if reference else s.get("topology") or run.first("topology") or algo
    return Point(run.name, topology, gap, s["test_accuracy"], reference)


def note(run, why):
    print(f"plot_gap: run {run} left out: {why}", file=sys.stderr)


def once(seen, key):
    """`key` the first time it is asked for (a legend label), None after."""
    if key in seen:
        return None
    seen.add(key)
    return key


def draw_point(ax, p, styles, seen):
    y = 100 * p.accuracy
    if p.reference:
        ax.scatter([p.gap], [y], marker="*", s=220, color="black", zorder=3,
                   label=once(seen, metrics.literal(f"{p.topology} (gap 1)")))
        ax.axhline(y, color="black", linestyle=":", linewidth=0.8, alpha=0.5)
    else:
        k = styles.setdefault(p.topology, len(styles))
        ax.scatter([p.gap], [y], marker=MARKERS[k % len(MARKERS)], color=f"C{k % 10}", s=60,
                   zorder=3, label=once(seen, metrics.literal(p.topology)))
    ax.annotate(metrics.literal(p.run), (p.gap, y), textcoords="offset points", xytext=(5, 4),
                fontsize="x-small")


def plot(runs, out, title=None):
    """Write the accuracy-against-spectral-gap figure of `runs` to `out`."""
    pts = [p for p in map(point, runs.values()) if p]
    if not pts:
        raise metrics.NoData(f"no summary line to plot in the runs: {', '.join(runs) or 'none'}")
    fig, ax = metrics.new_figure(figsize=(9, 6))
    styles, seen = {}, set()  # topology -> style index; legend labels given
    for p in pts:
        draw_point(ax, p, styles, seen)
    if min(p.gap for p in pts) > 0:
        ax.set_xscale("log")
    ax.set_xlabel("spectral gap 1 - rho")
    ax.set_ylabel("final test accuracy (%)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize="small", title="topology")
    metrics.save_figure(fig, out, title or "final test accuracy against spectral gap")


if __name__ == "__main__":
    sys.exit(metrics.plot_main(__doc__, plot))
