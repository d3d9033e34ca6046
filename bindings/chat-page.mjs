// chat-page.mjs — the chat page served at GET / by the OpenAI handler (openai.mjs), in
// `knotwork serve` and on the mesh entry. One self-contained HTML document (a JS string, so
// a Worker can serve it without a file system). It talks to /v1/chat/completions with
// stream: true, shows tokens as they arrive and reads the `: knotwork {json}` telemetry
// comments of the stream: phase, prefill progress, tokens, rolling tok/s, memory, the
// topology with per-station / per-shard state, retries and failures. Stop aborts the
// request: the server sees the client leave and frees the session (the reply so far stays).
// For tests: window.knotTelemetry holds every telemetry event received.
export const CHAT_PAGE_HTML = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>knotwork chat</title>
<style>
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,sans-serif;background:#f6f7f9;color:#1d2330;display:grid;grid-template-columns:1fr 330px;grid-template-rows:minmax(0,1fr);height:100vh;overflow:hidden}
main{display:flex;flex-direction:column;min-width:0;min-height:0}
header{padding:10px 16px;border-bottom:1px solid #dde1e7;background:#fff;display:flex;gap:10px;align-items:center;flex-wrap:wrap}
header b{font-size:16px}
select,input,textarea,button{font:inherit}
#messages{flex:1;min-height:0;overflow:auto;padding:16px}
.msg{max-width:760px;margin:0 0 12px;padding:10px 12px;border-radius:8px;white-space:pre-wrap;word-wrap:break-word}
.user{background:#dfe9ff;margin-left:auto}
.assistant{background:#fff;border:1px solid #dde1e7}
.error{background:#ffe3e3;border:1px solid #f3a5a5}
form{display:flex;gap:8px;padding:12px 16px;border-top:1px solid #dde1e7;background:#fff}
textarea{flex:1;resize:none;height:58px;padding:8px;border:1px solid #c8ced8;border-radius:6px}
button{padding:0 18px;border:0;border-radius:6px;background:#2f6fed;color:#fff;cursor:pointer}
button:disabled{background:#9db5e8}
#stop{background:#c0262d}#stop:disabled{background:#e3a3a6}
aside{border-left:1px solid #dde1e7;background:#fff;padding:12px 14px;overflow:auto}
aside h2{font-size:13px;text-transform:uppercase;letter-spacing:.04em;color:#667;margin:14px 0 6px}
.kv{display:grid;grid-template-columns:auto 1fr;gap:2px 10px}
.kv span:nth-child(odd){color:#667}
.big{font-size:26px;font-weight:600}
.bar{height:8px;background:#e6e9ef;border-radius:4px;overflow:hidden}
.bar div{height:100%;width:0;background:#2f6fed;transition:width .15s}
table{border-collapse:collapse;width:100%;font-size:12px}
td,th{text-align:left;padding:2px 4px;border-bottom:1px solid #eef0f3}
.st-ready,.st-ok{color:#197a3a}.st-busy{color:#2f6fed}.st-retry{color:#b26a00}.st-failed,.st-down{color:#c0262d}
#log{font:11px/1.35 ui-monospace,monospace;color:#556;max-height:180px;overflow:auto;white-space:pre-wrap}
</style></head>
<body>
<main>
<header><b>knotwork</b>
<label>model <select id="model"></select></label>
<label>max tokens <input id="max" type="number" value="256" min="1" style="width:70px"></label>
<label>temperature <input id="temp" type="number" value="0.8" min="0" max="2" step="0.1" style="width:60px"></label>
<label>API key <input id="key" type="password" placeholder="(none)" style="width:120px"></label>
</header>
<div id="messages"></div>
<form id="form"><textarea id="input" placeholder="Say something… (Enter sends, Shift+Enter: new line)"></textarea><button id="send">Send</button><button id="stop" type="button" disabled>Stop</button></form>
</main>
<aside>
<h2>Now</h2>
<div class="kv"><span>phase</span><b id="phase">idle</b><span>model</span><span id="tmodel">–</span>
<span>quantization</span><span id="tquant">–</span><span>context</span><span id="tctx">–</span></div>
<h2>Speed</h2>
<div><span class="big" id="tps">0.0</span> tok/s</div>
<div class="kv"><span>tokens</span><span id="tokens">0</span><span>prompt</span><span id="tprompt">–</span>
<span>prefill</span><span id="tprefill">–</span><span>memory</span><span id="tmem">–</span></div>
<h2>Prefill</h2><div class="bar"><div id="pbar"></div></div>
<h2>Topology</h2><div id="topology">–</div>
<h2>Events</h2><div id="log"></div>
</aside>
<script type="module">
const $ = (id) => document.getElementById(id);
const history = [];
window.knotTelemetry = [];
const key = $("key");
key.value = localStorage.getItem("knotwork-key") || "";
key.onchange = () => localStorage.setItem("knotwork-key", key.value);
const headers = () => ({"content-type": "application/json", ...(key.value ? {authorization: "Bearer " + key.value} : {})});

async function loadModels() {
  const r = await fetch("/v1/models", {headers: headers()});
  const j = await r.json();
  if (!r.ok) { note("error api", j.error?.message || r.statusText); return; }
  document.querySelectorAll(".msg.error.api").forEach((e) => e.remove());  // the key works now
  $("model").innerHTML = "";
  for (const m of j.data) $("model").append(new Option(m.id, m.id));
}
key.addEventListener("change", loadModels);

function note(cls, text) {
  const d = document.createElement("div");
  d.className = "msg " + cls;
  d.textContent = text;
  $("messages").append(d);
  $("messages").scrollTop = 1e9;
  return d;
}
// Streaming appends text nodes (a token costs its own length, not the reply's) and scrolls
// once per frame, so a fast stream keeps the page responsive (Stop stays clickable).
const toScroll = new Set();
function scrollSoon(el) {
  if (!toScroll.size) requestAnimationFrame(() => { for (const e of toScroll) e.scrollTop = 1e9; toScroll.clear(); });
  toScroll.add(el);
}
function log(line) {
  const l = $("log");
  l.append(line + "\\n");
  scrollSoon(l);
}
const mib = (b) => (b / 1048576).toFixed(1) + " MiB";

function topology(t) {
  if (!t) return;
  const rows = (list, kind, range) => (list || []).map((s) =>
    "<tr><td>" + kind + "</td><td>" + esc(s.name ?? (s.members || []).join(", ")) + "</td><td>" + esc(JSON.stringify(s[range] ?? "")) +
    "</td><td class=st-" + esc(s.state ?? "") + ">" + esc(s.state ?? "") + "</td></tr>").join("");
  $("topology").innerHTML = "<div>" + esc(t.kind ?? "") + "</div><table><tr><th></th><th>name</th><th>range</th><th>state</th></tr>" +
    rows(t.stations, "station", "layers") + rows(t.shards, "shard", "vocab") + "</table>";
}
// Member state when the backend does not report it: a generation that runs or ends
// without naming a member means that member answered (a failed one stays failed).
function members(state) {
  if (!topo) return;
  for (const m of [...(topo.stations || []), ...(topo.shards || [])]) if (m.state !== "failed") m.state = state;
  topology(topo);
}
const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
let topo = null, running = null;  // running: the AbortController of the request in flight
$("stop").onclick = () => running?.abort();

function telemetry(ev) {
  window.knotTelemetry.push(ev);
  switch (ev.type) {
    case "accepted":
      $("phase").textContent = "accepted";
      $("tmodel").textContent = ev.model + (ev.arch ? " (" + ev.arch + ")" : "");
      $("tquant").textContent = ev.quantization ?? "–";
      $("tctx").textContent = ev.nCtx ?? "–";
      $("tprompt").textContent = ev.promptTokens;
      topo = ev.topology; topology(topo);
      break;
    case "queue": $("phase").textContent = "queued (" + ev.ahead + " ahead)"; break;
    case "prefill":
      $("phase").textContent = ev.done < ev.total ? "prefill " + ev.done + "/" + ev.total : "prefill done";
      $("pbar").style.width = (100 * ev.done / Math.max(1, ev.total)) + "%";
      $("tprefill").textContent = ev.done + "/" + ev.total + " in " + (ev.elapsedMs / 1000).toFixed(2) + " s";
      break;
    case "decode": $("phase").textContent = "decoding"; members("busy"); break;
    case "tokens":
      $("tokens").textContent = ev.n;
      $("tps").textContent = ev.tokS.toFixed(1);
      if (ev.memory) $("tmem").textContent = mib(ev.memory.linear ?? ev.memory);
      break;
    case "topology": topo = ev; topology(ev); break;
    case "station": case "shard": {
      const list = topo && topo[ev.type + "s"];
      const s = list && list.find((x) => x.name === ev.name);
      if (s) { Object.assign(s, ev); topology(topo); }
      break;
    }
    case "done":
      $("phase").textContent = "done (" + ev.reason + ")";
      members("ok");
      if (ev.decodeTokS) $("tps").textContent = ev.decodeTokS.toFixed(1);
      if (ev.peakLinearBytes) $("tmem").textContent = "peak " + mib(ev.peakLinearBytes);
      break;
    case "retry": case "failure": $("phase").textContent = ev.type + ": " + (ev.reason ?? ""); break;
    case "route": $("tmodel").textContent += " · " + (ev.stations ?? "?") + " stations, " + (ev.shards ?? "?") + " shards"; break;
  }
  log(JSON.stringify(ev));
}

async function send(text) {
  history.push({role: "user", content: text});
  note("user", text);
  const out = note("assistant", "");
  $("send").disabled = true;
  const ac = running = new AbortController();
  $("stop").disabled = false;
  $("phase").textContent = "sending";
  $("tokens").textContent = "0"; $("tps").textContent = "0.0"; $("pbar").style.width = "0";
  let reply = "";
  try {
    const r = await fetch("/v1/chat/completions", {method: "POST", headers: headers(), signal: ac.signal, body: JSON.stringify({
      model: $("model").value, messages: history, stream: true,
      max_tokens: Number($("max").value) || undefined, temperature: Number($("temp").value)})});
    if (!r.ok) {
      const j = await r.json().catch(() => ({}));
      throw new Error(j.error?.message || r.status + " " + r.statusText);
    }
    const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    for (;;) {
      const {done, value} = await reader.read();
      if (done) break;
      buf += value;
      let i;
      while ((i = buf.indexOf("\\n\\n")) >= 0) {
        const block = buf.slice(0, i); buf = buf.slice(i + 2);
        for (const line of block.split("\\n")) {
          if (line.startsWith(": knotwork ")) telemetry(JSON.parse(line.slice(11)));
          else if (line.startsWith("data: ")) {
            const d = line.slice(6);
            if (d === "[DONE]") continue;
            const j = JSON.parse(d);
            if (j.error) throw new Error(j.error.message);
            const delta = j.choices?.[0]?.delta?.content;
            if (delta) { reply += delta; out.append(delta); scrollSoon($("messages")); }
          }
        }
      }
    }
    history.push({role: "assistant", content: reply});
  } catch (e) {
    if (ac.signal.aborted) {  // Stop: keep what came
      history.push({role: "assistant", content: reply});
      $("phase").textContent = "stopped";
      log(JSON.stringify({type: "stopped", chars: reply.length}));
      return;
    }
    out.className = "msg error";
    out.textContent = (reply ? reply + "\\n" : "") + "error: " + e.message;
    $("phase").textContent = "failed";
    history.pop();
  } finally {
    running = null;
    $("send").disabled = false;
    $("stop").disabled = true;
  }
}

$("form").onsubmit = (e) => {
  e.preventDefault();
  const t = $("input").value.trim();
  if (!t || $("send").disabled) return;
  $("input").value = "";
  send(t);
};
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("form").requestSubmit(); }
});
loadModels();
</script>
</body></html>
`;
