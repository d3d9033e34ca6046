// Shard top-k through the ABI as arrays (kw_topk_lse, kw_topk_merge, kw_generator_step_topk):
// the values arrive as the core computed them, checked against a JS computation.
import {test} from "node:test";
import assert from "node:assert/strict";

import * as kw from "../../bindings/knotwork.mjs";
import {topkLse, mergeTopK} from "../../bindings/generator.mjs";

// xorshift: reproducible logits with ties and -inf entries
function logitsOf(n, seed) {
  const x = new Float32Array(n);
  let s = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    x[i] = s % 17 === 0 ? -Infinity : Math.fround(((s % 2000) - 1000) / 97);
  }
  return x;
}

function reference(x, v0, k) {
  const idx = Array.from(x, (_, i) => i).sort((a, b) => x[b] - x[a] || a - b).slice(0, k);
  const mx = Math.max(...x);
  let sum = 0, min = Infinity;
  for (const v of x) { sum += Math.exp(v - mx); if (Number.isFinite(v)) min = Math.min(min, v); }
  return {ids: idx.map((i) => i + v0), logits: idx.map((i) => x[i]), lse: mx + Math.log(sum), min};
}

test("topkLse: best k ids and their exact f32 logits, the slice's lse and lowest finite logit", async () => {
  await kw.init();
  for (const [n, v0, k] of [[700, 0, 9], [333, 1000, 40], [5, 20, 9]]) {
    const x = logitsOf(n, n + v0), got = await topkLse(x, v0, v0 + n, k), want = reference(x, v0, k);
    assert.deepEqual(got.ids, want.ids);
    assert.deepEqual(got.logits, want.logits);
    assert.equal(got.min, want.min);
    assert.ok(Math.abs(got.lse - want.lse) <= 1e-12 * Math.abs(want.lse), `lse ${got.lse} vs ${want.lse}`);
  }
});

test("mergeTopK of disjoint slices equals the top-k of the whole; a part of unequal lengths is refused naming it", async () => {
  const V = 1536, k = 24, x = logitsOf(V, 7), cuts = [0, 100, 101, 900, V];
  const parts = [];
  for (let i = 0; i + 1 < cuts.length; i++) parts.push(await topkLse(x.subarray(cuts[i], cuts[i + 1]), cuts[i], cuts[i + 1], k));
  const merged = await mergeTopK(parts, k), whole = await topkLse(x, 0, V, k);
  assert.deepEqual(merged.ids, whole.ids);
  assert.deepEqual(merged.logits, whole.logits);
  assert.equal(merged.min, whole.min);
  assert.ok(Math.abs(merged.lse - whole.lse) <= 1e-12 * Math.abs(whole.lse), `lse ${merged.lse} vs ${whole.lse}`);
  await assert.rejects(mergeTopK([parts[0], {ids: [1, 2], logits: [0], lse: 0, min: 0}], 4),
                       /kw_topk_merge: part 1: top-k has 2 ids but 1 logits/);
  await assert.rejects(mergeTopK([{ids: [1], logits: [0], lse: NaN, min: 0}], 4), /part 0: top-k lse is not a number/);
  assert.deepEqual(await mergeTopK([], 4), {ids: [], logits: [], lse: null, min: null});
});
