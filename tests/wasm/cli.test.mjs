// bin/knotwork.mjs: same flags and same stdout as the native `knot generate`.
import {test} from "node:test";
import assert from "node:assert/strict";
import {existsSync} from "node:fs";
import {spawnSync} from "node:child_process";
import {join} from "node:path";

import {ROOT, KNOT_BIN, sharedModel, referenceOutputs, tmpDir} from "./helpers.mjs";

const CLI = join(ROOT, "bin/knotwork.mjs");
const run = (args) => spawnSync(process.execPath, [CLI, ...args], {encoding: "utf8", timeout: 60_000});

test("generate --ids prints exactly one JSON line of the reference ids; timing on stderr", (t) => {
  const p = sharedModel(t, "stories260K-pad256-llama-q6_k.gguf");
  if (!p) return;
  const r = run(["generate", p, "-p", referenceOutputs().prompt, "-n", "32", "--temp", "0", "--ids"]);
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout, JSON.stringify(referenceOutputs().models["stories260K-pad256-llama-q6_k.gguf"].exactFloat64.tokenIds) + "\n");
  assert.match(r.stderr, /prefill 5 tokens .* tok\/s/);
  assert.match(r.stderr, /decode 31 tokens .* tok\/s/);
});

test("generate streams the text", (t) => {
  const name = "stories260K.gguf";
  const p = sharedModel(t, name);
  if (!p) return;
  const r = run(["generate", p, "-p", referenceOutputs().prompt, "-n", "32", "--temp", "0"]);
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout, referenceOutputs().models[name].llamaCppNative.text + "\n");
});

test("bad flags and missing files are errors with exit codes", () => {
  let r = run(["generate", "/nonexistent/model.gguf", "-p", "x"]);
  assert.equal(r.status, 1);
  assert.match(r.stderr, /knotwork: error: .*model\.gguf/);
  r = run(["generate", "m.gguf", "-p", "x", "--temp", "warm"]);
  assert.equal(r.status, 2);
  assert.match(r.stderr, /--temp: 'warm' is not a number/);
  r = run(["generate", "m.gguf", "-p", "x", "--bogus"]);
  assert.equal(r.status, 2);
  r = run(["frobnicate"]);
  assert.equal(r.status, 2);
});

test("same stdout as native `knot generate` (greedy, sampled with seed, stop string, reference mode)", (t) => {
  const p = sharedModel(t, "stories260K-pad256-qwen2-q4_k_m.gguf");
  if (!p) return;
  if (!existsSync(KNOT_BIN)) {
    if (process.env.CI) throw new Error(`${KNOT_BIN} missing (CI is set: the native build must run first)`);
    t.skip("native build/bin/knot not built");
    return;
  }
  const knot = join(tmpDir(), "m.knot");
  const conv = spawnSync(KNOT_BIN, ["convert", p, knot], {encoding: "utf8"});
  assert.equal(conv.status, 0, conv.stderr);
  const cases = [
    ["-n", "16", "--temp", "0", "--ids"],
    ["-n", "24", "--temp", "0.8", "--seed", "7", "--top-k", "20", "--top-p", "0.9", "--ids"],
    ["-n", "24", "--temp", "1.1", "--seed", "3", "--min-p", "0.02", "--repeat-penalty", "1.1"],
    ["-n", "32", "--temp", "0", "--stop", "Lily"],
    ["-n", "32", "--temp", "0", "--reference", "--ids"],
  ];
  for (const model of [p, knot]) {
    for (const c of cases) {
      const args = ["generate", model, "-p", "Once upon a time", ...c];
      const nat = spawnSync(KNOT_BIN, args, {encoding: "utf8", timeout: 60_000});
      const js = run(args);
      assert.equal(nat.status, 0, nat.stderr);
      assert.equal(js.status, 0, js.stderr);
      assert.equal(js.stdout, nat.stdout, `${args.join(" ")}\nnative: ${nat.stdout}\nwasm:   ${js.stdout}`);
    }
  }
});
