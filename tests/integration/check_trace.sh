#!/usr/bin/env bash
# check_trace.sh TRACE: loads a Chrome trace in headless Chromium and checks its Trace Event
# structure there: the root is {"traceEvents": [...]}, every event has ph, ts, pid, tid and name,
# every "X" event a non-negative dur, every "C" event numeric args, and every pid a process_name
# metadata event. Chromium cannot fetch file:// URLs from a page, so the trace goes into the page
# itself (base64 in a <script>) and is parsed there with JSON.parse; the page writes its verdict
# into the DOM, which --dump-dom prints. Exit 0: a good trace; 1: a bad one; 77: no chromium.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: check_trace.sh TRACE" >&2
  exit 2
fi
trace=$1
[[ -r $trace ]] || { echo "check_trace: cannot read $trace" >&2; exit 1; }
chromium=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
[[ -n $chromium ]] || { echo "SKIP: no chromium (apt-get install chromium)"; exit 77; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
{
  cat <<'HTML'
<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>trace check</title></head>
<body><div id="verdict">TRACE_NO_VERDICT</div>
<script id="trace" type="text/plain">
HTML
  base64 -w 0 "$trace"
  cat <<'HTML'
</script>
<script>
function check(text) {
  let root;
  try { root = JSON.parse(text); } catch (e) { return "not JSON: " + e.message; }
  if (root === null || typeof root !== "object" || Array.isArray(root)) return "the root is not an object";
  const events = root.traceEvents;
  if (!Array.isArray(events)) return "no traceEvents array";
  if (events.length === 0) return "traceEvents is empty";
  const pids = new Set(), named = new Set();
  let spans = 0;
  for (let i = 0; i < events.length; ++i) {
    const e = events[i];
    const where = "event " + i + " (" + JSON.stringify(e).slice(0, 120) + ")";
    if (e === null || typeof e !== "object") return where + " is not an object";
    if (typeof e.ph !== "string" || e.ph.length === 0) return where + " has no ph";
    if (typeof e.ts !== "number" || !isFinite(e.ts)) return where + " has no numeric ts";
    if (!Number.isInteger(e.pid)) return where + " has no integer pid";
    if (!Number.isInteger(e.tid)) return where + " has no integer tid";
    if (typeof e.name !== "string" || e.name.length === 0) return where + " has no name";
    pids.add(e.pid);
    if (e.ph === "X") {
      if (typeof e.dur !== "number" || !(e.dur >= 0)) return where + " is an X event without a non-negative dur";
      ++spans;
    } else if (e.ph === "C") {
      if (e.args === null || typeof e.args !== "object") return where + " is a counter without args";
      for (const k in e.args) if (typeof e.args[k] !== "number") return where + " has a non-numeric counter value";
    } else if (e.ph === "M") {
      if (e.name === "process_name") {
        if (!e.args || typeof e.args.name !== "string") return where + " names no process";
        named.add(e.pid);
      }
    }
    if (e.args !== undefined && (e.args === null || typeof e.args !== "object")) return where + " has args that are not an object";
  }
  for (const p of pids) if (!named.has(p)) return "pid " + p + " has no process_name metadata event";
  return "OK events=" + events.length + " spans=" + spans + " pids=" + pids.size;
}
let verdict;
try {
  const b64 = document.getElementById("trace").textContent.trim();
  const bytes = Uint8Array.from(atob(b64), c => c.charCodeAt(0));
  verdict = check(new TextDecoder("utf-8", {fatal: true}).decode(bytes));
} catch (e) {
  verdict = "check failed: " + e.message;
}
document.getElementById("verdict").textContent =
  verdict.startsWith("OK") ? "TRACE_OK " + verdict.slice(3) : "TRACE_BAD " + verdict;
</script>
</body></html>
HTML
} > "$tmp/check.html"

rc=0
timeout 60 "$chromium" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage \
  --no-first-run --user-data-dir="$tmp/profile" --dump-dom "file://$tmp/check.html" \
  > "$tmp/dom.html" 2> "$tmp/chromium.log" || rc=$?
if [[ $rc -ne 0 ]]; then
  echo "check_trace: chromium failed (exit $rc) on $trace:" >&2
  tail -n 20 "$tmp/chromium.log" >&2
  exit 1
fi
verdict=$(grep -o 'TRACE_[A-Z_]*[^<]*' "$tmp/dom.html" | head -n 1 || true)
echo "check_trace: $trace: ${verdict:-no verdict in the page}"
[[ $verdict == TRACE_OK* ]]
