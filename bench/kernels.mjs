#!/usr/bin/env node
// bench/kernels.mjs — wasm matvec throughput vs a plain-JS baseline, one JSON object.
//
//   node bench/kernels.mjs [ROWS] [COLS] [--min-ms MS]      (default 4096 x 4096, 1500 ms)
//
// wasm: knot::matvec with Kernel::Simd (simd128) and Kernel::Scalar, for Q4_K, Q6_K, Q8_0,
// in G weights/s (rows*cols / time of one matvec), and the batched prefill kernel (matmul
// over 64 tokens, G weight x token products/s). Timed here (the module has no clock).
// js: the kernel-less path a plain JS implementation would take — per row, dequantize the
// row into a Float32Array, then a scalar dot with the activations — one loop PER TYPE
// (Q4_K, Q6_K, Q8_0) on the SAME bytes as the wasm run, checked against the wasm Reference
// kernel (dequantize + f32 dot). Ratios compare only the same weight type.
// large: the same matvecs (wasm simd and JS) on >= 96 MiB of distinct rows, more than the
// last-level cache, beside the cache-resident ROWS x COLS figure (decode streams weights
// from memory). Its rows are the small matrix's blocks reshuffled per row.
// Each figure: warm-up (>= 2 runs and >= 1/3 of the time budget, so V8 tiers up), then
// the median of timed runs.
import * as kw from "../bindings/knotwork.mjs";

const args = process.argv.slice(2);
const flag = (name, def) => { const i = args.indexOf(name); return i >= 0 ? Number(args.splice(i, 2)[1]) : def; };
const minMs = flag("--min-ms", 1500);
const MM_TOKENS = 64;  // prefill chunk of the Engine
const rows = Number(args[0] ?? 4096), cols = Number(args[1] ?? 4096);
if (!(rows > 0) || !(cols > 0) || cols % 256) {
  console.error("usage: node bench/kernels.mjs [ROWS] [COLS] [--min-ms MS]   (COLS a multiple of 256)");
  process.exit(2);
}

const median = (a) => a.slice().sort((x, y) => x - y)[a.length >> 1];

// Warm up, then time single runs until the budget is spent; median ms per run.
function timeIt(fn, budgetMs) {
  const tw = performance.now();
  for (let k = 0; k < 2 || performance.now() - tw < budgetMs / 3; k++) fn();
  const times = [];
  const t0 = performance.now();
  while (times.length < 5 || performance.now() - t0 < budgetMs) {
    const t = performance.now();
    fn();
    times.push(performance.now() - t);
  }
  return {ms: median(times), runs: times.length};
}

// ---- plain-JS baseline: Q6_K row dequantize + f32 dot ---------------------------------
// Q6_K block: 256 weights in 210 bytes = ql[128] (low 4 bits), qh[64] (high 2 bits),
// int8 scales[16] (one per 16 weights), f16 d. Weight = d * scale * (q6 - 32).
const F16 = new Float32Array(65536);  // f16 bits -> f32, so the inner loop does no bit math
{
  const dv = new DataView(new ArrayBuffer(4));
  for (let h = 0; h < 65536; h++) {
    const sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
    let bits;
    if (exp === 0) {
      if (man === 0) bits = sign << 31;
      else { let e = -14, m = man; while (!(m & 1024)) { m <<= 1; e--; } bits = (sign << 31) | ((e + 127) << 23) | ((m & 1023) << 13); }
    } else if (exp === 31) bits = (sign << 31) | (255 << 23) | (man << 13);
    else bits = (sign << 31) | ((exp - 15 + 127) << 23) | (man << 13);
    dv.setUint32(0, bits >>> 0);
    F16[h] = dv.getFloat32(0);
  }
}

function dequantRowQ6K(u8, i8, base, n, out) {
  for (let b = 0; b < n / 256; b++) {
    const blk = base + b * 210;
    const d = F16[u8[blk + 208] | (u8[blk + 209] << 8)];
    for (let half = 0; half < 2; half++) {
      const ql = blk + half * 64, qh = blk + 128 + half * 32, sc = blk + 192 + half * 8;
      const o = b * 256 + half * 128;
      for (let l = 0; l < 32; l++) {
        const lo0 = u8[ql + l], lo1 = u8[ql + l + 32], hi = u8[qh + l];
        const g = l >> 4;  // 16 weights share a scale
        out[o + l]      = d * i8[sc + g]     * (((lo0 & 15) | ((hi & 3) << 4)) - 32);
        out[o + l + 32] = d * i8[sc + g + 2] * (((lo1 & 15) | (((hi >> 2) & 3) << 4)) - 32);
        out[o + l + 64] = d * i8[sc + g + 4] * (((lo0 >> 4) | (((hi >> 4) & 3) << 4)) - 32);
        out[o + l + 96] = d * i8[sc + g + 6] * (((lo1 >> 4) | (((hi >> 6) & 3) << 4)) - 32);
      }
    }
  }
}

// Q4_K block: 144 bytes = f16 d, f16 dmin, 12 bytes of 6-bit scales/mins for 8 groups of
// 32, qs[128] nibbles. Weight = d * sc * q - dmin * m.
function dequantRowQ4K(u8, i8, base, n, out) {
  for (let b = 0; b < n / 256; b++) {
    const blk = base + b * 144;
    const d = F16[u8[blk] | (u8[blk + 1] << 8)], dmin = F16[u8[blk + 2] | (u8[blk + 3] << 8)];
    const sc = blk + 4, qs = blk + 16;
    for (let j = 0; j < 4; j++) {  // 64 weights: low nibbles (group 2j), high nibbles (2j + 1)
      let s0, m0, s1, m1;
      const g0 = 2 * j, g1 = 2 * j + 1;
      if (g0 < 4) { s0 = u8[sc + g0] & 63; m0 = u8[sc + g0 + 4] & 63; }
      else { s0 = (u8[sc + g0 + 4] & 15) | ((u8[sc + g0 - 4] >> 6) << 4); m0 = (u8[sc + g0 + 4] >> 4) | ((u8[sc + g0] >> 6) << 4); }
      if (g1 < 4) { s1 = u8[sc + g1] & 63; m1 = u8[sc + g1 + 4] & 63; }
      else { s1 = (u8[sc + g1 + 4] & 15) | ((u8[sc + g1 - 4] >> 6) << 4); m1 = (u8[sc + g1 + 4] >> 4) | ((u8[sc + g1] >> 6) << 4); }
      const d0 = d * s0, mm0 = dmin * m0, d1 = d * s1, mm1 = dmin * m1, q = qs + 32 * j, o = b * 256 + 64 * j;
      for (let l = 0; l < 32; l++) {
        const v = u8[q + l];
        out[o + l] = d0 * (v & 15) - mm0;
        out[o + l + 32] = d1 * (v >> 4) - mm1;
      }
    }
  }
}

// Q8_0 block: 34 bytes = f16 d, int8 qs[32]. Weight = d * q.
function dequantRowQ80(u8, i8, base, n, out) {
  for (let b = 0; b < n / 32; b++) {
    const blk = base + b * 34;
    const d = F16[u8[blk] | (u8[blk + 1] << 8)];
    for (let l = 0; l < 32; l++) out[b * 32 + l] = d * i8[blk + 2 + l];
  }
}

const DEQUANT = {Q4_K: dequantRowQ4K, Q6_K: dequantRowQ6K, Q8_0: dequantRowQ80};

function jsMatvec(dequant, u8, i8, rowBytes, x, y, row) {
  const n = x.length;
  for (let r = 0; r < y.length; r++) {
    dequant(u8, i8, r * rowBytes, n, row);
    let acc = 0;
    for (let c = 0; c < n; c++) acc += row[c] * x[c];
    y[r] = acc;
  }
}

const BLOCK_BYTES = {Q4_K: 144, Q6_K: 210, Q8_0: 34};
const blockBytes = (type) => BLOCK_BYTES[type];
const largeRows = (rowBytes) => Math.ceil((96 << 20) / rowBytes);

// ---- run -------------------------------------------------------------------------------
const w = await kw.init();
const out = {rows, cols, weights: rows * cols, node: process.version, wasm: {}, js: {}, ratios: {}, check: {}};

function prepare(type) {
  const p = w.malloc(4);
  try {
    w.call("kw_bench_matvec_prepare", kw.DTYPES[type], rows, cols, 1, p);
    return {h: w.i32(p, 1)[0], ...w.resultJSON()};
  } finally { w.free(p); }
}

for (const type of ["Q4_K", "Q6_K", "Q8_0"]) {
  const b = prepare(type);
  try {
    const res = {};
    for (const kernel of ["simd", "scalar"]) {
      const k = kw.KERNELS[kernel];
      const t = timeIt(() => w.call("kw_bench_matvec_run", b.h, k, 1), minMs);
      res[kernel] = {msPerMatvec: +t.ms.toFixed(3), GWeightsPerS: +(rows * cols / t.ms / 1e6).toFixed(4), runs: t.runs};
    }
    res.simdOverScalar = +(res.simd.GWeightsPerS / res.scalar.GWeightsPerS).toFixed(2);
    // Batched prefill kernel: one matmul over MM_TOKENS tokens (G weight x token products/s).
    {
      const X = w.malloc(MM_TOKENS * cols * 4), Y = w.malloc(MM_TOKENS * rows * 4);
      try {
        const xs = w.f32(X, MM_TOKENS * cols);
        for (let i = 0; i < xs.length; i++) xs[i] = Math.sin(i * 0.37);
        const t = timeIt(() => w.call("kw_matmul", kw.DTYPES[type], b.w_ptr, rows, cols, X, MM_TOKENS, Y, kw.KERNELS.simd), minMs);
        res.simdMatmul = {tokens: MM_TOKENS, msPerMatmul: +t.ms.toFixed(3),
                          GWeightTokensPerS: +(rows * cols * MM_TOKENS / t.ms / 1e6).toFixed(4), runs: t.runs};
      } finally { w.free(X); w.free(Y); }
    }
    res.GBytesPerS = +(b.w_bytes / res.simd.msPerMatvec / 1e6).toFixed(3);
    out.wasm[type] = res;

    {
      // Same bytes for the JS loop; its result is checked against wasm's Reference kernel.
      const u8 = w.u8().slice(b.w_ptr, b.w_ptr + b.w_bytes);
      const i8 = new Int8Array(u8.buffer);
      const x = w.f32(b.x_ptr, cols).slice();
      const y = new Float32Array(rows), row = new Float32Array(cols);
      w.call("kw_bench_matvec_run", b.h, kw.KERNELS.reference, 1);
      const yref = w.f32(b.y_ptr, rows).slice();
      jsMatvec(DEQUANT[type], u8, i8, b.row_bytes, x, y, row);
      let maxRel = 0;
      for (let r = 0; r < rows; r++) maxRel = Math.max(maxRel, Math.abs(y[r] - yref[r]) / (Math.abs(yref[r]) + 1e-3));
      const yMax = yref.reduce((a, v) => Math.max(a, Math.abs(v)), 0);
      if (!(yMax > 0)) throw new Error("wasm reference matvec returned all zeros");
      out.check[`js${type}VsWasmReferenceMaxRelErr`] = +maxRel.toExponential(2);
      if (!(maxRel < 1e-3)) throw new Error(`JS ${type} baseline disagrees with the wasm reference kernel (max rel err ${maxRel})`);
      const t = timeIt(() => jsMatvec(DEQUANT[type], u8, i8, b.row_bytes, x, y, row), minMs * 2);
      out.js[type] = {msPerMatvec: +t.ms.toFixed(2), GWeightsPerS: +(rows * cols / t.ms / 1e6).toFixed(4), runs: t.runs,
                      method: `per row: dequantize ${type} into a Float32Array, then a scalar f32 dot`};
      // Larger than the last-level cache: >= 96 MiB of distinct rows (block k of row r is
      // block (r * 7919 + k * 104729) mod (all blocks) of the small matrix).
      const big = largeRows(b.row_bytes);
      const nb = b.w_bytes / rows / blockBytes(type), bb = blockBytes(type);
      w.exports.kw_bench_free(b.h);
      b.h = 0;
      const pw = w.malloc(big * b.row_bytes), px = w.malloc(cols * 4), py = w.malloc(big * 4);
      try {
        const W = w.u8();
        for (let r = 0; r < big; r++)
          for (let k = 0; k < nb; k++) {
            const src = ((r * 7919 + k * 104729) % (rows * nb)) * bb;
            W.set(u8.subarray(src, src + bb), pw + r * b.row_bytes + k * bb);
          }
        w.f32(px, cols).set(x);
        const ts = timeIt(() => w.call("kw_matvec", kw.DTYPES[type], pw, big, cols, px, py, kw.KERNELS.simd), minMs);
        const bigU8 = w.u8().slice(pw, pw + big * b.row_bytes), bigY = new Float32Array(big);
        w.free(pw);
        const tj = timeIt(() => jsMatvec(DEQUANT[type], bigU8, new Int8Array(bigU8.buffer), b.row_bytes, x, bigY, row), minMs * 2);
        res.large = {rows: big, bytes: big * b.row_bytes, simdGWeightsPerS: +(big * cols / ts.ms / 1e6).toFixed(4),
                     jsGWeightsPerS: +(big * cols / tj.ms / 1e6).toFixed(4), simdRuns: ts.runs, jsRuns: tj.runs};
      } finally { w.free(px); w.free(py); }
    }
  } finally { if (b.h) w.exports.kw_bench_free(b.h); }
}

for (const type of Object.keys(out.wasm)) {  // same weight type only
  out.ratios[`wasm_simd_over_js_${type}`] = +(out.wasm[type].simd.GWeightsPerS / out.js[type].GWeightsPerS).toFixed(2);
  out.ratios[`wasm_scalar_over_js_${type}`] = +(out.wasm[type].scalar.GWeightsPerS / out.js[type].GWeightsPerS).toFixed(2);
  const L = out.wasm[type].large;
  out.ratios[`wasm_simd_over_js_${type}_large`] = +(L.simdGWeightsPerS / L.jsGWeightsPerS).toFixed(2);
}
out.memory = await kw.memoryStats();
console.log(JSON.stringify(out));
