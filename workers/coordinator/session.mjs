// session.mjs — the session Durable Object (DESIGN §5, §6): each generation runs in the
// SessionDO its session id names, which keeps WebSocket links to the stations and shards
// for the session's lifetime (one subrequest per link instead of one per hop: DESIGN §8).
//
// fetch: POST {ids | messages | prompt (tokenized here only when no ids: prompt.mjs),
//   options (Model.generate's), session, timeouts?, linkMode?} -> NDJSON (lib/ndjson.mjs):
//   the events of MeshCoordinator.generate (mesh.mjs; the schema of bindings/events.mjs) as
//   they are, the summary with coordinatorMemory added; a failure is a last
//   {type: "error", error, status} line.
// Callers: sessionStream / sessionEvents below (the entry router, backend.mjs).
// The stream stays a fetch, not an RPC method returning a ReadableStream: under workerd
// (miniflare 4.20260426) the caller cancelling an RPC stream does not reach the writer
// here (its writes wait for ever), so a client that leaves would keep the generation and
// the stations' KV alive; a fetch body's cancellation does reach it.
import {DurableObject} from "cloudflare:workers";
import {memoryStats} from "../../bindings/knotwork.mjs";
import {Link, Counter} from "../lib/link.mjs";
import {jsonBinding} from "../lib/config.mjs";
import {HttpError, errorResponse} from "../lib/errors.mjs";
import {ndjsonLine, ndjsonEvents} from "../lib/ndjson.mjs";
import {MeshCoordinator} from "./mesh.mjs";
import {textModel, promptIds} from "./prompt.mjs";

export class SessionDO extends DurableObject {
  /** @param {Request} req */
  async fetch(req) {
    let body;
    try { body = await req.json(); } catch { return errorResponse(new HttpError(400, "body is not JSON")); }
    return new Response(this.#generate(body), {headers: {"content-type": "application/x-ndjson"}});
  }

  /** @returns {ReadableStream<Uint8Array>} the NDJSON events of one generation */
  #generate(body) {
    const env = /** @type {import("./index.mjs").Env} */ (this.env);
    const topology = jsonBinding(env.TOPOLOGY, "TOPOLOGY");
    const counter = new Counter();
    const timeouts = {...jsonBinding(env.TIMEOUTS ?? "{}", "TIMEOUTS"), ...(body.timeouts ?? {})};
    const mode = body.linkMode ?? env.LINK_MODE ?? "ws";
    const {readable, writable} = new TransformStream();
    const writer = writable.getWriter();
    const run = (async () => {
      try {
        const model = await textModel(env);
        const coord = new MeshCoordinator({topology, text: model, counter, timeouts,
          connect: (name, sid) => new Link(name, env[`M_${name}`], {mode, counter, sid})});
        const ids = promptIds(model, body, env.CHAT_TEMPLATE ?? "");
        for await (const e of coord.generate(ids, {...(body.options ?? {}), sid: body.session})) {
          if (e.type === "summary") e.coordinatorMemory = await memoryStats();
          await writer.write(ndjsonLine(e));
        }
      } catch (e) {
        await writer.write(ndjsonLine({type: "error", error: e.message, status: e.status ?? 500})).catch(() => {});
      } finally { await writer.close().catch(() => {}); }
    })();
    this.ctx.waitUntil?.(run);
    return readable;
  }
}

/** The NDJSON response of one generation in the SessionDO named body.session (a new session when absent). */
export function sessionStream(env, body) {
  const name = body.session ?? crypto.randomUUID();
  return env.SESSION.get(env.SESSION.idFromName(name)).fetch("https://session/generate",
    {method: "POST", body: JSON.stringify({...body, session: name})});
}

/** The events of one generation, parsed (bindings/events.mjs). */
export async function* sessionEvents(env, body) {
  const res = await sessionStream(env, body);
  if (!res.ok) throw new HttpError(res.status, await res.text());
  yield* ndjsonEvents(res.body);
}
