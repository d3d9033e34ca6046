// The mesh under workerd (Miniflare): stations, vocab shards and the coordinator as separate
// Worker scripts produce exactly the single-process wasm generation.
import {test} from "node:test";
import assert from "node:assert/strict";
import {sharedKnot, synthKnot, single, meshFor, SYNTH_QWEN, SYNTH_QWEN3, SYNTH_TIED} from "./helpers.mjs";
import {openModel, bytesSource} from "../../bindings/knotwork.mjs";
import {shardK} from "../../workers/coordinator/mesh.mjs";

const PROMPT = "Once upon a time";
const GREEDY = {maxTokens: 24, temperature: 0};

async function same(t, bytes, counts, {prompt = PROMPT, options = GREEDY, meshOpts = {}, check} = {}) {
  const want = await single(bytes, prompt, options);
  const mesh = await meshFor(bytes, counts, meshOpts);
  try {
    const r = await mesh.run({ids: want.promptIds, options});
    assert.equal(r.error, undefined, r.error?.error);
    assert.deepEqual(r.summary.ids, want.ids, `${JSON.stringify(counts)}: mesh ids vs single process`);
    assert.equal(r.summary.text, want.text);
    assert.equal(r.summary.reason, want.reason);
    assert.ok(want.ids.length >= 4, "a non-trivial continuation");
    await check?.(r, mesh);
    return r;
  } finally { await mesh.close(); }
}

test("1 station + 1 shard: greedy ids == single process (llama Q4_K_M)", async (t) => {
  const bytes = await sharedKnot(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!bytes) return;
  await same(t, bytes, {stations: [5], shards: 1}, {check: (r) => {
    assert.ok(r.telemetry.some((e) => e.event === "route"));
    assert.ok(r.telemetry.some((e) => e.event === "prefill_completed"));
    assert.ok(r.summary.hops > 0);
    // greedy: every decode step's input row came with the lm-head answer (no embed round trip)
    assert.equal(r.summary.rowsPrefetched, r.summary.nDecoded);
  }});
});

test("2 stations + 4 shards: greedy ids == single process (llama, and qwen2 with biases)", async (t) => {
  for (const name of ["stories260K-pad256-llama-q4_k_m.gguf", "stories260K-pad256-qwen2-q4_k_m.gguf"]) {
    const bytes = await sharedKnot(t, name);
    if (!bytes) return;
    await same(t, bytes, {stations: [2, 3], shards: 4});
  }
});

test("3 uneven stations + 3 uneven shards: greedy ids == single process (qwen2)", async (t) => {
  const bytes = await sharedKnot(t, "stories260K-pad256-qwen2-q4_k_m.gguf");
  if (!bytes) return;
  await same(t, bytes, {stations: [1, 3, 1], vocab: [0, 37, 300, 512]});
});

test("a layer range split into 2 head groups + 2 FFN slices: greedy ids == single process (synth qwen2, biases)", async (t) => {
  const bytes = synthKnot(t, "qwen", SYNTH_QWEN);
  if (!bytes) return;
  await same(t, bytes, {stations: [1, 3], shards: 2, slices: 2}, {prompt: [1, 17, 250, 99, 3, 288, 42, 160], check: (r) => {
    assert.equal(r.telemetry.find((e) => e.event === "route").members, 4);
  }});
});

// The stations take their tensors from the core's architecture table (model info), so an
// architecture added there (qwen3's q/k norms, head_dim != hidden / heads) runs on the mesh.
test("qwen3 (q/k norms, head_dim 128 != 256/4): 2 stations, and a split range in a chain == single process", async (t) => {
  const bytes = synthKnot(t, "qwen3", SYNTH_QWEN3);
  if (!bytes) return;
  const opts = {prompt: [1, 17, 250, 99, 3, 288, 42, 160], options: {maxTokens: 12, temperature: 0, ignoreEos: true}};
  await same(t, bytes, {stations: [1, 2], shards: 2}, opts);
  await same(t, bytes, {stations: [2, 1], shards: 2, slices: 2, chain: true}, opts);
});

test("tied embeddings with a padded vocab: greedy ids == single process (synth llama)", async (t) => {
  const bytes = synthKnot(t, "tied", SYNTH_TIED);
  if (!bytes) return;
  await same(t, bytes, {stations: [1, 1], vocab: [0, 97, 211, 300]}, {prompt: [1, 17, 250, 99, 3, 288, 42, 160],
    options: {maxTokens: 12, temperature: 0, ignoreEos: true}});
});

test("sampled output with a seed (temperature, top-k, top-p, repeat penalty): ids == single process", async (t) => {
  const bytes = await sharedKnot(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!bytes) return;
  for (const seed of [1, 42])
    await same(t, bytes, {stations: [2, 3], shards: 3}, {options: {maxTokens: 32, temperature: 0.9, topK: 40, topP: 0.95,
      repeatPenalty: 1.1, seed}, check: (r) => {
      // the core Generator samples the shards' merged top-k: k = top-k 40 + the distinct
      // penalised ids of the window (here the whole prompt)
      const route = r.telemetry.find((e) => e.event === "route");
      assert.equal(route.logits, "top-k+lse");
      assert.equal(route.k, 40 + new Set(r.summary.promptIds).size);
      assert.ok(r.summary.shardK > route.k, `k grows with the window: ${r.summary.shardK}`);
    }});
});

test("shards' k (shardK): bounded samplers use the merged top-k, unbounded ones the full slices", () => {
  const p = {n_vocab: 512, temperature: 0.8, top_k: 40, top_p: 0.95, min_p: 0.05, repeat_penalty: 1, repeat_last_n: 64,
             presence_penalty: 0, frequency_penalty: 0};
  assert.deepEqual(shardK(p, [1, 2, 2]), {full: false, k: 40});
  assert.deepEqual(shardK({...p, temperature: 0}, [1, 2, 2]), {full: false, k: 1});
  assert.deepEqual(shardK({...p, temperature: 0}, [1, 2, 2], 5), {full: false, k: 5});
  assert.deepEqual(shardK({...p, presence_penalty: 0.5}, [1, 2, 2, 3]), {full: false, k: 43});  // + distinct ids
  assert.deepEqual(shardK({...p, frequency_penalty: 0.5, repeat_last_n: 2}, [1, 2, 3, 3]), {full: false, k: 41});
  assert.deepEqual(shardK({...p, repeat_penalty: 1.3, repeat_last_n: 0}, [1, 2, 3]), {full: false, k: 40});  // no window
  assert.deepEqual(shardK({...p, repeat_penalty: 1.3, repeat_last_n: -1}, Array.from({length: 600}, (_, i) => i)), {full: false, k: 512});
  assert.deepEqual(shardK({...p, top_k: 0}, [1]), {full: true});           // top-p / min-p alone: unbounded
  assert.deepEqual(shardK({...p, top_k: 512}, [1]), {full: true});
  assert.deepEqual(shardK({...p, presence_penalty: -0.5}, [1]), {full: true});  // raises old tokens
  assert.deepEqual(shardK({...p, repeat_penalty: 0.9}, [1]), {full: true});
});

test("top-k off (top-p and min-p alone): every shard sends its full slice; ids == single process", async (t) => {
  const bytes = await sharedKnot(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!bytes) return;
  await same(t, bytes, {stations: [2, 3], shards: 3}, {options: {maxTokens: 24, temperature: 1, topK: 0, topP: 0.9, minP: 0.02,
    seed: 9}, check: (r) => assert.equal(r.telemetry.find((e) => e.event === "route").logits, "full")});
});

test("presence / frequency penalties and logprobs (merged top-k, and full slices for a negative penalty) == single process", async (t) => {
  const bytes = await sharedKnot(t, "stories260K-pad256-qwen2-q4_k_m.gguf");
  if (!bytes) return;
  for (const [opts, logits] of [[{temperature: 0.7, presencePenalty: 0.6, frequencyPenalty: 0.4, seed: 3}, "top-k+lse"],
                                [{temperature: 0, frequencyPenalty: 1.5}, "top-k+lse"],
                                [{temperature: 0.7, presencePenalty: -0.5, seed: 4}, "full"]]) {
    const options = {maxTokens: 20, logprobs: 3, ...opts};
    const m = await openModel(bytesSource(bytes, "single.knot"));
    const wantTokens = [];
    try {
      for await (const e of m.generate(m.tokenize(PROMPT), options)) if (e.type === "token") wantTokens.push(e);
    } finally { m.close(); }
    await same(t, bytes, {stations: [2, 3], shards: 4}, {options, check: (r) => {
      assert.equal(r.telemetry.find((e) => e.event === "route").logits, logits, JSON.stringify(opts));
      assert.equal(r.tokens.length, wantTokens.length);
      r.tokens.forEach((e, i) => {
        const w = wantTokens[i];
        assert.ok(Math.abs(e.logprob - w.logprob) < 1e-9, `token ${i}: logprob ${e.logprob} vs ${w.logprob}`);
        assert.deepEqual(e.top.map((x) => x.token), w.top.map((x) => x.token), `token ${i}: top ids`);
        e.top.forEach((x, j) => assert.ok(Math.abs(x.logprob - w.top[j].logprob) < 1e-9, `token ${i} top ${j}`));
      });
    }});
  }
});

test("chunked prefill (chunk 3) and stop strings: same ids and text as single process", async (t) => {
  const bytes = await sharedKnot(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!bytes) return;
  const prompt = "Once upon a time there was a little girl named Lily. She";
  await same(t, bytes, {stations: [3, 2], shards: 2}, {prompt, options: {maxTokens: 40, temperature: 0, chunk: 3, stop: ["park"]}});
});

test("8 concurrent sessions through one mesh, each identical to its single-session run", async (t) => {
  const bytes = await sharedKnot(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!bytes) return;
  const prompts = ["Once upon a time", "The cat", "Lily and Tom", "One day", "A big dog", "The sun was", "Mom said", "They went to"];
  const wants = [];
  for (const [i, p] of prompts.entries()) wants.push(await single(bytes, p, {maxTokens: 16, temperature: 0.8, seed: i + 1}));
  const mesh = await meshFor(bytes, {stations: [2, 3], shards: 3});
  try {
    const got = await Promise.all(wants.map((w, i) => mesh.run({ids: w.promptIds, options: {maxTokens: 16, temperature: 0.8, seed: i + 1}})));
    got.forEach((r, i) => {
      assert.equal(r.error, undefined, r.error?.error);
      assert.deepEqual(r.summary.ids, wants[i].ids, `session ${i}`);
    });
  } finally { await mesh.close(); }
});

// A chain (lib/topology.mjs): the coordinator links to the first station only; each station
// forwards to the next, and a split station's leader sums its members' partials. Plans of
// dozens of stations use it to stay under 6 links per holder.
test("a station chain (3 uneven stations; a split range in the chain): greedy and seeded ids == single process", async (t) => {
  const bytes = await sharedKnot(t, "stories260K-pad256-qwen2-q4_k_m.gguf");
  if (!bytes) return;
  await same(t, bytes, {stations: [1, 3, 1], shards: 2, chain: true}, {options: {maxTokens: 24, temperature: 0, chunk: 3}, check: async (r, mesh) => {
    assert.equal(mesh.topology.chain, true);
    // the coordinator's link counter is reported in the run's summary (its /stats carry memory only)
    assert.equal(r.summary.maxConnections, 3, "the coordinator links to st0 + 2 shards");
    const st = await mesh.stats();
    assert.equal(st.st0.stats.chainLinks.maxConnections, 1, "st0 links to the next station only");
    assert.equal(st.st1.stats.chainLinks.maxConnections, 1, "st1 links to the next station only");
    assert.ok(st.st0.stats.chainLinks.messages > 0, "st0 forwarded frames");
    assert.equal(st.st1.stats.chainLinks.messages, st.st0.stats.chainLinks.messages, "st1 forwarded every frame st0 did");
    assert.equal(st.st2.stats.frames, st.st1.stats.chainLinks.messages, "st2 served every frame st1 forwarded");
    assert.equal(st.st2.stats.chainLinks.messages, 0, "the exit links to nobody");
  }});
  const q = synthKnot(t, "qwen", SYNTH_QWEN);
  if (!q) return;
  for (const options of [{maxTokens: 16, temperature: 0}, {maxTokens: 16, temperature: 0.9, topK: 40, topP: 0.95, seed: 5}])
    await same(t, q, {stations: [1, 3], shards: 2, slices: 2, chain: true}, {prompt: [1, 17, 250, 99, 3, 288, 42, 160], options: {...options, ignoreEos: true},
      check: async (r, mesh) => {
        const st = await mesh.stats();
        assert.equal(st.st0s0.stats.chainLinks.maxConnections, 2, "a leader links to its member and the next station");
        assert.equal(st.st1s1.stats.chainLinks.messages, 0);
      }});
});
