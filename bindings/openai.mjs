// openai.mjs — the OpenAI-compatible HTTP API as one fetch-style handler,
// `(Request) => Promise<Response>`, the same in Node (`knotwork serve`), in a Worker (the
// mesh's entry) and in a browser. It parses and checks requests, speaks OpenAI's wire
// format (JSON, SSE with `data: [DONE]`, error objects) and streams live telemetry; a
// *backend* does the generating.
//
//   import {createHandler} from "./openai.mjs";
//   const handle = createHandler(backend, {apiKey: "secret"});   // apiKey optional
//   const response = await handle(request);
//
// Routes: GET / (the chat page), GET /v1/models, GET /v1/models/{id}, POST
// /v1/chat/completions, POST /v1/completions, POST /v1/embeddings, GET /health; OPTIONS
// (CORS preflight). llama-server's: POST /tokenize {content, add_special?, parse_special?,
// with_pieces?} -> {tokens}, POST /detokenize {tokens} -> {content}, POST /apply-template
// {messages} -> {prompt}, GET /props, GET /metrics (Prometheus text, bindings/metrics.mjs).
// With apiKey set every route but / and /health needs `Authorization: Bearer KEY`.
// loadingHandler(ready): the 503s `serve` answers while the model loads.
//
// ---- The backend interface -------------------------------------------------------------
//   backend.models() -> Promise<ModelCard[]>     ModelCard: {id, created?, owned_by?, ...}
//       (extra fields are passed through in /v1/models, e.g. knotwork: {quantization, ctx})
//   backend.health?() -> Promise<object>         GET /health (sessions open, memory, shards)
//   backend.generate(req, {signal}) -> AsyncIterable<GenerationEvent> (bindings/events.mjs)
//     req (already validated; model is one of models()):
//       {kind: "chat"|"completion", model, messages?: [{role, content: string, tool_calls?, tool_call_id?}],
//        tools?: null | {list, choice} (bindings/tools.mjs parseTools; render with toolPrompt),
//        prompt?: string|number[], maxTokens?: number (undefined: up to the context),
//        temperature, topP, topK?, minP?, repeatPenalty?, seed?, stop: string[], ignoreEos,
//        presencePenalty, frequencyPenalty,
//        logprobs: -1 (off) | k in 0..20 (the sampled token's logprob + the k best),
//        grammar?: GBNF text | jsonSchema?: a JSON Schema (response_format, or llama-server's
//        grammar / json_schema: constraintOf below; a backend refuses a bad one before
//        "accepted", with the core's "json schema: ..." / "grammar: ..." message: a 400)}
//     Events, in order (the schema of bindings/events.mjs, passed on unrenamed):
//       {type: "accepted", promptTokens, nCtx, ...telemetry}       FIRST, once the prompt is
//           tokenized and fits: the handler then commits to 200 and (streaming) sends the
//           headers. An error thrown before it becomes the HTTP status; after it, an error
//           in the stream (`data: {"error": ...}`).
//           With req.tools it carries toolSyntax ("qwen" | "json") and toolPrefix (the forced
//           call's opening the prompt ended with, "" for none): the handler parses calls with them.
//       {type: "prefill", done, total, elapsedMs}    prompt progress
//       {type: "telemetry", event: NAME, ...}   named progress, mapped to the stream's
//                                   vocabulary below by the TELEMETRY table
//                                   (prefill_started/progress/completed, reprefill ->
//                                   retry, abstain -> shard failed; others as {type: NAME})
//       {type: "token", token, text, logprob?, top?: [{token: id, logprob}], telemetry?: {memory?}}
//           text: the complete UTF-8 this token released ("" while a character or a
//           possible stop string is pending); logprob/top when req.logprobs >= 0
//       {type: "summary", reason: "eog"|"stop"|"length"|"context", nPrompt, cachedTokens?
//        (prompt tokens reused from a held session: usage.prompt_tokens_details.cached_tokens), nGenerated,
//        prefillMs, decodeMs, prefillTokS, decodeTokS, ...}   LAST
//       any other {type: NAME, ...} is shown as telemetry as it is
//     A consumer that stops early (client gone) calls the iterator's return(): the backend
//     must free the session there (finally). `signal` aborts too.
//   backend.tokenBytes?(model, id, {special?}) -> Uint8Array  bytes of a token (sync), for
//       logprobs (special: a control token's text, for /tokenize's pieces)
//   backend.tokenize(text, {addSpecial, parseSpecial}) -> number[]   POST /tokenize
//   backend.detokenize(ids) -> string                                  POST /detokenize
//   backend.applyTemplate(messages) -> string    the prompt text a chat request generates from
//   backend.props() -> {id, modelPath, nCtx, slots, chatTemplate: {name, text}, bos?, eos?,
//       topology, knotwork?}                     GET /props (shaped as llama-server's)
//   backend.metrics?() -> {name: number|{value, help}}   gauges of GET /metrics
//   backend.embed?(model, inputs: (string|number[])[]) -> {data: Float32Array[], promptTokens}
//       POST /v1/embeddings; absent: a 501 (backend.embedUnsupported names why)
//   (each may be async; a missing one answers 501)
//   Throw ApiError(status, message, {type, code, param}) for request errors (unknown
//   model, prompt past the context); any other error is a 500 with its message.
//
// ---- Telemetry on the stream ----------------------------------------------------------
// SSE comment lines, `: knotwork {json}` followed by a blank line. Every SSE parser,
// including the official openai clients (Node and Python) and EventSource, ignores
// comments, so an OpenAI client sees exactly OpenAI's chunks; the chat page reads them.
// The first one ({"type":"accepted", ...}) leaves before the prefill starts. Shapes:
//   {type:"accepted", model, promptTokens, nCtx, maxTokens, ...backend fields}
//   {type:"prefill", done, total, elapsedMs, cached?}   started (done 0), progress, completed; total:
//                                                  the tokens fed, cached: those a held session had
//   {type:"decode", phase:"started"}
//   {type:"tokens", n, tokS, elapsedMs, memory?}   tokens so far, rolling tok/s (last 16),
//                                                  memory {linear, heap} when the backend says
//   {type:"shard"|"station"|"topology"|"retry"|"queue", ...}   backend-defined
//   {type:"failure", reason, status}              the generation failed after it started;
//                                                  then `data: {"error": {...}}` and [DONE]
//   {type:"done", reason, usage, prefillTokS, decodeTokS}
// Each also carries t: the server's Date.now() when it was sent.
// Non-streamed responses carry the summary in an extra `knotwork` field.
import {CHAT_PAGE_HTML} from "./chat-page.mjs";
import {Metrics} from "./metrics.mjs";
import {ToolStream, openaiToolCalls, parseToolCalls, parseTools, toolMessage} from "./tools.mjs";
import {ApiError} from "./api-error.mjs";

export {ApiError};

/** The build /props and /metrics report (package.json's version; a test keeps them equal). */
export const VERSION = "0.1.0";


const te = new TextEncoder();

function jsonResponse(obj, status = 200, headers = {}) {
  return new Response(JSON.stringify(obj), {status, headers: {"content-type": "application/json", ...CORS, ...headers}});
}

const CORS = {"access-control-allow-origin": "*"};

export function errorBody(e) {
  return {error: {message: e.message, type: e.type, param: e.param ?? null, code: e.code ?? null}};
}

function errorResponse(e) {
  if (!(e instanceof ApiError)) e = new ApiError(500, e?.message || String(e), {type: "server_error"});
  return jsonResponse(errorBody(e), e.status);
}

// Constant-time comparison (timing does not tell how much of a guessed key matched).
function sameKey(a, b) {
  const x = te.encode(a), y = te.encode(b);
  let d = x.length ^ y.length;
  for (let i = 0; i < Math.max(x.length, y.length); i++) d |= (x[i] ?? 0) ^ (y[i] ?? 0);
  return d === 0;
}

function checkKey(request, apiKey) {
  if (!apiKey) return;
  const h = request.headers.get("authorization") || "";
  const m = /^Bearer\s+(.+)$/i.exec(h.trim());
  if (!m) throw new ApiError(401, "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).", {code: "missing_api_key"});
  if (!sameKey(m[1].trim(), apiKey)) {
    const k = m[1].trim();
    const shown = k.length > 8 ? `${k.slice(0, 3)}...${k.slice(-4)}` : "***";
    throw new ApiError(401, `Incorrect API key provided: ${shown}.`, {code: "invalid_api_key"});
  }
}

// ---- request validation ----------------------------------------------------------------

const bad = (message, param, code = null) => new ApiError(400, message, {param, code});

function num(body, name, {min = -Infinity, max = Infinity, int = false, dflt} = {}) {
  const v = body[name];
  if (v === undefined || v === null) return dflt;
  if (typeof v !== "number" || !Number.isFinite(v) || (int && !Number.isInteger(v)))
    throw bad(`'${name}' must be ${int ? "an integer" : "a number"}, got ${JSON.stringify(v)}`, name, "invalid_type");
  if (v < min || v > max) throw bad(`'${name}' must be in [${min}, ${max}], got ${v}`, name, "invalid_value");
  return v;
}

// Fields OpenAI defines that this server cannot honour: refused by name, never ignored.
function refuseUnsupported(body, kind) {
  const refused = [];
  if (body.n !== undefined && body.n !== null && body.n !== 1) refused.push(`n=${JSON.stringify(body.n)} (only n=1)`);
  if (Array.isArray(body.functions) ? body.functions.length : body.functions != null) refused.push("functions (use tools)");
  if (body.function_call != null && body.function_call !== "none") refused.push("function_call (use tool_choice)");
  if (kind !== "chat") for (const f of ["tools", "tool_choice"]) if (body[f] != null) refused.push(f);
  if (body.logit_bias != null && Object.keys(body.logit_bias).length) refused.push("logit_bias");
  if (body.audio != null) refused.push("audio");
  if (Array.isArray(body.modalities) && body.modalities.some((m) => m !== "text")) refused.push("modalities");
  if (body.prediction != null) refused.push("prediction");
  if (kind === "completion") {
    if (body.best_of != null && body.best_of !== 1) refused.push("best_of");
    if (body.echo) refused.push("echo");
    if (body.suffix != null) refused.push("suffix");
  }
  if (refused.length)
    throw bad(`unsupported: ${refused.join(", ")}. knotwork generates one choice of plain text per request.`,
              refused[0].split(/[= ]/)[0], "unsupported_parameter");
}

function textContent(content, i) {
  if (typeof content === "string") return content;
  if (content === null || content === undefined) return "";
  if (Array.isArray(content)) {
    return content.map((p, j) => {
      if (p?.type === "text" && typeof p.text === "string") return p.text;
      throw bad(`messages[${i}].content[${j}]: only text parts are supported, got type ${JSON.stringify(p?.type)}`, `messages[${i}].content`);
    }).join("");
  }
  throw bad(`messages[${i}].content must be a string or an array of text parts`, `messages[${i}].content`);
}

/** Check an OpenAI request body; returns the backend request. */
export function parseRequest(body, kind) {
  if (body === null || typeof body !== "object" || Array.isArray(body)) throw bad("the request body must be a JSON object", null);
  if (typeof body.model !== "string" || !body.model) throw bad("you must provide a model parameter", "model");
  refuseUnsupported(body, kind);
  const req = {kind, model: body.model};
  if (kind === "chat") {
    if (!Array.isArray(body.messages) || body.messages.length === 0) throw bad("'messages' must be a non-empty array", "messages");
    req.messages = body.messages.map((m, i) => {
      if (!m || typeof m !== "object" || typeof m.role !== "string")
        throw bad(`messages[${i}] must be an object with a string 'role'`, `messages[${i}]`);
      if (!["system", "developer", "user", "assistant", "tool"].includes(m.role))
        throw bad(`messages[${i}].role ${JSON.stringify(m.role)} is not supported (system, developer, user, assistant, tool)`, `messages[${i}].role`);
      return toolMessage(m, i) ?? {role: m.role === "developer" ? "system" : m.role, content: textContent(m.content, i)};
    });
    req.tools = parseTools(body);  // null: none (bindings/tools.mjs; backends render them, the handler parses calls)
  } else {
    let p = body.prompt;
    if (Array.isArray(p) && p.length === 1 && (typeof p[0] === "string" || Array.isArray(p[0]))) p = p[0];
    if (typeof p === "string") req.prompt = p;
    else if (Array.isArray(p) && p.length > 0 && p.every((x) => Number.isInteger(x) && x >= 0)) req.prompt = p;
    else if (Array.isArray(p) && p.length > 0 && p.every((x) => typeof x === "number")) {
      const i = p.findIndex((x) => !(Number.isInteger(x) && x >= 0));
      throw bad(`'prompt'[${i}] must be a token id (an integer >= 0), got ${p[i]}`, "prompt");
    }
    else if (Array.isArray(p) && p.length > 1) throw bad("a batch of prompts is not supported: send one prompt per request", "prompt", "unsupported_parameter");
    else throw bad("'prompt' must be a string or an array of token ids", "prompt");
  }
  const maxName = kind === "chat" && body.max_completion_tokens != null ? "max_completion_tokens" : "max_tokens";
  req.maxTokens = num(body, maxName, {min: 0, max: 1 << 20, int: true});
  req.temperature = num(body, "temperature", {min: 0, max: 2, dflt: 1});
  req.topP = num(body, "top_p", {min: 0, max: 1, dflt: 1});
  if (req.topP === 0) req.temperature = 0;  // only the most likely token survives
  // llama-server extensions
  req.topK = num(body, "top_k", {min: 0, int: true});
  req.minP = num(body, "min_p", {min: 0, max: 1});
  req.repeatPenalty = num(body, "repeat_penalty", {min: Number.MIN_VALUE});
  req.seed = num(body, "seed", {min: 0, max: Number.MAX_SAFE_INTEGER, int: true});
  if (body.ignore_eos != null && typeof body.ignore_eos !== "boolean") throw bad("'ignore_eos' must be a boolean", "ignore_eos");
  req.ignoreEos = body.ignore_eos === true;
  req.presencePenalty = num(body, "presence_penalty", {min: -2, max: 2, dflt: 0});
  req.frequencyPenalty = num(body, "frequency_penalty", {min: -2, max: 2, dflt: 0});
  const stop = body.stop;
  if (stop == null) req.stop = [];
  else if (typeof stop === "string") req.stop = [stop];
  else if (Array.isArray(stop) && stop.length <= 4 && stop.every((s) => typeof s === "string")) req.stop = stop;
  else throw bad("'stop' must be a string or an array of up to 4 strings", "stop");
  if (req.stop.some((s) => s === "")) throw bad("'stop' strings must not be empty", "stop");
  req.logprobs = -1;
  if (kind === "chat") {
    if (body.logprobs != null && typeof body.logprobs !== "boolean") throw bad("'logprobs' must be a boolean", "logprobs");
    const top = num(body, "top_logprobs", {min: 0, max: 20, int: true});
    if (top !== undefined && !body.logprobs) throw bad("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    if (body.logprobs) req.logprobs = top ?? 0;
  } else {
    const lp = num(body, "logprobs", {min: 0, max: 5, int: true});
    if (lp !== undefined) req.logprobs = lp;
  }
  req.stream = body.stream === true;
  req.includeUsage = body.stream_options?.include_usage === true;
  Object.assign(req, constraintOf(body));
  return req;
}

// ---- structured output -----------------------------------------------------------------

const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);

/**
 * The output constraint a request asks for -> {} | {jsonSchema, constraintParam} |
 * {grammar, constraintParam} (constraintParam: the body field that asked, for the 400 of a
 * schema or grammar the core refuses: constraintError below).
 *   response_format (OpenAI): {type: "text"}: none; {type: "json_object"}: any JSON object
 *   (the schema {type: "object"}); {type: "json_schema", json_schema: {name, schema?,
 *   strict?, description?}}: output valid against schema (absent: any JSON value; strict
 *   or not, the output is always constrained).
 *   llama-server's fields: grammar (GBNF text), json_schema (a JSON Schema object).
 * At most one of the three. A malformed one is a 400 naming the exact field.
 */
export function constraintOf(body) {
  const given = ["response_format", "grammar", "json_schema"].filter((f) => body[f] != null);
  if (given.length > 1) throw bad(`give one of ${given.join(", ")}, not several: each constrains the whole output`, given[1]);
  const only = (obj, where, keys) => {
    for (const k of Object.keys(obj))
      if (!keys.includes(k)) throw bad(`'${where}.${k}' is not a field of ${where} (fields: ${keys.join(", ")})`, `${where}.${k}`);
  };
  if (body.grammar != null) {
    if (typeof body.grammar !== "string" || !body.grammar.trim()) throw bad("'grammar' must be a non-empty string of GBNF rules", "grammar");
    return {grammar: body.grammar, constraintParam: "grammar"};
  }
  if (body.json_schema != null) {
    if (!isObject(body.json_schema) && typeof body.json_schema !== "boolean") throw bad("'json_schema' must be a JSON Schema (an object)", "json_schema");
    return {jsonSchema: body.json_schema, constraintParam: "json_schema"};
  }
  const rf = body.response_format;
  if (rf == null) return {};
  if (!isObject(rf)) throw bad(`'response_format' must be an object, got ${JSON.stringify(rf)}`, "response_format");
  if (rf.type === "text") { only(rf, "response_format", ["type"]); return {}; }
  if (rf.type === "json_object") {
    only(rf, "response_format", ["type"]);
    return {jsonSchema: {type: "object"}, constraintParam: "response_format"};
  }
  if (rf.type !== "json_schema")
    throw bad(`'response_format.type' must be "text", "json_object" or "json_schema", got ${JSON.stringify(rf.type)}`, "response_format.type");
  only(rf, "response_format", ["type", "json_schema"]);
  const js = rf.json_schema, at = "response_format.json_schema";
  if (!isObject(js)) throw bad(`'${at}' must be an object {name, schema, strict?}`, at);
  only(js, at, ["name", "schema", "strict", "description"]);
  if (typeof js.name !== "string" || !/^[A-Za-z0-9_-]{1,64}$/.test(js.name))
    throw bad(`'${at}.name' must be a string of 1 to 64 letters, digits, '_' or '-', got ${JSON.stringify(js.name)}`, `${at}.name`);
  if (js.strict != null && typeof js.strict !== "boolean") throw bad(`'${at}.strict' must be a boolean`, `${at}.strict`);
  if (js.description != null && typeof js.description !== "string") throw bad(`'${at}.description' must be a string`, `${at}.description`);
  if (js.schema != null && !isObject(js.schema) && typeof js.schema !== "boolean")
    throw bad(`'${at}.schema' must be a JSON Schema (an object)`, `${at}.schema`);
  return {jsonSchema: js.schema ?? true, constraintParam: "response_format"};
}

/**
 * An error before the generation started: when the request carries a constraint and the
 * core refused its schema or grammar (the message holds "json schema: ..." or "grammar: ...",
 * perhaps after a layer's prefix), a 400 naming the field that asked; else e as it is.
 */
export function constraintError(e, req) {
  if (!req.constraintParam || (e instanceof ApiError && e.status !== 400 && e.status !== 500)) return e;
  const msg = e?.message ?? String(e);
  const m = /(?:json schema|grammar): (?!(?:json schema|grammar): )/.exec(msg);
  if (!m) return e;
  return new ApiError(400, msg.slice(m.index), {param: req.constraintParam, code: "invalid_value"});
}

// ---- responses -------------------------------------------------------------------------

const FINISH = {eog: "stop", stop: "stop", grammar: "stop", length: "length", context: "length"};
const finishReason = (r) => FINISH[r] ?? "stop";

let idCounter = 0;
function newId(prefix) {
  const r = Math.random().toString(36).slice(2, 10);
  return `${prefix}-${Date.now().toString(36)}${(idCounter++).toString(36)}${r}`;
}

const utf8 = new TextDecoder("utf-8", {fatal: false});

function tokenEntry(backend, model, id, logprob) {
  const b = backend.tokenBytes?.(model, id) ?? new Uint8Array();
  return {token: utf8.decode(b), logprob, bytes: Array.from(b)};
}

// Chat logprobs of one token: {token, logprob, bytes, top_logprobs: [...]}
function chatLogprob(backend, model, ev) {
  return {...tokenEntry(backend, model, ev.token, ev.logprob),
          top_logprobs: (ev.top ?? []).map((t) => tokenEntry(backend, model, t.token, t.logprob))};
}

// Legacy completions logprobs, accumulated: {tokens, token_logprobs, top_logprobs, text_offset}
function addCompletionLogprob(acc, backend, model, ev, offset) {
  acc.tokens.push(tokenEntry(backend, model, ev.token, ev.logprob).token);
  acc.token_logprobs.push(ev.logprob);
  const top = {};
  for (const t of ev.top ?? []) top[tokenEntry(backend, model, t.token, t.logprob).token] ??= t.logprob;
  acc.top_logprobs.push(top);
  acc.text_offset.push(offset);
}

// Telemetry events ({type: "telemetry", event: NAME, ...}, bindings/events.mjs) -> this
// stream's vocabulary (header). Unlisted names pass through as {type: NAME, ...}.
const TELEMETRY = {
  prefill_started: (e) => ({type: "prefill", done: 0, total: e.tokens, ...(e.cached ? {cached: e.cached} : {})}),
  prefill_progress: (e) => ({type: "prefill", done: e.done, total: e.total}),
  prefill_completed: (e) => ({type: "prefill", done: e.tokens, total: e.tokens, elapsedMs: e.ms}),
  decode_started: () => null,  // the handler says so at the first token
  reprefill: (e) => ({type: "retry", what: "re-prefill", reason: e.reason, tokens: e.tokens}),
  abstain: (e) => ({type: "shard", name: e.shard, state: "failed", phase: e.phase, slice: e.slice, reason: e.reason,
                    tokens: e.tokens}),
};

export function normalizeTelemetry(ev) {
  if (ev.type !== "telemetry") return ev;
  const {type, event, kind, ...rest} = ev;
  const name = event ?? kind ?? "telemetry";
  return TELEMETRY[name] ? TELEMETRY[name](rest) : {...rest, type: name};
}

// prompt_tokens_details.cached_tokens: the prompt tokens a held session already had (not fed again);
// with speculative decoding (a draft model, prompt lookup) completion_tokens_details carries the
// drafted tokens the model kept and those it rejected (OpenAI's accepted / rejected_prediction_tokens)
const usageOf = (s) => ({prompt_tokens: s.nPrompt, completion_tokens: s.nGenerated, total_tokens: s.nPrompt + s.nGenerated,
                         prompt_tokens_details: {cached_tokens: s.cachedTokens ?? 0},
                         ...(s.speculative ? {completion_tokens_details: {accepted_prediction_tokens: s.speculative.accepted,
                                                                          rejected_prediction_tokens: s.speculative.drafted - s.speculative.accepted}} : {})});

// What the stream's `done` telemetry and a response's `knotwork` field say of a summary:
// timings, a single process's peaks, a mesh's hops and links (absent fields stay absent).
const summaryTelemetry = (s) => ({prefillMs: s.prefillMs, decodeMs: s.decodeMs, prefillTokS: s.prefillTokS, decodeTokS: s.decodeTokS,
  peakEngineBytes: s.engine?.engine_peak_bytes, peakLinearBytes: s.memory?.peakLinear, hops: s.hops, subrequests: s.subrequests,
  maxConnections: s.maxConnections, abstains: s.abstains, reprefills: s.reprefills, speculative: s.speculative});

// llama-server's timings of a speculative generation (draft_n: tokens drafted, draft_n_accepted: kept).
const timingsOf = (s) => ({prompt_n: s.nPrompt - (s.cachedTokens ?? 0), prompt_ms: s.prefillMs, predicted_n: s.nGenerated, predicted_ms: s.decodeMs,
                           draft_n: s.speculative.drafted, draft_n_accepted: s.speculative.accepted});

// Rolling tokens/s over the last `window` tokens.
class Rate {
  constructor(window = 16) { this.t = []; this.window = window; }
  tick(now) { this.t.push(now); if (this.t.length > this.window + 1) this.t.shift(); }
  get tokS() {
    const n = this.t.length - 1;
    return n > 0 ? n / ((this.t[n] - this.t[0]) / 1000 || 1e-9) : 0;
  }
}

/**
 * Pull events from the backend until "accepted" (errors before that are HTTP errors).
 * Returns {it, accepted, pending: events that came before accepted}.
 */
async function start(backend, req, signal) {
  const it = backend.generate(req, {signal})[Symbol.asyncIterator]();
  const pending = [];
  try {
    for (;;) {
      const r = await it.next();
      if (r.done) throw new Error("backend ended before accepting the request");
      if (r.value.type === "accepted") return {it, accepted: r.value, pending};
      pending.push(r.value);
    }
  } catch (e) {
    await it.return?.();
    throw constraintError(e, req);
  }
}

async function complete(backend, req, signal, metrics) {
  const {it, accepted} = await start(backend, req, signal);
  const chat = req.kind === "chat";
  let text = "", summary = null;
  const lpChat = [], lpComp = {tokens: [], token_logprobs: [], top_logprobs: [], text_offset: []};
  try {
    for (let r = await it.next(); !r.done; r = await it.next()) {
      const ev = r.value;
      if (ev.type === "token") {
        if (req.logprobs >= 0 && ev.logprob !== undefined) {
          if (chat) lpChat.push(chatLogprob(backend, req.model, ev));
          else addCompletionLogprob(lpComp, backend, req.model, ev, text.length);
        }
        text += ev.text;
      } else if (ev.type === "summary") summary = ev;
    }
  } finally { await it.return?.(); }
  if (!summary) throw new Error("backend ended without a summary event");
  metrics?.generation(summary, accepted);
  const created = Math.floor(Date.now() / 1000);
  const knotwork = {promptTokens: accepted.promptTokens, ...summaryTelemetry(summary), reason: summary.reason};
  const id = newId(chat ? "chatcmpl" : "cmpl");
  // tools: the backend's accepted event names the call syntax (and a forced call's opening)
  const calls = accepted.toolSyntax ? parseToolCalls((accepted.toolPrefix ?? "") + text, accepted.toolSyntax, req.tools.list.map((f) => f.name)) : null;
  const message = calls?.calls.length ? {role: "assistant", content: calls.content, refusal: null, tool_calls: openaiToolCalls(calls.calls, id)}
    : {role: "assistant", content: text, refusal: null};
  const choice = chat
    ? {index: 0, message, logprobs: req.logprobs >= 0 ? {content: lpChat, refusal: null} : null,
       finish_reason: calls?.calls.length ? "tool_calls" : finishReason(summary.reason)}
    : {index: 0, text, logprobs: req.logprobs >= 0 ? lpComp : null, finish_reason: finishReason(summary.reason)};
  return jsonResponse({id, object: chat ? "chat.completion" : "text_completion",
                       created, model: req.model, system_fingerprint: null, choices: [choice], usage: usageOf(summary), knotwork,
                       ...(summary.speculative ? {timings: timingsOf(summary)} : {})});
}

function stream(backend, req, signal, metrics) {
  const chat = req.kind === "chat";
  const id = newId(chat ? "chatcmpl" : "cmpl");
  const created = Math.floor(Date.now() / 1000);
  const object = chat ? "chat.completion.chunk" : "text_completion";
  const chunk = (choice, extra = {}) => ({id, object, created, model: req.model, system_fingerprint: null,
                                          choices: choice ? [choice] : [], ...extra});
  const data = (obj) => te.encode(`data: ${JSON.stringify(obj)}\n\n`);
  const tele = (obj) => te.encode(`: knotwork ${JSON.stringify({...obj, t: Date.now()})}\n\n`);
  const rate = new Rate();
  let it = null, accepted = {}, closed = false, n = 0, t0 = 0, offset = 0;
  let tools = null;  // a ToolStream when the request has tools (text that may be a call is held back)

  // One backend event -> SSE chunks (out.push); false when the stream ended.
  async function step(out) {
    let r;
    try {
      r = await it.next();
    } catch (e) {
      if (closed) return false;
      const err = e instanceof ApiError ? e : new ApiError(500, e?.message || String(e), {type: "server_error"});
      out.push(tele({type: "failure", reason: err.message, status: err.status}));
      out.push(data(errorBody(err)));  // OpenAI clients raise it as an APIError
      out.push(te.encode("data: [DONE]\n\n"));
      return false;
    }
    if (closed || r.done) return false;
    const ev = r.value;
    if (ev.type === "token") {
      const now = performance.now();
      if (n++ === 0) { t0 = now; out.push(tele({type: "decode", phase: "started"})); }
      rate.tick(now);
      let lp = null;
      if (req.logprobs >= 0 && ev.logprob !== undefined) {
        if (chat) lp = {content: [chatLogprob(backend, req.model, ev)], refusal: null};
        else {
          lp = {tokens: [], token_logprobs: [], top_logprobs: [], text_offset: []};
          addCompletionLogprob(lp, backend, req.model, ev, offset);
        }
      }
      offset += ev.text.length;
      const text = tools ? tools.push(ev.text) : ev.text;
      if (text || lp)
        out.push(data(chunk(chat ? {index: 0, delta: {content: text}, logprobs: lp, finish_reason: null}
                                 : {index: 0, text: ev.text, logprobs: lp, finish_reason: null})));
      const mem = ev.telemetry?.memory;
      out.push(tele({type: "tokens", n, tokS: rate.tokS, elapsedMs: now - t0, ...(mem && {memory: {linear: mem.linear, heap: mem.heap}})}));
    } else if (ev.type === "summary") {
      metrics?.generation(ev, accepted);
      let fin = finishReason(ev.reason);
      if (tools) {
        const end = tools.end();
        if (end.content) out.push(data(chunk({index: 0, delta: {content: end.content}, logprobs: null, finish_reason: null})));
        openaiToolCalls(end.calls, id).forEach((c, index) => {
          out.push(data(chunk({index: 0, delta: {tool_calls: [{index, id: c.id, type: "function", function: {name: c.function.name, arguments: ""}}]},
                               logprobs: null, finish_reason: null})));
          out.push(data(chunk({index: 0, delta: {tool_calls: [{index, function: {arguments: c.function.arguments}}]}, logprobs: null, finish_reason: null})));
        });
        if (end.calls.length) fin = "tool_calls";
      }
      out.push(data(chunk(chat ? {index: 0, delta: {}, logprobs: null, finish_reason: fin}
                               : {index: 0, text: "", logprobs: null, finish_reason: fin})));
      if (req.includeUsage) out.push(data(chunk(null, {usage: usageOf(ev)})));
      out.push(tele({type: "done", reason: ev.reason, usage: usageOf(ev), ...summaryTelemetry(ev)}));
      out.push(te.encode("data: [DONE]\n\n"));
    } else {
      const t = normalizeTelemetry(ev);
      if (t) out.push(tele(t));
    }
    return true;
  }

  return (async () => {
    const s = await start(backend, req, signal);  // throws: an HTTP error status
    it = s.it;
    accepted = s.accepted;
    if (chat && accepted.toolSyntax) {
      tools = new ToolStream(accepted.toolSyntax, req.tools.list.map((f) => f.name), accepted.toolPrefix ?? "");
    }
    const body = new ReadableStream({
      start(controller) {
        controller.enqueue(tele({...s.accepted, model: req.model, maxTokens: req.maxTokens ?? null}));
        for (const ev of s.pending.map(normalizeTelemetry)) if (ev) controller.enqueue(tele(ev));
        if (chat) controller.enqueue(data(chunk({index: 0, delta: {role: "assistant", content: ""}, logprobs: null, finish_reason: null})));
      },
      async pull(controller) {
        // a pull must enqueue or close: the stream does not call it again on its own
        const out = [];
        let more = true;
        while (more && out.length === 0) more = await step(out);
        if (closed) return;  // cancelled meanwhile
        for (const c of out) controller.enqueue(c);
        if (!more) { closed = true; controller.close(); }
      },
      async cancel() {
        // the client went away: end the generation now, which frees the session
        closed = true;
        await it.return?.();
      },
    }, {highWaterMark: 0});
    return new Response(body, {status: 200, headers: {"content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-cache", "x-accel-buffering": "no", ...CORS}});
  })();
}

// ---- routing ---------------------------------------------------------------------------

async function readJson(request) {
  let text;
  try { text = await request.text(); } catch (e) { throw bad(`could not read the request body: ${e.message}`, null); }
  try { return JSON.parse(text); } catch (e) {
    throw bad(`We could not parse the JSON body of your request. (${e.message})`, null, "invalid_json");
  }
}

async function findModel(backend, id) {
  const models = await backend.models();
  const card = models.find((m) => m.id === id);
  if (!card) throw new ApiError(404, `The model '${id}' does not exist (this server has: ${models.map((m) => m.id).join(", ")})`,
                                {param: "model", code: "model_not_found"});
  return card;
}

const modelCard = (m) => ({object: "model", created: 0, owned_by: "knotwork", ...m});

// CORS preflight: any origin, the methods served, and the headers the browser asks for
// (the official openai browser client sends x-stainless-* headers besides authorization).
function preflight(request) {
  const asked = request.headers.get("access-control-request-headers");
  const allow = asked && /^[\w\s,-]*$/.test(asked) ? asked : "authorization, content-type";
  return new Response(null, {status: 204, headers: {...CORS, "access-control-allow-methods": "GET, POST, OPTIONS",
    "access-control-allow-headers": allow, "access-control-max-age": "86400", vary: "access-control-request-headers"}});
}

/**
 * A handler while the model loads (`serve` listens first): GET /health is a 503
 * {status: "loading", progress} (progress(): 0..1), a preflight is answered, anything else
 * is a 503 naming the wait; once `ready` resolves to the real handler, every request goes
 * to it. A failed load answers 503 {status: "error", message} until the process exits.
 * @param {Promise<(r: Request) => Promise<Response>>} ready  @param {{progress?: () => number}} [o]
 */
export function loadingHandler(ready, {progress = () => 0} = {}) {
  let handle = null, failed = null;
  ready.then((h) => { handle = h; }, (e) => { failed = e; });
  return async function (request) {
    if (handle) return handle(request);
    if (request.method === "OPTIONS") return preflight(request);
    const path = new URL(request.url).pathname.replace(/\/+$/, "");
    if (path === "/health")
      return jsonResponse(failed ? {status: "error", message: failed.message} : {status: "loading", progress: progress()}, 503,
                          {"retry-after": "1"});
    return jsonResponse({error: {message: failed ? `the model failed to load: ${failed.message}` : "the model is loading; retry when GET /health answers 200",
                                 type: "server_error", param: null, code: failed ? "load_failed" : "model_loading"}}, 503, {"retry-after": "1"});
  };
}

// ---- llama-server's endpoints and embeddings --------------------------------------------

const notImplemented = (what, why) => new ApiError(501, `${what} is not available on this server${why ? `: ${why}` : ""}`,
                                                   {type: "not_implemented_error", code: "not_implemented"});

function objectBody(body) {
  if (body === null || typeof body !== "object" || Array.isArray(body)) throw bad("the request body must be a JSON object", null);
  return body;
}

function flag(body, name, dflt) {
  const v = body[name];
  if (v === undefined || v === null) return dflt;
  if (typeof v !== "boolean") throw bad(`'${name}' must be a boolean, got ${JSON.stringify(v)}`, name, "invalid_type");
  return v;
}

function tokenIds(v, name) {
  if (!Array.isArray(v) || !v.every((x) => Number.isInteger(x) && x >= 0))
    throw bad(`'${name}' must be an array of token ids (non-negative integers)`, name);
  return v;
}

// A piece as llama-server gives it: the text when the bytes are valid UTF-8, else the bytes.
const strictUtf8 = new TextDecoder("utf-8", {fatal: true});
function piece(bytes) {
  try { return strictUtf8.decode(bytes); } catch { return Array.from(bytes); }
}

// The messages of an /apply-template (or chat) body, checked as a chat request's.
function chatMessages(body) {
  return parseRequest({model: "-", messages: body.messages}, "chat").messages;
}

// The inputs of an embeddings request: a string, strings, token ids, or arrays of ids.
function embeddingInputs(input) {
  const one = (x, i) => {
    if (typeof x === "string") {
      if (x === "") throw bad(`'input'${i === null ? "" : `[${i}]`} must not be an empty string`, "input");
      return x;
    }
    if (Array.isArray(x) && x.length && x.every((t) => Number.isInteger(t) && t >= 0)) return x;
    throw bad(`'input'${i === null ? "" : `[${i}]`} must be a non-empty string or a non-empty array of token ids`, "input");
  };
  if (typeof input === "string") return [one(input, null)];
  if (Array.isArray(input) && input.length && input.every((t) => Number.isInteger(t))) return [one(input, null)];
  if (Array.isArray(input) && input.length) {
    if (input.length > 2048) throw bad(`'input' holds ${input.length} inputs; at most 2048 per request`, "input");
    return input.map(one);
  }
  throw bad("'input' must be a string, an array of strings, an array of token ids or an array of such arrays", "input");
}

function base64Floats(v) {
  const b = new Uint8Array(v.buffer, v.byteOffset, v.byteLength);  // little-endian f32, as OpenAI's
  let s = "";
  for (let i = 0; i < b.length; i += 0x8000) s += String.fromCharCode.apply(null, b.subarray(i, i + 0x8000));
  return btoa(s);
}

/**
 * @param {object} backend  see the interface at the top of this file
 * @param {{apiKey?: string, page?: string|null, metrics?: Metrics}} [options]  page: HTML at GET / (null: none);
 *   metrics: the counters /metrics reports (default: this handler's own)
 * @returns {(request: Request) => Promise<Response>}
 */
export function createHandler(backend, {apiKey, page = CHAT_PAGE_HTML, metrics = new Metrics()} = {}) {
  return async function handle(request) {
    let path = "other";
    const response = await (async () => {
      try {
        const url = new URL(request.url);
        path = url.pathname.replace(/\/+$/, "") || "/";
        return await route(request, url, path);
      } catch (e) {
        return errorResponse(e);
      }
    })();
    if (request.method !== "OPTIONS") metrics.request(path, response.status);
    return response;
  };

  async function route(request, url, path) {
    const method = request.method;
    if (method === "OPTIONS") return preflight(request);
    if (path === "/" && page !== null) {
      if (method !== "GET" && method !== "HEAD") throw new ApiError(405, `${method} / is not allowed (GET)`);
      return new Response(method === "HEAD" ? null : page, {headers: {"content-type": "text/html; charset=utf-8"}});
    }
    const routes = {
      "/v1/models": ["GET", async () => jsonResponse({object: "list", data: (await backend.models()).map(modelCard)})],
      "/v1/chat/completions": ["POST", () => generateRoute(request, "chat")],
      "/v1/completions": ["POST", () => generateRoute(request, "completion")],
      "/v1/embeddings": ["POST", () => embeddingsRoute(request)],
      "/tokenize": ["POST", () => tokenizeRoute(request)],
      "/detokenize": ["POST", () => detokenizeRoute(request)],
      "/apply-template": ["POST", () => applyTemplateRoute(request)],
      "/props": ["GET", () => propsRoute()],
      "/metrics": ["GET", async () => new Response(metrics.render(await backend.metrics?.()),
        {headers: {"content-type": "text/plain; version=0.0.4; charset=utf-8", ...CORS}})],
    };
    // a load balancer's or a browser's probe needs no key; the details (sessions, memory,
    // topology) only with the key, when one is set
    if (path === "/health") {
      if (method !== "GET" && method !== "HEAD") throw new ApiError(405, `${method} ${url.pathname} is not allowed (GET)`);
      let keyed = true;
      try { checkKey(request, apiKey); } catch { keyed = false; }
      return jsonResponse({status: "ok", ...(keyed ? await backend.health?.() : {})});
    }
    const r = routes[path];
    const modelRoute = /^\/v1\/models\/(.+)$/.exec(path);
    if (!r && !modelRoute) throw new ApiError(404, `Unknown request URL: ${method} ${url.pathname}`, {code: "unknown_url"});
    checkKey(request, apiKey);
    if (modelRoute) {
      if (method !== "GET") throw new ApiError(405, `${method} ${url.pathname} is not allowed (GET)`);
      return jsonResponse(modelCard(await findModel(backend, decodeURIComponent(modelRoute[1]))));
    }
    if (method !== r[0]) throw new ApiError(405, `${method} ${url.pathname} is not allowed (${r[0]})`);
    return await r[1]();
  }

  async function generateRoute(request, kind) {
    const body = await readJson(request);
    const req = parseRequest(body, kind);
    await findModel(backend, req.model);
    const signal = request.signal;
    return req.stream ? stream(backend, req, signal, metrics) : complete(backend, req, signal, metrics);
  }

  // POST /tokenize {content, add_special = false, parse_special = true, with_pieces = false}
  async function tokenizeRoute(request) {
    const body = objectBody(await readJson(request));
    if (typeof body.content !== "string") throw bad("'content' must be a string", "content");
    const addSpecial = flag(body, "add_special", false), parseSpecial = flag(body, "parse_special", true);
    const withPieces = flag(body, "with_pieces", false);
    if (!backend.tokenize) throw notImplemented("/tokenize");
    let ids;
    try { ids = await backend.tokenize(body.content, {addSpecial, parseSpecial}); } catch (e) { throw asBad(e, "content"); }
    if (!withPieces) return jsonResponse({tokens: ids});
    const model = (await backend.models())[0]?.id;
    return jsonResponse({tokens: ids.map((id) => ({id, piece: piece(backend.tokenBytes(model, id, {special: true}))}))});
  }

  // POST /detokenize {tokens}
  async function detokenizeRoute(request) {
    const body = objectBody(await readJson(request));
    const ids = tokenIds(body.tokens, "tokens");
    if (!backend.detokenize) throw notImplemented("/detokenize");
    try { return jsonResponse({content: await backend.detokenize(ids)}); } catch (e) { throw asBad(e, "tokens"); }
  }

  // POST /apply-template {messages} -> {prompt}: the text a chat request generates from
  async function applyTemplateRoute(request) {
    const body = objectBody(await readJson(request));
    const messages = chatMessages(body);
    if (!backend.applyTemplate) throw notImplemented("/apply-template");
    try { return jsonResponse({prompt: await backend.applyTemplate(messages)}); } catch (e) { throw asBad(e, "messages"); }
  }

  // GET /props, shaped as llama-server's (n_ctx under default_generation_settings), plus
  // knotwork's own fields
  async function propsRoute() {
    if (!backend.props) throw notImplemented("/props");
    const p = await backend.props();
    return jsonResponse({
      default_generation_settings: {n_ctx: p.nCtx, params: {temperature: 1, top_p: 1, top_k: 0, min_p: 0, n_predict: -1}},
      n_ctx: p.nCtx, total_slots: p.slots ?? 1, model_path: p.modelPath, model: p.id,
      chat_template: p.chatTemplate?.text ?? "", chat_template_name: p.chatTemplate?.name ?? null,
      bos_token: p.bos ?? null, eos_token: p.eos ?? null, modalities: {vision: false, audio: false},
      build_info: `knotwork ${VERSION}`, topology: p.topology ?? null, knotwork: p.knotwork ?? {}});
  }

  // POST /v1/embeddings {model, input, encoding_format = "float" | "base64"}
  async function embeddingsRoute(request) {
    const body = objectBody(await readJson(request));
    if (typeof body.model !== "string" || !body.model) throw bad("you must provide a model parameter", "model");
    const inputs = embeddingInputs(body.input);
    const format = body.encoding_format ?? "float";
    if (format !== "float" && format !== "base64")
      throw bad(`'encoding_format' must be "float" or "base64", got ${JSON.stringify(format)}`, "encoding_format");
    if (body.dimensions != null)
      throw bad("unsupported: dimensions (the embeddings are the model's n_embd values)", "dimensions", "unsupported_parameter");
    await findModel(backend, body.model);
    if (!backend.embed) throw notImplemented("/v1/embeddings", backend.embedUnsupported);
    const {data, promptTokens} = await backend.embed(body.model, inputs);
    metrics.embeddings(inputs.length, promptTokens);
    return jsonResponse({object: "list", model: body.model,
      data: data.map((v, index) => ({object: "embedding", index, embedding: format === "base64" ? base64Floats(v) : Array.from(v)})),
      usage: {prompt_tokens: promptTokens, total_tokens: promptTokens}});
  }
}

// A backend error on user input (a bad id, a template the core cannot render): a 400.
function asBad(e, param) {
  if (e instanceof ApiError) return e;
  return bad(e?.message || String(e), param);
}
