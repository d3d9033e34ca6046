// Speculative decoding by prompt lookup (--lookup K, {lookup} in the JS API;
// core/infer/speculative.h): greedy output identical to plain decoding in both CLIs and
// the JS API, drafts made, accepted and rejected, the same counts natively and in wasm;
// seeded sampling with lookup gives the same ids on both platforms (one RNG, one rule).
// The sampling distribution itself is tested natively (tests/native/infer_speculative.cpp).
import {test} from "node:test";
import assert from "node:assert/strict";
import {spawnSync} from "node:child_process";
import {join} from "node:path";
import {readFileSync} from "node:fs";
import * as kw from "../../bindings/knotwork.mjs";
import {ROOT, KNOT_BIN, sharedModel} from "./helpers.mjs";

const CLI = join(ROOT, "bin/knotwork.mjs");
const PROMPT = "Once upon a time, there was a little girl named Lily. She loved to play outside. " +
               "Once upon a time, there was a little girl named Lily. She loved to";
const node = (args) => spawnSync(process.execPath, [CLI, ...args], {encoding: "utf8", timeout: 60_000});
const knot = (args) => spawnSync(KNOT_BIN, args, {encoding: "utf8", timeout: 60_000});
const counts = (stderr) => {
  const m = stderr.match(/speculative \(lookup (\d+)\): (\d+) drafted, (\d+) accepted/);
  assert.ok(m, `no speculative line in: ${stderr}`);
  return {lookup: +m[1], drafted: +m[2], accepted: +m[3]};
};

test("--lookup: greedy stdout equals plain decoding in both CLIs, with the same draft counts", (t) => {
  const p = sharedModel(t, "stories260K.gguf");
  if (!p) return;
  const base = ["generate", p, "-p", PROMPT, "-n", "80", "--temp", "0", "--ignore-eos"];
  const plain = knot(base);
  assert.equal(plain.status, 0, plain.stderr);
  assert.doesNotMatch(plain.stderr, /speculative/);
  for (const k of ["2", "5"]) {
    const a = knot([...base, "--lookup", k]), b = node([...base, "--lookup", k]);
    assert.equal(a.status, 0, a.stderr);
    assert.equal(b.status, 0, b.stderr);
    assert.equal(a.stdout, plain.stdout, `knot --lookup ${k}`);
    assert.equal(b.stdout, plain.stdout, `knotwork --lookup ${k}`);
    const ca = counts(a.stderr), cb = counts(b.stderr);
    assert.deepEqual(cb, ca, "the same drafts natively and in wasm");
    assert.equal(ca.lookup, +k);
    assert.ok(ca.accepted > 0 && ca.accepted < ca.drafted, JSON.stringify(ca));
  }
  const bad = node([...base, "--lookup", "65"]);
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /--lookup/);
});

test("--lookup with a seed: the same sampled ids natively and in wasm", (t) => {
  const p = sharedModel(t, "stories260K.gguf");
  if (!p) return;
  const args = ["generate", p, "-p", PROMPT, "-n", "48", "--temp", "0.9", "--seed", "31", "--lookup", "4", "--ids"];
  const a = knot(args), b = node(args);
  assert.equal(a.status, 0, a.stderr);
  assert.equal(b.stdout, a.stdout);
  assert.deepEqual(counts(b.stderr), counts(a.stderr));
});

test("generate({lookup}): greedy ids equal plain, telemetry counts drafts per token", async (t) => {
  const p = sharedModel(t, "stories260K.gguf");
  if (!p) return;
  const m = await kw.openModel(new Uint8Array(readFileSync(p)));
  try {
    const run = async (opts) => {
      const evs = [];
      for await (const ev of m.generate(PROMPT, {maxTokens: 64, temperature: 0, ignoreEos: true, ...opts})) evs.push(ev);
      return {tokens: evs.filter((e) => e.type === "token"), summary: evs.at(-1)};
    };
    const plain = await run({}), spec = await run({lookup: 4});
    assert.deepEqual(spec.summary.ids, plain.summary.ids);
    assert.equal(spec.summary.text, plain.summary.text);
    assert.equal(plain.summary.speculative, undefined);
    const sp = spec.summary.speculative;
    assert.equal(sp.lookup, 4);
    assert.ok(sp.accepted > 0 && sp.accepted < sp.drafted, JSON.stringify(sp));
    assert.equal(sp.acceptance, sp.accepted / sp.drafted);
    // per token: counts never decrease, and the last token's are the summary's
    let prev = 0;
    for (const e of spec.tokens) {
      assert.ok(e.telemetry.speculative.drafted >= prev);
      prev = e.telemetry.speculative.drafted;
    }
    assert.deepEqual({drafted: spec.tokens.at(-1).telemetry.speculative.drafted, accepted: spec.tokens.at(-1).telemetry.speculative.accepted},
                     {drafted: sp.drafted, accepted: sp.accepted});
    await assert.rejects(run({lookup: -1}), /lookup/);
  } finally {
    m.close();
  }
});
