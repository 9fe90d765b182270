// The live status page: one HTML document with its script and style, no outside resource. It
// polls /api/status every 1.5 s and draws the peers' table, the graph and the curves as plain
// SVG. A token given as #token=... in the address is sent as a bearer token.
#include "apps/status_page.h"

namespace dpg::app {

const std::string& status_html() {
  static const std::string page = R"HTML(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>dpgossip run</title>
<style>
body{font:14px system-ui,sans-serif;margin:16px;color:#222;background:#fafafa}
h1{font-size:20px;margin:0 0 4px} h2{font-size:15px;margin:18px 0 6px}
.facts span{margin-right:18px} .bad{color:#b00} .note{color:#666;font-size:12px}
table{border-collapse:collapse;background:#fff} td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#eee} td.l,th.l{text-align:left}
.grid{display:flex;flex-wrap:wrap;gap:16px} .card{background:#fff;border:1px solid #ccc;padding:8px;max-width:440px}
svg text{font-size:11px;fill:#333} .axis{stroke:#999} .c0{stroke:#1f77b4;fill:none;stroke-width:2}
.c1{stroke:#d62728;fill:none;stroke-width:1.5;stroke-dasharray:5 3} .band{fill:#1f77b4;opacity:.15}
.edge{stroke:#888} .edge.extra{stroke:#bbb;stroke-dasharray:3 3} .node{fill:#1f77b4} .node.failed{fill:#b00} .rate{fill:#555;font-size:10px}
.s0{fill:#2ca02c} .s1{fill:#ff7f0e} .s2{fill:#d62728}
</style></head><body>
<h1 id="title">dpgossip run</h1>
<div class="facts" id="facts">waiting for the first status...</div>
<div id="failure" class="bad"></div>
<h2>Peers</h2><table id="peers"><thead><tr><th>rank</th><th class="l">host</th><th class="l">transport</th>
<th>step</th><th>samples/s (wall)</th><th id="eps-head">epsilon (its data)</th><th>epsilon (its messages)</th><th class="l">state</th><th>last heard</th>
<th>sent</th><th>received</th><th>blocked</th><th>in flight</th></tr></thead><tbody></tbody></table>
<div class="note" id="peers-note"></div>
<div class="grid">
<div class="card"><h2>Topology</h2><svg id="graph" width="300" height="300"></svg><div id="graph-note" class="note"></div></div>
<div class="card"><h2 id="acc-title">Test accuracy</h2><svg id="acc" width="420" height="260"></svg><div class="note" id="acc-note"></div>
<label class="note">x axis <select id="curve-x"><option value="epoch">epochs</option><option value="wall">wall time (s)</option></select></label></div>
<div class="card"><h2 id="loss-title">Test loss</h2><svg id="loss" width="420" height="260"></svg><div class="note" id="loss-note"></div></div>
<div class="card"><h2>Privacy spent</h2><svg id="eps" width="420" height="260"></svg><div class="note" id="eps-note"></div></div>
<div class="card"><h2>Consensus distance</h2><svg id="cons" width="420" height="260"></svg><div class="note" id="cons-note"></div></div>
<div class="card"><h2 id="split-title">Time split</h2><svg id="split" width="420" height="260"></svg><div class="note" id="split-note"></div></div>
</div>
<h2>Privacy</h2><p id="privacy"></p>
<h2>Configuration</h2><details><summary>the run's config (less its noise seed)</summary><pre id="config"></pre></details>
<div id="env-box" style="display:none"><h2>Environment</h2><table id="env"><tbody></tbody></table></div>
<p class="note" id="updated"></p>
<script>
"use strict";
const token = (location.hash.match(/token=([^&]+)/) || [])[1];
const NS = "http://www.w3.org/2000/svg";
function el(tag, attrs, text) {
  const e = document.createElementNS(NS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}
function fmt(v, d) {
  if (v === null || v === undefined) return "\u2013";
  if (typeof v !== "number") return String(v);
  if (!isFinite(v)) return "\u221e";
  return v.toFixed(d === undefined ? 3 : d);
}
function text(id, s) { document.getElementById(id).textContent = s; }
// series: [{points: [[x, y]...], cls, band: [[x, lo, hi]...]}]; log: a log-scale y axis.
function chart(id, xlabel, series, log) {
  const svg = document.getElementById(id);
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const W = +svg.getAttribute("width"), H = +svg.getAttribute("height"), L = 52, B = 34, T = 8, R = 10;
  const ys = [], xs = [];
  for (const s of series) {
    for (const p of s.points || []) { xs.push(p[0]); ys.push(p[1]); }
    for (const p of s.band || []) { xs.push(p[0]); ys.push(p[1], p[2]); }
  }
  const fy = ys.filter(y => isFinite(y) && (!log || y > 0));
  if (xs.length === 0 || fy.length === 0) { svg.appendChild(el("text", {x: L, y: H / 2}, "no data yet")); return; }
  const tx = v => log ? Math.log10(v) : v;
  let x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...fy.map(tx)), y1 = Math.max(...fy.map(tx));
  if (x1 === x0) x1 = x0 + 1;
  if (y1 === y0) { y1 = y0 + 1; if (!log) y0 = y0 - 1; }
  const X = x => L + (x - x0) / (x1 - x0) * (W - L - R), Y = y => H - B - (tx(y) - y0) / (y1 - y0) * (H - B - T);
  svg.appendChild(el("line", {x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis"}));
  svg.appendChild(el("line", {x1: L, y1: T, x2: L, y2: H - B, class: "axis"}));
  for (let i = 0; i <= 4; ++i) {
    const yv = y0 + (y1 - y0) * i / 4, xv = x0 + (x1 - x0) * i / 4;
    const yl = log ? Math.pow(10, yv).toPrecision(2) : yv.toPrecision(3);
    svg.appendChild(el("text", {x: 2, y: H - B - (H - B - T) * i / 4 + 4}, yl));
    svg.appendChild(el("text", {x: L + (W - L - R) * i / 4 - 8, y: H - B + 14}, xv.toPrecision(3)));
  }
  svg.appendChild(el("text", {x: W / 2 - 20, y: H - 4}, xlabel));
  for (const s of series) {
    const ok = p => isFinite(p[1]) && (!log || p[1] > 0);
    if (s.band && s.band.length) {
      const up = s.band.map(p => X(p[0]) + "," + Y(p[2])), down = s.band.slice().reverse().map(p => X(p[0]) + "," + Y(p[1]));
      svg.appendChild(el("polygon", {points: up.concat(down).join(" "), class: "band"}));
    }
    const pts = (s.points || []).filter(ok).map(p => X(p[0]) + "," + Y(p[1]));
    if (pts.length) svg.appendChild(el("polyline", {points: pts.join(" "), class: s.cls}));
  }
}
function bytes(v) {
  if (v === null || v === undefined) return "\u2013";
  const u = ["B", "kB", "MB", "GB", "TB"];
  let i = 0;
  while (Math.abs(v) >= 1000 && i < u.length - 1) { v /= 1000; ++i; }
  return v.toFixed(i ? 1 : 0) + " " + u[i];
}
// Each link's rate both ways (bytes/s over the last interval of the senders' figures), by "i-j".
function link_rates(live) {
  const r = {};
  for (const p of live || []) for (const l of p.links || []) {
    const k = Math.min(p.rank, l.peer) + "-" + Math.max(p.rank, l.peer);
    if (l.sent_per_second !== null) r[k] = (r[k] || 0) + l.sent_per_second;
    else if (!(k in r)) r[k] = null;
  }
  return r;
}
function graph(facts, failed, live, ended) {
  const svg = document.getElementById("graph");
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const n = facts.peers, g = (facts.graphs || [])[0];
  const pos = r => [150 + 120 * Math.cos(2 * Math.PI * r / n - Math.PI / 2), 150 + 120 * Math.sin(2 * Math.PI * r / n - Math.PI / 2)];
  const rates = link_rates(live);
  // The graph's edges; with no graph (or beside it), every link that carried bytes.
  const edges = g ? g.edges.map(e => [Math.min(e[0], e[1]), Math.max(e[0], e[1]), false]) : [];
  for (const k of Object.keys(rates)) {
    const [i, j] = k.split("-").map(Number);
    if (!edges.some(e => e[0] === i && e[1] === j)) edges.push([i, j, !!g]);
  }
  for (const [i, j, extra] of edges) {
    const a = pos(i), b = pos(j), k = i + "-" + j;
    svg.appendChild(el("line", {x1: a[0], y1: a[1], x2: b[0], y2: b[1], class: extra ? "edge extra" : "edge"}));
    if (!ended && n <= 16 && rates[k] !== undefined && rates[k] !== null) {
      svg.appendChild(el("text", {x: (a[0] + b[0]) / 2 - 14, y: (a[1] + b[1]) / 2 - 3, class: "rate"}, bytes(rates[k]) + "/s"));
    }
  }
  for (let r = 0; r < n; ++r) {
    const p = pos(r);
    svg.appendChild(el("circle", {cx: p[0], cy: p[1], r: n > 32 ? 3 : 9, class: "node" + (failed ? " failed" : "")}));
    if (n <= 32) svg.appendChild(el("text", {x: p[0] + 11, y: p[1] + 4}, String(r)));
  }
  text("graph-note", (g ? g.label + ": spectral gap " + fmt(g.spectral_gap) + ", rho " + fmt(g.rho) +
       ((facts.graphs.length > 1) ? " (first of " + facts.graphs.length + " phases)" : "")
       : "the links that carried bytes (" + facts.algo + ")") +
       (live ? (ended ? "; the links' totals are in the peers' table" :
                "; on each link its throughput both ways over the last second; dashed: links outside the graph (the collectives' for the metrics and evaluation)") : ""));
}
// Each peer's time, as a bar: computing (not blocked), blocked on a link; and beside it the
// share with some message in flight, the same definitions as tools/trace_summary.py.
function split_chart(live, ended) {
  const svg = document.getElementById("split");
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const rows = (live || []).filter(p => p.step !== undefined).map(p => ended ?
    [p.rank, p.clock_s > 0 ? p.blocked_s / p.clock_s : null, p.clock_s > 0 ? p.in_flight_s / p.clock_s : null] :
    [p.rank, p.blocked_share, p.in_flight_share]).filter(r => r[1] !== null);
  text("split-title", ended ? "Time split, whole run" : "Time split, last second");
  if (!rows.length) {
    svg.setAttribute("height", 60);
    svg.appendChild(el("text", {x: 20, y: 30}, live ? "no figures yet" :
                                                "none: the peers' figures come with --status-port or --report, on more than one peer"));
    text("split-note", "");
    return;
  }
  const W = +svg.getAttribute("width"), L = 60, R = 10, h = Math.max(6, Math.min(24, 600 / rows.length));
  svg.setAttribute("height", 16 + rows.length * h);
  rows.forEach(([rank, blocked, flight], i) => {
    const y = 8 + i * h, w = W - L - R, b = Math.min(1, Math.max(0, blocked));
    svg.appendChild(el("text", {x: 4, y: y + h * 0.7}, "peer " + rank));
    svg.appendChild(el("rect", {x: L, y: y, width: w * (1 - b), height: h * 0.45, class: "s0"}));
    svg.appendChild(el("rect", {x: L + w * (1 - b), y: y, width: w * b, height: h * 0.45, class: "s2"}));
    svg.appendChild(el("rect", {x: L, y: y + h * 0.5, width: w * Math.min(1, Math.max(0, flight)), height: h * 0.3, class: "s1"}));
  });
  text("split-note", "green: computing (the training thread not blocked); red: blocked waiting on a link; orange, below: some message of the step in flight " +
       "(it overlaps computing: the part of it not red is hidden behind compute). Measured live by each peer's links, as tools/trace_summary.py reads a trace.");
}
function render(s) {
  shown = s;
  if (!s.facts) {
    text("facts", s.state === "failed" ? "" : "setting up the run: connecting the peers, calibrating the noise");
    text("failure", s.failure ? "failed: " + s.failure : "");
    return;
  }
  const f = s.facts, last = s.epochs.length ? s.epochs[s.epochs.length - 1] : null;
  const latest = s.summary || last;
  text("title", "dpgossip run " + f.run);
  document.getElementById("facts").innerHTML = "";
  const facts = [["state", s.state], ["algorithm", f.algo], ["peers", f.peers], ["step", s.step + " of " + f.privacy.steps],
    ["epsilon (model)", fmt(latest ? latest.epsilon : null)], ["epsilon (messages)", fmt(latest ? latest.message_epsilon : null)],
    ["target", fmt(f.privacy.target_epsilon) + " at delta " + f.privacy.delta], ["samples/s", fmt(latest ? latest.samples_per_second : null, 0)],
    ["wall", fmt(s.summary && typeof s.summary.wall_s === "number" ? s.summary.wall_s : s.wall_s, 0) + " s"]];
  for (const [k, v] of facts) {
    const sp = document.createElement("span");
    sp.id = "fact-" + k.replace(/[^a-z]/g, "");
    sp.textContent = k + ": " + v;
    document.getElementById("facts").appendChild(sp);
  }
  text("failure", s.failure ? "failed: " + s.failure : "");
  // Each peer's step: rank 0's own, and the others' as the last consensus line saw them.
  const lastc = s.consensus.length ? s.consensus[s.consensus.length - 1] : null;
  const steps = lastc && lastc.peer_steps ? lastc.peer_steps : null;
  const body = document.querySelector("#peers tbody");
  body.innerHTML = "";
  const ended = s.state !== "running" && s.state !== "starting";
  for (const p of f.peer_list) {
    const tr = document.createElement("tr");
    const lv = s.live ? s.live[p.rank] : null, heard = lv && lv.step !== undefined;
    const step = heard ? lv.step : p.rank === 0 ? s.step : steps ? steps[p.rank] : f.peers_in_step ? "\u2248 " + s.step : null;
    const eps = s.peer_epsilons ? s.peer_epsilons[p.rank] : null;
    const meps = s.peer_message_epsilons ? s.peer_message_epsilons[p.rank] : null;
    let state = s.state === "running" ? (p.rank === 0 || !steps || steps[p.rank] !== null ? "running" : "not heard in the last report") : s.state;
    if (lv) state = lv.state === "waiting" ? "waiting on " + lv.waiting_on + " for " + fmt(lv.waiting_s, 1) + " s" :
                    lv.state === "running" && s.state !== "running" ? s.state : lv.state;
    const rate = heard && !ended && lv.steps_per_second !== null && p.expected_batch ? lv.steps_per_second * p.expected_batch : null;
    // Over the last interval while the run goes on; over the whole run once it has ended.
    const share = (k, total) => !heard ? null : ended ? (lv.clock_s > 0 ? lv[total] / lv.clock_s : null) : lv[k];
    const pct = v => v === null || v === undefined ? null : (100 * v).toFixed(0) + "%";
    for (const [v, cls] of [[p.rank, ""], [p.host, "l"], [p.transport === null ? "no link" : p.transport, "l"], [step, ""],
                            [fmt(rate, 0), ""], [fmt(eps), ""], [fmt(meps), ""], [state, "l"], [heard && !ended ? fmt(lv.last_heard_s, 1) + " s ago" : null, ""],
                            [heard ? bytes(lv.bytes_sent) : null, ""], [heard ? bytes(lv.bytes_received) : null, ""],
                            [pct(share("blocked_share", "blocked_s")), ""], [pct(share("in_flight_share", "in_flight_s")), ""]]) {
      const td = document.createElement("td");
      td.textContent = v === null || v === undefined ? "\u2013" : v;
      if (cls) td.className = cls;
      tr.appendChild(td);
    }
    body.appendChild(tr);
  }
  text("peers-note", s.live ? "Each peer's figures as it last sent them to rank 0 (once a second): samples/s is its steps per second of wall time (evaluation and the metrics included, which the epoch lines' figure leaves out) times its expected batch; " +
       "blocked: the share of time its training thread waited on a link, in flight: the share during which some message of its step was moving (it overlaps computing), " +
       (ended ? "over the whole run; sent and received: every byte its links carried." : "over the last second; sent and received: every byte its links have carried.") :
       f.peers_in_step ? "A synchronous algorithm: every peer waits for the others (gossip: for its neighbours) at each step, so the peers stay within a few steps of rank 0." :
       steps ? "Other peers' steps as of the last consensus report (round " + lastc.round + ")." : "");
  text("eps-head", s.peer_epsilons_step !== null && s.peer_epsilons_step !== undefined && s.state === "running" ?
       "epsilon (its data), at step " + s.peer_epsilons_step : "epsilon (its data)");
  graph(f, s.state === "failed", s.live, ended);
  split_chart(s.live, ended);
  const split = last && last.split === "validation" ? "validation" : "test";
  const Split = split === "validation" ? "Validation" : "Test";
  // The released model's accuracy and loss, and the band of the peers' own, against epochs or
  // against wall time since training started (the selector under the accuracy chart).
  const wall = document.getElementById("curve-x").value === "wall";
  const xof = e => wall ? e.wall_s : e.epoch, xlabel = wall ? "wall time (s)" : "epoch";
  for (const [id, what] of [["acc", "accuracy"], ["loss", "loss"]]) {
    const line = s.epochs.map(e => [xof(e), e[split + "_" + what]]);
    const peers = e => e["peer_" + split + "_" + what];
    const band = s.epochs.filter(e => peers(e) && peers(e).length)
      .map(e => [xof(e), Math.min(...peers(e)), Math.max(...peers(e))]);
    text(id + "-title", Split + " " + what);
    chart(id, xlabel, [{points: line, cls: "c0", band: band}]);
    text(id + "-note", "line: the released model" + (band.length ? "; band: the peers' own models, lowest to highest" : "") +
         (id === "acc" && last && last.train_metrics === "unprotected" ? ". This run also publishes its training loss and accuracy (not covered by epsilon)." : ""));
  }
  const spent = s.epochs.map(e => [e.step, e.epsilon]);
  chart("eps", "step", [{points: spent, cls: "c0"}, {points: f.privacy.plan, cls: "c1"}]);
  text("eps-note", "line: spent (model); dashed: the plan to the end, at the start's rates");
  const pts = s.consensus.filter(c => c.consensus_distance >= 0).map(c => [c.round, c.consensus_distance]);
  const rho = f.graphs && f.graphs.length ? f.graphs[0].rho : null;
  // The rho^t prediction of tools/plot_consensus.py: plain gossip (no gradient, no noise) from
  // the first measured point, CD0 rho^(2 (t - t0)) (the distance is a squared norm), down to a
  // millionth of CD0; none when the distance grows from its first point (one common start).
  const pred = [];
  const grows = pts.length > 1 && pts[1][1] > pts[0][1];
  if (pts.length && rho !== null && rho >= 0 && rho <= 1 && pts[0][1] > 0 && !grows) {
    for (const p of pts) {
      const v = pts[0][1] * Math.pow(rho, 2 * (p[0] - pts[0][0]));
      if (v >= pts[0][1] * 1e-6) pred.push([p[0], v]);
    }
  }
  chart("cons", "step", [{points: pts, cls: "c0"}, {points: pred, cls: "c1"}], true);
  text("cons-note", !pts.length ? "this algorithm's replicas are equal (no consensus lines)" :
       pred.length ? "line: measured; dashed: the rho^t prediction of plain gossip from the first point, CD0 rho^(2(t - t0))" :
       "line: measured. No rho^t prediction: the distance grows from its first point (the peers started from one model), so there is nothing to decay from");
  const pv = f.privacy;
  text("privacy", !pv.dp ? "No DP: this run's model and messages carry no privacy guarantee." :
       "Epsilon " + fmt(latest ? latest.epsilon : null) + " for the released model (the worst peer's data) and " +
       fmt(latest ? latest.message_epsilon : null) + " for any one peer's messages, at delta " + pv.delta +
       (s.summary ? "" : " so far") + "; accountant " + f.config.accountant + ", noise multiplier " + fmt(pv.noise_multiplier) +
       " (" + pv.noise_mode + " noise), " + pv.steps + " steps planned" +
       (s.peer_epsilons ? "; each peer's: " + s.peer_epsilons.map(e => fmt(e)).join(", ") : "") + ". docs/PRIVACY.md says what each figure covers.");
  text("config", JSON.stringify(f.config, null, 1));
  text("updated", window.DPG_REPORT ? "report written " + window.DPG_REPORT.environment.written :
       "updated " + new Date().toLocaleTimeString());
}
let shown = null;  // the last status drawn, drawn again when the curves' x axis changes
document.getElementById("curve-x").addEventListener("change", () => { if (shown) render(shown); });
function environment(e) {
  document.getElementById("env-box").style.display = "";
  const body = document.querySelector("#env tbody");
  for (const k of Object.keys(e)) {
    const tr = document.createElement("tr");
    for (const [v, cls] of [[k, "l"], [k === "memory_bytes" ? (e[k] / 2 ** 30).toFixed(1) + " GiB" : e[k], "l"]]) {
      const td = document.createElement("td");
      td.textContent = v;
      td.className = cls;
      tr.appendChild(td);
    }
    body.appendChild(tr);
  }
}
async function poll() {
  try {
    const r = await fetch("/api/status", {headers: token ? {Authorization: "Bearer " + token} : {}});
    if (!r.ok) throw new Error("HTTP " + r.status);
    render(await r.json());
  } catch (e) {
    text("updated", "cannot reach the run: " + e.message);
  }
  setTimeout(poll, 1500);
}
if (window.DPG_REPORT) {
  render(window.DPG_REPORT.status);
  environment(window.DPG_REPORT.environment);
} else {
  poll();
}
</script></body></html>
)HTML";
  return page;
}

}  // namespace dpg::app
