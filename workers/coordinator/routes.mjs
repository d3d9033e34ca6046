// routes.mjs — replicas, route selection, back-off and failover (docs/architecture.md "Replicas",
// docs/protocol.md "Failover"). A topology with `replicas` R holds R copies of every station
// member and shard (workers/lib/topology.mjs replicaName: "st0", "st0r1", ...), each its own
// Worker script and Durable Object namespace.
//
// A route is an assignment: logical member or shard-hub name -> the replica index serving it
// for one session ({st0: 1, sh0: 0, ...}). A chain runs within one copy, so in a chain every
// station member has the same index.
//
//   Health       back-off per physical name: a name that failed is down for backoffMs · 2^(n-1)
//                (capped at backoffMaxMs) after its n-th failure in a row, and not asked while
//                down; an answer resets it (and is reported to the mesh-wide copy when the name was
//                backing off). Configuration: TIMEOUTS {backoffMs, backoffMaxMs}
//                (FAILOVER_DEFAULTS), never a request's. The route's PrefixDO keeps the
//                mesh-wide copy (sessions report their failures to it); each session starts from
//                a snapshot of it.
//   pickRoute    a new session's assignment from health and load (the busy sessions using each
//                physical name; then the held ones): the least loaded copy, a member that is down
//                taken from another copy. Warmth (a held session that keeps the prompt's prefix)
//                is the prefix index's choice and comes with that session's own assignment.
//   RouteLinks   a session's links through its assignment: get(name) / open(name) by logical
//                name. A request whose link dropped (status 0) is sent again, once, on a fresh
//                link to the same copy (resend) before it counts as a failure. A shard down
//                (backing off) is answered by another copy; when every copy is backing off, the
//                one whose back-off ends first is asked (a trial; without replicas the request is
//                refused at once and the fan-out abstains without waiting for its timeout); a shard
//                that fails is asked again on another copy while the fan-out's time lasts.
//   recover(e)   a station failure during a feed: moves the failed member (a chain: every station
//                member) to a healthy copy (when every other copy is backing off, the one whose
//                back-off ends first) and returns {rebuilt: "restore", member, from, replica}:
//                the coordinator sends the feed again from the positions every station completed,
//                and the new copy restores the session from the snapshot the failed copy
//                persisted (workers/station #restoreFromCopy). When that copy's snapshot cannot
//                be read (the new copy answers 409), or the member is a URL member (no
//                snapshot), or the copy is one the session left earlier (its own snapshot may
//                predate a rewind), it is {rebuilt: "replay"}: the coordinator re-feeds the token
//                history it keeps from position 0 (the Petals way; the stations that did not
//                move rewind and recompute the same KV). Without another copy a
//                lost session (409) or a dropped link re-prefills in place, and anything else is
//                not recovered (the error stands). Telemetry: a "failover" event
//                {member, from, replica, reason, rebuilt} (bindings/events.mjs).
import {LinkError} from "../lib/link.mjs";
import {replicaName, replicaCount, memberOf} from "../lib/topology.mjs";

export const FAILOVER_DEFAULTS = Object.freeze({backoffMs: 2000, backoffMaxMs: 60_000});

/** Back-off per physical name (see the header). */
export class Health {
  constructor({backoffMs = FAILOVER_DEFAULTS.backoffMs, backoffMaxMs = FAILOVER_DEFAULTS.backoffMaxMs} = {}, now = () => Date.now()) {
    Object.assign(this, {backoffMs, backoffMaxMs, now});
    this.state = new Map();  // name -> {n, until, reason}
  }
  /** A failure of name: its back-off grows (n-th failure in a row: base · 2^(n-1), capped). */
  fail(name, reason = "") {
    const s = this.state.get(name) ?? {n: 0, until: 0, reason};
    s.n++;
    s.reason = reason;
    s.until = this.now() + Math.min(this.backoffMaxMs, this.backoffMs * 2 ** (s.n - 1));
    this.state.set(name, s);
    this.onFail?.(name, reason);
    return s;
  }
  /** An answer from name: its back-off ends (onOk: it was backing off, e.g. a trial answered). */
  ok(name) { if (this.state.delete(name)) this.onOk?.(name); }
  down(name) { const s = this.state.get(name); return !!s && s.until > this.now(); }
  /** Plain data (RPC): {name: {n, until, reason}} of the names that are down. */
  snapshot() {
    const out = {};
    for (const [n, s] of this.state) if (s.until > this.now()) out[n] = {...s};
    return out;
  }
  merge(snap = {}) {
    for (const [n, s] of Object.entries(snap)) {
      const have = this.state.get(n);
      if (!have || have.until < s.until) this.state.set(n, {...s});
    }
    return this;
  }
}

/** Logical names a route assigns: station members, then shard hubs (the coordinator's peers and the chain's members). */
export function routeNames(t) {
  const hubs = t.shardGroups?.map((g) => g[0]) ?? t.shards.map((s) => s.name);
  return {stations: t.stations.flatMap((s) => s.members.map((m) => m.name)), hubs, groups: hubGroups(t)};
}

function hubGroups(t) {
  return new Map((t.shardGroups ?? t.shards.map((s) => [s.name])).map((g) => [g[0], g]));
}

// the physical names behind logical name `n` at replica r (a shard hub answers for its followers
// too, a chain's first leader for every station member)
function physicalSet(t, n, r, names) {
  if (names.groups.has(n)) return names.groups.get(n).map((x) => replicaName(x, r));
  if (t.chain) return names.stations.map((x) => replicaName(x, r));
  return [replicaName(n, r)];
}

/**
 * A new session's assignment. load: physical name -> busy sessions using it (then held, as a
 * tie-break: loadHeld). Picks the copy whose members carry the least load, members that are down
 * counted as 1e9; then moves each member that is down there to the least loaded healthy copy.
 */
export function pickRoute(t, health, load = new Map(), loadHeld = new Map()) {
  const R = replicaCount(t), names = routeNames(t);
  const all = [...names.stations, ...names.hubs];
  const cost = (n, r) => physicalSet(t, n, r, names).reduce((a, p) => a + (health.down(p) ? 1e9 : 0) + (load.get(p) ?? 0) * 1000 + (loadHeld.get(p) ?? 0), 0);
  let best = 0, bestCost = Infinity;
  for (let r = 0; r < R; r++) {
    const c = all.reduce((a, n) => a + cost(n, r), 0);
    if (c < bestCost) { best = r; bestCost = c; }
  }
  const assign = Object.fromEntries(all.map((n) => [n, best]));
  if (R > 1) {
    const movable = t.chain ? names.hubs : all;
    for (const n of movable) {
      if (cost(n, best) < 1e9) continue;
      let r1 = best, c1 = Infinity;
      for (let r = 0; r < R; r++) if (cost(n, r) < c1) { r1 = r; c1 = cost(n, r); }
      assign[n] = r1;
    }
    if (t.chain && names.stations.some((n) => cost(n, best) >= 1e9)) {
      let r1 = best, c1 = Infinity;
      for (let r = 0; r < R; r++) if (cost(names.stations[0], r) < c1) { r1 = r; c1 = cost(names.stations[0], r); }
      for (const n of names.stations) assign[n] = r1;
    }
  }
  return assign;
}

/** The physical names an assignment uses (for load accounting). */
export function routePhysical(t, assign) {
  const names = routeNames(t), out = [];
  for (const n of [...names.stations, ...names.hubs]) out.push(...physicalSet(t, n, assign?.[n] ?? 0, names));
  return [...new Set(out)];
}

const failure = (e) => e instanceof LinkError && (e.status === 0 || e.status === -1 || e.status === 409 || e.status >= 500);

/**
 * A session's links through its route. connect(physicalName, sid) -> Link. ev: telemetry.
 */
export class RouteLinks {
  constructor(topology, {sid, connect, assign, health = new Health(), ev = () => {}}) {
    Object.assign(this, {t: topology, sid, connect, health, ev});
    this.R = replicaCount(topology);
    this.names = routeNames(topology);
    this.isHub = new Set(this.names.hubs);
    this.assign = {...Object.fromEntries([...this.names.stations, ...this.names.hubs].map((n) => [n, 0])), ...(assign ?? {})};
    this.links = new Map();  // logical -> {physical, link}
    this.failovers = 0;
    this.skipped = 0;  // shard requests refused at once (backing off, no other copy)
    this.left = [];    // station copies moved away from: [{physical, chain}] (a chain: its first leader)
  }

  physical(name) { return replicaName(name, this.assign[name] ?? 0); }

  /** The open link of logical `name`, or undefined. */
  get(name) { return this.links.get(name)?.proxy; }
  values() { return [...this.links.values()].map((x) => x.link); }

  /** The link of logical `name` (opened on first use) with resend and, for shards, other copies. */
  open(name) {
    let e = this.links.get(name);
    if (!e) {
      const physical = this.physical(name);
      e = {physical, link: this.connect(physical, this.sid)};
      e.proxy = {name, request: (frame, ms) => this.#request(name, frame, ms)};
      this.links.set(name, e);
    }
    return e.proxy;
  }

  #reopen(name) {
    const e = this.links.get(name);
    e?.link.close();
    this.links.delete(name);
    return this.open(name);
  }

  async #request(name, frame, ms) {
    if (this.isHub.has(name)) return this.#shard(name, frame, ms);
    const e = this.links.get(name);
    try {
      const r = await e.link.request(frame, ms);
      this.health.ok(e.physical);
      return r;
    } catch (err) {
      if (!(err instanceof LinkError && err.status === 0)) throw err;
      // a dropped link: the same frame once more on a fresh link to the same copy (a restarted
      // station restores the session from its snapshot)
      this.ev({event: "failover", member: name, from: e.physical, replica: e.physical, reason: err.message, rebuilt: "resend"});
      if (this.links.get(name) === e) this.#reopen(name);  // frames pending together are resent on one fresh link
      const again = this.links.get(name);
      const r = await again.link.request(frame, ms);
      this.health.ok(again.physical);
      return r;
    }
  }

  // a shard hub: stateless, so any copy answers the same frame
  async #shard(name, frame, ms) {
    const deadline = Date.now() + ms * Math.max(1, this.R);
    let last = null, resent = false, trial = false;
    for (let tries = 0; tries < this.R + 2; tries++) {
      const phys = this.physical(name);
      if (this.health.down(phys) && !trial) {
        const alt = this.#healthyCopy(name);
        if (alt !== null) {
          this.#move(name, alt, `${phys} is backing off`, "none (stateless)");
          continue;
        }
        if (this.R === 1 || last) {
          // no copy to ask instead: refused at once (the fan-out abstains without its timeout)
          this.skipped++;
          throw last ?? new LinkError(phys, -2, `backing off after a failure (${this.health.state.get(phys)?.reason ?? ""}): not asked`);
        }
        // every copy is backing off: the one whose back-off ends first is asked (a trial), as a
        // station failover does, so back-off only ever skips a copy that has an alternative
        const soonest = this.#soonestCopy(name, true);
        if (soonest !== this.assign[name]) this.#move(name, soonest, `every copy is backing off; ${replicaName(name, soonest)}'s ends first`, "none (stateless)");
        trial = true;
        continue;
      }
      const left = deadline - Date.now();
      if (left <= 0) break;
      this.open(name);
      try {
        const r = await this.links.get(name).link.request(frame, Math.min(ms, left));
        this.health.ok(phys);
        return r;
      } catch (err) {
        last = err;
        if (!failure(err)) throw err;
        this.#reopen(name);
        if (err.status === 0 && !resent) { resent = true; continue; }  // a dropped link: once more on a fresh one
        this.health.fail(phys, err.message);
        if (trial) break;  // the trial failed: its back-off grew; no further copy to ask
      }
    }
    throw last ?? new LinkError(this.physical(name), -1, "no copy answered");
  }

  #healthyCopy(name, exclude = this.assign[name]) {
    const names = this.names;
    for (let k = 1; k <= this.R; k++) {
      const r = (exclude + k) % this.R;
      if (r === exclude && k < this.R) continue;
      if (physicalSet(this.t, name, r, names).every((p) => !this.health.down(p))) return r === exclude ? null : r;
    }
    return null;
  }

  // every other copy is backing off too: the one whose back-off ends first (a station failure
  // would otherwise fail the request)
  #soonestCopy(name, includeOwn = false) {
    let best = null, until = Infinity;
    for (let r = 0; r < this.R; r++) {
      if (r === this.assign[name] && !includeOwn) continue;
      const u = Math.max(0, ...physicalSet(this.t, name, r, this.names).map((p) => this.health.state.get(p)?.until ?? 0));
      if (u < until) { best = r; until = u; }
    }
    return best;
  }

  // move logical names to copy r; the old link closes. The failed copy is not asked again during
  // the session; a station copy left is in this.left, and the coordinator ends the session there
  // once the session's feed no longer needs its snapshot (mesh.mjs endLeft: at the generation's
  // end or when its back-off ends, again while it does not answer), so it does not hold the KV
  // until its TTL. A copy moved back to leaves this.left (it holds the session again).
  #moved(name) { return this.t.chain && !this.isHub.has(name) ? this.names.stations : [name]; }

  #move(name, r, reason, rebuilt) {
    const moved = this.#moved(name);
    const from = this.physical(name);
    if (!this.isHub.has(name) && !this.left.some((x) => x.physical === from)) this.left.push({physical: from, chain: !!this.t.chain});
    for (const n of moved) {
      this.links.get(n)?.link.close();
      this.links.delete(n);
      this.assign[n] = r;
    }
    this.left = this.left.filter((x) => x.physical !== this.physical(name));
    this.failovers++;
    this.ev({event: "failover", member: name, from, replica: this.physical(name), reason, rebuilt});
  }

  /**
   * A station failure during a feed: {rebuilt: "replay"} when the coordinator should re-feed its
   * token history from position 0 (moved to another copy, or in place), or null (not recovered).
   */
  recover(e) {
    if (!failure(e)) return null;
    const name = this.#culprit(e);
    if (name === null) return null;
    const phys = this.physical(name);
    const failedPhys = this.t.chain ? this.#namedIn(e) ?? phys : phys;
    if (e.status !== 409) this.health.fail(failedPhys, e.message);
    const alt = this.R > 1 ? this.#healthyCopy(name) ?? this.#soonestCopy(name) : null;
    if (alt !== null) {
      // a Worker station restores from the snapshot the failed copy persisted; a URL member
      // (a native fat station) keeps none, and a copy moved back to holds a snapshot of its own
      // that may predate a rewind made since (rejected drafts): the history is replayed there
      const from = this.physical(name);
      const back = this.left.some((x) => x.physical === replicaName(this.#moved(name)[0], alt));
      const rebuilt = back || this.#moved(name).some((n) => memberOf(this.t, n)?.url !== undefined || memberOf(this.t, n)?.fat) ? "replay" : "restore";
      this.#move(name, alt, e.message, rebuilt);
      return {rebuilt, member: name, from, replica: this.physical(name)};
    }
    if (e.status === 409 || e.status === 0) return {rebuilt: "replay", inPlace: true};
    return null;
  }

  // the logical station member whose link failed
  #culprit(e) {
    for (const n of this.names.stations) if (this.links.get(n)?.physical === e.link || this.physical(n) === e.link) return this.t.chain ? this.names.stations[0] : n;
    return null;
  }

  // a chain's error names the member that failed ("st0: st1: no answer ..."): the last one named
  #namedIn(e) {
    let best = null, at = -1;
    for (const n of this.names.stations) {
      const p = this.physical(n), i = e.message.lastIndexOf(`${p}:`);
      if (i > at) { at = i; best = p; }
    }
    return best;
  }

  close() { for (const e of this.links.values()) e.link.close(); this.links.clear(); }
}
