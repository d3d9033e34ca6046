// workers/station — a layer station (docs/architecture.md, docs/memory.md): a Worker plus a Durable Object
// holding the sessions of this station. One wasm instance per isolate (module scope) holds
// the station's tensors (boot cache keyed knot|role|range|slice); each session's KV cache
// for this layer range / head slice lives in the DO that session id routes to.
//
// Requests: a frame (lib/frame.mjs) by POST, or the same frames as WebSocket messages
// (GET with Upgrade: websocket; the coordinator's session DO keeps the link open). Frames:
//   prefill|decode, phase all:  x [rows, n_embd] at pos -> x after layers [l0, l1)
//                               (flag normLast: output_norm of the last row, [n_embd])
//   phase attn / ffn (a split layer): the partial residual of this slice for frame.layer
//   phase norm:                 output_norm of the last row
//   end:                        the session's KV cache is freed
//   flag chain (phase all): run this station (a leader sums its members' partials per layer),
//                               then forward to the next station and answer its answer; an
//                               end frame is forwarded the same way
// A session this station does not hold (lost, expired, DO restarted) at pos > 0 is a 409
// naming the session and positions: the coordinator re-prefills. Down the chain, a lost
// session or a dropped link answers 409 too, a timeout 504.
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
import {decodeFrame, encodeFrame, FLAG} from "../lib/frame.mjs";
import {Link, LinkError, Counter} from "../lib/link.mjs";
import {loadThroughWarden, tensorNamer} from "../lib/r2.mjs";
import {jsonBinding} from "../lib/config.mjs";
import {HttpError, errorResponse} from "../lib/errors.mjs";
import {applyFault, debugRoute} from "../lib/faults.mjs";
import {modelBoot} from "../lib/boot.mjs";
import {serveFrames} from "../lib/socket.mjs";
import {addPartials} from "../lib/partials.mjs";

// ---- module scope: one boot per isolate and config ---------------------------------------
const boot = modelBoot();
const stats = {r2Reads: 0, r2Bytes: 0, wardenReads: 0, wardenRejects: 0, invalidated: [], frames: 0, liveSessions: 0, chainLinks: {subrequests: 0, maxConnections: 0, messages: 0}};

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
  }, (names, e) => { stats.wardenRejects++; stats.invalidated.push(...names); stats.lastReject = e.message; });
  return list.map((t) => t.name);
}

/** @param {Env} env */
async function bootStation(env, ctx) {
  const cfg = jsonBinding(env.STATION, "STATION");
  const key = bootKey(cfg);
  return boot(key, {bucket: env.MODELS, knot: cfg.knot, stats}, async ({r2, parts, c}) => {
    const [l0, l1] = cfg.layers;
    if (!(l0 >= 0 && l1 > l0 && l1 <= c.n_layer)) throw new Error(`station ${cfg.name}: layers [${l0},${l1}) outside the model's ${c.n_layer}`);
    const st = {cfg, c, r2, parts, key, warden: null};
    if (env.WARDEN) {
      const key = `${cfg.knot}|${l0}-${l1}`;
      const identity = {knot: cfg.knot, etag: r2.etag, size: r2.size};
      await env.WARDEN.get(env.WARDEN.idFromName(key)).configure(identity).catch((e) => {
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
async function phase(st, l, name, fn, io) {
  if (st.cfg.resident !== false) return fn();
  const names = await loadPhase(st, l, name, io);
  let held = 0;
  for (const n of st.parts.loaded) if (!/norm/.test(n)) held += st.parts.entries.get(n).size;
  stats.peakPhaseBytes = Math.max(stats.peakPhaseBytes ?? 0, held);
  try { return fn(); } finally { st.parts.evict(names.filter((n) => !/norm/.test(n))); }
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

// ---- the Durable Object: this station's sessions ------------------------------------------
export class StationDO extends DurableObject {
  sessions = new Map();  // sid -> {station, nPos, nCtx, used}
  links = new Map();     // chain links (name -> Link); this DO serves one session id
  counter = new Counter();
  reqId = 1;

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

  #sweep(now) {
    const ttl = this.#cfg.ttlMs ?? 10 * 60_000;
    for (const [sid, s] of this.sessions) if (now - s.used > ttl) this.#free(sid);
    if (!this.sessions.size) this.#closeLinks();
  }

  // A session's KV cache goes back to the wasm heap.
  #free(sid) {
    const s = this.sessions.get(sid);
    if (!s) return;
    s.station.free();
    this.sessions.delete(sid);
    stats.liveSessions--;
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

  // One frame down a chain link; the answer keeps the caller's request id. A lost session or
  // a dropped link downstream is a 409 here (the coordinator re-prefills), a timeout a 504.
  async #down(name, f, data, extra = {}) {
    const cfg = this.#cfg;
    const ms = (cfg.linkTimeoutMs ?? 60_000) * (name === cfg.next ? cfg.downstream ?? 1 : 1);
    try {
      const r = await this.#link(name, f.sid).request(encodeFrame({kind: f.kind, sid: f.sid, reqId: this.reqId++, pos: f.pos,
        width: f.width, layer: f.layer, phase: f.phase, flags: f.flags, nCtx: f.nCtx, data, ...extra}), ms);
      return r;
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
    const st = await bootStation(this.env, this.ctx);
    const fault = await applyFault(this.env);
    if (fault) throw fault;
    const f = decodeFrame(bytes, {width: st.c.n_embd, kinds: Object.keys(this.#byKind)});
    stats.frames++;
    this.#sweep(Date.now());
    return this.#byKind[f.kind](st, f, {env: this.env, ctx: this.ctx});
  }

  // end: the session's KV cache is freed; in a chain, the rest of the chain frees it too
  // (best effort)
  async #end(st, f) {
    this.#free(f.sid);
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
    return this.#result(f, st.parts.outputNorm(f.data.subarray((f.rows - 1) * st.c.n_embd), 1));
  }

  // The frame's session: a new one at position 0 (where a layer starts), else the one held,
  // which must hold exactly the positions before the frame (ffn: the attention before it
  // advanced them); a lost one is a 409.
  #session(st, f) {
    const [l0, l1] = st.cfg.layers, name = st.cfg.name, n = f.rows;
    let sess = this.sessions.get(f.sid);
    const startsLayer = f.phase === "ffn" || f.phase === "all" || f.layer === l0;
    if (f.pos === 0 && startsLayer && f.phase !== "ffn") {
      this.#free(f.sid);
      const nCtx = f.nCtx || 2048;
      sess = {station: st.parts.station({layers: [l0, l1], heads: st.cfg.heads ?? [0, st.c.n_head], nCtx}), nPos: 0, nCtx};
      stats.liveSessions++;
      this.sessions.set(f.sid, sess);
    }
    // a frame below the held positions rewinds the session first (prefix reuse, a retried
    // frame: docs/protocol.md); the rows it carries are then appended
    if (sess && f.pos < sess.nPos && startsLayer && f.phase !== "ffn") { sess.station.truncate(f.pos); sess.nPos = f.pos; }
    if (!sess || (f.phase !== "ffn" && sess.nPos !== f.pos))
      throw new HttpError(409, `station ${name}: session ${f.sid} lost: it holds ${sess ? sess.nPos : "no"} positions, ` +
                               `the frame starts at ${f.pos}; re-prefill`);
    sess.used = Date.now();
    if (f.pos + n > sess.nCtx) throw new HttpError(400, `station ${name}: positions [${f.pos}, ${f.pos + n}) past the session's context ${sess.nCtx}`);
    return sess;
  }

  // phase all: x after layers [l0, l1) (a split station's leader, in a chain: its members'
  // partials summed); flag chain: on to the next station, its answer answered; flag
  // normLast: output_norm of the last row
  async #layers(st, f, io) {
    const sess = this.#session(st, f);
    const [l0, l1] = st.cfg.layers, name = st.cfg.name, n = f.rows, x = f.data;
    if (st.cfg.followers?.length) {
      if (!(f.flags & FLAG.chain)) throw new HttpError(400, `station ${name}: a split station's leader runs whole layers only in a chain`);
      await this.#splitLayers(st, sess, f, x, n, io);
    } else {
      for (let l = l0; l < l1; l++) {
        addPartials(x, await attnPartial(st, sess, l, f.pos, x, n, io));
        addPartials(x, await ffnPartial(st, sess, l, x, n, io));
      }
    }
    sess.nPos += n;
    if (f.flags & FLAG.chain && st.cfg.next) {
      const r = decodeFrame(await this.#down(st.cfg.next, f, x), {kinds: ["result"]});
      return encodeFrame({kind: "result", sid: f.sid, reqId: f.reqId, pos: f.pos, width: r.width, data: r.data});
    }
    if (f.flags & FLAG.normLast) {
      if (st.cfg.role !== "exit") throw new HttpError(400, `station ${name}: normLast asked of a ${st.cfg.role} station`);
      return this.#result(f, st.parts.outputNorm(x.subarray((n - 1) * st.c.n_embd), 1));
    }
    return this.#result(f, x);
  }

  #inRange(st, f) {
    const [l0, l1] = st.cfg.layers;
    if (!(f.layer >= l0 && f.layer < l1)) throw new HttpError(400, `station ${st.cfg.name}: layer ${f.layer} outside [${l0},${l1})`);
  }

  // phase attn (a split layer): this head slice's attention partial for frame.layer
  async #attn(st, f, io) {
    const sess = this.#session(st, f);
    this.#inRange(st, f);
    const out = await attnPartial(st, sess, f.layer, f.pos, f.data, f.rows, io);
    if (f.layer === st.cfg.layers[1] - 1) sess.nPos += f.rows;
    return this.#result(f, out);
  }

  // phase ffn (a split layer): this FFN column slice's partial for frame.layer
  async #ffn(st, f, io) {
    const sess = this.#session(st, f);
    this.#inRange(st, f);
    return this.#result(f, await ffnPartial(st, sess, f.layer, f.data, f.rows, io));
  }

  #result(f, data) {
    return encodeFrame({kind: "result", sid: f.sid, reqId: f.reqId, pos: f.pos, width: f.width, data});
  }

  /** RPC (tests, TEST_HOOKS): drop every session and link, then restart this object. */
  restart() {
    for (const sid of [...this.sessions.keys()]) this.#free(sid);
    this.#closeLinks();
    this.ctx.abort?.("restart requested by test");
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
      if (url.pathname === "/stats") {
        const st = await bootStation(env, ctx);
        return Response.json({name: st.cfg.name, boot: st.key, memory: await memoryStats(), stats});
      }
      const sid = url.searchParams.get("sid") ?? req.headers.get("x-knot-session");
      if (!sid) throw new HttpError(400, "station: no session id (?sid= or x-knot-session header)");
      await bootStation(env, ctx);  // boot errors answer here, before a WebSocket is opened
      const stub = env.STATION_DO.get(env.STATION_DO.idFromName(sid));
      if (url.pathname === "/debug/restart" && env.TEST_HOOKS) {
        await stub.restart().catch(() => {});  // the object is gone when it answers
        return new Response("restarted");
      }
      return stub.fetch(req);
    } catch (e) { return errorResponse(e); }
  },
};
