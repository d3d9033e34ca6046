// relaxed-check.mjs — the relaxed-SIMD module against the baseline, run inside a runtime
// that has relaxed SIMD (workerd: tests/workers/relaxed.test.mjs; Chromium:
// tests/wasm/chromium-relaxed.test.mjs). No Node built-ins.
// Returns what the tests assert on:
//   variant   what the loader's pick chose from {baseline, relaxed}
//   selftest  the relaxed module's kw_kernel_selftest (Simd = relaxed kernels vs Scalar)
//   cases     per storage type x token count: matmul outputs of the relaxed module's Simd
//             kernels compared bit for bit with the baseline module's Scalar kernels
//             (quantized types) or the baseline's Simd (float types: same simd128 code,
//             a different summation order from Scalar), on the same weight bytes.
export async function relaxedCheck(loadWasm, {baseline, relaxed}, seed = 1) {
  const picked = await loadWasm({baseline, relaxed});
  const R = await loadWasm(relaxed), B = await loadWasm(baseline);
  R.call("kw_kernel_selftest", seed);
  const st = R.resultJSON();
  R.call("kw_type_traits");
  const types = R.resultJSON().filter((t) => t.storage);
  let s = BigInt(seed) * 2654435761n + 1n;
  const rand = () => {  // LCG in [-1, 1)
    s = (s * 6364136223846793005n + 1442695040888963407n) & ((1n << 64n) - 1n);
    return Number(s >> 33n) / 2147483648 - 1;
  };
  const rows = 37, cols = 768, cases = [];
  const SCALAR = 1, SIMD = 2;
  for (const t of types) {
    const rowBytes = (cols / t.block_elems) * t.block_bytes;
    const wBytes = rows * rowBytes;
    // quantize the weights once (baseline reference quantizer); copy the bytes into R
    const pf = B.malloc(cols * 4), pw = B.malloc(wBytes);
    for (let r = 0; r < rows; r++) {
      const f = B.f32(pf, cols);
      for (let c = 0; c < cols; c++) f[c] = rand() * (r % 5 === 0 ? 30 : 1);
      B.call("kw_quantize_row", t.id, pf, pw + r * rowBytes, cols);
    }
    const w = B.u8().slice(pw, pw + wBytes);
    B.free(pf);
    const rw = R.copyIn(w);
    for (const ntok of [1, 3, 6, 7, 8, 10]) {
      const X = new Float32Array(ntok * cols).map(() => rand());
      const run = (M, pwM, kernel) => {
        const px = M.copyIn(new Uint8Array(X.buffer)), py = M.malloc(ntok * rows * 4);
        M.call("kw_matmul", t.id, pwM, rows, cols, px, ntok, py, kernel);
        const y = new Uint32Array(M.u8().slice(py, py + ntok * rows * 4).buffer);
        M.free(px); M.free(py);
        return y;
      };
      const quantized = t.block_elems > 1;
      const want = run(B, pw, quantized ? SCALAR : SIMD), got = run(R, rw, SIMD);
      let mismatches = 0;
      for (let i = 0; i < want.length; i++) if (want[i] !== got[i]) mismatches++;
      cases.push({type: t.name, ntok, outputs: want.length, mismatches,
                  nonzero: Array.from(got).filter((v) => (v & 0x7fffffff) !== 0).length});
    }
    B.free(pw); R.free(rw);
  }
  return {variant: picked.variant, selftest: {failures: st.failures, kernels: st.kernels, report: st.report},
          baselineKernels: (B.call("kw_kernel_selftest", seed), B.resultJSON().kernels), cases};
}
