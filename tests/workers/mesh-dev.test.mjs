// The main job's mesh part (scripts/mesh-dev.sh, as scripts/run.sh calls it): Worker configs
// for a topology cut from the model, upload to local R2 with progress, the whole mesh under
// a real `wrangler dev`, the URL, one chat completion through the OpenAI endpoint with the
// official client. Greedy, so the text must equal single-process generation; it keeps
// serving (with an API key the entry refuses requests without it) until Ctrl-C, and then
// every process is gone. The entry's chat page in Chromium shows the mesh topology and a
// streamed reply (screenshot build/mesh-chat.png, not committed).
import {test} from "node:test";
import assert from "node:assert/strict";
import {spawn} from "node:child_process";
import {connect, createServer} from "node:net";
import {writeFileSync} from "node:fs";
import {join} from "node:path";

import * as kw from "../../bindings/knotwork.mjs";
import {ROOT, haveChromium, launchChromium, sharedModel, tmpDir} from "../wasm/helpers.mjs";

const freePort = () => new Promise((ok) => {
  const s = createServer().listen(0, "127.0.0.1", () => { const {port} = s.address(); s.close(() => ok(port)); });
});

test("scripts/mesh-dev.sh: the mesh under wrangler dev answers one chat completion exactly as one process does", {timeout: 300_000}, async (t) => {
  const gguf = sharedModel(t, "stories260K.gguf");
  if (!gguf || !haveChromium(t)) return;
  const dir = tmpDir("knotwork-mesh-dev-");
  const m = await kw.openModel(gguf);
  const knot = join(dir, "stories260K.knot");
  writeFileSync(knot, m.toKnot());
  const message = "Tell me a story.";
  const ids = m.tokenize(m.applyChatTemplate([{role: "user", content: message}]), {parseSpecial: true});
  const want = (await m.complete(ids, {maxTokens: 48, temperature: 0})).text;
  const wantPage = (await m.complete(ids, {maxTokens: 24, temperature: 0})).text;  // the page's max tokens below
  m.close();

  const port = await freePort();
  const proc = spawn("bash", [join(ROOT, "scripts/mesh-dev.sh"), knot, message], {
    env: {...process.env, KNOT_PORT: String(port), KNOT_MESH_DIR: join(dir, "mesh"), KNOT_API_KEY: "mesh-key"},
    stdio: ["ignore", "pipe", "pipe"]});
  let out = "", err = "";
  proc.stdout.on("data", (d) => { out += d; });
  const exited = new Promise((ok) => proc.on("exit", (code, signal) => ok({code, signal})));
  await new Promise((ok, fail) => {
    proc.stderr.on("data", (d) => { err += d; if (/serving at .* until Ctrl-C/.test(err)) ok(); });
    exited.then(() => fail(new Error(`mesh-dev.sh ended early:\n${err}`)));
  });
  assert.match(err, /mesh-config: 2 stations \(layers \[0,3\] \[3,5\]\), 2 vocab shards \(\[0,256\] \[256,512\]\)/);
  assert.match(err, /\[#{30}\] 1\.1\/1\.1 MiB/, "upload progress");
  assert.match(err, new RegExp(`serving at http://127\\.0\\.0\\.1:${port}`));
  assert.match(err, /chat: 48 tokens \(finish length\)/);
  assert.equal(out, want + "\n");
  // still serving: the entry wants the key, the chat page is public
  const url = `http://127.0.0.1:${port}`;
  assert.equal((await fetch(`${url}/v1/models`)).status, 401);
  assert.equal((await fetch(`${url}/v1/models`, {headers: {authorization: "Bearer mesh-key"}})).status, 200);
  assert.match(await (await fetch(`${url}/`)).text(), /<title>knotwork chat<\/title>/);
  // the chat page of the entry, in Chromium: a reply streams, the mesh topology shows
  const ctx = await launchChromium({viewport: {width: 1200, height: 800}});
  try {
    const page = await ctx.newPage();
    await page.goto(url + "/");
    await page.fill("#key", "mesh-key");
    await page.dispatchEvent("#key", "change");
    await page.waitForFunction(() => document.querySelector("#model").options.length === 1, null, {timeout: 20_000});
    await page.fill("#max", "24");
    await page.fill("#temp", "0");  // greedy: the reply is comparable with one process
    await page.fill("#input", message);
    await page.press("#input", "Enter");
    await page.waitForFunction(() => document.querySelector("#phase").textContent.startsWith("done"), null, {timeout: 90_000});
    const r = await page.evaluate(() => ({topology: document.querySelector("#topology").textContent,
      reply: document.querySelector(".msg.assistant").textContent, types: window.knotTelemetry.map((e) => e.type)}));
    assert.match(r.topology, /^mesh/);
    assert.match(r.topology, /station\s*st0\s*\[0,3\]\s*ok\s*station\s*st1\s*\[3,5\]\s*ok\s*shard\s*sh0\s*\[0,256\]\s*ok\s*shard\s*sh1\s*\[256,512\]\s*ok/);
    assert.equal(r.reply, wantPage, "the page's streamed reply is the single-process text");
    for (const ty of ["accepted", "route", "prefill", "decode", "tokens", "done"]) assert.ok(r.types.includes(ty), `${ty} in ${r.types}`);
    await page.screenshot({path: join(ROOT, "build/mesh-chat.png"), fullPage: true});
  } finally { await ctx.close(); }
  // Ctrl-C: the script ends, and wrangler and its workerd with it
  proc.kill("SIGINT");
  const {code} = await exited;
  assert.equal(code, 130);
  const probe = () => new Promise((ok) => {  // a fresh TCP connection (fetch may reuse a pooled one)
    const c = connect(port, "127.0.0.1", () => { c.destroy(); ok("connected"); });
    c.on("error", (e) => ok(e.code));
  });
  assert.equal(await probe(), "ECONNREFUSED");
});
