// What a public request may ask (workers/coordinator/request.mjs) under workerd: on
// POST /v1/mesh/generate and the OpenAI routes, bad ids, chunk and options are a 400 naming the
// field before anything streams (they were a station's 500, a 200 stream ending in an error, or
// accepted); the internal protocol's knobs (session, timeouts, linkMode) are refused by name,
// and the stations' and shards' counts show the refused requests did nothing.
import {test} from "node:test";
import assert from "node:assert/strict";
import {sharedKnot, single, meshFor} from "./helpers.mjs";

const MODEL = "stories260K-pad256-llama-q4_k_m.gguf";

test("bad ids, chunk, options and internal fields are a 400 naming the field; counts show no effect", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes) return;
  const want = await single(bytes, "Once upon a time", {maxTokens: 8, temperature: 0});
  const mesh = await meshFor(bytes, {stations: [2, 3], shards: 2}, {port: 0});
  const post = (path, body) => fetch(new URL(path, mesh.url), {method: "POST", headers: {"content-type": "application/json"},
                                                                body: JSON.stringify(body)});
  const ok = {ids: want.promptIds, options: {maxTokens: 8, temperature: 0}};
  try {
    const warm = await mesh.run(ok);  // every isolate booted
    assert.deepEqual(warm.summary.ids, want.ids);
    const before = await mesh.stats();
    const cases = [
      [{ids: [1, 2.5]}, /^ids\[1\] must be an integer token id, got 2.5$/],
      [{ids: []}, /^ids is empty/],
      [{ids: [1, 512]}, /^ids\[1\] = 512 is outside the vocabulary \[0, 512\)$/],
      [{ids: [-1]}, /^ids\[0\] = -1 is outside/],
      [{ids: "1 2"}, /^ids must be an array/],
      [{ids: Array(2048).fill(1)}, /^ids: 2048 prompt tokens leave no room in the context of 2048/],
      [{...ok, options: {chunk: 0}}, /^options\.chunk must be in \[1, 2048\], got 0$/],
      [{...ok, options: {chunk: 1.5}}, /^options\.chunk must be an integer/],
      [{...ok, options: {chunk: 5000}}, /^options\.chunk must be in \[1, 2048\]/],
      [{...ok, options: {maxTokens: -1}}, /^options\.maxTokens must be in/],
      [{...ok, options: {temperature: "hot"}}, /^options\.temperature must be a number, got "hot"$/],
      [{...ok, options: {topP: 2}}, /^options\.topP must be in \[0, 1\], got 2$/],
      [{...ok, options: {stop: [1]}}, /^options\.stop must be a string or an array of strings/],
      [{...ok, options: {ignoreEos: "yes"}}, /^options\.ignoreEos must be a boolean/],
      [{...ok, options: {logprobs: 21}}, /^options\.logprobs must be in \[0, 20\]/],
      [{...ok, options: {nCtx: 100000}}, /^options\.nCtx must be in \[1, 2048\]/],
      [{...ok, options: {prefill: "parallel"}}, /^options\.prefill must be "pipelined" or "sequential", got "parallel"$/],
      [{...ok, options: {lookup: 65}}, /^options\.lookup must be in \[0, 64\], got 65$/],
      [{...ok, options: {warp: 9}}, /^options\.warp is not an option/],
      [{...ok, options: {options: 3}}, /^options\.options must be an object of the core's option keys/],
      [{...ok, options: {options: {top_k: -5}}}, /^options: .*top_k/],
      [{...ok, options: {options: {warp_factor: 9}}}, /^options: .*warp_factor/],
      [{...ok, options: 7}, /^options must be an object/],
      // the internal protocol's knobs: a public body cannot set them
      [{...ok, timeouts: {shardMs: 1}}, /^timeouts is not settable from a request: timeouts are deployment configuration/],
      [{...ok, linkMode: "http"}, /^linkMode is not settable from a request: the link mode is deployment configuration/],
      [{...ok, session: "someone-else"}, /^session is not settable from a request/],
      [{...ok, options: {sid: "someone-else"}}, /^options\.sid is not settable from a request/],
      [{...ok, extra: 1}, /^extra is not a field of a generate request/],
      [{prompt: 5}, /^prompt must be a string/],
    ];
    for (const [body, re] of cases) {
      const r = await post("/v1/mesh/generate", body);
      const j = await r.json().catch(() => ({}));
      assert.equal(r.status, 400, `${JSON.stringify(body).slice(0, 80)}: ${JSON.stringify(j)}`);
      assert.match(j.error, re);
    }
    // the OpenAI routes: ids out of the vocabulary, an empty or non-integer prompt, bad options
    const oai = [
      ["/v1/completions", {model: "model", prompt: [1, 999]}, /outside the vocabulary/],
      ["/v1/completions", {model: "model", prompt: [1, 2.5]}, /^'prompt'\[1\] must be a token id \(an integer >= 0\), got 2.5$/],
      ["/v1/completions", {model: "model", prompt: []}, /'prompt' must be a string or an array of token ids/],
      ["/v1/completions", {model: "model", prompt: "x", top_k: -1}, /'top_k' must be in/],
      ["/v1/chat/completions", {model: "model", messages: [{role: "user", content: "x"}], temperature: 3}, /'temperature' must be in/],
    ];
    for (const [path, body, re] of oai) {
      const r = await post(path, body);
      const j = await r.json();
      assert.equal(r.status, 400, JSON.stringify(j));
      assert.match(j.error.message, re);
    }
    // none of them reached a station or a shard
    const after = await mesh.stats();
    for (const n of ["st0", "st1"]) assert.equal(after[n].stats.frames, before[n].stats.frames, `${n}: no frame from a refused request`);
    for (const n of ["sh0", "sh1"])
      assert.deepEqual([after[n].stats.embeds, after[n].stats.lmheads], [before[n].stats.embeds, before[n].stats.lmheads], `${n}: not asked`);
    // and a good request still runs, with the deployment's link mode (ws: a subrequest per peer)
    const r = await mesh.run(ok);
    assert.deepEqual(r.summary.ids, want.ids);
    assert.ok(r.summary.subrequests <= 4, `ws links: ${r.summary.subrequests} subrequests`);
  } finally { await mesh.close(); }
});
