// response-format.test.mjs — OpenAI structured output on `knotwork serve` (bindings/openai.mjs
// constraintOf + local-backend.mjs), through the official openai client: a strict
// response_format json_schema (nested objects, arrays, enums, numbers, required keys) at
// temperature 1 over 20 seeds on a random-weight model → every reply parses and validates
// (ajv), finish_reason "stop"; json_object → an object; llama-server's `grammar` and
// `json_schema` body fields; an unsupported schema feature, a bad grammar and a malformed
// response_format → 400 naming the field (and the feature).
import {test, before, after} from "node:test";
import assert from "node:assert/strict";
import {execFileSync} from "node:child_process";
import {existsSync} from "node:fs";
import {join} from "node:path";
import OpenAI from "openai";
import Ajv from "ajv";

import {KNOT_BIN, startServe, tmpDir} from "./helpers.mjs";
import {SYNTH_BYTES, SCHEMA, MESSAGES} from "./structured-output.mjs";


let skip = null, serve, client;
before(async () => {
  if (!existsSync(KNOT_BIN)) {
    skip = `needs ${KNOT_BIN}`;
    if (process.env.CI) throw new Error(skip);
    return;
  }
  const model = join(tmpDir("knotwork-respfmt-"), "bytes.knot");
  execFileSync(KNOT_BIN, ["synth", ...SYNTH_BYTES, model], {stdio: "pipe"});
  serve = await startServe(model);
  client = new OpenAI({baseURL: new URL("/v1", serve.url).href, apiKey: "unused", maxRetries: 0});
});
after(async () => { await serve?.stop(); });

const format = (schema) => ({type: "json_schema", json_schema: {name: "person", schema, strict: true}});

test("serve: a strict json_schema at temperature 1 over 20 seeds: every reply parses and validates (ajv)", async (t) => {
  if (skip) return t.skip(skip);
  const validate = new Ajv({strict: true}).compile(SCHEMA);
  const texts = new Set();
  for (let seed = 1; seed <= 20; seed++) {
    const r = await client.chat.completions.create({model: serve.id, messages: MESSAGES, temperature: 1, seed, max_tokens: 400,
                                                    response_format: format(SCHEMA)});
    const text = r.choices[0].message.content;
    assert.equal(r.choices[0].finish_reason, "stop", `seed ${seed}: ${text}`);
    let v;
    assert.doesNotThrow(() => { v = JSON.parse(text); }, `seed ${seed}: not JSON: ${text}`);
    assert.ok(validate(v), `seed ${seed}: ${JSON.stringify(validate.errors)}: ${text}`);
    texts.add(text);
  }
  assert.ok(texts.size >= 15, `${texts.size} distinct replies of 20: the seeds really sample`);
  // streamed: the same reply as non-streamed with the same seed, finish_reason "stop"
  const once = await client.chat.completions.create({model: serve.id, messages: MESSAGES, temperature: 1, seed: 3, max_tokens: 400,
                                                     response_format: format(SCHEMA)});
  const stream = await client.chat.completions.create({model: serve.id, messages: MESSAGES, temperature: 1, seed: 3, max_tokens: 400,
                                                       response_format: format(SCHEMA), stream: true});
  let text = "", finish = null;
  for await (const ch of stream) {
    text += ch.choices[0]?.delta?.content ?? "";
    finish = ch.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(text, once.choices[0].message.content);
  assert.equal(finish, "stop");
});

test("serve: json_object parses to an object; llama-server's grammar and json_schema fields", async (t) => {
  if (skip) return t.skip(skip);
  // any object: unbounded, so a random model's reply may run to max_tokens; those that end
  // (finish_reason "stop") are objects, and some do
  let ended = 0;
  for (let seed = 1; seed <= 8; seed++) {
    const r = await client.chat.completions.create({model: serve.id, messages: MESSAGES, temperature: 1, seed, max_tokens: 300,
                                                    response_format: {type: "json_object"}});
    const text = r.choices[0].message.content;
    assert.match(text, /^\s*\{/);
    if (r.choices[0].finish_reason !== "stop") continue;
    ended++;
    const v = JSON.parse(text);
    assert.ok(v !== null && typeof v === "object" && !Array.isArray(v), text);
  }
  assert.ok(ended >= 2, `${ended} of 8 json_object replies ended`);
  const text = {type: "text"};
  const plain = await client.completions.create({model: serve.id, prompt: "x", max_tokens: 4, temperature: 0, response_format: text});
  assert.equal(plain.usage.completion_tokens, 4, "type text: no constraint");
  const g = await client.completions.create({model: serve.id, prompt: "Answer:", temperature: 1, seed: 5, max_tokens: 20,
                                             grammar: 'root ::= ("yes" | "no") " " [0-9]{3}\n'});
  assert.match(g.choices[0].text, /^(yes|no) [0-9]{3}$/);
  assert.equal(g.choices[0].finish_reason, "stop");
  const j = await client.completions.create({model: serve.id, prompt: "Answer:", temperature: 1, seed: 5, max_tokens: 40,
                                             json_schema: {type: "array", items: {enum: [1, 2, 3]}, minItems: 2, maxItems: 4}});
  const arr = JSON.parse(j.choices[0].text);
  assert.ok(Array.isArray(arr) && arr.length >= 2 && arr.length <= 4 && arr.every((x) => [1, 2, 3].includes(x)), j.choices[0].text);
});

test("serve: an unsupported schema feature, a bad grammar and a malformed response_format are 400s naming the field", async (t) => {
  if (skip) return t.skip(skip);
  const refused = async (body, param, message) => {
    await assert.rejects(client.chat.completions.create({model: serve.id, messages: MESSAGES, max_tokens: 8, ...body}), (e) => {
      assert.equal(e.status, 400, String(e));
      assert.equal(e.param, param, e.message);
      assert.match(e.message, message);
      return true;
    });
  };
  await refused({response_format: format({type: "object", properties: {name: {type: "string", pattern: "^a"}}})},
                "response_format", /json schema: "pattern" is not supported \(at #\/properties\/name\)/);
  await refused({response_format: format({type: "integer", minimum: 0})}, "response_format", /"minimum" is not supported/);
  await refused({grammar: "root ::= \"a\" missing\n"}, "grammar", /grammar: line 1, column 14 \(rule 'root'\): rule 'missing' is not defined/);
  await refused({json_schema: {type: "string", format: "date"}}, "json_schema", /json schema: "format" is not supported/);
  await refused({response_format: {type: "xml"}}, "response_format.type", /'response_format.type' must be "text", "json_object" or "json_schema"/);
  await refused({response_format: {type: "json_schema"}}, "response_format.json_schema", /must be an object/);
  await refused({response_format: {type: "json_schema", json_schema: {name: "a b", schema: {}}}}, "response_format.json_schema.name", /name/);
  await refused({response_format: {type: "json_schema", json_schema: {name: "p", schema: {}, strict: "yes"}}},
                "response_format.json_schema.strict", /boolean/);
  await refused({response_format: {type: "json_schema", json_schema: {name: "p", schema: 3}}}, "response_format.json_schema.schema", /JSON Schema/);
  await refused({response_format: {type: "json_schema", json_schema: {name: "p", schema: {}, extra: 1}}},
                "response_format.json_schema.extra", /not a field/);
  await refused({response_format: {type: "json_object"}, grammar: "root ::= \"a\"\n"}, "grammar", /give one of response_format, grammar/);
  await refused({response_format: "json"}, "response_format", /must be an object/);
});
