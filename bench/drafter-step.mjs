#!/usr/bin/env node
// bench/drafter-step.mjs — what one step of the mesh coordinator's draft model costs (the wasm
// Drafter, bindings/drafter.mjs; kw_drafter_*), at the positions a mesh speculation run drafts
// at: the draft primed with the prompt, then --proposals proposals of --n tokens, each appended
// to the history as if accepted, in rounds of --round proposals that start again from the
// prompt (the draft truncates its KV to the common prefix), so positions stay in
// [prompt, prompt + round * n). One JSON line on stdout (and --out FILE.jsonl):
//   node bench/drafter-step.mjs [--root DIR] [--label NAME] [--draft q6_k] [--prompt code-edit]
//                               [--proposals 100] [--round 25] [--n 4] [--out FILE]
// --root: the checkout whose bindings/ and build/wasm/ run (A/B: a baseline checkout against
// this one, alternated by the caller). Fields: msPerStep (wall), cpuMsPerStep (this process's
// user + system CPU), steps, positions [first, last], kvType (the draft's KV element type as
// kw_drafter_new chose it; absent before it reported one), idsHash (FNV-1a of every proposed
// id: the same drafts give the same hash), loadavg.
import {appendFileSync} from "node:fs";
import {loadavg, cpus} from "node:os";
import {join, resolve, dirname} from "node:path";
import {fileURLToPath, pathToFileURL} from "node:url";
import {PROMPTS} from "./lib/prompts.mjs";

const here = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const args = process.argv.slice(2);
const opt = (name, def) => { const i = args.indexOf(name); return i >= 0 ? args.splice(i, 2)[1] : def; };
const root = resolve(opt("--root", here)), label = opt("--label", root);
const twin = opt("--draft", "q6_k"), kind = opt("--prompt", "code-edit"), outFile = opt("--out", null);
const nProposals = Number(opt("--proposals", 100)), round = Number(opt("--round", 25)), n = Number(opt("--n", 4));
if (!PROMPTS[kind]) { console.error(`--prompt: unknown prompt kind ${kind} (${Object.keys(PROMPTS).join(", ")})`); process.exit(2); }
if (!(nProposals > 0 && round > 0 && n > 0)) { console.error("--proposals, --round and --n must be positive"); process.exit(2); }

const kw = await import(pathToFileURL(join(root, "bindings/knotwork.mjs")).href);
const {Drafter} = await import(pathToFileURL(join(root, "bindings/drafter.mjs")).href);
const sharedDir = process.env.KNOT_SHARED_MODELS ?? "/work/shared/models";
const load = async (name) => {
  const src = await kw.fileSource(join(sharedDir, name));
  const g = await kw.openModel(src);
  try { return await kw.openModel(kw.bytesSource(g.toKnot(), name.replace(/\.gguf$/, ".knot"))); } finally { g.close(); await src.close(); }
};
const target = await load("stories260K-pad256-llama-q8_0.gguf");
const draft = await load(`stories260K-pad256-llama-${twin}.gguf`);
const prompt = target.tokenize(PROMPTS[kind]);
const d = await Drafter.open(draft, target, {nCtx: 2048, n});

let hash = 0x811c9dc5, steps = 0, hist = prompt;
const fnv = (x) => { for (let b = 0; b < 4; b++) hash = Math.imul(hash ^ ((x >>> (8 * b)) & 255), 0x01000193) >>> 0; };
d.prime(prompt);
d.propose(prompt, n);  // warm-up (its steps are not counted)
const c0 = process.cpuUsage(), t0 = performance.now();
for (let i = 0; i < nProposals; i++) {
  if (i % round === 0) hist = prompt;
  const {ids} = d.propose(hist, n);
  for (const id of ids) fnv(id);
  steps += ids.length;
  hist = hist.concat(ids);
}
const wall = performance.now() - t0, cu = process.cpuUsage(c0);
const line = {bench: "drafter-step", date: new Date().toISOString().replace(/\.\d+Z$/, "Z"), model: `stories260K-pad256-llama-${twin}`,
  prompt: kind, binary: label, msPerStep: +(wall / steps).toFixed(3), cpuMsPerStep: +((cu.user + cu.system) / 1000 / steps).toFixed(3),
  steps, positions: [prompt.length, prompt.length + round * n - 1], kvType: d.info.kv_type, idsHash: hash.toString(16),
  cores: cpus().length, loadavg: +loadavg()[0].toFixed(2)};
d.free(); draft.close(); target.close();
console.log(JSON.stringify(line));
if (outFile) appendFileSync(outFile, JSON.stringify(line) + "\n");
