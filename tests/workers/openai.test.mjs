// The OpenAI-compatible API (bindings/openai.mjs) on the mesh's entry Worker, driven by the
// official openai client over real HTTP into workerd: the same text as one process.
import {test} from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import {sharedKnot, single, meshFor} from "./helpers.mjs";

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
