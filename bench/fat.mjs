#!/usr/bin/env node
// bench/fat.mjs — a native fat station in a mesh (issue 19 item 4), same run, one JSON line on
// stdout:
//   node bench/fat.mjs [--stations 3,6,3] [--fat 1] [--prompt-tokens N] [--decode N]
// Model: the `knot synth` 85M-shape llama of bench/fat-station.mjs (hidden 768, 12 layers, 12
// heads / 4 KV, FFN 2048, vocab 512, Q4_K_M). Two figures:
//   station  per-token time of the fat station (`knot station`, reading the .knot by HTTP range)
//            vs the Worker station on the same layers: the median decode-frame round trip by
//            HTTP POST (compute + one local hop), after a warm-up session, as bench/fat-station.mjs;
//   mesh     decode tok/s of the whole mesh (coordinator, stations, shard under workerd) with
//            every station a Worker, and with station --fat a native fat station (URL member,
//            deploy/fat.mjs), greedy, the same prompt; each after a warm-up generation. Both
//            meshes must produce the same ids (checked).
import {rmSync} from "node:fs";
import {loadavg} from "node:os";
import {startMesh} from "../deploy/miniflare.mjs";
import {rangeServer, startFatStations, KNOT_BIN} from "../deploy/fat.mjs";
import {topologyFromCounts, withUrls} from "../workers/lib/topology.mjs";
import * as kw from "../bindings/knotwork.mjs";
import {encodeFrame} from "../workers/lib/frame.mjs";
import {synth85m} from "./lib/synth.mjs";

const args = process.argv.slice(2);
const opt = (name, def) => { const i = args.indexOf(name); return i >= 0 ? args.splice(i, 2)[1] : def; };
const stations = opt("--stations", "3,6,3").split(",").map(Number);
const fatIndex = Number(opt("--fat", 1));
const nPrompt = Number(opt("--prompt-tokens", 32)), nDecode = Number(opt("--decode", 32));
const {dir, file, bytes} = synth85m("knot-bench-fatmesh-", KNOT_BIN);
const config = (await kw.parseKnotHeader(kw.bytesSource(bytes, "model.knot"))).config;
const E = config.n_embd, N_CTX = nPrompt + nDecode + 8;
const base = topologyFromCounts(config, {knot: "model.knot", stations, shards: 1});
const fatName = base.stations[fatIndex].members[0].name;

// the station figure: the same frames to the Worker station and the fat station
const rows = (seed, pos, n) => Float32Array.from({length: n * E}, (_, i) => Math.sin(seed * 7.1 + (pos + i / E) * 1.7 + (i % E) * 0.37) * 0.5);
async function session(send, sid) {
  const f = (pos, n) => encodeFrame({kind: pos === 0 || n > 1 ? "prefill" : "decode", sid, reqId: pos + 1, pos, width: E, nCtx: N_CTX, data: rows(1, pos, n)});
  await send(f(0, nPrompt), sid);
  const ms = [];
  for (let p = nPrompt; p < nPrompt + nDecode; p++) {
    const t = performance.now();
    await send(f(p, 1), sid);
    ms.push(performance.now() - t);
  }
  ms.sort((a, b) => a - b);
  return {msPerToken: +ms[ms.length >> 1].toFixed(3), minMs: +ms[0].toFixed(3)};
}
const check = async (r) => { if (!r.ok) throw new Error(`HTTP ${r.status}: ${await r.text()}`); await r.arrayBuffer(); };

// greedy ids of nPrompt prompt tokens, nDecode generated (EOS ignored)
const prompt = Array.from({length: nPrompt}, (_, i) => 1 + (i * 37) % (config.n_vocab - 1));
const options = {maxTokens: nDecode, temperature: 0, ignoreEos: true};
async function meshRun(mesh) {
  await mesh.run({ids: prompt, options});  // warm-up: boots, loads every station's tensors
  const r = await mesh.run({ids: prompt, options});
  if (r.error) throw new Error(r.error.error);
  return {decodeTokS: +r.summary.decodeTokS.toFixed(2), decodeMs: +r.summary.decodeMs.toFixed(1), ids: r.summary.ids};
}

const range = await rangeServer(bytes);
let workers, fatMesh, fat;
try {
  workers = await startMesh({knotBytes: bytes, topology: base});
  fat = await startFatStations(base, [fatIndex], range);
  const worker = await workers.worker(`knot-${fatName}`);
  const viaWorker = async (b, sid) => check(await worker.fetch(`http://x/?sid=${sid}`, {method: "POST", body: b}));
  const viaFat = async (b, sid) => check(await fetch(`${fat.urls[fatIndex]}/?sid=${sid}`, {method: "POST", body: b}));
  await session(viaWorker, "warm-w");
  await session(viaFat, "warm-f");
  const st = {worker: await session(viaWorker, "run-w"), fat: await session(viaFat, "run-f")};
  const allWorkers = await meshRun(workers);
  await workers.close();
  workers = null;
  fatMesh = await startMesh({knotBytes: bytes, topology: withUrls(config, base, fat.urls)});
  const withFat = await meshRun(fatMesh);
  if (withFat.ids.join() !== allWorkers.ids.join()) throw new Error("the mesh with the fat station generated other ids than the all-Worker mesh");
  const health = await (await fetch(`${fat.urls[fatIndex]}/health`)).json();
  console.log(JSON.stringify({bench: "fat", date: new Date().toISOString().slice(0, 10), model: "synth85m Q4_K_M",
    stations, fat: fatIndex, fatLayers: base.stations[fatIndex].layers, promptTokens: nPrompt, decode: nDecode,
    station: {...st, speedup: +(st.worker.msPerToken / st.fat.msPerToken).toFixed(2)},
    mesh: {workers: {decodeTokS: allWorkers.decodeTokS, decodeMs: allWorkers.decodeMs},
           withFat: {decodeTokS: withFat.decodeTokS, decodeMs: withFat.decodeMs},
           speedup: +(withFat.decodeTokS / allWorkers.decodeTokS).toFixed(2), sameIds: true},
    fatRss: health.memory?.rss, fatTensorBytes: health.memory?.tensorBytes,
    rangeBytesServed: range.reads.reduce((a, [x, y]) => a + y - x, 0), fileBytes: bytes.length,
    loadAverage: loadavg().map((x) => +x.toFixed(2))}));
} finally {
  await workers?.close();
  await fatMesh?.close();
  await Promise.all((fat?.stations ?? []).map((s) => s.stop()));
  await range.close();
  rmSync(dir, {recursive: true, force: true});
}
