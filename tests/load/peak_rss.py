#!/usr/bin/python3
"""Starts N peers of one command, waits for each (bounded), and prints one JSON line per peer with
its exit status and peak resident memory (ru_maxrss from wait4, which the kernel keeps for a
child that has exited). Usage: peak_rss.py N DEADLINE_S LOG_DIR -- COMMAND... with {rank} in it."""
import json
import os
import signal
import sys
import time

n, deadline_s, log_dir = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
command = sys.argv[sys.argv.index("--") + 1:]
pids = {}
for rank in range(n):
    argv = [a.replace("{rank}", str(rank)) for a in command]
    log = os.open(os.path.join(log_dir, f"rank-{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    pid = os.fork()
    if pid == 0:
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.execv(argv[0], argv)
    os.close(log)
    pids[pid] = rank
until = time.monotonic() + deadline_s
results = {}
while pids:
    if time.monotonic() > until:
        for pid in pids:  # only the peers started here
            os.kill(pid, signal.SIGKILL)
        for pid, rank in list(pids.items()):
            os.waitpid(pid, 0)
            results[rank] = {"rank": rank, "status": "killed at the deadline", "peak_rss_bytes": None}
        break
    pid, status, usage = os.wait4(-1, os.WNOHANG)
    if pid == 0:
        time.sleep(0.05)
        continue
    rank = pids.pop(pid)
    code = os.waitstatus_to_exitcode(status)
    results[rank] = {"rank": rank, "status": code, "peak_rss_bytes": usage.ru_maxrss * 1024}
for rank in sorted(results):
    print(json.dumps(results[rank]))
