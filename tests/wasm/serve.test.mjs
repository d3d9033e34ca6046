// `knotwork serve` (bin/knotwork.mjs → bindings/openai.mjs + local-backend.mjs) driven by
// the official `openai` client: streamed and non-streamed chat and completions are
// token-exact with `knotwork generate` (greedy, and sampled with the same seed), logprobs,
// stop, penalties, every error path with its status and message, the API key, telemetry
// on the stream (the first bytes leave before the prefill ends), and a client that
// disconnects mid-stream frees its session.
import {test, before, after} from "node:test";
import assert from "node:assert/strict";
import {execFile} from "node:child_process";
import {join} from "node:path";
import {promisify} from "node:util";
import OpenAI from "openai";

import * as kw from "../../bindings/knotwork.mjs";
import {ROOT, MODELS, referenceOutputs, startServe} from "./helpers.mjs";
import {existsSync} from "node:fs";

const CLI = join(ROOT, "bin/knotwork.mjs");
const run = promisify(execFile);
const MODEL = "stories260K.gguf";
const MODEL2 = "stories260K-pad256-qwen2-q4_k_m.gguf";
const PROMPT = "Once upon a time";

function modelPath(name) {
  const p = join(MODELS, name);
  if (!existsSync(p)) throw new Error(`shared model ${p} is missing`);
  return p;
}

/** `knotwork generate` stdout text (the trailing newline removed). */
async function cliText(model, prompt, flags) {
  const {stdout} = await run(process.execPath, [CLI, "generate", model, "-p", prompt, ...flags], {maxBuffer: 1 << 20});
  assert.ok(stdout.endsWith("\n"));
  return stdout.slice(0, -1);
}

/** Raw SSE reading: [{kind: "data"|"telemetry", value, at}] in arrival order. */
async function readSSE(response, onEvent = () => {}) {
  const events = [];
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const {done, value} = await reader.read();
    if (done) break;
    buf += value;
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      for (const line of block.split("\n")) {
        let ev = null;
        if (line.startsWith(": knotwork ")) ev = {kind: "telemetry", value: JSON.parse(line.slice(11)), at: Date.now()};
        else if (line.startsWith("data: ")) ev = {kind: "data", value: line.slice(6) === "[DONE]" ? "[DONE]" : JSON.parse(line.slice(6)), at: Date.now()};
        else if (line) throw new Error(`unexpected SSE line ${JSON.stringify(line)}`);
        if (ev) { events.push(ev); if (onEvent(ev, reader) === false) return events; }
      }
    }
  }
  return events;
}

let srv, client, keyed, model, templated;
before(async () => {
  srv = await startServe(modelPath(MODEL), ["--ctx", "256", "--parallel", "1"]);  // one slot: the queue test below
  client = new OpenAI({baseURL: `${srv.url}/v1`, apiKey: "unused", maxRetries: 0});
  keyed = await startServe(modelPath(MODEL2), ["--api-key", "sekret-key-123", "--name", "qwen-tiny"]);
  model = await kw.openModel(modelPath(MODEL));
  templated = model.applyChatTemplate([{role: "user", content: "Tell me a story."}]);
});
after(async () => {
  model?.close();
  await srv?.stop();
  await keyed?.stop();
});

test("serve: GET /v1/models lists the model with its quantization and context; /v1/models/{id}", async () => {
  const list = await client.models.list();
  assert.deepEqual(list.data.map((m) => m.id), [srv.id]);
  assert.equal(srv.id, "stories260K");
  const card = list.data[0];
  assert.equal(card.object, "model");
  assert.equal(card.owned_by, "knotwork");
  assert.equal(card.knotwork.nCtx, 256);
  assert.equal(card.knotwork.arch, "llama");
  assert.equal(typeof card.knotwork.quantization, "string");
  assert.equal((await client.models.retrieve(srv.id)).id, srv.id);
  await assert.rejects(client.models.retrieve("nope"), (e) => e.status === 404 && /The model 'nope' does not exist/.test(e.message));
});

test("serve: greedy completions, streamed and not, are token-exact with `knotwork generate` (and the reference)", async () => {
  const ref = referenceOutputs().models[MODEL];
  const want = await cliText(modelPath(MODEL), PROMPT, ["-n", "32", "--temp", "0"]);
  assert.equal(want, ref.llamaCppNative.text);
  const r = await client.completions.create({model: srv.id, prompt: PROMPT, max_tokens: 32, temperature: 0});
  assert.equal(r.object, "text_completion");
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].text, want);
  assert.equal(r.choices[0].finish_reason, "length");
  assert.equal(r.usage.total_tokens, ref.promptTokenIds.length + 32);
  assert.deepEqual([r.usage.prompt_tokens, r.usage.completion_tokens], [ref.promptTokenIds.length, 32]);
  // the prompt as token ids gives the same
  const ids = await client.completions.create({model: srv.id, prompt: ref.promptTokenIds, max_tokens: 32, temperature: 0});
  assert.equal(ids.choices[0].text, want);

  const stream = await client.completions.create({model: srv.id, prompt: PROMPT, max_tokens: 32, temperature: 0, stream: true,
                                                  stream_options: {include_usage: true}});
  let text = "", finish = null, usage = null, chunks = 0;
  for await (const c of stream) {
    chunks++;
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) { text += ch.text; finish = ch.finish_reason ?? finish; }
  }
  assert.equal(text, want);
  assert.equal(finish, "length");
  assert.equal(usage.completion_tokens, 32);
  assert.ok(chunks > 10, `${chunks} chunks: the text was streamed`);
});

test("serve: greedy chat, streamed and not, is token-exact with `knotwork generate` on the templated prompt", async () => {
  const want = await cliText(modelPath(MODEL), templated, ["-n", "24", "--temp", "0"]);
  assert.ok(want.length > 0);
  const messages = [{role: "user", content: "Tell me a story."}];
  const r = await client.chat.completions.create({model: srv.id, messages, max_tokens: 24, temperature: 0});
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices[0].message.role, "assistant");
  assert.equal(r.choices[0].message.content, want);
  assert.equal(r.choices[0].finish_reason, "length");
  assert.equal(r.usage.prompt_tokens, model.tokenize(templated, {parseSpecial: true}).length);
  const stream = await client.chat.completions.create({model: srv.id, messages, max_tokens: 24, temperature: 0, stream: true});
  let text = "", roles = [], finish = null;
  for await (const c of stream) {
    assert.equal(c.object, "chat.completion.chunk");
    const d = c.choices[0];
    if (d.delta.role) roles.push(d.delta.role);
    text += d.delta.content ?? "";
    finish = d.finish_reason ?? finish;
  }
  assert.equal(text, want);
  assert.deepEqual(roles, ["assistant"]);
  assert.equal(finish, "length");
  // the helper on the official client accumulates the same message
  const final = await client.chat.completions.stream({model: srv.id, messages, max_tokens: 24, temperature: 0}).finalChatCompletion();
  assert.equal(final.choices[0].message.content, want);
});

test("serve: seed reproduces sampled text, the same as `knotwork generate --seed`", async () => {
  const want = await cliText(modelPath(MODEL), PROMPT, ["-n", "32", "--temp", "0.9", "--top-p", "1", "--seed", "42"]);
  const ask = (seed, stream = false) => client.completions.create({model: srv.id, prompt: PROMPT, max_tokens: 32, temperature: 0.9, seed, stream});
  const a = await ask(42), b = await ask(42), c = await ask(7);
  assert.equal(a.choices[0].text, want);
  assert.equal(b.choices[0].text, want);
  assert.notEqual(c.choices[0].text, want);
  let streamed = "";
  for await (const ch of await ask(42, true)) streamed += ch.choices[0]?.text ?? "";
  assert.equal(streamed, want);
  const greedy = await cliText(modelPath(MODEL), PROMPT, ["-n", "32", "--temp", "0"]);
  assert.notEqual(want, greedy, "sampling at temperature 0.9 differs from greedy");
});

test("serve: logprobs (chat: logprobs + top_logprobs; completions: logprobs N) from the model's distribution", async () => {
  const r = await client.chat.completions.create({model: srv.id, messages: [{role: "user", content: "Hi"}], max_tokens: 12,
                                                  temperature: 0, logprobs: true, top_logprobs: 3});
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, r.usage.completion_tokens);
  // one process on the same templated prompt: the same tokens (bytes), logprobs and top 3
  const utf8 = new TextDecoder(), want = [];
  const hi = model.tokenize(model.applyChatTemplate([{role: "user", content: "Hi"}]), {addBos: true, parseSpecial: true});
  for await (const e of model.generate(hi, {maxTokens: 12, temperature: 0, logprobs: 3})) if (e.type === "token") want.push(e);
  assert.equal(lp.length, want.length);
  lp.forEach((t, i) => {
    assert.deepEqual(t.bytes, Array.from(model.tokenBytes(want[i].token)), `token ${i}`);
    assert.ok(Math.abs(t.logprob - want[i].logprob) < 1e-6, `token ${i}: ${t.logprob} vs ${want[i].logprob}`);
    assert.deepEqual(t.top_logprobs.map((x) => x.token), want[i].top.map((x) => utf8.decode(model.tokenBytes(x.token))), `token ${i}: top 3`);
    t.top_logprobs.forEach((x, j) => assert.ok(Math.abs(x.logprob - want[i].top[j].logprob) < 1e-6, `token ${i} top ${j}`));
  });
  let text = "";
  for (const t of lp) {
    assert.equal(t.top_logprobs.length, 3);
    assert.ok(t.logprob <= 0);
    for (let i = 1; i < 3; i++) assert.ok(t.top_logprobs[i - 1].logprob >= t.top_logprobs[i].logprob);
    assert.equal(t.token, t.top_logprobs[0].token, "greedy picks the most likely token");
    assert.equal(t.logprob, t.top_logprobs[0].logprob);
    assert.ok(t.top_logprobs.reduce((a, x) => a + Math.exp(x.logprob), 0) <= 1 + 1e-9);
    assert.deepEqual(t.bytes, Array.from(new TextEncoder().encode(t.token)));
    text += t.token;
  }
  assert.equal(text, r.choices[0].message.content);
  const c = await client.completions.create({model: srv.id, prompt: PROMPT, max_tokens: 8, temperature: 0, logprobs: 2});
  const l = c.choices[0].logprobs;
  assert.equal(l.tokens.length, 8);
  assert.equal(l.token_logprobs.length, 8);
  assert.equal(l.top_logprobs.length, 8);
  // {token text: logprob} of the 2 best, as one process computes them (equal texts: the first kept)
  const wantTop = [];
  for await (const e of model.generate(PROMPT, {maxTokens: 8, temperature: 0, logprobs: 2})) if (e.type === "token") {
    const top = {};
    for (const x of e.top) top[utf8.decode(model.tokenBytes(x.token))] ??= x.logprob;
    wantTop.push(top);
  }
  l.top_logprobs.forEach((o, i) => {
    assert.deepEqual(Object.keys(o), Object.keys(wantTop[i]), `token ${i}: top_logprobs tokens`);
    for (const [k, v] of Object.entries(o)) assert.ok(Math.abs(v - wantTop[i][k]) < 1e-6, `token ${i} ${JSON.stringify(k)}: ${v} vs ${wantTop[i][k]}`);
  });
  assert.equal(l.text_offset[0], 0);
  assert.equal(l.tokens.join(""), c.choices[0].text);
  // streamed: one logprobs entry per chunk
  let n = 0;
  for await (const ch of await client.chat.completions.create({model: srv.id, messages: [{role: "user", content: "Hi"}],
      max_tokens: 12, temperature: 0, logprobs: true, stream: true}))
    n += ch.choices[0]?.logprobs?.content?.length ?? 0;
  assert.equal(n, lp.length);
  // without logprobs: null
  const none = await client.completions.create({model: srv.id, prompt: PROMPT, max_tokens: 2, temperature: 0});
  assert.equal(none.choices[0].logprobs, null);
});

test("serve: stop strings end the text before them with finish_reason stop; penalties change greedy output", async () => {
  const full = (await client.completions.create({model: srv.id, prompt: PROMPT, max_tokens: 32, temperature: 0})).choices[0].text;
  const word = full.split(" ").filter((w) => w.length > 2)[3];
  const cut = full.indexOf(word);
  for (const stream of [false, true]) {
    let text = "", finish = null;
    if (stream) {
      for await (const c of await client.completions.create({model: srv.id, prompt: PROMPT, max_tokens: 32, temperature: 0, stop: [word], stream}))
        { text += c.choices[0]?.text ?? ""; finish = c.choices[0]?.finish_reason ?? finish; }
    } else {
      const r = await client.completions.create({model: srv.id, prompt: PROMPT, max_tokens: 32, temperature: 0, stop: word});
      text = r.choices[0].text; finish = r.choices[0].finish_reason;
    }
    assert.equal(text, full.slice(0, cut), `stream=${stream}`);
    assert.equal(finish, "stop");
  }
  const pen = await client.completions.create({model: srv.id, prompt: PROMPT, max_tokens: 32, temperature: 0, frequency_penalty: 1.5});
  const pen2 = await client.completions.create({model: srv.id, prompt: PROMPT, max_tokens: 32, temperature: 0, frequency_penalty: 1.5});
  assert.notEqual(pen.choices[0].text, full);
  assert.equal(pen.choices[0].text, pen2.choices[0].text);
  const pres = await client.completions.create({model: srv.id, prompt: PROMPT, max_tokens: 32, temperature: 0, presence_penalty: 2});
  assert.notEqual(pres.choices[0].text, full);
});

test("serve: errors carry OpenAI's error object and status", async () => {
  const post = (path, body, headers = {}) => fetch(`${srv.url}${path}`, {method: "POST", body,
    headers: {"content-type": "application/json", ...headers}});
  const expectError = async (res, status, re, fields = {}) => {
    assert.equal(res.status, status);
    assert.match(res.headers.get("content-type"), /application\/json/);
    const j = await res.json();
    assert.ok(j.error, JSON.stringify(j));
    assert.match(j.error.message, re);
    for (const [k, v] of Object.entries(fields)) assert.equal(j.error[k], v, `${k} of ${JSON.stringify(j.error)}`);
    assert.ok("type" in j.error && "param" in j.error && "code" in j.error);
  };
  await expectError(await post("/v1/chat/completions", "{not json"), 400, /could not parse the JSON body/, {code: "invalid_json"});
  await expectError(await post("/v1/completions", "[1,2]"), 400, /must be a JSON object/);
  await expectError(await post("/v1/completions", JSON.stringify({prompt: "x"})), 400, /provide a model/, {param: "model"});
  await expectError(await post("/v1/chat/completions", JSON.stringify({model: srv.id, messages: []})), 400, /messages/, {param: "messages"});
  await expectError(await post("/v1/chat/completions", JSON.stringify({model: srv.id, messages: [{role: "wizard", content: "x"}]})), 400, /role "wizard"/);
  await expectError(await post("/v1/completions", JSON.stringify({model: srv.id, prompt: "x", temperature: 3})), 400, /'temperature' must be in \[0, 2\], got 3/, {param: "temperature"});
  await expectError(await post("/v1/completions", JSON.stringify({model: srv.id, prompt: "x", max_tokens: "9"})), 400, /'max_tokens' must be an integer/);
  await expectError(await post("/v1/completions", JSON.stringify({model: srv.id, prompt: [999999]})), 400, /token id 999999 is outside the vocabulary/);
  await expectError(await post("/v1/completions", JSON.stringify({model: srv.id, prompt: ["a", "b"]})), 400, /batch of prompts/);
  await expectError(await post("/v1/chat/completions", JSON.stringify({model: srv.id, messages: [{role: "user", content: "x"}], top_logprobs: 2})), 400, /needs 'logprobs': true/);

  // through the official client: status classes and messages
  await assert.rejects(client.chat.completions.create({model: "gpt-17", messages: [{role: "user", content: "x"}]}),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && e.code === "model_not_found" && /The model 'gpt-17' does not exist/.test(e.message));
  await assert.rejects(client.chat.completions.create({model: srv.id, messages: [{role: "user", content: "x"}], n: 2}),
    (e) => e instanceof OpenAI.BadRequestError && /unsupported: n=2/.test(e.message) && e.param === "n");
  await assert.rejects(client.chat.completions.create({model: srv.id, messages: [{role: "user", content: "x"}],
                                                       functions: [{name: "f", parameters: {}}]}),
    (e) => e.status === 400 && /unsupported: functions \(use tools\)/.test(e.message) && e.param === "functions");
  await assert.rejects(client.chat.completions.create({model: srv.id, messages: [{role: "user", content: "x"}],
                                                       tools: [{type: "function", function: {parameters: {}}}]}),
    (e) => e.status === 400 && /tools\[0\]\.function\.name must be a string/.test(e.message) && e.param === "tools[0].function.name");
  await assert.rejects(client.completions.create({model: srv.id, prompt: "x", logit_bias: {"5": 3}}),
    (e) => e.status === 400 && /logit_bias/.test(e.message));
  const long = "the cat sat on the mat and ".repeat(40);
  await assert.rejects(client.completions.create({model: srv.id, prompt: long, stream: true}),
    (e) => e instanceof OpenAI.BadRequestError && e.code === "context_length_exceeded" &&
           /maximum context length is 256 tokens. However, your prompt resulted in \d+ tokens/.test(e.message));
  await assert.rejects(client.completions.create({model: srv.id, prompt: PROMPT, max_tokens: 255}),
    (e) => e.status === 400 && e.code === "context_length_exceeded" && /you requested 260 tokens \(5 in the prompt, 255 in the completion\)/.test(e.message));
  const chatLong = await post("/v1/chat/completions", JSON.stringify({model: srv.id, stream: true, messages: [{role: "user", content: long}]}));
  await expectError(chatLong, 400, /maximum context length is 256 tokens/, {code: "context_length_exceeded", param: "messages"});

  await expectError(await post("/v1/completions", JSON.stringify({model: srv.id, prompt: "x".repeat(17 << 20)})), 413, /request body larger than 16777216 bytes/);
  const get = await fetch(`${srv.url}/v1/chat/completions`);
  await expectError(get, 405, /GET \/v1\/chat\/completions is not allowed \(POST\)/);
  await expectError(await fetch(`${srv.url}/v2/nothing`), 404, /Unknown request URL: GET \/v2\/nothing/);
});

test("serve: --api-key requires Authorization: Bearer KEY on the API; the chat page stays public", async () => {
  const messages = [{role: "user", content: "hello"}];
  const good = new OpenAI({baseURL: `${keyed.url}/v1`, apiKey: "sekret-key-123", maxRetries: 0});
  const r = await good.chat.completions.create({model: "qwen-tiny", messages, max_tokens: 4, temperature: 0});
  assert.equal(r.usage.completion_tokens <= 4, true);
  const wrong = new OpenAI({baseURL: `${keyed.url}/v1`, apiKey: "sekret-key-124", maxRetries: 0});
  await assert.rejects(wrong.chat.completions.create({model: "qwen-tiny", messages}),
    (e) => e instanceof OpenAI.AuthenticationError && e.status === 401 && e.code === "invalid_api_key" && /Incorrect API key provided: sek\.\.\.-124/.test(e.message));
  await assert.rejects(wrong.models.list(), (e) => e.status === 401);
  const none = await fetch(`${keyed.url}/v1/models`);
  assert.equal(none.status, 401);
  const j = await none.json();
  assert.equal(j.error.code, "missing_api_key");
  assert.match(j.error.message, /didn't provide an API key/);
  // /health answers without the key (a probe), with its details only with the key
  const open = await fetch(`${keyed.url}/health`);
  assert.equal(open.status, 200);
  assert.deepEqual(await open.json(), {status: "ok"});
  const withKey = await fetch(`${keyed.url}/health`, {headers: {authorization: "Bearer sekret-key-123"}});
  assert.equal(withKey.status, 200);
  assert.equal((await withKey.json()).model, "qwen-tiny");
  // a streamed request with a wrong key is refused before any stream starts
  const s = await fetch(`${keyed.url}/v1/chat/completions`, {method: "POST", headers: {authorization: "Bearer x", "content-type": "application/json"},
    body: JSON.stringify({model: "qwen-tiny", messages, stream: true})});
  assert.equal(s.status, 401);
  const page = await fetch(`${keyed.url}/`);
  assert.equal(page.status, 200);
  assert.match(await page.text(), /<title>knotwork chat<\/title>/);
});

test("serve: telemetry rides the stream as SSE comments; the first bytes leave before the prefill ends", async () => {
  // a slow prefill (reference kernels, a long prompt) so the order is observable in time
  const slow = await startServe(modelPath(MODEL), ["--ctx", "1024", "--reference", "--chunk", "16"]);
  try {
    const prompt = "Lily and Ben went to the park to play with a big red ball. ".repeat(12);
    const res = await fetch(`${slow.url}/v1/completions`, {method: "POST", headers: {"content-type": "application/json"},
      body: JSON.stringify({model: slow.id, prompt, max_tokens: 40, temperature: 0, stream: true})});
    assert.equal(res.status, 200);
    assert.match(res.headers.get("content-type"), /text\/event-stream/);
    const events = await readSSE(res);
    const tele = events.filter((e) => e.kind === "telemetry").map((e) => e.value);
    const types = tele.map((t) => t.type);
    assert.equal(types[0], "accepted");
    const acc = tele[0];
    assert.equal(acc.model, slow.id);
    assert.ok(acc.promptTokens > 100, `${acc.promptTokens} prompt tokens`);
    assert.equal(acc.nCtx, 1024);
    assert.equal(typeof acc.quantization, "string");
    assert.equal(acc.topology.kind, "single-process");
    assert.ok(acc.topology.stations.length >= 1 && acc.topology.shards.length >= 1);
    const prefill = tele.filter((t) => t.type === "prefill");
    assert.equal(prefill[0].done, 0, "prefill started");
    assert.equal(prefill.at(-1).done, acc.promptTokens, "prefill completed");
    assert.ok(prefill.length >= 4, `${prefill.length} prefill events (progress)`);
    for (let i = 1; i < prefill.length; i++) assert.ok(prefill[i].done > prefill[i - 1].done);
    assert.ok(types.indexOf("decode") > types.lastIndexOf("prefill"), "decode started after the prefill");
    const toks = tele.filter((t) => t.type === "tokens");
    assert.deepEqual(toks.map((t) => t.n), toks.map((_, i) => i + 1), "tokens so far, one event per token");
    assert.ok(toks.at(-1).tokS > 0);
    assert.ok(toks.every((t) => t.memory.linear >= t.memory.heap && t.memory.heap > 0), "memory with every token");
    const done = tele.at(-1);
    assert.equal(done.type, "done");
    assert.equal(done.usage.completion_tokens, toks.length);
    assert.ok(done.prefillTokS > 0 && done.decodeTokS > 0);
    assert.equal(events.at(-1).value, "[DONE]");
    // timing: the accepted event arrived while the server was still prefilling
    const acceptedAt = events.find((e) => e.kind === "telemetry").at;
    const prefillEnd = events.find((e) => e.kind === "telemetry" && e.value.type === "prefill" && e.value.done === acc.promptTokens);
    assert.ok(prefillEnd.value.elapsedMs > 50, `prefill took ${prefillEnd.value.elapsedMs} ms (long enough to observe)`);
    assert.ok(prefillEnd.value.t - acceptedAt > 20,
              `accepted received at ${acceptedAt}, prefill ended at ${prefillEnd.value.t} (server clock)`);
    // the same stream through the official client: only OpenAI chunks come out
    const c = new OpenAI({baseURL: `${slow.url}/v1`, apiKey: "x", maxRetries: 0});
    let text = "";
    for await (const ch of await c.completions.create({model: slow.id, prompt, max_tokens: 40, temperature: 0, stream: true})) {
      assert.equal(ch.object, "text_completion");
      text += ch.choices[0]?.text ?? "";
    }
    const dataText = events.filter((e) => e.kind === "data" && e.value !== "[DONE]").map((e) => e.value.choices[0].text).join("");
    assert.equal(text, dataText);
  } finally { await slow.stop(); }
});

test("serve: a client that disconnects mid-stream frees its session (KV released, memory back to before)", async (t) => {
  // a long generation (EOS ignored, 4000 tokens) on its own server: the client leaves
  // after 3 chunks, long before the end
  const long = await startServe(modelPath(MODEL), ["--ctx", "4096"]);
  t.after(() => long.stop());
  const health = async () => (await fetch(`${long.url}/health`)).json();
  const h0 = await health();
  assert.equal(h0.sessions, 0);
  const ac = new AbortController();
  const res = await fetch(`${long.url}/v1/completions`, {method: "POST", signal: ac.signal, headers: {"content-type": "application/json"},
    body: JSON.stringify({model: long.id, prompt: PROMPT, max_tokens: 4000, ignore_eos: true, temperature: 1, seed: 3, stream: true})});
  let during = null;
  const events = [];
  try {
    await readSSE(res, (ev) => {
      events.push(ev);
      if (ev.kind === "data" && events.filter((e) => e.kind === "data").length === 3) return false;
    });
    during = await health();  // mid-generation: the session holds its KV cache
    ac.abort();
  } catch (e) { if (e.name !== "AbortError") throw e; }
  assert.equal(during.sessions, 1);
  // the KV cache of 4096 positions (F16: 2 x layers x kv heads x head_dim x 2 bytes each)
  const cfg = (await (await fetch(`${long.url}/v1/models`)).json()).data[0].knotwork;
  assert.ok(during.memory.heap - h0.memory.heap >= 4096 * 2 * cfg.nLayer * cfg.nHeadKv * cfg.headDim * 2,
            `heap ${during.memory.heap} during vs ${h0.memory.heap} before`);
  let h;
  for (let i = 0; i < 200; i++) {
    h = await health();
    if (h.sessions === 0) break;
    await new Promise((r) => setTimeout(r, 25));
  }
  assert.equal(h.sessions, 0, "the session was freed");
  assert.equal(h.served, h0.served, "the abandoned generation did not run to its end");
  // (the module keeps the last call's result buffer, a few hundred bytes that vary with it:
  // back at the level before within that; the KV cache alone is megabytes, checked above)
  const SLACK = 1024;
  assert.ok(h.memory.heap <= h0.memory.heap + SLACK, `wasm heap ${h.memory.heap} after vs ${h0.memory.heap} before the request`);
  // and the server still serves
  const c = new OpenAI({baseURL: `${long.url}/v1`, apiKey: "x", maxRetries: 0});
  const r = await c.completions.create({model: long.id, prompt: PROMPT, max_tokens: 4, temperature: 0});
  assert.equal(r.usage.completion_tokens, 4);
  // that request's session stays held for prefix reuse: at most one session's memory
  const held = await health();
  assert.equal(held.heldPositions, model.tokenize(PROMPT, {parseSpecial: true}).length + 3);
  assert.ok(held.memory.heap <= during.memory.heap, `wasm heap ${held.memory.heap} with one session held vs ${during.memory.heap} with one running`);
});

test("bindings: generate() with prefill progress gives the same ids; logprobs are the log-softmax of the logits", async () => {
  const prompt = "Lily and Ben went to the park to play with a big red ball. ".repeat(8);
  const ids = model.tokenize(prompt);
  const opts = {maxTokens: 16, temperature: 0, chunk: 16};
  const plain = await model.complete(ids, opts);
  const events = [];
  for await (const ev of model.generate(ids, {...opts, prefillProgress: 40, logprobs: 4})) events.push(ev);
  const progress = events.filter((e) => e.type === "prefill");
  assert.deepEqual(progress.map((e) => e.done), [0, 48, 96, 144].filter((d) => d < ids.length).concat([ids.length]),
                   "pieces of whole chunks (40 rounds to 48)");
  const toks = events.filter((e) => e.type === "token");
  assert.deepEqual(toks.map((e) => e.token), plain.ids);
  // the first token's logprobs against the raw logits of the prompt's last position
  const s = model.session({chunk: 16});
  try {
    const lg = Float64Array.from(s.eval(ids));
    const mx = Math.max(...lg);
    const lse = mx + Math.log(lg.reduce((a, x) => a + Math.exp(x - mx), 0));
    const order = [...lg.keys()].sort((a, b) => lg[b] - lg[a] || a - b).slice(0, 4);
    assert.deepEqual(toks[0].top.map((t) => t.token), order);
    for (const t of toks[0].top) assert.ok(Math.abs(t.logprob - (lg[t.token] - lse)) < 1e-5, `${t.logprob} vs ${lg[t.token] - lse}`);
    assert.ok(Math.abs(toks[0].logprob - (lg[toks[0].token] - lse)) < 1e-5);
  } finally { s.free(); }
});

test("serve: concurrent requests queue (and say so in their telemetry) and both get their own exact text", async () => {
  const want = await cliText(modelPath(MODEL), PROMPT, ["-n", "200", "--temp", "0", "--ignore-eos"]);
  const ask = () => fetch(`${srv.url}/v1/completions`, {method: "POST", headers: {"content-type": "application/json"},
    body: JSON.stringify({model: srv.id, prompt: PROMPT, max_tokens: 200, ignore_eos: true, temperature: 0, stream: true})});
  // B is sent once A streams its first token: A holds the model for 200 tokens
  const a = await ask();
  let bDone;
  const ea = readSSE(a, (ev) => { if (ev.kind === "data" && !bDone) bDone = ask().then(readSSE); });
  const [evA, evB] = [await ea, await bDone];
  const text = (evs) => evs.filter((e) => e.kind === "data" && e.value !== "[DONE]").map((e) => e.value.choices[0]?.text ?? "").join("");
  assert.equal(text(evA), want);
  assert.equal(text(evB), want);
  const queue = (evs) => evs.filter((e) => e.kind === "telemetry" && e.value.type === "queue").map((e) => e.value);
  assert.deepEqual(queue(evA), []);
  assert.deepEqual(queue(evB).map((q) => q.ahead), [1], "B waited behind A and said so");
  const tB = evB.filter((e) => e.kind === "telemetry").map((e) => e.value.type);
  assert.ok(tB.indexOf("queue") < tB.indexOf("prefill"));
});

// What the backend feeds for a chat (local-backend.mjs promptIds).
const chatIdsOf = (messages) => model.tokenize(model.applyChatTemplate(messages), {addBos: true, parseSpecial: true});
const commonPrefix = (a, b) => { let i = 0; while (i < a.length && i < b.length && a[i] === b[i]) i++; return i; };

for (const [what, sampling] of [["greedy", {temperature: 0}], ["seeded", {temperature: 0.8, seed: 11}]]) {
  test(`serve: a chat's turn 2 prefills only its new tokens and equals a cold run (${what}); a prompt diverging at token 0 or 1 reuses nothing`, async (t) => {
    const own = await startServe(modelPath(MODEL), ["--ctx", "256"]);
    t.after(() => own.stop());
    const c = new OpenAI({baseURL: `${own.url}/v1`, apiKey: "x", maxRetries: 0});
    const opts = {maxTokens: 12, nCtx: 256, topP: 1, ...sampling};  // top_p 1: OpenAI's default, as serve sends it
    const turn1 = [{role: "user", content: "Tell me a story about a cat."}];
    const ids1 = chatIdsOf(turn1);
    const want1 = await model.complete(ids1, opts);
    const turn2 = [...turn1, {role: "assistant", content: want1.text}, {role: "user", content: "And then what happened?"}];
    const ids2 = chatIdsOf(turn2);
    const want2 = await model.complete(ids2, opts);
    // the session holds the prompt and every generated token but the last
    const cached = Math.min(commonPrefix(ids1.concat(want1.ids.slice(0, -1)), ids2), ids2.length - 1);
    assert.ok(cached > ids1.length / 2, `the turns share ${cached} of ${ids2.length} ids`);
    const r1 = await c.chat.completions.create({model: own.id, messages: turn1, max_tokens: 12, ...sampling});
    assert.equal(r1.choices[0].message.content, want1.text);
    assert.equal(r1.usage.prompt_tokens_details.cached_tokens, 0, "turn 1 is cold");
    const res = await fetch(`${own.url}/v1/chat/completions`, {method: "POST", headers: {"content-type": "application/json"},
      body: JSON.stringify({model: own.id, messages: turn2, max_tokens: 12, stream: true, stream_options: {include_usage: true}, ...sampling})});
    const events = await readSSE(res);
    const data = events.filter((e) => e.kind === "data" && e.value !== "[DONE]").map((e) => e.value);
    assert.equal(data.map((d) => d.choices[0]?.delta?.content ?? "").join(""), want2.text, "turn 2 equals a cold run of its whole prompt");
    const usage = data.find((d) => d.usage).usage;
    assert.equal(usage.prompt_tokens, ids2.length);
    assert.equal(usage.prompt_tokens_details.cached_tokens, cached, "cached = the common prefix");
    const prefill = events.filter((e) => e.kind === "telemetry" && e.value.type === "prefill").map((e) => e.value);
    assert.ok(prefill.length >= 2 && prefill.every((e) => e.total === ids2.length - cached && e.cached === cached), JSON.stringify(prefill));
    assert.equal(prefill.at(-1).done, ids2.length - cached, "only the new tokens were fed");
    // prompts (token ids) diverging from the held one at token 0, and at token 1 (only the BOS shared)
    for (const at of [0, 1]) {
      const idsO = ids2.slice();
      idsO[at] = (idsO[at] + 1) % 256;
      const wantO = await model.complete(idsO, {...opts, maxTokens: 6});
      const rO = await c.completions.create({model: own.id, prompt: idsO, max_tokens: 6, ...sampling});
      assert.equal(rO.choices[0].text, wantO.text);
      assert.equal(rO.usage.prompt_tokens_details.cached_tokens, 0, `diverging at token ${at}: nothing reused`);
    }
  });
}

test("serve: two clients, concurrent, each reuses its own slot's session only (never the other's), and exact", async (t) => {
  const own = await startServe(modelPath(MODEL), ["--ctx", "256"]);
  t.after(() => own.stop());
  const c = new OpenAI({baseURL: `${own.url}/v1`, apiKey: "x", maxRetries: 0});
  const prompts = ["Lily went to the park with her mom", "The big dog barked at the red ball"];
  const wants = await Promise.all(prompts.map((p) => model.complete(model.tokenize(p, {parseSpecial: true}), {maxTokens: 8, temperature: 0, nCtx: 256})));
  // concurrent, in slots of their own: round 0 cold; round 1 each keeps its own prompt (all but
  // its last token), never the other's
  for (let round = 0; round < 2; round++) {
    const rs = await Promise.all(prompts.map((prompt) => c.completions.create({model: own.id, prompt, max_tokens: 8, temperature: 0})));
    rs.forEach((r, i) => {
      assert.equal(r.choices[0].text, wants[i].text, `client ${i}, round ${round}`);
      assert.equal(r.usage.prompt_tokens_details.cached_tokens, round ? model.tokenize(prompts[i], {parseSpecial: true}).length - 1 : 0,
                   `client ${i}, round ${round}`);
    });
  }
  assert.equal((await (await fetch(`${own.url}/health`)).json()).slots >= 2, true);
});
