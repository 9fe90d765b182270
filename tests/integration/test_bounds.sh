#!/usr/bin/env bash
# Every input bounded, every result honest (docs/LIMITS.md): hostile headers, a compressed file
# that inflates past its header, a huge label, out-of-range flags, duplicate JSON keys, failing
# writes, a model that cannot fit, and a launcher asked for thousands of local peers. Each must
# end at once with a non-zero exit and a message naming the file or the flag.
# Usage: test_bounds.sh path/to/dpgossip
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

exe="$1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# expect_quick_error WANT CMD...: as expect_error, and within 5 s (hostile input must not make
# dpgossip work for long); the command is killed past that.
expect_quick_error() {
  local want="$1"
  shift
  expect_error "$want" timeout -s KILL 5 "$@"
}

# ---- Sizes that come from outside: a 16-byte IDX header whose product wraps 64 bits ----------
py '
import gzip, struct, sys
w = sys.argv[1]
for d in ("wrap", "bomb"):
    import os; os.makedirs(f"{w}/{d}", exist_ok=True)
for s in ("train", "t10k"):
    open(f"{w}/wrap/{s}-images-idx3-ubyte", "wb").write(struct.pack(">IIII", 0x803, 1 << 22, 1 << 21, 1 << 21))
    open(f"{w}/wrap/{s}-labels-idx1-ubyte.gz", "wb").write(gzip.compress(struct.pack(">II", 0x801, 1 << 22) + bytes(1 << 22)))
    # 1 image of 2x2 promised, 64 MiB of zeros behind it (about 64 KiB compressed).
    open(f"{w}/bomb/{s}-images-idx3-ubyte.gz", "wb").write(gzip.compress(struct.pack(">IIII", 0x803, 1, 2, 2) + bytes(4 + (64 << 20))))
    open(f"{w}/bomb/{s}-labels-idx1-ubyte", "wb").write(struct.pack(">II", 0x801, 1) + bytes(1))
rows = ["%d,0.5,0.25,0.125" % (i % 3) for i in range(200)]
open(f"{w}/train.csv", "w").write("\n".join(rows) + "\n")
open(f"{w}/test.csv", "w").write("\n".join(rows[:60]) + "\n")
rows[7] = "2000000000,0.5,0.25,0.125"
open(f"{w}/huge.csv", "w").write("\n".join(rows) + "\n")
' "$work"
expect_quick_error "train-images-idx3-ubyte: the IDX dimensions 4194304x2097152x2097152 overflow" \
  "$exe" prepare --idx-dir "$work/wrap" --out "$work/out-wrap"
[[ ! -e $work/out-wrap ]] || fail "a data set was written from a wrapped header"

# ---- Memory bounded by what an input weighs: inflation stops one byte past the header --------
expect_quick_error "train-images-idx3-ubyte.gz: holds (or inflates to) more than the 20 bytes" \
  "$exe" prepare --idx-dir "$work/bomb" --out "$work/out-bomb"
[[ ! -e $work/out-bomb ]] || fail "a data set was written from an over-long compressed file"
expect_quick_error "huge.csv: the largest label, 2000000000, would make 2000000001 classes" \
  "$exe" prepare --format csv --train-csv "$work/huge.csv" --test-csv "$work/test.csv" \
  --out "$work/out-huge"
expect_quick_error "num_classes must be in [0, 1048576]" \
  "$exe" prepare --format csv --train-csv "$work/train.csv" --test-csv "$work/test.csv" \
  --num-classes 2000000000 --out "$work/out-classes"

# A small real data set for the training checks.
"$exe" prepare --format csv --train-csv "$work/train.csv" --test-csv "$work/test.csv" \
  --out "$work/tiny" >/dev/null
plain=(train --data "$work/tiny" --noise-multiplier 1 --threads 1 --noise-seed 1)
base=("${plain[@]}" --metrics "$work/metrics.jsonl")
run=("${base[@]}" --epochs 1 --batch-size 20 --hidden 8)
"$exe" "${run[@]}" --json >/dev/null || fail "the tiny run itself fails"

# A model that cannot fit is refused with its estimate and what the machine has.
expect_quick_error "needs about" "$exe" "${base[@]}" --epochs 1 --batch-size 20 --hidden 1048576,1048576
expect_quick_error "this machine has" "$exe" "${base[@]}" --epochs 1 --batch-size 20 --hidden 1048576,1048576

# ---- Numbers from the command line and config files -----------------------------------------
expect_quick_error "/epochs: must be in (0, 1000000], got 1e+300" "$exe" "${base[@]}" --batch-size 20 --epochs 1e300
expect_quick_error "/timeout_s: must be in (0, 1000000]" "$exe" "${run[@]}" --timeout-s 1e300
expect_quick_error "/batch_size: must be in [1, 1000000000]" "$exe" "${base[@]}" --batch-size 1e30
expect_quick_error "/topology_schedule" "$exe" "${run[@]}" --algo gossip --topology-schedule step:1e300=ring
long=$(printf '9%.0s' {1..3000})
err=$("$exe" "${base[@]}" --epochs "${long}x" 2>&1 >/dev/null || true)
((${#err} < 300)) || fail "a 3000-character bad value is quoted whole: ${#err} characters"
grep -qF -- "/epochs" <<<"$err" || fail "the error for a long --epochs does not name it: ${err:0:200}"
expect_quick_error "--timeout-s: must be in (0, 1000000]" "$exe" bench allreduce --peers 2 --timeout-s 1e300
expect_quick_error "--steps must be in [1, 1e15]" \
  "$exe" privacy --sample-rate 0.01 --noise-multiplier 1 --steps 9000000000000000000 --delta 1e-5
expect_quick_error "--peers: must be in [2, 1024] (local processes), got 0" "$exe" bench allreduce --peers 0
expect_quick_error "--peers: must be in [2, 1024] (local processes), got 1" "$exe" bench allreduce --peers 1
expect_quick_error "--seconds: must be in (0, 3600], got 1e+300" "$exe" bench step --seconds 1e300
# A size the machine cannot hold is refused before a peer starts, naming the flag (it used to be
# killed by the kernel's OOM killer, or fail with a bare "out of memory").
expect_quick_error "bench allreduce: 2 peers with --sizes up to 1099511627776 bytes (1.0 TiB) needs about" \
  "$exe" bench allreduce --peers 2 --sizes 1048576M
# OpenBLAS runs at most the threads it was built for (64 in Debian's): no row claims more.
expect_quick_error "threads: this OpenBLAS runs at most" "$exe" bench step --threads 100000 --batch 8
expect_quick_error "--peer-memory-mb must be in [0, 1048576]" "$exe" launch --peers 2 --peer-memory-mb nan -- train
expect_quick_error "--seed: a seed is an integer >= 0, got -1" "$exe" prepare --seed -1 --out "$work/out-seed"
expect_quick_error "--seed: a seed is an integer >= 0, got -1" "$exe" topology --kind random-regular \
  --peers 8 --degree 3 --seed -1
expect_quick_error "--topology-seed: a seed is an integer >= 0, got -1" "$exe" privacy \
  --sample-rate 0.01 --noise-multiplier 1 --steps 10 --delta 1e-5 --topology random-regular \
  --peers 8 --topology-degree 3 --topology-seed -1
printf '{"epochs": 1, "hidden": [8], "epochs": 2}\n' >"$work/dup.json"
expect_quick_error 'dup.json: the key "epochs" appears twice' "$exe" train --config "$work/dup.json"

# A run of one peer gossips with nobody, yet its graphs are checked as a run with peers checks
# them: a typo shows on the first try.
expect_quick_error '/topology: unknown topology "nosuch"' "$exe" "${run[@]}" --algo gossip --topology nosuch
expect_quick_error "$work/none.json: cannot open file" "$exe" "${run[@]}" --algo gossip --topology "$work/none.json"
expect_quick_error '/topology_schedule: entry 0 "epoch:1=nosuch": unknown topology' \
  "$exe" "${run[@]}" --algo gossip --topology-schedule epoch:1=nosuch
printf '{"peers": [{"rank": 0, "host": "127.0.0.1", "port": 29500}], "topology": 5}\n' >"$work/topnum.json"
expect_quick_error "$work/topnum.json: topology: expected a JSON object" \
  "$exe" "${run[@]}" --algo gossip --topology hosts --hosts "$work/topnum.json" --rank 0

# ---- Writes: every failed write is a non-zero exit naming the path ---------------------------
expect_quick_error "metrics: write to /dev/full failed" "$exe" "${plain[@]}" --epochs 1 --batch-size 20 --hidden 8 --metrics /dev/full
rc=0
"$exe" "${run[@]}" --json >/dev/full 2>"$work/stdout-full.err" || rc=$?
[[ $rc != 0 ]] || fail "train --json >/dev/full exits 0"
grep -qF "standard output" "$work/stdout-full.err" || fail "no word of the failed stdout: $(cat "$work/stdout-full.err")"
# An output folder that cannot exist is refused before training starts, not after an epoch.
touch "$work/a-file"
err=$("$exe" "${plain[@]}" --epochs 1 --batch-size 20 --hidden 8 --metrics "$work/a-file/m.jsonl" 2>&1 >/dev/null) && fail "metrics under a file: exit 0"
grep -qF -- "--metrics $work/a-file/m.jsonl" <<<"$err" || fail "metrics under a file: $err"
! grep -q "epoch " <<<"$err" || fail "metrics under a file: training ran first: $err"

# A write cut short by a file size limit leaves the metrics file as it was, every line whole, so
# that the next run's lines and the plot scripts still read it.
# (Its messages go through a pipe: the limit would cut a file of them short too.) 4 KiB: the
# facts line (about 2.5 KiB) and the epoch lines fit, the summary does not.
err=$(trap '' XFSZ; ulimit -f 4; "$exe" "${plain[@]}" --epochs 3 --batch-size 20 --hidden 8 \
  --metrics "$work/limited.jsonl" 2>&1 >/dev/null) && fail "a metrics write past the file size limit exits 0"
grep -qF "the file is as it was before this line" <<<"$err" || fail "the failed metrics write: $err"
[[ -s $work/limited.jsonl && $(tail -c 1 "$work/limited.jsonl" | od -An -c | tr -d ' ') == '\n' ]] ||
  fail "a torn metrics line was left: $(tail -c 80 "$work/limited.jsonl")"
py 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' "$work/limited.jsonl" ||
  fail "the metrics file after a failed write does not parse"
# The same limit with SIGXFSZ at its default (which kills a writer): dpgossip ignores it, so the
# write fails with an error naming the file, the metrics line is not torn and no checkpoint's
# temporary file is left.
rc=0
err=$( (ulimit -f 4; "$exe" "${plain[@]}" --epochs 3 --batch-size 20 --hidden 8 \
  --metrics "$work/xfsz.jsonl") 2>&1 >/dev/null) || rc=$?
[[ $rc == 1 ]] || fail "metrics past the file size limit, SIGXFSZ at its default: exit $rc: $err"
grep -qF "the file is as it was before this line" <<<"$err" || fail "SIGXFSZ metrics: $err"
py 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' "$work/xfsz.jsonl" ||
  fail "a torn metrics line under SIGXFSZ's default"
rc=0
err=$( (ulimit -f 1; "$exe" "${plain[@]}" --epochs 2 --batch-size 20 --hidden 8 --metrics "" \
  --checkpoint-dir "$work/xfsz-ck" --checkpoint-every 2) 2>&1 >/dev/null) || rc=$?
[[ $rc == 1 ]] || fail "a checkpoint past the file size limit: exit $rc: $err"
grep -qF "$work/xfsz-ck/rank-0/step-" <<<"$err" || fail "the failed checkpoint is not named: $err"
[[ -z $(compgen -G "$work/xfsz-ck/rank-0/*.tmp.*") ]] ||
  fail "a failed checkpoint left $(ls "$work"/xfsz-ck/rank-0)"
# A trace that cannot be written (the limit again) is an error, and leaves no empty part file.
err=$(trap '' XFSZ; ulimit -f 0; "$exe" "${plain[@]}" --epochs 1 --batch-size 20 --hidden 8 \
  --metrics "" --trace "$work/limited-trace.json" 2>&1 >/dev/null) && fail "a trace past the file size limit exits 0"
grep -qF "trace: cannot write $work/limited-trace.json.rank0.json" <<<"$err" || fail "the failed trace: $err"
[[ -z $(compgen -G "$work/limited-trace.json*") ]] || fail "a failed trace left $(ls "$work"/limited-trace.json*)"
# An output renamed into place never replaces a FIFO (or a device): refused before training.
mkfifo "$work/fifo"
expect_quick_error "--trace $work/fifo is not a regular file" "$exe" "${run[@]}" --trace "$work/fifo"
[[ -p $work/fifo ]] || fail "the FIFO given as --trace was replaced"
expect_quick_error "metrics: cannot append to $work/fifo: a FIFO that no process reads" \
  "$exe" "${plain[@]}" --epochs 1 --batch-size 20 --hidden 8 --metrics "$work/fifo"

# ---- File kinds: every input is a regular file, checked before it is opened or read ----------
# A FIFO with no writer would block open(); /dev/zero never ends; a folder is no file. Each is
# refused at once, naming the file and what it was to be.
mkfifo "$work/in-fifo"
ln -s /dev/zero "$work/zero.json"
expect_quick_error "$work/in-fifo: is a FIFO, not a JSON file" "$exe" "${run[@]}" --config "$work/in-fifo"
expect_quick_error "$work/zero.json: is a character device, not a JSON file" \
  "$exe" "${run[@]}" --config "$work/zero.json"
expect_quick_error "$work/in-fifo: is a FIFO, not a JSON file" \
  "$exe" "${run[@]}" --algo allreduce --hosts "$work/in-fifo" --rank 0
cp -a "$work/tiny" "$work/tiny-fifo"
shard=$(ls "$work"/tiny-fifo/*.bin | head -1)
rm "$shard" && mkfifo "$shard"
fifo_run=(train --data "$work/tiny-fifo" --noise-multiplier 1 --threads 1 --epochs 1 --batch-size 20
          --hidden 8 --metrics "")
expect_quick_error "$shard: is a FIFO, not a shard file" "$exe" "${fifo_run[@]}"
rm "$work/tiny-fifo/manifest.json" && mkfifo "$work/tiny-fifo/manifest.json"
expect_quick_error "$work/tiny-fifo/manifest.json: is a FIFO, not a JSON file" "$exe" "${fifo_run[@]}"
# A checkpoint that is a FIFO is damage: skipped with a warning naming it, never waited on.
mkdir -p "$work/ck-fifo/rank-0"
mkfifo "$work/ck-fifo/rank-0/step-000000000005.ckpt"
err=$(timeout -s KILL 20 "$exe" "${plain[@]}" --epochs 1 --batch-size 20 --hidden 8 --metrics "" \
  --checkpoint-dir "$work/ck-fifo" --resume 2>&1 >/dev/null) || fail "resume beside a FIFO checkpoint: $err"
grep -qF "$work/ck-fifo/rank-0/step-000000000005.ckpt: is a FIFO, not a checkpoint" <<<"$err" ||
  fail "the FIFO checkpoint is not named: $err"

# ---- The launcher: the --peers cap for hosts files, and a memory check before starting -------
py '
import json, sys
json.dump({"peers": [{"rank": r, "host": "127.0.0.1", "port": 20000 + r} for r in range(3000)]},
          open(sys.argv[1], "w"))
' "$work/many.json"
expect_quick_error "puts 3000 peers on this machine; at most 1024" \
  "$exe" launch --hosts "$work/many.json" -- train --data "$work/tiny" --epochs 1
expect_quick_error "this machine has 60000000 bytes" env DPGOSSIP_MEMORY_BYTES=60000000 \
  "$exe" launch --peers 4 -- train --data "$work/tiny" --epochs 1
# Virtual batches size the step's buffers by the pass, not the batch: the launcher's estimate
# falls with --physical-batch and --batch-memory (a wide layer, a large batch: the buffers lead).
per_peer() {
  local out
  out=$(DPGOSSIP_MEMORY_BYTES=100000000 timeout -s KILL 5 "$exe" launch --peers 4 -- train \
    --data "$work/tiny" --epochs 1 --hidden 4096 --batch-size 8192 "$@" 2>&1) && fail "launch admitted 4 wide peers in 95 MiB"
  sed -n "s/.*local peers at about \([0-9]*\) bytes.*/\1/p" <<<"$out" | head -1
}
whole=$(per_peer)
pieces=$(per_peer --physical-batch 64)
capped=$(per_peer --batch-memory 8)
[ -n "$whole" ] && [ -n "$pieces" ] && [ -n "$capped" ] || fail "no per-peer estimate in the launcher's refusal"
[ "$pieces" -lt $((whole / 2)) ] || fail "--physical-batch 64 left the estimate at $pieces bytes (whole batch: $whole)"
[ "$capped" -lt $((whole / 2)) ] || fail "--batch-memory 8 left the estimate at $capped bytes (whole batch: $whole)"

finish test_bounds
