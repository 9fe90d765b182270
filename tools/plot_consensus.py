#!/usr/bin/python3
"""Consensus distance of gossip runs against rounds, beside what plain gossip would predict.

Usage:
  /usr/bin/python3 tools/plot_consensus.py METRICS.jsonl [MORE.jsonl ...] -o OUT.png \\
      [--runs RUN1,RUN2] [--title T]

Draws the consensus distance (1/n) sum_i ||x_i - x_bar||^2 against the gossip round on a log
axis, one solid curve per gossip run, from its "consensus" lines (written every K steps); a run
without them falls back to its "epoch" lines' consensus_distance, with the step as the round.
Beside each curve, dashed in the same colour: the rho^t prediction, the decay of plain gossip
(no gradients, no noise) from the first measured point (t0, CD0) of each topology phase,
CD0 * rho^(2 (t - t0)) (a squared norm, hence 2t), floored at 1e-12 * CD0; none for a phase
whose distance grows from its first point (training from one common model) or whose rho lies
outside [0, 1]. Where a run's
topology label changes (a topology swap mid-run) a dotted vertical line marks the round, with
"old -> new" beside it. The y axis reaches 1e-4 times the lowest measured distance, no lower
(a prediction may continue below). Runs with no consensus data (all-reduce, single) are left out.
--runs keeps only the named runs. The PNG is written atomically.
Exits 1 naming the file and line of a malformed metrics line, or the missing file, or OUT when
it is not a regular file or cannot be written (docs/TOOLS.md lists the errors).
"""
import sys
from typing import NamedTuple

import metrics

FLOOR = 1e-12  # the prediction stops this far (relative) below its starting point
SAMPLES = 200  # points per predicted phase (a curve only where it hits the floor)
VIEW_BELOW = 1e-4  # the y axis shows down to this times the lowest measured distance


class Point(NamedTuple):
    t: float
    cd: float
    topology: str
    rho: float


def points(run):
    """The run's measured consensus distances as Points, in file order."""
    if run.consensus:
        recs = [dict(r, t=r.get("round", r.get("step"))) for r in run.consensus]
    else:
        recs = [dict(r, t=r.get("step")) for r in run.epochs]
    return [Point(r["t"], r["consensus_distance"], r.get("topology") or "?", r.get("rho"))
            for r in recs
            if metrics.is_finite(r["t"]) and metrics.is_finite(r.get("consensus_distance"))]


def phases(pts):
    """Split the points into maximal stretches with the same topology label."""
    out = []
    for p in pts:
        if not out or out[-1][-1].topology != p.topology:
            out.append([])
        out[-1].append(p)
    return out


def prediction(phase, end):
    """(ts, CD0 * rho^(2 (t - t0))) from the phase's first point to round `end`, or None."""
    first = phase[0]
    rho = next((p.rho for p in phase if metrics.is_finite(p.rho)), None)
    # A spectral radius lies in [0, 1]; any other rho predicts no decay (and rho ** t would
    # overflow above 1, or turn complex below 0).
    if rho is None or not 0 <= rho <= 1 or first.cd <= 0 or end <= first.t:
        return None
    if len(phase) > 1 and phase[1].cd > first.cd:
        return None  # growing, as training from one common model does: nothing to decay from
    ts = [first.t + (end - first.t) * k / (SAMPLES - 1) for k in range(SAMPLES)]
    return ts, [max(first.cd * rho ** (2 * (t - first.t)), FLOOR * first.cd) for t in ts]


def draw_run(ax, run, pts, color):
    ax.plot([p.t for p in pts], [p.cd for p in pts], color=color, marker=".", markersize=3,
            label=metrics.literal(
                f"{run.name} ({' -> '.join(ph[0].topology for ph in phases(pts))})"))
    parts = phases(pts)
    for k, phase in enumerate(parts):
        end = parts[k + 1][0].t if k + 1 < len(parts) else phase[-1].t
        pred = prediction(phase, end)
        if pred:
            ax.plot(*pred, color=color, linestyle="--", linewidth=1, alpha=0.8)
        if k > 0:
            draw_swap(ax, phase[0].t, parts[k - 1][0].topology, phase[0].topology, color)


def draw_swap(ax, t, old, new, color):
    ax.axvline(t, color=color, linestyle=":", linewidth=1)
    ax.text(t, 0.98, metrics.literal(f" {old} -> {new}"), color=color, rotation=90,
            fontsize="small", va="top", ha="right", transform=ax.get_xaxis_transform())


def plot(runs, out, title=None):
    """Write the consensus-distance figure of the gossip runs among `runs` to `out`."""
    from matplotlib.lines import Line2D
    measured = {name: points(run) for name, run in runs.items()}
    measured = {name: pts for name, pts in measured.items() if pts}
    if not measured:
        raise metrics.NoData("no consensus distance (gossip) in the runs: "
                             f"{', '.join(runs) or 'none'}")
    fig, ax = metrics.new_figure(figsize=(10, 6))
    for i, (name, pts) in enumerate(measured.items()):
        draw_run(ax, runs[name], pts, f"C{i % 10}")
    ax.set_yscale("log", nonpositive="mask")
    lowest = min((p.cd for pts in measured.values() for p in pts if p.cd > 0), default=None)
    if lowest:  # predictions may fall far below what was measured; keep the measured in view
        ax.set_ylim(bottom=max(ax.get_ylim()[0], lowest * VIEW_BELOW))
    ax.set_xlabel("gossip round")
    ax.set_ylabel("consensus distance  (1/n) sum_i ||x_i - x_bar||^2")
    ax.grid(alpha=0.3, which="both")
    handles, _ = ax.get_legend_handles_labels()
    handles.append(Line2D([], [], color="gray", linestyle="--",
                          label="rho^t prediction: CD0 rho^(2(t-t0)) per phase"))
    ax.legend(handles=handles, fontsize="small")
    metrics.save_figure(fig, out, title or "consensus distance")


if __name__ == "__main__":
    sys.exit(metrics.plot_main(__doc__, plot))
