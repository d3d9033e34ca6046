// Speculative decoding on the mesh under workerd (Miniflare): prompt-lookup drafts verified
// in one pass through the stations (a decode frame of 1 + K rows; the exit norms every row;
// the shards answer a top-k list per row; rejected rows are rewound by the next frame, which
// starts below the positions the stations hold). Greedy ids equal plain mesh decoding's and
// the single process's (plain and with lookup), on stations, split layers and a chain.
import {test} from "node:test";
import assert from "node:assert/strict";
import {sharedKnot, synthKnot, single, meshFor, SYNTH_QWEN} from "./helpers.mjs";
import {draftLookup} from "../../bindings/generator.mjs";

// the reply repeats much of the prompt: drafts are found and mostly kept
const REPEAT = "Lily had a red ball. Tom had a blue ball. Lily had a red ball. Tom had a blue ball. Lily had a red ball. Tom";

test("draftLookup: the tokens after the latest earlier match of the last n-gram (n = 12 .. 1 by default)", () => {
  assert.deepEqual(draftLookup([1, 2, 3, 9, 1, 2, 3], 3), [9, 1, 2]);          // 3-gram [1 2 3] at 0
  assert.deepEqual(draftLookup([5, 1, 2, 7, 8, 4, 2], 2), [7, 8]);             // only the 1-gram [2] matches
  assert.deepEqual(draftLookup([1, 2, 1, 2, 6, 1, 2], 4), [6, 1, 2]);          // latest match wins, cut at the end
  assert.deepEqual(draftLookup([1, 2, 3], 4), []);
  assert.deepEqual(draftLookup([4, 4], 0), []);
});

async function sameWithLookup(t, bytes, counts, prompt, options, lookup = 4) {
  const want = await single(bytes, prompt, options);
  const wantSpec = await single(bytes, prompt, {...options, lookup});
  assert.deepEqual(wantSpec.ids, want.ids, "single process: lookup == plain (greedy)");
  assert.ok(want.ids.length >= 8, "a non-trivial continuation");
  const mesh = await meshFor(bytes, counts);
  try {
    const plain = await mesh.run({ids: want.promptIds, options});
    assert.equal(plain.error, undefined, plain.error?.error);
    const spec = await mesh.run({ids: want.promptIds, options: {...options, lookup}});
    assert.equal(spec.error, undefined, spec.error?.error);
    const what = JSON.stringify(counts);
    assert.deepEqual(plain.summary.ids, want.ids, `${what}: plain mesh vs single process`);
    assert.deepEqual(spec.summary.ids, want.ids, `${what}: mesh with lookup vs single process`);
    assert.equal(spec.summary.text, want.text);
    const sp = spec.summary.speculative;
    assert.equal(sp.lookup, lookup);
    assert.ok(sp.drafted > 0 && sp.accepted > 0, `${what}: drafts found and kept: ${JSON.stringify(sp)}`);
    assert.ok(sp.accepted <= sp.drafted);
    assert.equal(sp.acceptance, sp.accepted / sp.drafted);
    assert.ok(spec.summary.passes < plain.summary.passes, `${what}: fewer passes (${spec.summary.passes} vs ${plain.summary.passes})`);
    const last = spec.tokens.at(-1).telemetry.speculative;
    assert.deepEqual(last, {drafted: sp.drafted, accepted: sp.accepted, acceptance: sp.acceptance});
    return {spec, mesh, sp};
  } finally { await mesh.close(); }
}

test("lookup on the mesh: greedy ids == plain mesh == single process (2 stations; 4 stations)", async (t) => {
  const bytes = await sharedKnot(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!bytes) return;
  const options = {maxTokens: 40, temperature: 0};
  await sameWithLookup(t, bytes, {stations: [2, 3], shards: 2}, REPEAT, options);
  await sameWithLookup(t, bytes, {stations: [1, 1, 1, 2], shards: 3}, REPEAT, options, 6);
});

test("lookup on the mesh: a chain, and split layers (qwen2 stories; synth qwen2)", async (t) => {
  const qwen = await sharedKnot(t, "stories260K-pad256-qwen2-q4_k_m.gguf");
  if (!qwen) return;
  await sameWithLookup(t, qwen, {stations: [1, 3, 1], shards: 2, chain: true}, REPEAT, {maxTokens: 40, temperature: 0});
  const q = synthKnot(t, "qwen", SYNTH_QWEN);
  if (!q) return;
  // a synth model's greedy reply cycles; the lookup drafts from the cycle
  const prompt = [1, 17, 250, 99, 3, 288, 42, 160, 17, 250, 99, 3, 288, 42, 160, 17, 250];
  const options = {maxTokens: 32, temperature: 0, ignoreEos: true};
  await sameWithLookup(t, q, {stations: [1, 3], shards: 2, slices: 2}, prompt, options);
  await sameWithLookup(t, q, {stations: [2, 2], shards: 2, slices: 2, chain: true}, prompt, options);
});

// The round trips of a pass, observed through the coordinator's link counter (summary.messages):
// a greedy pass is the stations' messages plus one lm-head message per shard group, with or
// without drafts — the drafts' and the pending token's embedding rows come from what the
// generation has seen (workers/coordinator/rows.mjs) and the verify pass's topRow answer, so
// no embed fan-out follows prefill. Prefill's messages are the same in both runs (same
// prompt, same chunks), so messages(plain) - messages(lookup) = (passes(plain) - passes(lookup)) x m.
test("lookup on the mesh: a pass with drafts makes the round trips of a plain greedy step (no embed fan-out)", async (t) => {
  const bytes = await sharedKnot(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!bytes) return;
  const options = {maxTokens: 40, temperature: 0};
  const want = await single(bytes, REPEAT, options);
  // m: messages per greedy pass (station members, or 1 down a chain, + shard groups)
  for (const [counts, m] of [[{stations: [2, 3], shards: 2}, 2 + 2], [{stations: [2, 3], shards: 4, maxLinks: 4}, 2 + 2],
                             [{stations: [1, 3, 1], shards: 2, chain: true}, 1 + 2]]) {
    const what = JSON.stringify(counts);
    const mesh = await meshFor(bytes, counts);
    try {
      const before = await mesh.stats();
      // two context sizes: the second run must not reuse the first one's held prefix
      const plain = await mesh.run({ids: want.promptIds, options: {...options, nCtx: 256}});
      assert.equal(plain.error, undefined, plain.error?.error);
      const mid = await mesh.stats();
      const spec = await mesh.run({ids: want.promptIds, options: {...options, nCtx: 320, lookup: 4}});
      assert.equal(spec.error, undefined, spec.error?.error);
      const after = await mesh.stats();
      assert.deepEqual(spec.summary.ids, want.ids, `${what}: ids`);
      const p = plain.summary, s = spec.summary, sp = s.speculative;
      assert.deepEqual([p.cachedTokens, s.cachedTokens], [0, 0], `${what}: both runs prefill the whole prompt`);
      assert.ok(sp.verifyPasses > 0 && sp.accepted > 0, `${what}: drafts verified and kept: ${JSON.stringify(sp)}`);
      assert.ok(s.passes < p.passes);
      assert.equal(p.messages - s.messages, (p.passes - s.passes) * m,
                   `${what}: plain ${p.messages} messages in ${p.passes} passes, lookup ${s.messages} in ${s.passes} (${m} a pass)`);
      // the shards saw the same embed frames in both runs: prefill's only
      const embeds = (a, b) => Object.keys(b).filter((k) => k.startsWith("sh")).reduce((n, k) => n + (b[k].stats.embeds - (a[k]?.stats.embeds ?? 0)), 0);
      assert.equal(embeds(mid, after), embeds(before, mid), `${what}: shard embed frames, lookup vs plain`);
      // every row fed after prefill (a pass: the pending token + its drafts) came with an
      // lm-head answer (rowsPrefetched) or from the rows seen (rowsCached)
      assert.equal(s.rowsPrefetched + sp.rowsCached, s.passes + sp.drafted, `${what}: rows of the passes`);
    } finally { await mesh.close(); }
  }
});

test("rejected drafts rewind the stations: the next frame starts below the held positions", async (t) => {
  const bytes = await sharedKnot(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!bytes) return;
  const prompt = "Once upon a time there was a girl. Once upon a time there was a boy. Once upon a time there was a";
  const options = {maxTokens: 40, temperature: 0};
  const want = await single(bytes, prompt, options);
  const mesh = await meshFor(bytes, {stations: [2, 3], shards: 2});
  try {
    const r = await mesh.run({ids: want.promptIds, options: {...options, lookup: 5}});
    assert.equal(r.error, undefined, r.error?.error);
    assert.deepEqual(r.summary.ids, want.ids);
    const sp = r.summary.speculative;
    const st = await mesh.stats();
    if (sp.accepted < sp.drafted) {
      assert.ok(st.st0.stats.rewinds > 0 && st.st1.stats.rewinds > 0, `rejections rewound each station: ${JSON.stringify(sp)}`);
    }
    assert.ok(sp.accepted < sp.drafted, `some drafts rejected on this prompt (${JSON.stringify(sp)}), so the rewind was exercised`);
  } finally { await mesh.close(); }
});

test("lookup with seeded sampling on the mesh: a valid run, drafts verified by the acceptance rule", async (t) => {
  const bytes = await sharedKnot(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!bytes) return;
  const mesh = await meshFor(bytes, {stations: [2, 3], shards: 2});
  try {
    const options = {maxTokens: 32, temperature: 0.7, topK: 20, seed: 11, lookup: 4};
    const a = await mesh.run({prompt: REPEAT, options});
    const b = await mesh.run({prompt: REPEAT, options});
    assert.equal(a.error, undefined, a.error?.error);
    assert.deepEqual(a.summary.ids, b.summary.ids, "same seed, same draws");
    assert.ok(a.summary.speculative.drafted > 0);
    assert.equal(a.summary.ids.length, 32);
  } finally { await mesh.close(); }
});

test("lookup option: out of range is an error naming it", async (t) => {
  const bytes = await sharedKnot(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!bytes) return;
  const mesh = await meshFor(bytes, {stations: [5], shards: 1});
  try {
    // refused where the request enters, before anything streams (tests/workers/requests.test.mjs)
    await assert.rejects(mesh.run({prompt: "Once", options: {lookup: -1}}), /HTTP 400: .*options\.lookup must be in \[0, 64\], got -1/);
    await assert.rejects(mesh.run({prompt: "Once", options: {lookup: 1.5}}), /HTTP 400: .*options\.lookup must be an integer, got 1\.5/);
  } finally { await mesh.close(); }
});
