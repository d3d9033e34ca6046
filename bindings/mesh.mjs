// mesh.mjs — a model served as a mesh (docs/architecture.md, memory.md, protocol.md): layer stations (optionally cut
// into attention-head slices and FFN-column slices) and vocab shards, merged by summing
// partials, sampled by the coordinator from the shards' merged top-k. Two layers:
//
// 1. Parts (glue over wasm/abi_mesh.cpp; the core does the work and the checks):
//    openParts(source) -> ModelParts: a model whose tensors are loaded on demand
//      .load(names) / .evict(names) / .loadRows(name, r0, r1) (verified vocab/slice rows)
//      .layerTensors(layer, phase)   phase: "attn" | "ffn_gate" | "ffn_up" | "ffn_down"
//      .embed(ids, v0, v1, nEmbd), .outputNorm(x, ntok), .lmHead(xn, ntok, v0, v1)
//      .station({layers: [l0, l1], heads: [h0, h1], nCtx, reference}) -> Station (a core
//        knot::Station: one session's KV for that range/slice) with .attn, .ffnGate,
//        .ffnUp, .ffnGateUp, .ffnDown, .truncate, .exportKv, .importKv, .info, .free
//    Activations are Float32Arrays: x and partials [ntok * n_embd], FFN hidden
//    [ntok * (c1 - c0)], logits [ntok * (v1 - v0)].
//
// 2. Orchestration (what a coordinator runs; each piece is an async interface, so a piece
//    may be in this isolate or a Durable Object behind a stub):
//    plan = {layers: [0, a, .., n_layer],         station cuts
//            heads:  [[0, .., n_head], ..],        per station: head-slice cuts (GQA multiples)
//            ffn:    [[0, .., n_ff], ..],          per station: FFN column cuts
//            vocab:  [0, .., n_vocab]}             shard cuts, end to end (no padding rows)
//    checkPlan(cfg, plan)                          throws naming the bad cut
//    addPartials(acc, ...parts)                    the merge rule: acc += each partial
//    runLayers(range, x, ntok, pos0)               one station range over x, in place:
//        range = {l0, l1, attn: [(layer, pos0, x, ntok) => partial], ffn: [(layer, x, ntok) => partial],
//                 sequential?: run a phase's slices one at a time}
//        per layer: x += Σ attn partials, then x += Σ ffn partials (slice order)
//    meshForward(mesh, ids, pos0, {k, logits})     embed (Σ shard partials) -> stations in
//        order -> output norm -> every shard's top-k -> {top: merged TopK, logits?}
//        mesh = {nEmbd, shards: [{v0, v1, embed(ids), lmHead(xn, {k, logits})}],
//                stations: [range], outputNorm(xLast)}
//    meshGenerate(mesh, gen, promptIds, {k, chunk}) async iterator of Generator steps:
//        chunked prefill, then one position per step; gen = Generator (generator.mjs)
//    openLocalMesh(open, plan, opts) -> LocalMesh: every piece in this isolate (tests,
//        single-isolate deployments); open(role) returns the ModelParts a piece reads.
//        Native twin: knot::LocalMesh (core/infer/mesh.h), same plan, same sums.
//    topkLse / mergeTopK / Generator: re-exported from generator.mjs.
//
//   const mesh = await openLocalMesh((role) => openParts(src(role)), plan, {nCtx: 256});
//   const gen = await Generator.open(mesh.parts, {maxTokens: 32, nCtx: 256});
//   for await (const s of meshGenerate(mesh, gen, promptIds)) write(s.text);
import {init, openTable, loadTensor, _resolveSource as resolveSource, _withOut as withOut} from "./knotwork.mjs";
import {topkLse, mergeTopK, Generator} from "./generator.mjs";
export {topkLse, mergeTopK, Generator};

const FFN_PHASE = {gate: 0, up: 1, down: 2, gate_up: 3};

/**
 * Open a model's header only; load tensors on demand.
 * @param {import("./sources.mjs").ByteSource} source  kept open until close()
 */
export async function openParts(source, {probe = 256 * 1024} = {}) {
  const w = await init();
  source = await resolveSource(source);
  const {handle, table} = await openTable(w, source, probe);
  return new ModelParts(w, source, handle, table);
}

export class ModelParts {
  constructor(w, source, handle, table) {
    this.w = w;
    this.source = source;
    this.handle = handle;
    this.format = table.format;
    this.entries = new Map(table.tensors.map((t) => [t.name, t]));
    this.arch = table.arch;  // the core's architecture table: tensors per phase (arch.h)
    this.loaded = new Set();
  }

  /** Model config, from a header parse (cached). */
  async config() {
    if (!this._config) {
      const {parseKnotHeader} = await import("./knotwork.mjs");
      this._config = (await parseKnotHeader(this.source)).config;
    }
    return this._config;
  }

  has(name) { return this.entries.has(name); }
  /** Load the tokenizer only (.knot: its payload blob; GGUF: it came with the header), e.g. for a Generator. */
  async loadTokenizer() { if (this.format === "knot") await this.load(["tokenizer"]); }
  /** Names of the tensors a phase of a layer uses that exist in this file. */
  layerTensors(layer, phase) {
    const names = this.arch.phases[phase]?.filter((t) => t.per_layer);
    if (!names?.length) throw new Error(`unknown phase ${phase}`);
    return names.map((t) => `blk_${layer}_${t.name}`).filter((n) => this.entries.has(n));
  }
  #entry(name) {
    const t = this.entries.get(name);
    if (!t) throw new Error(`${this.source.name}: no tensor ${name}`);
    return t;
  }

  /** Load whole tensors (no-op for ones already loaded). */
  async load(names) {
    for (const n of names) {
      if (this.loaded.has(n)) continue;
      await loadTensor(this.w, this.source, this.handle, this.#entry(n));
      this.loaded.add(n);
    }
  }
  evict(names) {
    for (const n of names) {
      this.w.call("kw_model_tensor_evict", this.handle, this.#entry(n).i);
      this.loaded.delete(n);
    }
  }
  /** Load only rows [r0, r1) of a tensor (vocab slice of token_embd / output), verified. */
  async loadRows(name, r0, r1) {
    const w = this.w, t = this.#entry(name);
    w.call("kw_model_rows_plan", this.handle, t.i, r0, r1);
    const {offset, size} = w.resultJSON();
    const bytes = await this.source.read(offset, size);
    const p = w.copyIn(bytes);
    try { w.call("kw_model_rows_load", this.handle, t.i, r0, r1, p, offset, size); } finally { w.free(p); }
    this.loaded.add(name);
  }

  /** Embedding partial: rows of ids in [v0, v1), zeros elsewhere. */
  embed(ids, v0, v1, nEmbd) {
    const w = this.w, n = ids.length;
    return withBuffers(w, [Int32Array.from(ids), n * nEmbd * 4], ([pi, po]) => {
      w.call("kw_embed", this.handle, pi, n, v0, v1, po);
      return w.f32(po, n * nEmbd).slice();
    });
  }
  outputNorm(x, ntok) {
    const w = this.w;
    return withBuffers(w, [x, x.length * 4], ([px, po]) => {
      w.call("kw_output_norm", this.handle, px, ntok, po);
      return w.f32(po, x.length).slice();
    });
  }
  /** Logits of vocab slice [v0, v1): [ntok * (v1 - v0)]. */
  lmHead(xn, ntok, v0, v1, {softcap = 0, reference = false} = {}) {
    const w = this.w;
    return withBuffers(w, [xn, ntok * (v1 - v0) * 4], ([px, po]) => {
      w.call("kw_lm_head", this.handle, px, ntok, v0, v1, po, softcap, reference ? 1 : 0);
      return w.f32(po, ntok * (v1 - v0)).slice();
    });
  }
  /** A station: KV cache for layers [l0, l1) and heads [h0, h1). */
  station({layers, heads = [0, -1], nCtx, reference = false}) {
    const w = this.w;
    const h = withOut(w, (out) => w.call("kw_station_new", this.handle, layers[0], layers[1], nCtx, heads[0], heads[1], reference ? 1 : 0, out));
    return new Station(this, h);
  }
  close() {
    if (this.handle) { this.w.exports.kw_model_free(this.handle); this.handle = 0; }
    return this.source.close?.();
  }
}

export class Station {
  constructor(parts, handle) { this.parts = parts; this.w = parts.w; this.handle = handle; }
  /** Attention partial residual for positions [pos0, pos0 + ntok); appends to the KV cache. */
  attn(layer, pos0, x, ntok) {
    const w = this.w;
    return withBuffers(w, [x, x.length * 4], ([px, po]) => {
      w.call("kw_station_attn", this.handle, layer, pos0, px, ntok, po);
      return w.f32(po, x.length).slice();
    });
  }
  #ffn(phase, layer, x, ntok, h, [c0, c1], outLen) {
    const w = this.w;
    return withBuffers(w, [x ?? 4, h, Math.max(4, outLen * 4)], ([px, ph, po]) => {
      w.call("kw_station_ffn", this.handle, FFN_PHASE[phase], layer, x ? px : 0, ntok, ph, po, c0, c1);
      return phase === "down" ? w.f32(po, outLen).slice() : w.f32(ph, h.length).slice();
    });
  }
  /** h = ffn_norm(x) @ gate[c0:c1]^T */
  ffnGate(layer, x, ntok, cols) { return this.#ffn("gate", layer, x, ntok, new Float32Array(ntok * (cols[1] - cols[0])), cols, 0); }
  /** h = silu(h) * (ffn_norm(x) @ up[c0:c1]^T) */
  ffnUp(layer, x, ntok, h, cols) { return this.#ffn("up", layer, x, ntok, h, cols, 0); }
  ffnGateUp(layer, x, ntok, cols) { return this.#ffn("gate_up", layer, x, ntok, new Float32Array(ntok * (cols[1] - cols[0])), cols, 0); }
  /** out = h @ down[:, c0:c1]^T : partial residual [ntok * n_embd] */
  ffnDown(layer, h, ntok, cols, nEmbd) { return this.#ffn("down", layer, null, ntok, h, cols, ntok * nEmbd); }
  truncate(nPos) { this.w.call("kw_station_truncate", this.handle, nPos); }
  /** KV snapshot of positions [pos0, pos0+n): Uint8Array of n x info().kv_bytes_per_token bytes (a copy). */
  exportKv(pos0, n) {
    this.w.call("kw_station_kv_export", this.handle, pos0, n);
    return this.w.resultBytes().slice();
  }
  /** Append a snapshot's positions at pos0 (== the station's n_pos; truncate first). */
  importKv(pos0, bytes) {
    const per = this.info().kv_bytes_per_token, n = bytes.length / per;
    if (!Number.isInteger(n)) throw new Error(`importKv: ${bytes.length} bytes are not whole positions of ${per} bytes`);
    const p = this.w.copyIn(bytes);
    try { this.w.call("kw_station_kv_import", this.handle, pos0, n, p, bytes.length); } finally { this.w.free(p); }
  }
  info() { this.w.call("kw_station_info", this.handle); return this.w.resultJSON(); }
  free() { if (this.handle) { this.w.exports.kw_station_free(this.handle); this.handle = 0; } }
}

// Allocate one wasm buffer per spec (a typed array to copy in, or a byte count), run fn
// with their pointers, free them.
function withBuffers(w, specs, fn) {
  const ptrs = [];
  try {
    for (const s of specs) {
      if (typeof s === "number") ptrs.push(w.malloc(s));
      else ptrs.push(w.copyIn(new Uint8Array(s.buffer, s.byteOffset, s.byteLength)));
    }
    return fn(ptrs);
  } finally { for (const p of ptrs) w.free(p); }
}

// ---- orchestration ----------------------------------------------------------------------

/** The merge rule (docs/architecture.md): acc[i] += p[i] for each partial, in order. Returns acc. */
export function addPartials(acc, ...parts) {
  for (const p of parts) {
    if (p.length !== acc.length) throw new Error(`partial of ${p.length} values, expected ${acc.length}`);
    for (let i = 0; i < acc.length; i++) acc[i] += p[i];
  }
  return acc;
}

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
