// The relaxed-SIMD build in headless Chromium: the loader's pick between the two modules
// served over HTTP chooses "relaxed", its kernel selftest passes with the relaxed
// kernels active, and its matmul outputs equal the baseline module's scalar kernels bit
// for bit for every storage type (tests/wasm/relaxed-check.mjs, run on the page).
import {test} from "node:test";
import assert from "node:assert/strict";
import {existsSync, writeFileSync} from "node:fs";
import {join} from "node:path";

import {ROOT, WASM_PATH, bindingsRoutes, serveFiles, tmpDir, CHROMIUM, launchChromium} from "./helpers.mjs";

const RELAXED = join(ROOT, "build/wasm/knotwork-relaxed.wasm");

test("Chromium picks the relaxed-SIMD module; its kernels equal the scalar reference bit for bit", {timeout: 180_000}, async (t) => {
  for (const [what, p] of [["chromium", CHROMIUM], ["relaxed module", RELAXED]]) {
    if (existsSync(p)) continue;
    if (process.env.CI) throw new Error(`${p} missing (CI is set: not skipping)`);
    t.skip(`no ${what} at ${p}`);
    return;
  }
  const blank = join(tmpDir(), "blank.html");
  writeFileSync(blank, "<!doctype html><meta charset=utf-8><title>relaxed</title>");
  const server = await serveFiles({
    "/blank.html": blank,
    ...bindingsRoutes(),
    "/tests/wasm/relaxed-check.mjs": join(ROOT, "tests/wasm/relaxed-check.mjs"),
    "/build/wasm/knotwork.wasm": WASM_PATH,
    "/build/wasm/knotwork-relaxed.wasm": RELAXED,
  });
  const ctx = await launchChromium();
  try {
    const page = await ctx.newPage();
    const logs = [];
    page.on("console", (m) => logs.push(`${m.type()}: ${m.text()}`));
    page.on("pageerror", (e) => logs.push(`pageerror: ${e.message}`));
    await page.goto(`${server.url}/blank.html`);
    const r = await page.evaluate(async () => {
      try {
        const {loadWasm} = await import("/bindings/loader.mjs");
        const {relaxedCheck} = await import("/tests/wasm/relaxed-check.mjs");
        const u = (f) => new URL(`/build/wasm/${f}`, location.href);
        const out = await relaxedCheck(loadWasm, {baseline: u("knotwork.wasm"), relaxed: u("knotwork-relaxed.wasm")}, 5);
        return {...out, ua: navigator.userAgent};
      } catch (e) {
        return {error: String(e?.stack || e)};
      }
    });
    assert.ok(!r.error, `${r.error}\n${logs.join("\n")}`);
    t.diagnostic(r.ua);
    assert.equal(r.variant, "relaxed");
    assert.equal(r.selftest.kernels, "wasm-relaxed-simd");
    assert.equal(r.baselineKernels, "wasm-simd128");
    assert.equal(r.selftest.failures, 0, r.selftest.report);
    for (const ty of ["Q4_K", "Q6_K"]) assert.ok(r.cases.some((c) => c.type === ty), `no ${ty} case`);
    for (const c of r.cases) {
      assert.equal(c.mismatches, 0, `${c.type} ntok=${c.ntok}: ${c.mismatches}/${c.outputs} outputs differ`);
      assert.ok(c.nonzero > c.outputs / 2, `${c.type} ntok=${c.ntok}: outputs mostly zero`);
    }
  } finally {
    await ctx.close();
    await server.close();
  }
});
