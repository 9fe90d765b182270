#!/usr/bin/env python3
"""Merges peers' trace part files into one Chrome trace, for a run that died before merging.

    tools/merge_traces.py PART... -o OUT

Each part is a JSON array of Trace Event objects, one per line, as dpg::trace::Tracer writes it.
A part cut short by a process killed mid-write keeps its complete event lines (the torn last
line is dropped, with a note on stderr). The output is {"traceEvents":[...],"displayTimeUnit":"ms"},
which chrome://tracing and Perfetto open.

The output is written to a temporary file beside OUT and renamed into place: a failed write (a
full disk, a missing folder) leaves no partial OUT, and an OUT that exists but is not a regular
file (a device, a FIFO) is refused. Exit status 0, or 1 with one line on stderr naming the file.
Standard library only (trace_summary.py reads the parts, metrics.py writes the output).
"""
import argparse
import json
import sys

import metrics
import trace_summary


def read_part(path):
    """(events, how many torn lines were dropped); ValueError naming `path` when it is not a
    part."""
    text = trace_summary.read_text(path)
    try:
        events = trace_summary.parse_json(text, path)
    except trace_summary.TooDeep:
        raise  # not a torn part: no writer nests that deep
    except ValueError:
        events = None
    if isinstance(events, list):
        return events, 0
    if events is not None:
        raise ValueError(f"{path}: not a JSON array of events")
    # A torn part: keep every line that is a whole event object.
    body = text.strip()
    if not body.startswith("["):
        raise ValueError(f"{path}: not a JSON array of events")
    lines = body[1:].split("\n")
    events, dropped = [], 0
    for i, line in enumerate(lines):
        line = line.strip()
        if line.endswith("]") and i == len(lines) - 1:
            line = line[:-1].strip()
        line = line.rstrip(",").strip()
        if not line:
            continue
        try:
            event = trace_summary.parse_json(line, f"{path}:{i + 2}")
        except trace_summary.TooDeep:
            raise
        except ValueError:
            if i == len(lines) - 1:
                dropped += 1
                continue
            raise ValueError(f"{path}: line {i + 2} is not one event object") from None
        if not isinstance(event, dict):
            raise ValueError(f"{path}: line {i + 2} is not one event object")
        events.append(event)
    return events, dropped


def write_merged(out, events):
    """{"traceEvents": events, ...} to `out`, atomically; MetricsError naming `out` if not."""
    def write(f):
        text = json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}, separators=(",", ":"))
        f.write(text.encode("utf-8") + b"\n")
    metrics.write_atomically(out, write)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("parts", nargs="+", metavar="PART", help="a peer's part file")
    parser.add_argument("-o", "--output", required=True, metavar="OUT", help="the merged trace")
    args = parser.parse_args(argv)
    merged = []
    try:
        metrics.check_output(args.output)  # before reading: a device is refused up front
        for path in args.parts:
            events, dropped = read_part(path)
            if dropped:
                print(f"merge_traces: {path}: dropped a torn last event", file=sys.stderr)
            merged.extend(events)
        write_merged(args.output, merged)
    except (ValueError, metrics.MetricsError) as e:  # each message names its file
        print(f"merge_traces: {e}", file=sys.stderr)
        return 1
    print(f"merge_traces: {len(merged)} events from {len(args.parts)} part(s) -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
