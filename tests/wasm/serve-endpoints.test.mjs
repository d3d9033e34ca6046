// llama-server's endpoints and embeddings on `knotwork serve` (bindings/openai.mjs +
// local-backend.mjs), over real HTTP: /tokenize equals the native `knot tokenize --ids`
// (and --no-bos, --no-special), /detokenize inverts it, /apply-template is the prompt a chat
// request generates from (its token count is the chat's prompt_tokens), /props carries the
// context, template, model path and build, /metrics counts what was served, and
// /v1/embeddings (the official openai client: base64 on the wire; and float) gives
// L2-normalised pooled hidden states, deterministic, one vector of n_embd per input.
import {test, before, after} from "node:test";
import assert from "node:assert/strict";
import {execFile} from "node:child_process";
import {existsSync, readFileSync} from "node:fs";
import {join} from "node:path";
import {promisify} from "node:util";
import OpenAI from "openai";

import * as kw from "../../bindings/knotwork.mjs";
import {ROOT, MODELS, KNOT_BIN, startServe} from "./helpers.mjs";

const run = promisify(execFile);
const MODEL = "stories260K.gguf";
const QWEN = "stories260K-pad256-qwen2-q4_k_m.gguf";

function modelPath(name) {
  const p = join(MODELS, name);
  if (!existsSync(p)) throw new Error(`shared model ${p} is missing`);
  return p;
}

/** The native `knot tokenize --ids` (the JS CLI's twin when the native build is absent). */
async function knotIds(model, text, flags = []) {
  const cmd = existsSync(KNOT_BIN) ? [KNOT_BIN, []] : [process.execPath, [join(ROOT, "bin/knotwork.mjs")]];
  const {stdout} = await run(cmd[0], [...cmd[1], "tokenize", model, "-p", text, "--ids", ...flags]);
  return JSON.parse(stdout);
}

let srv, qwen, model, qmodel;
before(async () => {
  [srv, qwen] = await Promise.all([startServe(modelPath(MODEL), ["--ctx", "256"]),
                                   startServe(modelPath(QWEN), ["--api-key", "k-123", "--name", "qwen-tiny"])]);
  model = await kw.openModel(modelPath(MODEL));
  qmodel = await kw.openModel(modelPath(QWEN));
});
after(async () => {
  model?.close();
  qmodel?.close();
  await srv?.stop();
  await qwen?.stop();
});

const post = (s, path, body, key) => fetch(`${s.url}${path}`, {method: "POST", body: JSON.stringify(body),
  headers: {"content-type": "application/json", ...(key ? {authorization: `Bearer ${key}`} : {})}});

test("/tokenize equals `knot tokenize --ids` (add_special: BOS; parse_special: control-token text); with_pieces", async () => {
  const text = "Once upon a time, there was <s> a cat.";
  for (const [s, path, key] of [[srv, modelPath(MODEL)], [qwen, modelPath(QWEN), "k-123"]]) {
    const r = await post(s, "/tokenize", {content: text, add_special: true}, key);
    assert.equal(r.status, 200);
    assert.equal(r.headers.get("access-control-allow-origin"), "*");
    assert.deepEqual((await r.json()).tokens, await knotIds(path, text));
    // llama-server's default: no BOS, special text parsed
    assert.deepEqual((await (await post(s, "/tokenize", {content: text}, key)).json()).tokens, await knotIds(path, text, ["--no-bos"]));
    assert.deepEqual((await (await post(s, "/tokenize", {content: text, parse_special: false}, key)).json()).tokens,
                     await knotIds(path, text, ["--no-bos", "--no-special"]));
  }
  // parse_special: the control token's text is that token (BOS here), else plain text
  const special = (await (await post(qwen, "/tokenize", {content: "<s>"}, "k-123")).json()).tokens;
  const plain = (await (await post(qwen, "/tokenize", {content: "<s>", parse_special: false}, "k-123")).json()).tokens;
  assert.deepEqual(special, [qmodel.info.tokenizer.bos_id]);
  assert.ok(plain.length > 1);
  // pieces: each token's bytes (control tokens as their text)
  const pieces = (await (await post(srv, "/tokenize", {content: "Once upon a time", with_pieces: true, add_special: true})).json()).tokens;
  const ids = model.tokenize("Once upon a time");
  assert.deepEqual(pieces.map((p) => p.id), ids);
  for (const p of pieces) assert.equal(p.piece, new TextDecoder().decode(model.tokenBytes(p.id, {special: true})));
  // a piece that is not valid UTF-8 alone is its bytes
  const emoji = (await (await post(srv, "/tokenize", {content: "🐈", with_pieces: true})).json()).tokens;
  assert.ok(emoji.some((p) => Array.isArray(p.piece)), "the cat is byte-fallback tokens in this vocab");
  for (const p of emoji) {
    const b = model.tokenBytes(p.id, {special: true});
    let valid = true;
    try { new TextDecoder("utf-8", {fatal: true}).decode(b); } catch { valid = false; }
    assert.deepEqual(p.piece, valid ? new TextDecoder().decode(b) : Array.from(b));
  }
  // bad input names the field
  const bad = await post(srv, "/tokenize", {content: 12});
  assert.equal(bad.status, 400);
  assert.equal((await bad.json()).error.param, "content");
  const bad2 = await post(srv, "/tokenize", {content: "x", add_special: "yes"});
  assert.equal(bad2.status, 400);
  assert.match((await bad2.json()).error.message, /'add_special' must be a boolean/);
  assert.equal((await fetch(`${qwen.url}/tokenize`, {method: "POST", body: "{}"})).status, 401, "the API key guards it");
});

test("/detokenize inverts /tokenize; ids outside the vocabulary are a 400 naming them", async () => {
  const text = "Lily and Ben went to the park.";
  const {tokens} = await (await post(srv, "/tokenize", {content: text})).json();
  const r = await (await post(srv, "/detokenize", {tokens})).json();
  assert.equal(r.content, model.detokenize(tokens));
  assert.equal(r.content.trim(), text);
  const far = await post(srv, "/detokenize", {tokens: [1, 999999]});
  assert.equal(far.status, 400);
  const e = (await far.json()).error;
  assert.match(e.message, /999999.*outside the vocabulary/);
  assert.equal(e.param, "tokens");
  assert.equal((await post(srv, "/detokenize", {tokens: [1.5]})).status, 400);
  assert.equal((await post(srv, "/detokenize", {})).status, 400);
});

test("/apply-template is the prompt a chat request generates from: its tokens are the chat's prompt_tokens", async () => {
  const messages = [{role: "system", content: "Be brief."}, {role: "user", content: "Tell me a story."}];
  const r = await post(qwen, "/apply-template", {messages}, "k-123");
  assert.equal(r.status, 200);
  const {prompt} = await r.json();
  assert.equal(prompt, qmodel.applyChatTemplate(messages));
  assert.match(prompt, /Be brief\.[^]*Tell me a story\./);  // this vocab's format: Llama-2's (the file has no template)
  const ids = (await (await post(qwen, "/tokenize", {content: prompt, add_special: true}, "k-123")).json()).tokens;
  const client = new OpenAI({baseURL: `${qwen.url}/v1`, apiKey: "k-123", maxRetries: 0});
  const c = await client.chat.completions.create({model: "qwen-tiny", messages, max_tokens: 2, temperature: 0});
  assert.equal(c.usage.prompt_tokens, ids.length);
  const bad = await post(qwen, "/apply-template", {messages: [{role: "wizard", content: "x"}]}, "k-123");
  assert.equal(bad.status, 400);
  assert.match((await bad.json()).error.message, /role "wizard" is not supported/);
});

test("/props: context, chat template, model path and id, build, topology", async () => {
  const p = await (await fetch(`${srv.url}/props`)).json();
  assert.equal(p.default_generation_settings.n_ctx, 256);
  assert.equal(p.n_ctx, 256);
  assert.equal(p.total_slots >= 1, true);
  assert.equal(p.model_path, modelPath(MODEL));
  assert.equal(p.model, "stories260K");
  const version = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")).version;
  assert.equal(p.build_info, `knotwork ${version}`);
  assert.equal(p.topology.kind, "single-process");
  assert.equal(p.bos_token, new TextDecoder().decode(model.tokenBytes(model.info.tokenizer.bos_id, {special: true})));
  const q = await (await fetch(`${qwen.url}/props`, {headers: {authorization: "Bearer k-123"}})).json();
  assert.equal(q.chat_template, qmodel.chatTemplate().text);  // "" : the file carries none
  assert.equal(q.chat_template_name, "llama2");
  assert.equal(q.chat_template_name, qmodel.chatTemplate().name);
  assert.equal(q.model, "qwen-tiny");
  assert.equal(q.n_ctx, qmodel.info.config.n_ctx_train > 0 ? Math.min(qmodel.info.config.n_ctx_train, 2048) : 2048);
});

/** Prometheus text -> {"name{labels}": value}. */
function parseMetrics(text) {
  const out = {};
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = /^([a-z_:]+(?:\{[^}]*\})?) (\S+)$/.exec(line);
    assert.ok(m, `a well-formed sample line: ${JSON.stringify(line)}`);
    out[m[1]] = Number(m[2]);
  }
  return out;
}

test("/metrics: Prometheus text counting requests, prompt and generated tokens, throughput, queue", async () => {
  const m0 = await fetch(`${srv.url}/metrics`);
  assert.match(m0.headers.get("content-type"), /^text\/plain; version=0\.0\.4/);
  const a = parseMetrics(await m0.text());
  const client = new OpenAI({baseURL: `${srv.url}/v1`, apiKey: "unused", maxRetries: 0});
  const r = await client.completions.create({model: srv.id, prompt: "Once upon a time", max_tokens: 7, temperature: 0});
  await assert.rejects(client.completions.create({model: srv.id, prompt: "x", max_tokens: 100000}));
  const b = parseMetrics(await (await fetch(`${srv.url}/metrics`)).text());
  const d = (k) => (b[k] ?? 0) - (a[k] ?? 0);
  assert.equal(d('knotwork_requests_total{route="/v1/completions",status="200"}'), 1);
  assert.equal(d('knotwork_requests_total{route="/v1/completions",status="400"}'), 1);
  assert.equal(d('knotwork_requests_total{route="/metrics",status="200"}'), 1);
  assert.equal(d("knotwork_prompt_tokens_total"), r.usage.prompt_tokens);
  assert.equal(d("knotwork_generated_tokens_total"), 7);
  assert.equal(d('knotwork_generations_total{reason="length"}'), 1);
  assert.ok(b.knotwork_decode_seconds_total > 0 && b.knotwork_generated_tokens_per_second > 0);
  assert.ok(b.knotwork_prompt_tokens_per_second > 0);
  assert.equal(b.knotwork_requests_queued, 0);
  assert.equal(b.knotwork_requests_processing, 0);
  assert.ok("knotwork_cached_tokens_total" in b);
});

test("/v1/embeddings: two inputs -> two L2-normalised vectors of n_embd, deterministic, base64 = float, ids = text", async () => {
  const client = new OpenAI({baseURL: `${srv.url}/v1`, apiKey: "unused", maxRetries: 0});
  const inputs = ["Once upon a time there was a cat.", "The dog ran to the park."];
  const e = await client.embeddings.create({model: srv.id, input: inputs});  // the client asks for base64 and decodes it
  const E = model.info.config.n_embd;
  assert.equal(e.object, "list");
  assert.equal(e.data.length, 2);
  const ntok = inputs.map((s) => model.tokenize(s, {parseSpecial: true}).length);
  assert.deepEqual(e.usage, {prompt_tokens: ntok[0] + ntok[1], total_tokens: ntok[0] + ntok[1]});
  for (const [i, d] of e.data.entries()) {
    assert.equal(d.index, i);
    assert.equal(d.embedding.length, E);
    const norm = Math.hypot(...d.embedding);
    assert.ok(Math.abs(norm - 1) < 1e-5, `L2 norm ${norm}`);
  }
  const cos = e.data[0].embedding.reduce((a, x, i) => a + x * e.data[1].embedding[i], 0);
  assert.ok(cos < 0.9999, `different inputs give different vectors (cos ${cos})`);
  // float on the wire: the same float32 values; the same request again: the same bytes
  const f = await (await post(srv, "/v1/embeddings", {model: srv.id, input: inputs, encoding_format: "float"})).json();
  for (let i = 0; i < 2; i++) assert.deepEqual(f.data[i].embedding, e.data[i].embedding);
  const again = await (await post(srv, "/v1/embeddings", {model: srv.id, input: inputs[1], encoding_format: "float"})).json();
  assert.deepEqual(again.data[0].embedding, f.data[1].embedding);
  // token ids embed as their text does
  const byIds = await (await post(srv, "/v1/embeddings", {model: srv.id, input: [model.tokenize(inputs[0], {parseSpecial: true})]})).json();
  assert.deepEqual(byIds.data[0].embedding, f.data[0].embedding);
  // the JS API gives the same vector; the chunk changes it by float rounding at most
  const js = Array.from(model.embed(inputs[0]));
  assert.deepEqual(js, f.data[0].embedding);
  const one = model.embed(inputs[0], {chunk: 1});
  assert.ok(one.reduce((a, x, i) => a + x * js[i], 0) > 0.9999, "chunked prefill pools the same positions");
  // pooling is over every position: a different first word changes the vector
  const other = model.embed("Twice upon a time there was a cat.");
  assert.ok(other.reduce((a, x, i) => a + x * js[i], 0) < 0.99999);
  // errors name the field
  for (const [body, param] of [[{model: srv.id, input: ""}, "input"], [{model: srv.id, input: [1, -2]}, "input"],
                               [{model: srv.id, input: "x", encoding_format: "int8"}, "encoding_format"],
                               [{model: srv.id, input: "x", dimensions: 8}, "dimensions"], [{input: "x"}, "model"]]) {
    const r = await post(srv, "/v1/embeddings", body);
    assert.equal(r.status, 400, JSON.stringify(body));
    assert.equal((await r.json()).error.param, param);
  }
  assert.equal((await post(srv, "/v1/embeddings", {model: "nope", input: "x"})).status, 404);
  const long = await post(srv, "/v1/embeddings", {model: srv.id, input: [Array(300).fill(5)]});
  assert.equal(long.status, 400);
  assert.equal((await long.json()).error.code, "context_length_exceeded");
});
