// The per-phase (mesh) API in wasm: layer stations, attention-head and FFN-column slices,
// vocab shards for embeddings and the lm_head, fluid load/evict per phase — merged by
// summing partials, checked against the whole-model forward and the reference tokens.
// The shared pad256 model's padded heads are all zero, so slice sums there prove little;
// the "synthetic model" tests below use `knot synth` models in which every head, FFN
// column and vocab row is random (KW_DEBUG=1 prints the observed slice errors).
import {test} from "node:test";
import assert from "node:assert/strict";
import {existsSync, readFileSync} from "node:fs";
import {execFileSync} from "node:child_process";
import {join} from "node:path";

import * as kw from "../../bindings/knotwork.mjs";
import {openParts, topkLse, mergeTopK, Generator} from "../../bindings/mesh.mjs";
import {openLocalMesh, checkPlan, meshGenerate} from "./local-mesh.mjs";
import {sharedModel, referenceOutputs, tmpDir, KNOT_BIN} from "./helpers.mjs";

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

// open(role) for openLocalMesh: the stations share one ModelParts, each vocab shard gets
// its own (holding only its rows, as separate isolates would).
const openFrom = (bytes, name) => (role) => openParts(kw.bytesSource(bytes, role === "stations" ? name : `${name}#${role}`));

// A mesh: station A = layers [0,3) all heads; layers [3,5) split over two head-slice
// stations; FFN of layers >= 3 in two column slices; two vocab shards.
function halves(cfg, {splitFfn = true, splitHeads = true} = {}) {
  const {n_layer: L, n_head: H, n_ff: F, n_vocab: V} = cfg;
  return {layers: [0, 3, L], heads: [[0, H], splitHeads ? [0, H / 2, H] : [0, H]],
          ffn: [[0, F], splitFfn ? [0, F / 2, F] : [0, F]], vocab: [0, V / 2, V]};
}
const logitsOf = async (mesh, ids, pos0) => (await mesh.forward(ids, pos0, {logits: true})).logits;

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
  const exact = await openLocalMesh(openFrom(knot, "m.knot"), halves(cfg, {splitFfn: false, splitHeads: false}));
  const e = await logitsOf(exact, prompt, 0);
  let exactDiff = 0;
  for (let i = 0; i < want.length; i++) exactDiff = Math.max(exactDiff, Math.abs(e[i] - want[i]));
  if (process.env.KW_DEBUG) console.error({exactDiff});
  assert.ok(exactDiff < 1e-3, `max |mesh - whole| = ${exactDiff} with block-aligned cuts`);
  await exact.close();
  // Head slices (attn_output columns 0..127 | 128..255) and FFN column slices cut inside a
  // Q4_K/Q6_K block of 256, so they take the dequantized-f32 path (forward.h): the
  // difference is activation-quantization noise; compare loosely, then by tokens.
  const mesh = await openLocalMesh(openFrom(knot, "m.knot"), halves(cfg));
  const got = await logitsOf(mesh, prompt, 0);
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
  for (let k = 1; k < 16; k++) ids.push(argmax(await logitsOf(mesh, [ids[k - 1]], prompt.length + k - 1)));
  assert.deepEqual(ids, ref.exactFloat64.tokenIds.slice(0, 16));
  const info = mesh.stations[1].heads[0].info();
  assert.equal(info.n_pos, prompt.length + 15);

  // exact sampling info from the shards: merged top-k equals the full top-k
  const V = cfg.n_vocab;
  const parts2 = [await topkLse(got.subarray(0, V / 2), 0, V / 2, 5), await topkLse(got.subarray(V / 2), V / 2, V, 5)];
  const full = await topkLse(got, 0, V, 5);
  const merged = await mergeTopK(parts2, 5);
  assert.deepEqual(merged.ids, full.ids);
  assert.ok(Math.abs(merged.lse - full.lse) < 1e-4, `${merged.lse} vs ${full.lse}`);

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
  await a.close();
  const prompt = referenceOutputs().models[NAME].promptTokenIds;
  const peakDuring = async (fluid, name) => {
    const mesh = await openLocalMesh(openFrom(knot, name), halves(cfg), {fluid});
    await kw.resetPeakMemory();
    const logits = await logitsOf(mesh, prompt, 0);
    const peak = (await kw.memoryStats()).peakHeap;
    await mesh.close();
    return {logits, peak};
  };
  const resident = await peakDuring(false, "a.knot");
  const fluid = await peakDuring(true, "b.knot");
  assert.deepEqual(Array.from(fluid.logits), Array.from(resident.logits));
  if (process.env.KW_DEBUG) console.error({fluid: fluid.peak, resident: resident.peak});
  assert.ok(fluid.peak < resident.peak - 500_000, `fluid peak heap ${fluid.peak} vs resident ${resident.peak}`);
});

test("meshGenerate: the coordinator loop (shards' merged top-k + core Generator) == model.generate()", async (t) => {
  const p = await setup(t);
  if (!p) return;
  const whole = await kw.openModel(p);
  const prompt = whole.tokenize("Once upon a time");
  const opts = {maxTokens: 24, temperature: 0.8, seed: 3};  // top-k 40: covered by the shards' k
  const want = await whole.complete(prompt, opts);
  const parts = await openParts(kw.bytesSource(knot, "g.knot"));
  const cfg = await parts.config();
  await parts.close();
  const plan = halves(cfg, {splitFfn: false, splitHeads: false});
  const mesh = await openLocalMesh(openFrom(knot, "g.knot"), plan);
  const gen = await Generator.open(mesh.parts, {...opts, nCtx: 64});  // tokenizer from the .knot blob
  const ids = [];
  let text = "";
  for await (const s of meshGenerate(mesh, gen, prompt, {k: 40, chunk: 3})) {
    ids.push(s.id);
    text += s.text;
  }
  assert.deepEqual(ids, want.ids);
  assert.equal(text, want.text);
  assert.equal(gen.reason, want.reason);
  // a second sequence on the same mesh after truncating its KV
  mesh.truncate(0);
  const again = [];
  for await (const s of meshGenerate(mesh, gen, prompt, {k: 40})) again.push(s.id);
  assert.deepEqual(again, want.ids);
  gen.free();
  await mesh.close();
  whole.close();
  assert.throws(() => checkPlan(cfg, {...plan, heads: [[0, 32], [0, 3, 32]]}), /station 1 heads cut 3 .*multiple of 2/);
  assert.throws(() => checkPlan(cfg, {...plan, vocab: [0, 100, 600]}), /vocab must run from 0 to 512/);
  assert.throws(() => checkPlan(cfg, {...plan, ffn: [[0, 256]]}), /2 stations need 2 head and 2 FFN/);
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
  assert.throws(() => st.attn(7, 0, x, 1), /attn: layer 7 is outside this station's layers \[0,5\)/);
  assert.throws(() => parts.station({layers: [0, 5], heads: [1, 5], nCtx: 16}), /GQA group size 2/);
  assert.throws(() => parts.station({layers: [0, 5], nCtx: 1 << 28}), /KV cache/);
  assert.throws(() => parts.embed([600], 0, 256, 256), /missing tensor token_embd_weight \(phase embed\): not loaded/);
  st.free();
  await parts.close();
});

test("vocab row ranges are verified by their .knot chunk hashes", async (t) => {
  const p = await setup(t);
  if (!p) return;
  const h = await kw.parseKnotHeader(kw.bytesSource(knot, "m.knot"));
  const te = h.tensors.find((x) => x.name === "token_embd_weight");
  assert.equal(te.chunk_rows, 256);
  const rowBytes = te.size / te.shape[1];
  const bad = knot.slice();
  bad[te.offset + 300 * rowBytes + 5] ^= 1;  // a byte of row 300
  const parts = await openParts(kw.bytesSource(bad, "bad.knot"));
  await parts.loadRows("token_embd_weight", 0, 256);  // chunks before row 300 are fine
  const e = parts.embed([1, 403], 0, 256, 256);
  const good = await openParts(kw.bytesSource(knot, "good.knot"));
  await good.loadRows("token_embd_weight", 0, 256);
  assert.deepEqual(Array.from(e), Array.from(good.embed([1, 403], 0, 256, 256)), "id 1: the file's row; id 403: outside the slice, zero");
  assert.ok(e.subarray(0, 256).some((v) => v !== 0) && e.subarray(256).every((v) => v === 0));
  await good.close();
  await assert.rejects(parts.loadRows("token_embd_weight", 280, 320), /bad\.knot.*token_embd_weight rows \[256, 512\)/);
  await parts.close();
});

// ---- synthetic models: every head, FFN column and vocab row non-zero ----------------------
// (The shared pad256 models have all-zero padded heads, where a head-slice check mostly
// sums zeros.) Generated by the native CLI (`knot synth`, KNOT_BIN) into a temp dir.
// Tolerances are relative to max |unsliced|: EXACT for aligned cuts and the reference
// kernels (same products, only the float summation order differs); unaligned cuts in fast
// mode multiply f32 activations where the unsliced call quantizes them, so their bound is
// 1.5 x the unsliced call's own fast-vs-reference difference (capped at 5e-2).
const EXACT = 2e-5;
const synthCache = new Map();
function synthKnot(t, name, args) {
  if (synthCache.has(name)) return synthCache.get(name);
  if (!existsSync(KNOT_BIN)) {
    if (process.env.CI) throw new Error(`${KNOT_BIN} missing (CI is set: build the native CLI first, or set KNOT_BIN)`);
    t.skip(`${KNOT_BIN} missing: build the native CLI or set KNOT_BIN`);
    return null;
  }
  const out = join(tmpDir("knotwork-mesh-"), `${name}.knot`);
  execFileSync(KNOT_BIN, ["synth", ...args, out], {stdio: "pipe"});
  const bytes = new Uint8Array(readFileSync(out));
  synthCache.set(name, bytes);
  return bytes;
}
// qwen2 (biases, Neox RoPE), 16 heads / 4 KV heads (group 4), head_dim 32, FFN 512,
// Q4_K_M (Q4_K; Q6_K attn_v/ffn_down of layers 2-3 and output): 8-head cuts = 256
// columns (on K-quant blocks), 4-head cuts = 128 columns (inside a block).
const QWEN = ["--arch", "qwen2", "--hidden", "512", "--layers", "4", "--heads", "16", "--kv-heads", "4",
              "--ffn", "512", "--vocab", "300", "--type", "Q4_K_M", "--seed", "7"];
// llama, tied embeddings, token_embd padded to 320 rows for a 300-token vocab, Q8_0.
const TIED = ["--arch", "llama", "--hidden", "256", "--layers", "2", "--heads", "8", "--kv-heads", "2",
              "--ffn", "512", "--vocab", "300", "--vocab-tensor", "320", "--tied", "--type", "Q8_0", "--seed", "7"];
// qwen3: per-head q/k RMSNorm before RoPE, no biases, head_dim 128 != hidden 256 / 4 heads;
// 2 KV heads (group 2): a 2-head cut = 256 columns of q (on K-quant blocks).
const QWEN3 = ["--arch", "qwen3", "--hidden", "256", "--layers", "4", "--heads", "4", "--kv-heads", "2",
               "--head-dim", "128", "--ffn", "512", "--vocab", "300", "--type", "Q4_K_M", "--seed", "5"];

const l2 = (a) => Math.sqrt(a.reduce((s, v) => s + v * v, 0));
const maxAbs = (a) => a.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
function maxDiff(a, b, what) {
  assert.equal(a.length, b.length, what);
  let d = 0;
  for (let i = 0; i < a.length; i++) {
    assert.ok(Number.isFinite(a[i]) && Number.isFinite(b[i]), `${what}: non-finite element ${i}`);
    d = Math.max(d, Math.abs(a[i] - b[i]));
  }
  return d;
}
// x: [T * E] deterministic, O(1) rows
function inputRows(T, E) {
  const x = new Float32Array(T * E);
  for (let t = 0; t < T; t++) for (let i = 0; i < E; i++) x[t * E + i] = Math.sin(0.37 * i + 1.3 * t) + 0.5 * Math.cos(0.11 * i * (t + 1));
  return x;
}
const figures = [];
process.on("exit", () => { if (process.env.KW_DEBUG) console.error(figures.join("\n")); });

// Sum of the slices' partials vs the unsliced output; every partial must carry its share
// (||part|| >= 0.1 * sqrt(width / total) * ||full||), so a zero slice cannot pass.
function checkSum(full, parts, cuts, tol, what, fullOther) {
  const total = cuts.at(-1) - cuts[0], nf = l2(full), mf = maxAbs(full);
  assert.ok(nf > 0, `${what}: unsliced output is zero`);
  const sum = new Float32Array(full.length);
  parts.forEach((p, s) => {
    add(sum, p);
    const share = l2(p) / (nf * Math.sqrt((cuts[s + 1] - cuts[s]) / total));
    assert.ok(share >= 0.1, `${what}: slice [${cuts[s]},${cuts[s + 1]}) partial norm share ${share}`);
  });
  if (tol === "calibrated") {
    const noise = maxDiff(fullOther, full, what) / mf;
    assert.ok(noise > 0, `${what}: fast and reference agree exactly, calibration is void`);
    tol = Math.min(5e-2, Math.max(EXACT, 1.5 * noise));
    figures.push(`${what}: unsliced fast-vs-reference ${noise.toExponential(2)}`);
  }
  const rel = maxDiff(sum, full, what) / mf;
  figures.push(`${what}: rel err ${rel.toExponential(2)} (bound ${tol.toExponential(2)})`);
  assert.ok(rel <= tol, `${what}: max |sum of slices - unsliced| / max |unsliced| = ${rel} > ${tol}`);
}

test("synthetic model: head slices (whole KV groups) sum to the unsliced attention; every slice non-trivial", async (t) => {
  const bytes = synthKnot(t, "qwen", QWEN);
  if (!bytes) return;
  const parts = await openParts(kw.bytesSource(bytes, "qwen.knot"));
  const cfg = await parts.config();
  const E = cfg.n_embd, H = cfg.n_head, T = 8;
  const x = inputRows(T, E);
  for (const layer of [0, 3]) await parts.load(parts.layerTensors(layer, "attn"));
  // prefill chunks 4 + 2, then two decode steps; each slice its own station (KV cache)
  const run = (layer, heads, reference) => {
    const st = parts.station({layers: [layer, layer + 1], heads, nCtx: 16, reference});
    const out = new Float32Array(T * E);
    let pos = 0;
    for (const n of [4, 2, 1, 1]) {
      out.set(st.attn(layer, pos, x.subarray(pos * E, (pos + n) * E), n), pos * E);
      pos += n;
    }
    assert.equal(st.info().n_pos, T);
    st.free();
    return out;
  };
  for (const layer of [0, 3]) {
    for (const [cuts, reference, tol] of [[[0, 8, 16], false, EXACT], [[0, 8, 16], true, EXACT],
                                          [[0, 4, 12, 16], true, EXACT], [[0, 4, 8, 12, 16], false, "calibrated"]]) {
      const full = run(layer, [0, H], reference);
      const ps = cuts.slice(1).map((h1, i) => run(layer, [cuts[i], h1], reference));
      const other = tol === "calibrated" ? run(layer, [0, H], !reference) : null;
      checkSum(full, ps, cuts, tol, `qwen layer ${layer} heads ${cuts} ${reference ? "reference" : "fast"}`, other);
    }
  }
  await parts.close();
});

test("synthetic model: FFN column slices sum to the unsliced FFN (separate and combined gate/up)", async (t) => {
  const bytes = synthKnot(t, "qwen", QWEN);
  if (!bytes) return;
  const parts = await openParts(kw.bytesSource(bytes, "qwen.knot"));
  const cfg = await parts.config();
  const E = cfg.n_embd, F = cfg.n_ff;
  for (const layer of [1, 3]) for (const ph of ["ffn_gate", "ffn_up", "ffn_down"]) await parts.load(parts.layerTensors(layer, ph));
  for (const T of [5, 1]) {
    const x = inputRows(T, E);
    const run = (layer, [c0, c1], reference, combined) => {
      const st = parts.station({layers: [layer, layer + 1], nCtx: 4, reference});
      let h;
      if (combined) h = st.ffnGateUp(layer, x, T, [c0, c1]);
      else h = st.ffnUp(layer, x, T, st.ffnGate(layer, x, T, [c0, c1]), [c0, c1]);
      const out = st.ffnDown(layer, h, T, [c0, c1], E);
      st.free();
      return out;
    };
    for (const layer of [1, 3]) {
      for (const [cuts, reference, tol] of [[[0, 256, 512], false, EXACT], [[0, 100, 300, 512], true, EXACT],
                                            [[0, 100, 300, 512], false, "calibrated"]]) {
        const full = run(layer, [0, F], reference, false);
        const ps = cuts.slice(1).map((c1, i) => run(layer, [cuts[i], c1], reference, i % 2 === 1));
        const other = tol === "calibrated" ? run(layer, [0, F], !reference, false) : null;
        checkSum(full, ps, cuts, tol, `qwen layer ${layer} ffn ${cuts} ntok ${T} ${reference ? "reference" : "fast"}`, other);
      }
    }
  }
  await parts.close();
});

// A mesh over the wasm ABI (tests/wasm/local-mesh.mjs openLocalMesh): stations by layer range,
// each with head slices (own KV caches) and FFN column slices (separate gate/up phases and
// the combined call, alternately), and vocab shards that each hold only their rows of
// token_embd / output in their own model handle (as separate isolates would).
async function slicedMesh(bytes, name, plan, {reference = false, nCtx = 32} = {}) {
  return openLocalMesh(openFrom(bytes, name), plan, {reference, nCtx, ffnCombined: (s, i) => i % 2 === 1});
}

// Prefill 8 tokens (mesh: chunks 5 + 3) and 16 decode steps fed with the whole model's
// greedy token (or forced[i]); per step: merged top-k/lse == the assembled logits' own,
// logits within tol of the whole model's, same greedy token. Returns the greedy ids.
async function checkMesh(bytes, name, plan, {reference = false, tol = 1e-4, forced = null} = {}) {
  const whole = await kw.openModel(kw.bytesSource(bytes, `${name}-whole`));
  const sess = whole.session({nCtx: 32, reference});
  const mesh = await slicedMesh(bytes, name, plan, {reference});
  const V = mesh.cfg.n_vocab, prompt = [1, 17, 250, 99, 3, 288, 42, 160], P = prompt.length;
  let want = sess.eval(prompt).slice();
  assert.equal(want.length, V, "whole-model logits cover the tokenizer vocab only");
  const step = (ids, pos0) => mesh.forward(ids, pos0, {k: 8, logits: true});
  await step(prompt.slice(0, 5), 0);
  let o = await step(prompt.slice(5), 5);
  let worst = 0;
  const ids = [];
  for (let i = 0; i < 16; i++) {
    const at = `${name} step ${i}`;
    worst = Math.max(worst, maxDiff(o.logits, want, at) / maxAbs(want));
    const own = await topkLse(o.logits, 0, V, 8);
    assert.deepEqual(o.top.ids, own.ids, `${at}: merged top-k`);
    assert.ok(Math.abs(o.top.lse - own.lse) <= 1e-5 * Math.abs(own.lse) + 1e-5, `${at}: merged lse ${o.top.lse} vs ${own.lse}`);
    const g = argmax(want);
    ids.push(g);
    assert.equal(o.top.ids[0], g, `${at}: greedy token`);
    assert.ok(g < V);
    if (i < 15) {
      const next = forced ? forced[i] : g;
      want = sess.eval([next]).slice();
      o = await step([next], P + i);
    }
  }
  figures.push(`${name}: mesh vs whole model max rel logit err ${worst.toExponential(2)}`);
  assert.ok(worst <= tol, `${name}: max |mesh - whole| / max |logit| = ${worst} > ${tol}`);
  for (const st of mesh.stations) for (const h of st.heads) assert.equal(h.info().n_pos, P + 15);
  await mesh.close();
  sess.free();
  whole.close();
  return ids;
}

test("synthetic model: 2 stations x head/FFN slices x 3 vocab shards == the whole model for 16 greedy steps", async (t) => {
  const bytes = synthKnot(t, "qwen", QWEN);
  if (!bytes) return;
  // cuts on K-quant blocks: fast kernels, float summation order only
  const ids = await checkMesh(bytes, "qwen-aligned", {layers: [0, 2, 4], heads: [[0, 16], [0, 8, 16]],
                                                     ffn: [[0, 256, 512], [0, 256, 512]], vocab: [0, 97, 211, 300]});
  assert.ok(new Set(ids).size >= 3, `degenerate continuation ${ids}`);
  // cuts inside K-quant blocks, reference kernels (f32 activations everywhere)
  await checkMesh(bytes, "qwen-unaligned", {layers: [0, 1, 4], heads: [[0, 4, 16], [0, 4, 8, 12, 16]],
                                           ffn: [[0, 100, 512], [0, 300, 301, 512]], vocab: [0, 1, 150, 300]},
                  {reference: true});
});

test("qwen3 synthetic model (q/k norms, head_dim 128 != hidden/heads): wasm Stations by layer x head x FFN x vocab == the whole model", async (t) => {
  const bytes = synthKnot(t, "qwen3", QWEN3);
  if (!bytes) return;
  assert.equal((await kw.parseKnotHeader(kw.bytesSource(bytes, "q3.knot"))).config.head_dim, 128);
  const ids = await checkMesh(bytes, "qwen3-aligned", {layers: [0, 2, 4], heads: [[0, 4], [0, 2, 4]],
                                                      ffn: [[0, 256, 512], [0, 256, 512]], vocab: [0, 97, 211, 300]});
  assert.ok(new Set(ids).size >= 3, `degenerate continuation ${ids}`);
  await checkMesh(bytes, "qwen3-unaligned", {layers: [0, 1, 4], heads: [[0, 2, 4], [0, 2, 4]],
                                            ffn: [[0, 100, 512], [0, 300, 301, 512]], vocab: [0, 1, 150, 300]},
                  {reference: true, tol: 1e-5});
});

test("synthetic tied model with a padded vocab: shards meet end to end, own no padding row, match the whole model", async (t) => {
  const bytes = synthKnot(t, "tied", TIED);
  if (!bytes) return;
  const h = await kw.parseKnotHeader(kw.bytesSource(bytes, "tied.knot"));
  assert.equal(h.config.n_vocab, 300);
  assert.ok(!h.tensors.some((x) => x.name === "output_weight"), "tied: no output_weight");
  assert.equal(h.tensors.find((x) => x.name === "token_embd_weight").shape[1], 320);
  const V = 300, E = h.config.n_embd, cuts = [0, 97, 211, V];
  // every id owned by exactly one shard; its row equals the whole-tensor lookup
  const full = await openParts(kw.bytesSource(bytes, "tied-full.knot"));
  await full.load(["token_embd_weight"]);
  const all = Array.from({length: V}, (_, i) => i);
  const want = full.embed(all, 0, V, E);
  const sum = new Float32Array(V * E);
  const owners = new Array(V).fill(0);
  for (const [i, v1] of cuts.slice(1).entries()) {
    const v0 = cuts[i];
    const sp = await openParts(kw.bytesSource(bytes, `tied#${v0}-${v1}`));
    await sp.loadRows("token_embd_weight", v0, v1);
    const e = sp.embed(all, v0, v1, E);
    for (let id = 0; id < V; id++) {
      const n = l2(e.subarray(id * E, (id + 1) * E));
      if (n > 0) owners[id]++;
      assert.equal(n > 0, id >= v0 && id < v1, `shard [${v0},${v1}) id ${id}`);
    }
    add(sum, e);
    assert.throws(() => sp.embed([305], v0, v1, E), /id 305, outside the vocabulary \[0,300\)/);
    assert.throws(() => sp.lmHead(new Float32Array(E), 1, 300, 320), /vocab slice \[300,320\) reaches past the tokenizer vocabulary of 300 tokens/);
    await sp.close();
  }
  assert.ok(owners.every((c) => c === 1), "every id owned exactly once");
  assert.deepEqual(Array.from(sum), Array.from(want));
  // even with every tensor row resident, a logits slice reaching into the padding rows is
  // refused (they are not tokens: no shard may own or sample them)
  await full.load(["output_norm_weight"]);
  const xn = full.outputNorm(inputRows(1, E), 1);
  assert.equal(full.lmHead(xn, 1, 211, 300).length, 89);
  assert.throws(() => full.lmHead(xn, 1, 211, 320), /vocab slice \[211,320\).*300 tokens.*padding/);
  await full.close();
  // the mesh: a tied model's greedy run repeats its last token, so decode is fed a varied
  // fixed sequence; the greedy token is still compared at every step
  const forced = Array.from({length: 16}, (_, i) => (37 * i + 11) % V);
  const ids = await checkMesh(bytes, "tied", {layers: [0, 1, 2], heads: [[0, 4, 8], [0, 8]],
                                             ffn: [[0, 64, 512], [0, 96, 160, 512]], vocab: cuts}, {forced});
  assert.ok(ids.every((id) => id < V));
});

test("synthetic model: a head/FFN-slice station holding only its rows of q/k/v, gate/up == full tensors; wrong rows refused", async (t) => {
  const bytes = synthKnot(t, "qwen", QWEN);
  if (!bytes) return;
  const full = await openParts(kw.bytesSource(bytes, "qwen-full.knot"));
  const cut = await openParts(kw.bytesSource(bytes, "qwen-cut.knot"));
  const cfg = await full.config();
  const E = cfg.n_embd, hd = cfg.head_dim, g = cfg.n_head / cfg.n_head_kv, T = 3, L = 2;
  const [h0, h1, c0, c1] = [8, 16, 256, 512];
  for (const ph of ["attn", "ffn_gate", "ffn_up", "ffn_down"]) await full.load(full.layerTensors(L, ph));
  // the slice station's isolate: its rows of q/k/v and gate/up; norms, biases, attn_output, ffn_down whole
  await cut.load([`blk_${L}_attn_norm_weight`, `blk_${L}_ffn_norm_weight`, `blk_${L}_attn_output_weight`, `blk_${L}_ffn_down_weight`,
                  `blk_${L}_attn_q_bias`, `blk_${L}_attn_k_bias`, `blk_${L}_attn_v_bias`]);
  await cut.loadRows(`blk_${L}_attn_q_weight`, h0 * hd, h1 * hd);
  await cut.loadRows(`blk_${L}_attn_k_weight`, h0 / g * hd, h1 / g * hd);
  await cut.loadRows(`blk_${L}_attn_v_weight`, h0 / g * hd, h1 / g * hd);
  await cut.loadRows(`blk_${L}_ffn_gate_weight`, c0, c1);
  await cut.loadRows(`blk_${L}_ffn_up_weight`, c0, c1);
  const x = inputRows(T, E);
  const run = (parts) => {
    const st = parts.station({layers: [L, L + 1], heads: [h0, h1], nCtx: 8});
    const a = st.attn(L, 0, x, T);
    const f = st.ffnDown(L, st.ffnGateUp(L, x, T, [c0, c1]), T, [c0, c1], E);
    st.free();
    return [a, f];
  };
  const [af, ff] = run(full), [ac, fc] = run(cut);
  assert.ok(l2(af) > 0 && l2(ff) > 0);
  assert.deepEqual(Array.from(ac), Array.from(af));
  assert.deepEqual(Array.from(fc), Array.from(ff));
  // rows of another slice: same row count, wrong heads / columns -> an error, not a silent wrong partial
  const st = cut.station({layers: [L, L + 1], heads: [0, 8], nCtx: 8});
  assert.throws(() => st.attn(L, 0, x, T), /blk_2_attn_q_weight holds rows \[256,512\).*heads \[0,8\) need rows \[0,256\)/);
  assert.throws(() => st.ffnGate(L, x, T, [0, 256]), /blk_2_ffn_gate_weight holds rows \[256,512\).*columns \[0,256\) need rows \[0,256\)/);
  st.free();
  await full.close();
  await cut.close();
});
