// mesh-memory.mjs — memory, measured: each isolate of a plan (bindings/planner.mjs) run
// for real in its own process — the wasm module, bindings/mesh.mjs stations and shards,
// tensors streamed in by bindings/slices.mjs — on a qwen2.5-coder-7b-shaped synth model
// (hidden 3584, FFN 18944, 28/4 heads, head_dim 128, 152,064 vocab rows, Q4_K_M), for the
// resident plan and the fluid plan. Prints one JSON line per isolate — peak wasm linear
// memory, peak JS heap (V8 heapUsed + ArrayBuffers live after a GC; also as found, with
// the garbage of streamed chunks not yet collected), their sum, the planner's estimate —
// and a summary line; exits 1 when any isolate exceeds the budget.
//
//   node bench/mesh-memory.mjs [--layers 4] [--dir build/mem] [--budget 128MB] [--only resident|fluid]
//
// The model (~1.4 GB for 4 layers) is written by `knot synth --fast` into --dir (never
// the repo) and reused. A station runs, per layer, one prefill chunk of the plan's size
// and one decode step (resident: all its tensors held; fluid: load, run, evict per
// phase); a shard loads its token_embd and lm_head rows, embeds a chunk and computes the
// lm_head of one position. The KV cache is allocated for the plan's full context up front;
// the attention scratch that grows with the positions actually attended (2 x head_dim f32
// per position, forward.h's kf/vf) is added from the planner's formula and reported
// apart as `attn_scratch_at_context`, since filling a 20k-token context is minutes of work.
import {spawnSync} from "node:child_process";
import {existsSync, mkdirSync, statSync} from "node:fs";
import {dirname, join, resolve} from "node:path";
import {fileURLToPath} from "node:url";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const KNOT = process.env.KNOT_BIN || join(ROOT, "build/bin/knot");
const args = process.argv.slice(2);
const opt = (k, d) => { const i = args.indexOf(k); return i >= 0 ? args[i + 1] : d; };

if (args[0] === "--child") await child(JSON.parse(args[1]));
else await main();

async function main() {
  const layers = Number(opt("--layers", "4")), dir = resolve(opt("--dir", join(ROOT, "build/mem")));
  const budget = opt("--budget", "128MB"), only = opt("--only", "");
  mkdirSync(dir, {recursive: true});
  const model = join(dir, `qwen7b-shaped-${layers}l-q4_k_m.knot`);
  if (!existsSync(model)) {
    const t0 = performance.now();
    const r = spawnSync(KNOT, ["synth", "--arch", "qwen2", "--hidden", "3584", "--layers", String(layers), "--heads", "28",
      "--kv-heads", "4", "--ffn", "18944", "--vocab", "151936", "--vocab-tensor", "152064", "--type", "Q4_K_M",
      "--ctx", "32768", "--fast", model], {encoding: "utf8"});
    if (r.status !== 0) throw new Error(`knot synth failed: ${r.stderr}`);
    console.log(JSON.stringify({bench: "mesh-memory", synth: model, bytes: statSync(model).size,
                                seconds: +((performance.now() - t0) / 1000).toFixed(2)}));
  }
  const {plan} = await import("../bindings/planner.mjs");
  const plans = {resident: {budget}, fluid: {budget, mode: "fluid", stations: 2}};
  let worst = 0, over = 0, n = 0;
  for (const [name, opts] of Object.entries(plans)) {
    if (only && only !== name) continue;
    const p = await plan(model, opts);
    const isolates = [...p.stations.map((s) => ({kind: "station", s})), ...(name === "resident" ? p.shards.map((s) => ({kind: "shard", s})) : [])];
    for (const {kind, s} of isolates) {
      const job = {model, kind, station: s, context: p.context, chunk: p.chunk, nEmbd: p.model.n_embd, nHead: p.model.n_head,
                   nKv: p.model.n_head_kv, headDim: p.model.head_dim, nFf: p.model.n_ff};
      const r = spawnSync(process.execPath, ["--expose-gc", fileURLToPath(import.meta.url), "--child", JSON.stringify(job)],
                          {encoding: "utf8", maxBuffer: 1 << 24});
      if (r.status !== 0) throw new Error(`${s.id}: ${r.stderr}`);
      const m = JSON.parse(r.stdout.trim().split("\n").pop());
      const scratch = kind === "station" ? Math.max(0, p.context - m.positions) * (2 * p.model.head_dim + 1) * 4 : 0;
      const total = m.wasm_peak + m.js_peak + scratch;
      worst = Math.max(worst, total);
      if (total > p.budget) over++;
      n++;
      console.log(JSON.stringify({bench: "mesh-memory", plan: name, id: s.id, mode: s.mode ?? "resident", context: p.context,
        chunk: p.chunk, wasm_peak: m.wasm_peak, js_peak: m.js_peak, js_peak_with_garbage: m.js_peak_with_garbage,
        attn_scratch_at_context: scratch, total,
        budget: p.budget, within: total <= p.budget, estimate: s.memory.total,
        output_finite: m.finite, ms: m.ms}));
    }
  }
  console.log(JSON.stringify({bench: "mesh-memory", summary: true, isolates: n, over_budget: over, worst_total: worst}));
  process.exitCode = over ? 1 : 0;
}

// One isolate, measured in a fresh process.
async function child(job) {
  const {init, fileSource} = await import("../bindings/knotwork.mjs");
  const {openParts} = await import("../bindings/mesh.mjs");
  const {loadSlice} = await import("../bindings/slices.mjs");
  const w = await init();
  // JS: V8 heapUsed + ArrayBuffers, sampled as found (with garbage not yet collected) and
  // right after a full GC (the live set: what V8 keeps when memory is short).
  let wasmPeak = 0, jsPeak = 0, jsRawPeak = 0;
  // (ArrayBuffer backing stores are released by V8's sweeper after the GC: collect, let a
  // macrotask pass, collect again, then read.)
  const sample = async () => {
    wasmPeak = Math.max(wasmPeak, w.memory.buffer.byteLength);
    let u = process.memoryUsage();
    jsRawPeak = Math.max(jsRawPeak, u.heapUsed + u.arrayBuffers);
    globalThis.gc();
    await new Promise((r) => setImmediate(r));
    globalThis.gc();
    u = process.memoryUsage();
    jsPeak = Math.max(jsPeak, u.heapUsed + u.arrayBuffers);
  };
  await sample();
  const t0 = performance.now();
  const parts = await openParts(await fileSource(job.model));
  const s = job.station, E = job.nEmbd, K = job.chunk;
  let finite = true, positions = 0;
  const check = (a) => { for (const v of a) if (!Number.isFinite(v)) { finite = false; break; } return a; };
  const rand = (n, seed) => { const a = new Float32Array(n); let x = seed >>> 0 || 1; for (let i = 0; i < n; i++) { x ^= x << 13; x ^= x >>> 17; x ^= x << 5; a[i] = ((x >>> 0) / 4294967296 - 0.5); } return a; };
  const size = (n) => parts.entries.get(n)?.size ?? 0;
  if (job.kind === "shard") {
    const [v0, v1] = s.vocab;
    for (const name of s.tensors) { await loadSlice(parts, name, {rows: [v0, v1]}); await sample(); }
    const ids = Array.from({length: K}, (_, i) => v0 + (i * 7919) % (v1 - v0));
    check(parts.embed(ids, v0, v1, E)); await sample();
    check(parts.lmHead(rand(E, 3), 1, v0, v1)); await sample();
  } else {
    const D = job.headDim, G = job.nHead / job.nKv;
    const [h0, h1] = s.heads ?? [0, job.nHead], [c0, c1] = s.ffn_cols ?? [0, job.nFf];
    const sliced = !!s.slice;
    const cut = {attn_q_weight: {rows: [h0 * D, h1 * D]}, attn_k_weight: {rows: [h0 / G * D, h1 / G * D]},
                 attn_v_weight: {rows: [h0 / G * D, h1 / G * D]}, attn_output_weight: {cols: [h0 * D, h1 * D]},
                 ffn_gate_weight: {rows: [c0, c1]}, ffn_up_weight: {rows: [c0, c1]}, ffn_down_weight: {cols: [c0, c1]}};
    const phaseTensors = (l, phase) => parts.layerTensors(l, phase);
    const load = async (names) => {
      for (const n of names) {
        if (parts.loaded.has(n)) continue;
        const c = sliced ? cut[n.replace(/^blk_\d+_/, "")] : null;
        try { if (c) await loadSlice(parts, n, c); else await parts.load([n]); }
        catch (e) { if (c && /whole .* blocks/.test(e.message)) await parts.load([n]); else throw e; }
        await sample();
      }
    };
    const fluid = s.mode === "fluid";
    const [l0, l1] = s.layers;
    const all = (l) => ["attn", "ffn_gate", "ffn_up", "ffn_down"].flatMap((p) => phaseTensors(l, p));
    if (!fluid) for (let l = l0; l < l1; l++) await load(all(l));
    else for (let l = l0; l < l1; l++) await load([...all(l)].filter((n) => /norm|bias/.test(n) || size(n) < (1 << 20)));
    const st = parts.station({layers: [l0, l1], heads: [h0, h1], nCtx: job.context});
    await sample();
    const run = async (pos0, ntok) => {
      const x = rand(ntok * E, pos0 + 1);
      for (let l = l0; l < l1; l++) {
        const phase = async (p, fn) => {
          const names = phaseTensors(l, p);
          if (fluid) await load(names);
          const r = fn();
          await sample();
          if (fluid) parts.evict(names.filter((n) => !(/norm|bias/.test(n) || size(n) < (1 << 20))));
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
    await run(0, K);          // one prefill chunk
    await run(K, 1);          // one decode step
    positions = K + 1;
  }
  await sample();
  console.log(JSON.stringify({wasm_peak: wasmPeak, js_peak: jsPeak, js_peak_with_garbage: jsRawPeak, finite, positions,
                              ms: Math.round(performance.now() - t0)}));
}
