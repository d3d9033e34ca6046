// mesh.mjs — a model served as a mesh (docs/architecture.md, memory.md, protocol.md): layer stations (optionally cut
// into attention-head slices and FFN-column slices) and vocab shards, merged by summing
// partials, sampled by the coordinator from the shards' merged top-k.
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
// 2. The pieces a mesh is made of run in the workers (workers/station, workers/cobordism;
//    the loop: workers/coordinator/mesh.mjs); tests/wasm/local-mesh.mjs runs them all in
//    one isolate as a test oracle.
//    topkLse / mergeTopK / Generator: re-exported from generator.mjs.
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
