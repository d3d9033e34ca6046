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
// slice (or merged slices), min = the lowest finite logit (used by top-p's bucketing).
// Sampling from a merged TopK equals sampling from the full logits for greedy, and for
// top-k / top-p / min-p whenever k covers the tokens those filters keep (same seed, same
// ids; see Sampler::sample_topk). With a repetition penalty it is exact only when every
// penalised token that matters is in the list (apply the penalty shard-side otherwise).
import {init, _withOut as withOut} from "./knotwork.mjs";
import {samplingOptions} from "./options.mjs";

/** Top-k (absolute ids v0..v1) and log-sum-exp of one slice's logits [v1 - v0]. */
export async function topkLse(logits, v0, v1, k) {
  const w = await init();
  const b = new Uint8Array(logits.buffer, logits.byteOffset, logits.byteLength);
  const p = w.copyIn(b);
  try { w.call("kw_topk_lse", p, v0, v1, k); } finally { w.free(p); }
  return w.resultJSON();
}

/** Merge shards' TopKs into the best k overall with the combined lse and min. */
export async function mergeTopK(parts, k) {
  const w = await init();
  w.withString(JSON.stringify(parts), (p, n) => w.call("kw_topk_merge", p, n, k));
  return w.resultJSON();
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
     *  top_k, top_p, min_p, repeat_penalty, repeat_last_n, presence_penalty, frequency_penalty. */
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
   * merged TopK. Returns {id, text, done, reason}.
   */
  step(x) {
    const w = this.w;
    if (x instanceof Float32Array) {
      const p = w.copyIn(new Uint8Array(x.buffer, x.byteOffset, x.byteLength));
      try { w.call("kw_generator_step", this.handle, p, x.length); } finally { w.free(p); }
    } else {
      w.withString(JSON.stringify(x), (p, n) => w.call("kw_generator_step_topk", this.handle, p, n));
    }
    const s = w.resultStep();
    this.ids.push(s.id);
    this.text += s.text;
    this.done = s.done;
    this.reason = s.reason;
    return s;
  }
  /** End early (e.g. the client went away); held-back text is dropped. */
  stop(reason = "callback") {
    this.w.withString(reason, (p, n) => this.w.call("kw_generator_stop", this.handle, p, n));
    this.done = true;
    this.reason = reason;
  }
  free() { if (this.handle) { this.w.exports.kw_generator_free(this.handle); this.handle = 0; } }
}
