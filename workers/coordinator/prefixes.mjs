// prefixes.mjs — the held prefixes of one route (llama-server's cache_prompt across
// requests): PrefixDO, one Durable Object per model and route (`routeKey`), indexes the
// station sessions that outlived their request, by the token ids their KV holds.
//
// RPC:
//   acquire(ids, nCtx) -> {sid, cached, route, health}   a session for a request: the free held session of the
//       same context size that keeps the most positions for `ids` (cached: bindings/prefix.mjs
//       reusable(), the rule `serve` follows too: the common prefix, at most ids.length - 1,
//       and none below `similarity` of what it holds; its stations rewind to it), or a new
//       session id (cached 0). A session is taken by one request at a time (busy until
//       released). route: the replica of each station member and shard hub (routes.mjs): a held
//       session's own (warmth: its copies hold the prefix) unless one of them is backing off,
//       a new session's from health and load (routes.mjs pickRoute: the busy sessions on each
//       copy, then the held ones); health: the names backing off (routes.mjs Health snapshot).
//   release(sid, ids | null, route?)    the request ended: its stations hold `ids` (the session
//       is kept, free, on `route`: the copies it ended on after any failover), or null (the
//       session ended; forgotten).
//   report(name, reason)                a session saw copy `name` fail: it backs off mesh-wide.
//   recovered(name)                     a copy that was backing off answered: its back-off ends mesh-wide.
// Eviction: the held sessions of a route together keep at most `kvTokens` KV positions
// allocated at every station (each counts its nCtx: a station allocates the whole context when
// the session opens; busy ones count too); past it the least recently used free sessions are
// ended (their `end` frames leave without waiting, so a station may hold the evicted session a
// moment longer). kvTokens defaults to the topology's `context` (the planner's largest context
// whose KV fits every station) when it has one, else 8192. A free session
// unused for `ttlMs` is ended by an alarm (below the stations' own idle TTL, so the index does
// not point at sessions a station already dropped; a station that did answers 409 and the
// coordinator re-prefills: slower, never wrong). A busy session is never ended here (a long
// generation runs on); one not released within BUSY_LEASE_MS (its session DO vanished) is
// forgotten, and a late release of a forgotten session ends it. Ending a session is SessionDO.end(sid):
// `end` frames to its stations. Configuration: PREFIX_CACHE {kvTokens, ttlMs, similarity}
// (deploy/description.mjs option prefixCache); kvTokens 0 turns reuse off (every session is
// ended after its request).
import {DurableObject} from "cloudflare:workers";
import {jsonBinding} from "../lib/config.mjs";
import {reusable, SIMILARITY} from "../../bindings/prefix.mjs";
import {Health, pickRoute, routePhysical} from "./routes.mjs";

export const PREFIX_DEFAULTS = Object.freeze({kvTokens: 8192, ttlMs: 5 * 60_000, similarity: SIMILARITY});

/** The index's name for a topology: the model and the route (one route per topology today). */
export const BUSY_LEASE_MS = 60 * 60_000;

export const routeKey = (topology) => `${topology.knot}|route0`;


export class PrefixDO extends DurableObject {
  held = new Map();  // sid -> {ids, nCtx, busy, used, route}
  #health = null;

  get health() {
    return (this.#health ??= new Health(jsonBinding(this.env.TIMEOUTS ?? "{}", "TIMEOUTS")));
  }

  // kvTokens by default: the topology's context when the planner set one (the largest whose KV
  // fits every station: one held session), else PREFIX_DEFAULTS.kvTokens
  get #cfg() {
    const t = jsonBinding(this.env.TOPOLOGY, "TOPOLOGY");
    return {...PREFIX_DEFAULTS, ...(t.context > 0 ? {kvTokens: t.context} : {}), ...jsonBinding(this.env.PREFIX_CACHE ?? "{}", "PREFIX_CACHE")};
  }

  /** @param {number[]} ids @param {number} nCtx */
  async acquire(ids, nCtx) {
    const cfg = this.#cfg, now = Date.now();
    await this.#expire(now);
    const t = jsonBinding(this.env.TOPOLOGY, "TOPOLOGY"), health = this.health;
    let best = null, bestN = 0;
    for (const [sid, h] of this.held) {
      if (h.busy || h.nCtx !== nCtx) continue;
      if (routePhysical(t, h.route).some((p) => health.down(p))) continue;  // its copies are not all up
      const n = reusable(h.ids, ids, cfg.similarity);
      if (n > bestN) { best = sid; bestN = n; }
    }
    const sid = best ?? `p-${crypto.randomUUID()}`;
    let route;
    if (best) route = this.held.get(best).route;
    else {
      const load = new Map(), loadHeld = new Map();
      for (const h of this.held.values())
        for (const p of routePhysical(t, h.route)) (h.busy ? load : loadHeld).set(p, ((h.busy ? load : loadHeld).get(p) ?? 0) + 1);
      route = pickRoute(t, health, load, loadHeld);
    }
    this.held.set(sid, {ids: best ? this.held.get(best).ids.slice(0, bestN) : [], nCtx, busy: true, used: now, route});
    this.#budget();
    return {sid, cached: bestN, route, health: health.snapshot()};
  }

  /** @param {string} name @param {string} reason */
  report(name, reason) { this.health.fail(name, reason); }

  /** A name that was backing off answered (a trial): the mesh-wide back-off ends. @param {string} name */
  recovered(name) { this.health.ok(name); }

  /** @param {string} sid @param {number[] | null} ids @param {object} [route] */
  async release(sid, ids, route) {
    const h = this.held.get(sid);
    route ??= h?.route;
    if (!ids || this.#cfg.kvTokens <= 0) {
      this.held.delete(sid);
      if (ids) this.#end([[sid, route]]);
      return;
    }
    if (!h) { this.#end([[sid, route]]); return; }  // forgotten meanwhile (expired while busy)
    Object.assign(h, {ids: Array.from(ids), busy: false, used: Date.now(), route});
    this.#budget();
    await this.#arm();
  }

  /** RPC (tests, /v1/mesh/stats): the held sessions, most recently used first. */
  list() {
    return [...this.held].map(([sid, h]) => ({sid, tokens: h.ids.length, nCtx: h.nCtx, busy: h.busy, used: h.used, route: h.route}))
      .sort((a, b) => b.used - a.used);
  }

  async alarm() {
    await this.#expire(Date.now());
    await this.#arm();
  }

  // LRU: end free sessions, least recently used first, while the route holds more than kvTokens.
  #budget() {
    const {kvTokens} = this.#cfg;
    let total = 0;
    for (const h of this.held.values()) total += h.nCtx;
    const free = [...this.held].filter(([, h]) => !h.busy).sort((a, b) => a[1].used - b[1].used);
    const out = [];
    while (total > kvTokens && free.length) {
      const [sid, h] = free.shift();
      this.held.delete(sid);
      total -= h.nCtx;
      out.push([sid, h.route]);
    }
    this.#end(out);
  }

  async #expire(now) {
    const {ttlMs} = this.#cfg;
    const out = [];
    for (const [sid, h] of this.held) {
      if (h.busy) { if (now - h.used > BUSY_LEASE_MS) this.held.delete(sid); continue; }
      if (now - h.used > ttlMs) { this.held.delete(sid); out.push([sid, h.route]); }
    }
    this.#end(out);
  }

  async #arm() {
    const free = [...this.held.values()];
    if (!free.length) return;
    const next = Math.min(...free.map((h) => h.used)) + this.#cfg.ttlMs + 1;
    await this.ctx.storage.setAlarm(next);
  }

  // Ending is the session DO's (it holds the links); not awaited by the caller's request.
  #end(sessions) {
    for (const [sid, route] of sessions) {
      const ns = this.env.SESSION;
      const p = ns.get(ns.idFromName(sid)).end(sid, route).catch(() => {});
      this.ctx.waitUntil?.(p);
    }
  }
}
