#!/usr/bin/env node
// bench/serve-parallel.mjs — aggregate decode tok/s of `knotwork serve` with 4 concurrent
// requests vs 1, in the same run (one serve process, --parallel 4), one JSON line.
//
//   node bench/serve-parallel.mjs [MODEL] [--tokens N] [--concurrent C] [--runs R] [--out FILE]
//
// Each request is a streamed completion of N tokens (EOS ignored, greedy, distinct prompts).
// A warm-up request runs first (V8 tiers the wasm up). Then, R times: one request alone,
// then C at once; aggregate tok/s = tokens generated / wall time from the first request
// sent to the last [DONE]. The JSON line goes to stdout and is appended to FILE (default
// bench/serve-parallel-YYYY-MM-DD.jsonl). Not a test: numbers depend on the machine.
// All generations share one JS thread and one wasm instance, so slots overlap the HTTP
// and sampling work of one request with another's forward passes, not two forward passes.
import {appendFileSync, existsSync} from "node:fs";
import {spawn} from "node:child_process";
import {dirname, resolve, basename} from "node:path";
import {fileURLToPath} from "node:url";

const args = process.argv.slice(2);
const opt = (name, def) => { const i = args.indexOf(name); return i >= 0 ? args.splice(i, 2)[1] : def; };
const N = Number(opt("--tokens", 128)), C = Number(opt("--concurrent", 4)), R = Number(opt("--runs", 3));
const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const out = opt("--out", resolve(root, `bench/serve-parallel-${new Date().toISOString().slice(0, 10)}.jsonl`));
const model = args[0] ?? resolve(process.env.KNOT_SHARED_MODELS ?? resolve(root, "../shared/models"), "stories260K-pad256-llama-q4_k_m.gguf");
if (!existsSync(model)) { console.error(`no such model: ${model}`); process.exit(2); }

const proc = spawn(process.execPath, [resolve(root, "bin/knotwork.mjs"), "serve", model, "--port", "0", "--parallel", String(C), "--ctx", String(Math.max(256, N + 64))],
                   {stdio: ["ignore", "ignore", "pipe"]});
let stderr = "";
const url = await new Promise((ok, fail) => {
  proc.stderr.on("data", (d) => { stderr += d; const m = /serving \S+ at (http:\/\/\S+)/.exec(stderr); if (m) ok(m[1]); });
  proc.on("exit", (c) => fail(new Error(`serve exited ${c}: ${stderr}`)));
});
const id = basename(model).replace(/\.(gguf|knot)$/i, "");
const PROMPTS = ["Once upon a time", "The little dog", "Lily wanted to", "One day, a bird", "Tom and his mom", "The sun was", "A big tree", "Ben had a"];

async function one(i) {
  const r = await fetch(`${url}/v1/completions`, {method: "POST", headers: {"content-type": "application/json"},
    body: JSON.stringify({model: id, prompt: PROMPTS[i % PROMPTS.length], max_tokens: N, ignore_eos: true, temperature: 0, stream: true,
                          stream_options: {include_usage: true}})});
  const text = await r.text();
  const usage = [...text.matchAll(/"usage":\{"prompt_tokens":\d+,"completion_tokens":(\d+)/g)].at(-1);
  return Number(usage?.[1] ?? 0);
}

async function batch(n) {
  const t0 = performance.now();
  const toks = await Promise.all(Array.from({length: n}, (_, i) => one(i)));
  const s = (performance.now() - t0) / 1000;
  return {tokens: toks.reduce((a, b) => a + b, 0), seconds: s, tokS: toks.reduce((a, b) => a + b, 0) / s};
}

try {
  await batch(1);  // warm-up
  const solo = [], par = [];
  for (let r = 0; r < R; r++) { solo.push(await batch(1)); par.push(await batch(C)); }
  const median = (xs) => xs.map((x) => x.tokS).sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const line = {bench: "serve-parallel", date: new Date().toISOString(), node: process.version, model: basename(model),
                tokensPerRequest: N, concurrent: C, runs: R,
                soloTokS: +median(solo).toFixed(1), concurrentAggregateTokS: +median(par).toFixed(1),
                speedup: +(median(par) / median(solo)).toFixed(3),
                solo: solo.map((x) => +x.tokS.toFixed(1)), concurrentRuns: par.map((x) => +x.tokS.toFixed(1))};
  const json = JSON.stringify(line);
  console.log(json);
  appendFileSync(out, json + "\n");
} finally {
  proc.kill("SIGTERM");
}
