// lookup-acceptance.test.mjs — the teacher-forced lookup counter (bench/lib/lookup-acceptance.mjs)
// that bench/lookup-acceptance.mjs and bench/estimate-7b.mjs price the 7B speculation with,
// on hand-made replies whose passes are worked out by hand (no model, no tokenizer).
import test from "node:test";
import assert from "node:assert/strict";
import {lookupPasses} from "../../bench/lib/lookup-acceptance.mjs";

const range = (a, n) => Array.from({length: n}, (_, i) => a + i);

test("a reply that copies the prompt: every draft accepted, K + 1 tokens a pass", () => {
  const prompt = range(10, 20);
  const r = lookupPasses(prompt, prompt, 4);
  // reply[0] from the prefill; passes at reply positions 1, 6, 11, 16 (the last one has 4 left)
  assert.deepEqual(r.passes, [{rows: 5, drafted: 4, accepted: 4}, {rows: 5, drafted: 4, accepted: 4},
                              {rows: 5, drafted: 4, accepted: 4}, {rows: 5, drafted: 4, accepted: 4}]);
  assert.equal(r.acceptance, 1);
  assert.equal(r.tokens, 19);
  assert.equal(r.tokensPerPass, 19 / 4);
  assert.deepEqual(r.rows, {5: 4});
});

test("a reply with no repeats: nothing drafted, one token a pass", () => {
  const r = lookupPasses(range(1, 10), range(100, 20), 6);
  assert.equal(r.drafted, 0);
  assert.equal(r.acceptance, 0);
  assert.equal(r.passes.length, 19);
  assert.equal(r.tokensPerPass, 1);
  assert.equal(r.verifyPasses, 0);
});

test("drafts follow the latest earlier occurrence; the pass keeps the matching prefix and one more", () => {
  // [1] last seen at 0: drafts 2 3 4 5, the reply has 2 3 then 9 (accepted 2, 9 is the bonus);
  // then 9 and 10 never occurred before: a plain pass
  const r = lookupPasses([1, 2, 3, 4, 5], [1, 2, 3, 9, 10], 4);
  assert.deepEqual(r.passes, [{rows: 5, drafted: 4, accepted: 2}, {rows: 1, drafted: 0, accepted: 0}]);
  assert.equal(r.acceptance, 0.5);
  assert.equal(r.tokensPerPass, 2);
  // the latest occurrence wins: [1 2] occurs at 1 and 5, the drafts come from after 5
  const s = lookupPasses([5, 1, 2, 7, 6, 1, 2, 8], [1, 2, 8, 9], 6);
  assert.deepEqual(s.passes, [{rows: 4, drafted: 3, accepted: 2}]);
});

test("the room: K, the tokens left and the chunk bound the drafts", () => {
  const p = range(10, 30);
  assert.equal(lookupPasses(p, p, 6, {chunk: 3}).passes[0].drafted, 2);  // chunk - 1
  assert.equal(lookupPasses(p, p.slice(0, 3), 6).passes[0].drafted, 2);  // 2 tokens left
  assert.equal(lookupPasses(p, p, 0).drafted, 0);
  assert.throws(() => lookupPasses(p, p, -1), /k must be an integer/);
});

test("ngramMax: a longer n-gram picks the occurrence the reply copies", () => {
  // at the second pass the history ends 7 1 2: [1 2] was last seen before 4, [7 1 2] before 3 (the copy)
  const prompt = [7, 1, 2, 3, 6, 1, 2, 4], reply = [7, 1, 2, 3];
  assert.deepEqual(lookupPasses(prompt, reply, 1, {ngramMax: 2}).passes[1], {rows: 2, drafted: 1, accepted: 0});
  assert.deepEqual(lookupPasses(prompt, reply, 1, {ngramMax: 3}).passes[1], {rows: 2, drafted: 1, accepted: 1});
});

test("adaptive: drafts that keep failing shrink the passes' rows; the same tokens, fewer rows than K every pass", () => {
  // every draft the history offers is wrong: after 1 comes 20, 21, 22, ... in turn
  const prompt = range(1, 9), reply = [1];
  for (let i = 0; i < 30; i++) reply.push(20 + i, 1);
  const fixed = lookupPasses(prompt, reply, 6, {adaptive: false}), adaptive = lookupPasses(prompt, reply, 6);
  assert.equal(adaptive.accepted, 0);
  assert.equal(adaptive.tokens, fixed.tokens);
  const sizes = adaptive.passes.filter((p) => p.drafted).map((p) => p.drafted);
  assert.equal(sizes[0], 6);
  assert.ok(sizes[1] <= 3 && sizes[2] <= 1, `halved after each rejected pass: ${sizes}`);
  assert.ok(adaptive.verifyPasses < fixed.verifyPasses, `resting passes draft nothing: ${adaptive.verifyPasses} vs ${fixed.verifyPasses}`);
  const rows = (r) => r.passes.reduce((a, p) => a + p.rows, 0);
  assert.ok(rows(adaptive) < rows(fixed) && rows(adaptive) <= adaptive.passes.length * 1.5, `rows ${rows(adaptive)} vs ${rows(fixed)}`);
  // then a copy: kept passes grow the drafts back to K
  const copy = lookupPasses([...prompt, ...range(100, 60)], [...reply, ...range(100, 60)], 6);
  const tail = copy.passes.slice(-5).map((p) => p.drafted);
  assert.ok(tail.slice(0, 4).every((d) => d === 6), `back at K: ${tail}`);
});
