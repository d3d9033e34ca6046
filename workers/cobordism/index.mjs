// workers/cobordism — a vocab shard (docs/architecture.md): owns token ids [v0, v1) — its rows of
// token_embd (embedding lookup) and of output (lm_head; the tied token_embd when the model
// has no output tensor), held resident in this isolate's wasm instance across requests
// (boot cache keyed knot|v0-v1).
//
// With COB_WARDEN, embedding rows come from the warden's L1/L2/L3 caches instead of being
// held here (untied models then hold only output rows). Every row the warden sends is
// checked against a per-row hash the shard computed at boot from its rows as the core read
// them from R2 (verified by the .knot chunk hashes; 8 bytes a row held); a row that does not
// match (or a wrong-length answer) is read from R2 instead and invalidated at the warden
// (/stats wardenRowRejects, rejectedRows), so a poisoned entry is served at most once.
// A request's first embed frame (position 0) follows the R2 object's etag (lib/boot.mjs).
// With FOLLOWERS, this shard is the hub of a shard group — it forwards each frame to its followers (over links it keeps for the life of
// the coordinator's link) and answers for the whole group: embed partials summed, top-k lists
// merged by the core (mergeTopK: best k, lse and min combined), full logits concatenated over
// the group's contiguous range. A
// follower that fails is left out and named by bit i+1 of the answer's flags (the group
// abstains for that slice), so the coordinator holds one link per group, not per shard
// (docs/limits.md: at most 6 simultaneous connections).
// Frames (lib/frame.mjs), by POST or as WebSocket messages:
//   embed  (i32 ids, width 1)  -> f32 [rows, n_embd]: rows of owned ids, zeros elsewhere
//   lmhead (f32 normed hidden [rows, n_embd]), pos = k (rows > 1, a speculative verify
//       pass: per row the top-k payload, end to end: lib/frame.mjs encodeTopKs):
//       flag fullLogits -> f32 [v1 - v0] the slice's logits
//       else            -> the slice's top-k + log-sum-exp + min (lib/frame.mjs encodeTopK:
//                          ids absolute, best first), what the coordinator's Generator samples
//       flag topRow     -> then the embedding row of the best token (per row with rows > 1:
//                          lib/frame.mjs splitTopRow / splitTopRows), when the shard holds its rows
/**
 * @typedef {object} Env
 * @property {string|{name: string, knot: string, vocab: [number, number], softcap?: number}} SHARD  JSON
 * @property {R2Bucket} MODELS  the .knot files
 * @property {DurableObjectNamespace} [COB_WARDEN]  CobordismWardenDO namespace of the warden script
 * @property {string|{name: string, vocab: [number, number]}[]} [FOLLOWERS]  JSON: a hub's followers,
 *   each reached through the service binding F_<name>
 * @property {string} [FOLLOWER_TIMEOUT_MS]  a hub's wait for its followers (default 10 s)
 * @property {string} [TEST_HOOKS]  fault injection, tests only
 */
import {memoryStats} from "../../bindings/knotwork.mjs";
import {topkLse, mergeTopK} from "../../bindings/mesh.mjs";
import {decodeFrame, encodeFrame, encodeTopK, decodeTopK, encodeTopKs, decodeTopKs, splitTopRow, splitTopRows, FLAG, KIND} from "../lib/frame.mjs";
import {Link, Counter, gather} from "../lib/link.mjs";
import {jsonBinding} from "../lib/config.mjs";
import {HttpError, errorResponse} from "../lib/errors.mjs";
import {applyFault, debugRoute} from "../lib/faults.mjs";
import {modelBoot} from "../lib/boot.mjs";
import {serveFrames} from "../lib/socket.mjs";
import {addPartials} from "../lib/partials.mjs";

const boot = modelBoot();
const stats = {r2Reads: 0, r2Bytes: 0, embeds: 0, lmheads: 0};

/** @param {Env} env */
async function bootShard(env, follow = false) {
  const cfg = jsonBinding(env.SHARD, "SHARD");
  const key = `${cfg.knot}|${cfg.vocab[0]}-${cfg.vocab[1]}`;
  return boot(key, {bucket: env.MODELS, knot: cfg.knot, stats, follow}, async ({r2, parts, c}) => {
    const [v0, v1] = cfg.vocab;
    if (!(v0 >= 0 && v1 > v0 && v1 <= c.n_vocab))
      throw new Error(`shard ${cfg.name}: vocab slice [${v0},${v1}) outside the tokenizer's ${c.n_vocab} tokens`);
    if (!parts.has("token_embd_weight")) throw new Error(`shard ${cfg.name}: missing tensor token_embd_weight (phase embed) in ${cfg.knot}`);
    const untied = parts.has("output_weight");
    const holdsEmbed = !(env.COB_WARDEN && untied);
    // the warden's rows are checked against these (the rows as the core reads them from R2),
    // computed before the output rows load, so the window never adds to their peak
    const rowHashes = holdsEmbed ? null : await embedRowHashes(parts, c.n_embd, v0, v1);
    if (holdsEmbed) await parts.loadRows("token_embd_weight", v0, v1);
    if (untied) await parts.loadRows("output_weight", v0, v1);
    const warden = env.COB_WARDEN ? {key, identity: {knot: cfg.knot, etag: r2.etag, size: r2.size}} : null;
    return {cfg, c, parts, key, v0, v1, warden, holdsEmbed, rowHashes};
  });
}

const hubCounter = new Counter();

// A row's hash (cyrb53 over its f32 bits): what the shard checks a warden's rows against.
function rowHash(row) {
  const u = new Uint32Array(row.buffer, row.byteOffset, row.length);
  let h1 = 0xdeadbeef, h2 = 0x41c6ce57;
  for (let i = 0; i < u.length; i++) { h1 = Math.imul(h1 ^ u[i], 2654435761); h2 = Math.imul(h2 ^ u[i], 1597334677); }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  return 4294967296 * (2097151 & h2) + (h1 >>> 0);
}

// Per-row hashes of the embedding rows [v0, v1), read once at boot from R2 in windows of 256
// rows (each verified by the core against the .knot chunk hashes), then evicted: 8 bytes a
// row held, not the rows.
async function embedRowHashes(parts, E, v0, v1) {
  const out = new Float64Array(v1 - v0);
  for (let a = v0; a < v1; a += 256) {
    const ids = Array.from({length: Math.min(v1, a + 256) - a}, (_, i) => a + i);
    await embedFromR2(parts, ids, E, (row, i) => { out[a - v0 + i] = rowHash(row); });
  }
  return out;
}

// Embedding rows of `ids` read from R2 (verified by the core), one window at a time, then
// evicted; one reader at a time per isolate (the window is the parts' token_embd tensor).
// each(row, i) is given every row (one row at a time in memory); without it, the rows
// [ids.length * E] are returned.
let r2Lock = Promise.resolve();
function embedFromR2(parts, ids, E, each = null) {
  const run = r2Lock.then(async () => {
    const out = each ? null : new Float32Array(ids.length * E);
    try {
      for (const [i, id] of ids.entries()) {
        if (!(parts.loaded.has("token_embd_weight") && id >= parts.window?.[0] && id < parts.window[1])) {
          const a = id, b = Math.max(a + 1, Math.min(Math.max(...ids) + 1, a + 256));
          await parts.loadRows("token_embd_weight", a, b);
          parts.window = [a, b];
        }
        const row = parts.embed([id], parts.window[0], parts.window[1], E);
        if (each) each(row, i); else out.set(row, i * E);
      }
      return out;
    } finally { if (parts.loaded.has("token_embd_weight")) parts.evict(["token_embd_weight"]); parts.window = null; }
  });
  r2Lock = run.catch(() => {});
  return run;
}

// An embed frame at position 0 starts a request: the boot then follows the R2 object's etag
// (lib/boot.mjs; one R2 head per request), so a replaced model is booted again, or refused.
const startsRequest = (b) => b.length >= 16 && b[6] === KIND.embed && new DataView(b.buffer, b.byteOffset, 16).getUint32(12, true) === 0;

// Forward a frame to the followers that matter, run own(f) meanwhile, merge.
async function handle(env, bytes, links, io) {
  const sh = await bootShard(env, startsRequest(bytes));
  const fault = await applyFault(env);
  if (fault) throw fault;
  const f = decodeFrame(bytes, {kinds: ["embed", "lmhead"]});
  const followers = env.FOLLOWERS ? jsonBinding(env.FOLLOWERS, "FOLLOWERS") : [];
  if (!followers.length) return own(sh, f, env, io);
  const ids = f.kind === "embed" ? Array.from(f.data) : null;
  const asked = followers.map((x, i) => ({...x, bit: i + 1}))
    .filter((x) => !ids || ids.some((id) => id >= x.vocab[0] && id < x.vocab[1]));
  const link = (x) => {
    if (!links.has(x.name)) links.set(x.name, new Link(x.name, env[`F_${x.name}`], {mode: links.mode, counter: hubCounter}));
    return links.get(x.name);
  };
  const timeoutMs = Number(env.FOLLOWER_TIMEOUT_MS ?? 10_000);
  const [mine, g] = await Promise.all([own(sh, f, env, io), gather(asked.map((x) => ({name: x.name, run: () => link(x).request(bytes, timeoutMs)})), timeoutMs)]);
  const m = decodeFrame(mine);
  let failed = 0;
  const parts = [];
  g.results.forEach((r, i) => { if (r.ok) parts.push([asked[i], decodeFrame(r.value).data]); else failed |= 1 << asked[i].bit; });
  let data;
  if (f.kind === "embed") {
    data = addPartials(m.data, ...parts.map(([, d]) => d));
  } else if (f.flags & FLAG.fullLogits) {
    const v0 = sh.v0, v1 = followers.at(-1).vocab[1];
    data = new Float32Array(v1 - v0).fill(-Infinity);
    data.set(m.data, 0);
    for (const [x, d] of parts) data.set(d, x.vocab[0] - v0);
  } else if (f.rows > 1) {  // a verify pass: per row, the group's lists merged
    // (with FLAG.topRow, per row the row of the merged best token, when every row's owner sent one)
    const split = [m.data, ...parts.map(([, d]) => d)].map((d) => splitTopRows(d, f.rows, sh.c.n_embd));
    const lists = split.map((x) => decodeTopKs(x.top, f.rows));
    const merged = [], E = sh.c.n_embd, rows = new Float32Array(f.rows * E);
    let all = !!(f.flags & FLAG.topRow);
    for (let r = 0; r < f.rows; r++) {
      const t = await mergeTopK(lists.map((l) => l[r]), shardK(f));
      merged.push(t);
      const at = all && t.ids.length ? lists.findIndex((l, i) => split[i].rows && l[r].ids[0] === t.ids[0]) : -1;
      if (at < 0) all = false;
      else rows.set(split[at].rows.subarray(r * E, (r + 1) * E), r * E);
    }
    data = withTopRow(encodeTopKs(merged), all ? rows : null);
  } else {
    // with FLAG.topRow each answer may carry its best token's embedding row: pass on the
    // row of the merged best token, when its owner sent one
    const split = [m.data, ...parts.map(([, d]) => d)].map((d) => splitTopRow(d, sh.c.n_embd));
    const merged = await mergeTopK(split.map((x) => decodeTopK(x.top)), shardK(f));
    const best = split.find((x) => x.row && merged.ids.length && x.top[4] === merged.ids[0]);
    data = withTopRow(encodeTopK(merged), f.flags & FLAG.topRow && best ? best.row : null);
  }
  return encodeFrame({kind: "result", sid: f.sid, reqId: f.reqId, width: f.kind === "embed" ? sh.c.n_embd : data.length, flags: failed, data});
}

async function own(sh, f, env, io) {
  const {c, v0, v1} = sh, E = c.n_embd;
  if (f.kind === "embed") {
    if (f.dtype !== 1 || f.width !== 1) throw new HttpError(400, `shard ${sh.cfg.name}: embed takes i32 ids of width 1`);
    stats.embeds++;
    const ids = Array.from(f.data);
    if (!sh.warden) return encodeFrame({kind: "result", sid: f.sid, reqId: f.reqId, width: E, data: sh.parts.embed(ids, v0, v1, E)});
    for (const id of ids) if (!(id >= 0 && id < c.n_vocab)) throw new HttpError(400, `shard ${sh.cfg.name}: id ${id} outside the vocabulary [0,${c.n_vocab})`);
    const owned = ids.map((id, i) => [id, i]).filter(([id]) => id >= v0 && id < v1);
    const x = new Float32Array(ids.length * E);
    if (owned.length) {
      const stub = env.COB_WARDEN.get(env.COB_WARDEN.idFromName(sh.warden.key));  // a stub per request (I/O object)
      const rows = await stub.rows(sh.warden.identity, owned.map(([id]) => id)).catch((e) => {
        throw new HttpError(502, `shard ${sh.cfg.name}: cobordism warden: ${e.message}`);
      });
      // every row checked against its hash (a wrong length rejects them all); a rejected row
      // is read from R2 and the warden told to drop it, so it is served at most once
      const whole = rows.length === owned.length * E, bad = [];
      owned.forEach(([id, i], j) => {
        const row = whole ? rows.subarray(j * E, (j + 1) * E) : null;
        if (row && rowHash(row) === sh.rowHashes[id - v0]) x.set(row, i * E);
        else bad.push([id, i]);
      });
      stats.wardenRows = (stats.wardenRows ?? 0) + owned.length - bad.length;
      if (bad.length) {
        const ids = bad.map(([id]) => id);
        stats.wardenRowRejects = (stats.wardenRowRejects ?? 0) + bad.length;
        (stats.rejectedRows ??= []).push(...ids);
        stats.lastRowReject = whole ? `rows ${ids.join(", ")} do not match their hash` : `${rows.length} values for ${owned.length} rows`;
        io?.waitUntil?.(stub.invalidate(sh.warden.identity, ids).catch(() => {}));
        const good = await embedFromR2(sh.parts, ids, E);
        bad.forEach(([, i], j) => x.set(good.subarray(j * E, (j + 1) * E), i * E));
      }
    }
    return encodeFrame({kind: "result", sid: f.sid, reqId: f.reqId, width: E, data: x});
  }
  if (f.width !== E || f.rows < 1) throw new HttpError(400, `shard ${sh.cfg.name}: lmhead takes normed rows of ${E} values`);
  if (f.rows > 1 && f.flags & FLAG.fullLogits)
    throw new HttpError(400, `shard ${sh.cfg.name}: lmhead of ${f.rows} rows answers top-k lists only (no fullLogits)`);
  stats.lmheads++;
  const logits = sh.parts.lmHead(f.data, f.rows, v0, v1, {softcap: sh.cfg.softcap ?? 0});
  if (f.rows > 1) {  // a verify pass: one top-k list per row
    const V = v1 - v0, lists = [];
    for (let r = 0; r < f.rows; r++) lists.push(await topkLse(logits.subarray(r * V, (r + 1) * V), v0, v1, shardK(f)));
    // FLAG.topRow: each row's best token's embedding row after the lists (splitTopRows)
    const rows = f.flags & FLAG.topRow && sh.holdsEmbed && lists.every((t) => t.ids.length);
    const out = withTopRow(encodeTopKs(lists), rows ? sh.parts.embed(lists.map((t) => t.ids[0]), v0, v1, E) : null);
    return encodeFrame({kind: "result", sid: f.sid, reqId: f.reqId, width: out.length, data: out});
  }
  if (f.flags & FLAG.fullLogits) return encodeFrame({kind: "result", sid: f.sid, reqId: f.reqId, width: v1 - v0, data: logits});
  const t = await topkLse(logits, v0, v1, shardK(f));
  const out = withTopRow(encodeTopK(t), f.flags & FLAG.topRow && sh.holdsEmbed && t.ids.length ? sh.parts.embed([t.ids[0]], v0, v1, E) : null);
  return encodeFrame({kind: "result", sid: f.sid, reqId: f.reqId, width: out.length, data: out});
}

function withTopRow(top, row) {
  if (!row) return top;
  const out = new Float32Array(top.length + row.length);
  out.set(top);
  out.set(row, top.length);
  return out;
}

// The k an lm-head frame asks for (its pos field; the coordinator sizes it so the merged list
// covers every token its sampler can keep).
const shardK = (f) => Math.max(1, f.pos || 8);

const linkMap = (mode) => Object.assign(new Map(), {mode});

function serveSocket(env, io) {
  const links = linkMap("ws");  // a hub's links to its followers live as long as this socket
  return serveFrames((bytes) => handle(env, bytes, links, io), () => { for (const l of links.values()) l.close(); });
}

export default {
  /** @param {Request} req @param {Env} env */
  async fetch(req, env, ctx) {
    const io = {waitUntil: (p) => ctx?.waitUntil?.(p)};
    const url = new URL(req.url);
    try {
      const dbg = await debugRoute(url, req, env);
      if (dbg) return dbg;
      if (url.pathname === "/stats") {
        const sh = await bootShard(env);
        return Response.json({name: sh.cfg.name, boot: sh.key, memory: await memoryStats(), stats, followerLinks: hubCounter.snapshot()});
      }
      if (req.headers.get("Upgrade") === "websocket") { await bootShard(env); return serveSocket(env, io); }
      return new Response(await handle(env, new Uint8Array(await req.arrayBuffer()), linkMap("http"), io));
    } catch (e) { return errorResponse(e); }
  },
};
