// Abort in the JS API: model.generate(p, {signal}) stops within one step of the abort
// (no token event after it), throws the signal's reason, and frees its session: the wasm
// heap is back at its level before the generation. A signal aborted before the call does
// no work; an abort between prompt pieces stops the prefill.
import {test, before, after} from "node:test";
import assert from "node:assert/strict";

import * as kw from "../../bindings/knotwork.mjs";
import {sharedModel} from "./helpers.mjs";

let model = null;
before(async () => {
  const p = sharedModel({skip() {}}, "stories260K.gguf");
  if (p) model = await kw.openModel(p);
});
after(() => model?.close());

const heap = async () => (await kw.memoryStats()).heap;
// The ABI keeps the last call's result buffer (a few hundred bytes that vary with it); a
// session's KV cache and buffers are far more (asserted below).
const SLACK = 1024;
const near = async (h0, what) => {
  const h = await heap();
  assert.ok(Math.abs(h - h0) < SLACK, `${what}: heap ${h} is back at ${h0} (within the result buffer's ${SLACK} bytes)`);
};

test("generate({signal}): an abort after 3 tokens stops before the 4th, throws AbortError, and frees the session", async (t) => {
  if (!model) return t.skip("no model");
  await model.complete("Once upon a time", {maxTokens: 4, temperature: 0});  // warm: lazy allocations settled
  const h0 = await heap();
  const ac = new AbortController();
  let tokens = 0, during = 0;
  await assert.rejects(async () => {
    for await (const ev of model.generate("Once upon a time", {maxTokens: 200, ignoreEos: true, temperature: 0, signal: ac.signal})) {
      if (ev.type !== "token") continue;
      tokens++;
      if (tokens === 3) { during = await heap(); ac.abort(); }
    }
  }, (e) => e.name === "AbortError");
  assert.equal(tokens, 3, "no token after the abort");
  assert.ok(during - h0 > 20 * SLACK, `the session held memory while it ran (${during} vs ${h0})`);
  await near(h0, "after the abort");
  // the reason given to abort() is what is thrown
  const ac2 = new AbortController();
  const why = new Error("user pressed stop");
  await assert.rejects(async () => {
    for await (const ev of model.generate("Once upon a time", {maxTokens: 50, signal: ac2.signal})) if (ev.type === "token") ac2.abort(why);
  }, (e) => e === why);
  await near(h0, "after abort(reason)");
  // after an abort the model generates as before
  const a = await model.complete("Once upon a time", {maxTokens: 12, temperature: 0});
  const b = await model.complete("Once upon a time", {maxTokens: 12, temperature: 0, signal: new AbortController().signal});
  assert.deepEqual(b.ids, a.ids);
});

test("generate({signal}): aborted before the call: nothing runs; aborted between prompt pieces: the prefill stops", async (t) => {
  if (!model) return t.skip("no model");
  const h0 = await heap();
  const ac = new AbortController();
  ac.abort();
  let events = 0;
  await assert.rejects(async () => { for await (const _ of model.generate("Once upon a time", {signal: ac.signal})) events++; },
                       (e) => e.name === "AbortError");
  assert.equal(events, 0);
  await near(h0, "a signal aborted before the call");
  const ids = model.tokenize("Once upon a time there was a little girl who loved to play in the park with her dog and her friends every day.");
  const prompt = [...ids, ...ids.slice(1), ...ids.slice(1)];
  const ac2 = new AbortController();
  const seen = [];
  await assert.rejects(async () => {
    for await (const ev of model.generate(prompt, {chunk: 8, prefillProgress: 8, maxTokens: 4, signal: ac2.signal})) {
      seen.push(ev.type === "prefill" ? ev.done : ev.type);
      if (ev.type === "prefill" && ev.done === 8) ac2.abort();
    }
  }, (e) => e.name === "AbortError");
  assert.deepEqual(seen, [0, 8], "no piece after the abort");
  await near(h0, "an abort during the prefill");
});
