#!/usr/bin/env bash
# tools/plot_*.py and tools/sweep.py on synthetic metrics (tests/integration/fake_dpgossip.py
# stands in for dpgossip): each figure written as a PNG, a malformed line or a missing file named
# in the error, the commands of a sweep (--dry-run), a whole sweep with a failing and a stalled
# run, and an invalid sweep file refused with exit 2 and nothing written.
# Usage: test_tools.sh (skips, exit 77, without Debian's python3-matplotlib)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
tools="$here/../../tools"
fake="$here/fake_dpgossip.py"
PY=/usr/bin/python3
py "import matplotlib" 2>/dev/null || { echo "SKIP: no python3-matplotlib"; exit 77; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

# is_png FILE: a non-empty file starting with the PNG signature.
is_png() {
  [[ -s $1 && $(head -c 8 "$1" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]]
}

# Synthetic metrics: two gossip runs with a topology swap (one with "consensus" lines, one
# with only the epoch lines' consensus_distance), an all-reduce run, one line of an older
# version (no kind, no run).
train() { "$PY" "$fake" launch --peers "$1" -- train --metrics m.jsonl --json "${@:2}" >/dev/null; }
train 8 --algo gossip --topology ring --swap-to exponential --seed 1 --run-name gossip-ring-n8-s1
train 16 --algo gossip --topology torus --swap-to ring --seed 1 --run-name gossip-torus-n16-s1 \
  --no-consensus-lines
train 8 --algo allreduce --seed 1 --run-name allreduce-n8-s1
old='{"epoch": 1, "step": 100, "wall_s": 2.0, "loss": 0.9, "train_accuracy": 0.7,
 "test_accuracy": 0.72, "test_loss": 0.8, "epsilon": 1.0, "samples_per_second": 5000, "lr": 0.1,
 "algo": "single", "rank": 0, "peers": 1}'
old=$(tr -d '\n' <<<"$old")
echo "$old" >>m.jsonl

for plot in plot_metrics plot_consensus plot_gap; do
  "$PY" "$tools/$plot.py" m.jsonl -o "figs/$plot.png" --title "$plot" 2>"$plot.err" ||
    fail "$plot.py m.jsonl: exit $?: $(cat "$plot.err")"
  is_png "figs/$plot.png" || fail "$plot.py wrote no PNG at figs/$plot.png"
done
[[ -z $(find figs -name '*.tmp*') ]] || fail "temporary files left: $(ls figs)"
grep -q "run unnamed left out" plot_gap.err || fail "plot_gap: no note on the run without summary"
"$PY" "$tools/plot_metrics.py" m.jsonl --runs gossip-ring-n8-s1,unnamed -o figs/two.png 2>/dev/null &&
  is_png figs/two.png || fail "plot_metrics --runs gossip-ring-n8-s1,unnamed"
# Old lines whose epoch count starts again are another run: "unnamed-2".
{ cat m.jsonl; echo "$old"; } >old.jsonl
"$PY" "$tools/plot_metrics.py" old.jsonl --runs unnamed,unnamed-2 -o figs/old.png 2>/dev/null ||
  fail "plot_metrics: no run unnamed-2 after an old line with epoch 1 again"

# Time to a target accuracy and accuracy at a fixed time, read at epoch ends.
{ echo '{"kind": "epoch", "run": "a", "epoch": 1, "wall_s": 10, "test_accuracy": 0.70, "algo": "allreduce"}'
  echo '{"kind": "epoch", "run": "a", "epoch": 2, "wall_s": 20, "test_accuracy": 0.81, "algo": "allreduce"}'
  echo '{"kind": "summary", "run": "a", "wall_s": 21, "test_accuracy": 0.81, "epsilon": 3.0, "algo": "allreduce"}'
  echo '{"kind": "epoch", "run": "b", "epoch": 1, "wall_s": 5, "test_accuracy": 0.60, "algo": "gossip"}'
} >tta.jsonl
"$PY" "$tools/time_to_accuracy.py" tta.jsonl --target 0.8 --at 15 -o tta.md ||
  fail "time_to_accuracy.py: exit $?"
grep -qF "| a | allreduce | 20.0 | 70.00 | 81.00 | 21.0 | 3 |" tta.md || fail "tta row a: $(cat tta.md)"
grep -qF "| b | gossip | - | 60.00 | - | - | - |" tta.md || fail "tta row b: $(cat tta.md)"
"$PY" "$tools/time_to_accuracy.py" tta.jsonl --target 80 2>tta.err && fail "--target 80 accepted"
grep -q "not a fraction" tta.err || fail "--target 80: $(cat tta.err)"
"$PY" "$tools/time_to_accuracy.py" tta.jsonl --target 0.8 --runs c 2>tta.err &&
  fail "an unknown run accepted"
grep -q "no run named c" tta.err || fail "--runs c: $(cat tta.err)"

# The scaling plot: runs named alike but for their -nP- part form one curve.
"$PY" "$tools/plot_scaling.py" m.jsonl -o figs/scaling.png --target 0.5 2>scaling.err ||
  fail "plot_scaling.py: exit $?: $(cat scaling.err)"
is_png figs/scaling.png || fail "plot_scaling.py wrote no PNG"
grep -q "run unnamed left out" scaling.err || fail "plot_scaling: no note on the run without summary"

# A run a signal stopped ends with a "stopped" line (dpgossip train, docs/TRAINING.md): its epochs
# are drawn like any others, in all three figures.
{ cat m.jsonl
  echo '{"kind": "epoch", "run": "cut", "epoch": 1, "step": 10, "test_accuracy": 0.5, "epsilon": 1.0, "algo": "gossip", "peers": 4}'
  echo '{"kind": "stopped", "run": "cut", "steps": 15, "planned_steps": 100, "stopped_at_step": 15, "test_accuracy": 0.5, "test_accuracy_last_iterate": null, "algo": "gossip", "peers": 4}'
} >stopped.jsonl
for plot in plot_metrics plot_consensus plot_gap; do
  "$PY" "$tools/$plot.py" stopped.jsonl -o "figs/stopped-$plot.png" 2>"$plot.err" ||
    fail "$plot.py on a stopped run's lines: $(cat "$plot.err")"
done

# Errors: a malformed line (named with its line number), a missing file, an unknown run.
lines=$(wc -l <m.jsonl)
cp m.jsonl bad.jsonl
echo '{"kind": "epoch", "epoch": 2, "test_accuracy": ' >>bad.jsonl
expect_error "bad.jsonl:$((lines + 1)):" "$PY" "$tools/plot_metrics.py" bad.jsonl -o figs/bad.png
cp m.jsonl bad.jsonl
echo '{"kind": "consensus", "step": 5, "consensus_distance": "far"}' >>bad.jsonl
expect_error "bad.jsonl:$((lines + 1)): 'consensus_distance'" \
  "$PY" "$tools/plot_consensus.py" m.jsonl bad.jsonl -o figs/bad.png
expect_error "missing.jsonl" "$PY" "$tools/plot_gap.py" m.jsonl missing.jsonl -o figs/bad.png
expect_error "no run named nope" "$PY" "$tools/plot_metrics.py" m.jsonl --runs nope -o figs/bad.png
expect_error "--last wants 1 or more" "$PY" "$tools/plot_metrics.py" m.jsonl --last 0 -o figs/bad.png
"$PY" -c '
import sys; sys.path.insert(0, sys.argv[1]); import metrics
runs = metrics.group_by_run(metrics.load(["m.jsonl"]))
assert list(metrics.last(runs, 1)) == list(runs)[-1:] and len(runs) > 1, list(runs)
' "$tools" || fail "--last 1 keeps the last run only"
[[ ! -e figs/bad.png ]] || fail "a failing plot wrote figs/bad.png"
# Input that is not UTF-8 or is nested too deeply: the file and line named, no traceback.
printf '{"epoch": 1}\n\xff\xfe{}\n' >latin.jsonl
"$PY" -c 'print("[" * 100000)' >deep.jsonl
for plot in plot_metrics plot_consensus plot_gap; do
  expect_error "latin.jsonl:2: not UTF-8 text" \
    "$PY" "$tools/$plot.py" m.jsonl latin.jsonl -o figs/bad.png
  expect_error "deep.jsonl:1: not valid JSON (nested too deeply)" \
    "$PY" "$tools/$plot.py" deep.jsonl -o figs/bad.png
done
# Numbers near the float maximum overflow matplotlib's tick locators: refused, field named.
for kv in 'epoch 1e308' 'epoch -1e308' 'wall_s 1e308' 'test_accuracy 1e306'; do
  read -r key value <<<"$kv"
  other='"epoch": 1, '
  [[ $key == epoch ]] && other=''
  echo "{$other\"test_loss\": 0.5, \"$key\": $value}" >huge.jsonl
  expect_error "huge.jsonl:1: '$key' is " "$PY" "$tools/plot_metrics.py" huge.jsonl -o figs/bad.png
done
# A title too long to rasterise is refused before anything is drawn.
expect_error "--title: at most 200 characters, got 100000" \
  "$PY" "$tools/plot_metrics.py" m.jsonl -o figs/bad.png --title "$(printf '%100000s' | tr ' ' x)"
# An output that exists but is not a regular file is refused and left as it was.
mkfifo figs/fifo.png
expect_error "figs/fifo.png: not a regular file" "$PY" "$tools/plot_gap.py" m.jsonl -o figs/fifo.png
[[ -p figs/fifo.png ]] || fail "plot_gap replaced the FIFO figs/fifo.png"
if mknod -m 666 figs/dev.png c 1 7 2>/dev/null; then  # our own full-device node (needs root)
  expect_error "figs/dev.png: not a regular file" \
    "$PY" "$tools/plot_metrics.py" m.jsonl -o figs/dev.png
  [[ -c figs/dev.png ]] || fail "plot_metrics replaced the device figs/dev.png"
fi
rm -f figs/fifo.png figs/dev.png
# A write that fails (a file size limit) names the output and leaves nothing behind.
rc=0
err=$(ulimit -f 8; "$PY" "$tools/plot_metrics.py" m.jsonl -o figs/big.png 2>&1) || rc=$?
[[ $rc != 0 ]] && grep -qF "figs/big.png: cannot write" <<<"$err" ||
  fail "plot over ulimit -f: exit $rc: $err"
# A run id or title with '$' pairs (matplotlib's math) and a rho above 1 still draw.
cat >odd.jsonl <<'JSON'
{"run": "$\\foo$", "kind": "consensus", "round": 0, "consensus_distance": 1.0, "rho": 3}
{"run": "$\\foo$", "kind": "consensus", "round": 1000, "consensus_distance": 0.5, "rho": 3}
JSON
"$PY" "$tools/plot_consensus.py" odd.jsonl -o figs/odd.png --title '$\bar$ costs $5' 2>odd.err &&
  is_png figs/odd.png || fail "plot_consensus of odd.jsonl: $(cat odd.err)"
[[ ! -e figs/bad.png && ! -e figs/big.png && -z $(find figs -name '*.tmp*') ]] ||
  fail "a failing plot left a file: $(ls -a figs)"

# sweep --dry-run: 2 all-reduce (peers x seed, no topology) + 4 gossip + 1 listed run.
printf '#!/bin/sh\nexec %s %s "$@"\n' "$PY" "$fake" >fake && chmod +x fake
cat >sweep.json <<'JSON'
{"binary": "./fake", "out": "res", "timeout_s": 5,
 "common": ["--epochs", "4", "--threads", "1"],
 "grid": {"algo": ["allreduce", "gossip"], "topology": ["ring", "exponential"],
          "peers": [8], "seed": [1, 2]},
 "runs": [{"algo": "gossip", "topology": "torus", "peers": 16, "seed": 2,
           "args": ["--swap-to", "ring"]}]}
JSON
want="allreduce-n8-s1 allreduce-n8-s2 gossip-ring-n8-s1 gossip-exponential-n8-s1 \
gossip-ring-n8-s2 gossip-exponential-n8-s2 gossip-torus-n16-s2"
out=$("$PY" "$tools/sweep.py" sweep.json --dry-run) || fail "sweep --dry-run: exit $?"
got=$(sed -E 's/.*--run-name ([^ ]+).*/\1/' <<<"$out" | tr '\n' ' ')
[[ $got == "$want " ]] || fail "sweep --dry-run runs: got '$got', want '$want'"
grep -qxF -- "./fake launch --peers 16 -- train --algo gossip --topology torus --seed 2 --run-name gossip-torus-n16-s2 --metrics res/metrics.jsonl --json --epochs 4 --threads 1 --swap-to ring" <<<"$out" ||
  fail "sweep --dry-run: no exact torus command in: $out"
grep -q -- "--algo allreduce --topology" <<<"$out" && fail "an all-reduce command has a topology"
[[ ! -e res ]] || fail "sweep --dry-run wrote res/"

# A run's log that cannot be written is an error naming it, exit 1, not a traceback.
echo '{"binary": "./fake", "runs": [{"algo": "allreduce", "peers": 4, "seed": 1}]}' >onerun.json
mkdir -p logfail/logs/allreduce-n4-s1.log
rc=0
err=$("$PY" "$tools/sweep.py" onerun.json --out logfail 2>&1) || rc=$?
[[ $rc == 1 ]] || fail "sweep with an unwritable log: exit $rc, want 1: $err"
grep -qF "sweep: error: logfail/logs/allreduce-n4-s1.log: cannot write (Is a directory)" <<<"$err" ||
  fail "sweep with an unwritable log: $err"

# A whole sweep with a failing and a stalled run: they are recorded, the rest go on, exit 1.
"$PY" - <<'PY'
import json
s = json.load(open("sweep.json"))
s["timeout_s"] = 2
s["runs"] += [{"algo": "gossip", "topology": "ring", "peers": 4, "seed": 3, "args": ["--exit-code", "3"]},
              {"algo": "allreduce", "peers": 4, "seed": 9, "args": ["--sleep", "60"]}]
json.dump(s, open("sweep2.json", "w"))
PY
rc=0
"$PY" "$tools/sweep.py" sweep2.json --out res2 2>sweep.err || rc=$?
[[ $rc == 1 ]] || fail "sweep with failing runs: exit $rc, want 1: $(cat sweep.err)"
for f in convergence.png consensus.png accuracy_vs_gap.png; do
  is_png "res2/$f" || fail "sweep wrote no PNG res2/$f: $(cat sweep.err)"
done
[[ $(ls res2/logs | wc -l) == 9 ]] || fail "sweep: want 9 logs, got: $(ls res2/logs)"
grep -q "gossip-ring-n4-s3 | gossip | ring | 4 | 3 | - | - | exit 3 |" res2/summary.md ||
  fail "summary.md: no failed row: $(cat res2/summary.md)"
grep -q "allreduce-n4-s9 .* timed out after 2 s" res2/summary.md ||
  fail "summary.md: no timed-out row: $(cat res2/summary.md)"
grep -qE "^\| gossip-torus-n16-s2 \| gossip \| torus \| 16 \| 2 \| - \| - \| ok \| [0-9.]+ \| 3 \| [^|]+ \| [^|]+ \| - \| 0.0507[0-9]* " \
  res2/summary.md || fail "summary.md: no torus row with accuracy and gap: $(cat res2/summary.md)"
grep -qF '`./fake launch --peers 8 -- train --algo allreduce --seed 1 ' res2/summary.md ||
  fail "summary.md: no command"

# An invalid sweep file: exit 2, the file and key named, nothing written.
expect_sweep_error() {
  local want="$1" rc=0 err
  echo "$2" >badsweep.json
  err=$("$PY" "$tools/sweep.py" badsweep.json --out badout 2>&1) || rc=$?
  [[ $rc == 2 ]] || fail "sweep $2: exit $rc, want 2"
  grep -qF -- "badsweep.json" <<<"$err" && grep -qF -- "$want" <<<"$err" ||
    fail "sweep $2: error lacks 'badsweep.json' or '$want': $err"
  [[ ! -e badout ]] || fail "sweep $2: wrote badout/"
}
one='{"algo": "single", "peers": 1, "seed": 1}'
grid='"algo": ["single"], "peers": [1], "seed": [1]'
expect_sweep_error "unknown key 'grid.lr'" "{\"grid\": {$grid, \"lr\": [1]}}"
expect_sweep_error "key 'grid'" '{"grid": {}}'
expect_sweep_error "key 'grid.seed'" "{\"grid\": {\"algo\": [\"single\"], \"peers\": [1], \"seed\": []}}"
expect_sweep_error "unknown key 'bogus'" "{\"bogus\": 1, \"runs\": [$one]}"
expect_sweep_error "key 'grid.peers[0]'" \
  '{"grid": {"algo": ["single"], "peers": ["1"], "seed": [1]}}'
expect_sweep_error "key 'runs[0].args'" \
  '{"runs": [{"algo": "single", "peers": 1, "seed": 1, "args": "--lr 1"}]}'
expect_sweep_error "key 'common'" "{\"common\": \"--epochs 1\", \"runs\": [$one]}"
expect_sweep_error "key 'grid': missing 'topology'" '{"grid": {"algo": ["gossip"], "peers": [4], "seed": [1]}}'
expect_sweep_error "key 'grid': missing 'topology'" '{"grid": {"algo": ["ad-psgd"], "peers": [4], "seed": [1]}}'
expect_sweep_error "key 'runs[0].topology': only gossip and ad-psgd take a topology" \
  '{"runs": [{"algo": "ps-sync", "peers": 4, "seed": 1, "topology": "ring"}]}'
expect_sweep_error "key 'trace'" "{\"trace\": 1, \"runs\": [$one]}"
expect_sweep_error "key 'grid.network': want a non-empty object" \
  '{"grid": {"algo": ["allreduce"], "peers": [2], "seed": [1], "network": ["x"]}}'
expect_sweep_error "key 'grid.slowdown.4x'" \
  '{"grid": {"algo": ["allreduce"], "peers": [2], "seed": [1], "slowdown": {"4x": "1:4"}}}'
expect_sweep_error "key 'runs[0].link'" \
  '{"runs": [{"algo": "allreduce", "peers": 2, "seed": 1, "link": "default:latency=1ms"}]}'

# The network and slowdown axes: each label's flags, and the labels in the names.
echo '{"grid": {"algo": ["allreduce"], "peers": [4], "seed": [1],
  "network": {"lan": [], "slow": ["default:latency=10ms,bw=100Mbit", "0-1:bw=10Mbit"]},
  "slowdown": {"even": [], "4x": ["1:4"]}}}' >axes.json
out=$("$PY" "$tools/sweep.py" axes.json --out axesres --dry-run) || fail "sweep axes: exit $?"
[[ $(wc -l <<<"$out") == 4 ]] || fail "sweep axes: not 4 runs: $out"
grep -qF -- "--run-name allreduce-n4-s1-slow-4x --metrics axesres/metrics.jsonl --json --link default:latency=10ms,bw=100Mbit --link 0-1:bw=10Mbit --slowdown 1:4" <<<"$out" ||
  fail "sweep axes: the slow-4x run: $out"
grep -qE -- "--run-name allreduce-n4-s1-lan-even --metrics axesres/metrics.jsonl --json$" <<<"$out" ||
  fail "sweep axes: the plain run: $out"

# Every algorithm is accepted; with "trace" every run writes its trace under traces/.
echo '{"trace": true, "grid": {"algo": ["allreduce", "gossip", "ps-sync", "ps-async", "local-sgd",
  "ad-psgd"], "topology": ["ring"], "peers": [4], "seed": [1]}}' >all.json
out=$("$PY" "$tools/sweep.py" all.json --out allres --dry-run) || fail "sweep all algorithms: exit $?"
[[ $(grep -c -- "--trace allres/traces/" <<<"$out") == 6 ]] || fail "sweep trace commands: $out"
grep -qF -- "--algo ad-psgd --topology ring" <<<"$out" || fail "sweep: ad-psgd without its graph: $out"
grep -qF -- "--algo ps-async --seed" <<<"$out" || fail "sweep: ps-async: $out"
expect_sweep_error "key 'binary'" "{\"binary\": \"no/such/dpgossip\", \"runs\": [$one]}"
expect_sweep_error "badsweep.json:3: not valid JSON" $'{"runs": [\n\n}'
expect_sweep_error "badsweep.json: not UTF-8 text" $'\xff\xfe{}'
expect_sweep_error "badsweep.json: not valid JSON (nested too deeply)" \
  "$(printf '%100000s' | tr ' ' '[')"
# The duplicate-name check is linear: 62500 grid runs and a listed twin are refused at once (it
# was quadratic: about 20 s).
start=$SECONDS
expect_sweep_error "run name allreduce-n1-s0 comes twice" "$("$PY" -c '
import json; r = list(range(250))
print(json.dumps({"grid": {"algo": ["allreduce"], "peers": [p + 1 for p in r], "seed": r},
                  "runs": [{"algo": "allreduce", "peers": 1, "seed": 0}]}))')"
((SECONDS - start < 8)) ||
  fail "sweep: the duplicate-name check of 62500 runs took $((SECONDS - start)) s"
# A file of the results folder that is there but not a regular file: exit 2 before any run.
mkdir -p fiforesults && mkfifo fiforesults/summary.md
rc=0
err=$("$PY" "$tools/sweep.py" sweep.json --out fiforesults 2>&1) || rc=$?
[[ $rc == 2 ]] && grep -qF "fiforesults/summary.md: not a regular file" <<<"$err" ||
  fail "sweep into a FIFO summary.md: exit $rc: $err"
[[ -p fiforesults/summary.md && ! -e fiforesults/logs ]] || fail "sweep ran with a FIFO summary.md"

finish "tools"
