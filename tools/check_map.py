#!/usr/bin/python3
"""Checks that docs/ARCHITECTURE.md's map of dpgossip is true to the code.

    tools/check_map.py [--root DIR] [--only includes,...]

includes: every #include of the C++ sources under the rooms below follows ROOMS (whose project
          headers a room may include) and THIRD_PARTY (which rooms may include a library's
          headers); PENDING lists the known exceptions that are being removed.

Exit status 0 when every check holds, 1 with one line per violation (file:line: what) otherwise,
2 for a usage error. Python 3 standard library only; meson runs it as the test `map`.
"""

import argparse
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
    "topology": ["runtime/core"],
    "dp": ["runtime/core"],
    # apps/ picks the concrete transports and backends; the in-process fabric is for tests only.
    "apps": RUNTIME + ["runtime/net/tcp", "runtime/net/shm", "topology", "dp", "apps/bench"],
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
    (r"boost/asio", ["runtime/net/tcp"], "Asio: only the TCP transport"),
    (r"openssl/ssl\.h", ["runtime/net/tcp"], "TLS streams: only the TCP transport"),
    (r"(cuda|cublas|curand|nccl|thrust/|cub/)", CUDA_ROOMS,
     "CUDA, NCCL and Thrust: only */cuda/, runtime/collective/nccl and their tests"),
    (r"CLI/", ["apps", "apps/bench"], "CLI11: only the command line"),
    (r"(gloo/|mpi\.h)", ["tools"], "Gloo and MPI: only the baseline programs"),
]

# Known violations owned by work in progress, each (file, included header, why). Each is matched
# by the header, not the line, and a line of this list is removed with the include.
PENDING = [
    # The trainer picks the NCCL collectives itself; the choice is moving to apps/, which picks
    # the transports already (issue 28: a run set up in one place). Being removed.
    ("runtime/train/trainer.cc", "runtime/collective/nccl/nccl_communicator.h",
     "the trainer's NCCL choice moves to apps/"),
    # The bench command (edited elsewhere) still includes the supervisor's old paths, which
    # forward to runtime/process; its includes change to FORWARDERS' targets. Being removed.
    ("apps/bench/cmd_bench.cc", "apps/process/find.h", "include runtime/process/find.h"),
    ("apps/bench/cmd_bench.cc", "apps/process/run.h", "include runtime/process/run.h"),
    ("apps/bench/cmd_bench.cc", "apps/bench/row.h", "include runtime/core/bench_row.h"),
]

# Headers left behind where a header moved from, each forwarding to its new path: nothing but
# a PENDING line may include them, and each goes with its last PENDING line.
FORWARDERS = {
    "apps/process/find.h": "runtime/process/find.h",
    "apps/process/run.h": "runtime/process/run.h",
    "apps/bench/row.h": "runtime/core/bench_row.h",
}

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
                if not os.path.isfile(os.path.join(root, header)):
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
    notes = [f"note: PENDING entry ({p[0]}, {p[1]}) matches no include any more; remove it"
             for p in PENDING if (p[0], p[1]) not in used_pending]
    return problems, notes


CHECKS = {
    "includes": check_includes,
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
