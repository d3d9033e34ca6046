// Prefix reuse across requests (workers/coordinator/prefixes.mjs, llama-server's cache_prompt)
// under workerd, through the official openai client and the NDJSON route: a request whose
// prompt starts with what a held session's stations already hold feeds only the rest
// (usage.prompt_tokens_details.cached_tokens = the common prefix; the prefill telemetry's total
// and the stations' frame counts show only the new tokens), with the output of a cold run,
// greedy and seeded; clients with different prompts never share a session.
import {test} from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import {sharedKnot, single, meshFor} from "./helpers.mjs";
import * as kw from "../../bindings/knotwork.mjs";

const MODEL = "stories260K-pad256-llama-q4_k_m.gguf";
const common = (a, b) => { let i = 0; while (i < a.length && i < b.length && a[i] === b[i]) i++; return i; };

// What the entry feeds: the chat template's ids, as workers/coordinator/prompt.mjs renders them.
async function chatIds(bytes, messages) {
  const m = await kw.openModel(kw.bytesSource(bytes, "ids.knot"));
  try { return m.tokenize(m.applyChatTemplate(messages, {template: "chatml"}), {addBos: true, parseSpecial: true}); } finally { m.close(); }
}

// The ids a finished generation leaves held at the stations: the prompt and every generated
// token but the last (never fed).
const heldAfter = (promptIds, gen) => promptIds.concat(gen.slice(0, -1));

// A streamed chat completion read raw: its text, its usage chunk and its `: knotwork` telemetry.
async function streamChat(mesh, body) {
  const res = await fetch(new URL("/v1/chat/completions", mesh.url), {method: "POST", headers: {"content-type": "application/json"},
    body: JSON.stringify({model: "model", stream: true, stream_options: {include_usage: true}, ...body})});
  assert.equal(res.status, 200, await res.clone().text());
  const raw = await res.text();
  const data = [...raw.matchAll(/^data: (\{.*\})$/gm)].map((m) => JSON.parse(m[1]));
  const tele = [...raw.matchAll(/^: knotwork (\{.*\})$/gm)].map((m) => JSON.parse(m[1]));
  return {text: data.map((d) => d.choices?.[0]?.delta?.content ?? "").join(""), usage: data.find((d) => d.usage)?.usage, tele};
}

for (const [what, sampling, opts] of [["greedy", {temperature: 0}, {temperature: 0}],
                                      ["seeded", {temperature: 0.8, seed: 11}, {temperature: 0.8, seed: 11}]]) {
  test(`a chat's turn 2 prefills only its new tokens and equals a cold run (${what}); a prompt diverging at its first tokens reuses nothing`, async (t) => {
    const bytes = await sharedKnot(t, MODEL);
    if (!bytes) return;
    const turn1 = [{role: "user", content: "Tell me a story about a cat"}];
    const ids1 = await chatIds(bytes, turn1);
    const want1 = await single(bytes, ids1, {maxTokens: 12, ...opts});
    const turn2 = [...turn1, {role: "assistant", content: want1.text}, {role: "user", content: "And then what happened?"}];
    const ids2 = await chatIds(bytes, turn2);
    const want2 = await single(bytes, ids2, {maxTokens: 12, ...opts});
    const cached = Math.min(common(heldAfter(ids1, want1.ids), ids2), ids2.length - 1);
    assert.ok(cached > ids1.length / 2, `the turns share ${cached} of ${ids2.length} ids`);
    const mesh = await meshFor(bytes, {stations: [2, 3], shards: 2}, {port: 0, chatTemplate: "chatml"});
    try {
      const client = new OpenAI({baseURL: new URL("/v1", mesh.url).href, apiKey: "unused"});
      const r1 = await client.chat.completions.create({model: "model", messages: turn1, max_tokens: 12, ...sampling});
      assert.equal(r1.choices[0].message.content, want1.text);
      assert.equal(r1.usage.prompt_tokens_details.cached_tokens, 0, "turn 1 is cold");
      const before = await mesh.stats();
      const r2 = await streamChat(mesh, {messages: turn2, max_tokens: 12, ...sampling});
      const after = await mesh.stats();
      assert.equal(r2.text, want2.text, "turn 2 equals a cold run of its whole prompt");
      assert.equal(r2.usage.prompt_tokens, ids2.length);
      assert.equal(r2.usage.prompt_tokens_details.cached_tokens, cached, "cached = the common prefix");
      const prefill = r2.tele.filter((e) => e.type === "prefill");
      assert.ok(prefill.length && prefill.every((e) => e.total === ids2.length - cached), JSON.stringify(prefill));
      assert.equal(prefill[0].cached, cached);
      // each station: one frame per prefill chunk (the new tokens fit one) and one per decode step
      for (const n of ["st0", "st1"])
        assert.equal(after[n].stats.frames - before[n].stats.frames, 1 + (want2.ids.length - 1), `${n}: frames of turn 2`);
      // the official client sees the cached count too (non-streamed)
      const r3 = await client.chat.completions.create({model: "model", messages: turn2, max_tokens: 12, ...sampling});
      assert.equal(r3.choices[0].message.content, want2.text);
      assert.equal(r3.usage.prompt_tokens_details.cached_tokens, Math.min(common(heldAfter(ids2, want2.ids), ids2), ids2.length - 1));
      // prompts (token ids) that diverge from the held one at token 0, and at token 1 (sharing
      // only the BOS): a new session each, nothing reused, their own outputs
      for (const at of [0, 1]) {
        const idsO = ids2.slice();
        idsO[at] = (idsO[at] + 1) % 256;
        assert.equal(common(idsO, ids2), at);
        const wantO = await single(bytes, idsO, {maxTokens: 6, ...opts});
        const rO = await client.completions.create({model: "model", prompt: idsO, max_tokens: 6, ...sampling});
        assert.equal(rO.choices[0].text, wantO.text);
        assert.equal(rO.usage.prompt_tokens_details.cached_tokens, 0, `diverging at token ${at}: nothing reused`);
      }
      assert.equal((await mesh.stats()).st0.stats.liveSessions, 3, "three sessions held: the chat's and the two others'");
    } finally { await mesh.close(); }
  });
}

test("two clients' chats, concurrent: each turn 2 reuses its own session only, outputs equal cold runs", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes) return;
  const opts = {maxTokens: 10, temperature: 0};
  const chats = [[{role: "user", content: "Tell me a story about a cat"}], [{role: "user", content: "Lily went to the park"}]];
  const mesh = await meshFor(bytes, {stations: [2, 3], shards: 2}, {port: 0, chatTemplate: "chatml"});
  try {
    const client = new OpenAI({baseURL: new URL("/v1", mesh.url).href, apiKey: "unused"});
    const want1 = [], turn2 = [], want2 = [], cached = [];
    for (const c of chats) {
      const w = await single(bytes, await chatIds(bytes, c), opts);
      want1.push(w);
      const m2 = [...c, {role: "assistant", content: w.text}, {role: "user", content: "What next?"}];
      turn2.push(m2);
      const ids2 = await chatIds(bytes, m2);
      want2.push(await single(bytes, ids2, opts));
      cached.push(Math.min(common(heldAfter(await chatIds(bytes, c), w.ids), ids2), ids2.length - 1));
    }
    const ask = (messages) => client.chat.completions.create({model: "model", messages, max_tokens: 10, temperature: 0});
    const r1 = await Promise.all(chats.map(ask));
    r1.forEach((r, i) => assert.equal(r.choices[0].message.content, want1[i].text, `client ${i}, turn 1`));
    const r2 = await Promise.all(turn2.map(ask));
    r2.forEach((r, i) => {
      assert.equal(r.choices[0].message.content, want2[i].text, `client ${i}, turn 2`);
      assert.equal(r.usage.prompt_tokens_details.cached_tokens, cached[i], `client ${i}: its own prefix`);
    });
    // one station session per client (the turns reused them; none was shared)
    const st = await mesh.stats();
    assert.equal(st.st0.stats.liveSessions, 2);
  } finally { await mesh.close(); }
});

test("NDJSON route: a repeated prompt feeds one token, the stations count only it; an evicted session is ended at the stations", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes) return;
  const m = await kw.openModel(kw.bytesSource(bytes, "ids.knot"));
  const ids = m.tokenize("Once upon a time there was a little girl");
  const other = m.tokenize("The dog ran to the big red barn");
  m.close();
  const opts = {maxTokens: 8, temperature: 0, chunk: 1};
  const want = await single(bytes, ids, opts);
  // room for two held sessions of the default context (2048 positions)
  const mesh = await meshFor(bytes, {stations: [2, 3], shards: 2}, {prefixCache: {kvTokens: 2 * 2048}});
  try {
    const a = await mesh.run({ids, options: opts});
    assert.deepEqual(a.summary.ids, want.ids);
    assert.equal(a.summary.cachedTokens, 0);
    const before = await mesh.stats();
    const b = await mesh.run({ids, options: opts});
    const after = await mesh.stats();
    assert.deepEqual(b.summary.ids, want.ids, "the same ids from a held session");
    assert.equal(b.summary.cachedTokens, ids.length - 1);
    assert.equal(b.telemetry.find((e) => e.event === "route").sid, a.telemetry.find((e) => e.event === "route").sid);
    // chunk 1: a frame per fed token: the last prompt token, then the decode steps
    for (const n of ["st0", "st1"]) assert.equal(after[n].stats.frames - before[n].stats.frames, 1 + want.ids.length - 1, n);
    // a second and a third session: the budget holds two, so the least recently used is ended
    const o = await mesh.run({ids: other, options: opts});
    assert.equal(o.summary.cachedTokens, 0);
    assert.equal((await mesh.stats()).st0.stats.liveSessions, 2);
    const third = await mesh.run({ids: [1, 400, 300, 200], options: opts});
    assert.equal(third.summary.cachedTokens, 0);
    let live;
    for (let i = 0; i < 50 && (live = (await mesh.stats()).st0.stats.liveSessions) !== 2; i++) await new Promise((r) => setTimeout(r, 100));
    assert.equal(live, 2, "LRU: the oldest held session was ended at the stations");
    const again = await mesh.run({ids, options: opts});
    assert.equal(again.summary.cachedTokens, 0, "the evicted prefix is gone");
    assert.deepEqual(again.summary.ids, want.ids);
  } finally { await mesh.close(); }
});

for (const [what, counts] of [["a station chain", {stations: [1, 2, 2], shards: 2, chain: true}],
                              ["split layers (2 slices)", {stations: [2, 3], shards: 1, slices: 2}]]) {
  // (a split layer that is not block-aligned sums its slices up to activation-quantization noise
  // (docs/architecture.md): its cold run is the same topology's with reuse off, not one process's)
  test(`${what}: a held session rewinds at every member and feeds only the new tokens, same ids as a cold run`, async (t) => {
    const bytes = await sharedKnot(t, MODEL);
    if (!bytes) return;
    const m = await kw.openModel(kw.bytesSource(bytes, "ids.knot"));
    const ids1 = m.tokenize("Once upon a time there was a little girl");
    const ids2 = ids1.concat(m.tokenize(" who liked to play in the park", {addBos: false}));
    m.close();
    const opts = {maxTokens: 8, temperature: 0};
    const cold = await meshFor(bytes, counts, {prefixCache: {kvTokens: 0}});  // reuse off
    let want1, want2;
    try {
      want1 = (await cold.run({ids: ids1, options: opts})).summary;
      want2 = (await cold.run({ids: ids2, options: opts})).summary;
      assert.equal(want2.cachedTokens, 0, "kvTokens 0: nothing held, nothing reused");
    } finally { await cold.close(); }
    const mesh = await meshFor(bytes, counts);
    try {
      const a = await mesh.run({ids: ids1, options: opts});
      assert.deepEqual(a.summary?.ids, want1.ids, a.error?.error);
      const b = await mesh.run({ids: ids2, options: opts});
      assert.deepEqual(b.summary?.ids, want2.ids, b.error?.error);
      const cached = Math.min(common(heldAfter(ids1, want1.ids), ids2), ids2.length - 1);
      assert.ok(cached >= ids1.length - 1);
      assert.equal(b.summary.cachedTokens, cached);
      assert.equal(b.summary.reprefills, 0, "no station lost the session: each rewound it");
      assert.equal(b.telemetry.find((e) => e.event === "prefill_completed").tokens, ids2.length - cached);
    } finally { await mesh.close(); }
  });
}

test("a held session unused for PREFIX_CACHE.ttlMs is ended at every station by the index's alarm, with no further request", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes) return;
  const mesh = await meshFor(bytes, {stations: [2, 3], shards: 2}, {prefixCache: {ttlMs: 1500}});
  try {
    const r = await mesh.run({ids: [1, 403, 407, 261, 378], options: {maxTokens: 4, temperature: 0}});
    assert.ok(r.summary, r.error?.error);
    const held = await mesh.stats();
    for (const n of ["st0", "st1"]) assert.equal(held[n].stats.liveSessions, 1, `${n}: held after the request`);
    let live = null;
    const t0 = Date.now();
    while (Date.now() - t0 < 15_000) {
      const st = await mesh.stats();
      live = [st.st0.stats.liveSessions, st.st1.stats.liveSessions];
      if (live.every((n) => n === 0)) break;
      await new Promise((res) => setTimeout(res, 250));
    }
    assert.deepEqual(live, [0, 0], "the alarm ended the session at both stations");
  } finally { await mesh.close(); }
});
