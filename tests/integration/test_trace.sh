#!/usr/bin/env bash
# The trace end to end: two peers write part files through the tracer and the tracing transport,
# the parts merge into one Chrome trace that headless Chromium accepts (and deliberately broken
# traces it refuses), trace_summary reads the hidden share, and a part left by a process killed
# with SIGKILL mid-run still parses.   test_trace.sh TRACE_WRITER
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
source "$here/lib.sh"
writer=$1
PY=/usr/bin/python3
check="$here/check_trace.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
have_chromium=1
command -v chromium >/dev/null || have_chromium=0
# chromium_check WANT TRACE: WANT is ok or bad.
chromium_check() {
  ((have_chromium)) || return 0
  local rc=0
  bash "$check" "$2" || rc=$?
  if [[ $1 == ok && $rc -ne 0 ]]; then fail "check_trace refused $2"; fi
  if [[ $1 == bad && $rc -ne 1 ]]; then fail "check_trace did not refuse $2 (exit $rc)"; fi
}

# 1. Two peers, merged by the library.
"$writer" run "$work" >/dev/null
py '
import json, sys
t = json.load(open(sys.argv[1]))
assert t["displayTimeUnit"] == "ms"
ev = t["traceEvents"]
names = {e["pid"]: e["args"]["name"] for e in ev if e["name"] == "process_name"}
assert names == {0: "rank 0", 1: "rank 1"}, names
for pid in (0, 1):
    mine = [e for e in ev if e["pid"] == pid and e["ph"] == "X"]
    for n in ("sample", "forward_backward", "clip", "noise", "eval", "send", "recv", "wait"):
        assert any(e["name"] == n for e in mine), (pid, n)
    sends = [e for e in mine if e["name"] == "send"]
    assert len(sends) == 20 and all(e["args"]["peer"] == 1 - pid and e["args"]["bytes"] == 65536 for e in sends)
    assert sorted(e["args"]["step"] for e in sends) == list(range(20))
    eps = [e for e in ev if e["pid"] == pid and e["ph"] == "C"]
    assert len(eps) == 20 and abs(eps[-1]["args"]["epsilon"] - 1.0) < 1e-9
' "$work/trace.json" || fail "the merged trace lacks what the peers recorded"
chromium_check ok "$work/trace.json"

# The Python merge of the same parts holds the same events.
"$PY" "$root/tools/merge_traces.py" "$work"/trace.rank*.json -o "$work/py.json" >/dev/null
py '
import json, sys
a = json.load(open(sys.argv[1]))["traceEvents"]; b = json.load(open(sys.argv[2]))["traceEvents"]
key = lambda e: json.dumps(e, sort_keys=True)
assert sorted(map(key, a)) == sorted(map(key, b)), (len(a), len(b))
' "$work/trace.json" "$work/py.json" || fail "merge_traces.py and merge_trace_parts disagree"

# trace_summary: each peer communicated, and the hidden share is a share.
"$PY" "$root/tools/trace_summary.py" "$work/trace.json" > "$work/summary.txt" || fail "trace_summary failed"
grep -q overall "$work/summary.txt" || fail "trace_summary printed no overall row"
"$PY" "$root/tools/trace_summary.py" "$work/trace.json" --json > "$work/summary.json"
py '
import json, sys
s = json.load(open(sys.argv[1]))
assert len(s["peers"]) == 2
for p in s["peers"] + [s["overall"]]:
    assert p["communication_ms"] > 0 and 0 <= p["exposed_ms"] <= p["communication_ms"] + 1e-9, p
    assert 0.0 <= p["hidden_share"] <= 1.0, p
    assert p["compute_ms"]["forward_backward"] > 0, p
' "$work/summary.json" || fail "trace_summary --json is not a sensible summary"

# 2. Broken traces are refused.
py '
import json, sys
t = json.load(open(sys.argv[1])); d = sys.argv[2]
text = open(sys.argv[1]).read()
open(d + "/torn.json", "w").write(text[: len(text) // 2])
x = json.loads(text); e = next(e for e in x["traceEvents"] if e["ph"] == "X"); del e["dur"]
json.dump(x, open(d + "/nodur.json", "w"))
x = json.loads(text); x["traceEvents"] = [e for e in x["traceEvents"] if not (e["name"] == "process_name" and e["pid"] == 1)]
json.dump(x, open(d + "/noname.json", "w"))
x = json.loads(text); e = next(e for e in x["traceEvents"] if e["ph"] == "X"); e["ts"] = "soon"
json.dump(x, open(d + "/badts.json", "w"))
json.dump(x["traceEvents"], open(d + "/bare.json", "w"))
' "$work/trace.json" "$work"
for bad in torn nodur noname badts bare; do chromium_check bad "$work/$bad.json"; done

# 3. A writer killed with SIGKILL mid-run leaves a part that parses.
for attempt in 1 2 3 4 5; do
  part="$work/killed$attempt.json"
  "$writer" loop "$part" &
  pid=$!
  for _ in $(seq 1 200); do
    [[ -s $part ]] && (( $(wc -l < "$part") > 50 )) && break
    sleep 0.01
  done
  sleep "0.$((attempt * 7))"
  kill -KILL "$pid"
  wait "$pid" 2>/dev/null || true
  py '
import json, sys
ev = json.load(open(sys.argv[1]))
assert isinstance(ev, list) and len(ev) > 50, len(ev)
assert {e["name"] for e in ev} >= {"process_name", "send", "forward_backward"}
' "$part" || fail "the part of a killed writer does not parse (attempt $attempt)"
done
"$PY" "$root/tools/merge_traces.py" "$work"/killed1.json -o "$work/killed.json" >/dev/null \
  || fail "merge_traces.py failed on a killed writer's part"
chromium_check ok "$work/killed.json"

# merge_traces.py keeps the whole events of a torn part and refuses a part that is not one.
head -c -20 "$work/trace.rank0.json" > "$work/torn_part.json"
"$PY" "$root/tools/merge_traces.py" "$work/torn_part.json" -o "$work/torn_merged.json" >/dev/null 2>&1 \
  || fail "merge_traces.py refused a torn part"
echo '{"a": 1}' > "$work/notarray.json"
if "$PY" "$root/tools/merge_traces.py" "$work/notarray.json" -o "$work/x.json" 2>/dev/null; then
  fail "merge_traces.py accepted a part that is not an array"
fi

# Inputs that are not UTF-8, not a file or nested too deeply: one line naming the file (and line).
printf '[\n{"ph": "M"},\n\xff\n]\n' >"$work/latin.json"
mkdir "$work/folder.json"
"$PY" -c 'print("[" * 100000)' >"$work/deep.json"
for tool in merge_traces trace_summary; do
  args=()
  [[ $tool == merge_traces ]] && args=(-o "$work/m.json")
  expect_error "$work/latin.json:3: not UTF-8 text" \
    "$PY" "$root/tools/$tool.py" "$work/latin.json" "${args[@]}"
  expect_error "$work/folder.json: cannot read" \
    "$PY" "$root/tools/$tool.py" "$work/folder.json" "${args[@]}"
  expect_error "$work/deep.json: not valid JSON (nested too deeply)" \
    "$PY" "$root/tools/$tool.py" "$work/deep.json" "${args[@]}"
done
[[ ! -e $work/m.json ]] || fail "merge_traces.py wrote m.json from a bad part"
# merge_traces.py writes atomically: a failed write names the output and leaves nothing; an
# output that is not a regular file is refused, untouched (timeout: an open FIFO would block).
merge() { timeout 20 "$PY" "$root/tools/merge_traces.py" "$work"/trace.rank*.json -o "$@"; }
rc=0
err=$(ulimit -f 8; merge "$work/big.json" 2>&1) || rc=$?
[[ $rc == 1 ]] && grep -qF "$work/big.json: cannot write" <<<"$err" ||
  fail "merge over ulimit -f: exit $rc: $err"
expect_error "$work/no/such/m.json: cannot write" merge "$work/no/such/m.json"
mkfifo "$work/fifo.json"
expect_error "$work/fifo.json: not a regular file" merge "$work/fifo.json"
[[ -p $work/fifo.json ]] || fail "merge_traces.py replaced the FIFO fifo.json"
if mknod -m 666 "$work/dev.json" c 1 7 2>/dev/null; then  # our own full-device node (needs root)
  expect_error "$work/dev.json: not a regular file" merge "$work/dev.json"
  [[ -c $work/dev.json ]] || fail "merge_traces.py replaced the device dev.json"
fi
left=$(find "$work" -name '*.tmp*' -o -name big.json -o -name no)
[[ -z $left ]] || fail "a failed merge left: $left"

finish trace
if ((have_chromium == 0)); then
  echo "SKIP: no chromium, the browser checks did not run (apt-get install chromium)"
  exit 77
fi
