// wasm-choice.mjs — which of the two builds this runtime runs (used by bindings/loader.mjs
// when it is given {baseline, relaxed} or no source at all):
//   build/wasm/knotwork-relaxed.wasm  relaxed-SIMD kernels (i32x4.relaxed_dot_i8x16_i7x16_add)
//   build/wasm/knotwork.wasm          the baseline simd128 module, always the fallback.
// The relaxed module is chosen only when (1) it validates here (WebAssembly.validate on
// bytes; a WebAssembly.Module, as Workers import it, was validated by the runtime) and
// (2) its exported known-answer probe kw_relaxed_probe computes the exact final-spec
// answer on inputs picked here. (2) matters: Node 20 with --experimental-wasm-relaxed-simd
// validates the module but computes the pre-final semantics (wrong sums). The probe runs
// on the instance that will be used (no extra instance: a Worker has 128 MB).
// No Node built-ins: runs in Workers, browsers and Node.

// Probe inputs: int8 extremes and signs in a, the full unsigned 7-bit range in b, lanes
// with distinct sums, accumulators of both signs (i32 wraps).
const PROBE_A = Int8Array.of(-128, 127, -1, 1, -77, 55, 100, -100, 3, -3, 64, -64, 0, 99, -128, 127);
const PROBE_B = Uint8Array.of(127, 127, 126, 1, 64, 63, 0, 5, 100, 33, 127, 2, 17, 88, 1, 99);
const PROBE_C = Int32Array.of(7, -123456, 1 << 30, -(2 ** 31) + 5);

/** The exact i32x4.relaxed_dot_i8x16_i7x16_add(a, b, c) for b in 0..127. */
export function relaxedDotAnswer(a = PROBE_A, b = PROBE_B, c = PROBE_C) {
  const out = new Int32Array(4);
  for (let i = 0; i < 4; i++) {
    let s = c[i];
    for (let j = 0; j < 4; j++) s = (s + a[4 * i + j] * b[4 * i + j]) | 0;
    out[i] = s;
  }
  return out;
}

/**
 * Run the module's probe once; true only when all four lanes are exact.
 * @param {import("./loader.mjs").KnotworkWasm} w
 */
export function relaxedProbeOk(w) {
  const probe = w.exports.kw_relaxed_probe;
  if (typeof probe !== "function") return false;
  const p = w.malloc(48);
  try {
    const u8 = w.u8();
    u8.set(new Uint8Array(PROBE_A.buffer), p);
    u8.set(PROBE_B, p + 16);
    u8.set(new Uint8Array(PROBE_C.buffer), p + 32);
    probe(p);
    const got = w.i32(p + 32, 4), want = relaxedDotAnswer();
    return want.every((v, i) => got[i] === v);
  } finally {
    w.free(p);
  }
}

const missing = (e) => e?.code === "ENOENT" || /HTTP 404/.test(e?.message ?? "");

/**
 * Instantiate the relaxed module when it validates and passes the probe, else the
 * baseline. Returns the live KnotworkWasm with .variant = "relaxed" | "baseline".
 * @param {{baseline: any, relaxed?: any}} sources  each a WebAssembly.Module, bytes, URL or path
 * @param {(src: any) => Promise<Uint8Array>} readBytes  URL/path -> bytes (the loader's reader)
 * @param {(src: WebAssembly.Module|BufferSource) => Promise<any>} instantiate  -> KnotworkWasm
 */
export async function instantiateBest({baseline, relaxed}, readBytes, instantiate) {
  if (relaxed != null) {
    let src = relaxed;
    try {
      if (!(src instanceof WebAssembly.Module) && !(src instanceof ArrayBuffer) && !ArrayBuffer.isView(src))
        src = await readBytes(src);
    } catch (e) {
      if (!missing(e)) throw e;  // no relaxed build next to the baseline: fall back
      src = null;
    }
    if (src && (src instanceof WebAssembly.Module || WebAssembly.validate(src))) {
      const w = await instantiate(src);
      if (relaxedProbeOk(w)) {
        w.variant = "relaxed";
        return w;
      }
    }
  }
  const w = await instantiate(baseline);
  w.variant = "baseline";
  return w;
}
