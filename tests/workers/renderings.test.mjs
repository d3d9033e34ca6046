// One deployment description (core/infer/deployment.cpp through deploy/description.mjs), two
// renderings: the wrangler.jsonc files of deploy/wrangler.mjs, read back by wrangler itself (unstable_getMiniflareWorkerOptions, what
// `wrangler dev` hands to Miniflare), carry exactly the vars, bindings, sources and
// compatibility settings that deploy/miniflare.mjs gives the tests' meshes — so what the tests
// run is what deploys. Over several topologies (2 stations + 2 shards, a station chain, split
// layers, hub shard groups, 2 replicas of a chain, the planner's resident 7B plan) and with
// every option set. The core's topology of a plan is the one workers/lib/topology.mjs builds.
import {test} from "node:test";
import assert from "node:assert/strict";
import {execFileSync} from "node:child_process";
import {existsSync, readFileSync} from "node:fs";
import {dirname, join, resolve} from "node:path";
import {unstable_getMiniflareWorkerOptions as wranglerWorkerOptions} from "wrangler";
import {plan} from "../../bindings/planner.mjs";
import {meshWorkers} from "../../deploy/miniflare.mjs";
import {deploymentOf, describeDeployment} from "../../deploy/description.mjs";
import {EXAMPLE_DIR, parseWranglerConfig, writeWranglerConfigs} from "../../deploy/wrangler.mjs";
import {links, replicaCount, replicaName, topologyFromCounts, topologyFromPlan} from "../../workers/lib/topology.mjs";
import {KNOT_BIN, ROOT, tmpDir} from "../wasm/helpers.mjs";

process.env.WRANGLER_SEND_METRICS = "false";
const SMALL = {n_layer: 5, n_embd: 256, n_head: 32, n_head_kv: 16, head_dim: 8, n_ff: 256, n_vocab: 512};
const ALL_OPTIONS = {warden: true, testHooks: true, linkMode: "http", timeouts: {stationMs: 1500, shardMs: 400}, ttlMs: 300,
                     wardenBudget: 4 << 20, chatTemplate: "chatml", bucket: "other-models", compatibilityDate: "2026-05-01",
                     prefixCache: {kvTokens: 4096, ttlMs: 1000, similarity: 0.25}};

const TOPOLOGIES = {
  "2 stations + 2 shards": () => topologyFromCounts(SMALL, {knot: "m.knot", stations: [2, 3], shards: 2}),
  "station chain": () => topologyFromCounts(SMALL, {knot: "m.knot", stations: [1, 1, 1, 2], shards: 2, chain: true}),
  "split layers (2 slices)": () => topologyFromCounts(SMALL, {knot: "m.knot", stations: [2, 3], shards: 1, slices: 2}),
  "hub shard groups": () => topologyFromCounts(SMALL, {knot: "m.knot", stations: [2, 3], shards: 8}),
  "2 replicas of a chain with hub shard groups": () => topologyFromCounts(SMALL, {knot: "m.knot", stations: [1, 1, 1, 2], shards: 8, chain: true, replicas: 2}),
};

// wrangler's worker options in the shape of deploy/miniflare.mjs's (bindings by name → target)
function normalize(w) {
  const rec = (o, f) => Object.fromEntries(Object.entries(o ?? {}).map(([k, v]) => [k, f(v)]));
  return {
    compatibilityDate: w.compatibilityDate, compatibilityFlags: w.compatibilityFlags, bindings: w.bindings ?? {},
    serviceBindings: rec(w.serviceBindings, (v) => (typeof v === "string" ? v : v.name)),
    durableObjects: rec(w.durableObjects, (v) => (typeof v === "string" ? v : v.scriptName ? {className: v.className, scriptName: v.scriptName} : v.className)),
    r2Buckets: rec(w.r2Buckets, (v) => (typeof v === "string" ? v : v.id)),
    kvNamespaces: rec(w.kvNamespaces, (v) => (typeof v === "string" ? v : v.id)),
  };
}

async function assertSameRenderings(topology, options, what) {
  const dir = tmpDir("knotwork-renderings-");
  const paths = await writeWranglerConfigs(topology, dir, {root: ROOT, warden: false, ...options});
  const mf = await meshWorkers(topology, options);
  assert.deepEqual(paths.map((p) => parseWranglerConfig(readFileSync(p, "utf8")).name), mf.map((w) => w.name), `${what}: scripts, entry first`);
  for (const [i, p] of paths.entries()) {
    const m = mf[i];
    const c = parseWranglerConfig(readFileSync(p, "utf8"));
    assert.equal(resolve(dirname(p), c.main), m.scriptPath, `${what}: ${m.name} main`);
    assert.deepEqual(normalize(wranglerWorkerOptions(p).workerOptions), normalize(m), `${what}: ${m.name}`);
  }
  return mf;
}

for (const [name, make] of Object.entries(TOPOLOGIES)) {
  test(`wrangler.jsonc and Miniflare carry the same vars and bindings: ${name}`, async () => {
    const t = make();
    await assertSameRenderings(t, {}, `${name}, defaults`);
    const mf = await assertSameRenderings(t, ALL_OPTIONS, `${name}, every option`);
    // the options reached the scripts that read them (so the comparison above covered them)
    const by = Object.fromEntries(mf.map((w) => [w.name, w]));
    const coord = by["knot-coordinator"].bindings;
    assert.deepEqual([coord.LINK_MODE, coord.CHAT_TEMPLATE, coord.TIMEOUTS, coord.TEST_HOOKS, coord.PREFIX_CACHE],
                     ["http", "chatml", ALL_OPTIONS.timeouts, "1", ALL_OPTIONS.prefixCache]);
    assert.deepEqual(by["knot-coordinator"].durableObjects, {SESSION: "SessionDO", PREFIXES: "PrefixDO"});
    assert.deepEqual(coord.TOPOLOGY, JSON.parse(JSON.stringify(t)));
    // every copy (replicas: topology.mjs replicaName) is scripts of its own, linked within the copy
    const l = links(t), R = replicaCount(t), rn = (r) => (n) => replicaName(n, r);
    assert.deepEqual(Object.keys(by["knot-coordinator"].serviceBindings),
                     Array.from({length: R}, (_, r) => l.coordinator.map((n) => `M_${rn(r)(n)}`)).flat());
    for (let r = 0; r < R; r++) {
      for (const s of t.stations) for (const m of s.members) {
        const st = by[`knot-${rn(r)(m.name)}`];
        assert.equal(st.bindings.STATION.name, rn(r)(m.name));
        assert.equal(st.bindings.STATION.ttlMs, 300);
        assert.equal(st.bindings.STATION.linkTimeoutMs, 1500);
        assert.deepEqual(st.durableObjects.WARDEN, {className: "LayerWardenDO", scriptName: "knot-warden"});
        const {next, followers} = l.stations.get(m.name);
        assert.deepEqual(Object.keys(st.serviceBindings), [...followers, ...(next ? [next] : [])].map((n) => `L_${rn(r)(n)}`));
      }
      for (const g of t.shardGroups ?? []) {
        const hub = by[`knot-${rn(r)(g[0])}`];
        assert.deepEqual(Object.keys(hub.serviceBindings), g.slice(1).map((n) => `F_${rn(r)(n)}`));
        assert.equal(hub.bindings.FOLLOWER_TIMEOUT_MS, g.length > 1 ? "300" : undefined);  // a group of one has no followers
      }
    }
    assert.equal(by["knot-warden"].bindings.WARDEN_BUDGET, String(4 << 20));
    for (const w of mf) assert.deepEqual([w.r2Buckets, w.compatibilityDate], [{MODELS: "other-models"}, "2026-05-01"]);
  });
}

test("wrangler.jsonc and Miniflare carry the same vars and bindings: the planner's resident 7B plan (a chain, hub groups)", async (t) => {
  if (!existsSync(KNOT_BIN)) {
    if (process.env.CI) throw new Error(`${KNOT_BIN} missing (CI is set)`);
    return t.skip(`${KNOT_BIN} missing`);
  }
  const q7 = join(tmpDir("knotwork-renderings-7b-"), "qwen7b-shaped.gguf");
  execFileSync(KNOT_BIN, ["synth", "--arch", "qwen2", "--hidden", "3584", "--layers", "28", "--heads", "28", "--kv-heads", "4",
    "--ffn", "18944", "--vocab", "151936", "--vocab-tensor", "152064", "--type", "Q4_K_M", "--ctx", "32768", "--header-only", q7], {stdio: "pipe"});
  const p = await plan(q7);
  const topology = topologyFromPlan(p.model, p, {knot: "qwen7b.knot"});
  assert.equal(topology.chain, true);
  assert.ok(topology.stations.reduce((a, s) => a + s.members.length, 0) >= 6);
  assert.ok(topology.shardGroups.some((g) => g.length > 1));
  await assertSameRenderings(topology, {}, "7B, defaults");
  await assertSameRenderings(topology, ALL_OPTIONS, "7B, every option");
  // the core's topology of a plan (what `knot plan --wrangler` deploys) is the JS one
  for (const opts of [{}, {budget: "1GB"}, {mode: "fluid", stations: 2}, {objective: "latency"}]) {
    const po = await plan(q7, opts);
    assert.equal(topologyFromPlan(po.model, po, {knot: "qwen7b.knot"}).prefill_chunk, po.prefill_chunk !== po.chunk ? po.prefill_chunk : undefined);
    assert.deepEqual((await deploymentOf({plan: po, knot: "qwen7b.knot"})).topology, topologyFromPlan(po.model, po, {knot: "qwen7b.knot"}),
                     JSON.stringify(opts));
  }
});

test("the committed example (deploy/example/) is the description of its topology, as wrangler reads it", async () => {
  const mf = await meshWorkers(topologyFromCounts(SMALL, {knot: "stories260K-pad256-llama-q4_k_m.knot", stations: [2, 3], shards: 2}), {warden: true});
  assert.equal(mf.length, 6);
  for (const m of mf) {
    const p = join(ROOT, EXAMPLE_DIR, m.name === "knot-coordinator" ? "wrangler.jsonc" : `${m.name}.jsonc`);
    assert.equal(resolve(dirname(p), parseWranglerConfig(readFileSync(p, "utf8")).main), m.scriptPath, m.name);
    assert.deepEqual(normalize(wranglerWorkerOptions(p).workerOptions), normalize(m), m.name);
  }
});

test("the description refuses an unknown option, a bad value and a plan that does not cover the model, naming them", async () => {
  const t = TOPOLOGIES["2 stations + 2 shards"]();
  await assert.rejects(describeDeployment(t, {ttl: 5}), /deployment: unknown option ttl/);
  await assert.rejects(describeDeployment(t, {linkMode: "udp"}), /deployment: linkMode must be "ws" or "http", not "udp"/);
  await assert.rejects(describeDeployment(t, {ttlMs: "soon"}), /deployment: ttlMs must be an integer >= 0, got "soon"/);
  await assert.rejects(describeDeployment(t, {prefixCache: {kvTokens: -1}}), /deployment: prefixCache.kvTokens must be an integer >= 0, got -1/);
  await assert.rejects(describeDeployment(t, {prefixCache: {slots: 2}}), /deployment: unknown option prefixCache.slots/);
  const p = {model: {...SMALL, name: "m.gguf"}, stations: [{id: "a", layers: [0, 2], mode: "resident"}, {id: "b", layers: [3, 5], mode: "resident"}],
             shards: [{id: "s", vocab: [0, 512]}]};
  await assert.rejects(deploymentOf({plan: p}), /topology: station layers \[3,5\] do not continue from layer 2/);
  p.stations[1].layers = [2, 5];
  assert.equal((await deploymentOf({plan: p})).topology.knot, "m.knot");
});
