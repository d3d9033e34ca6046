// workers/coordinator — the mesh's entry Worker and its per-session Durable Object
// (DESIGN §5, §6). The entry Worker is the only publicly routable script; each generation
// runs in a SessionDO, which keeps WebSocket links to the stations and shards for the
// session's lifetime (one subrequest per link instead of one per hop: DESIGN §8).
//
// Bindings: TOPOLOGY (JSON, lib/topology.mjs), MODELS (R2), SESSION (SessionDO), one service
// binding per station member / shard named M_<name>, LINK_MODE? ("ws" default | "http"),
// TIMEOUTS? ({shardMs, stationMs}), API_KEY? (required as Bearer token when set).
//
// HTTP:  POST /v1/mesh/generate {prompt | ids | messages, options, session?}
//          -> NDJSON events (telemetry, token, summary | error), see mesh.mjs
//        GET /v1/mesh/topology, GET /v1/mesh/stats (every isolate's memory)
// JS (for the OpenAI-compatible layer): meshEvents(env, body) is an async iterator of the
// same events.
import wasmModule from "../../build/wasm/knotwork.wasm";
import {init, memoryStats} from "../../bindings/knotwork.mjs";
import {r2Source} from "../lib/sources.mjs";
import {openTextModel} from "../lib/text.mjs";
import {Link, Counter} from "../lib/link.mjs";
import {jsonBinding, HttpError, errorResponse} from "../lib/common.mjs";
import {MeshCoordinator} from "./mesh.mjs";

export {MeshCoordinator};

let text = null;  // {key, promise}: the tokenizer + config, once per isolate and model
function textModel(env) {
  const t = jsonBinding(env.TOPOLOGY, "TOPOLOGY");
  if (text?.key === t.knot) return text.promise;
  const old = text;
  text = {key: t.knot, promise: (async () => {
    if (old) (await old.promise.catch(() => null))?.close();
    await init(wasmModule);
    return openTextModel(await r2Source(env.MODELS, t.knot));
  })()};
  text.promise.catch(() => { if (text?.key === t.knot) text = null; });
  return text.promise;
}

/** Prompt ids from a request body: ids, or messages through the chat template, or prompt text. */
export function promptIds(model, body) {
  if (Array.isArray(body.ids)) return body.ids;
  if (Array.isArray(body.messages))
    return model.tokenize(model.applyChatTemplate(body.messages), {addBos: true, parseSpecial: true});
  if (typeof body.prompt === "string") return model.tokenize(body.prompt);
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
        const ids = promptIds(model, body);
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
      if (env.API_KEY && req.headers.get("authorization") !== `Bearer ${env.API_KEY}`) throw new HttpError(401, "missing or wrong API key");
      if (url.pathname === "/v1/mesh/topology") return Response.json(jsonBinding(env.TOPOLOGY, "TOPOLOGY"));
      if (url.pathname === "/v1/mesh/stats") { await init(wasmModule); return Response.json(await stats(env)); }
      if (url.pathname === "/v1/mesh/generate" && req.method === "POST") {
        const body = await req.json().catch(() => { throw new HttpError(400, "body is not JSON"); });
        const name = body.session ?? crypto.randomUUID();
        const stub = env.SESSION.get(env.SESSION.idFromName(name));
        return stub.fetch("https://session/generate", {method: "POST", body: JSON.stringify({...body, session: name})});
      }
      throw new HttpError(404, `no route ${req.method} ${url.pathname}`);
    } catch (e) { return errorResponse(e); }
  },
};
