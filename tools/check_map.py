#!/usr/bin/python3
"""Checks that docs/ARCHITECTURE.md's map of dpgossip is true to the code.

    tools/check_map.py [--root DIR] [--only includes,...]

includes: every #include of the C++ sources under the rooms below follows ROOMS (whose project
          headers a room may include) and THIRD_PARTY (which rooms may include a library's
          headers); PENDING lists the known exceptions that are being removed.
meson:    docs/ARCHITECTURE.md's table of meson targets names every static_library, shared_module and
          executable outside tests/, each with exactly the sources its meson.build gives it.
algos:    tools/sweep.py's ALGOS are the names of the Algo enum (EnumNames<Algo> in
          runtime/core/train_config.h), in order, and GRAPH_ALGOS only names from them.
walkthrough: docs/ARCHITECTURE.md's walk-through of adding an algorithm quotes the algorithm
          table's line (runtime/train/algorithm.cc) as it is, and names the file of its factory.
config:   docs/TRAINING.md's table of config fields has one row per field of the config table
          (runtime/core/train_config.cc) and no other, each with TrainConfig's default.
entropy:  no C++ source draws from std::random_device (libstdc++'s reads the CPU's RDRAND, not
          the OS): secrets and unique ids come from runtime/core/os_random.h (getrandom(2)).

Exit status 0 when every check holds, 1 with one line per violation (file:line: what) otherwise,
2 for a usage error. Python 3 standard library only; meson runs it as the test `map`.
"""

import argparse
import ast
import fnmatch
import os
import re
import sys

# The rooms and, for each, the rooms whose project headers it may include besides its own. They
# follow the meson dependencies (each room a static_library whose dependencies are its arrows)
# and docs/ARCHITECTURE.md. A file belongs to the longest room that is a prefix of its path.
RUNTIME = ["runtime/core", "runtime/data", "runtime/net", "runtime/collective",
           "runtime/collective/nccl", "runtime/model", "runtime/train", "runtime/process"]
ROOMS = {
    "runtime/core": [],
    "runtime/data": ["runtime/core"],
    "runtime/net": ["runtime/core"],
    "runtime/net/tcp": ["runtime/core", "runtime/net"],
    "runtime/net/shm": ["runtime/core", "runtime/net"],
    "runtime/net/inproc": ["runtime/core", "runtime/net"],
    "runtime/collective": ["runtime/core", "runtime/net"],
    "runtime/collective/nccl": ["runtime/core", "runtime/net", "runtime/collective"],
    "runtime/model": ["runtime/core"],
    # device_mlp_impl.h and its parts: only the CUDA and host instances include them; everyone
    # else reaches the device model through runtime/model/device_mlp.h.
    "runtime/model/cuda": ["runtime/core", "runtime/model"],
    # Not collective/nccl nor model/cuda: apps/ chooses the backends, as it does for transports.
    # runtime/net for the operation ids of ops.h (the transport reaches it through collective).
    "runtime/train": ["runtime/core", "runtime/data", "runtime/net", "runtime/collective",
                      "runtime/model", "topology", "dp"],
    "runtime/process": ["runtime/core"],
    # The status page's HTTP server: handlers in, responses out; it knows no run.
    "runtime/http": ["runtime/core"],
    "topology": ["runtime/core"],
    "dp": ["runtime/core"],
    # apps/ picks the concrete transports and backends; the in-process fabric is for tests only.
    "apps": RUNTIME + ["runtime/net/tcp", "runtime/net/shm", "runtime/http", "topology", "dp",
                       "apps/bench"],
    "apps/bench": RUNTIME + ["runtime/net/tcp", "runtime/net/shm", "topology", "dp", "apps"],
    # The baseline programs link no dpgossip library but the process supervisor.
    "tools": ["runtime/core", "runtime/process"],
    "tests": None,  # any room: tests reach into what they test
}
# Top-level folders that hold the rooms; a quoted include starting with one is a project header.
TOP = sorted({room.split("/")[0] for room in ROOMS})
SOURCE_EXT = (".h", ".hpp", ".cc", ".cpp", ".cu", ".cuh")

# Third-party headers (matched at the start of the include's path) and the only rooms that may
# include them.
CUDA_ROOMS = ["runtime/model/cuda", "runtime/collective/nccl", "tests"]
THIRD_PARTY = [
    (r"boost/(asio|beast)", ["runtime/net/tcp", "runtime/http"],
     "Asio and Beast: only the TCP transport and the status page's HTTP server"),
    (r"openssl/ssl\.h", ["runtime/net/tcp"], "TLS streams: only the TCP transport"),
    (r"(cuda|cublas|curand|nccl|thrust/|cub/)", CUDA_ROOMS,
     "CUDA, NCCL and Thrust: only */cuda/, runtime/collective/nccl and their tests"),
    (r"CLI/", ["apps", "apps/bench"], "CLI11: only the command line"),
    (r"(gloo/|mpi\.h)", ["tools"], "Gloo and MPI: only the baseline programs"),
]

# Standard headers some rooms may not include, with why.
FORBIDDEN_STD = [
    # The std:: engines and distributions differ between standard libraries; where peers must
    # draw alike without talking (graphs, partitions, initialisation, noise), dpg::Rng draws.
    (r"random$", ["topology", "dp", "runtime/data", "runtime/model"],
     "std:: distributions differ between standard libraries; draw from dpg::Rng (rng.h)"),
]

# Known violations owned by work in progress, each (file, included header, why). Each is matched
# by the header, not the line, and a line of this list is removed with the include.
PENDING = []

# Headers left behind where a header moved from, each forwarding to its new path: nothing but
# a PENDING line may include them, and each goes with its last PENDING line.
FORWARDERS = {}

# Headers that programs linking no dpgossip library include (the MPI baseline): they may include
# no project header.
STANDALONE = ["runtime/core/bench_row.h"]

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def house_rules():
    """The picture's rules that the table itself must keep: returns their violations."""
    problems = []
    for room, may in ROOMS.items():
        for other in may or []:
            if other not in ROOMS:
                problems.append(f"ROOMS: {room} names an unknown room {other}")
        if room.startswith("runtime/") and any(o.split("/")[0] in ("apps", "tools")
                                               for o in may or []):
            problems.append(f"ROOMS: runtime room {room} may not include apps/ or tools/")
        if room in ("topology", "dp") and set(may) - {"runtime/core"}:
            problems.append(f"ROOMS: {room} may include only runtime/core")
    if any(o.startswith("apps") for o in ROOMS["tools"]):
        problems.append("ROOMS: tools/ may not include apps/")
    return problems


def room_of(path):
    """The longest room that is a prefix of path (a '/'-separated relative path), or None."""
    best = None
    for room in ROOMS:
        if path == room or path.startswith(room + "/"):
            if best is None or len(room) > len(best):
                best = room
    return best


def sources(root):
    """The C++ sources under the rooms' top-level folders, as sorted relative paths."""
    found = []
    for top in TOP:
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "build")))
            for name in files:
                if name.endswith(SOURCE_EXT):
                    rel = os.path.relpath(os.path.join(folder, name), root)
                    found.append(rel.replace(os.sep, "/"))
    return sorted(found)


def includes(root, path):
    """(line number, '<' or '"', header) for each #include of the file."""
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            m = INCLUDE_RE.match(line)
            if m:
                yield number, m.group(1), m.group(2).strip()


def check_includes(root):
    """Returns (violations, notes): the includes that break the rooms' rules."""
    problems = house_rules()
    used_pending = set()
    for path in sources(root):
        room = room_of(path)
        if room is None:
            problems.append(f"{path}: in no room of tools/check_map.py's ROOMS")
            continue
        may = ROOMS[room]
        for line, quote, header in includes(root, path):
            where = f"{path}:{line}"
            top = header.split("/")[0]
            if quote == '"' and "/" not in header:
                problems.append(f'{where}: "{header}": include project headers by their path '
                                "from the repository root")
                continue
            if quote == '"' and top in TOP:
                target = room_of(header)
                # A header meson makes at build time (vcs_tag, configure_file) from HEADER.in.
                if not os.path.isfile(os.path.join(root, header)) and \
                        not os.path.isfile(os.path.join(root, header + ".in")):
                    problems.append(f'{where}: "{header}" does not exist')
                    continue
                if path in STANDALONE:
                    problems.append(f'{where}: {path} is included by programs that link no '
                                    f'dpgossip library; it may not include "{header}"')
                    continue
                pending = (path, header)
                if any(pending == (p[0], p[1]) for p in PENDING):
                    used_pending.add(pending)
                    continue
                if header in FORWARDERS and path not in FORWARDERS:
                    problems.append(f'{where}: "{header}" only forwards; include '
                                    f'"{FORWARDERS[header]}"')
                    continue
                if target is None or target == room or may is None or target in may:
                    continue
                allowed = ", ".join([room] + may)
                problems.append(f'{where}: {room}/ may not include "{header}" (room {target}); '
                                f"it may include {allowed}")
                continue
            for pattern, rooms, why in THIRD_PARTY:
                if re.match(pattern, header) and room not in rooms:
                    problems.append(f"{where}: {room}/ may not include <{header}> ({why})")
            for pattern, rooms, why in FORBIDDEN_STD:
                if re.match(pattern, header) and room in rooms:
                    problems.append(f"{where}: {room}/ may not include <{header}> ({why})")
    notes = [f"note: PENDING entry ({p[0]}, {p[1]}) matches no include any more; remove it"
             for p in PENDING if (p[0], p[1]) not in used_pending]
    return problems, notes


def strip_meson_comments(text):
    """The meson text without its comments (a # outside a string to the end of its line)."""
    out, quote = [], False
    i = 0
    while i < len(text):
        c = text[i]
        if c == "'":
            quote = not quote
        elif c == "#" and not quote:
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def split_args(text):
    """The top-level comma-separated arguments of a call's text (between its parentheses)."""
    args, depth, quote, start = [], 0, False, 0
    for i, c in enumerate(text):
        if c == "'":
            quote = not quote
        elif quote:
            continue
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            args.append(text[start:i].strip())
            start = i + 1
    if text[start:].strip():
        args.append(text[start:].strip())
    return args


def call_text(text, open_at):
    """The text between the parenthesis at open_at and its match."""
    depth, quote = 0, False
    for i in range(open_at, len(text)):
        c = text[i]
        if c == "'":
            quote = not quote
        elif quote:
            continue
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return text[open_at + 1:i]
    raise ValueError("unbalanced parentheses")


STRING_RE = re.compile(r"'([^']*)'")
TARGET_RE = re.compile(r"\b(static_library|shared_module|executable)\s*\(")
FILES_RE = re.compile(r"^\s*(\w+)\s*=\s*(files\s*\(|\[)", re.M)


def meson_targets(root):
    """{target name: set of source paths from the root} of every static_library and executable
    outside tests/ (a target defined twice, as the CUDA and NCCL ones with and without their
    library, gets the sources of both)."""
    targets = {}
    for folder, dirs, names in os.walk(root):
        rel_folder = os.path.relpath(folder, root).replace(os.sep, "/")
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "build"))
                         and not (rel_folder == "." and d == "tests"))
        if "meson.build" not in names:
            continue
        with open(os.path.join(folder, "meson.build"), encoding="utf-8") as f:
            text = strip_meson_comments(f.read())
        prefix = "" if rel_folder == "." else rel_folder + "/"
        lists = {}
        for m in FILES_RE.finditer(text):
            body = call_text(text, m.end() - 1) if m.group(2) != "[" else \
                text[m.end():text.index("]", m.end())]
            lists[m.group(1)] = STRING_RE.findall(body)
        for m in TARGET_RE.finditer(text):
            args = [a for a in split_args(call_text(text, m.end() - 1))
                    if not re.match(r"^\w+\s*:", a)]
            if not args or not STRING_RE.fullmatch(args[0]):
                continue
            name = STRING_RE.fullmatch(args[0]).group(1)
            found = targets.setdefault(name, set())
            for a in args[1:]:
                for s in STRING_RE.findall(a) if "'" in a else lists.get(a, []):
                    found.add(prefix + s)
    return targets


def meson_table(root, doc="docs/ARCHITECTURE.md"):
    """{target: (line number, set of source paths)} of the doc's table of meson targets: the
    table after the line "The meson targets, exactly:". A row's targets are the backticked
    names of its first cell; its sources are the backticked words of its second, where a word
    ending in / is the folder of the words after it and a word may be a glob (matched against
    the folder's files)."""
    path = os.path.join(root, doc)
    rows, inside = {}, False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.startswith("The meson targets, exactly"):
                inside = True
                continue
            if not inside:
                continue
            if not line.startswith("|"):
                if rows:
                    break
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            names = re.findall(r"`([^`]+)`", cells[0])
            if not names or len(cells) < 2:
                continue  # the header and its rule
            folder, files = "", set()
            for word in " ".join(re.findall(r"`([^`]+)`", cells[1])).split():
                if word.endswith("/"):
                    folder = word
                elif any(c in word for c in "*?["):
                    pattern = folder + word
                    base = os.path.join(root, os.path.dirname(pattern))
                    for name in sorted(os.listdir(base)) if os.path.isdir(base) else []:
                        full = os.path.dirname(pattern) + "/" + name
                        if fnmatch.fnmatch(full, pattern):
                            files.add(full)
                else:
                    files.add(folder + word)
            rows[tuple(names)] = (number, files)
    return rows


def check_meson_table(root, doc="docs/ARCHITECTURE.md"):
    """The doc's table of meson targets against the meson.build files."""
    targets = meson_targets(root)
    rows = meson_table(root, doc)
    problems = []
    if not rows:
        return [f"{doc}: no table after \"The meson targets, exactly:\""], []
    listed = set()
    for names, (line, files) in rows.items():
        where = f"{doc}:{line}"
        built = set()
        for name in names:
            if name not in targets:
                problems.append(f"{where}: `{name}` is no static_library, shared_module or executable of "
                                "the meson.build files")
            else:
                built |= targets[name]
            if name in listed:
                problems.append(f"{where}: `{name}` has a second row")
            listed.add(name)
        if all(n in targets for n in names) and files != built:
            extra, missing = sorted(files - built), sorted(built - files)
            problems.append(f"{where}: the sources of {', '.join(names)} differ from meson's: "
                            + "; ".join(s for s in (
                                "listed but not built: " + " ".join(extra) if extra else "",
                                "built but not listed: " + " ".join(missing) if missing else "")
                                if s))
    for name in sorted(set(targets) - listed):
        problems.append(f"{doc}: the meson target `{name}` has no row in the table "
                        f"({' '.join(sorted(targets[name]))})")
    return problems, []


CONFIG_H = "runtime/core/train_config.h"
CONFIG_CC = "runtime/core/train_config.cc"


def read(root, path):
    with open(os.path.join(root, path), encoding="utf-8") as f:
        return f.read()


def enum_names(header_text):
    """{enum: (members, names)} of train_config.h: each enum class's members in order and its
    EnumNames<E> table (the names the JSON, the flags and the sweep use)."""
    members = {m.group(1): [w.strip() for w in m.group(2).split(",") if w.strip()]
               for m in re.finditer(r"enum class (\w+)(?:\s*:\s*[\w:]+)?\s*\{([^}]*)\}",
                                    header_text)}
    names = {m.group(1): re.findall(r'"([^"]*)"', m.group(2))
             for m in re.finditer(r"struct EnumNames<(\w+)>\s*\{[^{]*\{([^}]*)\}", header_text)}
    return {e: (members[e], names.get(e, [])) for e in members}


def check_algos(root, sweep="tools/sweep.py"):
    """tools/sweep.py's ALGOS (and GRAPH_ALGOS) against the names of the Algo enum."""
    enums = enum_names(read(root, CONFIG_H))
    if "Algo" not in enums or not enums["Algo"][1]:
        return [f"{CONFIG_H}: no EnumNames<Algo> table"], []
    names = enums["Algo"][1]
    problems = []
    if len(names) != len(enums["Algo"][0]):
        problems.append(f"{CONFIG_H}: EnumNames<Algo> has {len(names)} names for "
                        f"{len(enums['Algo'][0])} members")
    text = read(root, sweep)
    lists = {}
    for m in re.finditer(r"^(ALGOS|GRAPH_ALGOS)\s*=\s*(\([^)]*\)|\[[^\]]*\])", text, re.M):
        line = text.count("\n", 0, m.start()) + 1
        lists[m.group(1)] = (line, list(ast.literal_eval(m.group(2))))
    if "ALGOS" not in lists:
        return problems + [f"{sweep}: no ALGOS tuple"], []
    line, algos = lists["ALGOS"]
    if algos != names:
        problems.append(f"{sweep}:{line}: ALGOS {algos} differs from {CONFIG_H}'s "
                        f"EnumNames<Algo> {names}")
    line, graph = lists.get("GRAPH_ALGOS", (line, []))
    for a in graph:
        if a not in names:
            problems.append(f"{sweep}:{line}: GRAPH_ALGOS names {a!r}, which is no algorithm")
    return problems, []


def config_defaults(root):
    """{JSON key: default as the docs write it} from TrainConfig's members and the field table
    (field(&C::member, "key", ...))."""
    header = read(root, CONFIG_H)
    enums = enum_names(header)
    body = header[header.index("struct TrainConfig {"):]
    body = body[:body.index("\n};")]
    members = {}
    for m in re.finditer(r"^\s*([\w:<>, ]+?)\s+(\w+)(?:\s*=\s*([^;]*))?;", body, re.M):
        kind, name, value = m.group(1), m.group(2), (m.group(3) or "").strip()
        if not value:
            value = '""'  # a string or a list without an initializer: empty
        elif re.fullmatch(r'"[^"]*"', value):
            value = value[1:-1] or '""'
        elif re.fullmatch(r"\{[^}]*\}", value):
            value = "[" + value[1:-1].strip() + "]"
        elif re.fullmatch(r"\w+::\w+", value):
            enum, member = value.split("::")
            if enum in enums and member in enums[enum][0] and enums[enum][1]:
                value = enums[enum][1][enums[enum][0].index(member)]
        members[name] = value
    keys = re.findall(r'field\(&C::(\w+),\s*"(\w+)"', read(root, CONFIG_CC))
    return [(key, members.get(member)) for member, key in keys]


def same_default(doc, code):
    if doc == code:
        return True
    try:
        return float(doc) == float(code)
    except (TypeError, ValueError):
        return False


def check_config_table(root, doc="docs/TRAINING.md"):
    """The docs' table of config fields (the first table whose header is
    | field | default | meaning |) against the field table and TrainConfig's defaults."""
    fields = config_defaults(root)
    rows, inside = {}, False
    with open(os.path.join(root, doc), encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if re.match(r"\|\s*field\s*\|\s*default\s*\|", line):
                inside = True
                continue
            if inside and not line.startswith("|"):
                break
            m = re.match(r"\|\s*`(\w+)`\s*\|\s*`([^`]*)`\s*\|", line) if inside else None
            if m:
                rows[m.group(1)] = (number, m.group(2))
    if not rows:
        return [f"{doc}: no | field | default | meaning | table"], []
    problems = []
    for key, default in fields:
        if key not in rows:
            problems.append(f"{doc}: the config field `{key}` ({CONFIG_CC}) has no row "
                            f"(default {default})")
        elif not same_default(rows[key][1], default):
            problems.append(f"{doc}:{rows[key][0]}: `{key}`'s default is `{rows[key][1]}` "
                            f"here and {default} in {CONFIG_H}")
    known = {key for key, _ in fields}
    for key, (line, _) in rows.items():
        if key not in known:
            problems.append(f"{doc}:{line}: `{key}` is no field of {CONFIG_CC}'s table")
    return problems, []

WALKTHROUGH_DOC = "docs/ARCHITECTURE.md"
ALGO_TABLE = "runtime/train/algorithm.cc"


def check_walkthrough(root):
    """docs/ARCHITECTURE.md's walk-through of adding an algorithm against the code: the table
    line it quotes is that algorithm's line in runtime/train/algorithm.cc (spaces aside), and the
    file it names defines the factory the line names."""
    text = read(root, WALKTHROUGH_DOC)
    quoted = re.search(r"`(\{Algo::(\w+),[^`]*\})`", text)
    if not quoted:
        return [f"{WALKTHROUGH_DOC}: no quoted table line `{{Algo::...}}` in the walk-through"], []
    line = text.count("\n", 0, quoted.start()) + 1
    algo = quoted.group(2)
    squash = lambda s: re.sub(r"\s+", " ", s).strip()
    table = read(root, ALGO_TABLE)
    entry = re.search(r"\{Algo::" + algo + r",.*?\)\}", table, re.S)
    problems = []
    if not entry:
        return [f"{WALKTHROUGH_DOC}:{line}: {ALGO_TABLE} has no line for Algo::{algo}"], []
    if squash(entry.group(0)) != squash(quoted.group(1)):
        problems.append(f"{WALKTHROUGH_DOC}:{line}: the quoted line {squash(quoted.group(1))!r} "
                        f"differs from {ALGO_TABLE}'s {squash(entry.group(0))!r}")
    factory = re.search(r"DPG_FACTORY\((\w+)\)", entry.group(0))
    source = re.search(r"`(runtime/train/algo_\w+\.cc)`", text)
    if factory and source:
        path = source.group(1)
        body = read(root, path) if os.path.isfile(os.path.join(root, path)) else ""
        if not re.search(r"std::unique_ptr<Algorithm>\s+" + factory.group(1) + r"\(", body):
            problems.append(f"{WALKTHROUGH_DOC}:{line}: {path} does not define "
                            f"{factory.group(1)}, which the quoted line names")
    return problems, []


# The algorithms' room sends only what the types allow (docs/ARCHITECTURE.md, "DP in the
# types"): through the collectives, gossip, the message service or the Communicator's typed
# point-to-point send, never a send posted on a transport, whose bytes are untyped.
WIRE_ROOMS = ["runtime/train"]
SEND_RE = re.compile(r"([A-Za-z_][A-Za-z_0-9]*)\s*(?:\(\s*\))?\s*(?:\.|->)\s*send\s*\(")
TYPED_SENDERS = {"comm", "comm_"}  # collective::Communicator: send() takes a Wire


def check_wire(root):
    """Returns (violations, notes): sends in the algorithms' room that bypass the Wire types."""
    problems = []
    for path in sources(root):
        if room_of(path) not in WIRE_ROOMS:
            continue
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                code = line.split("//", 1)[0]
                for m in SEND_RE.finditer(code):
                    if m.group(1) not in TYPED_SENDERS:
                        problems.append(f"{path}:{number}: {m.group(1)}...send( posts a send on "
                                        "something other than the Communicator: send through "
                                        "comm.send(Wire), a collective, gossip or the message "
                                        "service, which take a Wire (runtime/core/wire.h)")
    return problems, []


ENTROPY_RE = re.compile(r"\brandom_device\b")


def check_entropy(root):
    """Returns (violations, notes): code (not comments) that uses std::random_device."""
    problems = []
    for path in sources(root):
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                if ENTROPY_RE.search(line.split("//", 1)[0]):
                    problems.append(f"{path}:{number}: std::random_device may read the CPU's "
                                    "RDRAND rather than the OS: draw secrets and unique ids "
                                    "through os_random (runtime/core/os_random.h, getrandom(2))")
    return problems, []


CHECKS = {
    "includes": check_includes,
    "wire": check_wire,
    "meson": check_meson_table,
    "algos": check_algos,
    "config": check_config_table,
    "walkthrough": check_walkthrough,
    "entropy": check_entropy,
}


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), help="the repository (default: this script's)")
    parser.add_argument("--only", default=",".join(CHECKS),
                        help="comma-separated checks: " + ", ".join(CHECKS))
    args = parser.parse_args(argv)
    chosen = [c for c in args.only.split(",") if c]
    unknown = [c for c in chosen if c not in CHECKS]
    if unknown:
        parser.error(f"unknown check {', '.join(unknown)}; the checks: {', '.join(CHECKS)}")
    failed = 0
    for name in chosen:
        problems, notes = CHECKS[name](args.root)
        for line in notes:
            print(f"{name}: {line}")
        for line in problems:
            print(f"{name}: {line}")
        print(f"{name}: {'FAILED, ' + str(len(problems)) + ' problem(s)' if problems else 'ok'}")
        failed += bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
