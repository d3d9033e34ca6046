// The relaxed-SIMD build under workerd (Miniflare): the pair of modules the mesh Workers
// import (workers/lib/wasm.mjs) is picked to "relaxed" there, its kernel selftest passes
// with the relaxed kernels active, and its matmul outputs equal the baseline module's
// scalar kernels bit for bit for every storage type (tests/wasm/relaxed-check.mjs).
import {test} from "node:test";
import assert from "node:assert/strict";
import {existsSync} from "node:fs";
import {resolve} from "node:path";
import {Miniflare} from "miniflare";
import {ROOT} from "../wasm/helpers.mjs";

const COMPATIBILITY_DATE = "2026-04-01";  // the mesh Workers' date

const RELAXED = resolve(ROOT, "build/wasm/knotwork-relaxed.wasm");

test("workerd picks the relaxed-SIMD module; its kernels equal the scalar reference bit for bit", {timeout: 240_000}, async (t) => {
  if (!existsSync(RELAXED)) {
    if (process.env.CI) throw new Error(`${RELAXED} missing (CI is set: not skipping)`);
    t.skip(`${RELAXED} missing (no clang-19/lld-19 at build time)`);
    return;
  }
  const mf = new Miniflare({
    modules: true, modulesRoot: ROOT, scriptPath: resolve(ROOT, "tests/workers/relaxed-worker.mjs"),
    modulesRules: [{type: "CompiledWasm", include: ["**/*.wasm"]}],
    compatibilityDate: COMPATIBILITY_DATE, compatibilityFlags: ["nodejs_compat"],
  });
  try {
    for (const seed of [1, 2]) {
      const res = await mf.dispatchFetch(`http://relaxed.test/?seed=${seed}`);
      const r = await res.json();
      assert.equal(res.status, 200, r.error);
      assert.equal(r.variant, "relaxed");
      assert.equal(r.selftest.kernels, "wasm-relaxed-simd");
      assert.equal(r.baselineKernels, "wasm-simd128");
      assert.equal(r.selftest.failures, 0, r.selftest.report);
      const types = new Set(r.cases.map((c) => c.type));
      for (const ty of ["Q4_K", "Q6_K", "Q8_0"]) assert.ok(types.has(ty), `no ${ty} case`);
      for (const c of r.cases) {
        assert.equal(c.mismatches, 0, `${c.type} ntok=${c.ntok}: ${c.mismatches}/${c.outputs} outputs differ`);
        assert.ok(c.nonzero > c.outputs / 2, `${c.type} ntok=${c.ntok}: outputs mostly zero`);
      }
    }
  } finally {
    await mf.dispose();
  }
});
