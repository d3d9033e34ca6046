// local-mesh.mjs — a test oracle: a whole mesh in this isolate, over bindings/mesh.mjs
// ModelParts and Stations (docs/architecture.md, docs/memory.md, docs/protocol.md). Tests
// compare it with model.generate() and with the workers' mesh; the real loop is
// workers/coordinator/mesh.mjs. Native twin: tests/native/local_mesh.h (knot::LocalMesh),
// same plan, same sums.
//
//    plan = {layers: [0, a, .., n_layer],         station cuts
//            heads:  [[0, .., n_head], ..],        per station: head-slice cuts (GQA multiples)
//            ffn:    [[0, .., n_ff], ..],          per station: FFN column cuts
//            vocab:  [0, .., n_vocab]}             shard cuts, end to end (no padding rows)
//    checkPlan(cfg, plan)                          throws naming the bad cut
//    runLayers(range, x, ntok, pos0)               one station range over x, in place:
//        range = {l0, l1, attn: [(layer, pos0, x, ntok) => partial], ffn: [(layer, x, ntok) => partial],
//                 sequential?: run a phase's slices one at a time}
//        per layer: x += Σ attn partials, then x += Σ ffn partials (slice order;
//        workers/lib/partials.mjs addPartials, the mesh's one merge rule)
//    meshForward(mesh, ids, pos0, {k, logits})     embed (Σ shard partials) -> stations in
//        order -> output norm -> every shard's top-k -> {top: merged TopK, logits?}
//        mesh = {nEmbd, shards: [{v0, v1, embed(ids), lmHead(xn, {k, logits})}],
//                stations: [range], outputNorm(xLast)}
//    meshGenerate(mesh, gen, promptIds, {k, chunk}) async iterator of Generator steps:
//        chunked prefill, then one position per step; gen = Generator (bindings/generator.mjs)
//    openLocalMesh(open, plan, opts) -> LocalMesh: every piece in this isolate; open(role)
//        returns the ModelParts a piece reads.
//
//   const mesh = await openLocalMesh((role) => openParts(src(role)), plan, {nCtx: 256});
//   const gen = await Generator.open(mesh.parts, {maxTokens: 32, nCtx: 256});
//   for await (const s of meshGenerate(mesh, gen, promptIds)) write(s.text);
import {topkLse, mergeTopK} from "../../bindings/generator.mjs";
import {addPartials} from "../../workers/lib/partials.mjs";

/** Throws naming the first bad cut of a plan for a model config (see the header). */
export function checkPlan(cfg, plan) {
  const {n_layer: L, n_head: H, n_head_kv: KV, n_ff: F, n_vocab: V} = cfg;
  const g = H / KV;
  const cuts = (what, c, lo, hi, mult = 1) => {
    if (!Array.isArray(c) || c.length < 2 || c[0] !== lo || c.at(-1) !== hi)
      throw new Error(`plan: ${what} must run from ${lo} to ${hi}, got ${JSON.stringify(c)}`);
    for (let i = 1; i < c.length; i++)
      if (!Number.isInteger(c[i]) || c[i] <= c[i - 1] || c[i] % mult)
        throw new Error(`plan: ${what} cut ${c[i]} (after ${c[i - 1]}) must be increasing${mult > 1 ? ` and a multiple of ${mult}` : ""}`);
  };
  cuts("layers", plan.layers, 0, L);
  const n = plan.layers.length - 1;
  if (plan.heads?.length !== n || plan.ffn?.length !== n)
    throw new Error(`plan: ${n} stations need ${n} head and ${n} FFN cut lists, got ${plan.heads?.length} and ${plan.ffn?.length}`);
  plan.heads.forEach((c, s) => cuts(`station ${s} heads`, c, 0, H, g));
  plan.ffn.forEach((c, s) => cuts(`station ${s} FFN columns`, c, 0, F));
  cuts("vocab", plan.vocab, 0, V);
  return plan;
}

/**
 * One station range over x in place (see the header). Partials may be promises; the
 * slices of a phase run concurrently unless range.sequential (slices sharing one isolate's
 * fluid residency). Partials are summed in slice order whatever order they arrive in.
 */
export async function runLayers(range, x, ntok, pos0) {
  const gather = async (fns, call) => {
    if (!range.sequential) return Promise.all(fns.map(call));
    const out = [];
    for (const f of fns) out.push(await call(f));
    return out;
  };
  for (let l = range.l0; l < range.l1; l++) {
    addPartials(x, addPartials(new Float32Array(x.length), ...await gather(range.attn, (f) => f(l, pos0, x, ntok))));
    addPartials(x, addPartials(new Float32Array(x.length), ...await gather(range.ffn, (f) => f(l, x, ntok))));
  }
  return x;
}

/**
 * Positions [pos0, pos0 + ids.length) through the mesh; returns {top} (the shards' merged
 * top-k + lse + min of the last position) and, with logits: true, the assembled logits
 * [n_vocab] (every shard's slice; for tests and small vocabularies).
 */
export async function meshForward(mesh, ids, pos0, {k = 40, logits = false} = {}) {
  const E = mesh.nEmbd, n = ids.length;
  const x = addPartials(new Float32Array(n * E), ...await Promise.all(mesh.shards.map((s) => s.embed(ids))));
  for (const range of mesh.stations) await runLayers(range, x, n, pos0);
  const xn = await mesh.outputNorm(x.subarray((n - 1) * E));
  const heads = await Promise.all(mesh.shards.map((s) => s.lmHead(xn, {k, logits})));
  const out = {top: await mergeTopK(heads.map((h) => h.top), k)};
  if (logits) {
    out.logits = new Float32Array(mesh.shards.at(-1).v1).fill(NaN);
    mesh.shards.forEach((s, i) => out.logits.set(heads[i].logits, s.v0));
  }
  return out;
}

/**
 * The coordinator's loop: prefill promptIds (chunks of `chunk`), then per step sample from
 * the merged top-k with the core Generator and run the new token. Yields each step
 * {id, text, done, reason}. The mesh's KV must be empty (or truncated to 0) first.
 */
export async function* meshGenerate(mesh, gen, promptIds, {k = 40, chunk = 64} = {}) {
  gen.start(promptIds);
  let top;
  for (let i = 0; i < promptIds.length; i += chunk)
    ({top} = await meshForward(mesh, promptIds.slice(i, i + chunk), i, {k}));
  for (let pos = promptIds.length; !gen.done; pos++) {
    const s = gen.step(top);
    yield s;
    if (!s.done) ({top} = await meshForward(mesh, [s.id], pos, {k}));
  }
}

/**
 * A whole mesh in this isolate: stations (one core Station per head slice, sharing the
 * stations' ModelParts) and vocab shards (each its own ModelParts holding only its rows of
 * token_embd / output, as separate isolates would). open(role) returns a ModelParts; role
 * is "stations" or "vocab v0-v1".
 * opts: reference (f32 kernels + KV), nCtx, fluid (load/run/evict per phase instead of
 * keeping every layer resident), ffnCombined (bool or (station, slice) => bool: one
 * gate+up call instead of two phases).
 */
export async function openLocalMesh(open, plan, {reference = false, nCtx = 64, fluid = false, ffnCombined = false} = {}) {
  const parts = await open("stations");
  const cfg = await parts.config();
  checkPlan(cfg, plan);
  const {n_layer: L, n_embd: E} = cfg;
  await parts.load(["output_norm_weight"]);
  if (!fluid) {
    const all = [];
    for (let l = 0; l < L; l++) for (const ph of ["attn", "ffn_gate", "ffn_up", "ffn_down"]) all.push(...parts.layerTensors(l, ph));
    await parts.load([...new Set(all)]);
  }
  const phase = async (l, phases, fn) => {  // fluid: these phases' tensors only while fn runs
    if (!fluid) return fn();
    const names = [...new Set(phases.flatMap((ph) => parts.layerTensors(l, ph)))];
    await parts.load(names);
    try { return await fn(); } finally { parts.evict(names); }
  };
  const combined = typeof ffnCombined === "function" ? ffnCombined : () => ffnCombined;
  const handles = [];
  const stations = plan.layers.slice(1).map((l1, s) => {
    const l0 = plan.layers[s], hc = plan.heads[s], fc = plan.ffn[s];
    const heads = hc.slice(1).map((h1, i) => parts.station({layers: [l0, l1], heads: [hc[i], h1], nCtx, reference}));
    handles.push(...heads);
    const run = heads[0];  // FFN slices need no KV: any station of the range runs them
    return {
      l0, l1, heads, sequential: fluid,
      attn: heads.map((st) => (l, pos0, x, n) => phase(l, ["attn"], () => st.attn(l, pos0, x, n))),
      ffn: fc.slice(1).map((c1, i) => async (l, x, n) => {
        const cols = [fc[i], c1];
        let h;
        if (combined(s, i)) {
          h = await phase(l, ["ffn_gate", "ffn_up"], () => run.ffnGateUp(l, x, n, cols));
        } else {
          h = await phase(l, ["ffn_gate"], () => run.ffnGate(l, x, n, cols));
          h = await phase(l, ["ffn_up"], () => run.ffnUp(l, x, n, h, cols));
        }
        return phase(l, ["ffn_down"], () => run.ffnDown(l, h, n, cols, E));
      }),
    };
  });
  const shards = [];
  for (const [i, v1] of plan.vocab.slice(1).entries()) {
    const v0 = plan.vocab[i];
    const sp = await open(`vocab ${v0}-${v1}`);
    await sp.loadRows("token_embd_weight", v0, v1);
    if (sp.has("output_weight")) await sp.loadRows("output_weight", v0, v1);
    shards.push({
      v0, v1, parts: sp,
      embed: (ids) => sp.embed(ids, v0, v1, E),
      lmHead: async (xn, {k = 40, logits = false} = {}) => {
        const lg = sp.lmHead(xn, 1, v0, v1, {reference});
        return {top: await topkLse(lg, v0, v1, k), logits: logits ? lg : undefined};
      },
    });
  }
  return new LocalMesh(cfg, parts, stations, shards, handles);
}

export class LocalMesh {
  constructor(cfg, parts, stations, shards, handles) {
    this.cfg = cfg;
    this.nEmbd = cfg.n_embd;
    this.parts = parts;        // the stations' ModelParts (also has the tokenizer for a Generator)
    this.stations = stations;  // runLayers ranges; .heads: the core Stations of each range
    this.shards = shards;
    this.handles = handles;
  }
  outputNorm(xLast) { return this.parts.outputNorm(xLast, 1); }
  forward(ids, pos0, opts) { return meshForward(this, ids, pos0, opts); }
  /** Forget positions >= nPos in every station (0: a new sequence). */
  truncate(nPos) { for (const st of this.handles) st.truncate(nPos); }
  async close() {
    for (const st of this.handles) st.free();
    for (const s of this.shards) await s.parts.close();
    await this.parts.close();
  }
}
