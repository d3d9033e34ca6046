// relaxed-bench.mjs — matvec runs of the baseline and relaxed wasm modules inside one
// runtime (workerd: bench/lib/relaxed-bench-worker.mjs; Chromium: page.evaluate in
// bench/kernels-relaxed.mjs). No clock here (workerd freezes it during a request): the
// caller times run(). No Node built-ins.
const TYPE_IDS = {Q4_K: 12, Q6_K: 14, Q8_0: 8};

export function relaxedBench(loadWasm, sources) {
  const inst = new Map(), mats = new Map();
  async function module(variant) {
    if (!inst.has(variant)) {
      const w = await loadWasm(sources[variant]);
      w.call("kw_kernel_selftest", 1);
      const k = w.resultJSON().kernels;
      inst.set(variant, {w, kernels: k});
    }
    return inst.get(variant);
  }
  return {
    /** Prepare (once) a rows x cols matrix of `type` in `variant`'s module; returns its key. */
    async prepare(variant, type, rows, cols) {
      const key = `${variant}/${type}/${rows}x${cols}`;
      if (!mats.has(key)) {
        for (const [k, m] of mats)  // one large matrix at a time per module (128 MB cap)
          if (k.startsWith(variant + "/")) { m.w.call("kw_bench_free", m.h); mats.delete(k); }
        const {w, kernels} = await module(variant);
        const p = w.malloc(4);
        w.call("kw_bench_matvec_prepare", TYPE_IDS[type], rows, cols, 7, p);
        const h = w.i32(p, 1)[0];
        w.free(p);
        const info = w.resultJSON();
        mats.set(key, {w, h, kernels, bytes: info.w_bytes, wPtr: info.w_ptr, type, rows, cols});
      }
      const m = mats.get(key);
      return {key, kernels: m.kernels, bytes: m.bytes};
    },
    /** iters Simd matvecs (ntok 1) or matmuls over ntok tokens of a prepared matrix;
     *  returns a checksum. */
    run(key, iters, ntok = 1) {
      const m = mats.get(key);
      if (ntok === 1) {
        m.w.call("kw_bench_matvec_run", m.h, 2, iters);
        return new Float64Array(m.w.resultBytes().buffer)[0];
      }
      if (!m.X || m.ntok !== ntok) {
        m.X = m.w.malloc(4 * ntok * m.cols), m.Y = m.w.malloc(4 * ntok * m.rows), m.ntok = ntok;
        const X = m.w.f32(m.X, ntok * m.cols);
        for (let i = 0; i < X.length; i++) X[i] = Math.sin(i * 0.37);
      }
      for (let k = 0; k < iters; k++) m.w.call("kw_matmul", TYPE_IDS[m.type], m.wPtr, m.rows, m.cols, m.X, ntok, m.Y, 2);
      return m.w.f32(m.Y, 1)[0];
    },
  };
}
