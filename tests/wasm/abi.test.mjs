// The wasm module's contract: imports, exports, errors as messages, memory stats,
// and the SIMD-vs-scalar kernel self-check running inside wasm.
import {test} from "node:test";
import assert from "node:assert/strict";
import {readFileSync} from "node:fs";
import {pathToFileURL} from "node:url";

import {loadWasm, compileWasm, PROVIDED_IMPORTS, KnotworkError} from "../../bindings/loader.mjs";
import * as kw from "../../bindings/knotwork.mjs";
import {WASM_PATH, sharedModel} from "./helpers.mjs";

const bytes = readFileSync(WASM_PATH);

test("module imports exactly the two standalone imports", () => {
  const mod = new WebAssembly.Module(bytes);
  const imports = WebAssembly.Module.imports(mod).map((i) => `${i.module}.${i.name}`).sort();
  assert.deepEqual(imports, ["env.emscripten_notify_memory_growth", "wasi_snapshot_preview1.proc_exit"]);
  for (const i of imports) assert.ok(PROVIDED_IMPORTS.includes(i), i);
});

test("module exports the C ABI and a memory capped at 128 MB", () => {
  const mod = new WebAssembly.Module(bytes);
  const names = new Set(WebAssembly.Module.exports(mod).map((e) => e.name));
  for (const f of ["memory", "kw_last_error", "kw_last_error_len", "kw_result_ptr", "kw_result_len",
                   "kw_alloc", "kw_free", "kw_memory_stats", "kw_kernel_selftest", "kw_bench_matvec_prepare",
                   "kw_parse_header", "kw_model_open", "kw_model_tensor_buffer", "kw_model_tensor_loaded",
                   "kw_model_finish", "kw_tokenize", "kw_detokenize", "kw_session_new",
                   "kw_session_prefill", "kw_session_step", "kw_session_free"])
    assert.ok(names.has(f), `missing export ${f}`);
  // The cap is in the binary: growing past 128 MB must fail.
  const inst = new WebAssembly.Instance(mod, {
    env: {emscripten_notify_memory_growth() {}}, wasi_snapshot_preview1: {proc_exit() {}},
  });
  const mem = inst.exports.memory;
  assert.throws(() => mem.grow(2048 - mem.buffer.byteLength / 65536 + 1), RangeError);
});

test("loader accepts a compiled Module, bytes, a path and a file URL", async () => {
  const mod = await compileWasm(WASM_PATH);
  for (const src of [mod, bytes, new Uint8Array(bytes).buffer, WASM_PATH, pathToFileURL(WASM_PATH)]) {
    const w = await loadWasm(src);
    const p = w.malloc(16);
    w.call("kw_memory_stats", p);
    assert.ok(w.u32(p, 4)[0] >= 65536);
    w.free(p);
  }
});

test("kernel selftest: simd128 vs scalar passes inside wasm", async () => {
  const r = await kw.kernelSelftest({seed: 7});
  assert.equal(r.simd, true, "module built without a SIMD path");
  assert.equal(r.failures, 0, r.report);
  // The report must show the checks actually ran (a selftest that checks nothing passes too).
  const ok = r.report.split("\n").filter((l) => l.startsWith("ok"));
  assert.ok(ok.length >= 20, `only ${ok.length} check groups ran:\n${r.report}`);
  for (const t of ["F32", "F16", "BF16", "Q4_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K"])
    assert.ok(ok.some((l) => l.includes(`${t} vec_dot simd==scalar`)), `no simd==scalar check for ${t}`);
  const cases = [...r.report.matchAll(/simd==scalar, (\d+) cases/g)].reduce((a, m) => a + Number(m[1]), 0);
  assert.ok(cases > 1000, `only ${cases} simd==scalar cases`);
});

test("kernel bench: simd and scalar matvec agree on the same matrix", async () => {
  for (const type of ["Q4_K", "Q6_K", "Q8_0"]) {
    const a = await kw.benchMatvec(type, 64, 512, {kernel: "simd", minMs: 1, minIters: 1});
    const b = await kw.benchMatvec(type, 64, 512, {kernel: "scalar", minMs: 1, minIters: 1});
    assert.ok(Number.isFinite(a.checksum) && a.checksum !== 0, `${type} checksum ${a.checksum}`);
    assert.equal(a.checksum, b.checksum, `${type}: simd ${a.checksum} != scalar ${b.checksum}`);
  }
});

test("errors come back as messages, and the module keeps working", async () => {
  const w = await loadWasm(bytes);
  // garbage header
  const garbage = new Uint8Array(4096).map((_, i) => (i * 131 + 7) & 255);
  const p = w.copyIn(garbage);
  const st = w.exports.kw_parse_header(p, garbage.length, garbage.length, 0, 0);
  assert.notEqual(st, 0);
  assert.match(w.lastError(), /not a model file/);
  // truncated GGUF magic with absurd counts
  const g = new Uint8Array(64);
  g.set([0x47, 0x47, 0x55, 0x46, 3, 0, 0, 0]);
  g.fill(0xff, 8, 24);
  w.u8().set(g, p);
  assert.throws(() => w.call("kw_parse_header", p, g.length, g.length, 0, 0), (e) => e instanceof KnotworkError && /gguf/i.test(e.message));
  w.free(p);
  // unknown handles
  assert.throws(() => w.call("kw_tokenize", 12345, 0, 0, 1, 0), (e) => e.status === 4 && /unknown or freed handle 12345/.test(e.message));
  assert.throws(() => w.call("kw_session_step", 999), (e) => e.status === 4);
  // bad options JSON
  assert.throws(() => w.call("kw_bench_matvec_run", 777, 2, 1), /unknown or freed handle/);
  assert.throws(() => w.call("kw_bench_matvec_prepare", 99, 4, 256, 1, p), /99/);
  // out of memory is an error, not an abort
  assert.equal(w.exports.kw_alloc(200 * 1024 * 1024), 0);
  assert.match(w.lastError(), /out of memory/);
  assert.throws(() => w.call("kw_bench_matvec_prepare", 0, 8192, 8192, 1, w.malloc(4)), /out of memory allocating 268435456 bytes/);
  // still alive
  const q = w.malloc(16);
  w.call("kw_memory_stats", q);
  assert.ok(w.u32(q, 4)[0] <= 128 * 1024 * 1024);
  w.call("kw_kernel_selftest", 3);
  assert.equal(w.resultJSON().failures, 0);
});

test("openModel refuses garbage with a message", async () => {
  await assert.rejects(kw.openModel(kw.bytesSource(new Uint8Array(100).fill(7), "junk.bin")), /junk\.bin: not a model file/);
});

test("openModel refuses a truncated GGUF naming the file", async (t) => {
  const p = sharedModel(t, "stories260K.gguf");
  if (!p) return;
  const full = readFileSync(p);
  // header intact, tensor data cut off: the core names the problem
  await assert.rejects(kw.openModel(kw.bytesSource(full.subarray(0, 40000), "cut.gguf")), /cut\.gguf/);
});

test("memory stats: malloc'd bytes are counted exactly (the module's malloc family), also between ABI calls", async (t) => {
  const w = await kw.init();
  const h0 = (await kw.memoryStats()).heap;
  const sizes = [1, 100, 4096, 1 << 20];
  const ps = sizes.map((n) => w.malloc(n));
  const h1 = (await kw.memoryStats()).heap;
  const want = sizes.reduce((a, n) => a + ((n + 15) & ~15), 0);
  // each block costs its 16-aligned size plus dlmalloc's size word and alignment slack
  assert.ok(h1 - h0 >= want && h1 - h0 < want + sizes.length * 64, `${h1 - h0} bytes counted for ${want} allocated`);
  for (const p of ps) w.free(p);
  assert.equal((await kw.memoryStats()).heap, h0, "every byte returned");
  // a peak inside one call is seen (no sampling): tokenizing allocates and frees within the call
  const path = sharedModel(t, "stories260K.gguf");
  if (!path) return;
  const m = await kw.openModel(kw.bytesSource(new Uint8Array(readFileSync(path)), "stories260K.gguf"));
  await kw.resetPeakMemory();
  const base = await kw.memoryStats();
  m.tokenize("hello ".repeat(20000));
  const after = await kw.memoryStats();
  assert.ok(after.peakHeap > base.heap + 20000 * 4, JSON.stringify({base, after}));
  m.close();
});

test("memory stats: peak tracks a large allocation; current linear never exceeds the cap", async () => {
  await kw.resetPeakMemory();
  const w = await kw.init();
  const before = await kw.memoryStats();
  const p = w.malloc(32 << 20);
  w.free(p);
  const after = await kw.memoryStats();
  assert.ok(after.peakHeap >= (32 << 20) && after.heap < before.heap + (1 << 20), JSON.stringify({before, after}));
  assert.ok(after.linear <= 128 * 1024 * 1024);
  assert.ok(after.peakLinear >= after.linear);
});

test("raw kernels: quantize/dequantize round trip per type, unknown types and bad lengths are errors", async () => {
  const n = 512;
  const x = Float32Array.from({length: n}, (_, i) => Math.sin(i * 0.37) * (1 + (i % 7)));
  const rms = (a) => Math.sqrt(a.reduce((s, v) => s + v * v, 0) / a.length);
  // loose bounds on relative rms error: they catch wrong layouts (errors ~1), not rounding
  const bound = {F32: 1e-7, F16: 1e-3, BF16: 1e-2, Q8_0: 2e-2, Q6_K: 5e-2, Q5_K: 0.1, Q4_K: 0.2, Q4_0: 0.2};
  for (const [type, b] of Object.entries(bound)) {
    const q = await kw.quantizeRow(type, x);
    assert.equal(q.length, kw.rowBytes(type, n));
    const y = await kw.dequantizeRow(type, q, n);
    const err = rms(y.map((v, i) => v - x[i])) / rms(x);
    assert.ok(err <= b, `${type}: rel rms ${err} > ${b}`);
  }
  await assert.rejects(kw.dequantizeRow(3, new Uint8Array(64), 32), /unsupported tensor type id 3/);  // Q4_1
  await assert.rejects(kw.dequantizeRow("Q4_K", new Uint8Array(1000), 300), /300/);
});

test("raw kernels: known-answer dots catch lane-sum bugs; matmul rows == matvec per token", async () => {
  const cols = 512, rows = 8;
  for (const type of ["Q8_0", "Q4_K", "Q6_K", "F16"]) {
    // all-ones weights and activations: every output is the sum of the dequantized row
    // (cols up to the weights' quantization of 1.0), to far less than one element, so a
    // lane that is dropped or summed twice shows
    const one = await kw.quantizeRow(type, new Float32Array(cols).fill(1));
    const want = (await kw.dequantizeRow(type, one, cols)).reduce((a, x) => a + x, 0);
    assert.ok(Math.abs(want - cols) < cols * 0.02, `${type}: 1.0 dequantizes to ${want / cols}`);
    const W = new Uint8Array(one.length * rows);
    for (let r = 0; r < rows; r++) W.set(one, r * one.length);
    for (const kernel of ["simd", "scalar", "reference"]) {
      const y = await kw.matmul(type, W, rows, cols, new Float32Array(cols).fill(1), {kernel});
      for (const v of y) assert.ok(Math.abs(v - want) < 0.05, `${type} ${kernel}: ${v} != ${want}`);
    }
    // random weights: matmul over 3 tokens == 3 matvecs, bit for bit
    const Wr = new Uint8Array(one.length * rows);
    for (let r = 0; r < rows; r++)
      Wr.set(await kw.quantizeRow(type, Float32Array.from({length: cols}, (_, i) => Math.cos(i * (r + 1) * 0.11))), r * one.length);
    const X = Float32Array.from({length: 3 * cols}, (_, i) => Math.sin(i * 0.05));
    const Y = await kw.matmul(type, Wr, rows, cols, X);
    for (let t = 0; t < 3; t++) {
      const yt = await kw.matmul(type, Wr, rows, cols, X.subarray(t * cols, (t + 1) * cols));
      assert.deepEqual(Array.from(Y.subarray(t * rows, (t + 1) * rows)), Array.from(yt), `${type} token ${t}`);
    }
  }
});

test("a model larger than the 128 MB cap is refused with the numbers and the way out", async (t) => {
  const {existsSync} = await import("node:fs");
  const {execFileSync} = await import("node:child_process");
  const {join} = await import("node:path");
  const {KNOT_BIN, tmpDir} = await import("./helpers.mjs");
  if (!existsSync(KNOT_BIN)) {
    if (process.env.CI) throw new Error(`${KNOT_BIN} missing (CI is set: not skipping)`);
    t.skip(`${KNOT_BIN} missing`);
    return;
  }
  // ~168 MB of F16 tensors: written fast (no quantization), cannot fit in 128 MB.
  const path = join(tmpDir(), "big.gguf");
  execFileSync(KNOT_BIN, ["synth", "--arch", "llama", "--hidden", "1024", "--layers", "5", "--heads", "8",
                          "--kv-heads", "8", "--ffn", "4096", "--vocab", "512", "--type", "F16", path]);
  await assert.rejects(kw.openModel(await kw.fileSource(path)), (e) => {
    assert.match(e.message, /big\.gguf: tensor \S+: out of memory allocating \d+ bytes/);
    assert.match(e.message, /holds 1[5-9]\d MiB of tensors/);
    assert.match(e.message, /capped at 128 MB/);
    return true;
  });
  // The module is still usable afterwards.
  const small = sharedModel(t, "stories260K.gguf");
  if (!small) return;
  const m = await kw.openModel(await kw.fileSource(small));
  assert.deepEqual(m.tokenize("Once upon a time"), [1, 403, 407, 261, 378]);
  m.close?.();
});
