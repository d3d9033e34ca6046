// lookup-rule.test.mjs — the prompt-lookup rules exist twice: the core's (core/infer/speculative.h:
// draft_lookup and LookupBudget, run by `knot generate --lookup` and the wasm session) and
// bindings/generator.mjs's (draftLookup and LookupBudget, run by the mesh coordinator). The same
// histories and pass outcomes go through both (the core's through kw_draft_lookup /
// kw_lookup_budget) and must give the same drafts and the same sizes; and the budget's counts
// observed: it shrinks after rejected passes, rests, probes, and grows back after kept ones.
import test from "node:test";
import assert from "node:assert/strict";
import {init} from "../../bindings/knotwork.mjs";
import {draftLookup, LookupBudget, LOOKUP_NGRAM_MAX} from "../../bindings/generator.mjs";

const w = await init();
const i32In = (a) => w.copyIn(new Uint8Array(Int32Array.from(a).buffer));
const i32Out = () => { const b = w.resultBytes(); return Array.from(new Int32Array(b.buffer, b.byteOffset, b.length / 4)); };
function coreLookup(hist, k, ngramMax = 0) {
  const p = i32In(hist.length ? hist : [0]);
  try { w.call("kw_draft_lookup", p, hist.length, k, ngramMax); } finally { w.free(p); }
  return i32Out();
}
function coreBudget(k, outcomes) {
  const p = i32In(outcomes.length ? outcomes.flat() : [0]);
  try { w.call("kw_lookup_budget", k, p, outcomes.length); } finally { w.free(p); }
  return i32Out();
}
const jsBudget = (k, outcomes) => {
  const b = new LookupBudget(k), sizes = [b.size];
  for (const [d, a] of outcomes) b.update(d, a), sizes.push(b.size);
  return sizes;
};
// a seeded xorshift: the same histories every run
function rng(seed) { let x = seed >>> 0 || 1; return () => ((x ^= x << 13, x ^= x >>> 17, x ^= x << 5) >>> 0) / 2 ** 32; }

test("draftLookup equals the core's draft_lookup on the same histories (default and explicit n-gram)", () => {
  const r = rng(16);
  let drafted = 0, differ = 0;
  for (let c = 0; c < 400; c++) {
    // small vocabularies and copied spans: long suffix matches at several occurrences
    const vocab = 2 + Math.floor(r() * 6), len = Math.floor(r() * 80), hist = [];
    while (hist.length < len) {
      if (hist.length > 4 && r() < 0.3) { const a = Math.floor(r() * hist.length); hist.push(...hist.slice(a, a + 1 + Math.floor(r() * 16))); }
      else hist.push(Math.floor(r() * vocab));
    }
    const k = Math.floor(r() * 10);
    const js = draftLookup(hist, k), core = coreLookup(hist, k);
    assert.deepEqual(js, core, `default rule, case ${c}: hist ${JSON.stringify(hist)} k ${k}`);
    drafted += js.length;
    for (const n of [1, 3, 6]) {
      const a = draftLookup(hist, k, n);
      assert.deepEqual(a, coreLookup(hist, k, n), `ngramMax ${n}, case ${c}`);
      if (JSON.stringify(a) !== JSON.stringify(js)) differ++;
    }
  }
  assert.ok(drafted > 400, `the histories give drafts (${drafted})`);
  assert.ok(differ > 0, "the longer default n-gram picks other occurrences than n <= 3 on some histories");
  assert.equal(LOOKUP_NGRAM_MAX, 12);
  // the default is the core's: the match only an n-gram of 11 or more finds (n <= 10: 30)
  const h = [9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 20, 0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 30, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11];
  assert.deepEqual(coreLookup(h, 1), [20]);
  assert.deepEqual(draftLookup(h, 1), [20]);
  assert.deepEqual(draftLookup(h, 1, 10), [30]);
  assert.deepEqual(coreLookup(h, 1, 10), [30]);
});

test("LookupBudget equals the core's on the same pass outcomes", () => {
  const r = rng(61);
  for (let c = 0; c < 200; c++) {
    const k = Math.floor(r() * 17), outcomes = [];
    for (let i = 0, n = Math.floor(r() * 60); i < n; i++) {
      const d = r() < 0.2 ? 0 : 1 + Math.floor(r() * k), u = r();
      outcomes.push([d, u < 0.4 ? 0 : u < 0.7 ? d : Math.floor(r() * (d + 1))]);
    }
    assert.deepEqual(jsBudget(k, outcomes), coreBudget(k, outcomes), `case ${c}: k ${k} ${JSON.stringify(outcomes)}`);
  }
});

test("LookupBudget shrinks after rejected passes, rests, probes, and grows back after kept ones", () => {
  for (const sizes of [jsBudget, coreBudget].map((f) => (k, o) => f(k, o))) {
    // K = 8: rejected passes halve 8 -> 4 -> 2 -> 1, then a rejected pass at 1 rests REST passes
    // (size 0, nothing drafted), then a probe of 1; kept passes double 1 -> 2 -> 4 -> 8 (cap 8);
    // a partly kept pass leaves it
    const o = [[8, 0], [4, 0], [2, 0], [1, 0], [0, 0], [0, 0], [0, 0], [0, 0], [1, 1], [2, 2], [4, 4], [8, 8], [8, 3], [8, 0]];
    const s = sizes(8, o);
    assert.deepEqual(s, [8, 4, 2, 1, 0, 0, 0, 0, 1, 2, 4, 8, 8, 8, 4]);
    assert.equal(LookupBudget.REST, 4);
  }
  assert.deepEqual(coreBudget(0, [[0, 0]]), [0, 0]);
});
