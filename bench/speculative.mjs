#!/usr/bin/env node
// bench/speculative.mjs — prompt-lookup speculative decoding (--lookup K) against plain
// decoding, on the mesh (workerd via Miniflare) and in a single process, in the same run.
// One JSON line per model x prompt kind x runtime on stdout (and --out FILE.jsonl):
//   node bench/speculative.mjs [--lookup 6] [--decode 48] [--runs 3] [--stations 2,3] [--shards 2] [--out FILE]
// Models: the shared stories260K (KNOT_SHARED_MODELS or /work/shared/models; skipped when
// absent) and a `knot synth` llama (hidden 768, 4 layers, FFN 2048, vocab 512, Q4_K_M).
// Prompt kinds: "code-edit" (the reply repeats much of the prompt: a block of code and the
// start of its edited copy) and "story" (free text). Greedy, EOS ignored; one warm-up, then
// the median of --runs. Fields: decodeTokS {plain, lookup}, speedup (lookup / plain, same
// runtime), acceptance (accepted / drafted), drafted, accepted, sameIds (lookup == plain ==
// single process), draft: "lookup".
import {execFileSync} from "node:child_process";
import {mkdtempSync, readFileSync, rmSync, existsSync, appendFileSync} from "node:fs";
import {tmpdir, cpus, loadavg} from "node:os";
import {join, resolve, dirname} from "node:path";
import {fileURLToPath} from "node:url";
import * as kw from "../bindings/knotwork.mjs";
import {startMesh} from "../deploy/miniflare.mjs";
import {topologyFromCounts} from "../workers/lib/topology.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const args = process.argv.slice(2);
const opt = (name, def) => { const i = args.indexOf(name); return i >= 0 ? args.splice(i, 2)[1] : def; };
const lookup = Number(opt("--lookup", 6)), nDecode = Number(opt("--decode", 48)), nRuns = Number(opt("--runs", 3));
const stations = opt("--stations", "2,2").split(",").map(Number), shards = Number(opt("--shards", 2));
const outFile = opt("--out", null);
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

const CODE = `function area(width, height) {
  const w = Number(width);
  const h = Number(height);
  if (w < 0 || h < 0) throw new Error("negative size");
  return w * h;
}
function perimeter(width, height) {
  const w = Number(width);
  const h = Number(height);
  if (w < 0 || h < 0) throw new Error("negative size");
  return 2 * (w + h);
}
`;
const PROMPTS = {
  "code-edit": `Rename width to x in this code:\n${CODE}\nThe code with width renamed to x:\nfunction area(x, height) {\n  const w = Number(x);\n`,
  story: "Once upon a time there was a little girl named Lily. She loved to play in the park with her",
};

const models = [];
const sharedDir = process.env.KNOT_SHARED_MODELS ?? "/work/shared/models";
const stories = join(sharedDir, "stories260K-pad256-llama-q4_k_m.gguf");
if (existsSync(stories)) {
  const mm = await kw.openModel(await kw.fileSource(stories));
  models.push({name: "stories260K-pad256-llama-q4_k_m", bytes: mm.toKnot(), stations: [2, 3]});
  mm.close();
}
{
  const knot = process.env.KNOT_BIN ?? join(root, "build/bin/knot");
  if (!existsSync(knot)) { console.error(`${knot} missing: build the native CLI`); process.exit(2); }
  const dir = mkdtempSync(join(tmpdir(), "knot-bench-spec-"));
  const out = join(dir, "synth.knot");
  execFileSync(knot, ["synth", "--arch", "llama", "--hidden", "768", "--layers", String(stations.reduce((a, b) => a + b, 0)),
    "--heads", "12", "--kv-heads", "4", "--ffn", "2048", "--vocab", "512", "--type", "Q4_K_M", "--seed", "1", out]);
  models.push({name: "synth llama hidden 768 FFN 2048 Q4_K_M", bytes: new Uint8Array(readFileSync(out)), stations, synth: true});
  rmSync(dir, {recursive: true});
}

const lines = [];
for (const model of models) {
  const m = await kw.openModel(kw.bytesSource(model.bytes, "bench.knot"));
  // a synth model's tokenizer is arbitrary: its "code edit" is a token block and its copy's start
  const promptIds = model.synth
    ? {"code-edit": (() => { const b = Array.from({length: 40}, (_, i) => 3 + (i * 53) % 500); return [1, ...b, 7, ...b.slice(0, 6)]; })(),
       story: [1, ...Array.from({length: 40}, (_, i) => 3 + (i * 37) % 500)]}
    : Object.fromEntries(Object.entries(PROMPTS).map(([k, p]) => [k, m.tokenize(p)]));
  const options = {maxTokens: nDecode, temperature: 0, ignoreEos: true};
  const single = {};
  for (const [kind, ids] of Object.entries(promptIds)) {
    const r = {plain: [], lookup: []};
    for (let i = 0; i <= nRuns; i++) {
      r.plain.push(await m.complete(ids, options));
      r.lookup.push(await m.complete(ids, {...options, lookup}));
    }
    single[kind] = {plain: r.plain.slice(1), lookup: r.lookup.slice(1)};
  }
  m.close();
  const config = (await kw.parseKnotHeader(kw.bytesSource(model.bytes, "bench.knot"))).config;
  const topology = topologyFromCounts(config, {knot: "model.knot", stations: model.stations, shards});
  const mesh = await startMesh({knotBytes: model.bytes, topology});
  const meshRuns = {};
  try {
    for (const [kind, ids] of Object.entries(promptIds)) {
      const r = {plain: [], lookup: []};
      for (let i = 0; i <= nRuns; i++) {
        for (const mode of ["plain", "lookup"]) {
          const res = await mesh.run({ids, options: mode === "lookup" ? {...options, lookup} : options});
          if (res.error) throw new Error(res.error.error);
          if (i > 0) r[mode].push(res.summary);
        }
      }
      meshRuns[kind] = r;
    }
  } finally { await mesh.close(); }
  for (const kind of Object.keys(promptIds)) {
    const want = JSON.stringify(single[kind].plain[0].ids);
    for (const [runtime, r] of [["single", single[kind]], ["mesh", meshRuns[kind]]]) {
      const plain = median(r.plain.map((s) => s.decodeTokS)), spec = median(r.lookup.map((s) => s.decodeTokS));
      const sp = r.lookup[0].speculative;
      const line = {
        bench: "speculative", date: new Date().toISOString(), model: model.name, prompt: kind, runtime, draft: "lookup", lookup,
        topology: runtime === "mesh" ? {stations: model.stations, shards} : undefined, promptTokens: promptIds[kind].length,
        decodeTokens: nDecode, runs: nRuns,
        decodeTokS: {plain, lookup: spec}, speedup: spec / plain, acceptance: sp.acceptance, drafted: sp.drafted, accepted: sp.accepted,
        sameIds: [...r.plain, ...r.lookup].every((s) => JSON.stringify(s.ids) === want),
        cores: cpus().length, loadavg: +loadavg()[0].toFixed(2),
      };
      lines.push(line);
      console.log(JSON.stringify(line));
      if (outFile) appendFileSync(outFile, JSON.stringify(line) + "\n");
    }
  }
}
