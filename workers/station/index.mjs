// workers/station — a layer station (docs/architecture.md, docs/memory.md): a Worker plus a Durable Object
// holding the sessions of this station. One wasm instance per isolate (module scope) holds
// the station's tensors (boot cache keyed knot|role|range|slice); each session's KV cache
// for this layer range / head slice lives in the DO that session id routes to.
//
// Requests: a frame (lib/frame.mjs) by POST, or the same frames as WebSocket messages
// (GET with Upgrade: websocket; the coordinator's session DO keeps the link open). Frames:
//   prefill|decode, phase all:  x [rows, n_embd] at pos -> x after layers [l0, l1)
//                               (flag normLast: output_norm of the last row, [n_embd];
//                               flag normAll: of every row, a speculative verify pass)
//   phase attn / ffn (a split layer): the partial residual of this slice for frame.layer
//   phase norm:                 output_norm of the last row (normAll: of every row)
//   end:                        the session's KV cache is freed
//   flag chain (phase all): run this station (a leader sums its members' partials per layer),
//                               then forward to the next station and answer its answer; an
//                               end frame is forwarded the same way
// Sessions (docs/protocol.md, "Session lifecycle"): a prefill / decode frame at position 0 that
// starts the station's first layer opens one; at a position below the positions held it
// rewinds it (the KV truncated to pos, then the frame's rows appended). Every completed
// position's KV rows go to the DO's SQLite storage before the frame is answered
// (lib/snapshot.mjs), so a restarted object restores the session on its next frame. A session
// neither held nor restorable at pos > 0 is a 409 naming the session and positions: the
// coordinator re-prefills. A session moved here from another copy of this member (failover)
// restores from that copy's snapshot, read through its StationDO namespace (#restoreFromCopy).
// Down the chain, a lost session or a dropped link answers 409 too, a
// timeout 504. An alarm frees a session (KV and snapshot) idle for STATION.ttlMs, with or
// without frames.
// A session's first frame (prefill at position 0) checks the R2 object's etag: a model
// replaced under the same key is booted again (same shape) or refused naming the key and
// both etags (another shape; lib/boot.mjs).
/**
 * @typedef {object} StationConfig  the STATION binding (JSON)
 * @property {string} name
 * @property {string} knot
 * @property {[number, number]} layers  [l0, l1)
 * @property {[number, number]} [heads]  a head slice [h0, h1)
 * @property {[number, number]} [cols]  an FFN column slice [c0, c1)
 * @property {"entry"|"mid"|"exit"} role
 * @property {boolean} resident  false: fluid (load, run, evict per phase)
 * @property {number} [ttlMs]  an idle session's lifetime (default 10 min)
 * @property {string} [next]  in a chained topology (lib/topology.mjs links()): the next station's leader
 * @property {string[]} [followers]  (a split station's leader) the other members of this station
 * @property {number} [downstream]  the number of stations after this one
 * @property {string[]} [copies]  (replicas) the other copies of this member, bound as COPY_<name>
 * @property {number} [linkTimeoutMs]  a link's timeout per station still to run, so the
 *   innermost hung station is the one named
 *
 * @typedef {object} Env
 * @property {string|StationConfig} STATION
 * @property {R2Bucket} MODELS  the .knot files
 * @property {DurableObjectNamespace<StationDO>} STATION_DO  this script's DO
 * @property {DurableObjectNamespace} [WARDEN]  LayerWardenDO namespace of the warden script
 * @property {string} [TEST_HOOKS]  fault injection, tests only
 * L_<name>: a service binding (Fetcher) per chain link
 */
import {DurableObject} from "cloudflare:workers";
import {memoryStats} from "../../bindings/knotwork.mjs";
import {decodeFrame, encodeFrame, FLAG, KIND} from "../lib/frame.mjs";
import {Link, LinkError, Counter} from "../lib/link.mjs";
import {loadThroughWarden, tensorNamer} from "../lib/r2.mjs";
import {jsonBinding} from "../lib/config.mjs";
import {HttpError, errorResponse} from "../lib/errors.mjs";
import {applyFault, debugRoute, faults} from "../lib/faults.mjs";
import {modelBoot, shapeOf} from "../lib/boot.mjs";
import {serveFrames} from "../lib/socket.mjs";
import {addPartials} from "../lib/partials.mjs";
import {SnapshotStore, BLOCK_BYTES, PAGE_BYTES} from "../lib/snapshot.mjs";

// How long a read of another copy's snapshot may take per answer (#restoreFromCopy).
const COPY_READ_MS = 5000;

// ---- module scope: one boot per isolate and config ---------------------------------------
const boot = modelBoot();
const stats = {r2Reads: 0, r2Bytes: 0, wardenReads: 0, wardenRejects: 0, invalidated: [], frames: 0, liveSessions: 0,
               phasesInFlight: 0, phaseWaits: 0, appended: 0, relinks: 0, rewinds: 0, restores: 0, restoredPositions: 0,
               snapshotWrites: 0, snapshotBytes: 0, snapshotDrops: 0, alarms: 0,
               copyRestores: 0, copyRestoredPositions: 0, copyMisses: 0, copyPagesServed: 0, lastCopyRestore: null,
               chainLinks: {subrequests: 0, maxConnections: 0, messages: 0}, frameLog: []};
// stats.frameLog: the last FRAME_LOG prefill / decode frames this isolate computed, each
// {sid, pos, rows, phase, layer, t0, ms}: when its turn began (epoch ms) and how long this
// station was busy with it (its own layers; in a chain, not the stations after it)
const FRAME_LOG = 4096;
function logFrame(f, t0) {
  stats.frameLog.push({sid: f.sid, pos: f.pos, rows: f.rows, phase: f.phase, layer: f.layer, t0, ms: Date.now() - t0});
  if (stats.frameLog.length > FRAME_LOG) stats.frameLog.splice(0, stats.frameLog.length - FRAME_LOG);
}

function bootKey(c) {
  return `${c.knot}|${c.role}|${c.layers[0]}-${c.layers[1]}|h${c.heads?.join("-") ?? "all"}/c${c.cols?.join("-") ?? "all"}`;
}

// Tensors (and row ranges, for a head / FFN-column slice) that phase `phase` of layer l needs.
// The core's architecture table (parts.arch, container/arch.h) says which, whether required,
// and how a slice cuts each: rows over heads / KV heads / FFN columns are read as a row range;
// column and element cuts (attn_output, ffn_down, biases) are read whole and cut in the core.
function phaseTensors(st, l, phase) {
  const {cfg, c, parts} = st;
  const hd = c.head_dim, g = c.n_head / c.n_head_kv;
  const [h0, h1] = cfg.heads ?? [0, c.n_head], [c0, c1] = cfg.cols ?? [0, c.n_ff];
  const wholeH = h1 - h0 === c.n_head;
  const span = {heads: wholeH ? null : [h0 * hd, h1 * hd], kv_heads: wholeH ? null : [h0 / g * hd, h1 / g * hd],
                ffn: c1 - c0 === c.n_ff ? null : [c0, c1], none: null};
  const out = [];
  for (const t of parts.arch.phases[phase].filter((x) => x.per_layer)) {
    const name = `blk_${l}_${t.name}`;
    if (!parts.has(name)) {
      if (!t.required) continue;
      throw new Error(`station ${cfg.name}: missing tensor ${name} (layer ${l}, phase ${phase}) in ${cfg.knot}`);
    }
    out.push({name, rows: t.cut === "rows" ? span[t.over] : null});
  }
  return out;
}

// The warden of this request: stubs are I/O objects of the request (or DO) that makes them.
function wardenFor(st, io) {
  if (!st.warden || !io?.env?.WARDEN) return null;
  const ns = io.env.WARDEN;
  return {...st.warden, stub: ns.get(ns.idFromName(st.warden.key)), waitUntil: (p) => io.ctx?.waitUntil?.(p)};
}

async function loadPhase(st, l, phase, io) {
  const list = phaseTensors(st, l, phase);
  await loadThroughWarden(st.parts, st.r2, wardenFor(st, io), async () => {
    for (const t of list) {
      if (st.parts.loaded.has(t.name)) continue;
      if (t.rows) await st.parts.loadRows(t.name, t.rows[0], t.rows[1]);
      else await st.parts.load([t.name]);
    }
    // TEST_HOOKS fault {loadDelayMs}: a slow byte source, so concurrent sessions' phases overlap
    const delay = io?.env?.TEST_HOOKS ? faults.current?.loadDelayMs : 0;
    if (delay) await new Promise((ok) => setTimeout(ok, delay));
  }, (names, e) => { stats.wardenRejects++; stats.invalidated.push(...names); stats.lastReject = e.message; });
  return list.map((t) => t.name);
}

/** @param {Env} env */
async function bootStation(env, ctx, follow = false) {
  const cfg = jsonBinding(env.STATION, "STATION");
  const key = bootKey(cfg);
  return boot(key, {bucket: env.MODELS, knot: cfg.knot, stats, follow}, async ({r2, parts, c}) => {
    const [l0, l1] = cfg.layers;
    if (!(l0 >= 0 && l1 > l0 && l1 <= c.n_layer)) throw new Error(`station ${cfg.name}: layers [${l0},${l1}) outside the model's ${c.n_layer}`);
    const st = {cfg, c, r2, parts, key, warden: null};
    if (env.WARDEN) {
      const key = `${cfg.knot}|${l0}-${l1}`;
      const identity = {knot: cfg.knot, etag: r2.etag, size: r2.size};
      await env.WARDEN.get(env.WARDEN.idFromName(key)).configure(identity, shapeOf(c)).catch((e) => {
        throw new Error(`station ${cfg.name}: warden refused /configure: ${e.message}`);
      });
      st.warden = {key, identity, nameOf: tensorNamer(parts), stats};
    }
    if (cfg.resident !== false)
      for (let l = l0; l < l1; l++) for (const ph of ["attn", "ffn_gate", "ffn_up", "ffn_down"]) await loadPhase(st, l, ph, {env, ctx});
    if (cfg.role === "exit") {
      if (!parts.has("output_norm_weight")) throw new Error(`station ${cfg.name}: missing tensor output_norm_weight (phase output_norm) in ${cfg.knot}`);
      await parts.load(["output_norm_weight"]);
    }
    return st;
  });
}

// Run one phase: resident tensors stay; a fluid station loads the phase, runs it, evicts it
// (the norms stay), so at most one phase of matmul weights is held: stats.peakPhaseBytes.
// Every session of this isolate shares the one set of tensors (st.parts) and its byte source
// (the warden loader switches parts.source while it loads), so a fluid phase runs under the
// isolate's phase lock: load, run and evict of one phase never interleave with another
// session's, and the fluid invariant holds per isolate, not only per session. Sessions wait
// their turn phase by phase (stats.phaseWaits counts the phases that waited).
// The lock is a queue of turns, each woken through a promise it made itself: under workerd a
// promise made in one request's context and resolved from another never wakes its waiters
// once the first request is gone, so a turn must not wait on the turn before it.
// A Durable Object instance aborted (restarted, evicted) while it holds or waits for the lock
// never runs its finally: its turns are given up for it (releasePhases) when the next instance
// of the same object starts, or by restart(), so the isolate's other sessions do not wait for
// ever behind it. A holder's half-loaded phase is evicted and the byte source reset.
const phaseQueue = [];  // turns waiting, in arrival order
let phaseHolder = null;
const phaseTurns = new Set();  // every turn waiting or holding
function releasePhases(owner) {
  for (const t of [...phaseTurns]) if (t.owner === owner) t.leave(true);
}
async function phase(st, l, name, fn, io) {
  if (st.cfg.resident !== false) return fn();
  const turn = {owner: io?.ctx?.id?.toString() ?? null, gone: false, what: `${name} ${l}`, since: Date.now(), leave(forced) {
    if (!phaseTurns.delete(turn)) return;
    stats.phasesInFlight--;
    if (forced) { turn.gone = true; stats.phasesReleased = (stats.phasesReleased ?? 0) + 1; }
    if (phaseHolder !== turn) { phaseQueue.splice(phaseQueue.indexOf(turn), 1); return; }
    if (forced) {
      st.parts.source = st.r2;
      st.parts.evict([...st.parts.loaded].filter((n) => !/norm/.test(n)));
    }
    phaseHolder = phaseQueue.shift() ?? null;
    phaseHolder?.wake();
  }};
  phaseTurns.add(turn);
  if (stats.phasesInFlight++ > 0) stats.phaseWaits++;
  try {
    if (phaseHolder) await new Promise((ok) => { turn.wake = ok; phaseQueue.push(turn); });
    else phaseHolder = turn;
    const names = await loadPhase(st, l, name, io);
    if (turn.gone) throw new HttpError(409, `station ${st.cfg.name}: the session's object was restarted`);
    let held = 0;
    for (const n of st.parts.loaded) if (!/norm/.test(n)) held += st.parts.entries.get(n).size;
    stats.peakPhaseBytes = Math.max(stats.peakPhaseBytes ?? 0, held);
    try { return fn(); } finally { st.parts.evict(names.filter((n) => !/norm/.test(n))); }
  } finally { turn.leave(false); }
}

async function attnPartial(st, sess, l, pos, x, n, io) {
  return phase(st, l, "attn", () => sess.station.attn(l, pos, x, n), io);
}
async function ffnPartial(st, sess, l, x, n, io) {
  const cols = st.cfg.cols ?? [0, st.c.n_ff], E = st.c.n_embd;
  let h = await phase(st, l, "ffn_gate", () => sess.station.ffnGate(l, x, n, cols), io);
  h = await phase(st, l, "ffn_up", () => sess.station.ffnUp(l, x, n, h, cols), io);
  return phase(st, l, "ffn_down", () => sess.station.ffnDown(l, h, n, cols, E), io);
}

// A prefill frame at position 0 starts a session: the boot then follows the R2 object's etag
// (lib/boot.mjs; one R2 head per session), so a replaced model is booted again, or refused.
const startsSession = (b) => b.length >= 16 && b[6] === KIND.prefill && new DataView(b.buffer, b.byteOffset, 16).getUint32(12, true) === 0;

// ---- the Durable Object: this station's sessions ------------------------------------------
// The KV caches live in the isolate's wasm heap, the DO instance only points at them: an
// instance that is aborted or evicted leaves them behind, and the next instance of the same
// object frees them (its sessions restore from the snapshot instead).
const held = new Map();  // Durable Object id -> the sessions Map of its live instance
// TEST_HOOKS: POST /debug/snapshot {blockBytes, pageBytes} shrinks snapshot blocks (a test of
// the cut) and the pages another copy reads (a test of the paging)
const snapshotOptions = {blockBytes: BLOCK_BYTES, pageBytes: PAGE_BYTES};

export class StationDO extends DurableObject {
  sessions = new Map();  // sid -> {station, nPos, nCtx, bpt, used}
  links = new Map();     // chain links (name -> Link); this DO serves one session id
  counter = new Counter();
  reqId = 1;
  turn = Promise.resolve();  // frames compute one at a time, in arrival order (see handle)
  alarmAt = undefined;   // the pending alarm's time (undefined: not read yet, null: none)

  constructor(ctx, env) {
    super(ctx, env);
    const id = ctx.id.toString(), old = held.get(id);
    if (old) for (const [sid, s] of old) { s.station.free(); old.delete(sid); stats.liveSessions--; }
    releasePhases(id);  // the phases an aborted instance of this object held or waited for
    held.set(id, this.sessions);
    try {
      this.store = new SnapshotStore(ctx.storage.sql, snapshotOptions);
    } catch (e) {
      throw new Error(`station: StationDO needs SQLite-backed storage (migrations: new_sqlite_classes): ${e.message}`);
    }
  }

  // A frame's handler by its kind; a prefill or decode frame's work by its phase.
  #byKind = {
    prefill: (st, f, io) => this.#byPhase[f.phase](st, f, io),
    decode: (st, f, io) => this.#byPhase[f.phase](st, f, io),
    end: (st, f) => this.#end(st, f),
  };
  #byPhase = {
    norm: (st, f) => this.#norm(st, f),
    all: (st, f, io) => this.#layers(st, f, io),
    attn: (st, f, io) => this.#attn(st, f, io),
    ffn: (st, f, io) => this.#ffn(st, f, io),
  };

  get #cfg() { return /** @type {StationConfig} */ (jsonBinding(this.env.STATION, "STATION")); }
  get #ttl() { return this.#cfg.ttlMs ?? 10 * 60_000; }

  // Sessions idle for the TTL are dropped (KV and snapshot), live or only stored.
  #sweep(now) {
    const ttl = this.#ttl;
    for (const [sid, s] of this.sessions) if (now - s.used >= ttl) this.#drop(sid);
    for (const s of this.store.sessions()) if (!this.sessions.has(s.sid) && now - s.used >= ttl) { this.store.drop(s.sid); stats.snapshotDrops++; }
    if (!this.sessions.size) this.#closeLinks();
  }

  // When the next session expires (ms), or null when none is held.
  #nextExpiry() {
    const ttl = this.#ttl;
    let next = null;
    const at = (used) => { if (next === null || used + ttl < next) next = used + ttl; };
    for (const s of this.sessions.values()) at(s.used);
    for (const s of this.store.sessions()) if (!this.sessions.has(s.sid)) at(s.used);
    return next;
  }

  // An alarm no later than the next expiry, so a session whose coordinator vanished is freed
  // without another frame.
  async #arm() {
    const next = this.#nextExpiry();
    if (next === null) return;
    if (this.alarmAt === undefined) this.alarmAt = await this.ctx.storage.getAlarm();
    if (this.alarmAt !== null && this.alarmAt <= next) return;
    this.alarmAt = next;
    await this.ctx.storage.setAlarm(next);
  }

  /** The lifecycle alarm: expired sessions are dropped; armed again for the rest. */
  async alarm() {
    stats.alarms++;
    this.alarmAt = null;
    this.#sweep(Date.now());
    await this.#arm();
  }

  // A session's KV cache goes back to the wasm heap (its snapshot stays).
  #free(sid) {
    const s = this.sessions.get(sid);
    if (!s) return;
    s.station.free();
    this.sessions.delete(sid);
    stats.liveSessions--;
  }

  // A session ends (end frame, TTL): its KV cache and its snapshot go.
  #drop(sid) {
    this.#free(sid);
    this.store.drop(sid);
    stats.snapshotDrops++;
  }

  #link(name, sid) {
    let l = this.links.get(name);
    if (!l) {
      l = new Link(name, this.env[`L_${name}`], {mode: "ws", counter: this.counter, sid});
      this.links.set(name, l);
    }
    return l;
  }

  #closeLinks() {
    for (const l of this.links.values()) l.close();
    this.links.clear();
  }

  // One frame down a chain link; the answer keeps the caller's request id. A dropped link is
  // tried once more on a new one; a lost session or a link dropped again downstream is a 409
  // here (the coordinator re-prefills), a timeout a 504.
  async #down(name, f, data, extra = {}) {
    const cfg = this.#cfg;
    const ms = (cfg.linkTimeoutMs ?? 60_000) * (name === cfg.next ? cfg.downstream ?? 1 : 1);
    const frame = encodeFrame({kind: f.kind, sid: f.sid, reqId: this.reqId++, pos: f.pos,
      width: f.width, layer: f.layer, phase: f.phase, flags: f.flags, nCtx: f.nCtx, data, ...extra});
    try {
      try {
        return await this.#link(name, f.sid).request(frame, ms);
      } catch (e) {
        if (!(e instanceof LinkError && e.status === 0)) throw e;
        // a dropped link (that station restarted): once more on a new link; the station
        // restores the session from its snapshot (a frame it had half run is run again)
        this.links.get(name)?.close();
        this.links.delete(name);
        stats.relinks++;
        return await this.#link(name, f.sid).request(frame, ms);
      }
    } catch (e) {
      if (!(e instanceof LinkError)) throw e;
      const status = e.status === 409 || e.status === 0 ? 409 : e.status === -1 ? 504 : e.status >= 400 ? e.status : 502;
      throw new HttpError(status, `station ${cfg.name} -> ${e.message}`);
    } finally {
      const c = stats.chainLinks, s = this.counter.snapshot();
      c.subrequests = Math.max(c.subrequests, s.subrequests);
      c.maxConnections = Math.max(c.maxConnections, s.maxConnections);
      c.messages += 1;
    }
  }

  // A leader's split layers: per layer, attention then FFN partials of every member (its
  // own computed here while the followers compute theirs), summed into x.
  async #splitLayers(st, sess, f, x, n, io) {
    const [l0, l1] = st.cfg.layers;
    for (let l = l0; l < l1; l++) {
      for (const ph of ["attn", "ffn"]) {
        const asks = st.cfg.followers.map((m) => this.#down(m, f, x, {kind: n > 1 ? "prefill" : "decode", layer: l, phase: ph, flags: 0}));
        asks.forEach((p) => p.catch(() => {}));  // awaited below; no unhandled rejection meanwhile
        const own = ph === "attn" ? await attnPartial(st, sess, l, f.pos, x, n, io) : await ffnPartial(st, sess, l, x, n, io);
        const sum = Float32Array.from(own);
        for (const p of asks) addPartials(sum, decodeFrame(await p, {width: st.c.n_embd}).data);
        addPartials(x, sum);
      }
    }
  }

  /** One frame in, its answer frame out (bytes). */
  async handle(bytes) {
    // One frame computes at a time, in arrival order: a pipelined coordinator (or the
    // station before this one in a chain) may send the next chunk before this one is done,
    // and a fluid station's loads are I/O. The turn is taken before the boot (a session's
    // first frame checks the R2 etag there: a later frame must not overtake it).
    // A chain frame gives its turn up before it goes down the chain (io.done), so the next
    // chunk computes here meanwhile.
    // (A test fault's hold or hang applies as the frame arrives, before its turn.)
    const fault = await applyFault(this.env);
    if (fault) throw fault;
    const prev = this.turn;
    let done, t0 = 0, f = null;
    this.turn = new Promise((r) => { done = r; });
    const io = {env: this.env, ctx: this.ctx, done: () => { if (t0 && f && f.kind !== "end") logFrame(f, t0); t0 = 0; done(); }};
    try {
      await prev;
      const st = await bootStation(this.env, this.ctx, startsSession(bytes));
      f = decodeFrame(bytes, {width: st.c.n_embd, kinds: Object.keys(this.#byKind)});
      stats.frames++;
      t0 = Date.now();
      this.#sweep(t0);
      return await this.#byKind[f.kind](st, f, io);
    } finally { io.done(); await this.#arm(); }
  }

  // end: the session's KV cache and snapshot are freed; in a chain, the rest of the chain
  // frees it too (best effort)
  async #end(st, f) {
    this.#drop(f.sid);
    if (f.flags & FLAG.chain) {
      await Promise.all([...(st.cfg.followers ?? []), ...(st.cfg.next ? [st.cfg.next] : [])]
        .map((m) => this.#down(m, f, undefined, {width: 0}).catch(() => {})));
      this.#closeLinks();
    }
    return encodeFrame({kind: "result", sid: f.sid, reqId: f.reqId, width: 0});
  }

  // phase norm: output_norm of the last row (the exit of a split station)
  #norm(st, f) {
    if (st.cfg.role !== "exit") throw new HttpError(400, `station ${st.cfg.name}: phase norm asked of a ${st.cfg.role} station`);
    if (f.flags & FLAG.normAll) return this.#result(f, st.parts.outputNorm(f.data, f.rows));
    return this.#result(f, st.parts.outputNorm(f.data.subarray((f.rows - 1) * st.c.n_embd), 1));
  }

  // The frame's session. The frame that starts its positions' first layer (phase all, or
  // attn of layer l0) at position 0 opens a new one; at a position below the positions held
  // it rewinds the session (KV and snapshot truncated to pos, then the frame appends); a
  // session not in memory is restored from its snapshot when that covers [0, pos). Every
  // other frame must find exactly the positions before it held (ffn: the attention before it
  // advanced them). Anything else is a lost session: 409.
  async #session(st, f) {
    const [l0] = st.cfg.layers, name = st.cfg.name, n = f.rows;
    const starts = f.phase === "all" || (f.phase === "attn" && f.layer === l0);
    if (!f.nCtx) throw new HttpError(400, `station ${name}: n_ctx 0 in a ${f.kind} frame (the session's context must be positive)`);
    let sess = this.sessions.get(f.sid);
    const nCtx = sess?.nCtx ?? f.nCtx;
    if (f.pos + n > nCtx) throw new HttpError(400, `station ${name}: positions [${f.pos}, ${f.pos + n}) (pos + rows) past the session's context n_ctx ${nCtx}`);
    if (starts && f.pos === 0) sess = this.#open(st, f);
    else if (!sess && starts) sess = this.#restore(st, f) ?? await this.#restoreFromCopy(st, f);
    if (!sess || (f.phase !== "ffn" && (starts ? f.pos > sess.nPos : f.pos !== sess.nPos)))
      throw new HttpError(409, `station ${name}: session ${f.sid} lost: it holds ${sess ? sess.nPos : "no"} positions, ` +
                               `the frame starts at ${f.pos}; re-prefill`);
    if (f.pos + n > sess.nCtx)  // a restored session's context is its snapshot's
      throw new HttpError(400, `station ${name}: positions [${f.pos}, ${f.pos + n}) (pos + rows) past the session's context n_ctx ${sess.nCtx}`);
    if (starts) {
      if (f.pos < sess.nPos) { this.store.truncate(f.sid, f.pos); sess.nPos = f.pos; stats.rewinds++; }
      sess.station.truncate(f.pos);  // also drops the rows of a frame that failed part-way
    }
    sess.used = Date.now();
    return sess;
  }

  #shape(st) { return {layers: st.cfg.layers, heads: st.cfg.heads ?? [0, st.c.n_head]}; }

  #newSession(st, f, nCtx) {
    let station;
    try {
      station = st.parts.station({...this.#shape(st), nCtx});
    } catch (e) { throw new HttpError(400, `station ${st.cfg.name}: n_ctx ${nCtx}: ${e.message}`); }
    const sess = {station, nPos: 0, nCtx, bpt: station.info().kv_bytes_per_token, used: Date.now()};
    stats.liveSessions++;
    this.sessions.set(f.sid, sess);
    return sess;
  }

  // A new session at position 0 (any KV and snapshot it had are dropped).
  #open(st, f) {
    this.#free(f.sid);
    const sess = this.#newSession(st, f, f.nCtx);
    this.store.open(f.sid, {...this.#shape(st), nCtx: sess.nCtx, bpt: sess.bpt}, sess.used);
    return sess;
  }

  // The session from its snapshot, positions [0, f.pos) (a longer snapshot is cut there), or
  // null when there is none, it expired, its shape is not this station's, or it is shorter.
  #restore(st, f) {
    const m = this.store.meta(f.sid), shape = this.#shape(st);
    if (!m) return null;
    if (Date.now() - m.used >= this.#ttl || String(m.layers) !== String(shape.layers) || String(m.heads) !== String(shape.heads)) {
      this.store.drop(f.sid);
      stats.snapshotDrops++;
      return null;
    }
    if (m.nPos < f.pos) return null;
    const sess = this.#newSession(st, f, m.nCtx);
    if (sess.bpt !== m.bpt) { this.#drop(f.sid); return null; }
    for (const b of this.store.blocks(f.sid, f.pos)) sess.station.importKv(b.pos0, b.bytes);
    if (m.nPos > f.pos) { this.store.truncate(f.sid, f.pos); stats.rewinds++; }
    sess.nPos = f.pos;
    stats.restores++;
    stats.restoredPositions += f.pos;
    return sess;
  }

  // The session from the snapshot another copy of this station persisted (STATION.copies,
  // bindings COPY_<name>: their StationDO namespaces): a session the coordinator moved here
  // after that copy failed (docs/protocol.md "Failover"). The copy's object is asked over RPC
  // (snapshotMeta, then snapshotPage pages of at most PAGE_BYTES), each answer within
  // COPY_READ_MS; the rows are imported and persisted here too. null when no copy holds a
  // snapshot of this shape covering [0, f.pos) or none answers (the frame is then a 409 and the
  // coordinator replays the token history).
  async #restoreFromCopy(st, f) {
    if (f.pos === 0 || !st.cfg.copies?.length) return null;
    const shape = this.#shape(st);
    const within = (p, what) => Promise.race([p, new Promise((_, no) => setTimeout(() => no(new Error(`${what}: no answer within ${COPY_READ_MS} ms`)), COPY_READ_MS))]);
    for (const name of st.cfg.copies) {
      const ns = this.env[`COPY_${name}`];
      if (!ns) continue;
      let m, sess = null;
      try {
        const stub = ns.get(ns.idFromName(f.sid));
        m = await within(stub.snapshotMeta(f.sid), name);
        if (!m || m.nPos < f.pos || Date.now() - m.used >= this.#ttl || String(m.layers) !== String(shape.layers) || String(m.heads) !== String(shape.heads)) continue;
        sess = this.#newSession(st, f, m.nCtx);
        if (sess.bpt !== m.bpt) throw new Error(`${name}: ${m.bpt} KV bytes per position, ${sess.bpt} here`);
        this.store.open(f.sid, {...shape, nCtx: sess.nCtx, bpt: sess.bpt}, sess.used);
        for (let at = 0; at < f.pos;) {
          const page = await within(stub.snapshotPage(f.sid, at, f.pos), name);
          if (!page.length || page[0].pos0 !== at) throw new Error(`${name}: its snapshot has no block at position ${at}`);
          for (const b of page) {
            if (b.pos0 !== at) throw new Error(`${name}: its snapshot has a gap at position ${at}`);
            sess.station.importKv(b.pos0, b.bytes);
            stats.snapshotBytes += this.store.append(f.sid, at, b.bytes, sess.used);
            at += b.bytes.length / sess.bpt;
          }
        }
      } catch (e) {
        if (sess) this.#drop(f.sid);
        stats.copyMisses++;
        stats.lastCopyMiss = e.message;
        continue;
      }
      sess.nPos = f.pos;
      stats.copyRestores++;
      stats.copyRestoredPositions += f.pos;
      stats.lastCopyRestore = {sid: f.sid, from: name, positions: f.pos};
      return sess;
    }
    return null;
  }

  // Positions [pos0, pos0 + n) complete at this station (every layer): into the snapshot
  // before the frame is answered.
  #persist(sess, sid, pos0, n) {
    const bytes = n ? sess.station.exportKv(pos0, n) : new Uint8Array(0);
    stats.snapshotBytes += this.store.append(sid, pos0, bytes, sess.used);
    stats.snapshotWrites++;
    stats.appended += n;
  }

  // phase all: x after layers [l0, l1) (a split station's leader, in a chain: its members'
  // partials summed); flag chain: on to the next station, its answer answered; flag
  // normLast: output_norm of the last row
  async #layers(st, f, io) {
    const [l0, l1] = st.cfg.layers, name = st.cfg.name, n = f.rows, x = f.data;
    if (st.cfg.followers?.length && !(f.flags & FLAG.chain)) throw new HttpError(400, `station ${name}: a split station's leader runs whole layers only in a chain`);
    const chained = f.flags & FLAG.chain && st.cfg.next;
    if (f.flags & (FLAG.normLast | FLAG.normAll) && !chained && st.cfg.role !== "exit") throw new HttpError(400, `station ${name}: normLast asked of a ${st.cfg.role} station`);
    const sess = await this.#session(st, f);
    if (st.cfg.followers?.length) {
      await this.#splitLayers(st, sess, f, x, n, io);
    } else {
      for (let l = l0; l < l1; l++) {
        addPartials(x, await attnPartial(st, sess, l, f.pos, x, n, io));
        addPartials(x, await ffnPartial(st, sess, l, x, n, io));
      }
    }
    sess.nPos += n;
    this.#persist(sess, f.sid, f.pos, n);
    if (chained) {
      io.done();
      const r = decodeFrame(await this.#down(st.cfg.next, f, x), {kinds: ["result"]});
      return encodeFrame({kind: "result", sid: f.sid, reqId: f.reqId, pos: f.pos, width: r.width, data: r.data});
    }
    if (f.flags & FLAG.normAll) return this.#result(f, st.parts.outputNorm(x, n));
    if (f.flags & FLAG.normLast) return this.#result(f, st.parts.outputNorm(x.subarray((n - 1) * st.c.n_embd), 1));
    return this.#result(f, x);
  }

  #inRange(st, f) {
    const [l0, l1] = st.cfg.layers;
    if (!(f.layer >= l0 && f.layer < l1)) throw new HttpError(400, `station ${st.cfg.name}: layer ${f.layer} outside [${l0},${l1})`);
  }

  // phase attn (a split layer): this head slice's attention partial for frame.layer
  async #attn(st, f, io) {
    this.#inRange(st, f);
    const sess = await this.#session(st, f);
    const out = await attnPartial(st, sess, f.layer, f.pos, f.data, f.rows, io);
    if (f.layer === st.cfg.layers[1] - 1) {
      sess.nPos += f.rows;
      this.#persist(sess, f.sid, f.pos, f.rows);
    }
    return this.#result(f, out);
  }

  // phase ffn (a split layer): this FFN column slice's partial for frame.layer
  async #ffn(st, f, io) {
    this.#inRange(st, f);
    const sess = await this.#session(st, f);
    return this.#result(f, await ffnPartial(st, sess, f.layer, f.data, f.rows, io));
  }

  #result(f, data) {
    return encodeFrame({kind: "result", sid: f.sid, reqId: f.reqId, pos: f.pos, width: f.width, data});
  }

  /**
   * RPC (tests, TEST_HOOKS): drop every session's KV and link, then restart this object; the
   * snapshots stay (the next frame restores from them) unless wipe. abortOnly: ctx.abort()
   * alone, the KV left in the isolate's heap (as an eviction leaves it).
   */
  async restart({wipe = false, abortOnly = false} = {}) {
    const id = this.ctx.id.toString();
    if (abortOnly) { releasePhases(id); return this.ctx.abort("abort requested by test"); }
    for (const sid of [...this.sessions.keys()]) this.#free(sid);
    if (wipe) {
      for (const s of this.store.sessions()) this.store.drop(s.sid);
      await this.ctx.storage.sync();  // durable before the abort, which drops unconfirmed writes
    }
    this.#closeLinks();
    releasePhases(id);  // after the awaits above: a frame may have taken a turn meanwhile
    this.ctx.abort?.("restart requested by test");
  }

  /** RPC (another copy of this station, #restoreFromCopy): the session's snapshot row, or null. */
  snapshotMeta(sid) { return this.store.meta(sid); }

  /** RPC (another copy of this station): one page of the session's persisted rows (SnapshotStore.page). */
  snapshotPage(sid, from, to) {
    stats.copyPagesServed++;
    return this.store.page(sid, from, to, snapshotOptions.pageBytes);
  }

  /** RPC (/stats?sid=): the sessions this object holds and its snapshot storage. */
  usage() {
    return {live: [...this.sessions].map(([sid, s]) => ({sid, nPos: s.nPos, nCtx: s.nCtx, kvBytesPerToken: s.bpt})),
            stored: this.store.usage(), alarmAt: this.alarmAt ?? null};
  }

  // Frames by POST, or as WebSocket messages (the caller hanging up closes the chain
  // links this session opened).
  async fetch(req) {
    if (req.headers.get("Upgrade") === "websocket") return serveFrames((bytes) => this.handle(bytes), () => this.#closeLinks());
    try {
      return new Response(await this.handle(new Uint8Array(await req.arrayBuffer())));
    } catch (e) { return errorResponse(e); }
  }
}

export default {
  /** @param {Request} req @param {Env} env */
  async fetch(req, env, ctx) {
    const url = new URL(req.url);
    try {
      const dbg = await debugRoute(url, req, env);
      if (dbg) return dbg;
      if (url.pathname === "/debug/snapshot" && env.TEST_HOOKS) {
        const {blockBytes, pageBytes} = await req.json();
        snapshotOptions.blockBytes = blockBytes ?? BLOCK_BYTES;
        snapshotOptions.pageBytes = pageBytes ?? PAGE_BYTES;
        return Response.json({ok: true, ...snapshotOptions});
      }
      const sid = url.searchParams.get("sid") ?? req.headers.get("x-knot-session");
      if (url.pathname === "/stats") {
        // the isolate's stats; with ?sid= also that session object's sessions and snapshot storage
        const st = await bootStation(env, ctx);
        const session = sid ? await env.STATION_DO.get(env.STATION_DO.idFromName(sid)).usage() : undefined;
        const turns = [...phaseTurns].map((t) => ({owner: t.owner?.slice(0, 12), holding: t === phaseHolder, what: t.what, ms: Date.now() - t.since}));
        return Response.json({name: st.cfg.name, boot: st.key, memory: await memoryStats(), stats, session, ...(turns.length ? {phaseTurns: turns} : {})});
      }
      if (!sid) throw new HttpError(400, "station: no session id (?sid= or x-knot-session header)");
      await bootStation(env, ctx);  // boot errors answer here, before a WebSocket is opened
      const stub = env.STATION_DO.get(env.STATION_DO.idFromName(sid));
      if (url.pathname === "/debug/restart" && env.TEST_HOOKS) {
        // ?wipe=1: the snapshot goes too (a restart that loses the session); ?abort=1: ctx.abort() only
        const q = (k) => url.searchParams.get(k) === "1";
        await stub.restart({wipe: q("wipe"), abortOnly: q("abort")}).catch(() => {});  // the object is gone when it answers
        return new Response("restarted");
      }
      return stub.fetch(req);
    } catch (e) { return errorResponse(e); }
  },
};
