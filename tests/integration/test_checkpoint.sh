#!/usr/bin/env bash
# Checkpoints and resume across real processes (docs/RELIABILITY.md): four all-reduce peers on
# 127.0.0.1 with a fixed noise seed, so that every resumed run must end with the summary of the
# run that was never interrupted (the same test accuracy and the same epsilon, to the bit).
#   1. a peer killed (SIGKILL) mid-run: the others stop within the timeout naming it; a flipped
#      byte makes one peer's newest checkpoint unusable; --resume goes back to the newest step
#      every peer holds intact and finishes the run;
#   2. a peer killed while it writes a checkpoint (paused between fsync and rename by the test
#      hook): the previous checkpoint is used;
#   3. SIGTERM to every peer, then to one peer only: all exit 0 with a checkpoint at the same
#      step, and --resume finishes the run;
#   4. --resume under another --lr is refused, naming the field;
#   5. (before 4) --resume of a finished run trains nothing, charges nothing, changes nothing;
#   3b. (in 3) ledgers edited below the checkpoint are damaged: the worst case is charged;
#   6. (before 4) another run's folder with the same settings in place of one peer's: refused;
#   7. (before 4) checkpoints whose ledgers were deleted: refused as such, naming the ranks.
set -euo pipefail
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
peer_work

# A small synthetic set (4 classes, 16 features), so that a run of 750 steps takes seconds.
py '
import random, sys
random.seed(3)
for name, n in (("train", 8000), ("test", 1000)):
    with open(sys.argv[1] + "/" + name + ".csv", "w") as out:
        for _ in range(n):
            y = random.randrange(4)
            xs = [random.gauss(2.0 if j % 4 == y else 0.0, 1.0) for j in range(16)]
            out.write(",".join([str(y)] + ["%.4f" % x for x in xs]) + "\n")
' "$work"
"$bin" prepare --format csv --train-csv "$work/train.csv" --test-csv "$work/test.csv" \
  --out "$work/data" >/dev/null

n=4
train=(train --algo allreduce --data "$work/data" --epochs 6 --batch-size 64 --hidden 16
       --noise-multiplier 1.0 --noise-seed 11 --insecure-fixed-seed --threads 1 --metrics "" --json)

# start_run DIR [FLAGS...]: the four peers in the background (pids[], logs $work/rank-R.log,
# rank R's summary $work/out-R.json), from a fresh hosts file. With pause="RANK STEP:SECONDS",
# that rank pauses its write of that step's checkpoint before the rename.
start_run() {
  local dir=$1; shift
  write_local_hosts $n "$work/hosts.json"
  # The previous run's files go first: a peer opens its log only once it has forked, so a wait on
  # the log could otherwise read the last run's "epoch 1" and signal a peer not yet started.
  rm -f "$work"/rank-*.log "$work"/out-*.json
  pids=()
  for r in $(seq 0 $((n - 1))); do
    local hook=()
    [ "${pause%% *}" != "$r" ] || hook=(env "DPGOSSIP_TEST_CHECKPOINT_PAUSE=${pause#* }")
    "${hook[@]}" "$bin" "${train[@]}" --hosts "$work/hosts.json" --rank $r --timeout-s 10 \
      ${dir:+--checkpoint-dir "$dir"} "$@" >"$work/out-$r.json" 2>"$work/rank-$r.log" &
    pids+=($!)
  done
}
pause=
# finish_run: every peer must exit 0 within 120 s.
finish_run() {
  local start=$SECONDS
  for r in $(seq 0 $((n - 1))); do
    while kill -0 "${pids[$r]}" 2>/dev/null; do
      (( SECONDS - start < 120 )) || { echo "rank $r still running"; exit 1; }
      sleep 0.1
    done
    wait "${pids[$r]}" || { echo "rank $r failed:"; cat "$work/rank-$r.log"; exit 1; }
  done
}
# wait_for PATTERN: until a file matches (bounded: 60 s).
wait_for() {
  for _ in $(seq 1 600); do
    compgen -G "$1" >/dev/null && return 0
    sleep 0.1
  done
  echo "nothing matches $1"; cat "$work"/rank-*.log; exit 1
}
# same_as_whole NAME: rank 0's summary equals the uninterrupted run's.
same_as_whole() {
  py '
import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:3])
for k in ("test_accuracy", "test_accuracy_last_iterate", "epsilon", "message_epsilon", "steps",
          "accountant"):
    assert a[k] == b[k], (sys.argv[3], k, a[k], b[k])
print("%s: resumed from step %d, test accuracy %.4f and epsilon %.6f as uninterrupted" %
      (sys.argv[3], b["resumed_from_step"], b["test_accuracy"], b["epsilon"]))
' "$work/whole.json" "$work/out-0.json" "$1"
}
# wait_for_epoch: until rank 0 has logged its first epoch (bounded: 60 s).
wait_for_epoch() {
  for _ in $(seq 1 600); do
    grep -q "epoch   1/" "$work/rank-0.log" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "rank 0 logged no epoch"; cat "$work"/rank-*.log; exit 1
}
step_of() { basename "$1" | sed 's/step-0*\([0-9][0-9]*\)\.ckpt/\1/'; }

# The run that is never interrupted.
start_run ""
finish_run
cp "$work/out-0.json" "$work/whole.json"

# 1. SIGKILL mid-run, then a corrupt newest checkpoint on rank 3.
ck="$work/ck1"
start_run "$ck" --checkpoint-every 50
wait_for "$ck/rank-3/step-000000000150.ckpt"
kill -9 "${pids[2]}"
wait "${pids[2]}" 2>/dev/null || true
expect_exit 20 0 1 3
for r in 0 1 3; do
  grep -q "peer 2" "$work/rank-$r.log" || { echo "rank $r does not name peer 2"; cat "$work/rank-$r.log"; exit 1; }
done
newest=$(ls "$ck/rank-3"/step-*.ckpt | tail -1)
printf '\x55' | dd of="$newest" bs=1 seek=200 conv=notrunc status=none
start_run "$ck" --checkpoint-every 50 --resume
finish_run
grep -q "checksum mismatch" "$work/rank-3.log" || { echo "rank 3 did not report its damaged file"; exit 1; }
py '
import json, sys
s = json.loads(open(sys.argv[1]).read().splitlines()[-1])
assert s["resumed_from_step"] == int(sys.argv[2]) - 50, (s["resumed_from_step"], sys.argv[2])
assert s["replay_charged_steps"] == 0, s
' "$work/out-0.json" "$(step_of "$newest")"
same_as_whole "SIGKILL"

# 2. Rank 1 is killed while writing its step-100 checkpoint: peers go back to step 50.
ck="$work/ck2"
pause="1 100:60" start_run "$ck" --checkpoint-every 50
wait_for "$ck/rank-1/step-000000000100.ckpt.tmp.*"
kill -9 "${pids[1]}"
wait "${pids[1]}" 2>/dev/null || true
expect_exit 20 0 2 3
[ ! -e "$ck/rank-1/step-000000000100.ckpt" ] || { echo "the interrupted write was renamed"; exit 1; }
start_run "$ck" --checkpoint-every 50 --resume
finish_run
[ -z "$(compgen -G "$ck/rank-1/*.tmp.*")" ] || { echo "the temporary file was left"; exit 1; }
py '
import json, sys
s = json.loads(open(sys.argv[1]).read().splitlines()[-1])
assert s["resumed_from_step"] == 50, s["resumed_from_step"]
' "$work/out-0.json"
same_as_whole "killed mid-write"

# 3. SIGTERM to every peer, then (a new run) to rank 3 alone.
for who in all one; do
  ck="$work/ck-$who"
  start_run "$ck"
  wait_for_epoch
  if [ $who = all ]; then kill -TERM "${pids[@]}"; else kill -TERM "${pids[3]}"; fi
  finish_run
  stopped=$(py 'import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])["stopped_at_step"])' "$work/out-0.json")
  for r in $(seq 0 $((n - 1))); do
    files=$(ls "$ck/rank-$r")
    [ "$files" = "$(printf 'ledger.json\nstep-%012d.ckpt' "$stopped")" ] ||
      { echo "rank $r: want the step-$stopped checkpoint, has: $files"; exit 1; }
  done
  if [ $who = one ]; then
    # A copy whose ledgers were edited below the checkpoint: damaged, so the worst case (every
    # step to the plan's last) is charged, as --threads 2 makes the replay inexact.
    cp -a "$ck" "$ck-edited"
    for r in $(seq 0 $((n - 1))); do
      py '
import json, sys
ledger = json.load(open(sys.argv[1]))
ledger["reserved_until"] = 1  # edited in place: the rank and the run id stay
json.dump(ledger, open(sys.argv[1], "w"))
' "$ck-edited/rank-$r/ledger.json"
    done
    saved=("${train[@]}")
    for i in "${!train[@]}"; do [ "${train[$i]}" != --threads ] || train[$((i + 1))]=2; done
    start_run "$ck-edited" --resume
    finish_run
    train=("${saved[@]}")
    grep -q "ledger.json: /reserved_until 1 is impossible (below this peer's newest checkpoint" \
      "$work/rank-0.log" || { echo "the edited ledger was not found damaged:"; cat "$work/rank-0.log"; exit 1; }
    py '
import json, sys
s = json.loads(open(sys.argv[1]).read().splitlines()[-1])
assert s["replay_charged_steps"] == s["steps"] - int(sys.argv[2]), (s["replay_charged_steps"], s["steps"])
' "$work/out-0.json" "$stopped"
  fi
  start_run "$ck" --resume
  finish_run
  same_as_whole "SIGTERM to $who (stopped at step $stopped)"
done

# 5. --resume of the run that finished: it says so, trains nothing and charges nothing, every
#    time (job scripts pass --resume always); every peer's folder is left as it was.
before=$(cat "$work"/ck-all/rank-*/* | sha256sum)
for again in 1 2; do
  start_run "$work/ck-all" --resume
  finish_run
  py '
import json, sys
s = json.loads(open(sys.argv[1]).read().splitlines()[-1])
whole = json.loads(open(sys.argv[2]).read().splitlines()[-1])
assert s["already_finished"] is True, s
assert s["epsilon"] == whole["epsilon"], (s, whole["epsilon"])
assert s["steps"] == whole["steps"], (s, whole["steps"])
assert "test_accuracy" not in s, s
' "$work/out-0.json" "$work/whole.json"
  grep -q "finished: every peer took .* steps .*nothing to train, nothing charged" "$work/rank-0.log" ||
    { echo "resume $again of a finished run:"; cat "$work/rank-0.log"; exit 1; }
  ! grep -q "epoch  *1/" "$work/rank-0.log" || { echo "a finished run trained again"; exit 1; }
  [ "$(cat "$work"/ck-all/rank-*/* | sha256sum)" = "$before" ] ||
    { echo "resume $again of a finished run changed its folder"; exit 1; }
done

# 6. Another run's folder, with the same settings (its checkpoints and ledger), put in place of
#    rank 1's: refused, naming the runs, whether that run finished or stopped.
rm -rf "$work/ck-mixed"
cp -a "$work/ck-all" "$work/ck-mixed"
rm -rf "$work/ck-mixed/rank-1"
cp -a "$work/ck-one/rank-1" "$work/ck-mixed/rank-1"
start_run "$work/ck-mixed" --resume
expect_exit 30 0 1 2 3
grep -q "belong to different runs (by their ledgers: rank 0: run [0-9a-f]*, rank 1: run [0-9a-f]*," \
  "$work/rank-0.log" || { echo "another run's folder was not refused:"; cat "$work/rank-0.log"; exit 1; }

# 7. Checkpoints whose ledgers were all deleted: what was spent after them cannot be counted, and
#    that is what every peer says (not that the folders belong to different runs).
rm -rf "$work/ck-noledger"
cp -a "$work/ck-all" "$work/ck-noledger"
rm -f "$work"/ck-noledger/rank-*/ledger.json
start_run "$work/ck-noledger" --resume
expect_exit 30 0 1 2 3
grep -q "ledger.json is missing beside the checkpoints of ranks 0, 1, 2, 3" "$work/rank-0.log" ||
  { echo "deleted ledgers were not named:"; cat "$work/rank-0.log"; exit 1; }

# 4. Another training setting is refused, naming it (every peer finds its own file differs).
start_run "$work/ck-all" --resume --lr 0.5
expect_exit 30 0 1 2 3
grep -q "/lr was 1.0, is 0.5" "$work/rank-0.log" || { echo "no field named:"; cat "$work/rank-0.log"; exit 1; }
echo "checkpoint: all checks passed"
