// partials.mjs — the merge rule of a mesh (docs/architecture.md): the pieces of a layer
// (head-group attention partials, FFN-column partials) and of the embedding (one per vocab
// shard) are partial residuals, and the whole is their sum. One function sums them for
// every place that does: the coordinator's loop (coordinator/mesh.mjs), a split station's
// leader in a chain (station/index.mjs), a shard group's hub (cobordism/index.mjs) and the
// tests' in-process mesh (tests/wasm/local-mesh.mjs).

/** acc[i] += p[i] for each partial, in order; a partial of another length throws. Returns acc. */
export function addPartials(acc, ...parts) {
  for (const p of parts) {
    if (p.length !== acc.length) throw new Error(`partial of ${p.length} values, expected ${acc.length}`);
    for (let i = 0; i < acc.length; i++) acc[i] += p[i];
  }
  return acc;
}
