#!/usr/bin/env node
// bench/draft-sampling.mjs — draft-model speculation when the request samples: drafts sampled
// from the draft model's own distribution q (verified by min(1, p/q) / norm(max(0, p - q)))
// against one-hot drafts (the draft's argmax, --draft-one-hot) and plain decoding, natively
// (build/bin/knot generate) and in wasm (the JS API's {draft, draftOneHot}), in the same run.
// Pair: the shared stories260K-pad256 q8_0 target with its own q4_k_m as the draft.
//   node bench/draft-sampling.mjs [--seeds 5] [--decode 64] [--draft-n 4] [--temp 1] [--out FILE.jsonl]
// Per runtime one JSON line: acceptance {sampled, oneHot} (accepted / drafted over all seeds),
// decodeTokS {plain, sampled, oneHot} (median over the seeds, wall clock), cpuS (CPU seconds
// of the whole runtime's runs of each mode: user + system; native from /usr/bin/time), speedup
// {sampled, oneHot} over plain (wall tok/s; cpuSpeedup from CPU seconds), load (uptime).
import {spawnSync} from "node:child_process";
import {existsSync, appendFileSync} from "node:fs";
import {loadavg} from "node:os";
import {join, resolve, dirname} from "node:path";
import {fileURLToPath} from "node:url";
import * as kw from "../bindings/knotwork.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const args = process.argv.slice(2);
const opt = (name, def) => { const i = args.indexOf(name); return i >= 0 ? args.splice(i, 2)[1] : def; };
const seeds = Number(opt("--seeds", 5)), nDecode = Number(opt("--decode", 64)), draftN = Number(opt("--draft-n", 4));
const temp = Number(opt("--temp", 1)), outFile = opt("--out", null);
const shared = process.env.KNOT_SHARED_MODELS ?? "/work/shared/models";
const Q8 = join(shared, "stories260K-pad256-llama-q8_0.gguf"), Q4 = join(shared, "stories260K-pad256-llama-q4_k_m.gguf");
const knot = process.env.KNOT_BIN ?? join(root, "build/bin/knot");
if (!existsSync(Q8) || !existsSync(Q4) || !existsSync(knot)) { console.error("shared models or build/bin/knot missing"); process.exit(2); }
const PROMPT = "Once upon a time there was a little girl named Lily. She loved to play in the park with her";
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const MODES = {plain: [], sampled: ["--draft", Q4, "--draft-n", String(draftN)], oneHot: ["--draft", Q4, "--draft-n", String(draftN), "--draft-one-hot"]};
const emit = (line) => { const s = JSON.stringify(line); console.log(s); if (outFile) appendFileSync(outFile, s + "\n"); };
const common = (runtime) => ({bench: "speculative", date: new Date().toISOString(), model: "stories260K-pad256-llama-q8_0",
  draftModel: "stories260K-pad256-llama-q4_k_m", prompt: "story", runtime, draft: "model sampled vs one-hot", draftN,
  temperature: temp, topK: 0, topP: 1, minP: 0, decodeTokens: nDecode, seeds});
const summary = (r) => ({
  acceptance: {sampled: r.sampled.acc / r.sampled.dr, oneHot: r.oneHot.acc / r.oneHot.dr},
  drafted: {sampled: r.sampled.dr, oneHot: r.oneHot.dr}, accepted: {sampled: r.sampled.acc, oneHot: r.oneHot.acc},
  decodeTokS: {plain: median(r.plain.tps), sampled: median(r.sampled.tps), oneHot: median(r.oneHot.tps)},
  speedup: {sampled: median(r.sampled.tps) / median(r.plain.tps), oneHot: median(r.oneHot.tps) / median(r.plain.tps)},
  cpuS: {plain: r.plain.cpu, sampled: r.sampled.cpu, oneHot: r.oneHot.cpu},
  cpuSpeedup: {sampled: r.plain.cpu / r.sampled.cpu, oneHot: r.plain.cpu / r.oneHot.cpu},
});
const fresh = () => Object.fromEntries(Object.keys(MODES).map((k) => [k, {tps: [], cpu: 0, dr: 0, acc: 0}]));

// ---- native ----
{
  const load = loadavg()[0], r = fresh();
  for (let s = 0; s <= seeds; s++)  // seed 0: warm-up, not counted
    for (const [k, extra] of Object.entries(MODES)) {
      const x = spawnSync("/usr/bin/time", ["-f", "cpu %U %S", knot, "generate", Q8, "-p", PROMPT, "-n", String(nDecode), "--temp", String(temp),
        "--top-k", "0", "--top-p", "1", "--min-p", "0", "--ignore-eos", "--seed", String(100 + s), ...extra], {encoding: "utf8"});
      if (x.status !== 0) throw new Error(x.stderr);
      if (s === 0) continue;
      const dec = /decode (\d+) tokens in ([\d.]+) s \(([\d.]+) tok\/s\)/.exec(x.stderr), sp = /: (\d+) drafted, (\d+) accepted/.exec(x.stderr);
      const cpu = /cpu ([\d.]+) ([\d.]+)/.exec(x.stderr);
      r[k].tps.push(Number(dec[3]));
      r[k].cpu += Number(cpu[1]) + Number(cpu[2]);
      if (sp) r[k].dr += Number(sp[1]), r[k].acc += Number(sp[2]);
    }
  emit({...common("native"), ...summary(r), load: [load, loadavg()[0]]});
}

// ---- wasm ----
{
  const open = async (path) => { const src = await kw.fileSource(path); try { return await kw.openModel(src); } finally { await src.close?.(); } };
  const target = await open(Q8), draft = await open(Q4);
  const load = loadavg()[0], r = fresh();
  const extra = {plain: {}, sampled: {draft, draftN}, oneHot: {draft, draftN, draftOneHot: true}};
  for (let s = 0; s <= seeds; s++)
    for (const k of Object.keys(MODES)) {
      const c0 = process.cpuUsage();
      const res = await target.complete(PROMPT, {maxTokens: nDecode, temperature: temp, topK: 0, topP: 1, minP: 0, ignoreEos: true, seed: 100 + s, ...extra[k]});
      const c = process.cpuUsage(c0);
      if (s === 0) continue;
      r[k].tps.push(res.decodeTokS);
      r[k].cpu += (c.user + c.system) / 1e6;
      if (res.speculative) r[k].dr += res.speculative.drafted, r[k].acc += res.speculative.accepted;
    }
  target.close(); draft.close();
  emit({...common("wasm"), ...summary(r), load: [load, loadavg()[0]]});
}
