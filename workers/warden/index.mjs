// workers/warden — caches in front of R2 (docs/architecture.md).
//
// LayerWardenDO, one per `knot|start-end`: tensor bytes in DO memory under a byte budget
// (WARDEN_BUDGET, default 1 GiB), LRU with the residency rule (norms, token_embd, output,
// output_norm and tensors under 1 MiB are evicted only after every other entry).
// RPC methods:
//   configure(identity {knot, etag, size})   the model identity travels with every call;
//        a warden configured for one model refuses another (409), never an env default
//   tensors(identity, ranges [{name, offset, size}]) -> the bytes, concatenated
//   invalidate(identity, name)                drop every cached range of that tensor
//   stats()
// Consumers verify what they get (the core's hashes) and, on a reject, read R2 and call
// invalidate (lib/r2.mjs), so a poisoned entry is served at most once.
//
// CobordismWardenDO, one per `knot|v0-v1`: embedding rows. L1 raw quantized rows in DO memory
// (LRU, ROWS_L1_BUDGET, default 256 MiB), L2 Workers KV (ROWS_KV) of dequantized f32 rows with
// a 24 h TTL, validated on read (byteLength == n_embd x 4; a wrong entry is deleted without
// blocking the answer), L3 R2 range reads verified by the .knot chunk hashes. Cache writes
// after the answer go through ctx.waitUntil.
// RPC methods: rows(identity, ids) -> f32 [ids.length, n_embd]; stats().
// POST /debug/hold-l2-writes {hold?: true|false, maxMs?} (TEST_HOOKS only, HTTP): L2 puts
// wait until released (or maxMs, default 60 s), so the tests observe the answer leaving
// before the cache write lands -> {hold, held: puts waiting}.
//
// Both objects also answer the same calls over HTTP (fetch), for tests only (TEST_HOOKS,
// through this script's /do/ route): there each error keeps its status (400 no identity,
// 409 another model, 502 R2), which an error thrown through RPC does not carry; RPC
// callers get the message.
/**
 * @typedef {object} Env
 * @property {R2Bucket} MODELS  the .knot files
 * @property {DurableObjectNamespace<LayerWardenDO>} LAYER_WARDEN
 * @property {DurableObjectNamespace<CobordismWardenDO>} COB_WARDEN
 * @property {KVNamespace} [ROWS_KV]  L2 of the row caches
 * @property {string} [WARDEN_BUDGET]  bytes a layer warden holds (default 1 GiB)
 * @property {string} [ROWS_L1_BUDGET]  bytes of raw rows a cobordism warden holds (default 256 MiB)
 * @property {string} [TEST_HOOKS]  /do/... routes and /debug/corrupt, tests only
 */
import {DurableObject} from "cloudflare:workers";
import {dequantizeRow, rowBytes, parseKnotHeader} from "../../bindings/knotwork.mjs";
import {openParts} from "../../bindings/mesh.mjs";
import {r2Source} from "../lib/r2.mjs";
import {HttpError, errorResponse} from "../lib/errors.mjs";
import {initWasm} from "../lib/boot.mjs";

const MiB = 1 << 20;
const sameModel = (a, b) => a && b && a.knot === b.knot && a.etag === b.etag && a.size === b.size;
const describe = (i) => `${i.knot} (etag ${i.etag}, ${i.size} bytes)`;
export const residentByRule = (name, size) => /norm|token_embd|output/.test(name) || size < MiB;

/** Byte-budgeted LRU (Map order = recency); `keep(entry)` marks entries evicted last. */
class Lru {
  constructor(budget, keep = () => false) { this.budget = budget; this.keep = keep; this.map = new Map(); this.bytes = 0; }
  get(k) { const e = this.map.get(k); if (e) { this.map.delete(k); this.map.set(k, e); } return e; }
  set(k, e) {
    this.delete(k);
    this.map.set(k, e);
    this.bytes += e.bytes.length;
    for (const pass of [false, true]) {
      for (const [key, v] of this.map) {
        if (this.bytes <= this.budget) return;
        if (key === k || this.keep(v) !== pass) continue;
        this.delete(key);
      }
    }
  }
  delete(k) { const e = this.map.get(k); if (e) { this.map.delete(k); this.bytes -= e.bytes.length; } return !!e; }
}

async function identityGuard(ctx, current, given, what) {
  if (!given?.knot) throw new HttpError(400, `${what}: the call carries no model identity`);
  if (!current) throw new HttpError(409, `${what}: not configured; POST /configure with the model identity first`);
  if (!sameModel(current, given))
    throw new HttpError(409, `${what}: configured for ${describe(current)}, refused a call for ${describe(given)}`);
}

export class LayerWardenDO extends DurableObject {
  /** @param {DurableObjectState} ctx @param {Env} env */
  constructor(ctx, env) {
    super(ctx, env);
    this.identity = null;
    this.cache = new Lru(Number(env.WARDEN_BUDGET ?? 1024 * MiB), (e) => e.resident);
    this.counts = {hits: 0, misses: 0, invalidated: 0, served: 0};
    this.ready = ctx.storage.get("identity").then((v) => { this.identity ??= v ?? null; });
  }

  /** RPC: bind this warden to a model (once; another model is a 409). */
  async configure(id) {
    await this.ready;
    if (!id?.knot || !id.etag || !(id.size > 0)) throw new HttpError(400, "warden /configure: identity {knot, etag, size} required");
    if (this.identity && !sameModel(this.identity, id))
      throw new HttpError(409, `warden: configured for ${describe(this.identity)}, refused /configure for ${describe(id)}`);
    this.identity = id;
    await this.ctx.storage.put("identity", id);
    return {ok: true, identity: id};
  }

  /** RPC: the bytes of ranges [{name, offset, size}], concatenated (Uint8Array). */
  async tensors(identity, ranges = []) {
    await this.ready;
    await identityGuard(this.ctx, this.identity, identity, "warden /tensors");
    const parts = [];
    for (const r of ranges) {
      const key = `${r.name}@${r.offset}+${r.size}`;
      let e = this.cache.get(key);
      if (e) this.counts.hits++;
      else {
        this.counts.misses++;
        const obj = await this.env.MODELS.get(this.identity.knot, {range: {offset: r.offset, length: r.size}});
        if (!obj) throw new HttpError(502, `warden: R2 has no ${this.identity.knot}`);
        if (obj.etag !== this.identity.etag) throw new HttpError(409, `warden: R2 object ${this.identity.knot} changed (etag ${obj.etag}, configured ${this.identity.etag})`);
        e = {name: r.name, bytes: new Uint8Array(await obj.arrayBuffer()), resident: residentByRule(r.name, r.size)};
        this.cache.set(key, e);
      }
      parts.push(e.bytes);
    }
    const out = new Uint8Array(parts.reduce((a, p) => a + p.length, 0));
    let at = 0;
    for (const p of parts) { out.set(p, at); at += p.length; }
    this.counts.served += out.length;
    return out;
  }

  /** RPC: drop every cached range of tensor `name`. */
  async invalidate(identity, name) {
    await this.ready;
    await identityGuard(this.ctx, this.identity, identity, "warden /invalidate");
    let n = 0;
    for (const [k, e] of [...this.cache.map]) if (e.name === name) { this.cache.delete(k); n++; }
    this.counts.invalidated += n;
    return {ok: true, name, dropped: n};
  }

  /** RPC: what this warden holds and has served. */
  async stats() {
    await this.ready;
    return {identity: this.identity, bytes: this.cache.bytes, entries: this.cache.map.size, budget: this.cache.budget,
            residentEntries: [...this.cache.map.values()].filter((e) => e.resident).length, ...this.counts};
  }

  // The same calls over HTTP (tests reach them through the script's /do/ route), errors
  // answered with their status: POST /configure {identity}, POST /tensors {identity,
  // ranges}, POST /invalidate/<name> {identity}, GET /stats, POST /debug/corrupt {name}
  // (TEST_HOOKS: flip a byte of every cached range of that tensor).
  async fetch(req) {
    const url = new URL(req.url);
    try {
      const body = req.method === "POST" ? await req.json().catch(() => ({})) : {};
      if (url.pathname === "/configure") return Response.json(await this.configure(body.identity));
      if (url.pathname === "/tensors") return new Response(await this.tensors(body.identity, body.ranges));
      if (url.pathname.startsWith("/invalidate/"))
        return Response.json(await this.invalidate(body.identity, decodeURIComponent(url.pathname.slice("/invalidate/".length))));
      if (url.pathname === "/stats") return Response.json(await this.stats());
      if (url.pathname === "/debug/corrupt" && this.env.TEST_HOOKS) {
        let n = 0;
        for (const e of this.cache.map.values()) if (e.name === body.name) { e.bytes[e.bytes.length >> 1] ^= 0x5a; n++; }
        return Response.json({ok: true, corrupted: n});
      }
      throw new HttpError(404, `warden: no route ${url.pathname}`);
    } catch (e) { return errorResponse(e); }
  }
}

// ---- CobordismWardenDO -------------------------------------------------------------------
let rowsModel = null;  // {key, promise}: the .knot header (no tensors) for verified row reads
function rowsParts(env, identity) {
  if (rowsModel?.key === identity.knot + identity.etag) return rowsModel.promise;
  const key = identity.knot + identity.etag;
  rowsModel = {key, promise: (async () => {
    await initWasm();
    const src = await r2Source(env.MODELS, identity.knot);
    if (src.etag !== identity.etag) throw new HttpError(409, `cobordism warden: R2 object ${identity.knot} has etag ${src.etag}, the call names ${identity.etag}`);
    const parts = await openParts(src);
    const header = await parseKnotHeader(src);
    const t = header.tensors.find((x) => x.name === "token_embd_weight");
    if (!t) throw new HttpError(500, `cobordism warden: missing tensor token_embd_weight (phase embed) in ${identity.knot}`);
    return {parts, config: header.config, src, type: t.type, entry: parts.entries.get("token_embd_weight")};
  })()};
  rowsModel.promise.catch(() => { if (rowsModel?.key === key) rowsModel = null; });
  return rowsModel.promise;
}

export class CobordismWardenDO extends DurableObject {
  /** @param {DurableObjectState} ctx @param {Env} env */
  constructor(ctx, env) {
    super(ctx, env);
    this.l1 = new Lru(Number(env.ROWS_L1_BUDGET ?? 256 * MiB));
    this.counts = {l1: 0, l2: 0, l3: 0, l2Rejected: 0};
    this.l2Hold = null;  // TEST_HOOKS: {promise, release, held} while L2 puts are held
  }

  l2Put(key, value) {
    const hold = this.l2Hold;
    if (!hold) return this.env.ROWS_KV.put(key, value, {expirationTtl: 24 * 3600});
    hold.held++;
    return hold.promise.then(() => this.env.ROWS_KV.put(key, value, {expirationTtl: 24 * 3600}));
  }

  /** RPC: what this warden holds and has served. */
  async stats() { return {l1Bytes: this.l1.bytes, ...this.counts}; }

  /** RPC: the f32 embedding rows [ids.length, n_embd] of token ids `ids` (Float32Array). */
  async rows(id, ids) {
    if (!id?.knot || !id.etag) throw new HttpError(400, "cobordism warden /rows: the call carries no model identity");
    const {parts, config, type, entry: t} = await rowsParts(this.env, id);
    const E = config.n_embd, rb = rowBytes(type, E), w = parts.w;
    const out = new Float32Array(ids.length * E);
    const writes = [], deleting = new Map();
    for (const [i, tok] of ids.entries()) {
      if (!(tok >= 0 && tok < config.n_vocab)) throw new HttpError(400, `cobordism warden: id ${tok} outside [0, ${config.n_vocab})`);
      const kvKey = `${id.knot}|${id.etag}|row|${tok}`;
      const raw = this.l1.get(tok);
      if (raw) {
        this.counts.l1++;
        out.set(await dequantizeRow(type, raw.bytes, E), i * E);
        continue;
      }
      if (this.env.ROWS_KV) {
        const buf = await this.env.ROWS_KV.get(kvKey, "arrayBuffer");
        if (buf && buf.byteLength === E * 4) {
          this.counts.l2++;
          out.set(new Float32Array(buf), i * E);
          continue;
        }
        if (buf) {  // wrong length: never serve it, delete it without making the caller wait
          this.counts.l2Rejected++;
          const del = this.env.ROWS_KV.delete(kvKey);
          deleting.set(kvKey, del);
          this.ctx.waitUntil(del);
        }
      }
      this.counts.l3++;
      // the rows' chunk from R2, verified by the core against the .knot chunk hash; every
      // row of the verified chunk goes to L1
      w.call("kw_model_rows_plan", parts.handle, t.i, tok, tok + 1);
      const {offset, size} = w.resultJSON();
      const bytes = await parts.source.read(offset, size);
      const p = w.copyIn(bytes);
      try { w.call("kw_model_rows_load", parts.handle, t.i, tok, tok + 1, p, offset, size); } finally { w.free(p); }
      const first = (offset - t.offset) / rb;
      for (let r = 0; r < size / rb; r++) this.l1.set(first + r, {bytes: bytes.slice(r * rb, (r + 1) * rb)});
      const row = await dequantizeRow(type, this.l1.get(tok).bytes, E);
      out.set(row, i * E);
      // the good row replaces a deleted bad one only after the delete (no reordering)
      if (this.env.ROWS_KV) writes.push((deleting.get(kvKey) ?? Promise.resolve()).then(() => this.l2Put(kvKey, row.buffer.slice(0))));
    }
    this.ctx.waitUntil(Promise.all(writes));  // after the answer; never lost at teardown
    return out;
  }

  // The same calls over HTTP (tests reach them through the script's /do/ route), errors
  // answered with their status: POST /rows {identity, ids}, GET /stats.
  async fetch(req) {
    const url = new URL(req.url);
    try {
      const body = req.method === "POST" ? await req.json().catch(() => ({})) : {};
      if (url.pathname === "/stats") return Response.json(await this.stats());
      if (url.pathname === "/debug/hold-l2-writes" && this.env.TEST_HOOKS) {
        const held = this.l2Hold?.held ?? 0;
        if (body.hold === true && !this.l2Hold) {
          let release;
          const promise = new Promise((r) => { release = r; });
          const hold = this.l2Hold = {promise, release, held: 0};
          // never held forever: a warden that awaited its puts would otherwise hang the test
          setTimeout(() => { if (this.l2Hold === hold) { hold.release(); this.l2Hold = null; } }, Number(body.maxMs ?? 60_000));
        } else if (body.hold === false && this.l2Hold) { this.l2Hold.release(); this.l2Hold = null; }
        return Response.json({ok: true, hold: !!this.l2Hold, held});
      }
      if (url.pathname !== "/rows") throw new HttpError(404, `cobordism warden: no route ${url.pathname}`);
      return new Response(await this.rows(body.identity, body.ids));
    } catch (e) { return errorResponse(e); }
  }
}

export default {
  /** @param {Request} req @param {Env} env */
  async fetch(req, env) {
    // tests reach a warden object through here: /do/layer/<key>/<path> or /do/rows/<key>/<path>
    const url = new URL(req.url);
    const m = /^\/do\/(layer|rows)\/([^/]+)(\/.*)$/.exec(url.pathname);
    if (!m || !env.TEST_HOOKS) return errorResponse(new HttpError(404, "warden: not publicly routable"));
    const ns = m[1] === "layer" ? env.LAYER_WARDEN : env.COB_WARDEN;
    return ns.get(ns.idFromName(decodeURIComponent(m[2]))).fetch(new Request(`https://warden${m[3]}`, req));
  },
};
