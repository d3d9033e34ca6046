// session.mjs — the session Durable Object (docs/architecture.md, docs/protocol.md): each
// generation runs in the SessionDO its session id names, which keeps WebSocket links to the
// stations and shards for the session's lifetime (one subrequest per link instead of one
// per hop: docs/limits.md).
//
// A session outlives its request: the entry asks the route's PrefixDO (prefixes.mjs) for a
// session whose stations already hold a prefix of the prompt (cached tokens), and the
// generation feeds only the rest; when it ends, the stations keep the session's KV and the
// index holds its ids (prompt + generated, all but the last token, which was never fed). A
// generation that fails or whose consumer left ends the session at every station instead.
//
// RPC: generate(body, send) — body {ids (checked: request.mjs), options (checked), sid,
//   cached, route, health (the prefix index's: routes.mjs)}; the timeouts and the link mode are configuration (TIMEOUTS, LINK_MODE), never
//   a request's. send(e) receives the events of MeshCoordinator.generate (mesh.mjs; the
//   schema of bindings/events.mjs) as they are, the summary with coordinatorMemory added;
//   a failure is a last {type: "error", error, status} event.
//   end(sid) — the session's stations free its KV (the index evicted it).
// A failover's copies left behind are told the session ended (mesh.mjs endLeft) when the
// generation ends; those that do not answer are asked again by this object's alarm.
// Callers: sessionStream (NDJSON for POST /v1/mesh/generate) and sessionEvents (the OpenAI
// backend, backend.mjs) below.
// Events go through a callback, not a ReadableStream returned by the RPC method: under
// workerd (miniflare 4.20260426) the caller cancelling an RPC stream does not reach the
// writer here (its writes wait for ever), so a client that left would keep the generation
// and the stations' KV alive; a refused callback ends it at once.
import {DurableObject} from "cloudflare:workers";
import {memoryStats} from "../../bindings/knotwork.mjs";
import {defaultContext} from "../../bindings/options.mjs";
import {Link, Counter, peerFetcher} from "../lib/link.mjs";
import {memberOf} from "../lib/topology.mjs";
import {jsonBinding} from "../lib/config.mjs";
import {MeshCoordinator} from "./mesh.mjs";
import {Health, FAILOVER_DEFAULTS} from "./routes.mjs";

const LEAVE_TRIES = 8;
import {replicaCount} from "../lib/topology.mjs";
import {textModel} from "./prompt.mjs";
import {draftModel} from "./draft.mjs";
import {routeKey} from "./prefixes.mjs";

// The generation loop over the deployment's topology, timeouts and link mode (text: the
// tokenizer; none is needed to end a session).
// health: the route's back-off (routes.mjs), a failure reported to the prefix index
function coordinator(env, text = null, counter = new Counter(), snapshot = {}) {
  const topology = jsonBinding(env.TOPOLOGY, "TOPOLOGY");
  const timeouts = jsonBinding(env.TIMEOUTS ?? "{}", "TIMEOUTS");
  const mode = env.LINK_MODE ?? "ws";
  // where there is no other copy (one replica) a session asks every member once more: one that
  // recovered is used at once; with replicas the route's back-off holds for the session too
  const health = new Health(timeouts).merge(replicaCount(topology) > 1 ? snapshot : {});
  health.onFail = (name, reason) => { index(env).report(name, reason).catch(() => {}); };
  health.onOk = (name) => { index(env).recovered(name).catch(() => {}); };
  return new MeshCoordinator({topology, text, counter, timeouts, health,
    connect: (name, sid) => new Link(name, peerFetcher(env, "M", name, memberOf(topology, name)), {mode, counter, sid})});
}

const index = (env) => env.PREFIXES.get(env.PREFIXES.idFromName(routeKey(jsonBinding(env.TOPOLOGY, "TOPOLOGY"))));

export class SessionDO extends DurableObject {
  /**
   * RPC: one generation. send(event) (the caller's function) gets each event in order and
   * is awaited, so a caller that refuses one (its client left) ends the generation, which
   * frees the session at every station. Resolves when the generation ended; a failure is a
   * last {type: "error", error, status} event.
   * @param {{ids: number[], options: object, sid: string, cached: number}} body  @param {(e: object) => Promise<void>} send
   */
  async generate(body, send) {
    const env = /** @type {import("./index.mjs").Env} */ (this.env);
    let held = null, route = body.route;
    try {
      const text = await textModel(env);
      // the deployment's draft model (DRAFT), loaded once per isolate; a request may turn it off
      const draft = body.options.draft === false ? null : await draftModel(env, text);
      const coord = coordinator(env, text, undefined, body.health);
      try {
        for await (const e of coord.generate(body.ids, {...body.options, sid: body.sid, cached: body.cached ?? 0, keep: true, route: body.route,
                                                        ...(draft ? {draftModel: draft} : {})})) {
          if (e.type === "summary") e.coordinatorMemory = {...await memoryStats(), ...(draft ? {draftWeightBytes: draft.weightBytes} : {})};
          await send(e);
        }
      } finally {
        held = coord.held; route = coord.route ?? route;
        if (coord.left?.length) await this.#leave(body.sid, coord.left);
      }
    } catch (e) {
      await Promise.resolve(send({type: "error", error: e.message, status: e.status ?? 500})).catch(() => {});
    } finally {
      await index(env).release(body.sid, held, route).catch(() => {});
    }
  }

  // Station copies a failover left that were not told the session ended (mesh.mjs endLeft: they
  // were backing off, or did not answer): kept in storage, each asked by the alarm once its
  // back-off has ended (notBefore), then again after TIMEOUTS.backoffMs, doubling per try up to
  // backoffMaxMs, at most LEAVE_TRIES times (a copy that stays down frees the KV at its TTL).
  async #leave(sid, left) {
    const list = (await this.ctx.storage.get("left")) ?? [];
    for (const x of left)
      if (!list.some((y) => y.sid === sid && y.physical === x.physical))
        list.push({sid, physical: x.physical, chain: x.chain, tries: 0, at: Math.max(Date.now(), x.notBefore ?? 0)});
    await this.ctx.storage.put("left", list);
    await this.#armLeave(list);
  }

  async #armLeave(list) {
    if (list.length) await this.ctx.storage.setAlarm(Math.min(...list.map((x) => x.at)));
  }

  /** The alarm: end the session at the copies a failover left whose turn it is (#leave). */
  async alarm() {
    const list = (await this.ctx.storage.get("left")) ?? [];
    const {backoffMs, backoffMaxMs} = {...FAILOVER_DEFAULTS, ...jsonBinding(this.env.TIMEOUTS ?? "{}", "TIMEOUTS")};
    const coord = coordinator(this.env), keep = [], now = Date.now();
    for (const x of list) {
      if (x.at > now) { keep.push(x); continue; }
      const failed = await coord.endLeft(x.sid, [{physical: x.physical, chain: x.chain}]);
      if (failed.length && x.tries + 1 < LEAVE_TRIES)
        keep.push({...x, tries: x.tries + 1, at: Date.now() + Math.min(backoffMaxMs, backoffMs * 2 ** x.tries)});
    }
    await this.ctx.storage.put("left", keep);
    await this.#armLeave(keep);
  }

  /** RPC (tests): the copies still to be told the session ended ([{sid, physical, chain, tries}]). */
  async leftCopies() { return (await this.ctx.storage.get("left")) ?? []; }

  /** RPC (the prefix index): end session `sid` at every station (route: its copies). */
  async end(sid, route) {
    await coordinator(this.env).end(sid, route);
  }
}

// A session for checked {ids, options}: the route's index picks a held one (cached > 0) or a new one.
async function session(env, body) {
  const nCtx = body.options.nCtx ?? defaultContext((await textModel(env)).info.config);
  const {sid, cached, route, health} = await index(env).acquire(body.ids, nCtx);
  return {stub: env.SESSION.get(env.SESSION.idFromName(sid)), body: {ids: body.ids, options: {...body.options, nCtx}, sid, cached, route, health}};
}

/** The events of one generation as NDJSON, one event a line (POST /v1/mesh/generate). */
export async function sessionStream(env, body) {
  const s = await session(env, body);
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
  const s = await session(env, body);
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
