#!/usr/bin/env node
// bench/prefill-pipeline.mjs — pipelined vs sequential prefill on a 4-station local mesh
// (workerd via Miniflare), and the single process, in the same run; one JSON line on stdout:
//   node bench/prefill-pipeline.mjs [MODEL.knot] [--stations 2,2,2,2] [--shards 2] [--prompt-tokens 256]
//                                   [--chunk 16] [--runs 3] [--out FILE.jsonl]
// Default model: a `knot synth` llama (hidden 768, 8 layers, 12 heads / 4 KV, FFN 2048, vocab
// 512, Q4_K_M). Each mode: one warm-up, then the median of --runs prefills (maxTokens 1).
// Fields:
//   tokS.{sequential, pipelined, single}   prefill tok/s (the coordinator's prefillMs)
//   speedup                                pipelined / sequential tok/s
//   overlap.{sequential, pipelined}        the stations' busy time summed (their own per-frame
//                                          timings: each station's /stats frameLog) / prefill wall time
//   perChunkMs                             per station, the median busy ms per chunk (sequential run)
//   hopMs                                  (sequential wall - summed busy) / frames: what one hop costs
//   separateMachines                       N stations on separate machines, from perChunkMs and hopMs:
//                                          sequential C (sum t + S hop), pipelined sum t + S hop + (C - 1) (max t + hop)
//   cores                                  this machine's CPUs: wall-clock speed-up here tops out near it
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
const stations = opt("--stations", "2,2,2,2").split(",").map(Number), shards = Number(opt("--shards", 2));
const nPrompt = Number(opt("--prompt-tokens", 256)), chunk = Number(opt("--chunk", 16)), nRuns = Number(opt("--runs", 3));
const outFile = opt("--out", null);
// --processes: each station in its own workerd process (its own Miniflare; the coordinator
// reaches it as an external HTTP service), so stations can compute at the same time: one
// Miniflare runs every isolate on one thread, where pipelining can only hide hop latency
const processes = args.includes("--processes") ? (args.splice(args.indexOf("--processes"), 1), true) : false;
let bytes, modelName = args[0];
if (modelName) bytes = new Uint8Array(readFileSync(modelName));
else {
  const knot = process.env.KNOT_BIN ?? join(root, "build/bin/knot");
  if (!existsSync(knot)) { console.error(`${knot} missing: build the native CLI`); process.exit(2); }
  const dir = mkdtempSync(join(tmpdir(), "knot-bench-prefill-"));
  const out = join(dir, "synth.knot");
  execFileSync(knot, ["synth", "--arch", "llama", "--hidden", "768", "--layers", String(stations.reduce((a, b) => a + b, 0)),
    "--heads", "12", "--kv-heads", "4", "--ffn", "2048", "--vocab", "512", "--type", "Q4_K_M", "--seed", "1", out]);
  bytes = new Uint8Array(readFileSync(out));
  rmSync(dir, {recursive: true});
  modelName = "synth llama hidden 768 FFN 2048 Q4_K_M";
}
const ids = [1, ...Array.from({length: nPrompt - 1}, (_, i) => 3 + (i * 37) % 500)];
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const options = {maxTokens: 1, temperature: 0, ignoreEos: true, chunk};

const m = await kw.openModel(kw.bytesSource(bytes, "bench.knot"));
const singleRuns = [];
for (let r = 0; r <= nRuns; r++) singleRuns.push(await m.complete(ids, {...options}));
m.close();

const config = (await kw.parseKnotHeader(kw.bytesSource(bytes, "bench.knot"))).config;
const topology = topologyFromCounts(config, {knot: "model.knot", stations, shards});
const names = topology.stations.map((s) => s.members[0].name);
const mesh = await startMesh({knotBytes: bytes, topology, processes});
const frameLogs = async () => {
  const out = {};
  for (const n of names) out[n] = (await (await (await mesh.worker(`knot-${n}`)).fetch("http://x/stats")).json()).stats.frameLog;
  return out;
};
const runs = {sequential: [], pipelined: []};
try {
  for (let r = 0; r <= nRuns; r++) {
    for (const prefill of ["sequential", "pipelined"]) {  // interleaved: both see the same machine load
      const res = await mesh.run({ids, options: {...options, prefill}});
      if (res.error) throw new Error(res.error.error);
      const sid = res.telemetry.find((e) => e.event === "route").sid;
      const logs = await frameLogs();
      const perStation = names.map((n) => logs[n].filter((f) => f.sid === sid && f.rows > 1).map((f) => f.ms));
      if (r > 0) runs[prefill].push({s: res.summary, perStation, ids: res.summary.ids});
    }
  }
} finally { await mesh.close(); }

const C = Math.ceil(nPrompt / chunk), S = names.length;
const summarize = (rs) => {
  const tokS = median(rs.map((x) => x.s.prefillTokS));
  const overlap = median(rs.map((x) => x.perStation.flat().reduce((a, b) => a + b, 0) / x.s.prefillMs));
  return {tokS, overlap};
};
const seq = summarize(runs.sequential), pipe = summarize(runs.pipelined);
const perChunkMs = names.map((_, i) => median(runs.sequential.flatMap((x) => x.perStation[i])));
const hopMs = median(runs.sequential.map((x) => Math.max(0, (x.s.prefillMs - x.perStation.flat().reduce((a, b) => a + b, 0)) / (C * S))));
const sumT = perChunkMs.reduce((a, b) => a + b, 0), maxT = Math.max(...perChunkMs);
const modelSeqMs = C * (sumT + S * hopMs), modelPipeMs = sumT + S * hopMs + (C - 1) * (maxT + hopMs);
const singleTokS = median(singleRuns.slice(1).map((s) => s.prefillTokS));
const sameIds = [...runs.sequential, ...runs.pipelined].every((x) => JSON.stringify(x.ids) === JSON.stringify(singleRuns[0].ids));
const line = {
  bench: "prefill-pipeline", date: new Date().toISOString(), model: modelName,
  workerd: processes ? "one process per station and shard" : "one process (every isolate on one thread)", stations, shards, promptTokens: nPrompt, chunk,
  chunks: C, runs: nRuns, sameIds,
  tokS: {sequential: seq.tokS, pipelined: pipe.tokS, single: singleTokS},
  speedup: pipe.tokS / seq.tokS,
  overlap: {sequential: seq.overlap, pipelined: pipe.overlap},
  perChunkMs, hopMs,
  separateMachines: {machines: S, sequentialTokS: nPrompt / (modelSeqMs / 1000), pipelinedTokS: nPrompt / (modelPipeMs / 1000),
          speedup: modelSeqMs / modelPipeMs, bound: "S stations, one chunk each at a time: speed-up -> sum t / max t as chunks grow"},
  cores: cpus().length, loadavg: loadavg().map((x) => +x.toFixed(2)),
  note: `${cpus().length} cores shared with other processes (load ${loadavg()[0].toFixed(1)}): the wall-clock speed-up here is bounded by the cores, the overlap shows how many stations were busy at once`,
};
console.log(JSON.stringify(line));
if (outFile) appendFileSync(outFile, JSON.stringify(line) + "\n");
