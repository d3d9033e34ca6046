// Topologies: from counts, from a planner plan (bindings/planner.mjs JSON), and the checks
// that refuse a topology which does not cover the model.
import {test} from "node:test";
import assert from "node:assert/strict";
import {topologyFromCounts, topologyFromPlan, validateTopology, cuts} from "../../workers/lib/topology.mjs";

const C = {n_layer: 4, n_embd: 512, n_head: 16, n_head_kv: 4, head_dim: 32, n_ff: 512, n_vocab: 300};

test("cuts: near-equal, block-aligned where possible, meeting end to end", () => {
  assert.deepEqual(cuts(512, 2, 256), [0, 256, 512]);
  assert.deepEqual(cuts(300, 3), [0, 100, 200, 300]);
  assert.deepEqual(cuts(172, 2, 256), [0, 86, 172]);  // no aligned cut inside: plain
  assert.throws(() => cuts(3, 4), /cannot cut 3 into 4/);
});

test("a planner plan becomes stations with members (slices of one range) and shards", () => {
  const plan = {context: 512, chunk: 32, stations: [
    {id: "station-0-1", role: "entry", layers: [0, 1], mode: "resident"},
    {id: "station-1-4-s0of2", role: "exit", layers: [1, 4], slice: [0, 2], heads: [0, 8], ffn_cols: [0, 256], mode: "fluid"},
    {id: "station-1-4-s1of2", role: "exit", layers: [1, 4], slice: [1, 2], heads: [8, 16], ffn_cols: [256, 512], mode: "fluid"}],
    shards: [{id: "shard-0-150", vocab: [0, 150]}, {id: "shard-150-300", vocab: [150, 300]}]};
  const t = topologyFromPlan(C, plan, {knot: "m.knot"});
  assert.equal(t.stations.length, 2);
  assert.deepEqual(t.stations[1].members.map((m) => [m.name, m.id, m.heads, m.cols]),
                   [["st1s0", "station-1-4-s0of2", [0, 8], [0, 256]], ["st1s1", "station-1-4-s1of2", [8, 16], [256, 512]]]);
  assert.equal(t.stations[1].resident, false);
  assert.equal(t.stations[1].role, "exit");
  assert.equal(t.context, 512);
  assert.equal(t.shardGroups, undefined);  // 3 members + 2 shards <= 6 links
  // the latency objective's prefill chunk rides along when it differs from the chunk
  assert.equal(t.prefill_chunk, undefined);
  assert.equal(topologyFromPlan(C, {...plan, prefill_chunk: 32}, {knot: "m.knot"}).prefill_chunk, undefined);
  assert.equal(topologyFromPlan(C, {...plan, prefill_chunk: 8}, {knot: "m.knot"}).prefill_chunk, 8);
  assert.throws(() => topologyFromPlan(C, {...plan, prefill_chunk: 48}, {knot: "m.knot"}), /prefill_chunk must be an integer in \[1, 32\] \(the chunk\), got 48/);
  assert.throws(() => topologyFromPlan(C, {...plan, chunk: 0.5}, {knot: "m.knot"}), /chunk must be an integer in \[1, 65536\], got 0.5/);
});

test("topologies that do not cover the model are refused, naming the gap", () => {
  const ok = topologyFromCounts(C, {knot: "m.knot", stations: [1, 3], shards: 3, slices: 2});
  assert.deepEqual(ok.stations[0].members.map((m) => m.heads), [[0, 8], [8, 16]]);  // whole KV groups of 4
  const bad = structuredClone(ok);
  bad.stations[1].layers = [2, 4];
  assert.throws(() => validateTopology(C, bad), /station layers \[2,4\] do not continue from layer 1/);
  const split = structuredClone(ok);
  split.stations[0].members[0].heads = [0, 6]; split.stations[0].members[1].heads = [6, 16];
  assert.throws(() => validateTopology(C, split), /heads \[0,6\] split a KV group of 4/);
  const pad = structuredClone(ok);
  pad.shards.at(-1).vocab[1] = 320;
  assert.throws(() => validateTopology(C, pad), /shards end at 320, the tokenizer has 300 tokens/);
  assert.throws(() => topologyFromCounts(C, {knot: "m.knot", stations: [2, 1]}), /covers 3 layers, the model has 4/);
});
