"""Reads the JSON-lines metrics files `dpgossip train` appends to; shared by the plot scripts.

Not a command: tools/plot_metrics.py, plot_consensus.py, plot_gap.py and sweep.py import it.

  records = load(["runs/metrics.jsonl"])      # one dict per line, checked; MetricsError if bad
  runs = group_by_run(records)                # {run id: Run}, in order of first appearance
  runs = select(runs, "run-a,run-b")          # optional --runs filter

Every record gets its "kind" ("epoch" when missing: lines of older versions) and its "run"
("unnamed" when missing; when the epoch count of such lines starts again, a new run
"unnamed-2", "unnamed-3"...), plus "_where" ("FILE:LINE") for messages. docs/TOOLS.md gives the
line format. The plot helpers at the end (plot_main, new_figure, save_figure) are what the three
plot scripts have in common; matplotlib is imported only when a figure is drawn.
"""
import argparse
import json
import math
import os
import sys
from dataclasses import dataclass, field

KINDS = ("epoch", "consensus", "summary")
UNNAMED = "unnamed"

STRINGS = {"run", "kind", "algo", "topology"}
NUMBERS = {"epoch", "step", "round", "wall_s", "loss", "train_accuracy", "test_accuracy",
           "test_loss", "epsilon", "samples_per_second", "lr", "rho", "spectral_gap",
           "consensus_distance", "peers", "steps", "noise_multiplier"}
NUMBER_LISTS = {"peer_test_accuracy", "peer_test_loss"}
REQUIRED = {"epoch": ("epoch",), "consensus": ("consensus_distance",), "summary": ()}


class MetricsError(Exception):
    """A metrics file that cannot be read, or a line that is not what `dpgossip train` writes."""


class NoData(MetricsError):
    """The runs hold nothing a figure could draw (e.g. no gossip run for the consensus plot)."""


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def is_finite(v):
    return is_number(v) and math.isfinite(v)


def _field_error(key, value):
    """Why `value` is not allowed under `key`, or None when it is (null is always allowed)."""
    if value is None:
        return None
    if key in STRINGS and not isinstance(value, str):
        return f"'{key}' should be a string, got {json.dumps(value)}"
    if key in NUMBERS and not is_number(value):
        return f"'{key}' should be a number, got {json.dumps(value)}"
    if key in NUMBER_LISTS and not (isinstance(value, list) and all(map(is_number, value))):
        return f"'{key}' should be a list of numbers, got {json.dumps(value)}"
    return None


def parse_line(text, where):
    """One metrics line -> its normalised record; raises MetricsError naming `where`."""
    try:
        rec = json.loads(text.strip())
    except json.JSONDecodeError as e:
        raise MetricsError(f"{where}: not valid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(rec, dict):
        raise MetricsError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    for key, value in rec.items():
        problem = _field_error(key, value)
        if problem:
            raise MetricsError(f"{where}: {problem}")
    rec.setdefault("kind", "epoch")
    rec["run"] = rec.get("run") or UNNAMED
    if rec["kind"] not in KINDS:
        raise MetricsError(f"{where}: unknown kind '{rec['kind']}' "
                           f"(want one of {', '.join(KINDS)})")
    missing = [k for k in REQUIRED[rec["kind"]] if rec.get(k) is None]
    if missing:
        raise MetricsError(f"{where}: a {rec['kind']} line needs '{missing[0]}'")
    rec["_where"] = where
    return rec


def load_file(path):
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except OSError as e:
        raise MetricsError(f"{path}: cannot read ({e.strerror})") from None
    return [parse_line(text, f"{path}:{n}") for n, text in enumerate(lines, 1) if text.strip()]


def split_unnamed(records):
    """Lines without a run id (older versions) are told apart by their epoch count: each time it
    starts again, so does a run: "unnamed", then "unnamed-2", "unnamed-3"..."""
    count, last_epoch = 0, None
    for rec in records:
        if rec["run"] != UNNAMED:
            continue
        restart = rec["kind"] == "epoch" and last_epoch is not None and rec["epoch"] <= last_epoch
        count += count == 0 or restart
        last_epoch = rec["epoch"] if rec["kind"] == "epoch" else last_epoch
        rec["run"] = UNNAMED if count == 1 else f"{UNNAMED}-{count}"
    return records


def load(paths):
    """The records of every line of the files, in order."""
    return split_unnamed([rec for path in paths for rec in load_file(path)])


@dataclass
class Run:
    """The lines of one run id, split by kind, in file order."""
    name: str
    epochs: list = field(default_factory=list)
    consensus: list = field(default_factory=list)
    summaries: list = field(default_factory=list)

    def add(self, rec):
        {"epoch": self.epochs, "consensus": self.consensus, "summary": self.summaries}[
            rec["kind"]].append(rec)

    @property
    def summary(self):
        """The last summary line (a rerun under the same name wins), or None."""
        return self.summaries[-1] if self.summaries else None

    def first(self, key, default=None):
        """The first non-null `key` in any of the run's lines."""
        for rec in self.summaries + self.epochs + self.consensus:
            if rec.get(key) is not None:
                return rec[key]
        return default

    @property
    def algo(self):
        return self.first("algo", "unknown")


def group_by_run(records):
    runs = {}
    for rec in records:
        runs.setdefault(rec["run"], Run(rec["run"])).add(rec)
    return runs


def select(runs, names):
    """Keep the runs named in `names` (a comma-separated string or a list), in that order."""
    if not names:
        return runs
    wanted = names.split(",") if isinstance(names, str) else list(names)
    unknown = [n for n in wanted if n not in runs]
    if unknown:
        raise MetricsError(f"no run named {', '.join(unknown)}; the files hold: "
                           f"{', '.join(runs) or 'no runs'}")
    return {n: runs[n] for n in wanted}


def last(runs, count):
    """Keep the `count` runs that appear last in the files (None: all)."""
    if count is None:
        return runs
    if count < 1:
        raise MetricsError(f"--last wants 1 or more runs, got {count}")
    return dict(list(runs.items())[-count:])


def series(records, xkey, ykey):
    """(xs, ys) of the records where both keys are finite numbers."""
    pairs = [(r[xkey], r[ykey]) for r in records
             if is_finite(r.get(xkey)) and is_finite(r.get(ykey))]
    return [p[0] for p in pairs], [p[1] for p in pairs]


# --- what the plot scripts share -----------------------------------------------------------

def plot_arguments(doc):
    """The command line of every plot script:
    METRICS... -o OUT.png [--runs R1,R2] [--last N] [--title T]."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=doc.split("\n\n", 1)[-1])
    p.add_argument("metrics", nargs="+", help="JSON-lines metrics files (dpgossip train --metrics)")
    p.add_argument("-o", "--out", required=True, help="the PNG to write")
    p.add_argument("--runs", help="comma-separated run ids to draw (default: all)")
    p.add_argument("--last", type=int, metavar="N",
                   help="draw only the N runs that come last in the files (after --runs)")
    p.add_argument("--title", help="figure title")
    return p


def plot_main(doc, plot, argv=None):
    """Parse the plot command line, load and filter the runs, call plot(runs, out, title).
    Returns the exit status: 0, or 1 with a message on stderr."""
    args = plot_arguments(doc).parse_args(argv)
    prog = os.path.basename(sys.argv[0])
    try:
        runs = last(select(group_by_run(load(args.metrics)), args.runs), args.last)
        plot(runs, args.out, title=args.title)
    except MetricsError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 1
    print(f"{prog}: wrote {args.out}", file=sys.stderr)
    return 0


def new_figure(nrows=1, ncols=1, **kwargs):
    """A matplotlib figure on the Agg backend (no display needed): (fig, axes)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt.subplots(nrows, ncols, **kwargs)


def save_figure(fig, out, title=None):
    """Write `fig` to `out` atomically (OUT.tmp.png, then rename) and close it."""
    import matplotlib.pyplot as plt
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    root, ext = os.path.splitext(out)
    tmp = f"{root}.tmp{ext or '.png'}"
    try:
        os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
        fig.savefig(tmp, format="png", dpi=120)
        os.replace(tmp, out)
    except OSError as e:
        raise MetricsError(f"{out}: cannot write ({e.strerror})") from None
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.remove(tmp)
