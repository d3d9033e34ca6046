// request.mjs — what a public request may ask of the mesh, checked where it enters, before
// anything is streamed: a bad field is an HTTP 400 naming it (never a 500 from a station or a
// 200 stream that ends in an error).
//
//   checkGenerateBody(model, body) -> {ids, options}   POST /v1/mesh/generate's body
//     body: {ids | messages | prompt, options?}; nothing else. The internal protocol's knobs
//     (session ids, timeouts, link mode) are refused by name: a public body cannot join
//     another client's session, force abstains or bypass the links. They are deployment
//     configuration (TIMEOUTS, LINK_MODE vars: deploy/description.mjs) and the entry's choice
//     (session ids: prefixes.mjs).
//     ids: a non-empty array of integers in [0, n_vocab) that leaves room for one token in
//     the context (`ids[i]` named when one is not).
//   checkOptions(model, options, {nCtx, draftMax}) -> options   the generation options, either route's:
//     every key known (OPTION_TYPES, or any other of bindings/options.mjs SAMPLING_KEYS, left to
//     the core), each of its type and range, `chunk` in [1, nCtx], `nCtx`
//     in [1, the model's default context]; then the core's own check of the sampling values
//     (Generator.open; its message names the core's key, given with the option's name).
//     The draft model is configuration (the DRAFT var {knot, n}: draft.mjs): a request may
//     turn it off (`draft: false`) or lower its tokens per pass (`draftN` in [1, draftMax],
//     the configured n); without a configured draft `draft: true` and `draftN` are refused,
//     and a draft model named in a request (a string) is refused by name.
import {HttpError} from "../lib/errors.mjs";
import {defaultContext, SAMPLING_KEYS} from "../../bindings/options.mjs";
import {Generator} from "../../bindings/generator.mjs";
import {promptIds} from "./prompt.mjs";

const bad = (msg) => new HttpError(400, msg);

// option -> [type, min, max]; types: int, num, bool, stop (a string or an array of strings),
// choice (one of the listed strings)
const OPTION_TYPES = Object.freeze({
  maxTokens: ["int", 0, 1 << 20], temperature: ["num", 0, 100], topK: ["int", 0, 1 << 24], topP: ["num", 0, 1],
  minP: ["num", 0, 1], repeatPenalty: ["num", Number.MIN_VALUE, 100], repeatLastN: ["int", -1, 1 << 20],
  presencePenalty: ["num", -2, 2], frequencyPenalty: ["num", -2, 2], seed: ["int", 0, Number.MAX_SAFE_INTEGER], stop: ["stop"],
  ignoreEos: ["bool"], lookup: ["int", 0, 64], logprobs: ["int", 0, 20], chunk: ["int", 1, "nCtx"], nCtx: ["int", 1, "the default context"],
  prefill: ["choice", ["pipelined", "sequential"]],  // the mesh's prefill (docs/protocol.md)
  draft: ["bool"], draftN: ["int", 1, "the deployment's DRAFT.n"],  // the configured draft model: off, or fewer tokens
  options: ["object"],  // the core's sampling keys as they are (knotwork mesh -t/--top-k ...): the core checks them
});
const BODY_FIELDS = new Set(["ids", "messages", "prompt", "options"]);
const INTERNAL = {
  session: "session ids are the entry's (held sessions are matched by prompt prefix)",
  timeouts: "timeouts are deployment configuration (the TIMEOUTS var)",
  linkMode: "the link mode is deployment configuration (the LINK_MODE var)",
  sid: "session ids are the entry's (held sessions are matched by prompt prefix)",
};

function checkValue(name, v, [type, min, max]) {
  if (type === "core") return;
  if (type === "object") {
    if (typeof v !== "object" || Array.isArray(v)) throw bad(`${name} must be an object of the core's option keys, got ${JSON.stringify(v)}`);
    return;
  }
  if (type === "choice") {
    if (!min.includes(v)) throw bad(`${name} must be ${min.map((c) => JSON.stringify(c)).join(" or ")}, got ${JSON.stringify(v)}`);
    return;
  }
  if (type === "bool") { if (typeof v !== "boolean") throw bad(`${name} must be a boolean, got ${JSON.stringify(v)}`); return; }
  if (type === "stop") {
    if (typeof v === "string" || (Array.isArray(v) && v.every((s) => typeof s === "string"))) return;
    throw bad(`${name} must be a string or an array of strings, got ${JSON.stringify(v)}`);
  }
  if (typeof v !== "number" || !Number.isFinite(v) || (type === "int" && !Number.isInteger(v)))
    throw bad(`${name} must be ${type === "int" ? "an integer" : "a number"}, got ${JSON.stringify(v)}`);
  if (v < min || v > max) throw bad(`${name} must be in [${min}, ${max}], got ${v}`);
}

/** The generation options of a request, checked (see the header); `prefix` names them. */
export async function checkOptions(model, options, {prefix = "options.", draftMax = 0} = {}) {
  if (options === undefined || options === null) options = {};
  if (typeof options !== "object" || Array.isArray(options)) throw bad(`${prefix.replace(/\.$/, "") || "options"} must be an object`);
  const maxCtx = defaultContext(model.info.config);
  const nCtx = Number.isInteger(options.nCtx) && options.nCtx >= 1 && options.nCtx <= maxCtx ? options.nCtx : maxCtx;
  for (const [k, v] of Object.entries(options)) {
    if (v === undefined || v === null) continue;
    if (INTERNAL[k]) throw bad(`${prefix}${k} is not settable from a request: ${INTERNAL[k]}`);
    if (k === "draft" && typeof v === "string")
      throw bad(`${prefix}draft is not settable from a request: the draft model is deployment configuration (the DRAFT var); a request may set draft: false or draftN`);
    if ((k === "draftN" || (k === "draft" && v === true)) && !draftMax)
      throw bad(`${prefix}${k}: this deployment has no draft model (the DRAFT var)`);
    const t = OPTION_TYPES[k] ?? (k in SAMPLING_KEYS ? ["core"] : null);  // a sampling key without a row here: the core checks it
    if (!t) throw bad(`${prefix}${k} is not an option (options: ${[...new Set([...Object.keys(OPTION_TYPES), ...Object.keys(SAMPLING_KEYS)])].join(", ")})`);
    checkValue(`${prefix}${k}`, v, k === "nCtx" ? ["int", 1, maxCtx] : k === "chunk" ? ["int", 1, nCtx] : k === "draftN" ? ["int", 1, draftMax] : t);
  }
  let gen;
  try {
    gen = await Generator.open(model, {...options, draft: undefined, draftN: undefined, nCtx});
  } catch (e) {
    const key = Object.entries(SAMPLING_KEYS).find(([js, core]) => options[js] != null && new RegExp(`\\b${core}\\b`).test(e.message))?.[0];
    throw bad(`${key ? `${prefix}${key}: ` : `${prefix.replace(/\.$/, "") || "options"}: `}${e.message}`);
  } finally { gen?.free(); }
  return options;
}

/** Prompt ids: a non-empty array of integers in [0, n_vocab) that leaves room for a token. */
export function checkIds(model, ids, {name = "ids", nCtx} = {}) {
  const c = model.info.config;
  if (!Array.isArray(ids)) throw bad(`${name} must be an array of token ids`);
  if (!ids.length) throw bad(`${name} is empty: the prompt needs at least one token`);
  ids.forEach((x, i) => {
    if (!Number.isInteger(x)) throw bad(`${name}[${i}] must be an integer token id, got ${JSON.stringify(x)}`);
    if (x < 0 || x >= c.n_vocab) throw bad(`${name}[${i}] = ${x} is outside the vocabulary [0, ${c.n_vocab})`);
  });
  if (nCtx && ids.length >= nCtx) throw bad(`${name}: ${ids.length} prompt tokens leave no room in the context of ${nCtx}`);
  return ids;
}

/** POST /v1/mesh/generate's body -> {ids, options}, or a 400 naming the field. */
export async function checkGenerateBody(model, body, template = "", {draftMax = 0} = {}) {
  if (body === null || typeof body !== "object" || Array.isArray(body)) throw bad("the body must be a JSON object");
  for (const k of Object.keys(body)) {
    if (INTERNAL[k]) throw bad(`${k} is not settable from a request: ${INTERNAL[k]}`);
    if (!BODY_FIELDS.has(k)) throw bad(`${k} is not a field of a generate request (fields: ${[...BODY_FIELDS].join(", ")})`);
  }
  const options = await checkOptions(model, body.options, {draftMax});
  const nCtx = options.nCtx ?? defaultContext(model.info.config);
  let ids;
  if (body.ids !== undefined) ids = body.ids;
  else {
    if (body.messages !== undefined && !Array.isArray(body.messages)) throw bad("messages must be an array of {role, content}");
    if (body.prompt !== undefined && typeof body.prompt !== "string") throw bad("prompt must be a string");
    try { ids = promptIds(model, body, template); } catch (e) { throw e.status ? e : bad(`could not build the prompt: ${e.message}`); }
  }
  return {ids: checkIds(model, ids, {nCtx}), options};
}
