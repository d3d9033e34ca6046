// The module in headless Chromium: loaded by URL on a page and from a compiled
// WebAssembly.Module inside a Worker; the model comes over HTTP Range requests from a
// local server. Output must be token-exact with the reference.
import {test} from "node:test";
import assert from "node:assert/strict";
import {readFileSync, writeFileSync} from "node:fs";
import {join} from "node:path";

import * as kw from "../../bindings/knotwork.mjs";
import {ROOT, WASM_PATH, bindingsRoutes, sharedModel, referenceOutputs, serveFiles, tmpDir, haveChromium, launchChromium} from "./helpers.mjs";

const MODEL = "stories260K-pad256-llama-q8_0.gguf";

test(`Chromium: ${MODEL} (.gguf and .knot over HTTP ranges) greedy 32 ids on the page and in a Worker match the reference`, {timeout: 180_000}, async (t) => {
  const modelPath = sharedModel(t, MODEL);
  if (!modelPath) return;
  if (!haveChromium(t)) return;
  const ref = referenceOutputs().models[MODEL];
  // the same model as .knot (what object storage holds), encoded by the wasm core
  const g = await kw.openModel(modelPath);
  const knotPath = join(tmpDir(), "m.knot");
  writeFileSync(knotPath, g.toKnot());
  g.close();
  // the reads of one open + greedy 32 over a counting source, per file (what each page half fetches)
  const reads = {};
  for (const [file, src] of [["/models/m.gguf", kw.bytesSource(readFileSync(modelPath), "m.gguf")],
                             ["/models/m.knot", kw.bytesSource(readFileSync(knotPath), "m.knot")]]) {
    const log = [];
    const m = await kw.openModel(kw.countingSource(src, log));
    await m.complete("Once upon a time", {maxTokens: 32, temperature: 0});  // page.html's default prompt
    m.close();
    reads[file] = log.length;
  }
  const server = await serveFiles({
    "/tests/wasm/page.html": join(ROOT, "tests/wasm/page.html"),
    "/tests/wasm/page-worker.mjs": join(ROOT, "tests/wasm/page-worker.mjs"),
    ...bindingsRoutes(),
    "/build/wasm/knotwork.wasm": WASM_PATH,
    "/models/m.gguf": modelPath,
    "/models/m.knot": knotPath,
  });
  const ctx = await launchChromium();
  try {
    for (const file of ["/models/m.gguf", "/models/m.knot"]) {
      const page = await ctx.newPage();
      const logs = [];
      page.on("console", (m) => logs.push(`${m.type()}: ${m.text()}`));
      page.on("pageerror", (e) => logs.push(`pageerror: ${e.message}`));
      await page.goto(`${server.url}/tests/wasm/page.html?model=${file}&n=32`);
      await page.waitForFunction(() => window.knotResult, null, {timeout: 150_000});
      const r = await page.evaluate(() => window.knotResult);
      assert.ok(!r.error, `${file}: ${r.error}\n${logs.join("\n")}`);
      assert.equal(r.selftest, 0);
      assert.deepEqual(r.main.promptIds, ref.promptTokenIds);
      assert.deepEqual(r.main.ids, ref.exactFloat64.tokenIds, file);
      assert.equal(r.main.text, ref.llamaCppNative.text);
      assert.ok(!r.worker.error, r.worker.error);
      assert.deepEqual(r.worker.ids, ref.exactFloat64.tokenIds, `${file} (worker)`);
      // The model really came by ranges, never as a whole file: on the page and in the Worker,
      // urlSource's size probe plus exactly the reads the same open + generate makes in node.
      const reqs = server.log.filter((x) => x.path === file);
      assert.ok(reqs.every((x) => x.range), JSON.stringify(reqs.filter((x) => !x.range).slice(0, 5)));
      assert.equal(reqs.length, 2 * (1 + reads[file]), `${reqs.length} range requests for ${file}`);
      await page.close();
    }
  } finally {
    await ctx.close();
    await server.close();
  }
});
