// generator.mjs — the core's step-by-step Generator (core/text/generator.h) and the
// vocab-shard top-k merge, over the wasm ABI (kw_generator_*, kw_topk_lse, kw_topk_merge).
// This is what a mesh coordinator samples with: it never holds the logits of the whole
// vocabulary, only each shard's top-k + log-sum-exp, merged here; the draw is the one
// Engine::generate and model.generate() make (same seeded sampler, same UTF-8 streaming,
// same stop strings and stop reasons).
//
//   const gen = await Generator.open(model, {maxTokens: 32, temperature: 0.8, seed: 1, nCtx});
//   gen.start(promptIds);                                  // logits = run the prompt
//   for (let s; !gen.done;) {
//     const top = mergeTopK(await Promise.all(shards.map((sh) => sh.topk(k))), k);
//     s = gen.step(top);                                   // or gen.step(fullLogits)
//     emit(s.text);                                        // complete UTF-8, "" while held
//     if (!s.done) run the forward pass for s.id;
//   }
//
// A top-k ("TopK") is {ids: number[], logits: number[], lse: number, min: number}: ids
// absolute and best first (logit desc, lower id on ties), lse = log Σ exp(logit) over the
// slice (or merged slices), min = the lowest finite logit (used by top-p's bucketing);
// lse null: -inf (an empty slice), min null: +inf (no finite logit), as JSON carries them.
// Sampling from a merged TopK equals sampling from the full logits for greedy, and for
// top-k / top-p / min-p whenever k covers the tokens those filters keep (same seed, same
// ids; see Sampler::sample_topk). With a repetition penalty it is exact only when every
// penalised token that matters is in the list (apply the penalty shard-side otherwise).
// A TopK crosses the ABI as arrays in wasm memory (wasm/abi.h: i32 ids, f32 logits, f64
// lse and min), never as JSON: the values arrive exactly as the core computed them.
import {init, _withOut as withOut} from "./knotwork.mjs";
import {samplingOptions} from "./options.mjs";

const lseIn = (t) => t.lse === null ? -Infinity : Number(t.lse);
const minIn = (t) => t.min == null ? Infinity : Number(t.min);
const outOf = (x, inf) => x === inf ? null : x;

// The result buffer of kw_session_propose (all f64: n, then per token id, q(id), m, m pairs
// (id, p)) as {ids, q}: q[i] {ids, p} or null (one-hot).
export function readProposal(w) {
  const b = w.resultBytes();  // a copy at offset 0: aligned for the f64 view
  const f = new Float64Array(b.buffer, b.byteOffset, b.length / 8);
  const n = f[0], ids = [], q = [];
  let k = 1;
  for (let i = 0; i < n; i++) {
    const id = f[k], m = f[k + 2];
    k += 3;
    ids.push(id);
    if (m === 0) { q.push(null); continue; }
    const d = {ids: new Array(m), p: new Array(m)};
    for (let j = 0; j < m; j++, k += 2) d.ids[j] = f[k], d.p[j] = f[k + 1];
    q.push(d);
  }
  return {ids, q};
}

// The result buffer of kw_topk_lse / kw_topk_merge (f64 lse, f64 min, i32 ids[n], f32 logits[n]) as a TopK.
function resultTopK(w) {
  const b = w.resultBytes();  // a copy at offset 0: aligned for the f64 view
  const n = (b.length - 16) / 8;
  const [lse, min] = new Float64Array(b.buffer, 0, 2);
  return {ids: Array.from(new Int32Array(b.buffer, 16, n)), logits: Array.from(new Float32Array(b.buffer, 16 + 4 * n, n)),
          lse: outOf(lse, -Infinity), min: outOf(min, Infinity)};
}

/** The longest n-gram draftLookup tries by default (core/infer/speculative.h kLookupNgramMax). */
export const LOOKUP_NGRAM_MAX = 12;

/**
 * Prompt-lookup drafts (core/infer/speculative.cpp draft_lookup, the same rule): up to k
 * tokens that followed the latest earlier occurrence of hist's last n tokens, trying
 * n = ngramMax down to 1; [] when nothing matches.
 */
export function draftLookup(hist, k, ngramMax = LOOKUP_NGRAM_MAX) {
  const len = hist.length;
  if (k <= 0) return [];
  for (let n = Math.min(ngramMax, len - 1); n >= 1; n--) {
    for (let j = len - n - 1; j >= 0; j--) {
      let same = true;
      for (let i = 0; i < n && same; i++) same = hist[j + i] === hist[len - n + i];
      if (same) return hist.slice(j + n, Math.min(len, j + n + k));
    }
  }
  return [];
}

/**
 * How many lookup drafts the next pass asks for (before the room bounds it), from the passes
 * so far (core/infer/speculative.h LookupBudget, the same rule). Starts at k;
 * update(drafted, accepted) after every pass:
 *  - every draft kept (drafted > 0): double, at most k;
 *  - none kept (drafted > 0): halve, at least 1; already at 1: rest — the next REST passes
 *    draft nothing, then a probe pass drafts 1 again;
 *  - some kept, or nothing drafted: unchanged (a pass during the rest counts it down).
 */
export class LookupBudget {
  static REST = 4;
  #k; #cur; #rest = 0;
  constructor(k) { this.#k = k; this.#cur = k; }
  get size() { return this.#rest > 0 ? 0 : this.#cur; }
  update(drafted, accepted) {
    if (this.#rest > 0) { this.#rest--; return; }
    if (drafted <= 0) return;
    if (accepted >= drafted) this.#cur = Math.min(this.#k, 2 * this.#cur);
    else if (accepted === 0) {
      if (this.#cur <= 1) this.#rest = LookupBudget.REST;
      else this.#cur = Math.max(1, Math.trunc(this.#cur / 2));
    }
  }
}

/** Top-k (absolute ids v0..v1) and log-sum-exp of one slice's logits [v1 - v0]. */
export async function topkLse(logits, v0, v1, k) {
  const w = await init();
  const b = new Uint8Array(logits.buffer, logits.byteOffset, logits.byteLength);
  const p = w.copyIn(b);
  try { w.call("kw_topk_lse", p, v0, v1, k); } finally { w.free(p); }
  return resultTopK(w);
}

/** Merge shards' TopKs into the best k overall with the combined lse and min. */
export async function mergeTopK(parts, k) {
  const w = await init();
  if (!Array.isArray(parts)) throw new TypeError("mergeTopK: parts must be an array (a JSON array) of top-k objects {ids, logits, lse, min}");
  const P = parts.length;
  const nIds = parts.reduce((a, t) => a + t.ids.length, 0), nLogits = parts.reduce((a, t) => a + t.logits.length, 0);
  // one allocation: stats f64[2P], sizes i32[2P], ids i32[nIds], logits f32[nLogits]
  const p = w.malloc(24 * P + 4 * (nIds + nLogits));
  try {
    const stats = w.f64(p, 2 * P), sizes = w.i32(p + 16 * P, 2 * P);
    const ids = w.i32(p + 24 * P, nIds), logits = w.f32(p + 24 * P + 4 * nIds, nLogits);
    let ai = 0, al = 0;
    parts.forEach((t, i) => {
      stats[2 * i] = lseIn(t);
      stats[2 * i + 1] = minIn(t);
      sizes[2 * i] = t.ids.length;
      sizes[2 * i + 1] = t.logits.length;
      ids.set(t.ids, ai);
      logits.set(t.logits, al);
      ai += t.ids.length;
      al += t.logits.length;
    });
    w.call("kw_topk_merge", p + 24 * P, p + 24 * P + 4 * nIds, p + 16 * P, p, P, k);
  } finally { w.free(p); }
  return resultTopK(w);
}

/**
 * The core Generator on a model handle: a Model from openModel(), or a ModelParts from
 * openParts() (its tokenizer is loaded on demand; no weights are needed).
 * Options as model.generate(): maxTokens, temperature, topK, topP, minP, repeatPenalty,
 * repeatLastN, presencePenalty, frequencyPenalty, seed, stop, ignoreEos; nCtx: positions the mesh's KV holds (0: no limit),
 * so the generator can stop with reason "context"; options: the core's option keys (as
 * parseCommandLine() returns them), applied over the named ones. Values are checked against
 * the core's option table (a refusal: KnotworkError with status STATUS.USAGE).
 */
export class Generator {
  static async open(model, opts = {}) {
    const w = await init();
    if (model.loadTokenizer) await model.loadTokenizer();
    const o = JSON.stringify({...samplingOptions(opts), n_ctx: opts.nCtx ?? 0});
    const h = w.withString(o, (p, n) => withOut(w, (out) => w.call("kw_generator_new", model.handle, p, n, out)));
    return new Generator(w, h, w.resultJSON());
  }
  constructor(w, handle, params = {}) {
    this.w = w;
    this.handle = handle;
    /** The resolved settings (core defaults filled in): n_vocab, n_ctx, n_predict, temperature,
     *  top_k, top_p, min_p, repeat_penalty, repeat_last_n, presence_penalty, frequency_penalty;
     *  grammar: true when a grammar (or JSON schema) constrains the output. */
    this.params = params;
    this.promptIds = [];
    this.ids = [];
    this.text = "";
    this.done = false;
    this.reason = "";
  }
  /** A new sequence: prompt ids feed the repetition penalty; resets seed and counters. */
  start(promptIds) {
    const w = this.w, a = Int32Array.from(promptIds);
    const p = w.copyIn(new Uint8Array(a.buffer));
    try { w.call("kw_generator_start", this.handle, p, a.length); } finally { w.free(p); }
    const r = w.resultJSON();
    this.promptIds = Array.from(promptIds);
    this.ids = [];
    this.text = "";
    this.done = r.done;
    this.reason = r.reason;
  }
  /**
   * One token from a Float32Array of the last position's logits [>= n_vocab], or from a
   * merged TopK. Returns {id, text, done, reason}; with a grammar and a TopK holding no token
   * it allows: {id: -1, needWider: true, done: false} (nothing sampled or recorded).
   */
  step(x) {
    const w = this.w;
    if (x instanceof Float32Array) {
      const p = w.copyIn(new Uint8Array(x.buffer, x.byteOffset, x.byteLength));
      try { w.call("kw_generator_step", this.handle, p, x.length); } finally { w.free(p); }
    } else {
      const ni = x.ids.length, nl = x.logits.length;
      const p = w.malloc(4 * (ni + nl));
      try {
        w.i32(p, ni).set(x.ids);
        w.f32(p + 4 * ni, nl).set(x.logits);
        w.call("kw_generator_step_topk", this.handle, p, ni, p + 4 * ni, nl, lseIn(x), minIn(x));
      } finally { w.free(p); }
    }
    const s = w.resultStep();
    if (s.need_wider) {
      // a grammar allows none of the top-k's tokens: nothing was sampled; step again for this
      // position with a wider top-k or the full logits
      s.needWider = true;
      return s;
    }
    this.ids.push(s.id);
    this.text += s.text;
    this.done = s.done;
    this.reason = s.reason;
    return s;
  }
  /**
   * Speculative decoding: verify a drafted token against the merged TopK of the position
   * it was fed for (the core's Generator::step_draft: greedy keeps it when it is the
   * argmax; sampling keeps it with probability p(draft), else draws from p without it).
   * Returns {id, text, done, reason, accepted}; accepted: the id is the draft, so the rows
   * fed after it stay valid.
   * q: the distribution {ids, p} a sampling draft was drawn from (proposeWith), verified by
   * min(1, p(draft)/q(draft)), else a token from norm(max(0, p - q))
   * (kw_generator_step_draft_q_topk); null: one-hot at the draft (a greedy draft, lookup).
   */
  stepDraft(top, draft, q = null) {
    const w = this.w, ni = top.ids.length, nl = top.logits.length, nq = q ? q.ids.length : 0;
    const p = w.malloc(8 * nq + 4 * (ni + nl + nq));  // f64 q.p first (aligned), then the i32/f32 arrays
    try {
      const a = p + 8 * nq;
      w.i32(a, ni).set(top.ids);
      w.f32(a + 4 * ni, nl).set(top.logits);
      if (q) {
        w.f64(p, nq).set(q.p);
        w.i32(a + 4 * (ni + nl), nq).set(q.ids);
        w.call("kw_generator_step_draft_q_topk", this.handle, a, ni, a + 4 * ni, nl, lseIn(top), minIn(top), draft,
               a + 4 * (ni + nl), p, nq);
      } else {
        w.call("kw_generator_step_draft_topk", this.handle, a, ni, a + 4 * ni, nl, lseIn(top), minIn(top), draft);
      }
    } finally { w.free(p); }
    const s = w.resultStep();
    this.ids.push(s.id);
    this.text += s.text;
    this.done = s.done;
    this.reason = s.reason;
    return s;
  }
  /**
   * Draft tokens for this generator from a draft model's session (a raw kw_session_new
   * handle on the draft model): up to room tokens after hist, drawn as this generator
   * samples (its chain, grammar and seeded RNG; greedy: the argmax) — kw_session_propose.
   * Returns {ids, q}: q[i] = {ids, p}, the distribution ids[i] was drawn from, or null when
   * it is one-hot at ids[i]; pass q[i] to stepDraft with ids[i].
   */
  proposeWith(session, hist, room) {
    const w = this.w, a = Int32Array.from(hist);
    const p = w.copyIn(new Uint8Array(a.buffer));
    try { w.call("kw_session_propose", session, this.handle, p, a.length, room); } finally { w.free(p); }
    return readProposal(w);
  }
  /**
   * How many of these ids the grammar would take next (all of them without a grammar): a
   * mesh coordinator widens its shards' top-k until the merged list holds as many allowed
   * tokens as the sampler keeps (workers/coordinator/mesh.mjs).
   */
  allowedCount(ids) {
    const w = this.w, a = Int32Array.from(ids);
    const p = w.copyIn(new Uint8Array(a.buffer));
    try { w.call("kw_generator_allowed", this.handle, p, a.length); } finally { w.free(p); }
    return w.resultJSON().allowed;
  }
  /** End early (e.g. the client went away); held-back text is dropped. */
  stop(reason = "callback") {
    this.w.withString(reason, (p, n) => this.w.call("kw_generator_stop", this.handle, p, n));
    this.done = true;
    this.reason = reason;
  }
  free() { if (this.handle) { this.w.exports.kw_generator_free(this.handle); this.handle = 0; } }
}
