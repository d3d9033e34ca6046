// isolate.mjs — one isolate of a mesh plan run for real (the wasm module, bindings/mesh.mjs
// stations and shards, tensors streamed in by bindings/slices.mjs), for bench/mesh-memory.mjs
// (peak memory) and bench/estimate-7b.mjs (time per decode token). Run it in a fresh
// process per isolate so memory figures are the isolate's own.
//
// job: {model, kind: "station"|"shard", station: a plan entry, context, chunk, nEmbd, nHead,
//       nKv, headDim, nFf, timing?: N}
// A station runs, per layer, one prefill chunk and one decode step (resident: all its
// tensors held; fluid: load, run, evict per phase); a shard loads its token_embd and lm_head
// rows, embeds a chunk and computes the lm_head of one position. With timing = N, N more
// decode steps are timed (median): per phase compute ms and, for fluid stations, the load
// ms and bytes of each phase (read from the file, verified by hash, copied into wasm); the
// first prefill chunk's compute ms is reported too (prefill_compute_ms, prefill_tokens).
// With verifyRows [r, ...] (and timing N): per r, the median compute of N speculative verify
// passes of r rows (verify_compute_ms[r]; a shard: its lm-head of r rows, verify_lmhead_ms[r]).
// With prefillChunks [t, ...] (and timing N; a station): per t, the median compute of N warm
// prefill chunks of t tokens at the next positions (prefill_rows_ms[t], prefillRows below),
// after the first (cold) chunk and the decode steps: the first chunk pays the module's and
// the weights' first touch, the later ones run at the steady rate a prompt of many chunks sees.
// With cpu: true, compute and lm-head times are this process's CPU time, not wall time.
import {spawnSync} from "node:child_process";
import {existsSync, mkdirSync, statSync} from "node:fs";
import {dirname, join, resolve} from "node:path";
import {fileURLToPath} from "node:url";

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const KNOT = process.env.KNOT_BIN || join(ROOT, "build/bin/knot");

/** The qwen2.5-coder-7b-shaped synth model of `layers` layers in dir (written once, reused). */
export function synth7b(dir, layers, log = () => {}) {
  mkdirSync(dir, {recursive: true});
  const model = join(dir, `qwen7b-shaped-${layers}l-q4_k_m.knot`);
  if (!existsSync(model)) {
    const t0 = performance.now();
    const r = spawnSync(KNOT, ["synth", "--arch", "qwen2", "--hidden", "3584", "--layers", String(layers), "--heads", "28",
      "--kv-heads", "4", "--ffn", "18944", "--vocab", "151936", "--vocab-tensor", "152064", "--type", "Q4_K_M",
      "--ctx", "32768", "--fast", model], {encoding: "utf8"});
    if (r.status !== 0) throw new Error(`knot synth failed: ${r.stderr}`);
    log({synth: model, bytes: statSync(model).size, seconds: +((performance.now() - t0) / 1000).toFixed(2)});
  }
  return model;
}

/** Runs job (above) in a fresh Node process; its result object. */
export function spawnIsolate(job) {
  const r = spawnSync(process.execPath, ["--expose-gc", fileURLToPath(import.meta.url), JSON.stringify(job)],
                      {encoding: "utf8", maxBuffer: 1 << 24});
  if (r.status !== 0) throw new Error(`${job.station.id}: ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split("\n").pop());
}

const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

/** Per chunk size t of sizes: the median of n runs of pass(t) (a pass returns its compute ms). */
export async function prefillRows(pass, sizes, n) {
  const out = {};
  for (const t of sizes) {
    const ms = [];
    for (let i = 0; i < n; i++) ms.push(await pass(t));
    out[t] = median(ms);
  }
  return out;
}

export async function runIsolate(job) {
  // job.cpu: compute timed in this process's CPU time (user + system), which a loaded host's
  // waiting for a core does not inflate; loads stay wall time (they wait on I/O)
  const clock = job.cpu ? () => { const u = process.cpuUsage(); return (u.user + u.system) / 1000; } : () => performance.now();
  const {init, fileSource} = await import("../../bindings/knotwork.mjs");
  const {openParts} = await import("../../bindings/mesh.mjs");
  const {loadSlice} = await import("../../bindings/slices.mjs");
  const w = await init();
  // JS: V8 heapUsed + ArrayBuffers, sampled as found (with garbage not yet collected) and
  // right after a full GC (the live set: what V8 keeps when memory is short).
  let wasmPeak = 0, jsPeak = 0, jsRawPeak = 0, sampling = true;
  // (ArrayBuffer backing stores are released by V8's sweeper after the GC: collect, let a
  // macrotask pass, collect again, then read.)
  const sample = async () => {
    if (!sampling) return;
    wasmPeak = Math.max(wasmPeak, w.memory.buffer.byteLength);
    let u = process.memoryUsage();
    jsRawPeak = Math.max(jsRawPeak, u.heapUsed + u.arrayBuffers);
    globalThis.gc?.();
    await new Promise((r) => setImmediate(r));
    globalThis.gc?.();
    u = process.memoryUsage();
    jsPeak = Math.max(jsPeak, u.heapUsed + u.arrayBuffers);
  };
  await sample();
  const t0 = performance.now();
  const parts = await openParts(await fileSource(job.model));
  const s = job.station, E = job.nEmbd, K = job.chunk;
  let finite = true, positions = 0;
  const timing = {};
  const check = (a) => { for (const v of a) if (!Number.isFinite(v)) { finite = false; break; } return a; };
  const rand = (n, seed) => { const a = new Float32Array(n); let x = seed >>> 0 || 1; for (let i = 0; i < n; i++) { x ^= x << 13; x ^= x >>> 17; x ^= x << 5; a[i] = ((x >>> 0) / 4294967296 - 0.5); } return a; };
  const size = (n) => parts.entries.get(n)?.size ?? 0;
  if (job.kind === "shard") {
    const [v0, v1] = s.vocab;
    for (const name of s.tensors) { await loadSlice(parts, name, {rows: [v0, v1]}); await sample(); }
    const ids = Array.from({length: K}, (_, i) => v0 + (i * 7919) % (v1 - v0));
    check(parts.embed(ids, v0, v1, E)); await sample();
    check(parts.lmHead(rand(E, 3), 1, v0, v1)); await sample();
    if (job.timing) {
      const lm = [], em = [];
      for (let i = 0; i < job.timing; i++) {
        let t = clock();
        check(parts.lmHead(rand(E, 4 + i), 1, v0, v1));
        lm.push(clock() - t);
        t = clock();
        parts.embed([v0 + i], v0, v1, E);
        em.push(clock() - t);
      }
      Object.assign(timing, {lmhead_ms: median(lm), embed_ms: median(em)});
      if (job.verifyRows?.length) {  // the lm-head of a verify pass: r normed rows at once
        timing.verify_lmhead_ms = {};
        for (const r of job.verifyRows) {
          const ms = [];
          for (let i = 0; i < job.timing; i++) {
            const t = clock();
            check(parts.lmHead(rand(r * E, 40 + i), r, v0, v1));
            ms.push(clock() - t);
          }
          timing.verify_lmhead_ms[r] = median(ms);
        }
      }
    }
  } else {
    const D = job.headDim, G = job.nHead / job.nKv;
    const [h0, h1] = s.heads ?? [0, job.nHead], [c0, c1] = s.ffn_cols ?? [0, job.nFf];
    const sliced = !!s.slice;
    const cut = {attn_q_weight: {rows: [h0 * D, h1 * D]}, attn_k_weight: {rows: [h0 / G * D, h1 / G * D]},
                 attn_v_weight: {rows: [h0 / G * D, h1 / G * D]}, attn_output_weight: {cols: [h0 * D, h1 * D]},
                 ffn_gate_weight: {rows: [c0, c1]}, ffn_up_weight: {rows: [c0, c1]}, ffn_down_weight: {cols: [c0, c1]}};
    const phaseTensors = (l, phase) => parts.layerTensors(l, phase);
    const keep = (n) => /norm|bias/.test(n) || size(n) < (1 << 20);  // the residency rule
    let loadMs = 0, loadBytes = 0;
    const load = async (names) => {
      for (const n of names) {
        if (parts.loaded.has(n)) continue;
        const c = sliced ? cut[n.replace(/^blk_\d+_/, "")] : null;
        const t = performance.now();
        try { if (c) await loadSlice(parts, n, c); else await parts.load([n]); }
        catch (e) { if (c && /whole .* blocks/.test(e.message)) await parts.load([n]); else throw e; }
        loadMs += performance.now() - t;
        loadBytes += size(n);
        await sample();
      }
    };
    const fluid = s.mode === "fluid";
    const [l0, l1] = s.layers;
    const all = (l) => ["attn", "ffn_gate", "ffn_up", "ffn_down"].flatMap((p) => phaseTensors(l, p));
    if (!fluid) for (let l = l0; l < l1; l++) await load(all(l));
    else for (let l = l0; l < l1; l++) await load([...all(l)].filter(keep));
    const st = parts.station({layers: [l0, l1], heads: [h0, h1], nCtx: job.context});
    await sample();
    const computeMs = {attn: 0, ffn_gate: 0, ffn_up: 0, ffn_down: 0};
    const run = async (pos0, ntok) => {
      const x = rand(ntok * E, pos0 + 1);
      for (let l = l0; l < l1; l++) {
        const phase = async (p, fn) => {
          const names = phaseTensors(l, p);
          if (fluid) await load(names);
          const t = clock();
          const r = fn();
          computeMs[p] += clock() - t;
          await sample();
          if (fluid) parts.evict(names.filter((n) => !keep(n)));
          return r;
        };
        const a = await phase("attn", () => st.attn(l, pos0, x, ntok));
        for (let i = 0; i < x.length; i++) x[i] += a[i];
        let h = await phase("ffn_gate", () => st.ffnGate(l, x, ntok, [c0, c1]));
        h = await phase("ffn_up", () => st.ffnUp(l, x, ntok, h, [c0, c1]));
        const d = await phase("ffn_down", () => st.ffnDown(l, h, ntok, [c0, c1], E));
        for (let i = 0; i < x.length; i++) x[i] += d[i];
      }
      check(x);
    };
    await run(0, K);          // one prefill chunk (timed: the compute of its phases)
    const prefillMs = Object.values(computeMs).reduce((a, b) => a + b, 0);
    await run(K, 1);          // one decode step
    positions = K + 1;
    if (job.timing) {         // decode steps, timed (memory sampling off: it forces GCs)
      sampling = false;
      const steps = [];
      for (let i = 0; i < job.timing; i++) {
        for (const k in computeMs) computeMs[k] = 0;
        loadMs = 0; loadBytes = 0;
        await run(positions++, 1);
        steps.push({compute: Object.values(computeMs).reduce((a, b) => a + b, 0), load: loadMs, bytes: loadBytes, phases: {...computeMs}});
      }
      const mid = steps.map((x, i) => [x.compute + x.load, i]).sort((a, b) => a[0] - b[0])[steps.length >> 1][1];
      Object.assign(timing, {layers: l1 - l0, prefill_compute_ms: prefillMs, prefill_tokens: K, decode_compute_ms: steps[mid].compute, decode_load_ms: steps[mid].load,
                             decode_load_bytes: steps[mid].bytes, phase_ms: steps[mid].phases});
      // job.verifyRows [r, ...]: a speculative verify pass of r rows (the pending token and
      // r - 1 drafts) at the next positions, timed the same way (median compute of N passes)
      if (job.verifyRows?.length) {
        timing.verify_compute_ms = {};
        for (const r of job.verifyRows) {
          const ms = [];
          for (let i = 0; i < job.timing; i++) {
            for (const k in computeMs) computeMs[k] = 0;
            await run(positions, r);
            positions += r;
            ms.push(Object.values(computeMs).reduce((a, b) => a + b, 0));
          }
          timing.verify_compute_ms[r] = median(ms);
        }
      }
      // job.prefillChunks [t, ...]: warm prefill chunks of t tokens at the next positions
      if (job.prefillChunks?.length)
        timing.prefill_rows_ms = await prefillRows(async (t) => {
          for (const k in computeMs) computeMs[k] = 0;
          await run(positions, t);
          positions += t;
          return Object.values(computeMs).reduce((a, b) => a + b, 0);
        }, job.prefillChunks, job.timing);
    }
  }
  await sample();
  return {wasm_peak: wasmPeak, js_peak: jsPeak, js_peak_with_garbage: jsRawPeak, finite, positions,
          ms: Math.round(performance.now() - t0), ...timing};
}

if (process.argv[1] === fileURLToPath(import.meta.url)) console.log(JSON.stringify(await runIsolate(JSON.parse(process.argv[2]))));
