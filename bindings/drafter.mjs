// drafter.mjs — a draft model on its own (wasm ABI kw_drafter_*, wasm/abi_draft.cpp): what a
// mesh coordinator drafts with. It holds the draft model's weights and its own KV cache in
// this realm's wasm instance, beside the target's tokenizer (a text model); the stations
// verify its proposals in one pass (workers/coordinator/mesh.mjs).
//
//   const fit = await draftFits(header, {nCtx, n: 4});      // before loading: refused naming it
//   const d = await Drafter.open(draftModel, targetText, {nCtx, n: 4});
//   d.prime(promptIds);                                    // during the prefill (optional)
//   const {ids, q} = d.propose(hist, room);               // up to min(n, room) tokens after hist
//   d.free();
//
// A proposal is {ids, q}: q[i] is the draft's distribution {ids, p} at ids[i]'s position, or
// null when it is one-hot at ids[i] (a greedy draft: no generator given, or a greedy one);
// the mesh passes q on to the acceptance rule (Generator.stepDraft).
// Memory: the draft's weights and KV are counted in this instance's linear memory
// (memoryStats) under its 128 MB cap; draftFits refuses a draft whose tensors, KV cache,
// activation buffers and proposal distributions would not fit before a byte of it is loaded,
// and the core (kw_drafter_new) refuses an engine (KV, buffers, distributions) that does not.
// draftFits counts an F16 KV cache, the least a draft needs; kw_drafter_new keeps F16's values
// as f32 instead (F16InF32: twice the bytes, read in place by attention, no f16 conversion per
// step, the same drafts) when that still leaves 16 MB free, and reports which in
// info.kv_type ("F16" | "F16InF32").
import {init, memoryStats, Model} from "./knotwork.mjs";
import {readProposal} from "./generator.mjs";

const LINEAR_CAP = 128 * 1024 * 1024;  // the module's maximum memory (docs/memory.md)

/** Bytes of KV cache per position of a model config (f16 K and V, the fast mode's). */
export function kvBytesPerToken(c) {
  return 2 * c.n_layer * c.n_head_kv * c.head_dim * 2;
}

/**
 * Bytes of a draft engine's activation buffers and its proposals' distributions for a model
 * config (what core/infer/generate.cpp engine_bytes counts beside the KV cache: the
 * workspace, the residual stream, the logits; then draft_n x the vocabulary x 12 bytes, the
 * distributions of sampling drafts), as kw_drafter_new counts them.
 */
export function draftBufferBytes(c, {nCtx, chunk = 64, n = 4} = {}) {
  const T = Math.max(1, Math.min(chunk, nCtx)), hd = c.head_dim, E = c.n_embd, F = c.n_ff;
  const nh = c.n_head, nkv = c.n_head_kv, V = c.n_vocab;
  const ws = T * E + 2 * T * nh * hd + 2 * T * nkv * hd + 2 * nCtx * hd + nCtx + 2 * T * F + Math.max(E, nh * hd) + T * E;
  return 4 * (ws + T * E + E + V) + n * V * 12;
}

/**
 * Whether a draft model (its parsed header: parseKnotHeader) fits in what is left of this
 * instance's 128 MB: {weightBytes, kvBytes, bufferBytes, free}; throws naming the draft when
 * its tensors, its KV cache, its activation buffers and proposal distributions (n: tokens
 * per proposal; draftBufferBytes) and margin do not fit.
 * margin: bytes left for the coordinator's temporaries.
 */
export async function draftFits(header, {nCtx, n = 4, name = "draft", margin = 8 << 20} = {}) {
  const c = header.config;
  const weightBytes = header.tensors.reduce((a, t) => a + (t.size ?? 0), 0);
  const ctx = nCtx > 0 ? Math.min(nCtx, c.n_ctx_train > 0 ? c.n_ctx_train : nCtx) : (c.n_ctx_train || 2048);
  const kvBytes = kvBytesPerToken(c) * ctx;
  const bufferBytes = draftBufferBytes(c, {nCtx: ctx, n});
  const free = LINEAR_CAP - (await memoryStats()).heap;
  if (weightBytes + kvBytes + bufferBytes + margin > free)
    throw new Error(`draft model ${name} does not fit in the coordinator's 128 MB wasm memory: ${weightBytes} bytes of weights + ` +
                    `${kvBytes} bytes of KV cache (${ctx} positions) + ${bufferBytes} bytes of buffers and proposal distributions + ` +
                    `${margin} spare, but ${free} bytes are free`);
  return {weightBytes, kvBytes, bufferBytes, free};
}

export class Drafter {
  /**
   * @param {Model} draft  a loaded model (openModel) with the target's vocabulary
   * @param {Model} target  the target's model or text model (its tokenizer is compared)
   * @param {{nCtx?: number, n?: number}} o  nCtx: the target's context; n: tokens per proposal (1..64)
   */
  static async open(draft, target, {nCtx, n = 4} = {}) {
    const w = await init();
    if (!(draft instanceof Model) || draft.closed) throw new Error("Drafter.open: draft must be a loaded Model (openModel)");
    const o = JSON.stringify({...(nCtx > 0 ? {n_ctx: nCtx} : {}), draft_n: n});
    const p = w.malloc(8);
    let h;
    try {
      w.withString(o, (q, len) => w.call("kw_drafter_new", draft.handle, target.handle, q, len, p));
      h = w.i32(p, 1)[0];
    } finally { w.free(p); }
    return new Drafter(w, h, w.resultJSON(), draft);
  }
  constructor(w, handle, info, model) {
    this.w = w;
    this.handle = handle;
    /** {n_ctx, draft_n, kv_bytes, engine_bytes, kv_type} */
    this.info = info;
    this.n = info.draft_n;
    this.model = model;
  }
  #ids(fn, hist, ...rest) {
    const w = this.w, a = Int32Array.from(hist);
    const p = w.copyIn(new Uint8Array(a.buffer));
    try { w.call(fn, this.handle, p, a.length, ...rest); } finally { w.free(p); }
  }
  /** Feed hist but its last token (the prompt, while the stations prefill it). */
  prime(hist) { if (hist.length > 1) this.#ids("kw_drafter_prime", hist); }
  /**
   * Up to min(n, room) tokens after hist: {ids, q} (q null: one-hot at each id). gen: the
   * request's Generator (bindings/generator.mjs) — when it samples, the drafts are drawn as it
   * samples (its chain, grammar and seeded RNG: kw_drafter_propose_with) and q[i] = {ids, p}
   * is the distribution ids[i] was drawn from, for Generator.stepDraft(top, ids[i], q[i]).
   */
  propose(hist, room, gen = null) {
    if (room <= 0) return {ids: [], q: null};
    if (gen) {
      const w = this.w, a = Int32Array.from(hist);
      const p = w.copyIn(new Uint8Array(a.buffer));
      try { w.call("kw_drafter_propose_with", this.handle, gen.handle, p, a.length, room); } finally { w.free(p); }
      return readProposal(w);
    }
    this.#ids("kw_drafter_propose", hist, room);
    const b = this.w.resultBytes();
    return {ids: Array.from(new Int32Array(b.buffer, b.byteOffset, b.length / 4)), q: null};
  }
  /** {passes, n_pos, n_ctx, engine_bytes, kv_bytes} */
  telemetry() { this.w.call("kw_drafter_telemetry", this.handle); return this.w.resultJSON(); }
  free() { if (this.handle) { this.w.call("kw_drafter_free", this.handle); this.handle = 0; } }
}
