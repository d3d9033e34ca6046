// Streamed slice loads (bindings/slices.mjs, wasm/abi_slice.cpp): a station whose q/k/v
// and gate/up rows and attn_output/ffn_down columns were streamed in as slices computes
// exactly what the same slice computes from whole tensors; vocab rows streamed in (.knot
// chunk hashes, GGUF) embed and score exactly as kw_model_rows_load's; a corrupt byte,
// a cut inside a quant block and an out-of-range cut are refused by name, and a refused
// load leaves the model usable.
import {test} from "node:test";
import assert from "node:assert/strict";
import {execFileSync} from "node:child_process";
import {readFileSync} from "node:fs";
import {join} from "node:path";

import * as kw from "../../bindings/knotwork.mjs";
import {openParts} from "../../bindings/mesh.mjs";
import {loadSlice} from "../../bindings/slices.mjs";
import {tmpDir, KNOT_BIN} from "./helpers.mjs";

// qwen2, 16 heads / 4 KV heads, head_dim 32, FFN 512, Q4_K_M (Q6_K attn_v / ffn_down in
// layers 2-3): 8-head cuts are 256 columns, whole K-quant blocks.
const QWEN = ["--arch", "qwen2", "--hidden", "512", "--layers", "4", "--heads", "16", "--kv-heads", "4",
              "--ffn", "512", "--vocab", "300", "--type", "Q4_K_M", "--seed", "7"];
const dir = tmpDir("knotwork-slices-");
const synth = (ext) => {
  const p = join(dir, `qwen${ext}`);
  execFileSync(KNOT_BIN, ["synth", ...QWEN, p], {stdio: "pipe"});
  return new Uint8Array(readFileSync(p));
};
const knotBytes = synth(".knot"), ggufBytes = synth(".gguf");

function inputRows(T, E) {
  const x = new Float32Array(T * E);
  for (let t = 0; t < T; t++) for (let i = 0; i < E; i++) x[t * E + i] = Math.sin(0.37 * i + 1.3 * t) + 0.5 * Math.cos(0.11 * i * (t + 1));
  return x;
}
function assertSame(a, b, what) {
  assert.equal(a.length, b.length, what);
  let d = 0, m = 0;
  for (let i = 0; i < a.length; i++) {
    assert.ok(Number.isFinite(a[i]), `${what}: non-finite at ${i}`);
    d = Math.max(d, Math.abs(a[i] - b[i]));
    m = Math.max(m, Math.abs(b[i]));
  }
  assert.ok(m > 0, `${what}: all zero`);
  assert.ok(d <= 1e-6 * m, `${what}: streamed slice differs from the whole-tensor slice by ${d} (max ${m})`);
}

// Layer 3, heads [8,16), FFN columns [256,512): one prefill chunk and a decode step.
async function runSlice(parts, layer, heads, cols) {
  const cfg = await parts.config();
  const E = cfg.n_embd, T = 5;
  const st = parts.station({layers: [layer, layer + 1], heads, nCtx: 16});
  const outs = [];
  for (const [pos, n] of [[0, 4], [4, 1]]) {
    const x = inputRows(T, E).subarray(pos * E, (pos + n) * E);
    outs.push(st.attn(layer, pos, x, n));
    let h = st.ffnGate(layer, x, n, cols);
    h = st.ffnUp(layer, x, n, h, cols);
    outs.push(h, st.ffnDown(layer, h, n, cols, E));
  }
  st.free();
  return outs;
}

for (const [fmt, bytes] of [["knot", knotBytes], ["gguf", ggufBytes]]) {
  test(`${fmt}: a station on streamed slices equals the slice computed from whole tensors`, async () => {
    const whole = await openParts(kw.bytesSource(bytes, `qwen.${fmt}`));
    const sliced = await openParts(kw.bytesSource(bytes, `qwen.${fmt}`));
    const cfg = await whole.config();
    const D = cfg.head_dim, G = cfg.n_head / cfg.n_head_kv, L = 3, heads = [8, 16], cols = [256, 512];
    for (const p of ["attn", "ffn_gate", "ffn_up", "ffn_down"]) await whole.load(whole.layerTensors(L, p));
    const cut = {attn_q_weight: {rows: [heads[0] * D, heads[1] * D]}, attn_k_weight: {rows: [heads[0] / G * D, heads[1] / G * D]},
                 attn_v_weight: {rows: [heads[0] / G * D, heads[1] / G * D]}, attn_output_weight: {cols: [heads[0] * D, heads[1] * D]},
                 ffn_gate_weight: {rows: cols}, ffn_up_weight: {rows: cols}, ffn_down_weight: {cols}};
    for (const [suffix, c] of Object.entries(cut)) await loadSlice(sliced, `blk_${L}_${suffix}`, c, {chunkBytes: 1000});
    await sliced.load(sliced.layerTensors(L, "attn").filter((n) => !sliced.loaded.has(n)));  // norms, biases
    await sliced.load(["blk_3_ffn_norm_weight"]);
    const a = await runSlice(whole, L, heads, cols), b = await runSlice(sliced, L, heads, cols);
    a.forEach((v, i) => assertSame(b[i], v, `${fmt} output ${i}`));
    whole.close();
    sliced.close();
  });

  test(`${fmt}: vocab rows streamed in embed and score like kw_model_rows_load`, async () => {
    const a = await openParts(kw.bytesSource(bytes, `qwen.${fmt}`));
    const b = await openParts(kw.bytesSource(bytes, `qwen.${fmt}`));
    const cfg = await a.config();
    const [v0, v1] = [97, 300];  // inside the first 256-row hash chunk, to the end
    for (const n of ["token_embd_weight", "output_weight"]) {
      await a.loadRows(n, v0, v1);
      await loadSlice(b, n, {rows: [v0, v1]}, {chunkBytes: 4096 + 17});
    }
    await a.load(["output_norm_weight"]);
    await b.load(["output_norm_weight"]);
    const ids = [0, 96, 97, 150, 299, 42];
    assertSame(b.embed(ids, v0, v1, cfg.n_embd), a.embed(ids, v0, v1, cfg.n_embd), `${fmt} embed`);
    const xn = a.outputNorm(inputRows(1, cfg.n_embd), 1);
    assertSame(b.lmHead(xn, 1, v0, v1), a.lmHead(xn, 1, v0, v1), `${fmt} lm_head`);
    a.close();
    b.close();
  });
}

test("corrupt bytes, cuts inside a block and out-of-range cuts are refused; the model stays usable", async () => {
  const probe = await openParts(kw.bytesSource(knotBytes, "qwen.knot"));
  const up = probe.entries.get("blk_1_ffn_up_weight"), emb = probe.entries.get("token_embd_weight");
  probe.close();
  const bad = knotBytes.slice();
  bad[up.offset + 1000] ^= 0x55;
  bad[emb.offset + 5] ^= 0x55;  // first 256-row hash chunk of token_embd
  const parts = await openParts(kw.bytesSource(bad, "bad.knot"));
  await assert.rejects(loadSlice(parts, "blk_1_ffn_up_weight", {rows: [0, 16]}), /blk_1_ffn_up_weight .*content hash/);
  await assert.rejects(loadSlice(parts, "token_embd_weight", {rows: [10, 20]}), /token_embd_weight: rows chunk 0 content hash/);
  await loadSlice(parts, "token_embd_weight", {rows: [256, 300]});  // the second chunk is intact
  await assert.rejects(loadSlice(parts, "blk_1_ffn_down_weight", {cols: [0, 128]}), /columns \[0, 128\) are not whole Q4_K blocks of 256/);
  await assert.rejects(loadSlice(parts, "blk_1_ffn_gate_weight", {rows: [0, 513]}), /rows \[0, 513\) outside \[0, 512\)/);
  await assert.rejects(loadSlice(parts, "blk_1_attn_norm_weight", {rows: [0, 1]}), /not a matrix/);
  await loadSlice(parts, "blk_1_ffn_gate_weight", {rows: [0, 256]});
  assert.ok(parts.loaded.has("blk_1_ffn_gate_weight"));
  parts.close();
});
