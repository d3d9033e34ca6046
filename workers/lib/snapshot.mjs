// snapshot.mjs — a station session's KV rows in its Durable Object's SQLite storage
// (docs/protocol.md, "KV snapshots"), so a restarted station restores the session instead of
// asking the coordinator for a re-prefill. Two tables of ctx.storage.sql:
//   kv_sessions (sid, n_ctx, l0, l1, h0, h1, bpt, n_pos, used)   one row per session: its
//       shape (the KV cache it restores into), the positions persisted, its last use (ms)
//   kv_blocks   (sid, pos0, n, rows)                             rows [pos0, pos0 + n) as the
//       bytes Station.exportKv wrote (n x bpt bytes), at most blockBytes per block
// Blocks of one session are contiguous from position 0 up to n_pos: append() adds after n_pos,
// truncate() cuts back (a block straddling the cut is shortened), drop() deletes the session,
// page() hands rows to another copy of the station restoring the session after a failover.
// The SQL API is synchronous; Durable Object output gates hold the answer to a frame until
// its writes are durable, so rows persisted before answering survive a restart.
// The documented limit for SQLite-backed objects is 2 MB per row (a string or BLOB) and
// 10 GB per object; BLOCK_BYTES keeps every block at half the row limit.
export const BLOCK_BYTES = 1 << 20;
// A page of rows read by another copy of the station (page()) goes as one Workers RPC answer,
// whose documented limit is 32 MiB: PAGE_BYTES keeps it at a quarter of that.
export const PAGE_BYTES = 8 << 20;

export class SnapshotStore {
  /** @param {SqlStorage} sql  ctx.storage.sql */
  constructor(sql, {blockBytes = BLOCK_BYTES} = {}) {
    this.sql = sql;
    this.blockBytes = blockBytes;
    sql.exec(`CREATE TABLE IF NOT EXISTS kv_sessions (sid TEXT PRIMARY KEY, n_ctx INTEGER NOT NULL, l0 INTEGER NOT NULL,
      l1 INTEGER NOT NULL, h0 INTEGER NOT NULL, h1 INTEGER NOT NULL, bpt INTEGER NOT NULL, n_pos INTEGER NOT NULL, used INTEGER NOT NULL)`);
    sql.exec(`CREATE TABLE IF NOT EXISTS kv_blocks (sid TEXT NOT NULL, pos0 INTEGER NOT NULL, n INTEGER NOT NULL, rows BLOB NOT NULL,
      PRIMARY KEY (sid, pos0))`);
  }

  /** A new session (any old snapshot of sid deleted): shape {nCtx, layers, heads, bpt}, no positions. */
  open(sid, {nCtx, layers, heads, bpt}, used) {
    this.drop(sid);
    this.sql.exec("INSERT INTO kv_sessions VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?)", sid, nCtx, layers[0], layers[1], heads[0], heads[1], bpt, used);
  }

  /** The session's row {sid, nCtx, layers, heads, bpt, nPos, used}, or null. */
  meta(sid) {
    const r = this.sql.exec("SELECT * FROM kv_sessions WHERE sid = ?", sid).toArray()[0];
    return r ? {sid: r.sid, nCtx: r.n_ctx, layers: [r.l0, r.l1], heads: [r.h0, r.h1], bpt: r.bpt, nPos: r.n_pos, used: r.used} : null;
  }

  /** Every session held: [{sid, used}]. */
  sessions() {
    return this.sql.exec("SELECT sid, used FROM kv_sessions").toArray().map((r) => ({sid: r.sid, used: r.used}));
  }

  /**
   * Append rows at pos0 (== the persisted n_pos): bytes = n x bpt, cut into blocks of at most
   * blockBytes (whole positions). Returns the bytes written.
   */
  append(sid, pos0, bytes, used) {
    const m = this.meta(sid);
    if (!m) throw new Error(`snapshot: no session ${sid}`);
    if (pos0 !== m.nPos) throw new Error(`snapshot: session ${sid} append at ${pos0} but ${m.nPos} positions are persisted`);
    const n = bytes.length / m.bpt;
    if (!Number.isInteger(n)) throw new Error(`snapshot: ${bytes.length} bytes are not whole positions of ${m.bpt} bytes`);
    const per = Math.max(1, Math.floor(this.blockBytes / m.bpt));
    for (let i = 0; i < n; i += per) {
      const k = Math.min(per, n - i);
      const b = bytes.subarray(i * m.bpt, (i + k) * m.bpt);
      this.sql.exec("INSERT INTO kv_blocks VALUES (?, ?, ?, ?)", sid, pos0 + i, k, b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
    }
    this.sql.exec("UPDATE kv_sessions SET n_pos = ?, used = ? WHERE sid = ?", pos0 + n, used, sid);
    return bytes.length;
  }

  /** Keep positions [0, nPos) only. */
  truncate(sid, nPos) {
    const m = this.meta(sid);
    if (!m || nPos >= m.nPos) return;
    this.sql.exec("DELETE FROM kv_blocks WHERE sid = ? AND pos0 >= ?", sid, nPos);
    this.sql.exec("UPDATE kv_blocks SET rows = substr(rows, 1, (? - pos0) * ?), n = ? - pos0 WHERE sid = ? AND pos0 < ? AND pos0 + n > ?",
                  nPos, m.bpt, nPos, sid, nPos, nPos);
    this.sql.exec("UPDATE kv_sessions SET n_pos = ? WHERE sid = ?", nPos, sid);
  }

  /** The persisted rows of positions [0, nPos) in order: [{pos0, bytes: Uint8Array}], each block cut at nPos. */
  blocks(sid, nPos) {
    const m = this.meta(sid);
    if (!m) return [];
    const out = [];
    let at = 0;
    for (const r of this.sql.exec("SELECT pos0, n, rows FROM kv_blocks WHERE sid = ? AND pos0 < ? ORDER BY pos0", sid, nPos)) {
      if (r.pos0 !== at) throw new Error(`snapshot: session ${sid} has a gap at position ${at} (next block at ${r.pos0})`);
      const k = Math.min(r.n, nPos - r.pos0);
      out.push({pos0: r.pos0, bytes: new Uint8Array(r.rows, 0, k * m.bpt)});
      at += k;
    }
    if (at !== Math.min(nPos, m.nPos)) throw new Error(`snapshot: session ${sid} blocks end at ${at}, ${m.nPos} positions recorded`);
    return out;
  }

  /**
   * One page of the persisted rows for another copy of this station (failover, docs/protocol.md
   * "Failover"): the whole blocks that start in [from, to), in order, each cut at to, together
   * at most maxBytes (at least one block). [{pos0, bytes: Uint8Array}]; [] when none starts there.
   */
  page(sid, from, to, maxBytes = PAGE_BYTES) {
    const m = this.meta(sid);
    if (!m) return [];
    const out = [];
    let total = 0;
    for (const r of this.sql.exec("SELECT pos0, n, rows FROM kv_blocks WHERE sid = ? AND pos0 >= ? AND pos0 < ? ORDER BY pos0", sid, from, to)) {
      const k = Math.min(r.n, to - r.pos0);
      if (out.length && total + k * m.bpt > maxBytes) break;
      out.push({pos0: r.pos0, bytes: new Uint8Array(r.rows, 0, k * m.bpt)});
      total += k * m.bpt;
    }
    return out;
  }

  /** Delete the session's snapshot. */
  drop(sid) {
    this.sql.exec("DELETE FROM kv_blocks WHERE sid = ?", sid);
    this.sql.exec("DELETE FROM kv_sessions WHERE sid = ?", sid);
  }

  /** What the store holds: {sessions, blocks, bytes}. */
  usage() {
    const s = this.sql.exec("SELECT count(*) AS n FROM kv_sessions").one().n;
    const b = this.sql.exec("SELECT count(*) AS n, coalesce(sum(length(rows)), 0) AS bytes FROM kv_blocks").one();
    return {sessions: s, blocks: b.n, bytes: b.bytes};
  }
}
