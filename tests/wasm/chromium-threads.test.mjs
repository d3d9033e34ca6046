// The threaded module in headless Chromium: a cross-origin isolated page (COOP/COEP) runs
// build/wasm/knotwork-mt.wasm with 1, 2 and 3 threads (browser Workers on one shared
// memory); greedy and seeded ids must equal the single-threaded module's (computed here
// in Node) for every count, every thread must have computed rows, and without the
// isolation headers the page gets a clear error instead of a hang.
import {test} from "node:test";
import assert from "node:assert/strict";
import {join} from "node:path";

import * as kw from "../../bindings/knotwork.mjs";
import {ROOT, ISOLATED, bindingsRoutes, sharedModel, serveFiles, haveChromium, launchChromium} from "./helpers.mjs";

const MODEL = "stories260K-pad256-llama-q4_k_m.gguf";

test(`Chromium: the threaded module gives the single-threaded ids for 1, 2, 3 threads (${MODEL})`, {timeout: 300_000}, async (t) => {
  const modelPath = sharedModel(t, MODEL);
  if (!modelPath) return;
  if (!haveChromium(t)) return;
  const m = await kw.openModel(modelPath);  // the single-threaded module, in Node
  const greedy = (await m.complete("Once upon a time", {maxTokens: 32, temperature: 0})).ids;
  const long = "Once upon a time there was a little girl who liked to play in the park with her dog. ".repeat(8);
  const seeded = (await m.complete(long, {maxTokens: 24, temperature: 0.8, seed: 7})).ids;
  m.close();
  const routes = {
    "/tests/wasm/threads-page.html": join(ROOT, "tests/wasm/threads-page.html"),
    ...bindingsRoutes(),
    "/build/wasm/knotwork-mt.wasm": join(ROOT, "build/wasm/knotwork-mt.wasm"),
    "/models/m.gguf": modelPath,
  };
  const isolated = await serveFiles(routes, {headers: ISOLATED});
  const plain = await serveFiles(routes);
  const ctx = await launchChromium();
  const load = async (url) => {
    const page = await ctx.newPage();
    const logs = [];
    page.on("console", (x) => logs.push(`${x.type()}: ${x.text()}`));
    page.on("pageerror", (e) => logs.push(`pageerror: ${e.message}`));
    await page.goto(url);
    await page.waitForFunction(() => window.knotResult, null, {timeout: 120_000});
    const r = await page.evaluate(() => window.knotResult);
    await page.close();
    return {r, logs};
  };
  try {
    for (const n of [1, 2, 3]) {
      const {r, logs} = await load(`${isolated.url}/tests/wasm/threads-page.html?threads=${n}`);
      assert.ok(!r.error, `${n} threads: ${r.error}\n${logs.join("\n")}`);
      assert.equal(r.crossOriginIsolated, true);
      assert.equal(r.threads, n);
      assert.equal(r.variant, "threaded");
      assert.deepEqual(r.greedy, greedy, `greedy ids, ${n} threads`);
      assert.deepEqual(r.seeded, seeded, `seeded ids, ${n} threads`);
      if (n > 1) assert.ok(r.rows.every((x) => x > 0), `every thread computed rows: ${r.rows}`);
    }
    const {r} = await load(`${plain.url}/tests/wasm/threads-page.html?threads=2`);
    assert.match(r.error ?? "", /threads need SharedArrayBuffer.*Cross-Origin-Opener-Policy/);
  } finally {
    await ctx.close();
    await isolated.close();
    await plain.close();
  }
});
