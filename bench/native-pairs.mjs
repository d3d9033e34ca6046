#!/usr/bin/env node
// bench/native-pairs.mjs — our native engine against llama.cpp native, in alternating pairs.
//
//   node bench/native-pairs.mjs --peers /tmp/peers FILE.gguf [FILE.gguf ...] [--pairs N]
//
// On a VM the same binary's tok/s moves by ±30% between invocations a minute apart (CPU boost,
// neighbours), so one run of each side is not a ratio. This runs N pairs (default 5): ours
// (build/bin/bench_generate: the peers' protocol, a 128-token prompt and 128 greedy decode
// steps, median of 3 runs after a warm-up) then llama.cpp (the peers' own
// lib/native-bench.mjs with the same settings), back to back, and reports each pair's ratio
// and the median ratio per file. One JSON line per file on stdout, progress on stderr.
import {execFileSync} from "node:child_process";
import {existsSync, readFileSync} from "node:fs";
import {basename, dirname, resolve} from "node:path";
import {fileURLToPath} from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const args = process.argv.slice(2);
const opt = (name, def) => { const i = args.indexOf(name); return i >= 0 ? args.splice(i, 2)[1] : def; };
const peers = opt("--peers", "/tmp/peers"), pairs = Number(opt("--pairs", "5"));
const kit = resolve(root, "../shared/peers/lib/native-bench.mjs");
const ours = resolve(root, "build/bin/bench_generate");
if (!args.length || !(pairs >= 1) || !existsSync(kit) || !existsSync(ours) || !existsSync(resolve(peers, "node_modules"))) {
  console.error("usage: node bench/native-pairs.mjs --peers DIR FILE.gguf [...] [--pairs N]\n" +
                `  needs ${ours} (scripts/build.sh), ${kit} and DIR from ../shared/peers/setup.sh`);
  process.exit(2);
}
const load = () => Number(readFileSync("/proc/loadavg", "utf8").split(" ")[0]);
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[s.length >> 1]; };
const lastJson = (out) => JSON.parse(out.trim().split("\n").filter((l) => l.startsWith("{")).pop());

for (const file of args) {
  const rows = [];
  for (let p = 0; p < pairs; p++) {
    const l0 = load();
    const o = lastJson(execFileSync(ours, [file], {encoding: "utf8", stdio: ["ignore", "pipe", "ignore"]}));
    const n = lastJson(execFileSync("node", [kit, peers, file, "1", "128", "128", "1", "3", "3"],
                                    {encoding: "utf8", stdio: ["ignore", "pipe", "ignore"]}));
    const row = {ours: {prefill: o.prefill_tok_s, decode: o.decode_tok_s}, llamacpp: {prefill: n.promptTokS, decode: n.decodeTokS},
                 ratio: {prefill: o.prefill_tok_s / n.promptTokS, decode: o.decode_tok_s / n.decodeTokS}, loadavg: [l0, load()]};
    console.error(`[pairs] ${basename(file)} ${p + 1}/${pairs}: ${JSON.stringify(row)}`);
    rows.push(row);
  }
  console.log(JSON.stringify({bench: "native-pairs", date: new Date().toISOString(), model: basename(file), simd: "default (bench_generate)",
                              threads: 1, promptTokens: 128, decodeTokens: 128, pairs: rows,
                              medianRatio: {prefill: median(rows.map((r) => r.ratio.prefill)), decode: median(rows.map((r) => r.ratio.decode))},
                              median: {ours: {prefill: median(rows.map((r) => r.ours.prefill)), decode: median(rows.map((r) => r.ours.decode))},
                                       llamacpp: {prefill: median(rows.map((r) => r.llamacpp.prefill)), decode: median(rows.map((r) => r.llamacpp.decode))}}}));
}
