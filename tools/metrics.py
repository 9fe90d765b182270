"""Reads the JSON-lines metrics files `dpgossip train` appends to; shared by the plot scripts.

Not a command: tools/plot_metrics.py, plot_consensus.py, plot_gap.py and sweep.py import it.

  records = load(["runs/metrics.jsonl"])      # one dict per line, checked; MetricsError if bad
  runs = group_by_run(records)                # {run id: Run}, in order of first appearance
  runs = select(runs, "run-a,run-b")          # optional --runs filter

Every record gets its "kind" ("epoch" when missing: lines of older versions) and its "run"
("unnamed" when missing; when the epoch count of such lines starts again, a new run
"unnamed-2", "unnamed-3"...), plus "_where" ("FILE:LINE") for messages. docs/TOOLS.md gives the
line format. The plot helpers at the end (plot_main, new_figure, save_figure, write_atomically)
are what the three plot scripts and sweep.py have in common; matplotlib is imported only when a
figure is drawn.
"""
import argparse
import json
import math
import os
import sys
import tempfile
from dataclasses import dataclass, field

# "stopped": the summary of a run a signal stopped (dpgossip train, docs/TRAINING.md); its epochs
# are drawn, and it is no final summary. "facts" (the run's first line: its peers, graphs and
# plan) and "peers" (every peer's last live figures) are for `dpgossip report`; no figure here
# draws them.
KINDS = ("epoch", "consensus", "summary", "stopped", "facts", "peers")
UNNAMED = "unnamed"

STRINGS = {"run", "kind", "algo", "topology"}
NUMBERS = {"epoch", "step", "round", "wall_s", "loss", "train_accuracy", "test_accuracy",
           "test_loss", "epsilon", "samples_per_second", "lr", "rho", "spectral_gap",
           "consensus_distance", "peers", "steps", "noise_multiplier"}
NUMBER_LISTS = {"peer_test_accuracy", "peer_test_loss"}
REQUIRED = {"epoch": ("epoch",), "consensus": ("consensus_distance",), "summary": (),
            "stopped": (), "facts": (), "peers": ()}
# The fields some figure puts on an axis. matplotlib's tick locators overflow on an axis that
# reaches near the float maximum (an IndexError from MaxNLocator at 1e308; a log axis fails from
# about 1e305; accuracies are drawn times 100), so these are bounded by DRAWABLE.
DRAWN = {"epoch", "step", "round", "wall_s", "test_accuracy", "test_loss", "consensus_distance",
         "spectral_gap", "peer_test_accuracy"}
DRAWABLE = 1e300
TITLE_MAX = 200  # characters: far longer overflows the glyph rasteriser (5000 already does)


class MetricsError(Exception):
    """A metrics file that cannot be read, or a line that is not what `dpgossip train` writes."""


class NoData(MetricsError):
    """The runs hold nothing a figure could draw (e.g. no gossip run for the consensus plot)."""


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def is_finite(v):
    return is_number(v) and math.isfinite(v)


def shown(value, limit=60):
    """`value` as JSON for a message, cut to `limit` characters (a line may weigh megabytes)."""
    text = json.dumps(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _too_large(v):
    return is_finite(v) and abs(v) > DRAWABLE


def _field_error(key, value):
    """Why `value` is not allowed under `key`, or None when it is (null is always allowed)."""
    if value is None:
        return None
    if key in STRINGS and not isinstance(value, str):
        return f"'{key}' should be a string, got {shown(value)}"
    if key in NUMBERS and not is_number(value):
        return f"'{key}' should be a number, got {shown(value)}"
    if key in NUMBER_LISTS and not (isinstance(value, list) and all(map(is_number, value))):
        return f"'{key}' should be a list of numbers, got {shown(value)}"
    if key in DRAWN and any(map(_too_large, value if isinstance(value, list) else [value])):
        return f"'{key}' is {shown(value)}, beyond what a figure can draw (|x| <= {DRAWABLE:g})"
    return None


def parse_line(text, where):
    """One metrics line -> its normalised record; raises MetricsError naming `where`."""
    try:
        rec = json.loads(text.strip())
    except json.JSONDecodeError as e:
        raise MetricsError(f"{where}: not valid JSON ({e.msg} at column {e.colno})") from None
    except RecursionError:  # the decoder recurses per level: '[' * 100000 overflows the stack
        raise MetricsError(f"{where}: not valid JSON (nested too deeply)") from None
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


def decode(raw, where):
    """UTF-8 bytes -> str; MetricsError naming `where` (FILE or FILE:LINE) if they are not."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MetricsError(f"{where}: not UTF-8 text (byte {raw[e.start]:#04x} at offset "
                           f"{e.start})") from None


def _read(path, by_line):
    """The file's bytes (a list of lines when `by_line`); MetricsError naming it if unreadable."""
    try:
        with open(path, "rb") as f:
            return f.readlines() if by_line else f.read()
    except OSError as e:
        raise MetricsError(f"{path}: cannot read ({e.strerror})") from None


def read_text(path):
    """The whole of a UTF-8 text file; MetricsError naming it if it cannot be read."""
    return decode(_read(path, False), path)


def load_file(path):
    # Bytes, decoded line by line, so that a line that is not UTF-8 is named with its number.
    records = []
    for n, raw in enumerate(_read(path, True), 1):
        text = decode(raw, f"{path}:{n}")
        if text.strip():
            records.append(parse_line(text, f"{path}:{n}"))
    return records


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
    stops: list = field(default_factory=list)
    facts: list = field(default_factory=list)  # "facts" and "peers" lines

    def add(self, rec):
        {"epoch": self.epochs, "consensus": self.consensus, "summary": self.summaries,
         "stopped": self.stops, "facts": self.facts, "peers": self.facts}[rec["kind"]].append(rec)

    @property
    def summary(self):
        """The last summary line (a rerun under the same name wins), or None."""
        return self.summaries[-1] if self.summaries else None

    def first(self, key, default=None):
        """The first non-null `key` in any of the run's lines."""
        for rec in self.summaries + self.stops + self.epochs + self.consensus:
            if rec.get(key) is not None:
                return rec[key]
        return default

    @property
    def algo(self):
        return self.first("algo", "unknown")


def group_by_run(records):
    """{run id: Run}; a run with only its facts line (it ended before its first epoch) is left
    out: it has nothing to draw."""
    runs = {}
    for rec in records:
        runs.setdefault(rec["run"], Run(rec["run"])).add(rec)
    return {name: run for name, run in runs.items()
            if run.epochs or run.consensus or run.summaries or run.stops}


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
        check_title(args.title)  # before reading anything: the command line is wrong
        check_output(args.out)
        runs = last(select(group_by_run(load(args.metrics)), args.runs), args.last)
        plot(runs, args.out, title=args.title)
    except MetricsError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 1
    print(f"{prog}: wrote {args.out}", file=sys.stderr)
    return 0


def check_title(title):
    if title is not None and len(title) > TITLE_MAX:
        raise MetricsError(f"--title: at most {TITLE_MAX} characters, got {len(title)}")


def literal(text):
    """`text` (a title, a run id, a topology label) drawn as it is: matplotlib reads a pair of
    '$' as math, and a run id such as "$\\foo$" would stop the drawing with a parse error."""
    return text.replace("$", r"\$")


def check_output(out):
    """Refuse an `out` that exists but is not a regular file (a device, a FIFO, a folder):
    renaming over it would replace that node, which is not ours to replace."""
    if os.path.exists(out) and not os.path.isfile(out):
        raise MetricsError(f"{out}: not a regular file; refusing to replace it")


def write_atomically(out, write):
    """Call write(f) on a new temporary file (binary) beside `out` (the same folder, so that the
    rename is atomic), then rename it over `out`. Any failure (a full disk, a file size limit, a
    missing folder) is a MetricsError naming `out`, and leaves `out` as it was and no temporary
    file."""
    check_output(out)
    folder = os.path.dirname(out) or "."
    root, ext = os.path.splitext(os.path.basename(out))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{root}.", suffix=f".tmp{ext}", dir=folder)
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would hide the result from others
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, out)
        tmp = None
    except OSError as e:
        raise MetricsError(f"{out}: cannot write ({e.strerror or e})") from None
    finally:
        if tmp is not None and os.path.lexists(tmp):
            os.remove(tmp)


def _umask():
    mask = os.umask(0)  # the only way to read it is to set it
    os.umask(mask)
    return mask


def new_figure(nrows=1, ncols=1, **kwargs):
    """A matplotlib figure on the Agg backend (no display needed): (fig, axes)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt.subplots(nrows, ncols, **kwargs)


def save_figure(fig, out, title=None):
    """Write `fig` to `out` atomically (a temporary file beside it, then rename) and close it."""
    import matplotlib.pyplot as plt
    try:
        check_title(title)
        if title:
            fig.suptitle(literal(title))
        fig.tight_layout()
        folder = os.path.dirname(out) or "."
        try:
            os.makedirs(folder, exist_ok=True)
        except FileExistsError:  # its strerror, "File exists", would not say what is wrong
            raise MetricsError(f"{out}: cannot write ({folder} is not a folder)") from None
        except OSError as e:
            raise MetricsError(f"{out}: cannot write ({e.strerror})") from None
        write_atomically(out, lambda f: fig.savefig(f, format="png", dpi=120))
    finally:
        plt.close(fig)
