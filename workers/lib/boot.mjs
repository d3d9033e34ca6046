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

/**
 * A worker's share of a model, once per isolate and key: the wasm module started, the .knot
 * `knot` of R2 bucket `bucket` opened by its header (reads counted in `stats`), then
 * setup({r2, parts, c}) loads what this worker holds and returns its state, which must
 * carry `parts` (closed when the key changes; on a failed setup at once).
 * boot(key, {bucket, knot, stats}, setup) -> the promise of that state.
 */
export function modelBoot() {
  const cache = bootCache((st) => st.parts.close());
  return (key, {bucket, knot, stats}, setup) => cache(key, async () => {
    await initWasm();
    const r2 = await r2Source(bucket, knot, stats);
    const parts = await openParts(r2);
    try {
      return await setup({r2, parts, c: await parts.config()});
    } catch (e) { await parts.close(); throw e; }
  });
}
