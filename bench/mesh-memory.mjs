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
import {join, resolve} from "node:path";
import {ROOT, spawnIsolate, synth7b} from "./lib/isolate.mjs";

const args = process.argv.slice(2);
const opt = (k, d) => { const i = args.indexOf(k); return i >= 0 ? args[i + 1] : d; };

await main();

async function main() {
  const layers = Number(opt("--layers", "4")), dir = resolve(opt("--dir", join(ROOT, "build/mem")));
  const budget = opt("--budget", "128MB"), only = opt("--only", "");
  const model = synth7b(dir, layers, (o) => console.log(JSON.stringify({bench: "mesh-memory", ...o})));
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
      const m = spawnIsolate(job);
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

