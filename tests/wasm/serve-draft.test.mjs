// `knotwork serve --draft SMALL [--draft-n K]`: every request drafts with the draft model
// (each slot's session holds its own draft KV) — through the official `openai` client the
// greedy reply is the one a server without --draft gives, and usage
// (completion_tokens_details.accepted / rejected_prediction_tokens), llama-server's timings
// (draft_n, draft_n_accepted) and the knotwork field report the drafts. A draft of another
// vocabulary stops the server before it serves, naming both models.
import {test} from "node:test";
import assert from "node:assert/strict";
import {execFile} from "node:child_process";
import {promisify} from "node:util";
import {mkdtempSync, rmSync} from "node:fs";
import {tmpdir} from "node:os";
import {join} from "node:path";
import OpenAI from "openai";
import {ROOT, KNOT_BIN, startServe, MODELS, haveFiles} from "./helpers.mjs";

const run = promisify(execFile);
const shared = MODELS;
const Q8 = join(shared, "stories260K-pad256-llama-q8_0.gguf"), Q6 = join(shared, "stories260K-pad256-llama-q6_k.gguf");

test("serve --draft: the greedy reply of a plain server; usage, timings and knotwork report the drafts", async (t) => {
  if (!haveFiles(t, Q8, Q6)) return;
  const plain = await startServe(Q8, ["--ctx", "256", "--parallel", "2"]);
  const spec = await startServe(Q8, ["--ctx", "256", "--parallel", "2", "--draft", Q6, "--draft-n", "3"]);
  try {
    assert.match(spec.stderr, /speculative decoding with draft model .*q6_k\.gguf \(3 tokens per pass\)/);
    const ask = (srv, body) => new OpenAI({baseURL: `${srv.url}/v1`, apiKey: "unused", maxRetries: 0}).completions.create(body);
    const body = {model: plain.id, prompt: "Once upon a time, there was a little girl named Lily. She", max_tokens: 40, temperature: 0};
    const a = await ask(plain, body), b = await ask(spec, body);
    assert.ok(a.choices[0].text.length > 20, a.choices[0].text);
    assert.equal(b.choices[0].text, a.choices[0].text, "the same greedy reply with and without --draft");
    assert.equal(b.usage.completion_tokens, a.usage.completion_tokens);
    assert.equal(a.usage.completion_tokens_details, undefined, "no drafts without --draft");
    assert.equal(a.timings, undefined);
    const sp = b.knotwork.speculative;
    assert.equal(sp.draftN, 3);
    assert.ok(sp.drafted > 0 && sp.accepted > 0 && sp.accepted <= sp.drafted, JSON.stringify(sp));
    assert.deepEqual(b.usage.completion_tokens_details, {accepted_prediction_tokens: sp.accepted, rejected_prediction_tokens: sp.drafted - sp.accepted});
    assert.equal(b.timings.draft_n, sp.drafted);
    assert.equal(b.timings.draft_n_accepted, sp.accepted);
    assert.equal(b.timings.predicted_n, b.usage.completion_tokens);
    // chat, streamed with usage: the same text as the plain server, drafts in the last chunk's usage
    const chat = {model: plain.id, messages: [{role: "user", content: "Tell me about Tom and his red ball."}], max_tokens: 24, temperature: 0,
                  stream: true, stream_options: {include_usage: true}};
    const collect = async (srv) => {
      let text = "", usage = null;
      for await (const c of await new OpenAI({baseURL: `${srv.url}/v1`, apiKey: "unused", maxRetries: 0}).chat.completions.create(chat)) {
        text += c.choices[0]?.delta?.content ?? "";
        if (c.usage) usage = c.usage;
      }
      return {text, usage};
    };
    const ca = await collect(plain), cb = await collect(spec);
    assert.equal(cb.text, ca.text);
    assert.ok(cb.usage.completion_tokens_details.accepted_prediction_tokens >= 0, JSON.stringify(cb.usage));
  } finally { await plain.stop(); await spec.stop(); }
});

test("serve --draft with another vocabulary exits before serving, naming both models", async (t) => {
  if (!haveFiles(t, Q8, KNOT_BIN)) return;
  const dir = mkdtempSync(join(tmpdir(), "knot-serve-draft-"));
  try {
    const other = join(dir, "other.knot");
    await run(KNOT_BIN, ["synth", "--arch", "llama", "--vocab", "300", other]);
    const r = await run(process.execPath, [join(ROOT, "bin/knotwork.mjs"), "serve", Q8, "--port", "0", "--draft", other]).catch((e) => e);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /draft model .*other\.knot and target model .*q8_0\.gguf have different vocabularies: 300 vs 512 tokens/);
    assert.doesNotMatch(r.stderr, /serving/);
  } finally { rmSync(dir, {recursive: true}); }
});
