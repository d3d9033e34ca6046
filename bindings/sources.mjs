// sources.mjs — byte sources: {size, name, read(offset, len) -> Promise<Uint8Array>}.
// Everything the core reads (headers, tensors) goes through one of these, so a model
// can come from a file, a buffer, an HTTP server with Range support, or R2.

/**
 * @typedef {object} ByteSource
 * @property {number} size                                   total bytes
 * @property {string} [name]                                 for error messages
 * @property {(offset: number, len: number) => Promise<Uint8Array>} read  exactly len bytes
 * @property {() => Promise<void>|void} [close]
 */

function checkRange(src, offset, len) {
  if (!Number.isInteger(offset) || !Number.isInteger(len) || offset < 0 || len < 0 || offset + len > src.size)
    throw new RangeError(`${src.name}: read [${offset}, ${offset + len}) outside the source's ${src.size} bytes`);
}

/** @returns {ByteSource} over bytes in memory. */
export function bytesSource(bytes, name = "bytes") {
  const u8 = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes.buffer ?? bytes, bytes.byteOffset ?? 0, bytes.byteLength);
  const src = {
    size: u8.length,
    name,
    async read(offset, len) { checkRange(src, offset, len); return u8.subarray(offset, offset + len); },
  };
  return src;
}

/** @returns {Promise<ByteSource>} over a local file (Node only). Call close() when done. */
export async function fileSource(path) {
  const {open} = await import("node:fs/promises");
  const fh = await open(path, "r");
  const {size} = await fh.stat();
  const src = {
    size,
    name: String(path),
    async read(offset, len) {
      checkRange(src, offset, len);
      const out = new Uint8Array(len);
      let done = 0;
      while (done < len) {
        const {bytesRead} = await fh.read(out, done, len - done, offset + done);
        if (bytesRead === 0) throw new Error(`${path}: unexpected end of file at ${offset + done}`);
        done += bytesRead;
      }
      return out;
    },
    close: () => fh.close(),
  };
  return src;
}

/**
 * @returns {Promise<ByteSource>} over an HTTP(S) URL using Range requests. The size comes
 * from a `Range: bytes=0-0` probe (Content-Range), so the server must support ranges.
 */
export async function urlSource(url, {fetch: fetchFn = globalThis.fetch, headers = {}} = {}) {
  const href = String(url);
  const probe = await fetchFn(href, {headers: {...headers, Range: "bytes=0-0"}});
  const cr = probe.headers.get("content-range");
  await probe.arrayBuffer().catch(() => {});
  const m = cr && /\/(\d+)\s*$/.exec(cr);
  if (probe.status !== 206 || !m)
    throw new Error(`${href}: server did not answer a Range request (HTTP ${probe.status}, Content-Range ${cr})`);
  const src = {
    size: Number(m[1]),
    name: href,
    async read(offset, len) {
      checkRange(src, offset, len);
      if (len === 0) return new Uint8Array(0);
      const res = await fetchFn(href, {headers: {...headers, Range: `bytes=${offset}-${offset + len - 1}`}});
      if (res.status !== 206) throw new Error(`${href}: range ${offset}+${len}: HTTP ${res.status}, expected 206`);
      const out = new Uint8Array(await res.arrayBuffer());
      if (out.length !== len) throw new Error(`${href}: range ${offset}+${len} returned ${out.length} bytes`);
      return out;
    },
  };
  return src;
}

/** Wrap a source so every read is recorded in `log` ({offset, len}); for tests and stats. */
export function countingSource(src, log = []) {
  return {
    ...src,
    log,
    read(offset, len) { log.push({offset, len}); return src.read(offset, len); },
  };
}

/** @returns {ByteSource} over a Blob (read by slices: a browser keeps a large Blob on disk). */
export function blobSource(blob, name = "blob") {
  const src = {
    size: blob.size,
    name,
    async read(offset, len) {
      checkRange(src, offset, len);
      return new Uint8Array(await blob.slice(offset, offset + len).arrayBuffer());
    },
  };
  return src;
}

/**
 * A URL kept in the browser's Cache API (caches.open(cacheName)): the first use downloads
 * the whole file once (one GET) and stores it; a later use reads the stored copy by slices,
 * with no request. Returns {source, fromCache, evict()}: evict() drops the stored copy (a
 * corrupted one: openCachedModel in knotwork.mjs verifies every tensor and fetches again).
 * @param {string|URL} url
 * @param {{cacheName?: string, fetch?: typeof fetch, headers?: object}} [o]
 */
export async function cachedUrlSource(url, {cacheName = "knotwork-models", fetch: fetchFn = globalThis.fetch, headers = {}} = {}) {
  if (typeof caches === "undefined" || typeof caches.open !== "function")
    throw new Error("knotwork: cachedUrlSource needs the Cache API (a browser page or Worker on a secure origin)");
  const href = String(url);
  const cache = await caches.open(cacheName);
  const evict = () => cache.delete(href);
  const hit = await cache.match(href);
  if (hit) return {source: blobSource(await hit.blob(), href), fromCache: true, evict};
  const res = await fetchFn(href, {headers});
  if (res.status !== 200) throw new Error(`${href}: HTTP ${res.status} fetching the model to cache it`);
  const blob = await res.blob();
  await cache.put(href, new Response(blob, {headers: {"content-type": "application/octet-stream",
                                                      "content-length": String(blob.size)}}));
  return {source: blobSource(blob, href), fromCache: false, evict};
}
