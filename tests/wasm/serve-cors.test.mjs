// Browser clients of `knotwork serve`: the official `openai` client (node_modules/openai's
// ESM build, served as files) in headless Chromium on another origin streams a chat reply
// equal to the Node client's (its x-stainless-* headers pass the CORS preflight); the
// preflight reflects the requested headers; /health answers without the key; and `serve`
// listens before it loads: /health is a 503 {status: "loading"} until the model is in.
import {test} from "node:test";
import assert from "node:assert/strict";
import {spawn} from "node:child_process";
import {createReadStream, existsSync, statSync} from "node:fs";
import {createServer} from "node:http";
import {join, normalize} from "node:path";
import OpenAI from "openai";

import {ROOT, sharedModel, startServe, haveChromium, launchChromium} from "./helpers.mjs";


const PAGE = `<!doctype html><meta charset="utf-8"><title>openai in the browser</title>
<script type="module">
import OpenAI from "/openai/index.mjs";
window.streamChat = async (baseURL, apiKey, body) => {
  const client = new OpenAI({dangerouslyAllowBrowser: true, baseURL, apiKey, maxRetries: 0});
  const stream = await client.chat.completions.create({...body, stream: true});
  let text = "", chunks = 0, finish = null;
  for await (const c of stream) {
    chunks++;
    text += c.choices[0]?.delta?.content ?? "";
    finish = c.choices[0]?.finish_reason ?? finish;
  }
  return {text, chunks, finish};
};
window.ready = true;
</script>`;

/** The page at / and node_modules/openai under /openai/ (the page's origin). */
async function pageServer() {
  const base = join(ROOT, "node_modules/openai");
  const server = createServer((req, res) => {
    const path = new URL(req.url, "http://x").pathname;
    if (path === "/") { res.writeHead(200, {"content-type": "text/html; charset=utf-8"}); res.end(PAGE); return; }
    const file = normalize(join(base, path.replace(/^\/openai\//, "")));
    if (!path.startsWith("/openai/") || !file.startsWith(base) || !existsSync(file) || !statSync(file).isFile()) {
      res.writeHead(404); res.end(); return;
    }
    res.writeHead(200, {"content-type": "text/javascript; charset=utf-8"});
    createReadStream(file).pipe(res);
  });
  await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
  return {url: `http://localhost:${server.address().port}`, close: () => new Promise((ok) => { server.closeAllConnections(); server.close(ok); })};
}

test("CORS preflight reflects the requested headers; /health needs no key", async (t) => {
  const model = sharedModel(t, "stories260K.gguf");
  if (!model) return;
  const srv = await startServe(model, ["--api-key", "cors-key"]);
  t.after(() => srv.stop());
  const asked = "authorization, content-type, x-stainless-os, x-stainless-lang, x-stainless-retry-count";
  const r = await fetch(`${srv.url}/v1/chat/completions`, {method: "OPTIONS", headers: {
    origin: "http://elsewhere.test", "access-control-request-method": "POST", "access-control-request-headers": asked}});
  assert.equal(r.status, 204);
  assert.equal(r.headers.get("access-control-allow-origin"), "*");
  assert.equal(r.headers.get("access-control-allow-headers"), asked);
  assert.match(r.headers.get("access-control-allow-methods"), /POST/);
  // no requested headers: the defaults
  const d = await fetch(`${srv.url}/v1/models`, {method: "OPTIONS"});
  assert.equal(d.headers.get("access-control-allow-headers"), "authorization, content-type");
  const h = await fetch(`${srv.url}/health`);
  assert.equal(h.status, 200);
  assert.equal((await h.json()).status, "ok");
  assert.equal((await fetch(`${srv.url}/v1/models`)).status, 401, "the API still needs the key");
});

test("the openai browser client on another origin streams a chat reply from serve (Chromium)", {timeout: 120_000}, async (t) => {
  const model = sharedModel(t, "stories260K.gguf");
  if (!model) return;
  if (!haveChromium(t)) return;
  const srv = await startServe(model, ["--api-key", "browser-key", "--ctx", "256"]);
  t.after(() => srv.stop());
  const site = await pageServer();
  t.after(() => site.close());
  assert.notEqual(new URL(site.url).origin, new URL(srv.url).origin);
  const body = {model: srv.id, messages: [{role: "user", content: "Tell me a story."}], max_tokens: 24, temperature: 0};
  const node = new OpenAI({baseURL: `${srv.url}/v1`, apiKey: "browser-key", maxRetries: 0});
  const want = (await node.chat.completions.create(body)).choices[0].message.content;
  assert.ok(want.length > 0);

  const ctx = await launchChromium();
  t.after(() => ctx.close());
  const page = await ctx.newPage();
  const logs = [], sent = [];
  page.on("console", (m) => logs.push(`${m.type()}: ${m.text()}`));
  page.on("pageerror", (e) => logs.push(`pageerror: ${e.message}`));
  page.on("request", (r) => { if (r.url().startsWith(srv.url)) sent.push(r.headers()); });
  await page.goto(site.url + "/");
  await page.waitForFunction(() => window.ready === true, null, {timeout: 30_000});
  const got = await page.evaluate(([u, b]) => window.streamChat(u, "browser-key", b), [`${srv.url}/v1`, body])
    .catch((e) => { throw new Error(`${e.message}\n${logs.join("\n")}`); });
  assert.equal(got.text, want, "the browser's streamed text is the Node client's");
  assert.ok(got.chunks > 5, `${got.chunks} chunks: streamed`);
  assert.equal(got.finish, "length");
  assert.ok(sent.some((h) => Object.keys(h).some((k) => k.startsWith("x-stainless-"))),
            "the browser client sent x-stainless-* headers (a preflight had to allow them)");
});

test("serve listens before loading: /health is 503 {status: loading} until the model is in, then 200", {timeout: 60_000}, async (t) => {
  const model = sharedModel(t, "stories260K.gguf");
  if (!model) return;
  // the model over HTTP, its tensor bytes held back until released
  let release, held = 0;
  const gate = new Promise((ok) => { release = ok; });
  const size = statSync(model).size;
  const files = createServer(async (req, res) => {
    const m = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range ?? "");
    const start = m ? Number(m[1]) : 0, end = m && m[2] ? Math.min(Number(m[2]), size - 1) : size - 1;
    if (start > 4096) { held++; await gate; }  // past the header probe
    res.writeHead(m ? 206 : 200, {"content-length": end - start + 1, "accept-ranges": "bytes",
                                  ...(m ? {"content-range": `bytes ${start}-${end}/${size}`} : {})});
    if (req.method === "HEAD") { res.end(); return; }
    createReadStream(model, {start, end}).pipe(res);
  });
  await new Promise((ok) => files.listen(0, "127.0.0.1", ok));
  t.after(() => new Promise((ok) => { files.closeAllConnections(); files.close(ok); }));
  const url = `http://127.0.0.1:${files.address().port}/stories260K.gguf`;
  const proc = spawn(process.execPath, [join(ROOT, "bin/knotwork.mjs"), "serve", url, "--port", "0", "--api-key", "k"],
                     {stdio: ["ignore", "pipe", "pipe"]});
  t.after(() => { if (proc.exitCode === null) proc.kill("SIGTERM"); });
  let stderr = "";
  const base = await new Promise((ok, fail) => {
    proc.stderr.on("data", (d) => {
      stderr += d;
      const m = /listening at (http:\/\/\S+)/.exec(stderr);
      if (m) ok(m[1]);
    });
    proc.on("exit", (code) => fail(new Error(`serve exited with ${code}: ${stderr}`)));
  });
  // held: the model is not loaded
  while (held === 0) await new Promise((r) => setTimeout(r, 20));
  const h = await fetch(`${base}/health`);
  assert.equal(h.status, 503);
  const hb = await h.json();
  assert.equal(hb.status, "loading");
  assert.ok(hb.progress >= 0 && hb.progress < 1);
  const api = await fetch(`${base}/v1/models`, {headers: {authorization: "Bearer k"}});
  assert.equal(api.status, 503);
  assert.equal((await api.json()).error.code, "model_loading");
  assert.ok(!/serving /.test(stderr), "not serving yet");
  release();
  for (let i = 0; ; i++) {
    const r = await fetch(`${base}/health`);
    if (r.status === 200) { assert.equal((await r.json()).status, "ok"); break; }
    assert.equal(r.status, 503);
    assert.ok(i < 500, "loaded within 10 s of the release");
    await new Promise((r) => setTimeout(r, 20));
  }
  const models = await (await fetch(`${base}/v1/models`, {headers: {authorization: "Bearer k"}})).json();
  assert.equal(models.data[0].id, "stories260K");
});
