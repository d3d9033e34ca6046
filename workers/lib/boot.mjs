// boot.mjs — what a worker holds at module scope, once per isolate (docs/architecture.md):
// the wasm module, started once, and a boot cache of one value per config key. A station
// (station/index.mjs) and a vocab shard (cobordism/index.mjs) boot alike: the .knot opened
// from R2 by its header, then the tensors that worker holds (modelBoot).
import {wasmModules as wasmModule} from "./wasm.mjs";
import {init} from "../../bindings/knotwork.mjs";
import {openParts} from "../../bindings/mesh.mjs";
import {r2Source} from "./r2.mjs";

/** The wasm module of this isolate, started (once). */
export const initWasm = () => init(wasmModule);

/**
 * A boot cache: one value per isolate and config key. A new key closes the old value
 * first (close(value)); a failed boot is forgotten, so the next request retries it.
 * cache(key, build) -> the promise of build()'s value.
 */
export function bootCache(close) {
  let boot = null;  // {key, promise}
  return (key, build) => {
    if (boot?.key === key) return boot.promise;
    const old = boot;
    boot = {key, promise: (async () => {
      if (old) { const v = await old.promise.catch(() => null); if (v) close(v); }
      return build();
    })()};
    const mine = boot;
    mine.promise.catch(() => { if (boot === mine) boot = null; });
    return mine.promise;
  };
}

/** The dimensions a topology was planned for: a replacement model of another shape is refused. */
export const shapeOf = (c) => ({n_layer: c.n_layer, n_embd: c.n_embd, n_head: c.n_head, n_head_kv: c.n_head_kv,
  head_dim: c.head_dim, n_ff: c.n_ff, n_vocab: c.n_vocab, n_vocab_tensor: c.n_vocab_tensor, tied_embeddings: !!c.tied_embeddings});
/** "n_embd 256 -> 8, n_layer 5 -> 1" for two shapes, "" when equal. */
export const shapeDiff = (a, b) => Object.keys(a).filter((k) => a[k] !== b[k]).map((k) => `${k} ${a[k]} -> ${b[k]}`).join(", ");

/**
 * A worker's share of a model, once per isolate and key: the wasm module started, the .knot
 * `knot` of R2 bucket `bucket` opened by its header (reads counted in `stats`), then
 * setup({r2, parts, c}) loads what this worker holds and returns its state, which must
 * carry `parts` (closed when the key changes; on a failed setup at once).
 * boot(key, {bucket, knot, stats, follow}, setup) -> the promise of that state.
 *
 * The boot follows the R2 object's etag: with `follow` (a worker passes it at the start of a
 * session, one R2 head per session) the object is headed, and when it was replaced under the
 * same key the worker boots again on the new object. A replacement of the same shape
 * (shapeOf) is served from then on; one of another shape is refused at every boot with an
 * error naming the key, both etags and what changed (the topology was planned for the old).
 */
export function modelBoot() {
  const cache = bootCache((st) => st.parts.close());
  let current = null;  // {key, etag}: what this isolate booted last (successfully)
  let planned = null;  // {key, etag, shape}: the first model this isolate booted for the key
  return async (key, {bucket, knot, stats, follow = false}, setup) => {
    let etag = current?.key === key ? current.etag : null;
    if (follow || etag === null) {
      const head = await bucket.head(knot);
      if (!head) throw new Error(`R2: no object ${knot} in the model bucket`);
      etag = head.etag;
    }
    return cache(`${key}|${etag}`, async () => {
      await initWasm();
      const r2 = await r2Source(bucket, knot, stats);
      const parts = await openParts(r2);
      try {
        const c = await parts.config();
        if (planned?.key === key && planned.etag !== r2.etag) {
          const diff = shapeDiff(planned.shape, shapeOf(c));
          if (diff) throw new Error(`R2 object ${knot} was replaced (etag ${planned.etag} -> ${r2.etag}) by a model of another shape ` +
                                    `(${diff}); this mesh was planned for the old one: re-plan it (knot plan) and redeploy`);
        }
        const st = await setup({r2, parts, c});
        if (planned?.key !== key) planned = {key, etag: r2.etag, shape: shapeOf(c)};
        current = {key, etag: r2.etag};  // what R2 held when booted (a later head may name another)
        return st;
      } catch (e) { await parts.close(); throw e; }
    });
  };
}
