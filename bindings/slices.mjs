// slices.mjs — load only a slice of a tensor into a ModelParts (bindings/mesh.mjs),
// streamed in chunks through wasm/abi_slice.cpp, so an isolate holds the slice plus one
// chunk — never the whole tensor — while loading. Verified like whole loads (.knot chunk
// or tensor hashes, finite block scales).
//
//   await loadSlice(parts, "blk_3_ffn_down_weight", {cols: [0, 9472]});   // a head / FFN slice
//   await loadSlice(parts, "blk_3_attn_q_weight", {rows: [0, 1792]});
//   await loadSlice(parts, "output_weight", {rows: [0, 18992]});           // a vocab shard
// Column cuts must be whole blocks of the tensor's type (256 for K-quants, 32 for Q8_0).

/**
 * @param {import("./mesh.mjs").ModelParts} parts
 * @param {string} name  knot tensor name
 * @param {{rows?: [number, number], cols?: [number, number]}} cut
 */
export async function loadSlice(parts, name, cut, {chunkBytes = 1 << 20} = {}) {
  const w = parts.w, t = parts.entries.get(name);
  if (!t) throw new Error(`${parts.source.name}: no tensor ${name}`);
  const [axis, [a, b]] = cut.rows ? [0, cut.rows] : cut.cols ? [1, cut.cols] : [-1, []];
  if (axis < 0) throw new TypeError("loadSlice: cut is {rows: [a, b]} or {cols: [a, b]}");
  w.call("kw_model_slice_begin", parts.handle, t.i, axis, a, b);
  const {offset, size} = w.resultJSON();
  const buf = w.malloc(Math.min(chunkBytes, Math.max(size, 1)));
  try {
    for (let off = 0; off < size; off += chunkBytes) {
      const n = Math.min(chunkBytes, size - off);
      const bytes = await parts.source.read(offset + off, n);
      if (bytes.length !== n) throw new Error(`${parts.source.name}: short read of ${name} at ${offset + off}`);
      w.u8().set(bytes, buf);
      w.call("kw_model_slice_feed", parts.handle, t.i, buf, n);
    }
  } catch (e) {
    w.exports.kw_model_slice_end(parts.handle, t.i);  // drops the partial load (its error is moot)
    throw e;
  } finally { w.free(buf); }
  w.call("kw_model_slice_end", parts.handle, t.i);
  parts.loaded.add(name);
}
