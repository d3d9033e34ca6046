// The per-phase (mesh) API in wasm: layer stations, attention-head and FFN-column slices,
// vocab shards for embeddings and the lm_head, fluid load/evict per phase — merged by
// summing partials, checked against the whole-model forward and the reference tokens.
import {test} from "node:test";
import assert from "node:assert/strict";
import {readFileSync} from "node:fs";

import * as kw from "../../bindings/knotwork.mjs";
import {openParts, topkLse} from "../../bindings/mesh.mjs";
import {sharedModel, referenceOutputs} from "./helpers.mjs";

const NAME = "stories260K-pad256-llama-q4_k_m.gguf";
let knot = null;

async function setup(t) {
  const p = sharedModel(t, NAME);
  if (!p) return null;
  if (!knot) {
    const m = await kw.openModel(p);
    knot = m.toKnot();
    m.close();
  }
  return p;
}

const add = (a, b) => { for (let i = 0; i < a.length; i++) a[i] += b[i]; return a; };
const argmax = (a) => a.reduce((bi, v, i) => (v > a[bi] ? i : bi), 0);

// A mesh: station A = layers [0,3) all heads; layers [3,5) split over two head-slice
// stations; FFN of layers >= 3 in two column slices; two vocab shards, each its own
// model handle holding only its rows of token_embd and output (as separate isolates would).
async function buildMesh(parts, cfg, {fluid = false, nCtx = 64, name = "m.knot", splitFfn = true, splitHeads = true} = {}) {
  const {n_layer: L, n_head: H, n_ff: F, n_vocab: V} = cfg;
  const split = 3;
  const A = parts.station({layers: [0, split], nCtx});
  const B = splitHeads
    ? [parts.station({layers: [split, L], heads: [0, H / 2], nCtx}), parts.station({layers: [split, L], heads: [H / 2, H], nCtx})]
    : [parts.station({layers: [split, L], nCtx})];
  const shards = [];
  for (const [v0, v1] of [[0, V / 2], [V / 2, V]]) {
    const sp = await openParts(kw.bytesSource(knot, `${name}#${v0}-${v1}`));
    await sp.loadRows("token_embd_weight", v0, v1);
    if (sp.has("output_weight")) await sp.loadRows("output_weight", v0, v1);
    shards.push({parts: sp, v0, v1});
  }
  await parts.load(["output_norm_weight"]);
  const all = [];
  for (let l = 0; l < L; l++) for (const ph of ["attn", "ffn_gate", "ffn_up", "ffn_down"]) all.push(...parts.layerTensors(l, ph));
  if (!fluid) await parts.load([...new Set(all)]);
  const phase = async (l, ph, fn) => {
    const names = parts.layerTensors(l, ph);
    if (fluid) await parts.load(names);
    const r = fn();
    if (fluid) parts.evict(names);
    return r;
  };
  let peakHeap = 0;
  const note = async () => { peakHeap = Math.max(peakHeap, (await kw.memoryStats()).heap); };

  async function forward(ids, pos0) {
    const E = cfg.n_embd, n = ids.length;
    const x = new Float32Array(n * E);
    for (const s of shards) add(x, s.parts.embed(ids, s.v0, s.v1, E));
    for (let l = 0; l < L; l++) {
      const group = l < split ? [A] : B;
      add(x, await phase(l, "attn", () => group.reduce((acc, st) => add(acc, st.attn(l, pos0, x, n)), new Float32Array(n * E))));
      await note();
      const cols = l < split || !splitFfn ? [[0, F]] : [[0, F / 2], [F / 2, F]];
      const d = new Float32Array(n * E);
      const hs = [];
      await phase(l, "ffn_gate", () => { for (const c of cols) hs.push(group[0].ffnGate(l, x, n, c)); });
      await phase(l, "ffn_up", () => { cols.forEach((c, k) => { hs[k] = group[0].ffnUp(l, x, n, hs[k], c); }); });
      await note();
      await phase(l, "ffn_down", () => { cols.forEach((c, k) => add(d, group[0].ffnDown(l, hs[k], n, c, E))); });
      await note();
      add(x, d);
    }
    const xn = parts.outputNorm(x.subarray((n - 1) * E), 1);
    const logits = new Float32Array(V);
    for (const s of shards) logits.set(s.parts.lmHead(xn, 1, s.v0, s.v1), s.v0);
    return logits;
  }
  async function close() {
    for (const st of [A, ...B]) st.free();
    for (const s of shards) await s.parts.close();
  }
  return {forward, stations: [A, ...B], peakHeap: () => peakHeap, close};
}

test("mesh forward (stations, head/FFN slices, vocab shards) matches the whole-model forward", async (t) => {
  const p = await setup(t);
  if (!p) return;
  const whole = await kw.openModel(p);
  const parts = await openParts(kw.bytesSource(knot, "m.knot"));
  const cfg = await parts.config();
  const ref = referenceOutputs().models[NAME];
  const prompt = ref.promptTokenIds;
  const sess = whole.session({nCtx: 64});
  const want = sess.eval(prompt).slice();
  // Cuts on block boundaries (layer stations, vocab rows) reproduce the whole forward.
  const exact = await buildMesh(parts, cfg, {splitFfn: false, splitHeads: false});
  const e = await exact.forward(prompt, 0);
  let exactDiff = 0;
  for (let i = 0; i < want.length; i++) exactDiff = Math.max(exactDiff, Math.abs(e[i] - want[i]));
  if (process.env.KW_DEBUG) console.error({exactDiff});
  assert.ok(exactDiff < 1e-3, `max |mesh - whole| = ${exactDiff} with block-aligned cuts`);
  await exact.close();
  // Head slices (attn_output columns 0..127 | 128..255) and FFN column slices cut inside a
  // Q4_K/Q6_K block of 256, so they take the dequantized-f32 path (forward.h): the
  // difference is activation-quantization noise; compare loosely, then by tokens.
  const mesh = await buildMesh(parts, cfg);
  const got = await mesh.forward(prompt, 0);
  // Calibrate "noise": the whole model's fast (quantized activations) vs reference (f32
  // activations) logits. The sliced mesh mixes both kinds of math, so it must sit within that.
  const rs = whole.session({nCtx: 64, reference: true});
  const wantRef = rs.eval(prompt).slice();
  rs.free();
  let noise = 0, maxDiff = 0;
  for (let i = 0; i < want.length; i++) {
    noise = Math.max(noise, Math.abs(wantRef[i] - want[i]));
    maxDiff = Math.max(maxDiff, Math.abs(got[i] - want[i]));
  }
  if (process.env.KW_DEBUG) console.error({maxDiff, noise});
  assert.ok(noise > 0 && maxDiff <= 1.5 * noise, `max |mesh - whole| = ${maxDiff}, fast-vs-reference noise ${noise}`);
  assert.equal(argmax(got), argmax(want));

  // greedy decode through the mesh, one position at a time: the reference tokens
  const ids = [argmax(got)];
  for (let k = 1; k < 16; k++) ids.push(argmax(await mesh.forward([ids[k - 1]], prompt.length + k - 1)));
  assert.deepEqual(ids, ref.exactFloat64.tokenIds.slice(0, 16));
  const info = mesh.stations[1].info();
  assert.equal(info.n_pos, prompt.length + 15);

  // exact sampling info from the shards: merged top-k equals the full top-k
  const V = cfg.n_vocab;
  const parts2 = [await topkLse(got.subarray(0, V / 2), 0, V / 2, 5), await topkLse(got.subarray(V / 2), V / 2, V, 5)];
  const full = await topkLse(got, 0, V, 5);
  const merged = parts2.flatMap((s) => s.ids.map((id, i) => [s.logits[i], id])).sort((a, b) => b[0] - a[0] || a[1] - b[1]).slice(0, 5);
  assert.deepEqual(merged.map((m) => m[1]), full.ids);
  const lse = Math.log(parts2.reduce((a, s) => a + Math.exp(s.lse - full.lse), 0)) + full.lse;
  assert.ok(Math.abs(lse - full.lse) < 1e-4, `${lse} vs ${full.lse}`);

  await mesh.close();
  sess.free();
  whole.close();
  await parts.close();
});

test("fluid mode (load, run, evict per phase) gives the same logits with less memory resident", async (t) => {
  const p = await setup(t);
  if (!p) return;
  const a = await openParts(kw.bytesSource(knot, "a.knot"));
  const cfg = await a.config();
  const prompt = referenceOutputs().models[NAME].promptTokenIds;
  const resident = await buildMesh(a, cfg);
  const la = await resident.forward(prompt, 0);
  const residentHeap = resident.peakHeap();
  await resident.close();
  await a.close();

  const b = await openParts(kw.bytesSource(knot, "b.knot"));
  const fluid = await buildMesh(b, cfg, {fluid: true});
  const lb = await fluid.forward(prompt, 0);
  assert.deepEqual(Array.from(lb), Array.from(la));
  if (process.env.KW_DEBUG) console.error({fluid: fluid.peakHeap(), residentHeap});
  assert.ok(fluid.peakHeap() < residentHeap - 500_000, `fluid peak heap ${fluid.peakHeap()} vs resident ${residentHeap}`);
  await fluid.close();
  await b.close();
});

test("a phase without its tensors names tensor, layer and phase; bad slices are refused", async (t) => {
  const p = await setup(t);
  if (!p) return;
  const parts = await openParts(kw.bytesSource(knot, "m.knot"));
  const st = parts.station({layers: [0, 5], nCtx: 16});
  const x = new Float32Array(256);
  assert.throws(() => st.attn(2, 0, x, 1), /missing tensor blk_2_attn_norm_weight \(layer 2, phase attn\)/);
  await parts.load(parts.layerTensors(2, "ffn_gate"));
  assert.throws(() => st.ffnUp(2, x, 1, new Float32Array(256), [0, 256]), /missing tensor blk_2_ffn_up_weight \(layer 2, phase ffn_up\)/);
  assert.throws(() => st.attn(7, 0, x, 1), /layer/);
  assert.throws(() => parts.station({layers: [0, 5], heads: [1, 5], nCtx: 16}), /GQA group size 2/);
  assert.throws(() => parts.station({layers: [0, 5], nCtx: 1 << 28}), /KV cache/);
  assert.throws(() => parts.embed([600], 0, 256, 256), /outside the vocabulary|not loaded|missing/);
  st.free();
  await parts.close();
});

test("vocab row ranges are verified by their .knot chunk hashes", async (t) => {
  const p = await setup(t);
  if (!p) return;
  const h = await kw.parseKnotHeader(kw.bytesSource(knot, "m.knot"));
  const te = h.tensors.find((x) => x.name === "token_embd_weight");
  assert.ok(te.chunk_rows > 0 && te.chunk_rows <= 256, `chunk_rows ${te.chunk_rows}`);
  const rowBytes = te.size / te.shape[1];
  const bad = knot.slice();
  bad[te.offset + 300 * rowBytes + 5] ^= 1;  // a byte of row 300
  const parts = await openParts(kw.bytesSource(bad, "bad.knot"));
  await parts.loadRows("token_embd_weight", 0, 256);  // chunks before row 300 are fine
  const e = parts.embed([1, 403], 0, 256, 256);
  assert.ok(e.subarray(0, 256).some((v) => v !== 0) && e.subarray(256).every((v) => v === 0));
  await assert.rejects(parts.loadRows("token_embd_weight", 280, 320), /bad\.knot.*token_embd_weight rows \[\d+, \d+\)/);
  await parts.close();
});
