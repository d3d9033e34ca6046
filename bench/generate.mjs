#!/usr/bin/env node
// bench/generate.mjs — prefill and decode tokens/s of the wasm module under Node, JSON.
//
//   node bench/generate.mjs [MODEL] [--prompt-tokens N] [--decode N] [--runs R] [--reference] [--threads T]
//
// --threads T: the threaded module (build/wasm/knotwork-mt.wasm) with T threads; the JSON
// then also has cpuMsPerRun (this process's user+system CPU per measured run, median: the
// workers' CPU included, spinning too) next to the wall-clock figures.
//
// Defaults follow the peer benchmark (/work/shared/peers): a 128-token prompt (BOS + the
// first 127 tokens of bench/prompt.txt, exactly the ids bench_generate uses natively —
// both print promptIdsHash), 128 greedy single-token decode steps with
// EOS ignored, a warm-up (>= 1 run and >= 3 s, V8 tiers wasm up during the first runs),
// then the median of R runs (default 3). prefill tok/s = prompt / prefill time; decode
// tok/s = decode steps / their time (each step samples and runs one forward pass).
import {existsSync, readFileSync} from "node:fs";
import {fileURLToPath} from "node:url";
import {dirname, resolve, basename} from "node:path";
import * as kw from "../bindings/knotwork.mjs";

const args = process.argv.slice(2);
const flag = (name, def) => { const i = args.indexOf(name); return i >= 0 ? Number(args.splice(i, 2)[1]) : def; };
const bool = (name) => { const i = args.indexOf(name); if (i >= 0) args.splice(i, 1); return i >= 0; };
const nPrompt = flag("--prompt-tokens", 128), nDecode = flag("--decode", 128), runs = flag("--runs", 3);
const reference = bool("--reference");
const threads = flag("--threads", undefined);
if (threads !== undefined) await kw.init(undefined, {threads});
const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const model = args[0] ?? resolve(root, "../shared/models/stories260K-pad256-llama-q4_k_m.gguf");
if (!existsSync(model)) {
  console.error(`usage: node bench/generate.mjs [MODEL] [--prompt-tokens N] [--decode N] [--runs R] [--reference]\nno such model: ${model}`);
  process.exit(2);
}

const TEXT = readFileSync(resolve(root, "bench/prompt.txt"), "utf8").trimEnd();  // shared with bench_generate

// FNV-1a over the ids as little-endian u32 (bench_generate prints the same).
function idsHash(ids) {
  let h = 0x811c9dc5;
  for (const id of ids) for (let k = 0; k < 4; k++) { h ^= (id >>> (8 * k)) & 255; h = Math.imul(h, 0x01000193) >>> 0; }
  return h.toString(16).padStart(8, "0");
}

const t0 = performance.now();
const m = await kw.openModel(model);
const loadMs = performance.now() - t0;
const all = m.tokenize(TEXT.repeat(8), {addBos: true});
if (all.length < nPrompt) throw new Error(`the benchmark text gives only ${all.length} tokens`);
const prompt = all.slice(0, nPrompt);
// maxTokens = decode + 1: the last sampled token needs no forward pass.
const opts = {maxTokens: nDecode + 1, temperature: 0, ignoreEos: true, reference, nCtx: nPrompt + nDecode + 8};
const once = () => m.complete(prompt, opts);

const tw = performance.now();
let warm = 0;
do { await once(); warm++; } while (performance.now() - tw < 3000);
await kw.resetPeakMemory();
const res = [], cpu = [];
for (let r = 0; r < runs; r++) {
  const c0 = process.cpuUsage();
  res.push(await once());
  const c = process.cpuUsage(c0);
  cpu.push((c.user + c.system) / 1000);
}
const med = (f) => res.map(f).sort((a, b) => a - b)[res.length >> 1];
// CPU time of this process (the host is shared: wall figures move with the load): a
// prefill-only call (maxTokens 1: the prompt's forward pass, no decode step) and a full
// call, alternated --runs times; decode CPU = full - prefill-only. Medians.
const cpuS = (fn) => async () => { const c = process.cpuUsage(); await fn(); const d = process.cpuUsage(c); return (d.user + d.system) / 1e6; };
const cpuPre = [], cpuFull = [];
for (let r = 0; r < runs; r++) {
  cpuPre.push(await cpuS(() => m.complete(prompt, {...opts, maxTokens: 1}))());
  cpuFull.push(await cpuS(once)());
}
const medOf = (a) => a.slice().sort((x, y) => x - y)[a.length >> 1];
const cpuPreS = medOf(cpuPre), cpuDecS = medOf(cpuFull.map((f, i) => f - cpuPre[i]));
const s = res[0];
if (s.nDecoded !== nDecode) throw new Error(`expected ${nDecode} decode steps, ran ${s.nDecoded}`);
const mem = await kw.memoryStats();
console.log(JSON.stringify({
  model: basename(model), mode: s.mode,
  runtime: `wasm (${threads !== undefined ? `knotwork-mt.wasm, ${threads} threads` : "knotwork.wasm"}, Node ${process.version})`,
  ...(threads !== undefined ? {threads, cpuMsPerRun: +cpu.sort((a, b) => a - b)[cpu.length >> 1].toFixed(1)} : {}),
  promptTokens: s.nPrompt, decodeTokens: s.nDecoded,
  prefillTokS: +med((x) => x.prefillTokS).toFixed(1), decodeTokS: +med((x) => x.decodeTokS).toFixed(1),
  prefillTokSCpu: +(nPrompt / cpuPreS).toFixed(1), decodeTokSCpu: +(nDecode / cpuDecS).toFixed(1),
  prefillTokSRuns: res.map((x) => +x.prefillTokS.toFixed(1)), decodeTokSRuns: res.map((x) => +x.decodeTokS.toFixed(1)),
  warmupRuns: warm, runs, loadMs: +loadMs.toFixed(1), tensorBytes: m.info.tensor_bytes,
  promptIdsHash: idsHash(prompt), outIdsHash: idsHash(s.ids), loadavg: +readFileSync("/proc/loadavg", "utf8").split(" ")[0],
  peakLinearBytes: mem.peakLinear, peakHeapBytes: mem.peakHeap, engineBytes: s.engine.engine_bytes,
  sameIdsAcrossRuns: res.every((x) => x.ids.join() === s.ids.join()),
}));
m.close();
await kw.shutdown();
