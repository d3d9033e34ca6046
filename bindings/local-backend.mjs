// local-backend.mjs — the single-process backend of the OpenAI handler (openai.mjs):
// one Model (knotwork.mjs) in this realm's wasm instance generates everything. Used by
// `knotwork serve`; runs the same in a browser or a single Worker when the model fits.
//
//   const backend = localBackend(model, {id: "stories260K", nCtx: 512});
//   const handle = createHandler(backend, {apiKey});
//
// Slots (llama-server's): up to `parallel` generations run at once in this one wasm
// instance, each its own session (KV cache), their steps interleaved one token at a time;
// fewer when the 128 MB memory holds fewer sessions (measured once: slotsThatFit). Later
// requests wait in a FIFO and say so in their telemetry ({type: "telemetry", event:
// "queue", ahead: requests before it, running or waiting, position: its place in the
// queue}); a request that gets a slot says which ({event: "slot", slot, slots}). Every
// await between tokens yields a macrotask so the server keeps answering (/health,
// disconnects) while generations run. Model.generate's events pass on as they are
// (bindings/events.mjs), after `accepted`. Prefix reuse (llama-server's cache_prompt): the
// session of the last request that completed in a slot stays held there (Model.slot), a
// request takes the free slot whose held ids keep the most of its prompt (bindings/prefix.mjs),
// and feeds only the rest (usage.prompt_tokens_details.cached_tokens). A request that fails or
// is abandoned (the consumer's return(), or the request's AbortSignal) frees its session.
// draft (a loaded Model of the same vocabulary) and draftN: speculative decoding with that
// draft model for every request (Model.generate's {draft, draftN}; each slot's session holds
// its own draft KV); the summary's speculative counts reach usage and the `knotwork` field.
import {ApiError} from "./openai.mjs";
import {memoryStats} from "./knotwork.mjs";
import {reusable} from "./prefix.mjs";
import {Drafter} from "./drafter.mjs";

const LINEAR_CAP = 128 * 1024 * 1024;  // the module's maximum memory (docs/memory.md)

/**
 * How many sessions of these options fit in the memory left: one session is opened and its
 * bytes measured (KV cache + buffers, wasm/abi_session.cpp), then freed; `margin` bytes
 * stay free for requests' temporaries. At least 1 (a lone session is checked by the core).
 */
export async function slotsThatFit(model, {nCtx, chunk, reference = false, margin = 4 << 20, draft = null, draftN} = {}) {
  const before = (await memoryStats()).heap;
  const s = model.session({nCtx, chunk, reference});
  // a draft model's engine per session too (its KV for the same context)
  const d = draft ? await Drafter.open(draft, model, {nCtx, n: draftN ?? 4}) : null;
  const per = Math.max(1, (await memoryStats()).heap - before);
  d?.free();
  s.free();
  return Math.max(1, Math.floor((LINEAR_CAP - before - margin) / per));
}
import {defaultContext, requestOptions} from "./options.mjs";
import {Generator} from "./generator.mjs";
import {toolPrompt} from "./tools.mjs";

// A request's grammar or JSON schema (openai.mjs constraintOf), compiled once before
// "accepted": a schema feature or grammar the core refuses is then the request's 400
// (openai.mjs constraintError), not a failure after the 200.
async function checkConstraint(model, req) {
  (await Generator.open(model, {grammar: req.grammar, jsonSchema: req.jsonSchema})).free();
}

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
                                     modelPath = id, slots = 1, created = Math.floor(Date.now() / 1000), draft = null, draftN} = {}) {
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
  let active = 0, served = 0;
  const free = Array.from({length: slots}, (_, i) => slots - 1 - i);  // free slot numbers, lowest last
  const waiting = [];  // FIFO of {grant(slot)}
  const held = Array.from({length: slots}, () => model.slot());  // per slot: the last completed session
  // the free slot whose held session keeps the most of `ids` (ties: the lowest number)
  const take = (ids) => {
    let at = free.length - 1, best = 0;
    free.forEach((s, i) => { const k = reusable(held[s].ids, ids); if (k > best || (k === best && i > at)) { best = k; at = i; } });
    return free.splice(at, 1)[0];
  };
  const release = (slot) => {
    const next = waiting.shift();
    if (next) next.grant(slot);
    else { free.push(slot); free.sort((a, b) => b - a); }
  };

  // call: filled with a request with tools' {syntax, prefix, jsonSchema?} (bindings/tools.mjs)
  function promptIds(req, call = {}) {
    let ids;
    try {
      if (req.kind === "chat") {
        const text = req.tools ? Object.assign(call, toolPrompt(model, req.messages, req.tools, chatTemplate)).text
          : model.applyChatTemplate(req.messages, {template: chatTemplate});
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

  // a forced tool call's schema (the tools' parameters) the core's JSON-schema sampler must take: else a 400
  async function checkToolSchema(jsonSchema) {
    try { (await Generator.open(model, {jsonSchema})).free(); } catch (e) {
      throw new ApiError(400, `tools: the parameters cannot constrain a forced call: ${e.message}`, {param: "tools"});
    }
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
      return {model: id, sessions: active, queued: waiting.length, slots, served, heldPositions: held.reduce((a, h) => a + h.ids.length, 0),
              memory: await memoryStats(), topology};
    },

    tokenBytes(_model, tokenId, o) { return model.tokenBytes(tokenId, o); },

    // llama-server's endpoints (openai.mjs): the same calls `knot tokenize` and a chat request make
    tokenize(text, {addSpecial, parseSpecial}) { return model.tokenize(text, {addBos: addSpecial, parseSpecial}); },
    detokenize(ids) {
      const bad = ids.find((t) => t >= cfg.n_vocab);
      if (bad !== undefined) throw new ApiError(400, `token id ${bad} is outside the vocabulary (${cfg.n_vocab} tokens)`, {param: "tokens"});
      return model.detokenize(ids);
    },
    applyTemplate(messages) { return model.applyChatTemplate(messages, {template: chatTemplate}); },
    props() {
      const t = model.chatTemplate(), tk = model.info.tokenizer ?? {};
      const text = (i) => (i >= 0 ? new TextDecoder().decode(model.tokenBytes(i, {special: true})) : null);
      return {id, modelPath, nCtx: ctx, slots, chatTemplate: chatTemplate ? {name: chatTemplate, text: t.text} : t,
              bos: text(tk.bos_id), eos: text(tk.eos_id), topology, knotwork: card.knotwork};
    },
    metrics() {
      return {requests_processing: {value: active, help: "Generations running."},
              requests_queued: {value: waiting.length, help: "Requests waiting for a generation slot."},
              slots_total: {value: slots, help: "Generations that can run at once."}};
    },
    // one session per input, freed at once (Model.embed); synchronous, so between two
    // steps of a running generation
    embed(_model, inputs) {
      let promptTokens = 0;
      const data = inputs.map((x) => {
        const ids = typeof x === "string" ? model.tokenize(x, {parseSpecial: true}) : x;
        const bad = ids.find((t) => t >= cfg.n_vocab);
        if (bad !== undefined) throw new ApiError(400, `input token id ${bad} is outside the vocabulary (${cfg.n_vocab} tokens)`, {param: "input"});
        if (ids.length > ctx)
          throw new ApiError(400, `This model's maximum context length is ${ctx} tokens. However, an input resulted in ${ids.length} tokens.`,
                             {param: "input", code: "context_length_exceeded"});
        promptTokens += ids.length;
        return model.embed(ids, {chunk, reference});
      });
      return {data, promptTokens};
    },

    async *generate(req, {signal} = {}) {
      const call = {};
      const ids = promptIds(req, call);
      fits(req, ids.length);
      if (call.jsonSchema) await checkToolSchema(call.jsonSchema);
      const maxTokens = req.maxTokens ?? ctx - ids.length;
      // a request without a seed gets a fresh one (OpenAI: sampled output varies)
      const seed = req.seed ?? Math.floor(Math.random() * 2 ** 32);
      if (req.grammar != null || req.jsonSchema != null) await checkConstraint(model, req);
      yield {type: "accepted", promptTokens: ids.length, nCtx: ctx, quantization: quant.type, arch: cfg.arch,
             mode: card.knotwork.mode, seed, topology, ...(call.syntax && {toolSyntax: call.syntax, toolPrefix: call.prefix})};

      // a slot, in arrival order
      const ahead = active + waiting.length;  // running or waiting before this one
      let mine = null, slot = null;
      const got = free.length ? Promise.resolve(take(ids)) : new Promise((grant) => { mine = {grant}; waiting.push(mine); });
      try {
        if (mine) yield {type: "telemetry", event: "queue", ahead, position: waiting.indexOf(mine) + 1, slots};
        slot = await got;
        if (signal?.aborted) return;
        active++;
        try {
          yield {type: "telemetry", event: "slot", slot, slots};
          await tick();  // the "accepted" bytes leave before the prefill blocks this thread
          const gen = model.generate(ids, {...requestOptions(req, {maxTokens, seed}), ...(call.jsonSchema ? {jsonSchema: call.jsonSchema} : {}), nCtx: ctx, chunk, reference, prefillProgress, slot: held[slot],
                                     ...(draft ? {draft, draftN} : {})});
          for await (const ev of gen) {
            yield ev;  // Model.generate's events as they are (bindings/events.mjs)
            await tick();
            if (signal?.aborted) return;  // the finally blocks free the session
          }
          served++;
        } finally { active--; }
      } finally {
        if (slot !== null) release(slot);
        else {  // left while waiting: give up the place, or the slot granted meanwhile
          const i = mine ? waiting.indexOf(mine) : -1;
          if (i >= 0) waiting.splice(i, 1);
          else got.then(release);
        }
      }
    },
  };
}
