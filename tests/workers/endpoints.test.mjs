// llama-server's endpoints on the mesh's entry Worker (workers/coordinator/backend.mjs over
// bindings/openai.mjs), over real HTTP into workerd: /tokenize, /detokenize and
// /apply-template equal the single-process model's, /props carries the context, template
// and the mesh's topology, /metrics counts this isolate's requests and tokens, and
// /v1/embeddings is a 501 naming why (the coordinator holds no layers).
import {test} from "node:test";
import assert from "node:assert/strict";
import * as kw from "../../bindings/knotwork.mjs";
import {sharedKnot, meshFor} from "./helpers.mjs";

test("mesh entry: /tokenize, /detokenize, /apply-template, /props, /metrics; /v1/embeddings is a clear 501", async (t) => {
  const bytes = await sharedKnot(t, "stories260K-pad256-qwen2-q4_k_m.gguf");
  if (!bytes) return;
  const model = await kw.openModel(bytes);
  const mesh = await meshFor(bytes, {stations: [2, 3], shards: 2}, {port: 0});
  t.after(async () => { model.close(); await mesh.close(); });
  const post = (path, body) => fetch(new URL(path, mesh.url), {method: "POST", headers: {"content-type": "application/json"}, body: JSON.stringify(body)});

  const text = "Once upon a time <s> there was a cat 🐈.";
  const tok = await (await post("/tokenize", {content: text, add_special: true})).json();
  assert.deepEqual(tok.tokens, model.tokenize(text, {addBos: true, parseSpecial: true}));
  assert.deepEqual((await (await post("/tokenize", {content: text})).json()).tokens, model.tokenize(text, {addBos: false, parseSpecial: true}));
  const pieces = (await (await post("/tokenize", {content: "a cat", with_pieces: true})).json()).tokens;
  assert.deepEqual(pieces.map((p) => p.piece).join(""), new TextDecoder().decode(Uint8Array.from(
    model.tokenize("a cat", {addBos: false}).flatMap((id) => [...model.tokenBytes(id, {special: true})]))));
  const de = await (await post("/detokenize", {tokens: tok.tokens})).json();
  assert.equal(de.content, model.detokenize(tok.tokens));
  const far = await post("/detokenize", {tokens: [10 ** 7]});
  assert.equal(far.status, 400);
  assert.match((await far.json()).error.message, /outside the vocabulary/);

  const messages = [{role: "user", content: "Tell me a story."}];
  const {prompt} = await (await post("/apply-template", {messages})).json();
  assert.equal(prompt, model.applyChatTemplate(messages));

  const props = await (await fetch(new URL("/props", mesh.url))).json();
  assert.equal(props.n_ctx, Math.min(model.info.config.n_ctx_train || 2048, 2048));
  assert.equal(props.default_generation_settings.n_ctx, props.n_ctx);
  assert.equal(props.chat_template, model.chatTemplate().text);
  assert.equal(props.model_path, "model.knot");
  assert.equal(props.topology.kind, "mesh");
  assert.equal(props.topology.stations.length, 2);
  assert.equal(props.topology.shards.length, 2);
  assert.match(props.build_info, /^knotwork \d+\.\d+\.\d+$/);

  const m0 = await (await fetch(new URL("/metrics", mesh.url))).text();
  const c = await (await post("/v1/completions", {model: "model", prompt: "Once upon a time", max_tokens: 5, temperature: 0})).json();
  assert.equal(c.usage.completion_tokens, 5);
  const m1 = await (await fetch(new URL("/metrics", mesh.url))).text();
  const val = (txt, name) => Number(new RegExp(`^${name.replace(/[{}"/]/g, "\\$&")} (\\S+)$`, "m").exec(txt)?.[1] ?? 0);
  assert.equal(val(m1, "knotwork_generated_tokens_total") - val(m0, "knotwork_generated_tokens_total"), 5);
  assert.equal(val(m1, "knotwork_prompt_tokens_total") - val(m0, "knotwork_prompt_tokens_total"), c.usage.prompt_tokens);
  assert.equal(val(m1, 'knotwork_requests_total{route="/v1/completions",status="200"}') -
               val(m0, 'knotwork_requests_total{route="/v1/completions",status="200"}'), 1);

  const e = await post("/v1/embeddings", {model: "model", input: "hello"});
  assert.equal(e.status, 501);
  assert.match((await e.json()).error.message, /\/v1\/embeddings is not available on this server: the mesh's coordinator holds no layers/);
  // the CORS preflight reflects the requested headers here too
  const pre = await fetch(new URL("/v1/chat/completions", mesh.url), {method: "OPTIONS",
    headers: {"access-control-request-method": "POST", "access-control-request-headers": "authorization, x-stainless-arch"}});
  assert.equal(pre.headers.get("access-control-allow-headers"), "authorization, x-stainless-arch");
});
