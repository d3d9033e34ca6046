#!/usr/bin/env node
// bench/chromium.mjs — our wasm module's prefill/decode tok/s inside headless Chromium
// (the browser wllama runs in: ../shared/peers/bench.sh), on the same model file, with
// bench/generate.mjs's protocol. One JSON object.
//
//   node bench/chromium.mjs MODEL.gguf|.knot [--prompt-tokens 128] [--decode 128] [--runs 3] [--wasm-dir DIR]
import {existsSync} from "node:fs";
import {execFileSync} from "node:child_process";
import {basename, dirname, join, resolve} from "node:path";
import {fileURLToPath} from "node:url";
import {ISOLATED, bindingsRoutes, serveFiles, CHROMIUM, launchChromium} from "../tests/wasm/helpers.mjs";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const args = process.argv.slice(2);
const flag = (k, d) => { const i = args.indexOf(k); return i >= 0 ? Number(args.splice(i, 2)[1]) : d; };
const nPrompt = flag("--prompt-tokens", 128), nDecode = flag("--decode", 128), runs = flag("--runs", 3);
// --relaxed: the relaxed-SIMD module (build/wasm/knotwork-relaxed.wasm) instead of the baseline.
const ri = args.indexOf("--relaxed");
// --threads T: the threaded module (build/wasm/knotwork-mt.wasm) with T threads, on a page
// served cross-origin isolated (COOP/COEP).
const threads = flag("--threads", undefined);
// --wasm-dir DIR: serve the module from DIR (e.g. a copy of an earlier build, for before/after
// pairs) instead of this checkout's build/wasm.
const wdi = args.indexOf("--wasm-dir");
const wasmDir = wdi >= 0 ? resolve(args.splice(wdi, 2)[1]) : join(ROOT, "build/wasm");
const wasmFile = threads !== undefined ? "knotwork-mt.wasm" : ri >= 0 ? (args.splice(ri, 1), "knotwork-relaxed.wasm") : "knotwork.wasm";
const model = args[0];
if (!model || !existsSync(model)) {
  console.error("usage: node bench/chromium.mjs MODEL [--prompt-tokens N] [--decode N] [--runs R] [--relaxed | --threads T] [--wasm-dir DIR]");
  process.exit(2);
}
const server = await serveFiles({
  "/bench/chromium-page.html": join(ROOT, "bench/chromium-page.html"),
  "/bench/prompt.txt": join(ROOT, "bench/prompt.txt"),
  ...bindingsRoutes(),
  [`/build/wasm/${wasmFile}`]: join(wasmDir, wasmFile),
  "/model": resolve(model),
}, {headers: threads !== undefined ? ISOLATED : {}});
const ctx = await launchChromium();
try {
  const page = await ctx.newPage();
  const logs = [];
  page.on("console", (m) => logs.push(m.text()));
  page.on("pageerror", (e) => logs.push(`pageerror: ${e.message}`));
  await page.goto(`${server.url}/bench/chromium-page.html?prompt=${nPrompt}&decode=${nDecode}&runs=${runs}&wasm=${wasmFile}${threads !== undefined ? `&threads=${threads}` : ""}`);
  await page.waitForFunction(() => window.knotResult, null, {timeout: 600_000, polling: 500});
  const r = await page.evaluate(() => window.knotResult);
  if (r.error) throw new Error(`${r.error}\n${logs.join("\n")}`);
  if (r.decodeTokens !== nDecode) throw new Error(`expected ${nDecode} decode steps, ran ${r.decodeTokens}`);
  const browser = execFileSync(CHROMIUM, ["--version"], {encoding: "utf8"}).trim();
  console.log(JSON.stringify({model: basename(model), runtime: `wasm (${wasmFile}${threads !== undefined ? `, ${threads} threads` : ""}, headless ${browser})`,
                                ...(threads !== undefined ? {threads} : {}), ...r}));
} finally {
  await ctx.close();
  await server.close();
}
