// frame.mjs — the station / shard wire frame (docs/protocol.md): a versioned binary envelope plus
// one tensor payload, validated on receipt. A frame that does not parse is a FrameError,
// which the workers answer with HTTP 400 and the message.
//
//   0  u32  magic "KWF1"           20 u32  width (hidden dim; 1 for token ids)
//   4  u16  version (1)            24 u16  layer (phase calls of a split layer)
//   6  u8   kind (KIND)            26 u8   phase (PHASE)
//   7  u8   dtype 0 f32 | 1 i32    27 u8   flags (FLAG)
//   8  u32  request id             28 u32  n_ctx (context the session's KV cache holds)
//   12 u32  position of row 0      32 u16  session id length S (1..128, ASCII)
//   16 u32  rows (tokens)          34 u16  zero
//   36 S bytes session id, NUL-padded to 4;  then rows x width values (little-endian)
export const MAGIC = 0x3146574b;  // "KWF1"
export const VERSION = 1;
export const HEADER = 36;
export const KIND = Object.freeze({prefill: 1, decode: 2, embed: 3, lmhead: 4, result: 5, end: 6});
export const PHASE = Object.freeze({all: 0, attn: 1, ffn: 2, norm: 3});
export const FLAG = Object.freeze({normLast: 1, fullLogits: 2, chain: 4, topRow: 8, normAll: 16});
const DTYPES = [Float32Array, Int32Array];
const ROWS_NEEDED = ["prefill", "decode", "embed", "lmhead"];  // kinds that carry at least one row
const KIND_NAMES = Object.fromEntries(Object.entries(KIND).map(([k, v]) => [v, k]));

export class FrameError extends Error {}

/** The request id of a frame (offset 8) without decoding the rest; 0 when too short to hold one. */
export const requestId = (bytes) =>
  bytes.length >= 12 ? new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getUint32(8, true) : 0;

const te = new TextEncoder(), td = new TextDecoder();

/**
 * @param {{kind: string, sid: string, reqId?: number, pos?: number, layer?: number, phase?: string,
 *          flags?: number, nCtx?: number, width: number, data: Float32Array|Int32Array}} f
 * @returns {Uint8Array}
 */
export function encodeFrame(f) {
  const sid = te.encode(f.sid ?? "");
  const data = f.data ?? new Float32Array(0);
  const dtype = data instanceof Int32Array ? 1 : 0;
  const rows = f.width ? data.length / f.width : 0;
  if (!Number.isInteger(rows)) throw new FrameError(`encodeFrame: ${data.length} values are not rows of width ${f.width}`);
  const sidPad = (sid.length + 3) & ~3;
  const out = new Uint8Array(HEADER + sidPad + data.byteLength);
  const v = new DataView(out.buffer);
  v.setUint32(0, MAGIC, true);
  v.setUint16(4, VERSION, true);
  v.setUint8(6, KIND[f.kind]);
  v.setUint8(7, dtype);
  v.setUint32(8, f.reqId ?? 0, true);
  v.setUint32(12, f.pos ?? 0, true);
  v.setUint32(16, rows, true);
  v.setUint32(20, f.width ?? 0, true);
  v.setUint16(24, f.layer ?? 0, true);
  v.setUint8(26, PHASE[f.phase ?? "all"]);
  v.setUint8(27, f.flags ?? 0);
  v.setUint32(28, f.nCtx ?? 0, true);
  v.setUint16(32, sid.length, true);
  out.set(sid, HEADER);
  out.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength), HEADER + sidPad);
  return out;
}

/**
 * Parse and validate a frame. `expect` may pin {width, kinds: [...]}.
 * @param {ArrayBuffer|Uint8Array} buf
 */
export function decodeFrame(buf, expect = {}) {
  const u8 = buf instanceof Uint8Array ? buf : new Uint8Array(buf);
  if (u8.length < HEADER) throw new FrameError(`frame: ${u8.length} bytes, shorter than the ${HEADER}-byte header`);
  const v = new DataView(u8.buffer, u8.byteOffset, u8.byteLength);
  const magic = v.getUint32(0, true);
  if (magic !== MAGIC) throw new FrameError(`frame: bad magic 0x${magic.toString(16)} (expected "KWF1")`);
  const version = v.getUint16(4, true);
  if (version !== VERSION) throw new FrameError(`frame: version ${version}, this worker speaks version ${VERSION}`);
  const kindId = v.getUint8(6), kind = KIND_NAMES[kindId];
  if (!kind) throw new FrameError(`frame: unknown kind ${kindId}`);
  if (expect.kinds && !expect.kinds.includes(kind)) throw new FrameError(`frame: kind ${kind} not accepted here (want ${expect.kinds.join("|")})`);
  const dtype = v.getUint8(7);
  if (!DTYPES[dtype]) throw new FrameError(`frame: unknown dtype ${dtype}`);
  const rows = v.getUint32(16, true), width = v.getUint32(20, true);
  const phaseId = v.getUint8(26), phase = Object.keys(PHASE).find((k) => PHASE[k] === phaseId);
  if (!phase) throw new FrameError(`frame: unknown phase ${phaseId}`);
  const sidLen = v.getUint16(32, true);
  if (sidLen > 128) throw new FrameError(`frame: session id of ${sidLen} bytes (max 128)`);
  if (v.getUint16(34, true) !== 0) throw new FrameError("frame: reserved header bytes are not zero");
  // rows of width 0 carry no values: a consumer looping over `rows` would read nothing
  if (width === 0 && rows !== 0) throw new FrameError(`frame: ${rows} rows of width 0`);
  const sidPad = (sidLen + 3) & ~3;
  const want = HEADER + sidPad + rows * width * 4;
  if (u8.length !== want)
    throw new FrameError(`frame: ${u8.length} bytes but the header says ${rows} rows x ${width} values (${want} bytes)`);
  if (expect.width !== undefined && width !== expect.width && rows > 0)
    throw new FrameError(`frame: width ${width}, this worker's hidden dim is ${expect.width}`);
  // the consumers of these kinds compute on their rows (a norm frame reads its last row)
  if (rows === 0 && ROWS_NEEDED.includes(kind)) throw new FrameError(`frame: a ${kind} frame with 0 rows (it needs at least one)`);
  const sid = td.decode(u8.subarray(HEADER, HEADER + sidLen));
  if (!/^[\x21-\x7e]*$/.test(sid)) throw new FrameError("frame: session id is not printable ASCII");
  // one byte string per frame: the padding after the session id is zero, as encodeFrame writes it
  for (let i = HEADER + sidLen; i < HEADER + sidPad; i++)
    if (u8[i] !== 0) throw new FrameError(`frame: session id padding byte at offset ${i} is 0x${u8[i].toString(16)}, not zero`);
  const start = u8.byteOffset + HEADER + sidPad;
  // copy: the payload must be 4-aligned and outlive the request buffer
  const data = new DTYPES[dtype](u8.buffer.slice(start, start + rows * width * 4));
  return {kind, dtype, reqId: v.getUint32(8, true), pos: v.getUint32(12, true), rows, width,
          layer: v.getUint16(24, true), phase, flags: v.getUint8(27), nCtx: v.getUint32(28, true), sid, data};
}

// An lm-head answer in top-k form (a TopK of bindings/generator.mjs) as an f32 payload:
//   [lse_hi, lse_lo, min, n, ids x n, logits x n]
// lse travels as two floats (lse_hi = f32(lse), lse_lo = f32(lse - lse_hi)) so the merged
// log-sum-exp keeps ~48 bits (logprobs equal one process's to ~1e-12); ids are exact in f32
// (< 2^24). -inf lse / +inf min (an empty or all -inf slice) pass as IEEE infinities.
export function encodeTopK(t) {
  const n = t.ids.length, out = new Float32Array(4 + 2 * n);
  const lse = t.lse ?? -Infinity, min = t.min ?? Infinity;
  out[0] = lse;
  out[1] = Number.isFinite(lse) ? lse - out[0] : 0;
  out[2] = min;
  out[3] = n;
  out.set(t.ids, 4);
  out.set(t.logits, 4 + n);
  return out;
}

/**
 * An lm-head answer asked with FLAG.topRow: the encodeTopK payload, then (when the shard holds
 * its embedding rows) the embedding row [n_embd] of its best token — the next step's input
 * when the coordinator picks that token (greedy), so no embed round trip follows.
 * Returns {top: payload, row: Float32Array | null}.
 */
export function splitTopRow(d, nEmbd) {
  const n = d[3], len = 4 + 2 * n;
  if (Number.isInteger(n) && d.length === len + nEmbd) return {top: d.subarray(0, len), row: d.subarray(len)};
  return {top: d, row: null};
}

/**
 * An lm-head answer for several rows (a speculative verify pass: one row per position):
 * the rows' encodeTopK payloads end to end, row 0 first. decodeTopKs(d, rows) splits it;
 * a payload that does not hold exactly `rows` of them is a FrameError.
 */
export function encodeTopKs(list) {
  const parts = list.map(encodeTopK), out = new Float32Array(parts.reduce((a, p) => a + p.length, 0));
  let o = 0;
  for (const p of parts) { out.set(p, o); o += p.length; }
  return out;
}

/**
 * A verify pass's answer asked with FLAG.topRow: the encodeTopKs payload, then (when the
 * shard holds its embedding rows and every row's list is non-empty) `rows` embedding rows
 * [rows, n_embd], row r the best token of list r — the next pass's input rows when the
 * coordinator picks that token (greedy), so no embed round trip follows a verify pass.
 * Returns {top: payload, rows: Float32Array | null}; a tail that is neither empty nor
 * rows x n_embd values is left to decodeTopKs to refuse.
 */
export function splitTopRows(d, rows, nEmbd) {
  let o = 0;
  for (let r = 0; r < rows; r++) {
    const n = d[o + 3];
    if (!(o + 4 <= d.length && Number.isInteger(n) && n >= 0)) return {top: d, rows: null};
    o += 4 + 2 * n;
  }
  if (o < d.length && d.length - o === rows * nEmbd) return {top: d.subarray(0, o), rows: d.subarray(o)};
  return {top: d, rows: null};
}

export function decodeTopKs(d, rows) {
  const out = [];
  let o = 0;
  for (let r = 0; r < rows; r++) {
    const n = d[o + 3];
    if (!(o + 4 <= d.length && Number.isInteger(n) && n >= 0 && o + 4 + 2 * n <= d.length))
      throw new FrameError(`top-k rows payload: row ${r} of ${rows} does not fit in ${d.length} values`);
    out.push(decodeTopK(d.subarray(o, o + 4 + 2 * n)));
    o += 4 + 2 * n;
  }
  if (o !== d.length) throw new FrameError(`top-k rows payload: ${d.length - o} values after ${rows} rows`);
  return out;
}

/** The TopK of an encodeTopK payload; a payload of the wrong length is a FrameError. */
export function decodeTopK(d) {
  const n = d[3];
  if (!(d.length >= 4 && Number.isInteger(n) && d.length === 4 + 2 * n))
    throw new FrameError(`top-k payload: ${d.length} values, header says ${n} entries (want 4 + 2n)`);
  return {ids: Array.from(d.subarray(4, 4 + n)), logits: Array.from(d.subarray(4 + n)), lse: d[0] + d[1], min: d[2]};
}
