// workers/coordinator — the mesh's entry Worker and its per-session Durable Object
// (DESIGN §5, §6). The entry Worker is the only publicly routable script; each generation
// runs in a SessionDO, which keeps WebSocket links to the stations and shards for the
// session's lifetime (one subrequest per link instead of one per hop: DESIGN §8).
//
// Bindings: TOPOLOGY (JSON, lib/topology.mjs), MODELS (R2), SESSION (SessionDO), one service
// binding per station member / shard named M_<name>, LINK_MODE? ("ws" default | "http"),
// TIMEOUTS? ({shardMs, stationMs}), API_KEY? (required as Bearer token when set),
// CHAT_TEMPLATE? (chatml | llama2 | llama3 | zephyr | jinja: the chat template by name; by
// default the model's own, and one the core cannot render is a 400 naming it).
//
// HTTP:  POST /v1/mesh/generate {prompt | ids | messages, options, session?}
//          -> NDJSON events (telemetry, token, summary | error), see mesh.mjs
//        GET /v1/mesh/topology, GET /v1/mesh/stats (every isolate's memory)
//        the OpenAI-compatible API (bindings/openai.mjs) over meshBackend(env): /v1/models,
//        /v1/chat/completions, /v1/completions, /health, / (chat page)
// JS: meshEvents(env, body) is an async iterator of the same events; meshBackend(env) is
// the openai.mjs backend interface over it.
import {wasmModules as wasmModule} from "../lib/wasm.mjs";
import {init, memoryStats} from "../../bindings/knotwork.mjs";
import {r2Source} from "../lib/sources.mjs";
import {openTextModel} from "../lib/text.mjs";
import {Link, Counter} from "../lib/link.mjs";
import {jsonBinding, HttpError, errorResponse, bootCache} from "../lib/common.mjs";
import {MeshCoordinator} from "./mesh.mjs";
import {createHandler, ApiError} from "../../bindings/openai.mjs";

export {MeshCoordinator};

const text = bootCache((m) => m.close());  // the tokenizer + config, once per isolate and model
function textModel(env) {
  const t = jsonBinding(env.TOPOLOGY, "TOPOLOGY");
  return text(t.knot, async () => {
    await init(wasmModule);
    return openTextModel(await r2Source(env.MODELS, t.knot));
  });
}

/**
 * Prompt ids from a request body: ids, or messages through the chat template (`template`:
 * a name, "" for the model's own), or prompt text (special-token text parsed, as `generate`).
 */
export function promptIds(model, body, template = "") {
  if (Array.isArray(body.ids)) return body.ids;
  if (Array.isArray(body.messages))
    return model.tokenize(model.applyChatTemplate(body.messages, {template}), {addBos: true, parseSpecial: true});
  if (typeof body.prompt === "string") return model.tokenize(body.prompt, {parseSpecial: true});
  throw new HttpError(400, "body needs ids (token ids), messages (chat) or prompt (text)");
}

export class SessionDO {
  constructor(ctx, env) { this.ctx = ctx; this.env = env; }

  async fetch(req) {
    const env = this.env;
    let body;
    try { body = await req.json(); } catch { return errorResponse(new HttpError(400, "body is not JSON")); }
    const topology = jsonBinding(env.TOPOLOGY, "TOPOLOGY");
    const counter = new Counter();
    const timeouts = {...jsonBinding(env.TIMEOUTS ?? "{}", "TIMEOUTS"), ...(body.timeouts ?? {})};
    const mode = body.linkMode ?? env.LINK_MODE ?? "ws";
    const {readable, writable} = new TransformStream();
    const writer = writable.getWriter();
    const enc = new TextEncoder();
    const run = (async () => {
      try {
        const model = await textModel(env);
        const coord = new MeshCoordinator({topology, text: model, counter, timeouts,
          connect: (name, sid) => new Link(name, env[`M_${name}`], {mode, counter, sid})});
        const ids = promptIds(model, body, env.CHAT_TEMPLATE ?? "");
        for await (const e of coord.generate(ids, {...(body.options ?? {}), sid: body.session})) {
          if (e.type === "summary") e.coordinatorMemory = await memoryStats();
          await writer.write(enc.encode(JSON.stringify(e) + "\n"));
        }
      } catch (e) {
        await writer.write(enc.encode(JSON.stringify({type: "error", error: e.message, status: e.status ?? 500}) + "\n")).catch(() => {});
      } finally { await writer.close().catch(() => {}); }
    })();
    this.ctx.waitUntil?.(run);
    return new Response(readable, {headers: {"content-type": "application/x-ndjson"}});
  }
}

/** Events of one generation (the NDJSON stream of a SessionDO, parsed). */
export async function* meshEvents(env, body) {
  const name = body.session ?? crypto.randomUUID();
  const stub = env.SESSION.get(env.SESSION.idFromName(name));
  const res = await stub.fetch("https://session/generate", {method: "POST", body: JSON.stringify({...body, session: name})});
  if (!res.ok) throw new HttpError(res.status, await res.text());
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const {value, done} = await reader.read();
    if (value) buf += value;
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (line) yield JSON.parse(line);
    }
    if (done) break;
  }
}

/** The openai.mjs backend interface over the mesh (tokenizes here, generates in a SessionDO). */
export function meshBackend(env, {created = Math.floor(Date.now() / 1000)} = {}) {
  const t = jsonBinding(env.TOPOLOGY, "TOPOLOGY");
  const id = env.MODEL_ID ?? t.knot.replace(/\.knot$/, "");
  const topo = {kind: "mesh", stations: t.stations.map((s) => ({layers: s.layers, members: s.members.map((m) => m.name)})),
                shards: t.shards.map((s) => ({name: s.name, vocab: s.vocab})), shardGroups: t.shardGroups};
  let model = null;
  const text = async () => (model ??= await textModel(env));
  return {
    async models() {
      const m = await text(), c = m.info.config;
      return [{id, created, owned_by: "knotwork", knotwork: {arch: c.arch, nCtx: Math.min(c.n_ctx_train || 2048, 2048),
               nLayer: c.n_layer, nEmbd: c.n_embd, nVocab: c.n_vocab, format: "knot", mode: "mesh", topology: topo}}];
    },
    async health() { return {model: id, topology: topo, isolates: await stats(env)}; },
    tokenBytes(_model, tok) { return model?.tokenBytes(tok) ?? new Uint8Array(); },
    async *generate(req) {
      const m = await text(), c = m.info.config;
      const nCtx = Math.min(c.n_ctx_train || 2048, 2048);
      const param = req.kind === "chat" ? "messages" : "prompt";
      let ids;
      try {
        const body = req.kind === "chat" ? {messages: req.messages}
          : typeof req.prompt === "string" ? {prompt: req.prompt} : {ids: req.prompt};
        ids = promptIds(m, body, env.CHAT_TEMPLATE ?? "");
      } catch (e) { throw new ApiError(400, `could not build the prompt: ${e.message}`, {param}); }
      const bad = ids.find((x) => !(x >= 0 && x < c.n_vocab));
      if (bad !== undefined) throw new ApiError(400, `prompt token id ${bad} is outside the vocabulary (${c.n_vocab} tokens)`, {param});
      if (ids.length >= nCtx || (req.maxTokens !== undefined && ids.length + req.maxTokens > nCtx))
        throw new ApiError(400, `This model's maximum context length is ${nCtx} tokens; the request needs ${ids.length + (req.maxTokens ?? 1)}.`,
                           {param: req.maxTokens !== undefined ? "max_tokens" : param, code: "context_length_exceeded"});
      const seed = req.seed ?? Math.floor(Math.random() * 2 ** 32);
      yield {type: "accepted", promptTokens: ids.length, nCtx, arch: c.arch, mode: "mesh", seed, topology: topo};
      const options = {maxTokens: req.maxTokens ?? nCtx - ids.length, temperature: req.temperature, topP: req.topP, topK: req.topK,
                       minP: req.minP, repeatPenalty: req.repeatPenalty, seed, stop: req.stop, ignoreEos: req.ignoreEos,
                       presencePenalty: req.presencePenalty, frequencyPenalty: req.frequencyPenalty,
                       logprobs: req.logprobs >= 0 ? req.logprobs : undefined, nCtx};
      for await (const e of meshEvents(env, {ids, options})) {
        if (e.type === "token") yield {type: "token", id: e.token, text: e.text, logprob: e.logprob, top: e.top, telemetry: e.telemetry};
        else if (e.type === "telemetry") yield {...e, type: "telemetry", kind: e.event};
        else if (e.type === "error") throw new Error(`mesh: ${e.error}`);
        else if (e.type === "summary")
          yield {type: "done", reason: e.reason, promptTokens: e.nPrompt, completionTokens: e.nGenerated,
                 telemetry: {prefillTokS: e.prefillTokS, decodeTokS: e.decodeTokS, hops: e.hops, subrequests: e.subrequests,
                             maxConnections: e.maxConnections, abstains: e.abstains, reprefills: e.reprefills}};
      }
    },
  };
}

async function stats(env) {
  const t = jsonBinding(env.TOPOLOGY, "TOPOLOGY");
  const names = [...t.stations.flatMap((s) => s.members.map((m) => m.name)), ...t.shards.map((s) => s.name)].filter((n) => env[`M_${n}`]);
  const out = {coordinator: {memory: await memoryStats()}};
  await Promise.all(names.map(async (n) => {
    try { out[n] = await (await env[`M_${n}`].fetch(`https://${n}/stats`)).json(); } catch (e) { out[n] = {error: e.message}; }
  }));
  return out;
}

export default {
  async fetch(req, env) {
    const url = new URL(req.url);
    try {
      if (env.API_KEY && url.pathname.startsWith("/v1/mesh/") && req.headers.get("authorization") !== `Bearer ${env.API_KEY}`)
        throw new HttpError(401, "missing or wrong API key");
      if (url.pathname === "/v1/mesh/topology") return Response.json(jsonBinding(env.TOPOLOGY, "TOPOLOGY"));
      if (url.pathname === "/v1/mesh/stats") { await init(wasmModule); return Response.json(await stats(env)); }
      if (url.pathname === "/v1/mesh/generate" && req.method === "POST") {
        const body = await req.json().catch(() => { throw new HttpError(400, "body is not JSON"); });
        const name = body.session ?? crypto.randomUUID();
        const stub = env.SESSION.get(env.SESSION.idFromName(name));
        return stub.fetch("https://session/generate", {method: "POST", body: JSON.stringify({...body, session: name})});
      }
      if (url.pathname === "/" || url.pathname === "/health" || url.pathname.startsWith("/v1/"))
        return createHandler(meshBackend(env), {apiKey: env.API_KEY})(req);
      throw new HttpError(404, `no route ${req.method} ${url.pathname}`);
    } catch (e) { return errorResponse(e); }
  },
};
