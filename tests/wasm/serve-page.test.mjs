// The chat page of `knotwork serve` (GET /) in headless Chromium: send a message, see the
// reply's tokens arrive and the telemetry move (phase, prefill, tokens, tok/s, topology).
// Screenshot: build/serve-chat.png (a test artifact, not committed).
import {test} from "node:test";
import assert from "node:assert/strict";
import {mkdirSync} from "node:fs";
import {join} from "node:path";

import {ROOT, sharedModel, startServe, haveChromium, launchChromium} from "./helpers.mjs";

test("serve chat page in Chromium: a message streams a reply with live telemetry (API key set)", {timeout: 120_000}, async (t) => {
  const model = sharedModel(t, "stories260K.gguf");
  if (!model) return;
  if (!haveChromium(t)) return;
  const srv = await startServe(model, ["--api-key", "page-key", "--ctx", "512"]);
  t.after(() => srv.stop());
  const ctx = await launchChromium({viewport: {width: 1200, height: 800}});
  t.after(() => ctx.close());
  const page = await ctx.newPage();
  const logs = [];
  page.on("console", (m) => logs.push(`${m.type()}: ${m.text()}`));
  page.on("pageerror", (e) => logs.push(`pageerror: ${e.message}`));
  await page.goto(srv.url + "/");
  // without the key the API refuses, and the page says so
  await page.waitForSelector(".msg.error", {timeout: 10_000});
  assert.match(await page.textContent(".msg.error"), /API key/);
  await page.fill("#key", "page-key");
  await page.dispatchEvent("#key", "change");
  await page.waitForFunction(() => document.querySelector("#model").options.length === 1, null, {timeout: 10_000});
  assert.equal(await page.inputValue("#model"), srv.id);
  assert.equal(await page.locator(".msg.error").count(), 0, "the key error is gone once the key works");
  await page.fill("#max", "120");
  await page.fill("#temp", "0.8");
  await page.fill("#input", "Tell me a story about a cat.");
  await page.press("#input", "Enter");
  // tokens arrive: the reply grows while the phase says decoding
  await page.waitForFunction(() => (document.querySelector(".msg.assistant")?.textContent.length ?? 0) > 0, null, {timeout: 30_000});
  await page.waitForFunction(() => document.querySelector("#phase").textContent.startsWith("done"), null, {timeout: 60_000});
  const r = await page.evaluate(() => ({
    reply: document.querySelector(".msg.assistant").textContent,
    tokens: Number(document.querySelector("#tokens").textContent),
    tps: Number(document.querySelector("#tps").textContent),
    phase: document.querySelector("#phase").textContent,
    quant: document.querySelector("#tquant").textContent,
    topology: document.querySelector("#topology").textContent,
    tele: window.knotTelemetry,
  }));
  assert.ok(r.reply.length > 10, `reply: ${JSON.stringify(r.reply)}\n${logs.join("\n")}`);
  assert.ok(r.tokens > 1, `${r.tokens} tokens`);
  assert.ok(r.tps > 0);
  assert.match(r.phase, /^done \((eog|length|stop)\)$/);
  assert.notEqual(r.quant, "–");
  assert.match(r.topology, /single-process/);
  assert.match(r.topology, /station\s*local\s*\[0,5\]\s*ok/);
  const types = r.tele.map((e) => e.type);
  assert.equal(types[0], "accepted");
  assert.ok(types.includes("prefill") && types.includes("decode") && types.includes("done"));
  const ns = r.tele.filter((e) => e.type === "tokens").map((e) => e.n);
  assert.equal(ns.length, r.tokens, "the token counter moved once per token");
  assert.ok(new Set(r.tele.filter((e) => e.type === "tokens").map((e) => e.tokS.toFixed(3))).size > 1, "tok/s moved");
  // a second turn carries the history
  await page.fill("#input", "And then?");
  await page.press("#input", "Enter");
  await page.waitForFunction(() => document.querySelectorAll(".msg.assistant").length === 2 &&
    document.querySelector("#phase").textContent.startsWith("done"), null, {timeout: 60_000});
  const second = r.tele.length;
  assert.ok((await page.evaluate(() => window.knotTelemetry.length)) > second);
  mkdirSync(join(ROOT, "build"), {recursive: true});
  await page.screenshot({path: join(ROOT, "build/serve-chat.png"), fullPage: true});
});

test("serve chat page in Chromium: Stop ends the generation and the server's live sessions return to 0", {timeout: 120_000}, async (t) => {
  // a random-weight vocab of 32000: EOS is rare, so the reply runs to max tokens (~10 s here)
  const model = sharedModel(t, "llama-2-tiny-random.gguf");
  if (!model) return;
  if (!haveChromium(t)) return;
  const srv = await startServe(model, ["--ctx", "2048"]);
  t.after(() => srv.stop());
  const health = async () => (await fetch(`${srv.url}/health`)).json();
  const h0 = await health();
  assert.equal(h0.sessions, 0);
  const ctx = await launchChromium();
  t.after(() => ctx.close());
  const page = await ctx.newPage();
  await page.goto(srv.url + "/");
  await page.waitForFunction(() => document.querySelector("#model").options.length === 1, null, {timeout: 10_000});
  assert.equal(await page.isDisabled("#stop"), true, "nothing to stop yet");
  await page.fill("#max", "2000");
  await page.fill("#temp", "0");  // greedy: the same reply every run (a sampled one could meet EOS before Stop)
  await page.fill("#input", "Tell me a story.");
  await page.press("#input", "Enter");
  await page.waitForFunction(() => Number(document.querySelector("#tokens").textContent) >= 5, null, {timeout: 30_000});
  const during = await health();
  assert.equal(during.sessions, 1, "the generation holds a session");
  assert.equal(await page.isDisabled("#stop"), false);
  // the reply grows past the log's height: the log scrolls, the form (and Stop) stays put
  const box0 = await page.locator("#stop").boundingBox();
  await page.waitForFunction(() => { const m = document.querySelector("#messages"); return m.scrollHeight > m.clientHeight + 200; }, null, {timeout: 30_000});
  assert.deepEqual(await page.locator("#stop").boundingBox(), box0, "Stop does not move while the reply streams");
  await page.click("#stop");
  await page.waitForFunction(() => document.querySelector("#phase").textContent === "stopped", null, {timeout: 10_000});
  let h;
  for (let i = 0; i < 200; i++) {
    h = await health();
    if (h.sessions === 0) break;
    await new Promise((r) => setTimeout(r, 25));
  }
  assert.equal(h.sessions, 0, "the server freed the session");
  assert.equal(h.served, h0.served, "the generation did not run to its end");
  const r = await page.evaluate(() => ({n: Number(document.querySelector("#tokens").textContent),
    reply: document.querySelector(".msg.assistant").textContent, types: window.knotTelemetry.map((e) => e.type),
    send: document.querySelector("#send").disabled, stop: document.querySelector("#stop").disabled}));
  assert.ok(r.n >= 5 && r.n < 2000, `${r.n} tokens before the stop`);
  assert.ok(!r.types.includes("done"), "no summary: stopped, not finished");
  assert.ok(r.reply.length > 0, "the reply so far stays");
  assert.deepEqual([r.send, r.stop], [false, true], "ready for the next message");
  // the next message is answered
  await page.fill("#max", "8");
  await page.fill("#input", "And then?");
  await page.press("#input", "Enter");
  await page.waitForFunction(() => document.querySelector("#phase").textContent.startsWith("done"), null, {timeout: 30_000});
  assert.equal((await health()).sessions, 0);
});
