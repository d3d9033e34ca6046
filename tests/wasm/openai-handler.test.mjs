// bindings/openai.mjs on its own, in-process: a backend that fails after the stream has
// started (what a lost shard or station does in the mesh) ends the stream with a
// `failure` telemetry event and an OpenAI error chunk that the official client raises.
// (Everything else of the handler is tested against the real model in serve.test.mjs.)
import {test} from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";

import {createHandler, ApiError, parseRequest} from "../../bindings/openai.mjs";

function failingBackend() {
  return {
    async models() { return [{id: "m"}]; },
    async *generate(req) {
      yield {type: "accepted", promptTokens: 3, nCtx: 64};
      yield {type: "token", token: 1, text: "partial"};
      yield {type: "retry", shard: "s1", attempt: 1, reason: "timeout"};
      throw new Error("shard s1 lost after 2 retries: timeout");
    },
  };
}

const fetchVia = (handle) => async (url, init) => handle(new Request(url, init));

test("openai handler: a failure mid-stream is a failure event plus an error chunk the openai client raises", async () => {
  const handle = createHandler(failingBackend());
  const res = await handle(new Request("http://x/v1/chat/completions", {method: "POST",
    body: JSON.stringify({model: "m", messages: [{role: "user", content: "q"}], stream: true})}));
  assert.equal(res.status, 200);
  const body = await res.text();
  const tele = [...body.matchAll(/^: knotwork (.*)$/gm)].map((m) => JSON.parse(m[1]));
  assert.deepEqual(tele.map((t) => t.type), ["accepted", "decode", "tokens", "retry", "failure"]);
  assert.equal(tele.at(-1).reason, "shard s1 lost after 2 retries: timeout");
  assert.match(body, /data: \{"error":\{"message":"shard s1 lost after 2 retries: timeout","type":"server_error"/);
  assert.ok(body.endsWith("data: [DONE]\n\n"));

  const client = new OpenAI({baseURL: "http://x/v1", apiKey: "k", maxRetries: 0, fetch: fetchVia(handle)});
  let text = "";
  await assert.rejects(async () => {
    for await (const c of await client.chat.completions.create({model: "m", messages: [{role: "user", content: "q"}], stream: true}))
      text += c.choices[0]?.delta?.content ?? "";
  }, (e) => e instanceof OpenAI.APIError && /shard s1 lost/.test(e.message));
  assert.equal(text, "partial");
  // not streamed: the whole request fails with a 500 carrying the reason
  await assert.rejects(client.chat.completions.create({model: "m", messages: [{role: "user", content: "q"}]}),
    (e) => e.status === 500 && /shard s1 lost/.test(e.message));
});

test("openai handler: an ApiError thrown before `accepted` is the HTTP status, streamed or not", async () => {
  const handle = createHandler({
    async models() { return [{id: "m"}]; },
    async *generate() { throw new ApiError(503, "no station reachable", {type: "server_error", code: "unavailable"}); },
  });
  for (const stream of [false, true]) {
    const res = await handle(new Request("http://x/v1/completions", {method: "POST", body: JSON.stringify({model: "m", prompt: "a", stream})}));
    assert.equal(res.status, 503);
    assert.deepEqual(await res.json(), {error: {message: "no station reachable", type: "server_error", param: null, code: "unavailable"}});
  }
});

test("openai handler: coordinator telemetry ({type: telemetry, event}) is mapped to the stream's vocabulary", async () => {
  const handle = createHandler({
    async models() { return [{id: "m"}]; },
    async *generate() {
      yield {type: "accepted", promptTokens: 70, nCtx: 128};
      yield {type: "telemetry", event: "route", stations: 2, shards: 4};
      yield {type: "telemetry", event: "prefill_started", tokens: 70};
      yield {type: "telemetry", kind: "prefill_progress", done: 64, total: 70};
      yield {type: "telemetry", event: "abstain", phase: "lm-head", shard: "v2", slice: [256, 384], reason: "timeout", tokens: []};
      yield {type: "telemetry", event: "reprefill", reason: "station s1 lost the session", tokens: 70};
      yield {type: "telemetry", event: "prefill_completed", tokens: 70, ms: 12};
      yield {type: "telemetry", event: "decode_started"};
      yield {type: "token", token: 5, text: "x"};
      yield {type: "summary", reason: "length", nPrompt: 70, nGenerated: 1};
    },
  });
  const res = await handle(new Request("http://x/v1/completions", {method: "POST", body: JSON.stringify({model: "m", prompt: "a", stream: true})}));
  const tele = [...(await res.text()).matchAll(/^: knotwork (.*)$/gm)].map((m) => JSON.parse(m[1]));
  const strip = ({t, ...e}) => e;
  assert.deepEqual(tele.slice(1, 7).map(strip), [
    {type: "route", stations: 2, shards: 4},
    {type: "prefill", done: 0, total: 70},
    {type: "prefill", done: 64, total: 70},
    {type: "shard", name: "v2", state: "failed", phase: "lm-head", slice: [256, 384], reason: "timeout", tokens: []},
    {type: "retry", what: "re-prefill", reason: "station s1 lost the session", tokens: 70},
    {type: "prefill", done: 70, total: 70, elapsedMs: 12},
  ]);
  assert.deepEqual(tele.slice(7).map((e) => e.type), ["decode", "tokens", "done"]);
});

// README "Serving": `max_tokens` / `max_completion_tokens`; what cannot be honoured is an
// error naming the field (`n` > 1, `functions`, `logit_bias`, `prediction`, `echo`,
// `suffix`, ...) — the rest are checked against the real model in serve.test.mjs.
test("openai handler: max_completion_tokens sets the limit; prediction, echo, suffix are refused by name", () => {
  const chat = {model: "m", messages: [{role: "user", content: "q"}]};
  assert.equal(parseRequest({...chat, max_completion_tokens: 7}, "chat").maxTokens, 7);
  assert.equal(parseRequest({...chat, max_tokens: 5}, "chat").maxTokens, 5);
  assert.equal(parseRequest({...chat, response_format: {type: "text"}}, "chat").maxTokens, undefined);
  const refused = (body, kind, field) => assert.throws(() => parseRequest(body, kind), (e) =>
    e instanceof ApiError && e.status === 400 && e.param === field && new RegExp(`unsupported: ${field}`).test(e.message));
  assert.deepEqual(parseRequest({...chat, response_format: {type: "json_object"}}, "chat").jsonSchema, {type: "object"});  // response-format.test.mjs
  refused({...chat, prediction: {type: "content", content: "x"}}, "chat", "prediction");
  refused({model: "m", prompt: "x", echo: true}, "completion", "echo");
  refused({model: "m", prompt: "x", suffix: "y"}, "completion", "suffix");
});
