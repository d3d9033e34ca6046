// text.mjs — the coordinator's share of a model: config + tokenizer (no tensors), and a
// sampling session over logits the mesh computes (wasm ABI kw_model_text_finish,
// kw_session_new {"external": true}, kw_session_set_logits, kw_session_step).
import {init, openTable, loadTensor, Model, _withOut as withOut} from "../../bindings/knotwork.mjs";

/** Open only the tokenizer and config of a .knot (a few hundred KB) through a byte source. */
export async function openTextModel(source) {
  const w = await init();
  const {handle, table} = await openTable(w, source);
  try {
    for (const t of table.tensors.filter((t) => t.i === 0 && table.format === "knot")) await loadTensor(w, source, handle, t);
    w.call("kw_model_text_finish", handle);
    const info = w.resultJSON();
    return new Model(w, handle, info);
  } catch (e) { w.exports.kw_model_free(handle); throw e; }
}

const td = new TextDecoder();

/**
 * The core's sampler + detokenizer + stop logic, fed with external logits. Options as
 * Model.generate: {maxTokens, temperature, topK, topP, minP, repeatPenalty, repeatLastN,
 * seed, stop, ignoreEos, nCtx}.
 */
export class ExternalSampler {
  constructor(model, opts = {}) {
    const w = this.w = model.w;
    const o = {external: true, n_predict: opts.maxTokens ?? 128, temperature: opts.temperature, top_k: opts.topK,
               top_p: opts.topP, min_p: opts.minP, repeat_penalty: opts.repeatPenalty, repeat_last_n: opts.repeatLastN,
               seed: opts.seed, stop: opts.stop, ignore_eos: opts.ignoreEos, n_ctx: opts.nCtx,
               presence_penalty: opts.presencePenalty, frequency_penalty: opts.frequencyPenalty, logprobs: opts.logprobs};
    this.h = w.withString(JSON.stringify(o), (p, n) => withOut(w, (out) => w.call("kw_session_new", model.handle, p, n, out)));
    this.nCtx = w.resultJSON().n_ctx;
  }
  prompt(ids) {
    const a = Int32Array.from(ids), w = this.w;
    const p = w.copyIn(new Uint8Array(a.buffer));
    try { w.call("kw_session_prefill", this.h, p, a.length); } finally { w.free(p); }
  }
  /** Sample from logits [n_vocab]: {id, done, reason, text}. */
  step(logits) {
    const w = this.w;
    const p = w.copyIn(new Uint8Array(logits.buffer, logits.byteOffset, logits.byteLength));
    try { w.call("kw_session_set_logits", this.h, p, logits.length); } finally { w.free(p); }
    w.call("kw_session_step", this.h);
    const raw = w.resultBytes(), nl = raw.indexOf(10);
    const head = JSON.parse(td.decode(raw.subarray(0, nl)));
    const out = {id: head.id, done: head.done, reason: head.reason, text: td.decode(raw.subarray(nl + 1))};
    if (head.logprob !== undefined) { out.logprob = head.logprob; out.top = head.top.map(([token, logprob]) => ({token, logprob})); }
    return out;
  }
  free() { if (this.h) { this.w.exports.kw_session_free(this.h); this.h = 0; } }
}
