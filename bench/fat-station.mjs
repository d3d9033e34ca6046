#!/usr/bin/env node
// bench/fat-station.mjs — per-token time of the native fat station (`knot station`) beside a
// Worker station (workers/station under workerd, Miniflare) on the same layers, same run,
// JSON on stdout:
//   node bench/fat-station.mjs [--layers A..B] [--prompt-tokens N] [--decode N]
// Model: a `knot synth` 85M-shape llama (hidden 768, 12 layers, 12 heads / 4 KV, FFN 2048,
// vocab 512, Q4_K_M), stations [A, B) of it (default 0..6). Each station gets the same frames by
// HTTP POST: a prefill of N rows, then `decode` one-row frames; ms/token is the median decode
// round trip (client to station and back: compute + one local HTTP hop), after one warm-up session.
import {spawn} from "node:child_process";
import {rmSync} from "node:fs";
import {startMesh} from "../deploy/miniflare.mjs";
import {topologyFromCounts} from "../workers/lib/topology.mjs";
import * as kw from "../bindings/knotwork.mjs";
import {encodeFrame} from "../workers/lib/frame.mjs";
import {synth85m} from "./lib/synth.mjs";

const args = process.argv.slice(2);
const opt = (name, def) => { const i = args.indexOf(name); return i >= 0 ? args.splice(i, 2)[1] : def; };
const [l0, l1] = opt("--layers", "0..6").split("..").map(Number);
const nPrompt = Number(opt("--prompt-tokens", 32)), nDecode = Number(opt("--decode", 32));
const {dir, file, bytes, knot} = synth85m("knot-bench-fat-");
const config = (await kw.parseKnotHeader(kw.bytesSource(bytes, "model.knot"))).config;
const E = config.n_embd, N_CTX = nPrompt + nDecode + 8;

const cuts = [l0, l1 - l0, config.n_layer - l1].filter((n) => n > 0);
const si = l0 > 0 ? 1 : 0;
const mesh = await startMesh({knotBytes: bytes, topology: topologyFromCounts(config, {knot: "model.knot", stations: cuts})});
const name = mesh.topology.stations[si].members[0].name;
const worker = await mesh.worker(`knot-${name}`);

const proc = spawn(knot, ["station", file, "--layers", `${l0}..${l1}`, "--port", "0", "--role", mesh.topology.stations[si].role], {stdio: ["ignore", "pipe", "inherit"]});
const url = await new Promise((ok) => proc.stdout.on("data", (d) => { const m = /listening on (\S+)/.exec(String(d)); if (m) ok(m[1]); }));

const rows = (seed, pos, n) => Float32Array.from({length: n * E}, (_, i) => Math.sin(seed * 7.1 + (pos + i / E) * 1.7 + (i % E) * 0.37) * 0.5);
async function session(send, sid) {
  const f = (pos, n) => encodeFrame({kind: pos === 0 || n > 1 ? "prefill" : "decode", sid, reqId: pos + 1, pos, width: E, nCtx: N_CTX, data: rows(1, pos, n)});
  let t = performance.now();
  await send(f(0, nPrompt), sid);
  const prefillMs = performance.now() - t;
  const ms = [];
  for (let p = nPrompt; p < nPrompt + nDecode; p++) {
    t = performance.now();
    await send(f(p, 1), sid);
    ms.push(performance.now() - t);
  }
  ms.sort((a, b) => a - b);
  return {prefillMs: +prefillMs.toFixed(2), msPerToken: +ms[ms.length >> 1].toFixed(3), minMs: +ms[0].toFixed(3)};
}
const check = async (r) => { if (!r.ok) throw new Error(`HTTP ${r.status}: ${await r.text()}`); await r.arrayBuffer(); };
const viaWorker = async (b, sid) => check(await worker.fetch(`http://x/?sid=${sid}`, {method: "POST", body: b}));
const viaFat = async (b, sid) => check(await fetch(`${url}/?sid=${sid}`, {method: "POST", body: b}));

try {
  await session(viaWorker, "warm-w");
  await session(viaFat, "warm-f");
  const w = await session(viaWorker, "run-w"), f = await session(viaFat, "run-f");
  const health = await (await fetch(`${url}/health`)).json();
  console.log(JSON.stringify({bench: "fat-station", date: new Date().toISOString().slice(0, 10), model: "synth85m Q4_K_M",
    layers: [l0, l1], promptTokens: nPrompt, decode: nDecode, worker: w, fat: f,
    speedup: +(w.msPerToken / f.msPerToken).toFixed(2), fatRss: health.memory.rss, fatTensorBytes: health.memory.tensorBytes}));
} finally {
  proc.kill("SIGTERM");
  await mesh.close();
  rmSync(dir, {recursive: true, force: true});
}
