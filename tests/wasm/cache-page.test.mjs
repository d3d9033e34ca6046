// The browser model cache (openCachedModel, bindings/knotwork.mjs; cachedUrlSource,
// bindings/sources.mjs) in headless Chromium: the first load downloads the .knot once and
// stores it in the Cache API; a reload reads it from there with no request for the model's
// bytes; a cached copy with one flipped byte fails the tensor hash check, is evicted and
// fetched again; the ids are the same every time. A .gguf is refused (no hashes).
import {test} from "node:test";
import assert from "node:assert/strict";
import {writeFileSync} from "node:fs";
import {join} from "node:path";

import * as kw from "../../bindings/knotwork.mjs";
import {ROOT, WASM_PATH, bindingsRoutes, sharedModel, serveFiles, tmpDir, haveChromium, launchChromium} from "./helpers.mjs";


test("Chromium: the .knot is cached; a reload makes no request for it; a corrupted cached copy is detected and fetched again", {timeout: 120_000}, async (t) => {
  const gguf = sharedModel(t, "stories260K.gguf");
  if (!gguf) return;
  if (!haveChromium(t)) return;
  const g = await kw.openModel(gguf);
  const knotPath = join(tmpDir(), "m.knot");
  writeFileSync(knotPath, g.toKnot());
  const want = (await g.complete("Once upon a time", {maxTokens: 16, temperature: 0})).ids;
  g.close();
  const routes = {"/tests/wasm/cache-page.html": join(ROOT, "tests/wasm/cache-page.html"), "/build/wasm/knotwork.wasm": WASM_PATH,
                  "/models/m.knot": knotPath, "/models/m.gguf": gguf};
  Object.assign(routes, bindingsRoutes());
  const server = await serveFiles(routes);
  t.after(() => server.close());
  const ctx = await launchChromium();
  t.after(() => ctx.close());
  const page = await ctx.newPage();
  const logs = [];
  page.on("console", (m) => logs.push(`${m.type()}: ${m.text()}`));
  page.on("pageerror", (e) => logs.push(`pageerror: ${e.message}`));
  const modelRequests = () => server.log.filter((r) => r.path === "/models/m.knot").length;
  const load = async (first) => {
    if (first) await page.goto(`${server.url}/tests/wasm/cache-page.html?model=/models/m.knot`);
    else await page.reload();
    await page.waitForFunction(() => window.knotResult, null, {timeout: 60_000});
    const r = await page.evaluate(() => window.knotResult);
    assert.ok(!r.error, `${r.error}\n${logs.join("\n")}`);
    assert.deepEqual(r.ids, want, "the same ids as in Node");
    return r;
  };

  const first = await load(true);
  assert.deepEqual(first.cache, {hit: false, refetched: false});
  assert.equal(modelRequests(), 1, "downloaded once");

  const second = await load(false);
  assert.deepEqual(second.cache, {hit: true, refetched: false});
  assert.equal(modelRequests(), 1, "a reload makes no request for the model's bytes");

  await page.evaluate(() => window.corruptCached());
  const third = await load(false);
  assert.equal(third.cache.hit, false);
  assert.equal(third.cache.refetched, true);
  assert.match(third.cache.reason, /hash/, "the corrupted copy failed the tensor hash check");
  assert.equal(modelRequests(), 2, "fetched again");

  const fourth = await load(false);
  assert.deepEqual(fourth.cache, {hit: true, refetched: false}, "the fresh copy is cached");
  assert.equal(modelRequests(), 2);

  // a .gguf cannot be verified on reuse: refused, and not left in the cache
  await page.goto(`${server.url}/tests/wasm/cache-page.html?model=/models/m.gguf`);
  await page.waitForFunction(() => window.knotResult, null, {timeout: 60_000});
  const gg = await page.evaluate(() => window.knotResult);
  assert.match(gg.error ?? "", /caches \.knot files only/);
  assert.equal(await page.evaluate(async () => !!(await (await caches.open("knotwork-models")).match(new URL("/models/m.gguf", location.href).href))), false);
});
