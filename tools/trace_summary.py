#!/usr/bin/env python3
"""Summarises a dpgossip Chrome trace: how much communication each peer hid behind compute.

    tools/trace_summary.py TRACE [--json]

Per peer (pid) and overall:
  communication  the length of the union of the "comm" spans (send and recv, each from its post to
                 the return of its wait) of the step's own threads (the training thread and the
                 bucketed all-reduce's "comm" thread; unnamed threads count too): the time some
                 transfer of the step was in flight, or the training thread waited for one;
  exposed        the length of the union of the "wait" spans of the training thread: the time it
                 was blocked on communication (service threads, "server" and "responder", wait
                 for other peers' requests; that is not this peer's training blocked);
  hidden share   1 - exposed / communication: the part of the communication time that overlapped
                 with something other than waiting (compute, or posting more work);
                 both leave out the time inside "eval" spans (evaluation's and the consensus
                 metrics' collectives are not training traffic);
  compute        the summed duration of the spans of every other category, per span name
                 (sample, forward_backward, clip, noise, eval, ...).
Overall sums each peer's communication and exposed time before taking the share. Times in ms.
TRACE is a merged trace ({"traceEvents": [...]}) or one peer's part file (a JSON array).
Standard library only.
"""
import argparse
import json
import sys
from collections import defaultdict

COMM, WAIT, EVAL = "comm", "wait", "eval"
# Threads whose messages are the training step's own: the training thread and the communication
# thread of the bucketed all-reduce. A service thread ("server", "responder") waits for other
# peers' requests on their behalf; its time is not this peer's communication.
STEP_THREADS = ("training", "comm")


def union_length(intervals):
    """Total length covered by [begin, end) intervals."""
    total, cur_b, cur_e = 0.0, None, None
    for b, e in sorted(intervals):
        if cur_e is None or b > cur_e:
            if cur_e is not None:
                total += cur_e - cur_b
            cur_b, cur_e = b, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_b
    return total


def subtract(intervals, holes):
    """The parts of [begin, end) `intervals` outside every interval of `holes`."""
    holes = sorted(holes)
    out = []
    for b, e in intervals:
        for hb, he in holes:
            if he <= b or hb >= e:
                continue
            if hb > b:
                out.append((b, hb))
            b = max(b, he)
            if b >= e:
                break
        if b < e:
            out.append((b, e))
    return out


def read_text(path):
    """The whole of a UTF-8 file; ValueError naming it (and the line where it is not UTF-8)
    when it cannot be read. merge_traces.py reads its parts with it too."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ValueError(f"{path}: cannot read ({e.strerror})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise ValueError(f"{path}:{line}: not UTF-8 text (byte {raw[e.start]:#04x} at offset "
                         f"{e.start})") from None


class TooDeep(ValueError):
    """JSON nested deeper than the decoder's recursion allows."""


def parse_json(text, where):
    """json.loads; ValueError naming `where` when `text` is not JSON, or is nested too deeply
    (the decoder recurses per level: '[' * 100000 would be a RecursionError). merge_traces.py
    and sweep.py parse with it too."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}:{e.lineno}: not valid JSON ({e.msg} at column {e.colno})") \
            from None
    except RecursionError:
        raise TooDeep(f"{where}: not valid JSON (nested too deeply)") from None


def load_events(path):
    """The events of a trace file; ValueError naming the file when it is not a trace."""
    data = parse_json(read_text(path), path)
    if isinstance(data, dict):
        data = data.get("traceEvents")
    if not isinstance(data, list):
        raise ValueError(f"{path}: no traceEvents array")
    bad = next((i for i, e in enumerate(data) if not isinstance(e, dict)), None)
    if bad is not None:
        raise ValueError(f"{path}: event {bad} is not an object")
    return data


def arg_name(e, default):
    """The "name" in the event's args (a thread or process name), else `default`."""
    args = e.get("args")
    return args.get("name", default) if isinstance(args, dict) else default


def summarise(events):
    names = {}
    comm, wait, evals = defaultdict(list), defaultdict(list), defaultdict(list)
    thread_names = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            thread_names[(e.get("pid"), e.get("tid"))] = arg_name(e, "")

    def role(e):
        """What a thread does: the step's own thread, a service thread, or unknown (unnamed)."""
        return thread_names.get((e.get("pid"), e.get("tid")), "")
    compute = defaultdict(lambda: defaultdict(float))
    extent = {}
    for e in events:
        pid = e.get("pid")
        if e.get("ph") == "M" and e.get("name") == "process_name":
            names[pid] = arg_name(e, f"pid {pid}")
        if e.get("ph") != "X":
            continue
        b = float(e["ts"])
        end = b + float(e.get("dur", 0.0))
        lo, hi = extent.get(pid, (b, end))
        extent[pid] = (min(lo, b), max(hi, end))
        cat = e.get("cat", "")
        named = role(e)
        if cat == COMM:
            if named in STEP_THREADS or not named:
                comm[pid].append((b, end))
        elif cat == WAIT:
            # Exposed: only where the training thread itself was blocked.
            if named == "training" or not named:
                wait[pid].append((b, end))
        else:
            compute[pid][e["name"]] += end - b
            if cat == EVAL:
                evals[pid].append((b, end))

    def share(c, x):
        return None if c <= 0 else 1.0 - x / c

    peers = []
    total_c = total_x = 0.0
    total_compute = defaultdict(float)
    for pid in sorted(set(extent) | set(names), key=lambda p: (p is None, p)):
        # Evaluation's collectives are metrics, not training: left out of both.
        # A wait is time spent on communication too (the bucket thread's reductions between its
        # transfers sit in no transfer span), so the communication time covers the waits.
        c = union_length(subtract(comm[pid] + wait[pid], evals[pid])) / 1000.0
        x = union_length(subtract(wait[pid], evals[pid])) / 1000.0
        lo, hi = extent.get(pid, (0.0, 0.0))
        peers.append({
            "pid": pid,
            "name": names.get(pid, f"pid {pid}"),
            "span_ms": (hi - lo) / 1000.0,
            "communication_ms": c,
            "exposed_ms": x,
            "hidden_share": share(c, x),
            "compute_ms": {k: v / 1000.0 for k, v in sorted(compute[pid].items())},
        })
        total_c += c
        total_x += x
        for k, v in compute[pid].items():
            total_compute[k] += v / 1000.0
    overall = {
        "peers": len(peers),
        "communication_ms": total_c,
        "exposed_ms": total_x,
        "hidden_share": share(total_c, total_x),
        "compute_ms": dict(sorted(total_compute.items())),
    }
    return {"peers": peers, "overall": overall}


def fmt_share(s):
    return "-" if s is None else f"{100.0 * s:.1f}%"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", metavar="TRACE")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args(argv)
    try:
        events = load_events(args.trace)
    except ValueError as e:  # the message names the file
        print(f"trace_summary: {e}", file=sys.stderr)
        return 1
    try:
        summary = summarise(events)
    except (ValueError, KeyError, TypeError) as e:  # an event without "ts", a string "dur"...
        print(f"trace_summary: {args.trace}: {e}", file=sys.stderr)
        return 1
    if args.json:
        json.dump(summary, sys.stdout, indent=2)
        print()
        return 0
    names = sorted(summary["overall"]["compute_ms"])
    header = ["peer", "span ms", "comm ms", "exposed ms", "hidden"] + [f"{n} ms" for n in names]
    rows = []
    for p in summary["peers"] + [dict(summary["overall"], name="overall", span_ms=None)]:
        rows.append([p["name"], "" if p["span_ms"] is None else f"{p['span_ms']:.3f}",
                     f"{p['communication_ms']:.3f}", f"{p['exposed_ms']:.3f}",
                     fmt_share(p["hidden_share"])]
                    + [f"{p['compute_ms'].get(n, 0.0):.3f}" for n in names])
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    for r in [header] + rows:
        print("  ".join(str(c).rjust(w) for c, w in zip(r, widths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
