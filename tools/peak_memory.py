#!/usr/bin/python3
"""Runs a command and reports the memory its processes took at their peak.

Every INTERVAL seconds it reads /proc/PID/smaps_rollup of the command and of each process it
started (the whole tree), and records
  - the peak of the tree's summed proportional set size (Pss: a shared page counts 1/N to each
    of the N processes mapping it, so the sum is what the tree costs the machine),
  - each dpgossip peer's own peak Pss and peak resident size (VmHWM), and for each peer (by its
    --rank) its peak Pss and how many seconds after the start it came.
What the launcher estimated (its "launch: N local peers at about X each" line) is read from the
command's output when it printed one.

  tools/peak_memory.py [--interval S] [--json FILE] -- build/apps/dpgossip launch --peers 4 -- train ...

Prints one summary line per figure; --json also writes them as one JSON object. Exits with the
command's status (after printing), or 2 when the command could not start.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time


def children_of():
    """{ppid: [pid, ...]} over every process this user can see."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        out.setdefault(ppid, []).append(int(name))
    return out


def tree(root):
    kids, todo, seen = children_of(), [root], []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo.extend(kids.get(p, []))
    return seen


def pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def status_field(pid, field):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def argv_of(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def is_peer(args):
    """A dpgossip process that is not the launcher itself."""
    return bool(args) and os.path.basename(args[0]) == "dpgossip" and "launch" not in args[1:2]


def rank_of(args):
    """The --rank a launcher gave a peer, or None."""
    for i, x in enumerate(args):
        if x == "--rank" and i + 1 < len(args) and args[i + 1].isdigit():
            return int(args[i + 1])
        if x.startswith("--rank=") and x[7:].isdigit():
            return int(x[7:])
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--interval", type=float, default=0.02)
    ap.add_argument("--json", default="")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("no command after --")
    if not 0.001 <= a.interval <= 10:
        ap.error("--interval must be in [0.001, 10] seconds")
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace")
    except OSError as e:
        print(f"peak_memory.py: cannot start {cmd[0]}: {e}", file=sys.stderr)
        return 2
    out_lines = []
    os.set_blocking(proc.stdout.fileno(), False)
    peak_sum, peers = 0, {}  # pid -> {"pss": KiB, "hwm": KiB}
    start = time.monotonic()
    while True:
        done = proc.poll() is not None
        total = 0
        for pid in tree(proc.pid):
            p = pss_kib(pid)
            if p is None:
                continue
            total += p
            if pid != proc.pid and is_peer(argv_of(pid)):
                rec = peers.setdefault(pid, {"pss": 0, "hwm": 0, "at": 0.0,
                                             "rank": rank_of(argv_of(pid))})
                if p > rec["pss"]:
                    rec["pss"], rec["at"] = p, time.monotonic() - start
                rec["hwm"] = max(rec["hwm"], status_field(pid, "VmHWM") or 0)
        peak_sum = max(peak_sum, total)
        try:
            chunk = proc.stdout.read()
        except (BlockingIOError, TypeError):
            chunk = None
        if chunk:
            sys.stdout.write(chunk)
            out_lines.append(chunk)
        if done:
            break
        time.sleep(a.interval)
    wall = time.monotonic() - start
    text = "".join(out_lines)
    m = re.search(r"launch: \d+ local peers at about (\d+) bytes", text)
    estimate_mib = int(m.group(1)) / 2**20 if m else None
    mib = lambda k: k / 1024
    pss = sorted(mib(r["pss"]) for r in peers.values())
    res = {
        "command": cmd, "rc": proc.returncode, "wall_s": round(wall, 2),
        "peak_tree_pss_mib": round(mib(peak_sum), 1), "peers_seen": len(peers),
        "peer_peak_pss_mib": {"min": round(pss[0], 1), "median": round(pss[len(pss) // 2], 1),
                              "max": round(pss[-1], 1)} if pss else None,
        "peer_peak_rss_mib_max": round(max(mib(r["hwm"]) for r in peers.values()), 1) if peers else None,
        "launcher_estimate_mib": estimate_mib,
        # Each peer's own peak and when it came (seconds after the command started).
        "peers": [{"rank": r["rank"], "peak_pss_mib": round(mib(r["pss"]), 1),
                   "at_s": round(r["at"], 2)}
                  for r in sorted(peers.values(), key=lambda r: (r["rank"] is None, r["rank"] or 0))],
    }
    if estimate_mib and peers:
        per_peer = mib(peak_sum) / len(peers)
        res["tree_pss_per_peer_mib"] = round(per_peer, 1)
        res["estimate_over_measured"] = round(estimate_mib / per_peer, 3)
    print("peak_memory: " + json.dumps(res))
    if a.json:
        tmp = a.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(res, f)
            f.write("\n")
        os.replace(tmp, a.json)
    return proc.returncode if proc.returncode >= 0 else 128 - proc.returncode


if __name__ == "__main__":
    sys.exit(main())
