#!/usr/bin/env node
// bench/speculative.mjs — prompt-lookup speculative decoding (--lookup K) against plain
// decoding, on the mesh (workerd via Miniflare) and in a single process, in the same run.
// One JSON line per model x prompt kind x runtime on stdout (and --out FILE.jsonl):
//   node bench/speculative.mjs [--lookup 6] [--decode 48] [--runs 3] [--stations 2,3] [--shards 2] [--out FILE]
//                              [--kinds code-edit,story,repeat] [--mesh-only (stories260K on the mesh and one process)]
//                              [--single-only (plain vs lookup in one process (wasm) only: no mesh, no draft models)]
// Models: the shared stories260K (KNOT_SHARED_MODELS or /work/shared/models; skipped when
// absent) and a `knot synth` llama (hidden 768, 4 layers, FFN 2048, vocab 512, Q4_K_M).
// Prompt kinds (lib/prompts.mjs): "code-edit" (the reply repeats much of the prompt: a block
// of code and the start of its edited copy), "story" (free text), "repeat" (a story whose
// reply repeats its sentences, which stories260K copies). Greedy, EOS ignored; one warm-up, then
// the median of --runs. Fields: decodeTokS {plain, lookup}, speedup (lookup / plain, same
// runtime), acceptance (accepted / drafted), drafted, accepted, sameIds (lookup == plain ==
// single process), draft: "lookup".
// --mesh-draft: only the mesh's plain vs lookup vs draft model (the coordinator's DRAFT), below.
// --processes (with --mesh-draft): each station member and shard in its own workerd process.
// The single-process draft-model lines come from build/bin/knot generate (runtime "native") and the wasm API (runtime "wasm"):
// plain vs lookup vs draft model, same runtime, same run: the q8_0 target stories260K-pad256 with its own q4_k_m as the draft,
// and the synth llama in Q8_0 with its Q4_K_M twin as the draft (same shape: the draft is
// only ~1.6x cheaper than the target there, an upper-bound acceptance, not a speedup case).
// Fields: decodeTokS {plain, lookup, draft}, speedup {lookup, draft} over plain, acceptance
// {lookup, draft}, sameIds. --native-only skips the wasm and mesh runs.
import {execFileSync, spawnSync} from "node:child_process";
import {mkdtempSync, readFileSync, rmSync, existsSync, appendFileSync} from "node:fs";
import {tmpdir, cpus, loadavg} from "node:os";
import {join, resolve, dirname} from "node:path";
import {fileURLToPath} from "node:url";
import * as kw from "../bindings/knotwork.mjs";
import {startMesh} from "../deploy/miniflare.mjs";
import {topologyFromCounts} from "../workers/lib/topology.mjs";
import {PROMPTS} from "./lib/prompts.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const args = process.argv.slice(2);
const opt = (name, def) => { const i = args.indexOf(name); return i >= 0 ? args.splice(i, 2)[1] : def; };
const lookup = Number(opt("--lookup", 6)), nDecode = Number(opt("--decode", 48)), nRuns = Number(opt("--runs", 3));
const stations = opt("--stations", "2,2").split(",").map(Number), shards = Number(opt("--shards", 2));
const outFile = opt("--out", null), draftN = Number(opt("--draft-n", 4));
// --processes (with --mesh-draft): each station member and shard in its own workerd process, so
// the coordinator drafts while the stations verify, as isolates on separate machines would
const processes = args.includes("--processes");
const nativeOnly = args.includes("--native-only"), meshOnly = args.includes("--mesh-only"), singleOnly = args.includes("--single-only");
const kinds = opt("--kinds", Object.keys(PROMPTS).join(",")).split(",");
for (const k of kinds) if (!PROMPTS[k]) { console.error(`--kinds: unknown prompt kind ${k} (${Object.keys(PROMPTS).join(", ")})`); process.exit(2); }
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];


const models = [];
const sharedDir = process.env.KNOT_SHARED_MODELS ?? "/work/shared/models";
const stories = join(sharedDir, "stories260K-pad256-llama-q4_k_m.gguf");
if (existsSync(stories)) {
  const mm = await kw.openModel(await kw.fileSource(stories));
  models.push({name: "stories260K-pad256-llama-q4_k_m", bytes: mm.toKnot(), stations: [2, 3]});
  mm.close();
}
if (!meshOnly) {
  const knot = process.env.KNOT_BIN ?? join(root, "build/bin/knot");
  if (!existsSync(knot)) { console.error(`${knot} missing: build the native CLI`); process.exit(2); }
  const dir = mkdtempSync(join(tmpdir(), "knot-bench-spec-"));
  const out = join(dir, "synth.knot");
  execFileSync(knot, ["synth", "--arch", "llama", "--hidden", "768", "--layers", String(stations.reduce((a, b) => a + b, 0)),
    "--heads", "12", "--kv-heads", "4", "--ffn", "2048", "--vocab", "512", "--type", "Q4_K_M", "--seed", "1", out]);
  models.push({name: "synth llama hidden 768 FFN 2048 Q4_K_M", bytes: new Uint8Array(readFileSync(out)), stations, synth: true});
  rmSync(dir, {recursive: true});
}

// ---- mesh: plain vs lookup vs the coordinator's draft model (--mesh-draft) ------------------
// The q8_0 stories260K-pad256 target on the mesh with each quantized twin as the deployment's
// draft (DRAFT: q6_k, q4_k_m), modes interleaved run by run so the host's load hits them alike.
// One line per draft x prompt kind: decodeTokS {plain, lookup, draft}, speedup {lookup, draft}
// over plain (the same mesh, the same run), acceptance {lookup, draft}, passes, sameIds.
if (args.includes("--mesh-draft")) {
  const q8 = join(sharedDir, "stories260K-pad256-llama-q8_0.gguf");
  const knotOf = async (p) => { const mm = await kw.openModel(await kw.fileSource(p)); try { return mm.toKnot(); } finally { mm.close(); } };
  const target = await knotOf(q8);
  const tm = await kw.openModel(kw.bytesSource(target, "bench.knot"));
  const promptIds = Object.fromEntries(kinds.map((k) => [k, tm.tokenize(PROMPTS[k])]));
  tm.close();
  const config = (await kw.parseKnotHeader(kw.bytesSource(target, "bench.knot"))).config;
  const topology = topologyFromCounts(config, {knot: "model.knot", stations: [2, 3], shards});
  for (const twin of opt("--draft-models", "q6_k,q4_k_m").split(",")) {
    const draftBytes = await knotOf(join(sharedDir, `stories260K-pad256-llama-${twin}.gguf`));
    const mesh = await startMesh({knotBytes: target, topology, draftBytes, draft: {knot: "draft.knot", n: draftN}, processes});
    try {
      for (const [kind, ids] of Object.entries(promptIds)) {
        const options = {maxTokens: nDecode, temperature: 0, ignoreEos: true};
        const modes = {plain: {...options, draft: false}, lookup: {...options, draft: false, lookup}, draft: options};
        const r = {plain: [], lookup: [], draft: []};
        const load0 = loadavg()[0];
        for (let i = 0; i <= nRuns; i++) {
          for (const [mode, o] of Object.entries(modes)) {
            const res = await mesh.run({ids, options: o});
            if (res.error) throw new Error(res.error.error);
            if (i > 0) r[mode].push(res.summary);
          }
        }
        const med = (k, f = (s) => s.decodeTokS) => median(r[k].map(f));
        const sp = (k) => r[k][0].speculative;
        const line = {
          bench: "speculative", date: new Date().toISOString(), model: "stories260K-pad256-llama-q8_0", prompt: kind, runtime: "mesh",
          workerd: processes ? "one process per station and shard" : "one process (every isolate on one thread)", draft: "lookup+model", draftModel: `stories260K-pad256-llama-${twin}`, lookup, draftN, topology: {stations: [2, 3], shards},
          promptTokens: ids.length, decodeTokens: nDecode, runs: nRuns,
          decodeTokS: {plain: med("plain"), lookup: med("lookup"), draft: med("draft")},
          speedup: {lookup: med("lookup") / med("plain"), draft: med("draft") / med("plain")},
          acceptance: {lookup: sp("lookup").acceptance, draft: sp("draft").acceptance},
          drafted: {lookup: sp("lookup").drafted, draft: sp("draft").drafted}, accepted: {lookup: sp("lookup").accepted, draft: sp("draft").accepted},
          passes: {plain: med("plain", (s) => s.passes), lookup: med("lookup", (s) => s.passes), draft: med("draft", (s) => s.passes)},
          hops: {plain: med("plain", (s) => s.hops), lookup: med("lookup", (s) => s.hops), draft: med("draft", (s) => s.hops)},
          draftMs: med("draft", (s) => s.speculative.draftMs), draftPrimeMs: med("draft", (s) => s.speculative.draftPrimeMs), decodeMs: {plain: med("plain", (s) => s.decodeMs), draft: med("draft", (s) => s.decodeMs)},
          draftMemory: {weightBytes: sp("draft").draftWeightBytes, kvBytes: sp("draft").draftKvBytes},
          sameIds: [...r.plain, ...r.lookup, ...r.draft].every((s) => JSON.stringify(s.ids) === JSON.stringify(r.plain[0].ids)),
          cores: cpus().length, loadavg: [+load0.toFixed(2), +loadavg()[0].toFixed(2)],
        };
        console.log(JSON.stringify(line));
        if (outFile) appendFileSync(outFile, JSON.stringify(line) + "\n");
      }
    } finally { await mesh.close(); }
  }
  process.exit(0);
}

const lines = [];
for (const model of nativeOnly ? [] : models) {
  const m = await kw.openModel(kw.bytesSource(model.bytes, "bench.knot"));
  // a synth model's tokenizer is arbitrary: its "code edit" is a token block and its copy's start
  const promptIds = model.synth
    ? {"code-edit": (() => { const b = Array.from({length: 40}, (_, i) => 3 + (i * 53) % 500); return [1, ...b, 7, ...b.slice(0, 6)]; })(),
       story: [1, ...Array.from({length: 40}, (_, i) => 3 + (i * 37) % 500)]}
    : Object.fromEntries(kinds.map((k) => [k, m.tokenize(PROMPTS[k])]));
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
  const mesh = singleOnly ? null : await startMesh({knotBytes: model.bytes, topology});
  const meshRuns = {};
  if (mesh) try {
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
    for (const [runtime, r] of [["single", single[kind]], ...(mesh ? [["mesh", meshRuns[kind]]] : [])]) {
      const plain = median(r.plain.map((s) => s.decodeTokS)), spec = median(r.lookup.map((s) => s.decodeTokS));
      const sp = r.lookup[0].speculative;
      const line = {
        bench: "speculative", date: new Date().toISOString(), model: model.name, prompt: kind, runtime, draft: "lookup", lookup,
        topology: runtime === "mesh" ? {stations: model.stations, shards} : undefined, promptTokens: promptIds[kind].length,
        decodeTokens: nDecode, runs: nRuns,
        decodeTokS: {plain, lookup: spec}, speedup: spec / plain, acceptance: sp.acceptance, drafted: sp.drafted, accepted: sp.accepted,
        sameIds: [...r.plain, ...r.lookup].every((s) => JSON.stringify(s.ids) === want),
        ...(runtime === "mesh" ? {passes: {plain: r.plain[0].passes, lookup: r.lookup[0].passes}, verifyPasses: sp.verifyPasses,
                                  messages: {plain: r.plain[0].messages, lookup: r.lookup[0].messages}, rowsCached: sp.rowsCached} : {}),
        cores: cpus().length, loadavg: +loadavg()[0].toFixed(2),
      };
      lines.push(line);
      console.log(JSON.stringify(line));
      if (outFile) appendFileSync(outFile, JSON.stringify(line) + "\n");
    }
  }
}

// ---- native: plain vs lookup vs draft model (knot generate) ----------------------------
if (singleOnly) process.exit(0);
if (!meshOnly) {
  const knot = process.env.KNOT_BIN ?? join(root, "build/bin/knot");
  const dir = mkdtempSync(join(tmpdir(), "knot-bench-draft-"));
  const pairs = [];
  const q8 = join(sharedDir, "stories260K-pad256-llama-q8_0.gguf"), q4 = join(sharedDir, "stories260K-pad256-llama-q4_k_m.gguf");
  if (existsSync(q8) && existsSync(q4)) pairs.push({name: "stories260K-pad256-llama-q8_0", target: q8, draft: q4, draftName: "stories260K-pad256-llama-q4_k_m"});
  for (const type of ["Q8_0", "Q4_K_M"])
    execFileSync(knot, ["synth", "--arch", "llama", "--hidden", "768", "--layers", "4", "--heads", "12", "--kv-heads", "4",
      "--ffn", "2048", "--vocab", "512", "--type", type, "--seed", "1", join(dir, `synth-${type}.knot`)]);
  pairs.push({name: "synth llama hidden 768 FFN 2048 Q8_0", target: join(dir, "synth-Q8_0.knot"), draft: join(dir, "synth-Q4_K_M.knot"),
              draftName: "synth llama hidden 768 FFN 2048 Q4_K_M (same seed)"});
  const run = (model, prompt, extra) => {
    const r = requireSpawn(knot, ["generate", model, "--prompt-file", prompt, "-n", String(nDecode), "--temp", "0", "--ignore-eos", "--ids", ...extra]);
    const dec = /decode (\d+) tokens in ([\d.]+) s \(([\d.]+) tok\/s\)/.exec(r.stderr), sp = /: (\d+) drafted, (\d+) accepted/.exec(r.stderr);
    return {ids: r.stdout.trim(), decodeTokS: Number(dec[3]), drafted: sp ? Number(sp[1]) : 0, accepted: sp ? Number(sp[2]) : 0};
  };
  try {
    for (const pair of pairs) {
      for (const [kind, text] of kinds.map((k) => [k, PROMPTS[k]])) {
        const pf = join(dir, `${kind}.txt`);
        execFileSync("sh", ["-c", 'printf %s "$1" > "$2"', "sh", text, pf]);
        const r = {plain: [], lookup: [], draft: []};
        for (let i = 0; i <= nRuns; i++) {
          const a = run(pair.target, pf, []), b = run(pair.target, pf, ["--lookup", String(lookup)]);
          const c = run(pair.target, pf, ["--draft", pair.draft, "--draft-n", String(draftN)]);
          if (i > 0) r.plain.push(a), r.lookup.push(b), r.draft.push(c);
        }
        const med = (k) => median(r[k].map((x) => x.decodeTokS)), acc = (k) => r[k][0].drafted ? r[k][0].accepted / r[k][0].drafted : 0;
        const line = {
          bench: "speculative", date: new Date().toISOString(), model: pair.name, prompt: kind, runtime: "native",
          draft: "lookup+model", draftModel: pair.draftName, lookup, draftN, decodeTokens: nDecode, runs: nRuns,
          decodeTokS: {plain: med("plain"), lookup: med("lookup"), draft: med("draft")},
          speedup: {lookup: med("lookup") / med("plain"), draft: med("draft") / med("plain")},
          acceptance: {lookup: acc("lookup"), draft: acc("draft")},
          drafted: {lookup: r.lookup[0].drafted, draft: r.draft[0].drafted}, accepted: {lookup: r.lookup[0].accepted, draft: r.draft[0].accepted},
          sameIds: [...r.lookup, ...r.draft].every((x) => x.ids === r.plain[0].ids),
          cores: cpus().length, loadavg: +loadavg()[0].toFixed(2),
        };
        console.log(JSON.stringify(line));
        if (outFile) appendFileSync(outFile, JSON.stringify(line) + "\n");
        // the same in wasm (one runtime: the draft's engine lives in the target's session)
        const tm = await kw.openModel(await kw.fileSource(pair.target)), dm = await kw.openModel(await kw.fileSource(pair.draft));
        try {
          const ids = tm.tokenize(text), o = {maxTokens: nDecode, temperature: 0, ignoreEos: true};
          const w = {plain: [], lookup: [], draft: []};
          for (let i = 0; i <= nRuns; i++) {
            const a = await tm.complete(ids, o), b = await tm.complete(ids, {...o, lookup}), c = await tm.complete(ids, {...o, draft: dm, draftN});
            if (i > 0) w.plain.push(a), w.lookup.push(b), w.draft.push(c);
          }
          const wm = (k) => median(w[k].map((x) => x.decodeTokS));
          const wl = {...line, date: new Date().toISOString(), runtime: "wasm",
            decodeTokS: {plain: wm("plain"), lookup: wm("lookup"), draft: wm("draft")},
            speedup: {lookup: wm("lookup") / wm("plain"), draft: wm("draft") / wm("plain")},
            acceptance: {lookup: w.lookup[0].speculative.acceptance, draft: w.draft[0].speculative.acceptance},
            drafted: {lookup: w.lookup[0].speculative.drafted, draft: w.draft[0].speculative.drafted},
            accepted: {lookup: w.lookup[0].speculative.accepted, draft: w.draft[0].speculative.accepted},
            sameIds: [...w.plain, ...w.lookup, ...w.draft].every((x) => JSON.stringify(x.ids) === JSON.stringify(w.plain[0].ids)),
            loadavg: +loadavg()[0].toFixed(2)};
          console.log(JSON.stringify(wl));
          if (outFile) appendFileSync(outFile, JSON.stringify(wl) + "\n");
        } finally { tm.close(); dm.close(); }
      }
    }
  } finally { rmSync(dir, {recursive: true}); }
}

function requireSpawn(cmd, argv) {
  const r = spawnSync(cmd, argv, {encoding: "utf8"});
  if (r.status !== 0) throw new Error(`${cmd} ${argv.join(" ")}: exit ${r.status}: ${r.stderr}`);
  return r;
}
