#!/usr/bin/env node
// bench/mesh.mjs — the mesh under workerd (Miniflare) beside single-process wasm, measured in
// the same run, JSON on stdout:
//   node bench/mesh.mjs [MODEL.knot] [--stations 6,6] [--shards 4] [--prompt-tokens N] [--decode N] [--link ws|http]
// Default model: a `knot synth` 85M-shape llama (hidden 768, 12 layers, 12 heads / 4 KV,
// FFN 2048, vocab 512, Q4_K_M), 2 stations + 4 shards. Greedy decode with EOS ignored; one
// warm-up run each, then the median of 3. per-hop overhead = (mesh decode ms/token - single
// ms/token) / hops per token.
import {readFileSync, rmSync} from "node:fs";
import * as kw from "../bindings/knotwork.mjs";
import {startMesh} from "../deploy/miniflare.mjs";
import {topologyFromCounts, checkLimits} from "../workers/lib/topology.mjs";
import {synth85m} from "./lib/synth.mjs";

const args = process.argv.slice(2);
const opt = (name, def) => { const i = args.indexOf(name); return i >= 0 ? args.splice(i, 2)[1] : def; };
const stations = opt("--stations", "6,6").split(",").map(Number), shards = Number(opt("--shards", 4));
const nPrompt = Number(opt("--prompt-tokens", 64)), nDecode = Number(opt("--decode", 32)), linkMode = opt("--link", "ws");
let bytes, modelName = args[0];
if (modelName) bytes = new Uint8Array(readFileSync(modelName));
else {
  const s = synth85m("knot-bench-mesh-");
  bytes = s.bytes;
  rmSync(s.dir, {recursive: true});
  modelName = "synth 85M-shape llama Q4_K_M";
}
const ids = [1, ...Array.from({length: nPrompt - 1}, (_, i) => 3 + (i * 37) % 500)];
const options = {maxTokens: nDecode, temperature: 0, ignoreEos: true};
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

const m = await kw.openModel(kw.bytesSource(bytes, "bench.knot"));
const singleRuns = [];
for (let r = 0; r < 4; r++) singleRuns.push(await m.complete(ids, options));
m.close();
const single = singleRuns.slice(1);

const config = (await kw.parseKnotHeader(kw.bytesSource(bytes, "bench.knot"))).config;
const topology = topologyFromCounts(config, {knot: "model.knot", stations, shards});
// prefix reuse off: every run prefills the whole prompt (the figures below count its hops)
const mesh = await startMesh({knotBytes: bytes, topology, linkMode, prefixCache: {kvTokens: 0}});
const meshRuns = [];
try {
  for (let r = 0; r < 4; r++) {
    const res = await mesh.run({ids, options});
    if (res.error) throw new Error(res.error.error);
    meshRuns.push(res.summary);
  }
  var stats = await mesh.stats();
} finally { await mesh.close(); }
const runs = meshRuns.slice(1);
const same = runs.every((s) => JSON.stringify(s.ids) === JSON.stringify(single[0].ids));
const singleDecode = median(single.map((s) => s.decodeTokS)), meshDecode = median(runs.map((s) => s.decodeTokS));
const hopsPerToken = (runs[0].hops - (topology.stations.length + topology.shards.length + 1) * Math.ceil(nPrompt / 64)) / Math.max(1, runs[0].nDecoded);
const measuredHops = topology.stations.reduce((a, s) => a + s.members.length, 0) + 1 + topology.shards.length;
const msSingle = 1000 / singleDecode, msMesh = 1000 / meshDecode;
const out = {
  bench: "mesh", model: modelName, topology: {stations, shards, linkMode}, promptTokens: nPrompt, decodeTokens: nDecode,
  sameIds: same,
  single: {prefillTokS: median(single.map((s) => s.prefillTokS)), decodeTokS: singleDecode},
  mesh: {prefillTokS: median(runs.map((s) => s.prefillTokS)), decodeTokS: meshDecode},
  decodeRatio: meshDecode / singleDecode,
  hopsPerDecodeToken: measuredHops, hopsCountedPerToken: hopsPerToken,
  perHopOverheadMs: (msMesh - msSingle) / measuredHops,
  subrequestsPerRun: runs[0].subrequests, subrequestsPerToken: runs[0].subrequests / (nPrompt + nDecode),
  maxConnections: runs[0].maxConnections,
  limits4096: checkLimits(topology, {tokens: 4096, mode: linkMode}),
  peakLinearMiB: Object.fromEntries(Object.entries(stats).map(([k, v]) => [k, v.memory ? +(v.memory.peakLinear / 1048576).toFixed(2) : null])),
  target: "mesh decode >= 0.7 x single-process",
};
console.log(JSON.stringify(out, null, 1));
