#!/usr/bin/env node
// estimate-7b.mjs — qwen2.5-coder-7b tok/s on the production platform (docs/architecture.md), estimated
// from the planner's topology and measured pieces, JSON lines on stdout:
//   - decode time of every isolate of the plans, run for real (bench/lib/isolate.mjs: the
//     wasm module and bindings/mesh.mjs) on a 4-layer qwen2.5-coder-7b-shaped synth model,
//     per layer, scaled to 28 layers; split layers run their slices in parallel (max);
//   - the shards' lm-head (in parallel: max) and embed time;
//   - sequential round trips per token from the workers' link layout (lib/topology.mjs
//     linkBudget on the 28-layer plan) times --hop-ms, the per-hop cost measured under
//     workerd by bench/mesh.mjs (local: production DO-to-DO hops are not measured here);
//   - fluid stations read every matmul weight once per token: the measured local load
//     (file -> hash check -> wasm) and, as a stated assumption, --fetch-mbps from warden/R2.
//   - speculation (prompt lookup, --lookup K): every station and shard also times a verify
//     pass of r = 2 .. K + 1 rows; a real model (--spec-model, the shared stories260K: a
//     260K-parameter story model, so its acceptance is what a tiny model copies, not what
//     qwen2.5-coder-7b would) generates --decode greedy tokens on each prompt kind
//     (lib/prompts.mjs) through the drafting path (Model.complete with lookup: its drafted and
//     accepted counts) and the mesh's drafting rule is replayed on those ids (draftLookup,
//     workers/coordinator/mesh.mjs) for the rows of every pass; a pass costs the stations'
//     and shards' r-row time and the round trips of a plain greedy step (no embed: rows.mjs),
//     a fluid pass reads its weights once whatever r is;
//   - speculation with the acceptance measured on real text (--acceptance FILE: the aggregate
//     lines of bench/lookup-acceptance.mjs, teacher-forced prompt lookup on real code edits,
//     document continuations and chat answers tokenized with the Qwen tokenizer): each kind's
//     passes by row count for every K' <= --lookup in the file, priced with this run's r-row
//     pass costs (the latest line per kind and K'; only lines of the mesh's rule: ngram_max
//     LOOKUP_NGRAM_MAX and the adaptive LookupBudget, whose passes carry fewer rows when
//     drafts fail); the stories260K figures stay beside them;
//   - time to first token of a 2,000-token prompt, sequential and pipelined: the planner's
//     model (plan_cost.h) with the rates measured in this run.
//   node bench/estimate-7b.mjs [--hop-ms 4.4] [--fetch-mbps 200] [--timing 5] [--dir build/mem]
//                              [--write-cost bench/cost-model.json] [--lookup 6] [--decode 128]
//                              [--spec-model FILE.gguf] [--acceptance bench/speculative-DATE.jsonl]
//                              [--out FILE.jsonl] [--cpu (compute in CPU time)]
// --write-cost writes the planner's time model (core/infer/plan_cost.h) from the resident
// stations measured here: decode weight bytes per ms (a station's weight bytes / its decode
// compute), prefill weight bytes x tokens per ms per chunk size (--prefill-chunks, default
// 2,4,...,64: the median of --timing warm chunks of each size, prefill_token_bytes_per_ms_by_chunk;
// prefill_token_bytes_per_ms is the rate at the mesh's default chunk, 64, for older readers), the
// cold first chunk's rate as a record (prefill_cold_first_chunk_token_bytes_per_ms: a fresh
// station pays it once), --hop-ms (measure it with bench/mesh.mjs: hopMs) and --fetch-mbps,
// with the date, commit, load average and host (CPU model, cores).
import {join, resolve} from "node:path";
import {mkdtempSync, rmSync, writeFileSync} from "node:fs";
import os, {tmpdir} from "node:os";
import {spawnSync} from "node:child_process";
import {appendFileSync, existsSync} from "node:fs";
import {ROOT, spawnIsolate, synth7b} from "./lib/isolate.mjs";
import {PROMPTS} from "./lib/prompts.mjs";
import * as kw from "../bindings/knotwork.mjs";
import {lookupPasses} from "./lib/lookup-acceptance.mjs";
import {LOOKUP_NGRAM_MAX} from "../bindings/generator.mjs";
import {readFileSync} from "node:fs";
import {plan} from "../bindings/planner.mjs";
import {topologyFromPlan, linkBudget} from "../workers/lib/topology.mjs";

const args = process.argv.slice(2);
const opt = (k, d) => { const i = args.indexOf(k); return i >= 0 ? args[i + 1] : d; };
const hopMs = Number(opt("--hop-ms", "4.4")), fetchMBps = Number(opt("--fetch-mbps", "200")), timing = Number(opt("--timing", "5"));
const dir = resolve(opt("--dir", join(ROOT, "build/mem")));
const costFile = opt("--write-cost", null), outFile = opt("--out", null);
const K = Number(opt("--lookup", "6")), nDecode = Number(opt("--decode", "128"));
const specModel = opt("--spec-model", join(process.env.KNOT_SHARED_MODELS ?? "/work/shared/models", "stories260K-pad256-llama-q4_k_m.gguf"));
const verifyRows = Array.from({length: K}, (_, i) => i + 2);
const acceptanceFile = opt("--acceptance", null);
const cpu = args.includes("--cpu");  // compute timed in CPU time (lib/isolate.mjs): for a loaded host
const PREFILL_CHUNKS = opt("--prefill-chunks", "2,4,8,16,32,64").split(",").map(Number);
if (PREFILL_CHUNKS.some((t) => !Number.isInteger(t) || t < 2)) throw new Error("--prefill-chunks: integers >= 2, e.g. 2,4,8,16,32,64");
const DEFAULT_CHUNK = 64;  // the mesh's default prefill chunk (workers/coordinator/mesh.mjs)
// per resident station: weight bytes per ms (prefill: x tokens; byChunk: t -> [rates], cold: the first chunk)
const rates = {decode: [], prefill: [], byChunk: {}};
const LAYERS = 4, FULL = 28;
const log = (o) => {
  const line = JSON.stringify({bench: "estimate-7b", ...o});
  console.log(line);
  if (outFile) appendFileSync(outFile, line + "\n");
};
log({date: new Date().toISOString(), load_average: os.loadavg().map((x) => +x.toFixed(2)), cores: os.cpus().length, lookup: K, decode: nDecode,
     clock: cpu ? "cpu" : "wall"});

// ---- acceptance through the drafting path, on a real model ----------------------------
// Per prompt kind: the greedy ids without and with lookup (equal), the engine's drafted /
// accepted, and the passes of the mesh's loop replayed on those ids: pass i feeds the pending
// token and draftLookup(history, room) drafts (room: the mesh's rule with chunk 64), keeps the
// drafts that equal the greedy continuation, then one more token.
const spec = {};
if (existsSync(specModel)) {
  const m = await kw.openModel(await kw.fileSource(specModel));
  try {
    for (const [kind, text] of Object.entries(PROMPTS)) {
      const ids = m.tokenize(text), o = {maxTokens: nDecode, temperature: 0, ignoreEos: true};
      const plain = await m.complete(ids, o), withLookup = await m.complete(ids, {...o, lookup: K});
      const out = plain.ids, nCtx = m.info?.config?.n_ctx_train ?? 1 << 20;
      const {passes, drafted, accepted, acceptance, tokensPerPass, verifyPasses} = lookupPasses(ids, out, K, {chunk: 64, nCtx});
      const sp = withLookup.speculative;
      spec[kind] = {passes, tokens: out.length - 1};
      log({acceptance: kind, model: specModel.split("/").pop(), prompt_tokens: ids.length, decode_tokens: out.length, lookup: K,
           same_ids: JSON.stringify(withLookup.ids) === JSON.stringify(out),
           engine: {drafted: sp.drafted, accepted: sp.accepted, acceptance: +sp.acceptance.toFixed(3)},
           replay: {passes: passes.length, verify_passes: verifyPasses, drafted, accepted,
                    acceptance: +acceptance.toFixed(3), tokens_per_pass: +tokensPerPass.toFixed(3)}});
    }
  } finally { m.close(); }
} else log({acceptance: "skipped", reason: `${specModel} missing`});
// ---- acceptance on real text, teacher-forced (bench/lookup-acceptance.mjs) -------------------
// kind -> K' -> the latest aggregate line of that kind and K' (K' <= K: its rows <= K + 1 are timed here)
const measured = {};
if (acceptanceFile) {
  const lines = readFileSync(acceptanceFile, "utf8").split("\n").filter((l) => l.trim()).map((l, i) => {
    try { return JSON.parse(l); } catch { throw new Error(`--acceptance ${acceptanceFile}: line ${i + 1} is not JSON`); }
  }).filter((l) => l.bench === "lookup-acceptance" && l.aggregate && l.lookup <= K && (l.ngram_max ?? 3) === LOOKUP_NGRAM_MAX && l.adaptive === true);  // the mesh's rule only
  if (!lines.length) throw new Error(`--acceptance ${acceptanceFile}: no aggregate lookup-acceptance line of the mesh's rule (adaptive, ngram_max ${LOOKUP_NGRAM_MAX}) with lookup <= ${K} (run bench/lookup-acceptance.mjs --out ${acceptanceFile})`);
  for (const l of lines) {
    const cur = measured[l.kind]?.[l.lookup];
    if (!cur || cur.date <= l.date) (measured[l.kind] ??= {})[l.lookup] = l;
  }
  for (const [kind, byK] of Object.entries(measured))
    for (const [k, l] of Object.entries(byK))
      log({acceptance_teacher_forced: kind, lookup: Number(k), from: acceptanceFile, date_measured: l.date, tokenizer: l.tokenizer,
           tasks: l.tasks.length, decoded_tokens: l.decoded_tokens, passes: l.passes, acceptance: l.acceptance, tokens_per_pass: l.tokens_per_pass});
}
const model = synth7b(dir, LAYERS, log);

// the 28-layer plan's topology (header only) for the link layout
const tmp = mkdtempSync(join(tmpdir(), "knot-est-"));
const header = join(tmp, "q7b.gguf");
const KNOT = process.env.KNOT_BIN || join(ROOT, "build/bin/knot");
const r = spawnSync(KNOT, ["synth", "--arch", "qwen2", "--hidden", "3584", "--layers", String(FULL), "--heads", "28", "--kv-heads", "4",
  "--ffn", "18944", "--vocab", "151936", "--vocab-tensor", "152064", "--type", "Q4_K_M", "--ctx", "32768", "--header-only", header], {encoding: "utf8"});
if (r.status !== 0) throw new Error(r.stderr);
const plans = {resident: {budget: "128MB"}, fluid: {budget: "128MB", mode: "fluid", stations: 2}};
const out = {};
let shardMs = null;
for (const [name, opts] of Object.entries(plans)) {
  const full = await plan(header, opts), small = await plan(model, opts);
  const t = topologyFromPlan(full.model, full, {knot: "q7b.knot"});
  const b = linkBudget(t);
  const job = (kind, s) => ({model, kind, station: s, context: small.context, chunk: Math.min(small.chunk, 16), nEmbd: small.model.n_embd,
                             nHead: small.model.n_head, nKv: small.model.n_head_kv, headDim: small.model.head_dim, nFf: small.model.n_ff, timing, verifyRows, cpu,
                             prefillChunks: kind === "station" && s.mode === "resident" ? PREFILL_CHUNKS : undefined});
  // per layer: the slowest slice of the layer (slices run in parallel), compute and load
  const perLayer = new Map();
  for (const s of small.stations) {
    const m = spawnIsolate(job("station", s));
    if (s.mode === "resident") {
      rates.decode.push(s.memory.resident_weights / m.decode_compute_ms);
      rates.prefill.push(s.memory.resident_weights * m.prefill_tokens / m.prefill_compute_ms);
      rates.coldTokens = m.prefill_tokens;
      for (const t of PREFILL_CHUNKS) (rates.byChunk[t] ??= []).push(s.memory.resident_weights * t / m.prefill_rows_ms[t]);
    }
    log({plan: name, id: s.id, mode: s.mode, layers: m.layers, prefill_compute_ms: m.prefill_compute_ms, prefill_tokens: m.prefill_tokens,
         prefill_rows_ms: m.prefill_rows_ms,
         decode_compute_ms: m.decode_compute_ms, decode_load_ms: m.decode_load_ms,
         decode_load_bytes: m.decode_load_bytes, phase_ms: m.phase_ms, verify_compute_ms: m.verify_compute_ms, finite: m.finite});
    for (let l = s.layers[0]; l < s.layers[1]; l++) {
      const p = perLayer.get(l) ?? {compute: 0, load: 0, bytes: 0, verify: {}};
      p.compute = Math.max(p.compute, m.decode_compute_ms / m.layers);
      for (const r of verifyRows) p.verify[r] = Math.max(p.verify[r] ?? 0, m.verify_compute_ms[r] / m.layers);
      p.load = Math.max(p.load, m.decode_load_ms / m.layers);
      p.bytes = Math.max(p.bytes, m.decode_load_bytes / m.layers);
      perLayer.set(l, p);
    }
  }
  if (!shardMs) {
    shardMs = {lmhead: 0, embed: 0, verify: {}};
    for (const s of small.shards) {
      const m = spawnIsolate(job("shard", s));
      log({plan: name, id: s.id, lmhead_ms: m.lmhead_ms, embed_ms: m.embed_ms, verify_lmhead_ms: m.verify_lmhead_ms, finite: m.finite});
      shardMs.lmhead = Math.max(shardMs.lmhead, m.lmhead_ms);
      shardMs.embed = Math.max(shardMs.embed, m.embed_ms);
      for (const r of verifyRows) shardMs.verify[r] = Math.max(shardMs.verify[r] ?? 0, m.verify_lmhead_ms[r]);
    }
  }
  const avg = (k) => [...perLayer.values()].reduce((a, p) => a + p[k], 0) / perLayer.size;
  const compute = avg("compute") * FULL, localLoad = avg("load") * FULL, bytes = avg("bytes") * FULL;
  const hubs = t.shardGroups?.some((g) => g.length > 1) ? 1 : 0;
  const rtts = b.stationMsgs + 1 /* embed */ + 1 /* lm-head */ + hubs;
  const base = compute + shardMs.lmhead + shardMs.embed + rtts * hopMs;
  const fetchMs = bytes / (fetchMBps * 1e6) * 1000;
  out[name] = {isolates: full.isolates, chain: !!t.chain, sequential_round_trips: rtts, hop_ms: hopMs,
    station_compute_ms: +compute.toFixed(1), shard_ms: +(shardMs.lmhead + shardMs.embed).toFixed(1),
    ...(name === "fluid" ? {weights_read_per_token_mb: +(bytes / 1e6).toFixed(0), local_load_ms: +localLoad.toFixed(0),
                            fetch_mbps_assumed: fetchMBps, fetch_ms: +fetchMs.toFixed(0),
                            ms_per_token_local_load: +(base + localLoad).toFixed(0), tok_s_local_load: +(1000 / (base + localLoad)).toFixed(3),
                            ms_per_token: +(base + fetchMs).toFixed(0), tok_s: +(1000 / (base + fetchMs)).toFixed(4)}
                         : {ms_per_token: +base.toFixed(1), tok_s: +(1000 / base).toFixed(2)})};
  // a greedy pass of r rows: stations + shards at r rows, the round trips of a plain greedy
  // step (no embed fan-out: its rows come with the lm-head answer or from rows.mjs), and a
  // fluid plan's weights once per pass
  const stationRows = (r) => r === 1 ? compute : [...perLayer.values()].reduce((a, p) => a + p.verify[r], 0) / perLayer.size * FULL;
  const lmRows = (r) => r === 1 ? shardMs.lmhead : shardMs.verify[r];
  const perPass = name === "fluid" ? fetchMs : 0;
  const passMs = (r) => stationRows(r) + lmRows(r) + (rtts - 1) * hopMs + perPass;
  out[name].verify_pass_ms = Object.fromEntries([1, ...verifyRows].map((r) => [r, +passMs(r).toFixed(1)]));
  out[name].verify_station_ratio = Object.fromEntries(verifyRows.map((r) => [r, +(stationRows(r) / compute).toFixed(3)]));
  out[name].greedy_tok_s = +(1000 / passMs(1)).toPrecision(3);
  out[name].speculative = {};
  for (const [kind, sp] of Object.entries(spec)) {
    const ms = sp.passes.reduce((a, p) => a + passMs(p.rows), 0);
    const tokS = sp.tokens / (ms / 1000);
    out[name].speculative[kind] = {tok_s: +tokS.toPrecision(3), speedup: +(tokS * passMs(1) / 1000).toFixed(3),
                                   tokens_per_pass: +(sp.tokens / sp.passes.length).toFixed(3)};
  }
  // the teacher-forced acceptance on real text: the same passes, from their row counts
  if (acceptanceFile) {
    out[name].speculative_real_text = {};
    for (const [kind, byK] of Object.entries(measured)) {
      const per = {};
      for (const [k, l] of Object.entries(byK)) {
        const ms = Object.entries(l.rows).reduce((a, [r, n]) => a + n * passMs(Number(r)), 0);
        const tokS = l.decoded_tokens / (ms / 1000);
        per[k] = {tok_s: +tokS.toPrecision(3), speedup: +(tokS * passMs(1) / 1000).toFixed(3), acceptance: l.acceptance, tokens_per_pass: l.tokens_per_pass};
      }
      const best = Object.entries(per).reduce((b, [k, v]) => (v.tok_s > b.tok_s ? {lookup: Number(k), ...v} : b), {lookup: 0, tok_s: +(1000 / passMs(1)).toPrecision(3), speedup: 1});
      out[name].speculative_real_text[kind] = {by_lookup: per, best};
    }
  }
  // what-if (not measured): an acceptance a per draft, i.i.d., K' drafts every pass:
  // (1 - a^(K'+1)) / (1 - a) tokens per pass; the best K' <= K for each a
  out[name].what_if = {};
  for (const a of [0.3, 0.5, 0.7, 0.8, 0.9]) {
    let best = {k: 0, tok_s: 1000 / passMs(1)};
    for (let k = 1; k <= K; k++) {
      const tokS = (1 - a ** (k + 1)) / (1 - a) / (passMs(k + 1) / 1000);
      if (tokS > best.tok_s) best = {k, tok_s: tokS};
    }
    out[name].what_if[a] = {drafts: best.k, tok_s: +best.tok_s.toPrecision(3)};
  }
  // time to first token: the planner's model with this run's rates
  const figures = (p) => ({isolates: p.isolates, chunk: p.chunk, prefill_chunk: p.prefill_chunk, decode_tok_s: p.estimate.decode_tok_s,
                            ttft_s: p.estimate.ttft_s, ttft_pipelined_s: p.estimate.ttft_pipelined_s,
                            ttft_pipeline: p.estimate.ttft_pipeline, prompt_tokens: p.estimate.prompt_tokens});
  out[name].planner = figures(await plan(header, {...opts, cost: measuredCost()}));
  // the latency objective: the fastest decode plan and the chunk of the earliest first token
  out[name].planner_latency = figures(await plan(header, {...opts, objective: "latency", cost: measuredCost()}));
}
rmSync(tmp, {recursive: true, force: true});
// the host of the measurement: CPU model (and family / model numbers: /proc/cpuinfo), cores, Node
function hostInfo() {
  const h = {cpu: os.cpus()[0]?.model ?? "unknown", cores: os.cpus().length, platform: `${os.platform()} ${os.arch()}`, node: process.version};
  if (existsSync("/proc/cpuinfo")) {
    const info = readFileSync("/proc/cpuinfo", "utf8");
    const field = (k) => info.match(new RegExp(`^${k}\\s*:\\s*(.*)$`, "m"))?.[1];
    h.cpu_family = Number(field("cpu family")), h.cpu_model = Number(field("model"));
    h.avx512 = / avx512f /.test(info.match(/^flags\s*:(.*)$/m)?.[1] + " ");
  }
  return h;
}
// the planner's time model from the resident stations measured so far
function measuredCost() {
  const median = (v) => [...v].sort((a, b) => a - b)[v.length >> 1];
  const sig = (v) => Number(v.toPrecision(3));
  const commit = spawnSync("git", ["-C", ROOT, "rev-parse", "--short", "HEAD"], {encoding: "utf8"}).stdout.trim();
  const byChunk = Object.fromEntries(PREFILL_CHUNKS.map((t) => [t, sig(median(rates.byChunk[t]))]));
  const dflt = byChunk[DEFAULT_CHUNK] ?? byChunk[PREFILL_CHUNKS.filter((t) => t <= DEFAULT_CHUNK).pop() ?? PREFILL_CHUNKS[0]];
  return {decode_bytes_per_ms: sig(median(rates.decode)), prefill_token_bytes_per_ms: dflt,
          prefill_token_bytes_per_ms_by_chunk: byChunk,
          prefill_cold_first_chunk_token_bytes_per_ms: sig(median(rates.prefill)), prefill_cold_first_chunk_tokens: rates.coldTokens,
          hop_ms: hopMs, fetch_bytes_per_ms: fetchMBps * 1000, prompt_tokens: 2000,
          measured: new Date().toISOString().slice(0, 10), date: new Date().toISOString(), commit,
          load_average: os.loadavg().map((x) => +x.toFixed(2)),
          clock: cpu ? "cpu" : "wall", host: hostInfo(),
          command: `node bench/estimate-7b.mjs ${args.join(" ")}`,
          note: "rates of one wasm station isolate (Node) on the 4-layer qwen2.5-coder-7b-shaped synth, median over its resident stations; " +
                "prefill by chunk: the median of --timing warm chunks of each size after the first (cold) chunk, whose rate is kept as a record; " +
                "hop_ms is the given --hop-ms (bench/mesh.mjs measures it under local workerd); fetch is an assumption (--fetch-mbps)"};
}
if (costFile) {
  const cost = measuredCost();
  writeFileSync(costFile, JSON.stringify(cost, null, 2) + "\n");
  log({cost_model: costFile, ...cost});
}
log({summary: true, measured_on: `${LAYERS}-layer 7B-shaped synth, scaled to ${FULL} layers`, ...out});
