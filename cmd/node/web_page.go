package main

// runPage is the web view of one run: its timeline and call tree, followed
// live over the run's event stream, with replay (timeline at a revision),
// re-drive and fork actions. It is static: the token comes from the URL
// fragment (#token=...) and every datum from the JSON API, so nothing of a
// run is in the HTML the server sends.
const runPage = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Cairn run</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}
h1{font-size:1.3em;margin:0 0 .2em} .meta{color:#666;margin-bottom:1em}
.cols{display:flex;gap:2em;align-items:flex-start} .col{flex:1;min-width:0}
h2{font-size:1.05em;border-bottom:1px solid #ddd;padding-bottom:.2em}
ol#timeline{list-style:none;padding:0;margin:0} ol#timeline li{padding:.25em .4em;border-left:4px solid #ccc;margin:.2em 0;background:#fff;white-space:pre-wrap;word-break:break-word}
.rev{color:#888;font-family:monospace;margin-right:.5em} .kind{font-weight:600;margin-right:.5em}
.kind-model{border-color:#4a7bd0!important} .kind-result{border-color:#3a9a5b!important} .kind-call{border-color:#c9a227!important}
.kind-child{border-color:#9a4ad0!important} .kind-completed{border-color:#111!important} .kind-attempt,.kind-created{border-color:#999!important} .kind-ended{border-color:#d04a4a!important}
.kind-model_failure{border-color:#e07b00!important;background:#fff6ea!important} .time{color:#888;font-family:monospace;margin-right:.5em}
#error{background:#fde8e8;border:1px solid #d04a4a;padding:.5em;margin:.5em 0;white-space:pre-wrap}
#answer{background:#eef4ff;border:1px solid #4a7bd0;padding:.5em;margin:.5em 0} #answer textarea{width:100%;min-height:4em;box-sizing:border-box}
table#tokens{border-collapse:collapse;font-family:monospace} table#tokens td,table#tokens th{padding:.1em .6em;text-align:right;border-bottom:1px solid #eee}
ul.tree{list-style:none;padding-left:1.2em} ul.tree li{margin:.2em 0;overflow-wrap:anywhere} .run{font-weight:600}
.state-done{color:#2a7a45} .state-error,.state-unknown{color:#b33} .state-dispatching,.state-pending{color:#a80} .state-skipped{color:#888}
.actions{margin:1em 0;display:flex;gap:.5em;align-items:center;flex-wrap:wrap} #status{color:#555} pre#report{background:#fff;border:1px solid #ddd;padding:.5em;white-space:pre-wrap}
</style></head><body>
<h1 id="title">run</h1><div class="meta" id="meta">loading…</div>
<div id="error" hidden></div>
<div id="answer" hidden><div>The run asks: <b id="question"></b></div><textarea id="reply" placeholder="Your answer"></textarea>
 <button id="send">Answer (continues the session)</button> <span id="sent"></span></div>
<div class="actions">
 <label>revision <input id="at" type="number" min="1" style="width:6em"></label>
 <button id="replay">Replay at revision</button><button id="latest">Latest</button>
 <button id="redrive">Re-drive</button><button id="fork">Fork at revision</button>
 <span id="status"></span>
</div>
<pre id="report" hidden></pre>
<div class="cols">
 <div class="col"><h2>Timeline</h2><ol id="timeline"></ol></div>
 <div class="col"><h2>Call tree</h2><div id="tree"></div><h2>Budget</h2><div id="usage"></div>
  <h2>Tokens and steps over time</h2><table id="tokens"></table></div>
</div>
<script>
"use strict";
const run = decodeURIComponent(location.pathname.split("/").pop());
const token = new URLSearchParams(location.hash.slice(1)).get("token") || "";
const headers = token ? {"Authorization": "Bearer " + token} : {};
let at = 0, live = true;
const $ = id => document.getElementById(id);
function el(tag, cls, text) { const e = document.createElement(tag); if (cls) e.className = cls; if (text !== undefined) e.textContent = text; return e; }
async function api(method, path, body) {
  const r = await fetch(path, {method, headers: Object.assign({"Content-Type": "application/json"}, headers), body: body ? JSON.stringify(body) : undefined});
  const j = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error((j.error && j.error.message) || r.statusText);
  return j;
}
// runLink is a link to another run's page, with this page's token.
function runLink(id, text) { const a = el("a", "runlink", text || id); a.href = "/ui/runs/" + encodeURIComponent(id) + location.hash; return a; }
// when is an event's time: UTC to the millisecond, the full instant on hover.
function when(t) { const d = new Date(t); if (isNaN(d)) return el("span", "time", ""); const s = el("span", "time", d.toISOString().slice(11, 23)); s.title = d.toISOString(); return s; }
function renderTree(n) {
  const li = el("li");
  const head = el("span", "run");
  if (n.run_id !== run) head.appendChild(runLink(n.run_id)); else head.appendChild(document.createTextNode(n.run_id));
  head.appendChild(document.createTextNode(" (" + (n.agent || "?") + ", " + n.status + ")"));
  li.appendChild(head);
  const ul = el("ul", "tree");
  for (const c of (n.calls || [])) {
    const ci = el("li", "call state-" + c.state);
    ci.textContent = "step " + c.step + " · " + c.name + " " + c.id + " → " + c.state + (c.result ? ": " + c.result.slice(0, 160) : "");
    ul.appendChild(ci);
  }
  for (const k of (n.kids || [])) ul.appendChild(renderTree(k));
  li.appendChild(ul);
  return li;
}
async function refresh() {
  const v = await api("GET", "/v1/runs/" + encodeURIComponent(run) + "/view" + (at ? "?at=" + at : ""));
  const rec = v.record || {}, idx = v.run || {};
  const status = idx.status || "?";
  $("title").textContent = "run " + run;
  const meta = $("meta"); meta.replaceChildren();
  meta.append("agent " + (rec.agent || "?") + " · session " + (idx.session_id || rec.session_id || "?") + " · status " + status +
    " · revision " + v.at + " of " + v.last + " · phase " + (v.phase || "?") + (idx.node ? " · node " + idx.node : ""));
  if (rec.parent_run_id) { meta.append(" · child of "); meta.appendChild(runLink(rec.parent_run_id)); }
  if (rec.continues) { meta.append(" · continues "); meta.appendChild(runLink(rec.continues)); }
  if (rec.forked_from) { meta.append(" · forked from "); meta.appendChild(runLink(rec.forked_from)); meta.append(" at " + rec.forked_at); }
  // A run that ended without completing says why, above everything else.
  const ended = v.timeline.filter(e => e.kind === "ended").pop();
  const failed = status === "failed" || status === "cancelled";
  $("error").hidden = !failed;
  if (failed) $("error").textContent = status + ": " + (idx.error || (ended && ended.text) || "no reason recorded");
  const done = v.timeline.filter(e => e.kind === "completed").pop();
  $("answer").hidden = status !== "needs_input";
  if (status === "needs_input" && done) $("question").textContent = done.text.replace(/^needs input: /, "");
  $("at").max = v.last; if (!at) $("at").value = v.last;
  const ol = $("timeline"); ol.replaceChildren();
  for (const e of v.timeline) {
    const li = el("li", "entry kind-" + e.kind);
    li.dataset.rev = e.revision || 0;
    li.appendChild(when(e.time));
    li.appendChild(el("span", "rev", e.revision ? "r" + e.revision : ""));
    li.appendChild(el("span", "kind", e.kind));
    li.appendChild(document.createTextNode(e.text));
    ol.appendChild(li);
  }
  const tree = $("tree"); tree.replaceChildren();
  if (v.tree && v.tree.run_id) { const ul = el("ul", "tree"); ul.appendChild(renderTree(v.tree)); tree.appendChild(ul); }
  const u = v.usage || {};
  $("usage").textContent = (u.steps || 0) + " model steps · " + (u.calls || 0) + " calls · " + (u.commits || 0) + " commits · " + (u.attempts || 0) + " attempts · " + ((u.tokens || {}).input_tokens || 0) + " input + " + ((u.tokens || {}).output_tokens || 0) + " output tokens";
  // Tokens and steps over time: one row per model step, from its commit.
  const tb = $("tokens"); tb.replaceChildren();
  const hr = el("tr"); for (const h of ["time", "step", "input", "output", "total so far"]) hr.appendChild(el("th", "", h)); tb.appendChild(hr);
  let total = 0;
  for (const e of v.timeline) {
    if (e.kind !== "model") continue;
    const u = e.usage || {}; total += (u.input_tokens || 0) + (u.output_tokens || 0);
    const tr = el("tr", "tokens-step"); tr.appendChild(el("td")).appendChild(when(e.time));
    for (const c of [e.step, u.input_tokens || 0, u.output_tokens || 0, total]) tr.appendChild(el("td", "", String(c)));
    tb.appendChild(tr);
  }
  document.body.dataset.rendered = String(v.timeline.length);
}
async function follow() {
  // EventSource cannot send a bearer token: read the SSE stream with fetch.
  try {
    const r = await fetch("/v1/runs/" + encodeURIComponent(run) + "/events", {headers});
    const reader = r.body.getReader(); const dec = new TextDecoder(); let buf = "", pending = null;
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buf += dec.decode(value, {stream: true});
      if (buf.includes("event: end")) { live = false; }
      buf = buf.slice(buf.lastIndexOf("\n\n") + 1);
      if (live && !at && !pending) pending = setTimeout(() => { pending = null; refresh().catch(show); }, 150);
      if (!live) break;
    }
  } catch (e) { show(e); }
  $("status").textContent = live ? "stream closed" : "finished";
  if (!at) refresh().catch(show);
}
function show(e) { $("status").textContent = String(e.message || e); }
$("replay").onclick = () => { at = Number($("at").value) || 0; refresh().catch(show); };
$("latest").onclick = () => { at = 0; refresh().catch(show); };
$("redrive").onclick = async () => {
  $("status").textContent = "re-driving…";
  try { const r = await api("POST", "/v1/runs/" + encodeURIComponent(run) + "/redrive", {at: 0});
    $("report").hidden = false; $("report").textContent = (r.exact ? "identical: " : "DIVERGES: ") + JSON.stringify(r.report, null, 2); $("status").textContent = "";
  } catch (e) { show(e); }
};
$("fork").onclick = async () => {
  try { const r = await api("POST", "/v1/runs/" + encodeURIComponent(run) + "/fork", {at: Number($("at").value) || 1});
    const a = el("a", "", "forked: " + r.run_id); a.href = "/ui/runs/" + r.run_id + location.hash; $("status").replaceChildren(a);
  } catch (e) { show(e); }
};
$("send").onclick = async () => {
  const msg = $("reply").value.trim();
  if (!msg) { $("sent").textContent = "write an answer first"; return; }
  try { const r = await api("POST", "/v1/runs/" + encodeURIComponent(run) + "/continue", {message: msg});
    $("sent").replaceChildren("continued as ", runLink(r.run_id)); $("send").disabled = true;
  } catch (e) { $("sent").textContent = String(e.message || e); }
};
$("status").textContent = "live";
refresh().catch(show);
follow();
</script></body></html>
`
