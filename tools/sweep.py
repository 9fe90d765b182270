#!/usr/bin/python3
"""Runs the training runs of one sweep file and writes a results folder with plots and a table.

Usage:
  /usr/bin/python3 tools/sweep.py SWEEP.json [--out DIR] [--dry-run]

The sweep file (docs/TOOLS.md has the full format):
  {"binary": "build/apps/dpgossip", "out": "runs/sweep", "timeout_s": 3600,
   "common": ["--epochs", "5", "--threads", "1"],
   "grid": {"algo": ["allreduce", "gossip"], "topology": ["ring", "exponential"],
            "peers": [8], "seed": [1],
            "network": {"lan": [], "slow": ["default:latency=10ms,bw=100Mbit"]},
            "slowdown": {"even": [], "4x": ["1:4"]}},
   "runs": [{"algo": "gossip", "topology": "torus", "peers": 16, "seed": 2,
             "args": ["--lr", "0.5"]}]}
With "trace": true every run also writes OUT/traces/NAME.json (--trace), and the table gives the
share of its training communication hidden behind compute (tools/trace_summary.py).
The runs are the cartesian product of "grid" (topology applies to the graph algorithms, gossip
and ad-psgd, only: other algos run once per peers x seed) followed by the "runs" list. The grid's
"network" and "slowdown" axes name settings: each label's list of --link specs (an emulated
network, docs/HETEROGENEITY.md) or of --slowdown specs (slow peers); an empty list is the plain
setting. A listed run may give "link" and "slowdown" lists too. Each is run from the current
folder as
  BINARY launch --peers P -- train --algo A [--topology T] --seed S --run-name NAME \\
      --metrics OUT/metrics.jsonl --json COMMON... [--link L]... [--slowdown D]... ARGS...
with NAME = ALGO-TOPOLOGY-nPEERS-sSEED (ALGO-nPEERS-sSEED without a topology; then -NETWORK and
-SLOWDOWN, the labels, when the grid has those axes; a listed run may give its own "name"), its
output in
OUT/logs/NAME.log, stopped (its whole process group) after timeout_s seconds. A failing run is
recorded and the sweep goes on. A metrics.jsonl already in OUT is first renamed metrics.jsonl.old.
Then OUT/convergence.png, OUT/consensus.png and OUT/accuracy_vs_gap.png (tools/plot_*.py) and
OUT/summary.md (one table row per run, with its exact command) are written.

--out DIR replaces the file's "out". --dry-run prints the commands, one a line, and runs nothing.
Exit status: 0; 1 when a run failed, a figure could not be drawn from bad metrics, or an output
could not be written; 2 when the sweep file is missing or invalid (the message names the file
and the key; nothing is written), or, before any run, when a file of OUT that the sweep renames
over is there but is not a regular file.
"""
import argparse
import collections
import itertools
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from typing import NamedTuple, Optional

import metrics
import plot_consensus
import plot_gap
import plot_metrics
import trace_summary

ALGOS = ("single", "allreduce", "gossip", "ps-sync", "ps-async", "local-sgd", "ad-psgd",
         "partial-allreduce")
GRAPH_ALGOS = ("gossip", "ad-psgd")  # the algorithms that take a topology
DEFAULTS = {"binary": "build/apps/dpgossip", "out": "runs/sweep", "timeout_s": 3600,
            "common": [], "grid": None, "runs": [], "trace": False}
RUN_KEYS = ("algo", "topology", "peers", "seed")  # the keys of "grid"; "runs" adds "args"
SETTING_KEYS = ("network", "slowdown")  # grid axes of labelled settings
SETTING_FLAGS = {"network": "--link", "slowdown": "--slowdown"}
PLOTS = (("convergence.png", plot_metrics), ("consensus.png", plot_consensus),
         ("accuracy_vs_gap.png", plot_gap))
STOP_GRACE_S = 10


class SweepError(Exception):
    """An invalid sweep file: the message names the file and the key."""


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def is_str_list(v):
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


# key -> (test, what it wants); a key's value in a run, a grid list's element, or the top level.
CHECKS = {
    "algo": (lambda v: v in ALGOS, f"one of {', '.join(ALGOS)}"),
    "topology": (lambda v: isinstance(v, str) and v != "", "a non-empty topology label"),
    "peers": (lambda v: is_int(v) and v >= 1, "a whole number of at least 1"),
    "seed": (lambda v: is_int(v) and v >= 0, "a whole number of 0 or more"),
    "args": (is_str_list, "a list of strings"),
    "name": (lambda v: isinstance(v, str) and v != "" and "/" not in v and " " not in v,
             "a non-empty run name without '/' or spaces"),
    "binary": (lambda v: isinstance(v, str) and v != "", "a non-empty path"),
    "out": (lambda v: isinstance(v, str) and v != "", "a non-empty path"),
    "timeout_s": (lambda v: metrics.is_finite(v) and v > 0, "a number of seconds above 0"),
    "common": (is_str_list, "a list of strings"),
    "grid": (lambda v: isinstance(v, dict) and v != {}, "a non-empty object"),
    "runs": (lambda v: isinstance(v, list), "a list of objects"),
    "trace": (lambda v: isinstance(v, bool), "true or false"),
    "link": (is_str_list, "a list of --link specs"),
    "slowdown": (is_str_list, "a list of --slowdown specs"),
}


def is_label(v):
    return isinstance(v, str) and v != "" and "/" not in v and " " not in v


class Run(NamedTuple):
    algo: str
    topology: Optional[str]
    peers: int
    seed: int
    args: tuple = ()
    label: Optional[str] = None  # a listed run's own "name"
    network: Optional[str] = None  # the grid's labels of its settings
    slowdown: Optional[str] = None
    settings: tuple = ()  # their flags: --link L ... --slowdown D ...

    @property
    def name(self):
        if self.label:
            return self.label
        topo = f"-{self.topology}" if self.topology else ""
        tail = "".join(f"-{x}" for x in (self.network, self.slowdown) if x)
        return f"{self.algo}{topo}-n{self.peers}-s{self.seed}{tail}"


class Sweep(NamedTuple):
    path: str
    binary: str
    out: str
    timeout_s: float
    common: list
    runs: list
    trace: bool = False


# --- the sweep file ------------------------------------------------------------------------

def check(path, shown, key, value):
    """`value` must pass CHECKS[key]; `shown` is where it stands, for the message."""
    test, want = CHECKS[key]
    if not test(value):
        raise SweepError(f"{path}: key '{shown}': want {want}, got {metrics.shown(value)}")


def check_keys(path, where, obj, allowed):
    if not isinstance(obj, dict):
        at = f"key '{where}'" if where else "the top level"
        raise SweepError(f"{path}: {at}: want an object, got {metrics.shown(obj)}")
    for key in obj:
        if key not in allowed:
            raise SweepError(f"{path}: unknown key '{where + '.' if where else ''}{key}' "
                             f"(known: {', '.join(allowed)})")


def check_required(path, where, obj, graph):
    for key in ("algo", "peers", "seed") + (("topology",) if graph else ()):
        if key not in obj:
            need = f" ({' and '.join(GRAPH_ALGOS)} need one)" if key == "topology" else ""
            raise SweepError(f"{path}: key '{where}': missing '{key}'{need}")


def setting_flags(key, specs):
    return tuple(x for spec in specs for x in (SETTING_FLAGS[key], spec))


def grid_settings(path, grid, key):
    """[(label, flags)] of the grid's axis `key`, or [(None, ())] without it."""
    if key not in grid:
        return [(None, ())]
    axis = grid[key]
    if not isinstance(axis, dict) or not axis:
        raise SweepError(f"{path}: key 'grid.{key}': want a non-empty object of label: [specs], "
                         f"got {metrics.shown(axis)}")
    out = []
    for label, specs in axis.items():
        if not is_label(label):
            raise SweepError(f"{path}: key 'grid.{key}': label {metrics.shown(label)} must be "
                             "non-empty, without '/' or spaces")
        check(path, f"grid.{key}.{label}", "link" if key == "network" else "slowdown", specs)
        out.append((label, setting_flags(key, specs)))
    return out


def grid_runs(path, grid):
    check_keys(path, "grid", grid, RUN_KEYS + SETTING_KEYS)
    networks = grid_settings(path, grid, "network")
    slowdowns = grid_settings(path, grid, "slowdown")
    for key, values in grid.items():
        if key in SETTING_KEYS:
            continue
        if not isinstance(values, list) or not values:
            raise SweepError(f"{path}: key 'grid.{key}': want a non-empty list, got "
                             f"{metrics.shown(values)}")
        for i, v in enumerate(values):
            check(path, f"grid.{key}[{i}]", key, v)
    check_required(path, "grid", grid, any(a in GRAPH_ALGOS for a in grid.get("algo", [])))
    for algo, peers, seed, (net, net_flags), (slow, slow_flags) in itertools.product(
            grid["algo"], grid["peers"], grid["seed"], networks, slowdowns):
        for topology in grid["topology"] if algo in GRAPH_ALGOS else [None]:
            yield Run(algo, topology, peers, seed, network=net, slowdown=slow,
                      settings=net_flags + slow_flags)


def listed_run(path, i, spec):
    where = f"runs[{i}]"
    check_keys(path, where, spec, RUN_KEYS + ("args", "name", "link", "slowdown"))
    for key, value in spec.items():
        check(path, f"{where}.{key}", key, value)
    graph = spec.get("algo") in GRAPH_ALGOS
    check_required(path, where, spec, graph)
    if not graph and "topology" in spec:
        raise SweepError(f"{path}: key '{where}.topology': only {' and '.join(GRAPH_ALGOS)} "
                         "take a topology")
    settings = setting_flags("network", spec.get("link", ())) + \
        setting_flags("slowdown", spec.get("slowdown", ()))
    return Run(spec["algo"], spec.get("topology"), spec["peers"], spec["seed"],
               tuple(spec.get("args", ())), spec.get("name"), settings=settings)


def parse_sweep(path, spec, out=None):
    """The validated Sweep of the object `spec` read from `path`; SweepError if invalid."""
    check_keys(path, "", spec, tuple(DEFAULTS))
    for key, value in spec.items():
        check(path, key, key, value)
    s = {**DEFAULTS, **spec}
    runs = list(grid_runs(path, s["grid"])) if s["grid"] is not None else []
    runs += [listed_run(path, i, r) for i, r in enumerate(s["runs"])]
    if not runs:
        raise SweepError(f"{path}: no runs: give a 'grid' or a non-empty 'runs'")
    # Counted once (names.count per name was quadratic: a 1000 x 1000 grid took over a minute).
    twice = sorted(n for n, k in collections.Counter(r.name for r in runs).items() if k > 1)
    if twice:
        raise SweepError(f"{path}: run name {', '.join(twice)} comes twice "
                         "(every run needs its own name)")
    return Sweep(path, s["binary"], out or s["out"], s["timeout_s"], s["common"], runs,
                 s["trace"])


def load_sweep(path, out=None):
    try:
        text = metrics.read_text(path)
    except metrics.MetricsError as e:  # cannot read, or not UTF-8: the message names the file
        raise SweepError(str(e)) from None
    try:
        spec = trace_summary.parse_json(text, path)
    except ValueError as e:  # not JSON, or nested too deeply: the message names the file
        raise SweepError(str(e)) from None
    return parse_sweep(path, spec, out)


# --- running -------------------------------------------------------------------------------

def metrics_path(sweep):
    return os.path.join(sweep.out, "metrics.jsonl")


def trace_path(sweep, run):
    return os.path.join(sweep.out, "traces", f"{run.name}.json")


def command(sweep, run):
    topology = ["--topology", run.topology] if run.topology else []
    trace = ["--trace", trace_path(sweep, run)] if sweep.trace else []
    return [sweep.binary, "launch", "--peers", str(run.peers), "--", "train",
            "--algo", run.algo, *topology, "--seed", str(run.seed), "--run-name", run.name,
            "--metrics", metrics_path(sweep), "--json", *trace, *sweep.common, *run.settings,
            *run.args]


def stop(proc):
    """SIGTERM to the run's process group, SIGKILL if it lingers. The launcher passes SIGTERM on to
    its peers (each in a process group of its own) and SIGKILLs them after its grace period."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=STOP_GRACE_S)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def execute(cmd, log_path, timeout_s):
    """Run `cmd` with its output in `log_path`: "ok", or why it failed (the log's last line).
    A log that cannot be written raises OSError naming it."""
    try:
        with open(log_path, "w", encoding="utf-8") as log:
            log.write(f"$ {shlex.join(cmd)}\n")
            log.flush()
            status = wait_for(cmd, log, timeout_s)
        if status != "ok":
            with open(log_path, "a", encoding="utf-8") as log:
                log.write(f"\nsweep: {status}\n")
    except OSError as e:
        raise OSError(e.errno, e.strerror, log_path) from None
    return status


def wait_for(cmd, log, timeout_s):
    try:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as e:
        return f"cannot start: {e.strerror}"
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop(proc)
        return f"timed out after {timeout_s:g} s"
    except KeyboardInterrupt:
        stop(proc)
        raise
    return "ok" if rc == 0 else f"exit {rc}"


def check_binary(sweep):
    b = sweep.binary
    if not (shutil.which(b) if os.sep not in b else os.access(b, os.X_OK)):
        raise SweepError(f"{sweep.path}: key 'binary': {b} is not an executable "
                         "(build it: bash tools/setup.sh)")


def replaced_outputs(sweep):
    """The files of OUT that the sweep renames over (metrics.jsonl.old, the figures, summary.md)
    and the metrics.jsonl it moves away."""
    return [metrics_path(sweep), metrics_path(sweep) + ".old", summary_path(sweep)] + \
        [os.path.join(sweep.out, file) for file, _ in PLOTS]


def prepare(sweep):
    """The results folder, ready for the runs, before any runs: SweepError when one of its files
    is there but is not a regular file (a device, a FIFO, a folder: renaming over it would
    replace it), or the folders cannot be made."""
    for path in replaced_outputs(sweep):
        try:
            metrics.check_output(path)
        except metrics.MetricsError as e:
            raise SweepError(str(e)) from None
    try:
        os.makedirs(os.path.join(sweep.out, "logs"), exist_ok=True)
        if sweep.trace:
            os.makedirs(os.path.join(sweep.out, "traces"), exist_ok=True)
        if os.path.exists(metrics_path(sweep)):
            os.replace(metrics_path(sweep), metrics_path(sweep) + ".old")
            print(f"sweep: kept the previous {metrics_path(sweep)} as metrics.jsonl.old",
                  file=sys.stderr)
    except OSError as e:
        raise SweepError(f"{e.filename}: cannot write ({e.strerror})") from None


def run_all(sweep):
    """Run every run; returns [(run, command, status)]."""
    results = []
    for i, run in enumerate(sweep.runs, 1):
        cmd = command(sweep, run)
        start = time.monotonic()
        status = execute(cmd, os.path.join(sweep.out, "logs", f"{run.name}.log"), sweep.timeout_s)
        print(f"sweep: [{i}/{len(sweep.runs)}] {run.name}: {status} "
              f"({time.monotonic() - start:.1f} s)", file=sys.stderr)
        results.append((run, cmd, status))
    return results


# --- the results folder --------------------------------------------------------------------

def draw_plots(sweep, runs):
    """Each figure of PLOTS into the out folder: {file: None if written, else why not}, and
    whether a failure was an error (bad metrics) rather than nothing to draw."""
    notes, error = {}, False
    for file, module in PLOTS:
        try:
            module.plot(runs, os.path.join(sweep.out, file))
            notes[file] = None
        except metrics.NoData as e:
            notes[file] = f"not drawn: {e}"
        except metrics.MetricsError as e:
            notes[file], error = f"error: {e}", True
        if notes[file]:
            print(f"sweep: {file} {notes[file]}", file=sys.stderr)
    return notes, error


def fmt(value, spec, missing="-"):
    return format(value, spec) if metrics.is_finite(value) else missing


def hidden_share(sweep, run):
    """The share of the run's training communication hidden behind compute, from its trace."""
    path = trace_path(sweep, run)
    if not sweep.trace or not os.path.exists(path):
        return None
    try:
        events = trace_summary.load_events(path)
    except ValueError as e:  # the message names the file
        print(f"sweep: {e}", file=sys.stderr)
        return None
    try:
        return trace_summary.summarise(events)["overall"]["hidden_share"]
    except (ValueError, KeyError, TypeError) as e:
        print(f"sweep: {path}: {e}", file=sys.stderr)
        return None


def table_row(sweep, run, cmd, status, summary):
    s = summary or {}
    accuracy = s.get("test_accuracy")
    hidden = hidden_share(sweep, run)
    cells = [run.name, run.algo, run.topology or "-", str(run.peers), str(run.seed),
             run.network or "-", run.slowdown or "-", status,
             fmt(100 * accuracy if metrics.is_finite(accuracy) else None, ".2f"),
             fmt(s.get("epsilon"), ".3g", "no DP" if "epsilon" in s else "-"),
             fmt(s.get("message_epsilon"), ".3g", "no DP" if "message_epsilon" in s else "-"),
             fmt(s.get("samples_per_second"), ".0f"),
             fmt(100 * hidden if hidden is not None else None, ".0f"),
             fmt(s.get("spectral_gap"), ".4g"), fmt(s.get("wall_s"), ".1f"),
             f"`{shlex.join(cmd)}`"]
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def write_summary(sweep, results, runs, notes):
    failed = sum(status != "ok" for _, _, status in results)
    lines = [f"# Sweep {sweep.path}", "",
             f"{len(results)} runs, {failed} failed. Metrics: `metrics.jsonl`; "
             "each run's output: `logs/RUN.log`.", ""]
    for file, note in notes.items():
        lines += [f"![{file}]({file})" if note is None else f"{file}: {note}", ""]
    lines += ["| run | algo | topology | peers | seed | network | slowdown | status "
              "| test accuracy (%) | epsilon | message epsilon | samples/s | hidden comm (%) "
              "| spectral gap | wall s | command |",
              "|" + "---|" * 16]
    lines += [table_row(sweep, run, cmd, status,
                        runs[run.name].summary if run.name in runs else None)
              for run, cmd, status in results]
    text = "\n".join(lines) + "\n"
    metrics.write_atomically(summary_path(sweep), lambda f: f.write(text.encode("utf-8")))


def summary_path(sweep):
    return os.path.join(sweep.out, "summary.md")


def report(sweep, results):
    """Plots and summary.md from OUT/metrics.jsonl; returns True when all went well."""
    try:
        have = os.path.exists(metrics_path(sweep))
        runs = metrics.group_by_run(metrics.load([metrics_path(sweep)]) if have else [])
        bad = False
    except metrics.MetricsError as e:
        print(f"sweep: error: {e}", file=sys.stderr)
        runs, bad = {}, True
    runs = {r.name: runs[r.name] for r, _, _ in results if r.name in runs}
    notes, error = draw_plots(sweep, runs)
    try:
        write_summary(sweep, results, runs, notes)
    except metrics.MetricsError as e:  # a full disk: the message names summary.md
        print(f"sweep: error: {e}", file=sys.stderr)
        return False
    print(f"sweep: wrote {summary_path(sweep)}", file=sys.stderr)
    return not (bad or error)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("sweep", help="the sweep file (JSON)")
    p.add_argument("--out", help="results folder (default: the file's \"out\", else "
                   f"{DEFAULTS['out']})")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = p.parse_args(argv)
    try:
        sweep = load_sweep(args.sweep, args.out)
        if args.dry_run:
            for run in sweep.runs:
                print(shlex.join(command(sweep, run)))
            return 0
        check_binary(sweep)
        prepare(sweep)
    except SweepError as e:
        print(f"sweep: error: {e}", file=sys.stderr)
        return 2
    try:
        results = run_all(sweep)
    except OSError as e:  # a run's log could not be written (a full disk, a file size limit)
        print(f"sweep: error: {e.filename}: cannot write ({e.strerror})", file=sys.stderr)
        return 1
    ok = report(sweep, results)
    return 0 if ok and all(status == "ok" for _, _, status in results) else 1


if __name__ == "__main__":
    sys.exit(main())
