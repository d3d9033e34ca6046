// Tool calling on the mesh's entry Worker (bindings/openai.mjs over workers/coordinator/
// backend.mjs, under workerd), through the official openai client, with random-weight
// models carrying the real Qwen3 vocabulary and template and the real Llama-3 vocabulary
// with a Llama-3.1-style tool template: a forced call validates against the declared
// parameters, finish_reason "tool_calls", the streamed deltas reassemble to the
// non-streamed call, and the call equals serve's (the same seed); a tool-role follow-up
// is accepted with the template's prompt. Sampling (temperature 1, top_k 0, a seed) rather
// than greedy: the mesh's lm-head then sends full logits, which the grammar filters.
import {test} from "node:test";
import assert from "node:assert/strict";
import {readFileSync} from "node:fs";
import OpenAI from "openai";
import * as kw from "../../bindings/knotwork.mjs";
import {createHandler} from "../../bindings/openai.mjs";
import {localBackend} from "../../bindings/local-backend.mjs";
import {meshFor} from "./helpers.mjs";
import {QUESTION, TOOLS, argumentChecker, collect, toolModels} from "../wasm/tools-ref.mjs";

for (const name of ["qwen3", "llama3"]) {
  test(`mesh (${name}): a forced tool call through the openai client, streamed == not streamed == serve; a tool-role follow-up`, async (t) => {
    const files = toolModels(t);
    if (!files) return;
    const bytes = new Uint8Array(readFileSync(files[name]));
    const ask = {model: "model", messages: QUESTION, tools: TOOLS, tool_choice: "required", temperature: 1, top_k: 0, seed: 11, max_tokens: 120};
    // serve's handler with the same request: the same seed gives the same call
    const m = await kw.openModel(kw.bytesSource(bytes, "m.knot"));
    let want;
    try {
      const handle = createHandler(localBackend(m, {id: "model"}));
      const single = new OpenAI({baseURL: "http://serve/v1", apiKey: "unused", maxRetries: 0, fetch: async (u, i) => handle(new Request(u, i))});
      want = (await single.chat.completions.create(ask)).choices[0].message.tool_calls[0].function;
    } finally { m.close(); }
    const mesh = await meshFor(bytes, {stations: [1], shards: 2}, {port: 0});
    try {
      const client = new OpenAI({baseURL: new URL("/v1", mesh.url).href, apiKey: "unused", maxRetries: 0});
      const r = await client.chat.completions.create(ask);
      const [choice] = r.choices;
      assert.equal(choice.finish_reason, "tool_calls", JSON.stringify(choice));
      assert.equal(choice.message.tool_calls.length, 1);
      const call = choice.message.tool_calls[0];
      argumentChecker()(call);
      assert.deepEqual(call.function, want, "the mesh's call == serve's");
      const s = await collect(await client.chat.completions.create({...ask, stream: true}));
      assert.equal(s.finish, "tool_calls");
      assert.deepEqual(s.tool_calls.map((c) => c.function), [call.function], "streamed deltas reassemble to the same call");
      const follow = [...QUESTION, {role: "assistant", content: null, tool_calls: [call]}, {role: "tool", tool_call_id: call.id, content: "21 C"}];
      const f = await client.chat.completions.create({model: "model", messages: follow, tools: TOOLS, temperature: 0, max_tokens: 2});
      assert.equal(f.choices[0].finish_reason !== undefined, true);
      assert.ok(f.usage.prompt_tokens > r.usage.prompt_tokens, "the follow-up prompt holds the call and its result");
      const bad = await fetch(new URL("/v1/chat/completions", mesh.url), {method: "POST", headers: {"content-type": "application/json"},
        body: JSON.stringify({...ask, tool_choice: {type: "function", function: {name: "nope"}}})});
      assert.equal(bad.status, 400);
      assert.equal((await bad.json()).error.param, "tool_choice");
    } finally { await mesh.close(); }
  });
}
