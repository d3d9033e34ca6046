// bindings/openai.mjs on its own, in-process: a backend that fails after the stream has
// started (what a lost shard or station does in the mesh) ends the stream with a
// `failure` telemetry event and an OpenAI error chunk that the official client raises.
// (Everything else of the handler is tested against the real model in serve.test.mjs.)
import {test} from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";

import {createHandler, ApiError} from "../../bindings/openai.mjs";

function failingBackend() {
  return {
    async models() { return [{id: "m"}]; },
    async *generate(req) {
      yield {type: "accepted", promptTokens: 3, nCtx: 64};
      yield {type: "token", id: 1, text: "partial"};
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
