// The architecture and type tables through the ABI: Qwen3 (per-head q/k RMSNorm, head_dim
// from key_length != hidden / heads) gives the same ids natively and in wasm; the JS
// takes phase tensor lists and type sizes from the core, not from its own lists.
import {test} from "node:test";
import assert from "node:assert/strict";
import {existsSync, readFileSync} from "node:fs";
import {execFileSync, spawnSync} from "node:child_process";
import {join} from "node:path";

import * as kw from "../../bindings/knotwork.mjs";
import {openParts} from "../../bindings/mesh.mjs";
import {ROOT, KNOT_BIN, tmpDir} from "./helpers.mjs";

const CLI = join(ROOT, "bin/knotwork.mjs");
const QWEN3 = ["--arch", "qwen3", "--hidden", "256", "--layers", "3", "--heads", "4", "--kv-heads", "2",
               "--head-dim", "128", "--ffn", "512", "--vocab", "300", "--type", "Q4_K_M", "--seed", "5"];

let synthDir;
function synthQwen3(t, ext) {
  if (!existsSync(KNOT_BIN)) {
    if (process.env.CI) throw new Error(`${KNOT_BIN} missing (CI is set: build the native CLI first)`);
    t.skip(`${KNOT_BIN} missing`);
    return null;
  }
  synthDir ??= tmpDir("knotwork-arch-");
  const out = join(synthDir, `qwen3.${ext}`);
  if (!existsSync(out)) execFileSync(KNOT_BIN, ["synth", ...QWEN3, out], {stdio: "pipe"});
  return out;
}

test("qwen3 synth model: native == wasm ids (greedy, sampled, reference), .gguf and .knot", (t) => {
  const gguf = synthQwen3(t, "gguf");
  if (!gguf) return;
  const knot = synthQwen3(t, "knot");
  const cases = [
    ["-n", "24", "--temp", "0", "--ids"],
    ["-n", "24", "--temp", "0.9", "--seed", "11", "--top-k", "40", "--top-p", "0.95", "--ids"],
    ["-n", "16", "--temp", "0", "--reference", "--ids"],
  ];
  for (const model of [gguf, knot])
    for (const c of cases) {
      const args = ["generate", model, "-p", "once upon a time", ...c];
      const nat = spawnSync(KNOT_BIN, args, {encoding: "utf8", timeout: 60_000});
      const js = spawnSync(process.execPath, [CLI, ...args], {encoding: "utf8", timeout: 60_000});
      assert.equal(nat.status, 0, nat.stderr);
      assert.equal(js.status, 0, js.stderr);
      const ids = JSON.parse(nat.stdout);
      assert.equal(ids.length, Number(c[1]), nat.stdout);
      assert.ok(new Set(ids).size >= 3, `degenerate continuation ${nat.stdout}`);
      assert.equal(js.stdout, nat.stdout, `${args.join(" ")}\nnative: ${nat.stdout}\nwasm:   ${js.stdout}`);
    }
});

test("model info carries the architecture table: qwen3 attn phase has the q/k norms, no biases", async (t) => {
  const knot = synthQwen3(t, "knot");
  if (!knot) return;
  const parts = await openParts(kw.bytesSource(new Uint8Array(readFileSync(knot)), "q3.knot"));
  try {
    assert.equal(parts.arch.name, "qwen3");
    assert.equal(parts.arch.rope_style, "neox");
    assert.deepEqual(parts.layerTensors(2, "attn"),
      ["blk_2_attn_norm_weight", "blk_2_attn_q_weight", "blk_2_attn_k_weight", "blk_2_attn_v_weight",
       "blk_2_attn_q_norm_weight", "blk_2_attn_k_norm_weight", "blk_2_attn_output_weight"]);
    assert.deepEqual(parts.layerTensors(0, "ffn_gate"), ["blk_0_ffn_norm_weight", "blk_0_ffn_gate_weight"]);
    assert.throws(() => parts.layerTensors(0, "nope"), /unknown phase nope/);
  } finally { parts.close(); }
});

test("type table comes from the core: sizes, ids, and rowBytes agree with the ggml layouts", async () => {
  await kw.init();
  // ggml's block layouts (docs/knot-format.md), stated here only to check the exported table
  const ggml = {F32: [0, 1, 4], F16: [1, 1, 2], Q4_0: [2, 32, 18], Q8_0: [8, 32, 34], Q4_K: [12, 256, 144],
                Q5_K: [13, 256, 176], Q6_K: [14, 256, 210], BF16: [30, 1, 2]};
  for (const [name, [id, be, bb]] of Object.entries(ggml)) {
    const tt = kw.TYPES[name];
    assert.ok(tt, name);
    assert.deepEqual([tt.id, tt.block_elems, tt.block_bytes, tt.storage], [id, be, bb, true], name);
    assert.equal(kw.DTYPES[name], id);
    assert.equal(kw.rowBytes(name, 4 * be), 4 * bb);
  }
  assert.equal(kw.TYPES.Q8_K.storage, false);
  assert.equal(kw.DTYPES.Q8_K, undefined);
  assert.equal(kw.TYPES.Q4_K.k_quant, true);
  assert.equal(kw.TYPES.Q4_K.vec_dot_type, "Q8_K");
  assert.throws(() => kw.rowBytes("Q4_K", 100), /not a multiple of 256/);
});
