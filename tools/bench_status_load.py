#!/usr/bin/python3
"""The status page under bad clients (docs/STATUS.md, "Bounds"): rank 0's memory and open files.

Usage:
  /usr/bin/python3 tools/bench_status_load.py BIN DATA_DIR [--idle N] [--partial M]

Starts a 4-peer gossip run with `launch --status-port 0` on DATA_DIR (a prepared folder), then,
while it trains, opens N connections to the page and leaves them idle, sends M of them a header
that never ends, and reports rank 0's resident memory (VmRSS) and open file descriptors before,
with them, and after the server's 5 s timeouts; then waits for the run, which must succeed.
Exits 1 when the run fails or the page never comes up.
"""
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


def fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("data")
    ap.add_argument("--idle", type=int, default=1000)
    ap.add_argument("--partial", type=int, default=200)
    a = ap.parse_args()
    log = tempfile.NamedTemporaryFile(prefix="dpg-status-load-", suffix=".log", delete=False)
    run = subprocess.Popen(
        [a.bin, "launch", "--peers", "4", "--status-port", "0", "--", "train", "--algo", "gossip",
         "--topology", "ring", "--epochs", "60", "--data", a.data, "--threads", "1",
         "--noise-multiplier", "1.1", "--metrics", ""],
        stdout=subprocess.DEVNULL, stderr=log)
    try:
        port = pid = None
        deadline = time.time() + 120
        while (port is None or pid is None) and time.time() < deadline and run.poll() is None:
            text = open(log.name, errors="replace").read()
            m = re.search(r"status page on http://127.0.0.1:(\d+)", text)
            port = port or (m and int(m.group(1)))
            m = re.search(r"\[0\] \[info\] \S+ pid (\d+) rank 0", text)
            pid = pid or (m and int(m.group(1)))
            time.sleep(0.1)
        if port is None or pid is None:
            print("bench_status_load: no status page (see %s)" % log.name, file=sys.stderr)
            return 1
        # Measured once training runs: the set-up (data, calibration) grows the process first.
        while time.time() < deadline + 120:
            with urllib.request.urlopen("http://127.0.0.1:%d/api/status" % port, timeout=5) as r:
                if json.loads(r.read())["step"] > 10:
                    break
            time.sleep(0.2)
        before = (rss_kib(pid), fds(pid))
        socks = []
        for _ in range(a.idle):
            try:
                socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            except OSError:
                pass
        time.sleep(1)
        idle = (rss_kib(pid), fds(pid))
        for s in socks[:a.partial]:
            try:
                s.sendall(b"GET /api/status HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 7000)
            except OSError:
                pass  # already closed by the server: past its connection bound
        time.sleep(1)
        partial = (rss_kib(pid), fds(pid))
        time.sleep(6)
        after = (rss_kib(pid), fds(pid))
        for s in socks:
            s.close()
        print("rank 0 (pid %d), VmRSS KiB and open fds:" % pid)
        print("  before                          %8d KiB  %4d fds" % before)
        print("  %4d connections open, idle     %8d KiB  %4d fds" % ((len(socks),) + idle))
        print("  %4d of them mid-header         %8d KiB  %4d fds" % ((min(a.partial, len(socks)),) + partial))
        print("  6 s later (the 5 s timeouts)    %8d KiB  %4d fds" % after)
        rc = run.wait(timeout=600)
        print("the run exited %d" % rc)
        return 0 if rc == 0 else 1
    finally:
        if run.poll() is None:
            run.kill()
        os.unlink(log.name)


if __name__ == "__main__":
    sys.exit(main())
