package main

// runsPage is the web list of runs (/ui/): the caller's runs from
// GET /v1/runs, newest first, filtered by status, agent, parent, creation
// time and an ID prefix, a page at a time, each a link to its run page. The
// filters live in the URL fragment with the token (#token=...&status=failed),
// which browsers never send to the server, so a filtered view can be
// bookmarked and shared without its token reaching a log. While it shows the
// first page it reads it again every five seconds (live); a later page
// stays as it was read. Static, like runPage: every datum comes from the
// JSON API and is written into the page as text, never as HTML.
const runsPage = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Cairn runs</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}
h1{font-size:1.3em;margin:0 0 .6em} form{display:flex;gap:.6em;flex-wrap:wrap;align-items:end;margin-bottom:1em}
label{display:flex;flex-direction:column;font-size:.85em;color:#555} input,select{font:inherit}
table{border-collapse:collapse;width:100%;background:#fff} th,td{text-align:left;padding:.3em .5em;border-bottom:1px solid #e4e4e4;vertical-align:top}
th{font-weight:600;color:#444} td.id{font-family:monospace} td.err{color:#b33;overflow-wrap:anywhere}
.st{font-weight:600} .st-running{color:#2a5db0} .st-needs_input{color:#a80} .st-completed{color:#2a7a45} .st-failed{color:#b33} .st-cancelled{color:#777}
.pager{margin:1em 0;display:flex;gap:1em;align-items:center} #note{color:#555}
</style></head><body>
<h1>Runs</h1>
<form id="filters">
 <label>status <select name="status"><option value="">any</option><option>running</option><option>needs_input</option><option>completed</option><option>failed</option><option>cancelled</option></select></label>
 <label>agent <input name="agent" size="14"></label>
 <label>parent run <input name="parent" size="24"></label>
 <label>created since <input name="since" type="datetime-local" step="1"></label>
 <label>created before <input name="until" type="datetime-local" step="1"></label>
 <label>run or session ID <input name="q" size="24"></label>
 <label>children <select name="children"><option value="">roots only</option><option value="true">and children</option></select></label>
 <button>Filter</button>
</form>
<table><thead><tr><th>run</th><th>agent</th><th>status</th><th>created</th><th>updated</th><th>parent</th><th>node</th><th>error</th></tr></thead>
<tbody id="runs"></tbody></table>
<div class="pager"><button id="first" hidden>First page</button><button id="next" hidden>Next page</button><span id="note">loading…</span></div>
<script>
"use strict";
const params = new URLSearchParams(location.hash.slice(1));
const token = params.get("token") || "";
const headers = token ? {"Authorization": "Bearer " + token} : {};
const fields = ["status", "agent", "parent", "since", "until", "q", "children"];
const form = document.getElementById("filters");
let cursor = params.get("cursor") || "", timer = 0;
for (const f of fields) {
  const v = params.get(f) || "";
  form.elements[f].value = (f === "since" || f === "until") && v ? v.replace(/Z$/, "").slice(0, 19) : v;
}
function query() {
  const q = new URLSearchParams();
  for (const f of fields) {
    let v = form.elements[f].value.trim();
    if (!v) continue;
    if ((f === "since" || f === "until") && !/Z$/.test(v)) v = (v.length === 16 ? v + ":00" : v) + "Z";
    q.set(f, v);
  }
  if (params.get("limit")) q.set("limit", params.get("limit"));
  return q;
}
function link(id) {
  const a = document.createElement("a");
  a.href = "/ui/runs/" + encodeURIComponent(id) + (token ? "#token=" + encodeURIComponent(token) : "");
  a.textContent = id;
  return a;
}
function cell(tr, text, cls) {
  const td = tr.insertCell();
  if (text instanceof Node) td.appendChild(text); else td.textContent = text || "";
  if (cls) td.className = cls;
  return td;
}
function when(t) { return t ? new Date(t).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") : ""; }
async function load() {
  clearTimeout(timer);
  const q = query();
  if (cursor) q.set("cursor", cursor);
  const note = document.getElementById("note");
  let resp, body;
  try {
    resp = await fetch("/v1/runs?" + q, {headers});
    body = await resp.json();
  } catch (e) {
    note.textContent = "the node did not answer: " + e;
    timer = setTimeout(load, 5000);
    return;
  }
  if (!resp.ok) {
    note.textContent = (body.error && body.error.message) || ("HTTP " + resp.status);
    note.className = "st-failed";
    return;
  }
  note.className = "";
  const tbody = document.getElementById("runs");
  tbody.replaceChildren();
  for (const r of body.runs) {
    const tr = tbody.insertRow();
    tr.className = "run";
    tr.dataset.run = r.run_id;
    cell(tr, link(r.run_id), "id");
    cell(tr, r.agent);
    cell(tr, r.status, "st st-" + r.status);
    cell(tr, when(r.created));
    cell(tr, when(r.updated));
    cell(tr, r.parent_run_id ? link(r.parent_run_id) : "", "id");
    cell(tr, r.node);
    cell(tr, r.error, "err");
  }
  const next = document.getElementById("next");
  next.hidden = !body.next_cursor;
  next.onclick = () => { cursor = body.next_cursor; save(); load(); };
  document.getElementById("first").hidden = !cursor;
  note.textContent = body.runs.length + (body.runs.length === 1 ? " run" : " runs") + (cursor ? "" : " (live)");
  document.body.dataset.rendered = String(Date.now());
  if (!cursor) timer = setTimeout(load, 5000);
}
function save() {
  const h = query();
  if (token) h.set("token", token);
  if (cursor) h.set("cursor", cursor);
  history.replaceState(null, "", "#" + h);
}
form.addEventListener("submit", ev => { ev.preventDefault(); cursor = ""; save(); load(); });
document.getElementById("first").onclick = () => { cursor = ""; save(); load(); };
load();
</script></body></html>`
