#!/usr/bin/python3
"""Convergence plot: test loss and test accuracy of every run, against epochs and wall time.

Usage:
  /usr/bin/python3 tools/plot_metrics.py METRICS.jsonl [MORE.jsonl ...] -o OUT.png \\
      [--runs RUN1,RUN2] [--title T]

Draws a 2x2 figure from the "epoch" lines of the metrics files (`dpgossip train --metrics`):
top row against epochs, bottom row against wall seconds since training started; left column
test loss, right column test accuracy (of the released model: for gossip, the average over the
peers). One curve per run, labelled with its run id (lines without a run id: "unnamed"). Where a
gossip run reports every peer's own test accuracy (peer_test_accuracy), a faint band from the
worst to the best peer is drawn under its curve in the accuracy-against-epochs panel.
--runs keeps only the named runs, in that order. The PNG is written atomically.
Exits 1 naming the file and line of a malformed metrics line, or the missing file, or OUT when
it is not a regular file or cannot be written (docs/TOOLS.md lists the errors).
"""
import sys

import metrics

# (row, column) -> (x key, y key); the rows share the x axis, the columns the y quantity.
PANELS = {(0, 0): ("epoch", "test_loss"), (0, 1): ("epoch", "test_accuracy"),
          (1, 0): ("wall_s", "test_loss"), (1, 1): ("wall_s", "test_accuracy")}
X_LABELS = {"epoch": "epoch", "wall_s": "wall time (s)"}
Y_LABELS = {"test_loss": "test loss", "test_accuracy": "test accuracy (%)"}
SCALE = {"test_loss": 1.0, "test_accuracy": 100.0}


def draw_curve(ax, run, xkey, ykey, color):
    xs, ys = metrics.series(run.epochs, xkey, ykey)
    if xs:
        ax.plot(xs, [SCALE[ykey] * y for y in ys], marker=".", color=color,
                label=metrics.literal(run.name))
    return bool(xs)


def draw_peer_band(ax, run, color):
    """The min..max of peer_test_accuracy at each epoch, if the run has it."""
    rows = [(r["epoch"], r["peer_test_accuracy"]) for r in run.epochs
            if metrics.is_finite(r.get("epoch")) and r.get("peer_test_accuracy")]
    if not rows:
        return
    ax.fill_between([e for e, _ in rows], [100 * min(p) for _, p in rows],
                    [100 * max(p) for _, p in rows], color=color, alpha=0.15, linewidth=0,
                    label=metrics.literal(f"{run.name}: peers (min..max)"))


def plot(runs, out, title=None):
    """Write the 2x2 convergence figure of `runs` ({id: metrics.Run}) to `out`."""
    fig, axes = metrics.new_figure(2, 2, figsize=(12, 8))
    drawn = False
    for i, run in enumerate(runs.values()):
        color = f"C{i % 10}"
        for (row, col), (xkey, ykey) in PANELS.items():
            drawn |= draw_curve(axes[row][col], run, xkey, ykey, color)
        draw_peer_band(axes[0][1], run, color)  # runs whose replicas differ report each peer
    if not drawn:
        raise metrics.NoData("no epoch line with a test loss or accuracy in the runs: "
                             f"{', '.join(runs) or 'none'}")
    from matplotlib.ticker import MaxNLocator
    for (row, col), (xkey, ykey) in PANELS.items():
        ax = axes[row][col]
        if xkey == "epoch":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(X_LABELS[xkey])
        ax.set_ylabel(Y_LABELS[ykey])
        ax.grid(alpha=0.3)
    axes[0][1].legend(fontsize="small")
    metrics.save_figure(fig, out, title or "test loss and accuracy")


if __name__ == "__main__":
    sys.exit(metrics.plot_main(__doc__, plot))
