// workers/station — a layer station (DESIGN §1, §2, §5): a Worker plus a Durable Object
// holding the sessions of this station. One wasm instance per isolate (module scope) holds
// the station's tensors (boot cache keyed knot|role|range|slice); each session's KV cache
// for this layer range / head slice lives in the DO that session id routes to.
//
// Binding STATION (JSON): {name, knot, layers: [l0, l1], heads?: [h0, h1], cols?: [c0, c1],
//   role: "entry"|"mid"|"exit", resident: true|false, ttlMs?,
//   next?: name, followers?: [name], downstream?: n, linkTimeoutMs?}   in a chained topology
//   (lib/topology.mjs links()): the next station's leader, (a split station's leader) the other
//   members of this station, the number of stations after this one; a link's timeout is
//   linkTimeoutMs per station still to run, so the innermost hung station is the one named
// Bindings: MODELS (R2, the .knot files), STATION_DO (this script's DO), WARDEN? (LayerWardenDO
// namespace of the warden script), L_<name> (service binding per chain link), TEST_HOOKS?
// (fault injection, tests only).
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
import {wasmModules as wasmModule} from "../lib/wasm.mjs";
import {init, memoryStats} from "../../bindings/knotwork.mjs";
import {openParts} from "../../bindings/mesh.mjs";
import {decodeFrame, encodeFrame, FLAG} from "../lib/frame.mjs";
import {Link, LinkError, Counter} from "../lib/link.mjs";
import {r2Source, loadThroughWarden, tensorNamer} from "../lib/sources.mjs";
import {jsonBinding, HttpError, errorResponse, applyFault, debugRoute, messageBytes, addInto, bootCache} from "../lib/common.mjs";

// ---- module scope: one boot per isolate and config ---------------------------------------
const boot = bootCache((st) => st.parts.close());
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

async function bootStation(env, ctx) {
  const cfg = jsonBinding(env.STATION, "STATION");
  const key = bootKey(cfg);
  return boot(key, async () => {
    await init(wasmModule);
    const r2 = await r2Source(env.MODELS, cfg.knot, stats);
    const parts = await openParts(r2);
    const c = await parts.config();
    const [l0, l1] = cfg.layers;
    if (!(l0 >= 0 && l1 > l0 && l1 <= c.n_layer)) throw new Error(`station ${cfg.name}: layers [${l0},${l1}) outside the model's ${c.n_layer}`);
    const st = {cfg, c, r2, parts, key, warden: null};
    if (env.WARDEN) {
      const key = `${cfg.knot}|${l0}-${l1}`;
      const identity = {knot: cfg.knot, etag: r2.etag, size: r2.size};
      const res = await env.WARDEN.get(env.WARDEN.idFromName(key)).fetch("https://warden/configure",
        {method: "POST", body: JSON.stringify({identity, layers: [l0, l1]})});
      if (!res.ok) throw new Error(`station ${cfg.name}: warden refused /configure: ${await res.text()}`);
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
export class StationDO {
  constructor(ctx, env) {
    this.ctx = ctx;
    this.env = env;
    this.sessions = new Map();  // sid -> {station, nPos, nCtx, used}
    this.links = new Map();     // chain links (name -> Link); this DO serves one session id
    this.counter = new Counter();
    this.reqId = 1;
  }

  #sweep(now) {
    const ttl = jsonBinding(this.env.STATION, "STATION").ttlMs ?? 10 * 60_000;
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
    const cfg = jsonBinding(this.env.STATION, "STATION");
    const ms = (cfg.linkTimeoutMs ?? 60_000) * (name === cfg.next ? cfg.downstream ?? 1 : 1);
    try {
      const r = await this.#link(name, f.sid).request(encodeFrame({kind: f.kind, sid: f.sid, reqId: this.reqId++, pos: f.pos,
        width: f.width, layer: f.layer, phase: f.phase, flags: f.flags, nCtx: f.nCtx, data, ...extra}), ms);
      return r;
    } catch (e) {
      if (!(e instanceof LinkError)) throw e;
      const status = e.status === 409 || e.status === 0 ? 409 : e.status === -1 ? 504 : e.status >= 400 ? e.status : 502;
      throw new HttpError(status, `station ${jsonBinding(this.env.STATION, "STATION").name} -> ${e.message}`);
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
        for (const p of asks) addInto(sum, decodeFrame(await p, {width: st.c.n_embd}).data);
        addInto(x, sum);
      }
    }
  }

  async handle(bytes) {
    const st = await bootStation(this.env, this.ctx);
    const fault = await applyFault(this.env);
    if (fault) throw fault;
    const f = decodeFrame(bytes, {width: st.c.n_embd, kinds: ["prefill", "decode", "end"]});
    stats.frames++;
    const now = Date.now();
    this.#sweep(now);
    const name = st.cfg.name;
    const io = {env: this.env, ctx: this.ctx};
    let sess = this.sessions.get(f.sid);
    if (f.kind === "end") {
      this.#free(f.sid);
      if (f.flags & FLAG.chain) {  // the rest of the chain frees the session too (best effort)
        await Promise.all([...(st.cfg.followers ?? []), ...(st.cfg.next ? [st.cfg.next] : [])]
          .map((m) => this.#down(m, f, undefined, {width: 0}).catch(() => {})));
        this.#closeLinks();
      }
      return encodeFrame({kind: "result", sid: f.sid, reqId: f.reqId, width: 0});
    }
    const [l0, l1] = st.cfg.layers;
    const n = f.rows;
    if (f.phase === "norm") {
      if (st.cfg.role !== "exit") throw new HttpError(400, `station ${name}: phase norm asked of a ${st.cfg.role} station`);
      return this.#result(f, st.parts.outputNorm(f.data.subarray((n - 1) * st.c.n_embd), 1));
    }
    const startsLayer = f.phase === "ffn" || f.phase === "all" || f.layer === l0;
    if (f.pos === 0 && startsLayer && f.phase !== "ffn") {
      this.#free(f.sid);
      const nCtx = f.nCtx || 2048;
      sess = {station: st.parts.station({layers: [l0, l1], heads: st.cfg.heads ?? [0, st.c.n_head], nCtx}), nPos: 0, nCtx};
      stats.liveSessions++;
      this.sessions.set(f.sid, sess);
    }
    if (!sess || (f.phase !== "ffn" && sess.nPos !== f.pos))
      throw new HttpError(409, `station ${name}: session ${f.sid} lost: it holds ${sess ? sess.nPos : "no"} positions, ` +
                               `the frame starts at ${f.pos}; re-prefill`);
    sess.used = now;
    if (f.pos + n > sess.nCtx) throw new HttpError(400, `station ${name}: positions [${f.pos}, ${f.pos + n}) past the session's context ${sess.nCtx}`);
    if (f.phase === "all") {
      const x = f.data;
      if (st.cfg.followers?.length) {
        if (!(f.flags & FLAG.chain)) throw new HttpError(400, `station ${name}: a split station's leader runs whole layers only in a chain`);
        await this.#splitLayers(st, sess, f, x, n, io);
      } else {
        for (let l = l0; l < l1; l++) {
          addInto(x, await attnPartial(st, sess, l, f.pos, x, n, io));
          addInto(x, await ffnPartial(st, sess, l, x, n, io));
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
    if (!(f.layer >= l0 && f.layer < l1)) throw new HttpError(400, `station ${name}: layer ${f.layer} outside [${l0},${l1})`);
    if (f.phase === "attn") {
      const out = await attnPartial(st, sess, f.layer, f.pos, f.data, n, io);
      if (f.layer === l1 - 1) sess.nPos += n;
      return this.#result(f, out);
    }
    return this.#result(f, await ffnPartial(st, sess, f.layer, f.data, n, io));
  }

  #result(f, data) {
    return encodeFrame({kind: "result", sid: f.sid, reqId: f.reqId, pos: f.pos, width: f.width, data});
  }

  async fetch(req) {
    const url = new URL(req.url);
    if (url.pathname === "/debug/restart" && this.env.TEST_HOOKS) {
      for (const sid of [...this.sessions.keys()]) this.#free(sid);
      this.#closeLinks();
      this.ctx.abort?.("restart requested by test");
      return new Response("restarted");
    }
    if (req.headers.get("Upgrade") === "websocket") {
      const pair = new WebSocketPair();
      const [client, server] = Object.values(pair);
      server.accept();
      // the caller hung up: the chain links this session opened go with it
      server.addEventListener("close", () => this.#closeLinks());
      server.addEventListener("message", async (ev) => {
        const bytes = await messageBytes(ev.data);
        const reqId = bytes.length >= 12 ? new DataView(bytes.buffer, bytes.byteOffset).getUint32(8, true) : 0;
        try {
          server.send(await this.handle(bytes));
        } catch (e) {
          const r = errorResponse(e);
          server.send(JSON.stringify({reqId, status: r.status, error: e.message}));
        }
      });
      return new Response(null, {status: 101, webSocket: client});
    }
    try {
      return new Response(await this.handle(new Uint8Array(await req.arrayBuffer())));
    } catch (e) { return errorResponse(e); }
  }
}

export default {
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
      return stub.fetch(req);
    } catch (e) { return errorResponse(e); }
  },
};
