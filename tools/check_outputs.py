#!/usr/bin/python3
"""Fails on a metrics or summary field that docs/PRIVACY.md does not list with its status.

    tools/check_outputs.py [--doc docs/PRIVACY.md] FILE...

Each FILE holds JSON objects, one per line (a metrics file, a --json summary, a launcher's output
whose lines start with a rank prefix such as "[0] "): every top-level key of every object must be
named in the first column of the doc's table under "### Every field of the metrics lines and the
summary". Exit status 0 when every key has a row, 1 with one line per missing key (the key, the
file and the line's kind), 2 for a usage error or a file that cannot be read.
"""

import argparse
import json
import os
import re
import sys

HEADING = "### Every field of the metrics lines and the summary"


def listed_fields(doc):
    """The backticked names in the first column of the table under HEADING."""
    with open(doc, encoding="utf-8") as f:
        text = f.read()
    at = text.find(HEADING)
    if at < 0:
        raise ValueError(f"{doc}: no section {HEADING!r}")
    names = set()
    in_table = False
    for line in text[at:].splitlines()[1:]:
        if line.startswith("#"):
            break
        if not line.startswith("|"):
            if in_table:
                break
            continue
        in_table = True
        first = line.split("|")[1]
        names.update(re.findall(r"`([A-Za-z0-9_]+)`", first))
    if not names:
        raise ValueError(f"{doc}: the table under {HEADING!r} names no field")
    return names


def objects(path):
    """(line number, object) for every JSON object in the file."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            start = line.find("{")
            if start < 0:
                continue
            try:
                value = json.loads(line[start:])
            except json.JSONDecodeError:
                continue  # a log line that holds a brace
            if isinstance(value, dict):
                yield number, value


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--doc", default=os.path.join(root, "docs", "PRIVACY.md"))
    parser.add_argument("files", nargs="+")
    args = parser.parse_args(argv)
    try:
        known = listed_fields(args.doc)
    except (OSError, ValueError) as e:
        print(f"check_outputs: {e}", file=sys.stderr)
        return 2
    missing = {}
    seen = 0
    for path in args.files:
        try:
            for number, obj in objects(path):
                seen += 1
                for key in obj:
                    if key not in known and key not in missing:
                        missing[key] = f"{path}:{number} ({obj.get('kind', 'summary')})"
        except OSError as e:
            print(f"check_outputs: {path}: {e.strerror}", file=sys.stderr)
            return 2
    if seen == 0:
        print("check_outputs: no JSON object in " + ", ".join(args.files), file=sys.stderr)
        return 2
    for key, where in sorted(missing.items()):
        print(f"check_outputs: field `{key}` at {where} has no row in {args.doc}'s table "
              f"\"{HEADING[4:]}\": say what it is computed from and who sees it")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
