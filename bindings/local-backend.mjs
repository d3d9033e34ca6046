// local-backend.mjs — the single-process backend of the OpenAI handler (openai.mjs):
// one Model (knotwork.mjs) in this realm's wasm instance generates everything. Used by
// `knotwork serve`; runs the same in a browser or a single Worker when the model fits.
//
//   const backend = localBackend(model, {id: "stories260K", nCtx: 512});
//   const handle = createHandler(backend, {apiKey});
//
// Requests run one at a time (one wasm instance, one 128 MB memory): later ones wait in
// a FIFO and say so in their telemetry ({type: "telemetry", event: "queue", ahead}). Every
// await between tokens yields a macrotask so the server keeps answering (/health,
// disconnects) while a generation runs. Model.generate's events pass on as they are
// (bindings/events.mjs), after `accepted`. Prefix reuse (llama-server's cache_prompt): the
// session of the last request that completed stays in the backend's slot (Model.slot), and
// the next request keeps the positions it shares with it (bindings/prefix.mjs), feeding only
// the rest (usage.prompt_tokens_details.cached_tokens). A request that fails or is abandoned
// (the consumer's return(), or the request's AbortSignal) frees its session.
import {ApiError} from "./openai.mjs";
import {memoryStats} from "./knotwork.mjs";
import {defaultContext, requestOptions} from "./options.mjs";

const tick = globalThis.setImmediate
  ? () => new Promise((r) => setImmediate(r))
  : () => new Promise((r) => setTimeout(r, 0));

/** The dominant weight type by bytes, e.g. "Q4_K" (and the whole histogram). */
export function quantization(info) {
  const bytes = {};
  for (const t of info.tensors ?? []) bytes[t.type] = (bytes[t.type] ?? 0) + (t.size ?? 0);
  const main = Object.entries(bytes).sort((a, b) => b[1] - a[1])[0]?.[0] ?? "unknown";
  return {type: main, bytesByType: bytes};
}

/**
 * @param {import("./knotwork.mjs").Model} model
 * @param {{id: string, nCtx?: number, chunk?: number, reference?: boolean,
 *          prefillProgress?: number, created?: number, chatTemplate?: string}} o
 *   nCtx: context per request (default min(trained context, 2048), the core's default);
 *   chatTemplate: the chat template by name (applyChatTemplate's `template`; default the
 *   model's own, and one the core cannot render makes chat requests a 400 naming it);
 *   prefillProgress: report prefill progress every ~N prompt tokens (default 64)
 */
export function localBackend(model, {id, nCtx, chunk, reference = false, prefillProgress = 64, chatTemplate = "",
                                     created = Math.floor(Date.now() / 1000)} = {}) {
  const cfg = model.info.config ?? {};
  const ctx = nCtx ?? defaultContext(cfg);
  const quant = quantization(model.info);
  const topology = {kind: "single-process", stations: [{name: "local", layers: [0, cfg.n_layer], state: "ready"}],
                    shards: [{name: "local", vocab: [0, cfg.n_vocab], state: "ready"}]};
  const card = {id, created, owned_by: "knotwork",
                knotwork: {arch: cfg.arch, quantization: quant.type, nCtx: ctx, nLayer: cfg.n_layer,
                           nHeadKv: cfg.n_head_kv, headDim: cfg.head_dim,
                           nEmbd: cfg.n_embd, nVocab: cfg.n_vocab, mode: reference ? "reference" : "fast",
                           format: model.info.format}};
  let active = 0, served = 0, queued = 0;
  const slot = model.slot();  // one generation at a time: one held session
  let tail = Promise.resolve();

  function promptIds(req) {
    let ids;
    try {
      if (req.kind === "chat") {
        const text = model.applyChatTemplate(req.messages, {template: chatTemplate});
        ids = model.tokenize(text, {addBos: true, parseSpecial: true});
      } else if (typeof req.prompt === "string") {
        ids = model.tokenize(req.prompt, {parseSpecial: true});  // as `knotwork generate -p`: BOS, special tokens parsed
      } else {
        ids = req.prompt;
        const bad = ids.find((t) => t >= cfg.n_vocab);
        if (bad !== undefined) throw new ApiError(400, `prompt token id ${bad} is outside the vocabulary (${cfg.n_vocab} tokens)`, {param: "prompt"});
      }
    } catch (e) {
      if (e instanceof ApiError) throw e;
      throw new ApiError(400, `could not build the prompt: ${e.message}`, {param: req.kind === "chat" ? "messages" : "prompt"});
    }
    if (ids.length === 0) throw new ApiError(400, "the prompt encodes to no tokens", {param: "prompt"});
    return ids;
  }

  function fits(req, n) {
    const param = req.kind === "chat" ? "messages" : "prompt";
    if (n >= ctx)
      throw new ApiError(400, `This model's maximum context length is ${ctx} tokens. However, your ${param} resulted in ${n} tokens, which leaves no room for a completion.`,
                         {param, code: "context_length_exceeded"});
    if (req.maxTokens !== undefined && n + req.maxTokens > ctx)
      throw new ApiError(400, `This model's maximum context length is ${ctx} tokens. However, you requested ${n + req.maxTokens} tokens (${n} in the ${param}, ${req.maxTokens} in the completion). Please reduce the length of the ${param} or completion.`,
                         {param: "max_tokens", code: "context_length_exceeded"});
  }

  return {
    async models() { return [card]; },

    async health() {
      return {model: id, sessions: active, queued, served, heldPositions: slot.ids.length, memory: await memoryStats(), topology};
    },

    tokenBytes(_model, tokenId) { return model.tokenBytes(tokenId); },

    async *generate(req, {signal} = {}) {
      const ids = promptIds(req);
      fits(req, ids.length);
      const maxTokens = req.maxTokens ?? ctx - ids.length;
      // a request without a seed gets a fresh one (OpenAI: sampled output varies)
      const seed = req.seed ?? Math.floor(Math.random() * 2 ** 32);
      yield {type: "accepted", promptTokens: ids.length, nCtx: ctx, quantization: quant.type, arch: cfg.arch,
             mode: card.knotwork.mode, seed, topology};

      // one generation at a time, in arrival order
      let release;
      const prev = tail;
      tail = new Promise((r) => { release = r; });
      queued++;
      let waiting = true;
      try {
        const ahead = queued - 1 + active;  // waiting before this one, plus the one running
        if (ahead > 0) yield {type: "telemetry", event: "queue", ahead};
        await prev;
        queued--;
        waiting = false;
        if (signal?.aborted) return;
        active++;
        try {
          await tick();  // the "accepted" bytes leave before the prefill blocks this thread
          const gen = model.generate(ids, {...requestOptions(req, {maxTokens, seed}), nCtx: ctx, chunk, reference, prefillProgress, slot});
          for await (const ev of gen) {
            yield ev;  // Model.generate's events as they are (bindings/events.mjs)
            await tick();
            if (signal?.aborted) return;  // the finally blocks free the session
          }
          served++;
        } finally { active--; }
      } finally {
        if (waiting) queued--;
        prev.then(release);  // the next request starts after this one AND the one before it
      }
    },
  };
}
