// session.mjs — the session Durable Object (docs/architecture.md, docs/protocol.md): each
// generation runs in the SessionDO its session id names, which keeps WebSocket links to the
// stations and shards for the session's lifetime (one subrequest per link instead of one
// per hop: docs/limits.md).
//
// RPC: generate(body, send) — body {ids | messages | prompt (tokenized here only when no
//   ids: prompt.mjs), options (Model.generate's), session, timeouts?, linkMode?}; send(e)
//   receives the events of MeshCoordinator.generate (mesh.mjs; the schema of
//   bindings/events.mjs) as they are, the summary with coordinatorMemory added; a failure
//   is a last {type: "error", error, status} event.
// Callers: sessionStream (NDJSON for POST /v1/mesh/generate) and sessionEvents (the OpenAI
// backend, backend.mjs) below.
// Events go through a callback, not a ReadableStream returned by the RPC method: under
// workerd (miniflare 4.20260426) the caller cancelling an RPC stream does not reach the
// writer here (its writes wait for ever), so a client that left would keep the generation
// and the stations' KV alive; a refused callback ends it at once.
import {DurableObject} from "cloudflare:workers";
import {memoryStats} from "../../bindings/knotwork.mjs";
import {Link, Counter} from "../lib/link.mjs";
import {jsonBinding} from "../lib/config.mjs";
import {MeshCoordinator} from "./mesh.mjs";
import {textModel, promptIds} from "./prompt.mjs";

export class SessionDO extends DurableObject {
  /**
   * RPC: one generation. send(event) (the caller's function) gets each event in order and
   * is awaited, so a caller that refuses one (its client left) ends the generation, which
   * frees the session at every station. Resolves when the generation ended; a failure is a
   * last {type: "error", error, status} event.
   * @param {object} body  @param {(e: object) => Promise<void>} send
   */
  async generate(body, send) {
    const env = /** @type {import("./index.mjs").Env} */ (this.env);
    try {
      const topology = jsonBinding(env.TOPOLOGY, "TOPOLOGY");
      const counter = new Counter();
      const timeouts = {...jsonBinding(env.TIMEOUTS ?? "{}", "TIMEOUTS"), ...(body.timeouts ?? {})};
      const mode = body.linkMode ?? env.LINK_MODE ?? "ws";
      const model = await textModel(env);
      const coord = new MeshCoordinator({topology, text: model, counter, timeouts,
        connect: (name, sid) => new Link(name, env[`M_${name}`], {mode, counter, sid})});
      const ids = promptIds(model, body, env.CHAT_TEMPLATE ?? "");
      for await (const e of coord.generate(ids, {...(body.options ?? {}), sid: body.session})) {
        if (e.type === "summary") e.coordinatorMemory = await memoryStats();
        await send(e);
      }
    } catch (e) {
      await Promise.resolve(send({type: "error", error: e.message, status: e.status ?? 500})).catch(() => {});
    }
  }
}

// The SessionDO of body.session (a new session when absent) and the body it is sent.
function session(env, body) {
  const name = body.session ?? crypto.randomUUID();
  return {stub: env.SESSION.get(env.SESSION.idFromName(name)), body: {...body, session: name}};
}

/** The events of one generation as NDJSON, one event a line (POST /v1/mesh/generate). */
export function sessionStream(env, body) {
  const s = session(env, body);
  const {readable, writable} = new TransformStream();
  const writer = writable.getWriter(), enc = new TextEncoder();
  s.stub.generate(s.body, (e) => writer.write(enc.encode(JSON.stringify(e) + "\n")))
    .catch(() => {}).finally(() => writer.close().catch(() => {}));
  return readable;
}

/**
 * The events of one generation (bindings/events.mjs), one at a time: the session waits for
 * each to be taken, and a consumer that stops early refuses the next, which ends it.
 */
export async function* sessionEvents(env, body) {
  const s = session(env, body);
  const queue = [];  // {event, taken, refused}
  let ended = false, wake = () => {}, left = false;
  const send = (event) => new Promise((taken, refused) => {
    if (left) return refused(new Error("the consumer left"));
    queue.push({event, taken, refused});
    wake();
  });
  const run = s.stub.generate(s.body, send).finally(() => { ended = true; wake(); });
  run.catch(() => {});  // awaited below unless the consumer stops early
  try {
    for (;;) {
      while (!queue.length && !ended) await new Promise((r) => { wake = r; });
      if (!queue.length) break;
      const {event, taken} = queue.shift();
      taken();
      yield event;
    }
    await run;
  } finally {
    left = true;
    for (const q of queue.splice(0)) q.refused(new Error("the consumer left"));
  }
}
