// Platform limits (docs/limits.md), counted by our code because local workerd enforces none:
// subrequests and simultaneous outgoing connections of a session, measured per token in a
// real run and checked for a 4096-token generation on the planned 7B topology.
import {test} from "node:test";
import assert from "node:assert/strict";
import {sharedKnot, single, meshFor} from "./helpers.mjs";
import {topologyFromCounts, checkLimits, linkBudget, LIMITS} from "../../workers/lib/topology.mjs";

// qwen2.5-coder-7b's shape (docs/architecture.md): 28 layers, 2 stations [0,14) [14,28), 8 shards of 18,992 tokens
const Q7B = {n_layer: 28, n_embd: 3584, n_head: 28, n_head_kv: 4, head_dim: 128, n_ff: 18944, n_vocab: 151936};

test("the 7B reference cluster: 4096 tokens stay under 10,000 subrequests and 6 connections (ws links + shard hubs)", () => {
  const t = topologyFromCounts(Q7B, {knot: "q7b.knot", stations: [14, 14], shards: 8});
  assert.deepEqual(t.shards.map((s) => s.vocab[1] - s.vocab[0]), Array(8).fill(18992));
  assert.deepEqual(t.shardGroups, [["sh0", "sh1"], ["sh2", "sh3"], ["sh4", "sh5"], ["sh6", "sh7"]]);
  const b = linkBudget(t);
  assert.equal(b.links, 6);
  assert.equal(b.hubLinks, 1, "each hub links to its one follower");
  const ws = checkLimits(t, {tokens: 4096, mode: "ws"});
  assert.ok(ws.ok, ws.problems.join("; "));
  // ws: one subrequest and one connection per coordinator link, whatever the token count
  assert.deepEqual([ws.subrequests, ws.connections], [6, 6]);
  // the same cluster over plain subrequests, or without hubs, would break a limit: the check says so
  const http = checkLimits(t, {tokens: 4096, mode: "http"});
  assert.ok(!http.ok && /subrequests for 4096 tokens over http/.test(http.problems[0]), http.problems.join());
  const flat = topologyFromCounts(Q7B, {knot: "q7b.knot", stations: [14, 14], shards: 8, maxLinks: 0});
  const f = checkLimits(flat, {tokens: 4096, mode: "ws"});
  assert.ok(!f.ok && /10 simultaneous outgoing connections/.test(f.problems[0]), f.problems.join());
});

test("the resident 7B plan's shape (28 stations x 2 slices, 7 shards): a chain keeps every holder under 6 links", () => {
  const t = topologyFromCounts(Q7B, {knot: "q7b.knot", stations: Array(28).fill(1), slices: 2, shards: 7});
  assert.equal(t.chain, true);
  const b = linkBudget(t);
  // the coordinator: the chain's first leader + 5 shard hubs; a leader: its member + the next station
  assert.deepEqual([b.links, b.stationLinks, b.hubLinks], [6, 2, 1], JSON.stringify(b));
  const ws = checkLimits(t, {tokens: 4096, mode: "ws"});
  assert.ok(ws.ok, ws.problems.join("; "));
  assert.deepEqual([ws.subrequests, ws.connections], [6, 6]);
  // without a chain the coordinator would hold a link per member: the check refuses it
  const flat = topologyFromCounts(Q7B, {knot: "q7b.knot", stations: Array(28).fill(1), slices: 2, shards: 7, chain: false, maxLinks: 0});
  const f = checkLimits(flat, {tokens: 4096, mode: "ws"});
  assert.ok(!f.ok && /63 simultaneous outgoing connections/.test(f.problems[0]), f.problems.join());
  assert.throws(() => topologyFromCounts(Q7B, {knot: "q7b.knot", stations: Array(28).fill(1), slices: 2, shards: 7, chain: false}),
                /56 station members leave no link for the shards under 6 connections/);
});

test("measured: a session's subrequests and connections per token under workerd match the count, and extrapolate under the limits", async (t) => {
  const bytes = await sharedKnot(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!bytes) return;
  const want = await single(bytes, "Once upon a time", {maxTokens: 24, temperature: 0, ignoreEos: true});
  // 2 stations + 8 shards: more peers than 6, so the shards sit behind 4 hubs
  const mesh = await meshFor(bytes, {stations: [2, 3], shards: 8});
  try {
    assert.equal(mesh.topology.shardGroups.length, 4);
    const r = await mesh.run({ids: want.promptIds, options: {maxTokens: 24, temperature: 0, ignoreEos: true}});
    assert.deepEqual(r.summary?.ids, want.ids, r.error?.error);
    const s = r.summary;
    // ws links: one subrequest per peer for the whole session, never more than 6 open
    assert.equal(s.subrequests, 6, `subrequests ${s.subrequests}`);
    assert.equal(s.maxConnections, 6, "2 stations + 4 shard hubs, every link open at once");
    // hops per decode token = stations + embed hub + lm-head hubs
    const perToken = linkBudget(mesh.topology).perToken;
    assert.equal(perToken, 2 + 1 + 4);
    // through hubs too, greedy steps take their input row from the lm-head answer
    assert.equal(s.rowsPrefetched, s.nDecoded);
    const lim = checkLimits(mesh.topology, {tokens: 4096, mode: "ws"});
    assert.ok(lim.ok, JSON.stringify(lim));
    assert.deepEqual([lim.subrequests, lim.connections], [s.subrequests, s.maxConnections], "the count is what the run measured");
    // every hub held exactly its followers' links
    const st = await mesh.stats();
    for (const g of mesh.topology.shardGroups) assert.equal(st[g[0]].followerLinks.maxConnections, g.length - 1, JSON.stringify(st[g[0]]));
  } finally { await mesh.close(); }
  // http links (the deployment's LINK_MODE; a request cannot choose it): the count grows per
  // token; 4096 tokens would break the 10,000 cap
  const httpMesh = await meshFor(bytes, {stations: [2, 3], shards: 8}, {linkMode: "http"});
  try {
    const perToken = linkBudget(httpMesh.topology).perToken;
    const h = await httpMesh.run({ids: want.promptIds, options: {maxTokens: 24, temperature: 0, ignoreEos: true}});
    assert.deepEqual(h.summary?.ids, want.ids);
    const perTok = h.summary.subrequests / (h.summary.nDecoded + 1);
    assert.ok(perTok >= perToken - 1, `http: ${perTok} subrequests per token`);
    assert.ok(perTok * 4096 > LIMITS.subrequests);
  } finally { await httpMesh.close(); }
});
