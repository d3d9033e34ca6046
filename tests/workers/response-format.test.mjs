// response-format.test.mjs — structured output on the mesh: response_format through the
// official openai client into the entry Worker (bindings/openai.mjs over
// workers/coordinator/backend.mjs) gives the replies of `knotwork serve`'s handler with the
// same seed, each valid against the schema (ajv); an unsupported schema feature is a 400
// naming it; and when the shards' merged top-k holds fewer tokens the grammar allows than
// the sampler keeps, the coordinator widens k (x4, then the full slices) for that step
// (mesh.mjs #widen: "widen" events, summary.widened) and the ids equal the single process's
// with the same grammar and seed.
import {test} from "node:test";
import {execFile} from "node:child_process";
import {writeFileSync} from "node:fs";
import {join} from "node:path";
import {promisify} from "node:util";
import assert from "node:assert/strict";
import OpenAI from "openai";
import Ajv from "ajv";
import {synthKnot, single, meshFor} from "./helpers.mjs";
import * as kw from "../../bindings/knotwork.mjs";
import {createHandler} from "../../bindings/openai.mjs";
import {localBackend} from "../../bindings/local-backend.mjs";
import {SYNTH_BYTES, SCHEMA, MESSAGES} from "../wasm/structured-output.mjs";
import {ROOT, tmpDir} from "../wasm/helpers.mjs";

const format = {type: "json_schema", json_schema: {name: "person", schema: SCHEMA, strict: true}};

test("openai client -> mesh entry: response_format json_schema replies == serve's handler (same seeds), valid (ajv); unsupported -> 400", async (t) => {
  const bytes = synthKnot(t, "bytes", SYNTH_BYTES);
  if (!bytes) return;
  const seeds = [1, 2, 3, 4];
  const m = await kw.openModel(kw.bytesSource(bytes, "single.knot"));
  const want = [], wantObj = [];
  const objSeeds = [1, 2, 3, 4];
  try {
    const handle = createHandler(localBackend(m, {id: "model"}));
    const local = new OpenAI({baseURL: "http://single/v1", apiKey: "unused", maxRetries: 0,
                              fetch: async (url, init) => handle(new Request(url, init))});
    for (const seed of seeds)
      want.push((await local.chat.completions.create({model: "model", messages: MESSAGES, temperature: 1, seed, max_tokens: 400,
                                                      response_format: format})).choices[0].message.content);
    for (const seed of objSeeds)
      wantObj.push((await local.chat.completions.create({model: "model", messages: MESSAGES, temperature: 1, seed, max_tokens: 200,
                                                         response_format: {type: "json_object"}})).choices[0]);
  } finally { m.close(); }
  const validate = new Ajv({strict: true}).compile(SCHEMA);
  const mesh = await meshFor(bytes, {stations: [2], shards: 2}, {port: 0});
  try {
    const client = new OpenAI({baseURL: new URL("/v1", mesh.url).href, apiKey: "unused"});
    for (const [i, seed] of seeds.entries()) {
      const r = await client.chat.completions.create({model: "model", messages: MESSAGES, temperature: 1, seed, max_tokens: 400,
                                                      response_format: format});
      const text = r.choices[0].message.content;
      assert.equal(r.choices[0].finish_reason, "stop", text);
      assert.equal(text, want[i], `seed ${seed}: mesh vs single process`);
      assert.ok(validate(JSON.parse(text)), `seed ${seed}: ${JSON.stringify(validate.errors)}: ${text}`);
    }
    // json_object (any object, unbounded: a random model's reply may run to max_tokens): the
    // single process's replies; those that end are objects, and some do
    let ended = 0;
    for (const [i, seed] of objSeeds.entries()) {
      const [c] = (await client.chat.completions.create({model: "model", messages: MESSAGES, temperature: 1, seed, max_tokens: 200,
                                                         response_format: {type: "json_object"}})).choices;
      assert.equal(c.message.content, wantObj[i].message.content, `json_object seed ${seed}`);
      assert.equal(c.finish_reason, wantObj[i].finish_reason);
      if (c.finish_reason !== "stop") continue;
      ended++;
      const v = JSON.parse(c.message.content);
      assert.ok(v !== null && typeof v === "object" && !Array.isArray(v), c.message.content);
    }
    assert.ok(ended >= 1, `${ended} of ${objSeeds.length} json_object replies ended`);
    await assert.rejects(client.chat.completions.create({model: "model", messages: MESSAGES, max_tokens: 8,
      response_format: {type: "json_schema", json_schema: {name: "p", schema: {type: "array", uniqueItems: true}}}}), (e) => {
      assert.equal(e.status, 400);
      assert.equal(e.param, "response_format");
      assert.match(e.message, /^400 json schema: "uniqueItems" is not supported \(at #\)/);
      return true;
    });
    await assert.rejects(client.completions.create({model: "model", prompt: "x", max_tokens: 8, grammar: "root ::= (\"a\"\n"}), (e) => {
      assert.equal(e.status, 400);
      assert.equal(e.param, "grammar");
      assert.match(e.message, /^400 grammar: line 2, column 1 \(rule 'root'\): expected '\)'/);
      return true;
    });
  } finally { await mesh.close(); }
});

test("a grammar of rare tokens: the coordinator widens the shards' top-k (x4, then full) and the ids equal the single process's", async (t) => {
  const bytes = synthKnot(t, "bytes", SYNTH_BYTES);
  if (!bytes) return;
  // 20 of 300 tokens allowed ([a-t]); 4 shards of 75
  const grammar = "root ::= [a-t]{12} \".\"\n";
  const runs = [{maxTokens: 20, temperature: 0, grammar}, {maxTokens: 20, temperature: 1, topK: 8, seed: 11, grammar},
                {maxTokens: 20, temperature: 1, topK: 40, seed: 12, grammar}];
  const mesh = await meshFor(bytes, {stations: [2], shards: 4});
  try {
    for (const options of runs) {
      const want = await single(bytes, "Letters:", options);
      assert.match(want.text, /^[a-t]{12}\.$/);
      assert.equal(want.reason, "grammar");
      const r = await mesh.run({ids: want.promptIds, options});
      assert.equal(r.error, undefined, r.error?.error);
      assert.deepEqual(r.summary.ids, want.ids, `${JSON.stringify(options)}: mesh ids vs single process`);
      assert.equal(r.summary.text, want.text);
      assert.equal(r.summary.reason, "grammar");
      const widen = r.telemetry.filter((e) => e.event === "widen");
      assert.ok(r.summary.widened > 0 && widen.length === r.summary.widened, `${JSON.stringify(options)}: ${r.summary.widened} widenings`);
      for (const w of widen) {
        assert.ok(w.allowed < w.need, JSON.stringify(w));
        assert.ok(w.to === "full" || w.to === w.k * 4, JSON.stringify(w));
      }
      // top-k 40 needs 40 allowed tokens and only 20 exist: every step goes to the full slices
      if (options.topK === 40) assert.ok(widen.filter((w) => w.to === "full").length >= want.ids.length, JSON.stringify(widen));
      if (options.temperature === 0) assert.ok(widen.some((w) => w.to !== "full"), "greedy: some steps find an allowed token at a wider k");
    }
  } finally { await mesh.close(); }
});

test("knotwork mesh --json-schema FILE / --grammar FILE: the same stdout as generate; a refused schema exits 2 naming it", async (t) => {
  const bytes = synthKnot(t, "bytes", SYNTH_BYTES);
  if (!bytes) return;
  const dir = tmpDir("knotwork-respfmt-cli-"), model = join(dir, "bytes.knot"), schema = join(dir, "schema.json"), gbnf = join(dir, "rare.gbnf");
  writeFileSync(model, bytes);
  writeFileSync(schema, JSON.stringify(SCHEMA));
  writeFileSync(gbnf, "root ::= [a-t]{6} \".\"\n");
  const node = (args) => promisify(execFile)(process.execPath, [join(ROOT, "bin/knotwork.mjs"), ...args], {maxBuffer: 1 << 24}).catch((e) => e);
  for (const flags of [["--json-schema", schema, "--temp", "1", "--seed", "4", "-n", "400"], ["--grammar", gbnf, "--temp", "0"]]) {
    const gen = await node(["generate", model, "-p", "Reply:", ...flags]);
    const mesh = await node(["mesh", model, "--stations", "2", "--shards", "2", "-p", "Reply:", ...flags]);
    assert.equal(gen.code ?? 0, 0, gen.stderr);
    assert.equal(mesh.code ?? 0, 0, mesh.stderr);
    assert.equal(mesh.stdout, gen.stdout, flags.join(" "));
    if (flags[0] === "--json-schema") assert.ok(new Ajv({strict: true}).compile(SCHEMA)(JSON.parse(mesh.stdout)), mesh.stdout);
    else {
      assert.match(mesh.stdout, /^[a-t]{6}\.\n$/);
      assert.match(mesh.stderr, /grammar: \d+ lm-head fan-outs asked again with a wider top-k/);
    }
  }
  writeFileSync(schema, JSON.stringify({type: "string", format: "date"}));
  const bad = await node(["mesh", model, "-p", "x", "--json-schema", schema]);
  assert.equal(bad.code, 2, bad.stderr);
  assert.match(bad.stderr, /json schema: "format" is not supported \(at #\)/);
});
