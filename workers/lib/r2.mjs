// r2.mjs — byte sources for workers: an R2 object by range, and the same object read
// through a layer warden (bytes cached in the warden's DO memory). Every byte a station or
// shard loads is verified by the core (content hashes, finite block scales) whatever the
// source; a rejected warden read is retried from R2 and the warden told to drop the entry.

/** @returns {Promise<import("../../bindings/sources.mjs").ByteSource>} over R2 object `key`. */
export async function r2Source(bucket, key, stats = {}) {
  const head = await bucket.head(key);
  if (!head) throw new Error(`R2: no object ${key} in the model bucket`);
  return {
    size: head.size, name: `r2:${key}`, etag: head.etag,
    async read(offset, length) {
      if (length === 0) return new Uint8Array(0);
      const obj = await bucket.get(key, {range: {offset, length}});
      if (!obj) throw new Error(`R2: ${key} vanished while reading [${offset}, ${offset + length})`);
      const b = new Uint8Array(await obj.arrayBuffer());
      if (b.length !== length) throw new Error(`R2: ${key} range ${offset}+${length} returned ${b.length} bytes`);
      stats.r2Reads = (stats.r2Reads ?? 0) + 1;
      stats.r2Bytes = (stats.r2Bytes ?? 0) + length;
      return b;
    },
  };
}

/**
 * Reads of `base` (an R2 source) served by a layer warden stub: tensors(identity,
 * [{name, offset, size}]) (warden/index.mjs). `nameOf(offset)` names the tensor holding a byte.
 * Reads are logged in `log` so a rejected load can invalidate exactly what it used.
 */
export function wardenSource(base, stub, identity, nameOf, log, stats = {}) {
  return {
    size: base.size, name: `warden:${base.name}`,
    async read(offset, length) {
      const name = nameOf(offset);
      log.push(name);
      const b = await stub.tensors(identity, [{name, offset, size: length}]).catch((e) => {
        throw new WardenError(`warden /tensors: ${e.message}`);
      });
      if (b.length !== length) throw new WardenError(`warden returned ${b.length} bytes for ${name} [${offset}, ${offset + length})`);
      stats.wardenReads = (stats.wardenReads ?? 0) + 1;
      return b;
    },
  };
}

export class WardenError extends Error {}

/** True for errors that mean "these bytes are wrong", as opposed to a bug or a missing tensor. */
export const isByteReject = (e) => e instanceof WardenError || /content hash|non-finite scale|short read|returned \d+ bytes/.test(e?.message ?? "");

/**
 * Run load(parts) with the parts' source switched to the warden; when the core rejects the
 * bytes (hash / scale / length), fire invalidate for the tensors read, then run it again
 * from R2. `onReject(names, error)` reports it.
 */
export async function loadThroughWarden(parts, r2, warden, load, onReject) {
  if (!warden) return load();
  const log = [];
  parts.source = wardenSource(r2, warden.stub, warden.identity, warden.nameOf, log, warden.stats);
  try {
    await load();
  } catch (e) {
    if (!isByteReject(e)) throw e;
    const names = [...new Set(log)];
    parts.source = r2;
    // do not wait for the invalidations: the caller gets its bytes from R2 now
    const inv = Promise.all(names.map((n) => warden.stub.invalidate(warden.identity, n).catch(() => {})));
    warden.waitUntil?.(inv);
    onReject?.(names, e);
    await load();
  } finally {
    parts.source = r2;
  }
}

/** nameOf(offset) over a parts' table: the tensor whose [offset, offset+size) holds it. */
export function tensorNamer(parts) {
  const list = [...parts.entries.values()].sort((a, b) => a.offset - b.offset);
  return (off) => {
    let lo = 0, hi = list.length - 1, hit = null;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (list[mid].offset <= off) { hit = list[mid]; lo = mid + 1; } else hi = mid - 1;
    }
    return hit && off < hit.offset + hit.size ? hit.name : `@${off}`;
  };
}
