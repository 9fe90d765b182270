#!/usr/bin/env python3
"""Merges peers' trace part files into one Chrome trace, for a run that died before merging.

    tools/merge_traces.py PART... -o OUT

Each part is a JSON array of Trace Event objects, one per line, as dpg::trace::Tracer writes it.
A part cut short by a process killed mid-write keeps its complete event lines (the torn last
line is dropped, with a note on stderr). The output is {"traceEvents":[...],"displayTimeUnit":"ms"},
which chrome://tracing and Perfetto open. Standard library only.
"""
import argparse
import json
import sys


def read_part(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        events = json.loads(text)
    except json.JSONDecodeError:
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
            event = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                dropped += 1
                continue
            raise ValueError(f"{path}: line {i + 2} is not one event object") from None
        if not isinstance(event, dict):
            raise ValueError(f"{path}: line {i + 2} is not one event object")
        events.append(event)
    return events, dropped


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("parts", nargs="+", metavar="PART", help="a peer's part file")
    parser.add_argument("-o", "--output", required=True, metavar="OUT", help="the merged trace")
    args = parser.parse_args(argv)
    merged = []
    for path in args.parts:
        try:
            events, dropped = read_part(path)
        except (OSError, ValueError) as e:
            print(f"merge_traces: {e}", file=sys.stderr)
            return 1
        if dropped:
            print(f"merge_traces: {path}: dropped a torn last event", file=sys.stderr)
        merged.extend(events)
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump({"traceEvents": merged, "displayTimeUnit": "ms"}, f, separators=(",", ":"))
        f.write("\n")
    print(f"merge_traces: {len(merged)} events from {len(args.parts)} part(s) -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
