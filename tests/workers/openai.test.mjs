// The OpenAI-compatible API (bindings/openai.mjs) on the mesh's entry Worker, driven by the
// official openai client over real HTTP into workerd: the same text as one process.
import {test} from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import {sharedKnot, single, meshFor} from "./helpers.mjs";
import * as kw from "../../bindings/knotwork.mjs";
import {createHandler} from "../../bindings/openai.mjs";
import {localBackend} from "../../bindings/local-backend.mjs";

// The single-process chat reference: `knotwork serve`'s handler (local backend, one wasm
// instance) through the same client, non-streamed; the ids from Model.generate on the
// chat-formatted prompt, as token bytes (what chat logprobs carry).
async function singleChat(bytes, {messages, maxTokens}) {
  const m = await kw.openModel(kw.bytesSource(bytes, "single.knot"));
  try {
    const handle = createHandler(localBackend(m, {id: "model"}));
    const client = new OpenAI({baseURL: "http://single/v1", apiKey: "unused", maxRetries: 0,
                               fetch: async (url, init) => handle(new Request(url, init))});
    const r = await client.chat.completions.create({model: "model", messages, max_tokens: maxTokens, temperature: 0, logprobs: true});
    const ids = [], logprobs = [];
    let pieces = "";
    const prompt = m.tokenize(m.applyChatTemplate(messages), {addBos: true, parseSpecial: true});
    for await (const e of m.generate(prompt, {maxTokens, temperature: 0, logprobs: 0}))
      if (e.type === "token") { ids.push(e.token); logprobs.push(e.logprob); pieces += e.text; }
    const text = r.choices[0].message.content;
    assert.ok(ids.length >= 4, `a non-trivial chat continuation (${ids.length} tokens)`);
    assert.equal(pieces, text, "the single-process handler's chat text is Model.generate's on the template's prompt");
    return {text, finish: r.choices[0].finish_reason, logprobs, bytes: ids.map((id) => Array.from(m.tokenBytes(id)))};
  } finally { m.close(); }
}

test("openai client -> entry Worker -> mesh: completions and chat (streamed: text and token ids) equal single-process greedy output", async (t) => {
  const bytes = await sharedKnot(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!bytes) return;
  const want = await single(bytes, "Once upon a time", {maxTokens: 16, temperature: 0});
  const chat = {messages: [{role: "user", content: "Tell me a story"}], maxTokens: 12};
  const chatWant = await singleChat(bytes, chat);
  const mesh = await meshFor(bytes, {stations: [2, 3], shards: 2}, {port: 0});
  try {
    const client = new OpenAI({baseURL: new URL("/v1", mesh.url).href, apiKey: "unused"});
    const models = await client.models.list();
    assert.equal(models.data[0].id, "model");
    const c = await client.completions.create({model: "model", prompt: "Once upon a time", max_tokens: 16, temperature: 0});
    assert.equal(c.choices[0].text, want.text);
    assert.equal(c.usage.completion_tokens, want.ids.length);
    const stream = await client.chat.completions.create({model: "model", messages: chat.messages, max_tokens: chat.maxTokens,
                                                         temperature: 0, stream: true, logprobs: true});
    let text = "", finish = null;
    const tokens = [];
    for await (const ch of stream) {
      assert.equal(ch.choices.length, 1, JSON.stringify(ch));
      const [choice] = ch.choices;
      if (typeof choice.delta.content === "string") text += choice.delta.content;
      for (const e of choice.logprobs?.content ?? []) tokens.push(e);  // chunks without a token carry logprobs: null
      if (choice.finish_reason !== null) finish = choice.finish_reason;
    }
    assert.equal(text, chatWant.text, "streamed chat text vs the single-process chat output");
    assert.equal(finish, chatWant.finish);
    assert.deepEqual(tokens.map((e) => e.bytes), chatWant.bytes, "streamed chat token ids (as their bytes) vs single process");
    tokens.forEach((e, i) => assert.ok(Math.abs(e.logprob - chatWant.logprobs[i]) < 1e-9, `chat token ${i}: ${e.logprob} vs ${chatWant.logprobs[i]}`));
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
    // one read can carry several events (a loaded client reads late): at least three arrived
    assert.ok(data >= 3, `three tokens streamed before the client leaves (${data} events)`);
    ac.abort();
    const after = await stationStats();
    for (const n of stations) {
      const frames = after[n].stats.frames - before[n].stats.frames;
      assert.ok(frames < 100, `${n}: the generation stopped after the disconnect (${frames} frames, not ~400)`);
      assert.equal(after[n].stats.liveSessions, 1, `${n}: session freed after the disconnect (the held one stays)`);
      // Back to its level: what remains may differ only by the module's result buffer (the
      // last call's output, e.g. a KV snapshot's rows) and dlmalloc's usable-size slack — a few
      // KiB — never by a session's KV cache (2048 positions x 2 x 16 KV heads x head_dim 8 x 2
      // bytes x 2 or 3 layers = 2-3 MiB here), which a leak would leave behind.
      const grew = after[n].memory.heap - before[n].memory.heap;
      assert.ok(Math.abs(grew) < 16 * 1024, `${n}: wasm heap back to its level before the request (${grew} bytes apart)`);
    }
  } finally { await mesh.close(); }
});

test("openai client -> mesh: seeded sampling with presence/frequency penalties and logprobs equals one process", async (t) => {
  const bytes = await sharedKnot(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!bytes) return;
  const opts = {maxTokens: 16, temperature: 0.8, seed: 11, presencePenalty: 0.7, frequencyPenalty: 0.3, logprobs: 2};
  const m = await kw.openModel(kw.bytesSource(bytes, "single.knot"));
  const want = [];
  const utf8 = new TextDecoder();
  try {
    for await (const e of m.generate(m.tokenize("Once upon a time"), opts)) if (e.type === "token") {
      // the legacy completions' top_logprobs: {token text: logprob}, the first of equal texts kept
      const top = {};
      for (const x of e.top) top[utf8.decode(m.tokenBytes(x.token))] ??= x.logprob;
      want.push({...e, topByText: top});
    }
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
    assert.equal(lp.top_logprobs.length, want.length);
    lp.top_logprobs.forEach((top, i) => {
      assert.deepEqual(Object.keys(top), Object.keys(want[i].topByText), `token ${i}: top_logprobs tokens`);
      for (const [k, v] of Object.entries(top))
        assert.ok(Math.abs(v - want[i].topByText[k]) < 1e-9, `token ${i}: top ${JSON.stringify(k)} ${v} vs ${want[i].topByText[k]}`);
    });
  } finally { await mesh.close(); }
});
