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
//   node bench/estimate-7b.mjs [--hop-ms 4.4] [--fetch-mbps 200] [--timing 5] [--dir build/mem]
//                              [--write-cost bench/cost-model.json]
// --write-cost writes the planner's time model (core/infer/plan_cost.h) from the resident
// stations measured here: decode weight bytes per ms (a station's weight bytes / its decode
// compute), prefill weight bytes x tokens per ms (its first chunk), --hop-ms (measure it
// with bench/mesh.mjs: hopMs) and --fetch-mbps, with the date, commit and load average.
import {join, resolve} from "node:path";
import {mkdtempSync, rmSync, writeFileSync} from "node:fs";
import os, {tmpdir} from "node:os";
import {spawnSync} from "node:child_process";
import {ROOT, spawnIsolate, synth7b} from "./lib/isolate.mjs";
import {plan} from "../bindings/planner.mjs";
import {topologyFromPlan, linkBudget} from "../workers/lib/topology.mjs";

const args = process.argv.slice(2);
const opt = (k, d) => { const i = args.indexOf(k); return i >= 0 ? args[i + 1] : d; };
const hopMs = Number(opt("--hop-ms", "4.4")), fetchMBps = Number(opt("--fetch-mbps", "200")), timing = Number(opt("--timing", "5"));
const dir = resolve(opt("--dir", join(ROOT, "build/mem")));
const costFile = opt("--write-cost", null);
const rates = {decode: [], prefill: []};  // per resident station: weight bytes per ms
const LAYERS = 4, FULL = 28;
const log = (o) => console.log(JSON.stringify({bench: "estimate-7b", ...o}));
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
                             nHead: small.model.n_head, nKv: small.model.n_head_kv, headDim: small.model.head_dim, nFf: small.model.n_ff, timing});
  // per layer: the slowest slice of the layer (slices run in parallel), compute and load
  const perLayer = new Map();
  for (const s of small.stations) {
    const m = spawnIsolate(job("station", s));
    if (s.mode === "resident") {
      rates.decode.push(s.memory.resident_weights / m.decode_compute_ms);
      rates.prefill.push(s.memory.resident_weights * m.prefill_tokens / m.prefill_compute_ms);
    }
    log({plan: name, id: s.id, mode: s.mode, layers: m.layers, prefill_compute_ms: m.prefill_compute_ms, prefill_tokens: m.prefill_tokens,
         decode_compute_ms: m.decode_compute_ms, decode_load_ms: m.decode_load_ms,
         decode_load_bytes: m.decode_load_bytes, phase_ms: m.phase_ms, finite: m.finite});
    for (let l = s.layers[0]; l < s.layers[1]; l++) {
      const p = perLayer.get(l) ?? {compute: 0, load: 0, bytes: 0};
      p.compute = Math.max(p.compute, m.decode_compute_ms / m.layers);
      p.load = Math.max(p.load, m.decode_load_ms / m.layers);
      p.bytes = Math.max(p.bytes, m.decode_load_bytes / m.layers);
      perLayer.set(l, p);
    }
  }
  if (!shardMs) {
    shardMs = {lmhead: 0, embed: 0};
    for (const s of small.shards) {
      const m = spawnIsolate(job("shard", s));
      log({plan: name, id: s.id, lmhead_ms: m.lmhead_ms, embed_ms: m.embed_ms, finite: m.finite});
      shardMs.lmhead = Math.max(shardMs.lmhead, m.lmhead_ms);
      shardMs.embed = Math.max(shardMs.embed, m.embed_ms);
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
}
rmSync(tmp, {recursive: true, force: true});
if (costFile) {
  const median = (v) => [...v].sort((a, b) => a - b)[v.length >> 1];
  const sig = (v) => Number(v.toPrecision(3));
  const commit = spawnSync("git", ["-C", ROOT, "rev-parse", "--short", "HEAD"], {encoding: "utf8"}).stdout.trim();
  const cost = {decode_bytes_per_ms: sig(median(rates.decode)), prefill_token_bytes_per_ms: sig(median(rates.prefill)),
                hop_ms: hopMs, fetch_bytes_per_ms: fetchMBps * 1000, prompt_tokens: 2000,
                measured: new Date().toISOString().slice(0, 10), commit, load_average: os.loadavg().map((x) => +x.toFixed(2)),
                command: `node bench/estimate-7b.mjs ${args.join(" ")}`,
                note: "rates of one wasm station isolate (Node) on the 4-layer qwen2.5-coder-7b-shaped synth, median over its resident stations; " +
                      "hop_ms is the given --hop-ms (bench/mesh.mjs measures it under local workerd); fetch is an assumption (--fetch-mbps)"};
  writeFileSync(costFile, JSON.stringify(cost, null, 2) + "\n");
  log({cost_model: costFile, ...cost});
}
log({summary: true, measured_on: `${LAYERS}-layer 7B-shaped synth, scaled to ${FULL} layers`, ...out});
