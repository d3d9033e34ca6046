// options.mjs — the one mapping from request options to the core's option keys, and the
// one default context. Every layer that hands options to the core goes through it:
// model.generate() and model.session() (knotwork.mjs), Generator.open() (generator.mjs),
// the single-process OpenAI backend (local-backend.mjs) and the mesh coordinator.
//
// Contract:
//   * coreOptions(opts) / samplingOptions(opts): the JS API's camelCase options ->
//     the keys of the core's option table (core/infer/options.h; kw_session_new's
//     and kw_generator_new's JSON). A name is renamed and nothing else: no defaults, no
//     ranges, no clamping; the core fills the defaults and checks every value (a refusal
//     is KnotworkError with status STATUS.USAGE naming the core's key). Options left
//     undefined (or null) are left out. `opts.options` (the core's keys, as
//     parseCommandLine() returns them) are passed straight through, over the named ones.
//   * requestOptions(req, {maxTokens, seed}): a checked OpenAI request (openai.mjs
//     parseRequest) -> generate options, the same for every backend.
//   * defaultContext(config): the context a session gets when none is asked for,
//     min(trained context, 2048), 2048 when the file does not say (as the core's Engine).

// Sampling and generation options (kw_generator_new takes these): JS name -> core key.
export const SAMPLING_KEYS = Object.freeze({
  maxTokens: "n_predict",
  temperature: "temperature",
  topK: "top_k",
  topP: "top_p",
  minP: "min_p",
  repeatPenalty: "repeat_penalty",
  repeatLastN: "repeat_last_n",
  presencePenalty: "presence_penalty",
  frequencyPenalty: "frequency_penalty",
  seed: "seed",
  stop: "stop",
  ignoreEos: "ignore_eos",
  lookup: "lookup",
  grammar: "grammar",        // GBNF text
  jsonSchema: "json_schema", // a JSON Schema: an object (sent as its JSON text, so the core keeps
                             // the property order) or its text
});

// Engine and session options (kw_session_new takes these and the sampling ones).
// `reference` (a boolean) is the core's "mode" ("reference" | "fast").
export const SESSION_KEYS = Object.freeze({
  nCtx: "n_ctx",
  chunk: "chunk",
  kvBudget: "kv_budget",
  logprobs: "logprobs",
});

function rename(opts, keys, out) {
  for (const [js, core] of Object.entries(keys)) if (opts[js] != null) out[core] = opts[js];
  if (typeof out.json_schema === "object") out.json_schema = JSON.stringify(out.json_schema);
  return out;
}

/** Sampling options only (kw_generator_new's keys), then opts.options over them. */
export function samplingOptions(opts = {}) {
  return {...rename(opts, SAMPLING_KEYS, {}), ...opts.options};
}

/** Every option kw_session_new takes (sampling, engine, session), then opts.options over them. */
export function coreOptions(opts = {}) {
  const out = rename(opts, SAMPLING_KEYS, {});
  if (opts.reference != null) out.mode = opts.reference ? "reference" : "fast";
  rename(opts, SESSION_KEYS, out);
  return {...out, ...opts.options};
}

/**
 * A checked OpenAI request -> generate options. maxTokens and seed are the backend's
 * (it fills a missing max_tokens from the context and draws a seed when none was sent).
 * OpenAI's top_p 0 (only the most likely token) is the smallest top_p the core takes;
 * penalties of 0 and logprobs -1 are "off", left to the core's defaults.
 */
export function requestOptions(req, {maxTokens, seed}) {
  return {
    maxTokens, seed, temperature: req.temperature, topP: req.topP === 0 ? Number.MIN_VALUE : req.topP,
    topK: req.topK, minP: req.minP, repeatPenalty: req.repeatPenalty, stop: req.stop, ignoreEos: req.ignoreEos,
    presencePenalty: req.presencePenalty || undefined, frequencyPenalty: req.frequencyPenalty || undefined,
    logprobs: req.logprobs >= 0 ? req.logprobs : undefined,
    grammar: req.grammar, jsonSchema: req.jsonSchema,  // openai.mjs constraintOf: response_format, grammar, json_schema
  };
}

/** The default context of a model config: min(n_ctx_train, 2048), 2048 when unknown. */
export function defaultContext(config) {
  const trained = config?.n_ctx_train;
  return trained > 0 ? Math.min(trained, 2048) : 2048;
}
