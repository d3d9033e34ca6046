// The core Generator through the ABI (bindings/generator.mjs), as a mesh coordinator uses
// it: vocab shards send top-k + lse (+ min), the coordinator merges and samples. With the
// same seed it must pick the same ids (and stream the same text) as sampling from the full
// logits — for greedy, and for top-k / top-p / min-p whenever k covers the kept set — and
// a Generator fed full logits must reproduce model.generate() exactly.
import {test} from "node:test";
import assert from "node:assert/strict";

import * as kw from "../../bindings/knotwork.mjs";
import {openParts, topkLse, mergeTopK, Generator} from "../../bindings/mesh.mjs";
import {sharedModel} from "./helpers.mjs";

const NAME = "stories260K-pad256-llama-q4_k_m.gguf";
const SETTINGS = [
  {what: "greedy", temperature: 0},
  {what: "top-k 8", temperature: 1, topK: 8, topP: 1, minP: 0, seed: 11},
  {what: "top-p 0.6 alone", temperature: 1, topK: 0, topP: 0.6, minP: 0, seed: 13},
  {what: "min-p 0.2 alone", temperature: 1.2, topK: 0, topP: 1, minP: 0.2, seed: 14},
  {what: "defaults", temperature: 0.8, seed: 15},
  {what: "top-p 0.9 + min-p 0.05", temperature: 1, topK: 0, topP: 0.9, minP: 0.05, seed: 16},
];
const K = 32, CUTS = [0, 100, 250, 400, 512];

// Tokens top-k / top-p / min-p keep on the full logits (what the shards' k must cover).
function kept(logits, {topK = 40, topP = 0.95, minP = 0.05}) {
  const s = Array.from(logits).sort((a, b) => b - a);
  let n = topK > 0 ? Math.min(topK, s.length) : s.length;
  if (topP < 1) {
    let tot = 0, cum = 0;
    for (let i = 0; i < n; i++) tot += Math.exp(s[i] - s[0]);
    for (let i = 0; i < n; i++) { cum += Math.exp(s[i] - s[0]); if (cum >= topP * tot) { n = i + 1; break; } }
  }
  if (minP > 0) { let m = 0; while (m < n && Math.exp(s[m] - s[0]) >= minP) m++; n = Math.max(m, 1); }
  return n;
}

test("merged shard top-k samples the same ids and text as the full logits (seeded)", async (t) => {
  const p = sharedModel(t, NAME);
  if (!p) return;
  const model = await kw.openModel(p);
  const prompt = model.tokenize("Once upon a time");
  let compared = 0;
  for (const s of SETTINGS) {
    const opts = {...s, maxTokens: 48, ignoreEos: true};
    const full = await Generator.open(model, opts), part = await Generator.open(model, opts);
    const sess = model.session({nCtx: 64});
    full.start(prompt);
    part.start(prompt);
    let logits = sess.eval(prompt).slice();
    for (let i = 0; !full.done; i++) {
      if (s.temperature > 0 && kept(logits, s) >= K) break;  // k does not cover: not comparable
      const shards = [];
      for (let j = 0; j + 1 < CUTS.length; j++) shards.push(await topkLse(logits.subarray(CUTS[j], CUTS[j + 1]), CUTS[j], CUTS[j + 1], K));
      const merged = await mergeTopK(shards, K);
      const a = full.step(logits), b = part.step(merged);
      assert.deepEqual(b, a, `${s.what} step ${i}`);
      compared++;
      if (!a.done) logits = sess.eval([a.id]).slice();
    }
    if (full.done) {
      assert.equal(full.reason, "length");
      assert.equal(part.text, full.text);
      assert.ok(new Set(full.ids).size > 3, `${s.what}: degenerate run`);
    }
    sess.free();
    full.free();
    part.free();
  }
  assert.ok(compared >= 150, `only ${compared} steps compared`);
  model.close();
});

test("a Generator over full logits reproduces model.generate() (ids, text, reason)", async (t) => {
  const p = sharedModel(t, NAME);
  if (!p) return;
  const model = await kw.openModel(p);
  const prompt = model.tokenize("Once upon a time");
  for (const s of [...SETTINGS, {what: "stop string", temperature: 0.7, seed: 5, stop: ["ed", "in the"]},
                   {what: "context", temperature: 0, ignoreEos: true, nCtx: 24}]) {
    const opts = {maxTokens: 32, ...s};
    const want = await model.complete(prompt, opts);
    const gen = await Generator.open(model, {...opts, nCtx: opts.nCtx ?? 64});
    const sess = model.session({nCtx: opts.nCtx ?? 64});
    gen.start(prompt);
    let logits = sess.eval(prompt);
    while (!gen.done) {
      const st = gen.step(logits);
      if (!st.done) logits = sess.eval([st.id]);
    }
    assert.deepEqual(gen.ids, want.ids, s.what);
    assert.equal(gen.text, want.text, s.what);
    assert.equal(gen.reason, want.reason, s.what);
    sess.free();
    gen.free();
  }
  model.close();
});

test("Generator on mesh parts (tokenizer only), misuse errors, JSON edge values", async (t) => {
  const p = sharedModel(t, NAME);
  if (!p) return;
  const model = await kw.openModel(p);
  const knot = model.toKnot();
  const parts = await openParts(kw.bytesSource(knot, "m.knot"));  // no tensors loaded
  const gen = await Generator.open(parts, {temperature: 0, maxTokens: 2});
  assert.throws(() => gen.step(new Float32Array(512)), /start\(\) before step/);
  gen.start([1, 403]);
  const lg = new Float32Array(512).fill(-1);
  lg[300] = 5;
  const s1 = gen.step(await topkLse(lg, 0, 512, 4));
  assert.equal(s1.id, 300);
  assert.throws(() => gen.step(new Float32Array(10)), /10 logits, vocab has 512/);
  assert.throws(() => gen.step({ids: [1, 2], logits: [0], lse: 0}), /2 ids but 1 logits/);
  const s2 = gen.step({ids: [7], logits: [1], lse: null, min: null});
  assert.deepEqual([s2.id, s2.done, s2.reason], [7, true, "length"]);
  assert.throws(() => gen.step(lg), /already finished \(length\)/);
  gen.free();
  // an empty slice: lse -inf and min +inf travel as null and merge away
  const empty = await topkLse(new Float32Array(0), 5, 5, 3);
  assert.deepEqual(empty, {ids: [], logits: [], lse: null, min: null});
  const m = await mergeTopK([empty, await topkLse(lg, 0, 512, 2)], 2);
  assert.deepEqual(m.ids, [300, 0]);
  await assert.rejects(mergeTopK({}, 2), /JSON array/);
  await parts.close();
  model.close();
});

// Generator.stepDraft over a merged top-k (kw_generator_step_draft_topk, Sampler::sample_draft_topk):
// greedy keeps the draft only when it is the argmax; sampling keeps it with probability
// p(draft) and otherwise draws from p without it, so the token is distributed as p (checked
// over many seeds against the softmax of the list, and against plain steps).
test("stepDraft over a top-k: greedy accepts the argmax only; sampled ids are distributed as p", async (t) => {
  const p = sharedModel(t, NAME);
  if (!p) return;
  const model = await kw.openModel(p);
  try {
    const logits = [2, 1, 0.5, 0], ids = [10, 20, 30, 40];
    const mx = Math.max(...logits), lse = mx + Math.log(logits.reduce((a, v) => a + Math.exp(v - mx), 0));
    const top = {ids, logits, lse, min: 0};
    const greedy = await Generator.open(model, {temperature: 0, maxTokens: 4});
    greedy.start([1]);
    assert.deepEqual([greedy.stepDraft(top, 10)].map((s) => [s.id, s.accepted]), [[10, true]]);
    assert.deepEqual([greedy.stepDraft(top, 20)].map((s) => [s.id, s.accepted]), [[10, false]]);
    greedy.free();
    const N = 1500, want = logits.map((v) => Math.exp(v - lse));
    const draftCount = new Map(), plainCount = new Map();
    let accepted = 0;
    for (let seed = 1; seed <= N; seed++) {
      const g = await Generator.open(model, {temperature: 1, topK: 4, seed, maxTokens: 4});
      g.start([1]);
      const s = g.stepDraft(top, 20);
      if (s.accepted) { accepted++; assert.equal(s.id, 20); } else assert.notEqual(s.id, 20);
      draftCount.set(s.id, (draftCount.get(s.id) ?? 0) + 1);
      g.start([1]);
      const q = g.step(top);
      plainCount.set(q.id, (plainCount.get(q.id) ?? 0) + 1);
      g.free();
    }
    ids.forEach((id, i) => {
      const sd = Math.sqrt(N * want[i] * (1 - want[i]));
      for (const [what, c] of [["stepDraft", draftCount], ["step", plainCount]])
        assert.ok(Math.abs((c.get(id) ?? 0) - N * want[i]) < 5 * sd, `${what}: id ${id} drawn ${c.get(id) ?? 0} of ${N}, p = ${want[i].toFixed(3)}`);
    });
    const sd = Math.sqrt(N * want[1] * (1 - want[1]));
    assert.ok(Math.abs(accepted - N * want[1]) < 5 * sd, `the draft was kept ${accepted} of ${N} times, p(draft) = ${want[1].toFixed(3)}`);
  } finally { model.close(); }
});
