// The OpenAI-compatible API (bindings/openai.mjs) on the mesh's entry Worker, driven by the
// official openai client over real HTTP into workerd: the same text as one process.
import {test} from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import {sharedKnot, single, meshFor} from "./helpers.mjs";
import * as kw from "../../bindings/knotwork.mjs";

test("openai client -> entry Worker -> mesh: completions and chat (streamed) equal single-process greedy text", async (t) => {
  const bytes = await sharedKnot(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!bytes) return;
  const want = await single(bytes, "Once upon a time", {maxTokens: 16, temperature: 0});
  const mesh = await meshFor(bytes, {stations: [2, 3], shards: 2}, {port: 0});
  try {
    const client = new OpenAI({baseURL: new URL("/v1", mesh.url).href, apiKey: "unused"});
    const models = await client.models.list();
    assert.equal(models.data[0].id, "model");
    const c = await client.completions.create({model: "model", prompt: "Once upon a time", max_tokens: 16, temperature: 0});
    assert.equal(c.choices[0].text, want.text);
    assert.equal(c.usage.completion_tokens, want.ids.length);
    const stream = await client.chat.completions.create({model: "model", messages: [{role: "user", content: "Tell me a story"}],
                                                         max_tokens: 12, temperature: 0, stream: true});
    let text = "";
    for await (const ch of stream) text += ch.choices[0]?.delta?.content ?? "";
    assert.ok(text.length > 0);
    await assert.rejects(client.completions.create({model: "model", prompt: "x", max_tokens: 100000}), /maximum context length/);
  } finally { await mesh.close(); }
});

// (A station's /stats waits while the station serves a session's frames under Miniflare, so
// the session is observed through frame counts: a generation that were not stopped would
// run its 400 decode frames through every station before /stats answers.)
test("a client that disconnects mid-stream frees the session on every station (KV released, wasm heap back to before)", async (t) => {
  const bytes = await sharedKnot(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!bytes) return;
  const mesh = await meshFor(bytes, {stations: [2, 3], shards: 2}, {port: 0});
  const stations = ["st0", "st1"];
  const stationStats = async () => (await (await fetch(new URL("/v1/mesh/stats", mesh.url))).json());
  const post = (body, signal) => fetch(new URL("/v1/completions", mesh.url), {method: "POST", signal,
    headers: {"content-type": "application/json"}, body: JSON.stringify({model: "model", prompt: "Once upon a time", ...body})});
  try {
    // warm: every isolate booted; a finished request's session stays held (prefix reuse)
    await (await post({max_tokens: 4, temperature: 0, prompt: "The cat sat on the mat"})).json();
    const before = await stationStats();
    for (const n of stations) assert.equal(before[n].stats.liveSessions, 1, `${n}: the finished request's session is held`);
    const ac = new AbortController();
    const res = await post({max_tokens: 400, ignore_eos: true, temperature: 0, stream: true}, ac.signal);  // a new session
    assert.equal(res.status, 200);
    const reader = res.body.getReader(), dec = new TextDecoder();
    let text = "", data = 0;
    while (data < 3) {
      const {value, done} = await reader.read();
      if (done) break;
      text += dec.decode(value, {stream: true});
      data = (text.match(/^data: \{/gm) ?? []).length;
    }
    assert.equal(data, 3, "three tokens streamed before the client leaves");
    ac.abort();
    const after = await stationStats();
    for (const n of stations) {
      const frames = after[n].stats.frames - before[n].stats.frames;
      assert.ok(frames < 100, `${n}: the generation stopped after the disconnect (${frames} frames, not ~400)`);
      assert.equal(after[n].stats.liveSessions, 1, `${n}: session freed after the disconnect (the held one stays)`);
      assert.equal(after[n].memory.heap, before[n].memory.heap, `${n}: wasm heap back to its level before the request`);
    }
  } finally { await mesh.close(); }
});

test("openai client -> mesh: seeded sampling with presence/frequency penalties and logprobs equals one process", async (t) => {
  const bytes = await sharedKnot(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!bytes) return;
  const opts = {maxTokens: 16, temperature: 0.8, seed: 11, presencePenalty: 0.7, frequencyPenalty: 0.3, logprobs: 2};
  const m = await kw.openModel(kw.bytesSource(bytes, "single.knot"));
  const want = [];
  try {
    for await (const e of m.generate(m.tokenize("Once upon a time"), opts)) if (e.type === "token") want.push(e);
  } finally { m.close(); }
  const mesh = await meshFor(bytes, {stations: [2, 3], shards: 3}, {port: 0});
  try {
    const client = new OpenAI({baseURL: new URL("/v1", mesh.url).href, apiKey: "unused"});
    const c = await client.completions.create({model: "model", prompt: "Once upon a time", max_tokens: 16, temperature: 0.8,
      seed: 11, presence_penalty: 0.7, frequency_penalty: 0.3, logprobs: 2});
    assert.equal(c.choices[0].text, want.map((e) => e.text).join(""));
    const lp = c.choices[0].logprobs;
    assert.equal(lp.token_logprobs.length, want.length);
    lp.token_logprobs.forEach((x, i) => assert.ok(Math.abs(x - want[i].logprob) < 1e-9, `token ${i}: ${x} vs ${want[i].logprob}`));
    lp.top_logprobs.forEach((top, i) => {
      assert.ok(Object.keys(top).length >= 1, `token ${i}: top_logprobs`);
      for (const v of Object.values(top)) assert.ok(want[i].top.some((x) => Math.abs(x.logprob - v) < 1e-9), `token ${i}: top ${v}`);
    });
  } finally { await mesh.close(); }
});
