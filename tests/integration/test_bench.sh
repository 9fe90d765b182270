#!/usr/bin/env bash
# `dpgossip bench allreduce` end to end: 4 peers on 127.0.0.1 beside Gloo and OpenMPI (when their
# programs are built), two paired rounds, every row checked, the ratios consistent with the
# per-baseline ones; and a bad flag refused.
set -euo pipefail
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

baselines=""
bench_dir="$(dirname "$bin")/../tools/bench"
if [[ -x "$bench_dir/dpgossip-bench-gloo" && -x "$bench_dir/dpgossip-bench-mpi" ]] &&
  command -v mpirun >/dev/null; then
  baselines="gloo,mpi"
fi
"$bin" bench allreduce --peers 4 --sizes 4K,96K --rounds 2 --warmup 5 --repeats 20 --json \
  ${baselines:+--baseline "$baselines"} >"$work/rows.jsonl" 2>"$work/err.log" ||
  { cat "$work/err.log" >&2; fail "bench allreduce failed"; }

BASELINES="$baselines" py '
import json, os, sys
rows, ratios = {}, {}
for line in open(sys.argv[1]):
    o = json.loads(line)
    if "limit" in o:
        if not o["GBps"] > 0: sys.exit(f"limit {o}")
        continue
    if "backend" in o:
        rows[(o["backend"], o["bytes"])] = o
    else:
        ratios[(o["ratio"], o["bytes"])] = o
backends = ["dpgossip"] + [{"mpi": "openmpi"}.get(b, b) for b in os.environ["BASELINES"].split(",") if b]
bad = []
for b in backends:
    for size in (4096, 98304):
        r = rows.get((b, size))
        if r is None or not r["ok"] or r["repeats"] != 40 or r["time_us"] <= 0:
            bad.append(f"row {b} {size}: {r}")
for size in (4096, 98304):
    if len(backends) == 3:
        g, m, best = (ratios.get((k, size)) for k in ("busbw/gloo", "busbw/mpi", "busbw/best"))
        if None in (g, m, best):
            bad.append(f"ratios missing at {size}")
            continue
        for q in (g, m, best):
            if q["rounds"] != 2 or not q["min"] <= q["median"] <= q["max"] or q["min"] <= 0:
                bad.append(f"ratio {q}")
        # Per round best = min(ratio to gloo, ratio to mpi).
        if abs(best["min"] - min(g["min"], m["min"])) > 1e-9 or best["max"] > min(g["max"], m["max"]) + 1e-9:
            bad.append(f"best {best} against {g} and {m}")
    elif ratios:
        bad.append(f"ratios without baselines: {ratios}")
if bad:
    sys.exit("\n".join(bad))
times = {k: r["time_us"] for k, r in rows.items()}
print("bench rows:", ", ".join(f"{b}@{s}: {t:.0f} us" for (b, s), t in sorted(times.items())))
' "$work/rows.jsonl" || fail "bench allreduce output"

# The same over TCP (the run above used shared memory, the default between local peers).
"$bin" bench allreduce --peers 2 --sizes 4K,96K --rounds 1 --warmup 5 --repeats 20 --json \
  --transport tcp >"$work/tcp.jsonl" 2>"$work/err.log" ||
  { cat "$work/err.log" >&2; fail "bench allreduce --transport tcp failed"; }
[[ $(grep -c '"backend":"dpgossip".*"ok":true' "$work/tcp.jsonl") == 2 ]] ||
  fail "bench allreduce --transport tcp: $(cat "$work/tcp.jsonl")"
expect_error "--transport: expected auto, tcp or shm" \
  "$bin" bench allreduce --peers 2 --transport udp

if "$bin" bench allreduce --peers 2 --rounds 0 >"$work/out" 2>"$work/err"; then
  fail "--rounds 0 was accepted"
elif ! grep -q -- "--rounds" "$work/err"; then
  fail "--rounds 0: the error does not name the flag: $(cat "$work/err")"
fi
finish "bench integration"
