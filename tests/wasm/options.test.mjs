// The one options mapping (bindings/options.mjs) against the core's option table, and the
// one default context against the core's Engine.
import {test} from "node:test";
import assert from "node:assert/strict";

import * as kw from "../../bindings/knotwork.mjs";
import {Generator} from "../../bindings/generator.mjs";
import {SAMPLING_KEYS, SESSION_KEYS, coreOptions, samplingOptions, requestOptions, defaultContext} from "../../bindings/options.mjs";
import {sharedModel} from "./helpers.mjs";

const NAME = "stories260K.gguf";

test("coreOptions gives the options the core's command-line parser gives for the same settings", async () => {
  const cl = await kw.parseCommandLine("generate", [
    "m.gguf", "-p", "x", "-n", "7", "--temp", "0.5", "--top-k", "3", "--top-p", "0.25", "--min-p", "0.125",
    "--repeat-penalty", "1.5", "--repeat-last-n", "9", "--presence-penalty", "0.75", "--frequency-penalty", "-0.5",
    "--seed", "11", "--ctx", "96", "--chunk", "5", "--kv-budget", "65536", "--stop", "a", "--stop", "b",
    "--ignore-eos", "--reference"], "knotwork");
  assert.equal(cl.action, "run");
  const js = coreOptions({maxTokens: 7, temperature: 0.5, topK: 3, topP: 0.25, minP: 0.125, repeatPenalty: 1.5,
                          repeatLastN: 9, presencePenalty: 0.75, frequencyPenalty: -0.5, seed: 11, nCtx: 96, chunk: 5,
                          kvBudget: 65536, stop: ["a", "b"], ignoreEos: true, reference: true});
  assert.deepEqual(js, cl.options);
  // undefined and null are left to the core's defaults; the core's own keys pass over the named ones
  assert.deepEqual(coreOptions({maxTokens: undefined, topK: null, reference: false, options: {top_k: 2, n_ctx: 8}}),
                   {mode: "fast", top_k: 2, n_ctx: 8});
  assert.deepEqual(samplingOptions({maxTokens: 3, nCtx: 9, chunk: 4, logprobs: 2, reference: true}), {n_predict: 3});
});

test("every JS option name reaches its row of the core's table (a bad value is refused naming the core key)", async (t) => {
  const p = sharedModel(t, NAME);
  if (!p) return;
  const model = await kw.openModel(p);
  const ids = model.tokenize("Once");
  // a value of the wrong kind for each row ("x" is a string: a grammar or a schema text)
  const bad = (js) => (js === "grammar" || js === "jsonSchema" ? 5 : "x");
  for (const [js, key] of Object.entries({...SAMPLING_KEYS, ...SESSION_KEYS})) {
    await assert.rejects(model.complete(ids, {[js]: bad(js)}),
                         (e) => e.status === kw.STATUS.USAGE && e.message.includes(`option ${key}:`), `${js} -> ${key}`);
  }
  for (const [js, key] of Object.entries(SAMPLING_KEYS)) {
    await assert.rejects(Generator.open(model, {[js]: bad(js)}),
                         (e) => e.status === kw.STATUS.USAGE && e.message.includes(`option ${key}:`), `Generator ${js} -> ${key}`);
  }
  model.close();
});

test("defaultContext is the context the core's Engine takes when none is given", async (t) => {
  const p = sharedModel(t, NAME);
  if (!p) return;
  const model = await kw.openModel(p);
  const s = await model.complete(model.tokenize("Once"), {maxTokens: 1, temperature: 0});
  assert.equal(s.nCtx, defaultContext(model.info.config));
  model.close();
  assert.equal(defaultContext({n_ctx_train: 4096}), 2048);
  assert.equal(defaultContext({n_ctx_train: 300}), 300);
  assert.equal(defaultContext({n_ctx_train: 0}), 2048);
  assert.equal(defaultContext({}), 2048);
});

test("requestOptions: an OpenAI request's settings as generate options", () => {
  const req = {kind: "completion", maxTokens: 4, temperature: 0, topP: 0, topK: 5, minP: 0.1, repeatPenalty: 1.1,
               stop: ["x"], ignoreEos: false, presencePenalty: 0, frequencyPenalty: 0.5, logprobs: -1};
  assert.deepEqual(requestOptions(req, {maxTokens: 9, seed: 3}),
                   {maxTokens: 9, seed: 3, temperature: 0, topP: Number.MIN_VALUE, topK: 5, minP: 0.1, repeatPenalty: 1.1,
                    stop: ["x"], ignoreEos: false, presencePenalty: undefined, frequencyPenalty: 0.5, logprobs: undefined,
                    grammar: undefined, jsonSchema: undefined});
  assert.equal(requestOptions({...req, logprobs: 0}, {}).logprobs, 0);
  // response_format / grammar / json_schema (openai.mjs constraintOf) pass as they are
  assert.deepEqual(requestOptions({...req, jsonSchema: {type: "object"}}, {}).jsonSchema, {type: "object"});
  assert.equal(requestOptions({...req, grammar: "root ::= \"a\""}, {}).grammar, "root ::= \"a\"");
});
