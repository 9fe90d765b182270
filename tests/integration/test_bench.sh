#!/usr/bin/env bash
# `dpgossip bench allreduce` end to end: 4 peers on 127.0.0.1 beside Gloo and OpenMPI (when their
# programs are built), two paired rounds, every row checked, the ratios consistent with the
# per-baseline ones; TLS beside plain TCP with --tls; the masked secure-aggregation exchange beside
# the plain all-reduce with --secure-aggregation; `bench step` beside a stand-in for the
# PyTorch script; and bad input refused.
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
# The keys of runtime/core/bench_row.h (AllreduceRow), in its order, on every row of every backend.
keys = ["backend", "peers", "bytes", "time_us", "algbw_GBps", "busbw_GBps", "repeats", "ok"]
for line in open(sys.argv[1]):
    o = json.loads(line)
    if "backend" in o and list(o) != keys:
        sys.exit(f"row keys {list(o)} are not {keys}")
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
# --rows-out with --peers writes the merged rows too (it was once ignored).
"$bin" bench allreduce --peers 2 --sizes 4K,96K --rounds 1 --warmup 5 --repeats 20 --json \
  --transport tcp --rows-out "$work/tcp-rows.jsonl" >"$work/tcp.jsonl" 2>"$work/err.log" ||
  { cat "$work/err.log" >&2; fail "bench allreduce --transport tcp failed"; }
[[ $(grep -c '"backend":"dpgossip".*"ok":true' "$work/tcp.jsonl") == 2 ]] ||
  fail "bench allreduce --transport tcp: $(cat "$work/tcp.jsonl")"
[[ $(grep -c '"backend":"dpgossip".*"ok":true' "$work/tcp-rows.jsonl") == 2 ]] ||
  fail "bench allreduce --peers --rows-out: $(cat "$work/tcp-rows.jsonl" 2>&1)"
expect_error "--transport: expected auto, tcp, shm or nccl" \
  "$bin" bench allreduce --peers 2 --transport udp
grep -q '"limit":"tcp_loopback_stream"' "$work/tcp.jsonl" &&
  grep -q '"ratio":"sent/loopback"' "$work/tcp.jsonl" ||
  fail "bench allreduce --transport tcp: no loopback limit or share: $(cat "$work/tcp.jsonl")"

# The hierarchical all-reduce across real processes: 2 emulated hosts x 4 peers (shared memory
# within, TCP across); every row's sum is checked against the closed form on every rank, so
# "ok" means it gave exactly the flat all-reduce's result, at sizes on the doubling, the
# halving-doubling and the ring's paths of the groups.
"$bin" bench allreduce --peers 8 --emulated-hosts 2 --hierarchical --sizes 4K,96K,2M --rounds 1 \
  --warmup 2 --repeats 3 --json >"$work/hier.jsonl" 2>"$work/err.log" ||
  { cat "$work/err.log" >&2; fail "bench allreduce --hierarchical failed"; }
[[ $(grep -c '"backend":"dpgossip+hier".*"ok":true' "$work/hier.jsonl") == 3 &&
   $(grep -c '"ratio":"time hier/flat"' "$work/hier.jsonl") == 3 ]] ||
  fail "bench allreduce --hierarchical: $(cat "$work/hier.jsonl")"
expect_error "--emulated-hosts: must be in [1, min(--peers, 254)], got 3" \
  "$bin" bench allreduce --peers 2 --emulated-hosts 3

# --tls: plain and TLS rows for every size, both correct, and TLS's time over plain TCP's.
"$bin" bench allreduce --peers 2 --tls --sizes 4K,1M --rounds 2 --warmup 5 --repeats 10 --json \
  >"$work/tls.jsonl" 2>"$work/tls.log" || { cat "$work/tls.log" >&2; fail "bench allreduce --tls failed"; }
py '
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
rows = {(o["backend"], o["bytes"]): o for o in lines if "backend" in o}
ratios = {o["bytes"]: o for o in lines if o.get("ratio") == "time tls/plain"}
for size in (4096, 1 << 20):
    plain, tls = rows[("dpgossip", size)], rows[("dpgossip+tls", size)]
    assert plain["ok"] and tls["ok"], (plain, tls)
    q = ratios[size]
    assert q["rounds"] == 2 and q["min"] <= q["median"] <= q["max"] and q["min"] > 0, q
print("tls/plain time at 4 KiB %.2f, at 1 MiB %.2f" % (ratios[4096]["median"], ratios[1 << 20]["median"]))
' "$work/tls.jsonl" || fail "bench allreduce --tls output"

# --secure-aggregation: beside each plain row, the masked exchange of as many uint32 values (pair
# keys agreed once, pairwise ChaCha20 masks, the exact modular all-reduce), its masked sum checked
# on every rank against the exact sum of the unmasked inputs, and its time over the plain one's.
"$bin" bench allreduce --peers 4 --secure-aggregation --sizes 64K,1M --rounds 2 --warmup 1 \
  --repeats 3 --json >"$work/secagg.jsonl" 2>"$work/secagg.log" ||
  { cat "$work/secagg.log" >&2; fail "bench allreduce --secure-aggregation failed"; }
py '
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
rows = {(o["backend"], o["bytes"]): o for o in lines if "backend" in o}
ratios = {o["bytes"]: o for o in lines if o.get("ratio") == "time secagg/plain"}
for size in (64 << 10, 1 << 20):
    plain, sec = rows[("dpgossip", size)], rows[("dpgossip+secagg", size)]
    assert plain["ok"] and sec["ok"], (plain, sec)
    assert sec["peers"] == 4 and sec["repeats"] == plain["repeats"] == 6 and sec["time_us"] > 0, sec
    q = ratios[size]
    assert q["rounds"] == 2 and q["min"] <= q["median"] <= q["max"] and q["min"] > 0, q
assert len(rows) == 4 and len(ratios) == 2, (rows, ratios)
print("secagg/plain time at 64 KiB %.2f, at 1 MiB %.2f" % (ratios[64 << 10]["median"], ratios[1 << 20]["median"]))
' "$work/secagg.jsonl" || fail "bench allreduce --secure-aggregation output"
expect_error "--secure-aggregation: not with --tls" \
  "$bin" bench allreduce --peers 2 --secure-aggregation --tls
expect_error "--secure-aggregation: not with --hierarchical" \
  "$bin" bench allreduce --peers 2 --secure-aggregation --hierarchical

# bench step beside a PyTorch stand-in (the baseline script's interface: flags in, StepRow lines
# out): run without a shell, with OMP_WAIT_POLICY=PASSIVE, its row read back and kept.
cat >"$work/fake_torch.py" <<'PY'
import argparse, json, os, sys
p = argparse.ArgumentParser()
for flag in ("--widths", "--activation", "--threads", "--batch", "--seconds", "--repeats",
             "--device", "--modes"):
    p.add_argument(flag)
a = p.parse_args()
if os.environ.get("OMP_WAIT_POLICY") != "PASSIVE":
    sys.exit(3)
if a.device != "cpu" or a.modes != "sgd":  # on the CPU, PyTorch's plain step only
    sys.exit(4)
bad = os.environ.get("FAKE_TORCH_BAD")
if bad == "key":
    print(json.dumps({"backend": "torch", "device": "cpu", "mode": "sgd", "threads": int(a.threads), "batch": int(a.batch), "samples": 1}))
elif bad == "device":
    print(json.dumps({"backend": "torch", "device": "gpu", "mode": "sgd", "threads": int(a.threads), "batch": int(a.batch), "samples_per_second": 1.0}))
else:
    print(json.dumps({"backend": "torch", "device": "cpu", "mode": "sgd", "threads": int(a.threads), "batch": int(a.batch), "samples_per_second": 1234.5}))
PY
step=(bench step --widths 8,4 --threads 1 --batch 16 --seconds 0.05 --repeats 1 --rounds 1
      --baseline torch --python /usr/bin/python3 --torch-script "$work/fake_torch.py")
"$bin" "${step[@]}" --json >"$work/step.jsonl" 2>"$work/step.err" ||
  fail "bench step with the stand-in: $(cat "$work/step.err")"
grep -qx '{"backend":"torch","device":"cpu","mode":"sgd","threads":1,"batch":16,"samples_per_second":1234.5}' \
  "$work/step.jsonl" || fail "bench step: the torch row is not kept: $(cat "$work/step.jsonl")"
[[ $(grep -c '^{"backend":"dpgossip","device":"cpu","mode":"' "$work/step.jsonl") == 2 ]] ||
  fail "bench step: want 2 dpgossip rows on the cpu: $(cat "$work/step.jsonl")"
FAKE_TORCH_BAD=key expect_error "fake_torch.py output line 1/samples: unknown key" "$bin" "${step[@]}"
FAKE_TORCH_BAD=device expect_error "fake_torch.py output line 1/device: expected cpu or cuda:N" \
  "$bin" "${step[@]}"
expect_error "--torch-script: $work/none.py not found" "$bin" "${step[@]/"$work/fake_torch.py"/"$work/none.py"}"
expect_error '--device: expected cpu, cuda or cuda:N, got "gpu"' "$bin" bench step --device gpu
expect_error "--secure-noise: the CPU's ChaCha20 noise" "$bin" bench step --device cuda --secure-noise
expect_error "--transport: nccl needs a GPU for every rank" \
  "$bin" bench allreduce --peers 2 --transport nccl
# The device step: rows named cuda:0 on a machine with a GPU; else an error naming the device.
gpu_step=(bench step --device cuda --widths 8,4 --threads 1 --batch 16 --seconds 0.05
          --repeats 1 --rounds 1 --json)
if "$bin" "${gpu_step[@]}" >"$work/gpu.jsonl" 2>"$work/gpu.err"; then
  [[ $(grep -c '^{"backend":"dpgossip","device":"cuda:0","mode":"' "$work/gpu.jsonl") == 2 ]] ||
    fail "bench step --device cuda: want 2 rows on cuda:0: $(cat "$work/gpu.jsonl")"
else
  grep -q -- "--device cuda:0: " "$work/gpu.err" ||
    fail "bench step --device cuda without a GPU: $(cat "$work/gpu.err")"
fi
expect_error "--tls: TLS runs over TCP; --transport shm has none" \
  "$bin" bench allreduce --peers 2 --tls --transport shm

if "$bin" bench allreduce --peers 2 --rounds 0 >"$work/out" 2>"$work/err"; then
  fail "--rounds 0 was accepted"
elif ! grep -q -- "--rounds" "$work/err"; then
  fail "--rounds 0: the error does not name the flag: $(cat "$work/err")"
fi
finish "bench integration"
