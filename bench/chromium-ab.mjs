#!/usr/bin/env node
// bench/chromium-ab.mjs — two wasm module files A and B (e.g. main's build and a branch's)
// generating on the same model in ONE headless Chromium, alternately: page A runs one
// completion, then page B, for --rounds rounds, so both see the same host load (the shared
// build machine's load moves 2-3x within a minute; separate bench/chromium.mjs runs are
// not comparable on it). bench/chromium-page.html's protocol per completion: BOS + the
// first --prompt-tokens tokens of bench/prompt.txt, --decode greedy steps, EOS ignored;
// >= 3 s of warm-up completions per page first. One JSON line: per variant the median
// prefill/decode tok/s and every round's figure, b_over_a = median over rounds of B/A of
// the same round, and whether A and B produced the same token ids (bit-exact kernels:
// they must).
//
//   node bench/chromium-ab.mjs MODEL.gguf --a A.wasm --b B.wasm [--rounds 5] [--prompt-tokens 128] [--decode 128]
import {existsSync, readFileSync} from "node:fs";
import {basename, dirname, join, resolve} from "node:path";
import {fileURLToPath} from "node:url";
import {bindingsRoutes, launchChromium, serveFiles} from "../tests/wasm/helpers.mjs";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const args = process.argv.slice(2);
const opt = (k, d) => { const i = args.indexOf(k); return i >= 0 ? args.splice(i, 2)[1] : d; };
const nPrompt = Number(opt("--prompt-tokens", 128)), nDecode = Number(opt("--decode", 128)), rounds = Number(opt("--rounds", 5));
const A = opt("--a"), B = opt("--b"), model = args[0];
if (!model || !existsSync(model) || !A || !existsSync(A) || !B || !existsSync(B)) {
  console.error("usage: node bench/chromium-ab.mjs MODEL --a A.wasm --b B.wasm [--rounds R] [--prompt-tokens N] [--decode N]");
  process.exit(2);
}
const loadavg = () => Number(readFileSync("/proc/loadavg", "utf8").split(" ")[0]);
const server = await serveFiles({
  "/bench/prompt.txt": join(ROOT, "bench/prompt.txt"),
  "/blank.html": join(ROOT, "bench/chromium-page.html"),  // any same-origin page: only its origin is used
  ...bindingsRoutes(),
  "/a.wasm": resolve(A), "/b.wasm": resolve(B), "/model": resolve(model),
});
const ctx = await launchChromium();
const la0 = loadavg();
try {
  const pages = {};
  for (const v of ["a", "b"]) {
    const page = await ctx.newPage();
    await page.route("**/blank.html", (r) => r.fulfill({contentType: "text/html", body: "<!doctype html><title>ab</title>"}));
    await page.goto(`${server.url}/blank.html`);
    await page.evaluate(async ([v, nPrompt, nDecode]) => {
      const kw = await import("/bindings/knotwork.mjs");
      await kw.init(new URL(`/${v}.wasm`, location.href));
      const text = (await (await fetch("/bench/prompt.txt")).text()).trimEnd();
      const m = await kw.openModel(await kw.urlSource(new URL("/model", location.href).href));
      const prompt = m.tokenize(text.repeat(8), {addBos: true}).slice(0, nPrompt);
      const opts = {maxTokens: nDecode + 1, temperature: 0, ignoreEos: true, nCtx: nPrompt + nDecode + 8};
      const tw = performance.now();
      do await m.complete(prompt, opts); while (performance.now() - tw < 3000);
      window.abRun = async () => {
        const r = await m.complete(prompt, opts);
        return {prefillTokS: r.prefillTokS, decodeTokS: r.decodeTokS, ids: r.ids.join(), nDecoded: r.nDecoded};
      };
    }, [v, nPrompt, nDecode]);
    pages[v] = page;
  }
  const res = {a: [], b: []};
  for (let r = 0; r < rounds; r++)
    for (const v of ["a", "b"]) res[v].push(await pages[v].evaluate(() => window.abRun()));
  const med = (xs) => [...xs].sort((x, y) => x - y)[xs.length >> 1];
  const fig = (v) => ({file: A && v === "a" ? A : B, prefillTokS: +med(res[v].map((x) => x.prefillTokS)).toFixed(1),
                       decodeTokS: +med(res[v].map((x) => x.decodeTokS)).toFixed(1),
                       decodeTokSRounds: res[v].map((x) => +x.decodeTokS.toFixed(1)),
                       prefillTokSRounds: res[v].map((x) => +x.prefillTokS.toFixed(1))});
  const ratio = (k) => +med(res.a.map((x, i) => res.b[i][k] / x[k])).toFixed(3);
  if (res.a.some((x) => x.nDecoded !== nDecode)) throw new Error(`expected ${nDecode} decode steps`);
  console.log(JSON.stringify({bench: "chromium-ab", model: basename(model), promptTokens: nPrompt, decodeTokens: nDecode, rounds,
                              a: fig("a"), b: fig("b"), b_over_a: {decode: ratio("decodeTokS"), prefill: ratio("prefillTokS")},
                              sameIds: res.a.every((x, i) => x.ids === res.b[i].ids && x.ids === res.a[0].ids),
                              loadavg: [la0, loadavg()], browser: (await pages.a.evaluate(() => navigator.userAgent)).match(/Chrome\/[\d.]+/)?.[0]}));
} finally {
  await ctx.close();
  await server.close();
}
