// The planner in wasm (bindings/planner.mjs) gives byte-identical JSON to native
// `knot plan` — one implementation, two builds — on a qwen2.5-coder-7b-shaped header
// (sparse .gguf from `knot synth --header-only`, ~4.4 GB, written in milliseconds), its
// .knot-shaped small sibling and a shared model; refusals carry the same reason; and
// `--wrangler DIR` writes one Worker configuration per isolate of the plan.
import {test} from "node:test";
import assert from "node:assert/strict";
import {spawnSync} from "node:child_process";
import {existsSync, readdirSync, readFileSync, statSync, writeFileSync} from "node:fs";
import {join} from "node:path";
import {KNOT_BIN, sharedModel, tmpDir} from "./helpers.mjs";
import {plan, planText} from "../../bindings/planner.mjs";
import {checkLimits, linkBudget, links} from "../../workers/lib/topology.mjs";
import {parseWranglerConfig} from "../../deploy/wrangler.mjs";

const QWEN7B = ["--arch", "qwen2", "--hidden", "3584", "--layers", "28", "--heads", "28", "--kv-heads", "4",
                "--ffn", "18944", "--vocab", "151936", "--vocab-tensor", "152064", "--type", "Q4_K_M", "--ctx", "32768"];
const dir = tmpDir("knotwork-plan-");
const q7 = join(dir, "qwen7b-shaped.gguf");
const knot = (args) => spawnSync(KNOT_BIN, args, {encoding: "utf8", timeout: 60_000});

function synth7b() {
  if (existsSync(q7)) return;
  const r = knot(["synth", ...QWEN7B, "--header-only", q7]);
  assert.equal(r.status, 0, r.stderr);
}

// [CLI flags, the same options for the JS API]
const CASES = [
  [[], {}],
  [["--mode", "fluid", "--stations", "2"], {mode: "fluid", stations: 2}],
  [["--mode", "fluid", "--context", "2048"], {mode: "fluid", context: 2048}],
  [["--budget", "96MB", "--shards", "12", "--chunk", "64"], {budget: "96MB", shards: 12, chunk: 64}],
  [["--budget", "256MB", "--context", "8192"], {budget: "256MB", context: 8192}],
  [["--objective", "latency"], {objective: "latency"}],
  [["--replicas", "2"], {replicas: 2}],
  [["--fat", "1GiB,1GiB"], {fat: "1GiB,1GiB"}],
];

test("knot plan and the wasm planner print the same JSON for a 7B-shaped header", async () => {
  synth7b();
  assert.ok(statSync(q7).size > 4e9, "sparse 7B-shaped file");
  for (const [flags, opts] of CASES) {
    const nat = knot(["plan", q7, ...flags]);
    assert.equal(nat.status, 0, `${flags.join(" ")}: ${nat.stderr}`);
    const js = await planText(q7, opts);
    assert.equal(js, nat.stdout, `plan ${flags.join(" ")}: native and wasm differ`);
    const p = JSON.parse(js);
    for (const s of [...p.stations, ...p.shards]) assert.ok(s.memory.total <= (s.fat_memory ?? p.budget), `${s.id} over budget`);
    assert.equal(p.replicas, opts.replicas, "replicas in the plan only when asked (more than one)");
  }
});

test("refusals carry the same reason natively and in wasm", async () => {
  synth7b();
  for (const [flags, opts, re] of [
    [["--budget", "40MB"], {budget: "40MB"}, /cannot be met: .*layer 0/],
    [["--mode", "fluid", "--stations", "2", "--context", "32768"], {mode: "fluid", stations: 2, context: 32768}, /KV at context 32768/],
    [["--shards", "2"], {shards: 2}, /vocab shard of 75968 rows/],
  ]) {
    const nat = knot(["plan", q7, ...flags]);
    assert.equal(nat.status, 1);
    assert.match(nat.stderr, re);
    await assert.rejects(plan(q7, opts), (e) => {
      assert.match(e.message, re);
      assert.ok(nat.stderr.includes(e.message.replace(/^.*?plan: /, "plan: ")), `${nat.stderr} vs ${e.message}`);
      return true;
    });
  }
  await assert.rejects(plan(q7, {bugdet: "1MB"}), /unknown option 'bugdet'/);
});

test("the time objective: the same choice natively, in wasm and through the node CLI, with a cost file", async () => {
  synth7b();
  const cost = {decode_bytes_per_ms: 3.1e6, prefill_token_bytes_per_ms: 2.2e7, hop_ms: 45, fetch_bytes_per_ms: 1e5};
  const file = join(dir, "cost.json");
  writeFileSync(file, JSON.stringify({...cost, provenance: "test"}));
  const nat = knot(["plan", q7, "--objective", "latency", "--cost", file]);
  assert.equal(nat.status, 0, nat.stderr);
  assert.equal(await planText(q7, {objective: "latency", cost}), nat.stdout);
  const node = spawnSync(process.execPath, ["bin/knotwork.mjs", "plan", q7, "--objective", "latency", "--cost", file], {encoding: "utf8"});
  assert.equal(node.status, 0, node.stderr);
  assert.equal(node.stdout, nat.stdout);
  const p = JSON.parse(nat.stdout);
  assert.deepEqual(p.cost_model, cost);
  // the pick is the fastest of every plan weighed
  for (const a of p.alternatives) assert.ok(p.estimate.decode_tok_s >= a.estimate.decode_tok_s, JSON.stringify(a));
  // a bad cost file is refused naming the file and the field, by both CLIs
  writeFileSync(file, JSON.stringify({hop_ms: -3}));
  const bad = knot(["plan", q7, "--cost", file]);
  assert.equal(bad.status, 1);
  assert.match(bad.stderr, /cost\.json: cost model: hop_ms must be a positive number, got -3/);
  const badNode = spawnSync(process.execPath, ["bin/knotwork.mjs", "plan", q7, "--cost", file], {encoding: "utf8"});
  assert.equal(badNode.status, 1);
  assert.match(badNode.stderr, /hop_ms must be a positive number, got -3/);
});

test("the prefill rate per chunk size: the latency plan's prefill chunk follows the table, the same natively and in wasm", async () => {
  synth7b();
  const file = join(dir, "cost-table.json");
  const run = async (table) => {
    const cost = {decode_bytes_per_ms: 2e6, hop_ms: 0.3, prefill_token_bytes_per_ms_by_chunk: table};
    writeFileSync(file, JSON.stringify(cost));
    const nat = knot(["plan", q7, "--objective", "latency", "--cost", file]);
    assert.equal(nat.status, 0, nat.stderr);
    assert.equal(await planText(q7, {objective: "latency", cost}), nat.stdout, "native and wasm differ");
    const p = JSON.parse(nat.stdout);
    assert.deepEqual(p.cost_model.prefill_token_bytes_per_ms_by_chunk, table);
    // the pipeline's parts and every alternative's own prefill chunk
    const tp = p.estimate.ttft_pipeline;
    assert.equal(tp.chunks, Math.ceil(2000 / p.prefill_chunk));
    assert.ok(Math.abs(tp.fill_s + tp.steady_s - p.estimate.ttft_pipelined_s) < 0.05, JSON.stringify(p.estimate));
    for (const a of p.alternatives) {
      assert.ok(a.prefill_chunk >= 1 && a.prefill_chunk <= a.chunk, JSON.stringify(a));
      assert.ok(a.estimate.ttft_pipeline.chunks >= 1);
    }
    return p;
  };
  // small chunks fast: a small prefill chunk; only 256 fast: the largest
  const small = await run({"2": 1e8, "512": 1e6});
  const large = await run({"2": 2e5, "128": 2e5, "256": 5e7});
  assert.ok(small.prefill_chunk <= 4, `small chunks fast: ${small.prefill_chunk}`);
  assert.equal(large.prefill_chunk, large.chunk);
  assert.equal(small.isolates, large.isolates);
  // the memory objective keeps the memory's chunk
  const mem = await plan(q7, {cost: {prefill_token_bytes_per_ms_by_chunk: {"2": 1e8, "512": 1e6}}});
  assert.equal(mem.prefill_chunk, mem.chunk);
  // a bad table is refused naming the field, by both CLIs and the JS API
  for (const [table, re] of [[{"x": 1}, /prefill_token_bytes_per_ms_by_chunk: key 'x' is not a chunk size/],
                             [{"8": -1}, /prefill_token_bytes_per_ms_by_chunk\["8"\] must be a positive number, got -1/],
                             [{}, /prefill_token_bytes_per_ms_by_chunk must be an object/]]) {
    writeFileSync(file, JSON.stringify({prefill_token_bytes_per_ms_by_chunk: table}));
    const bad = knot(["plan", q7, "--cost", file]);
    assert.equal(bad.status, 1);
    assert.match(bad.stderr, re);
    const badNode = spawnSync(process.execPath, ["bin/knotwork.mjs", "plan", q7, "--cost", file], {encoding: "utf8"});
    assert.equal(badNode.status, 1);
    assert.match(badNode.stderr, re);
    await assert.rejects(plan(q7, {cost: {prefill_token_bytes_per_ms_by_chunk: table}}), re);
  }
});

test("a shared model: one resident station, one shard, identical both ways", async (t) => {
  const p = sharedModel(t, "stories260K.gguf");
  if (!p) return;
  const nat = knot(["plan", p]);
  assert.equal(nat.status, 0, nat.stderr);
  assert.equal(await planText(p), nat.stdout);
  const j = JSON.parse(nat.stdout);
  assert.equal(j.stations.length, 1);
  assert.equal(j.stations[0].role, "entry-exit");
  assert.deepEqual(j.shards.map((s) => s.vocab), [[0, j.model.n_vocab]]);
});

// One config writer (core/infer/deployment.cpp): native `knot plan --wrangler` runs it, the
// node CLI through kw_deploy, so both CLIs write the same files, and they are what the workers read.
const config = (dir, file) => parseWranglerConfig(readFileSync(join(dir, file), "utf8"));

test("--wrangler writes one Worker config per isolate of the plan, the same from both CLIs", () => {
  synth7b();
  for (const flags of [[], ["--budget", "1GB"], ["--mode", "fluid", "--stations", "2"]]) {
    const out = join(dir, `deploy-native${flags.join("")}`), outJs = join(dir, `deploy-js${flags.join("")}`);
    const r = knot(["plan", q7, ...flags, "--wrangler", out, "--knot", "qwen7b.knot"]);
    assert.equal(r.status, 0, r.stderr);
    const p = JSON.parse(r.stdout);
    const files = readdirSync(out).filter((f) => f.endsWith(".jsonc")).sort();
    assert.equal(files.length, p.isolates + 2, files.join(" "));  // + warden + coordinator (wrangler.jsonc)
    const t = JSON.parse(readFileSync(join(out, "topology.json"), "utf8"));
    assert.equal(t.knot, "qwen7b.knot");
    assert.equal(readFileSync(join(out, "plan.json"), "utf8"), r.stdout);
    // every station member / shard of the plan is one script whose vars say what it owns
    const members = t.stations.flatMap((s) => s.members.map((m) => ({...m, layers: s.layers})));
    assert.equal(members.length + t.shards.length, p.isolates);
    for (const m of members) {
      const c = config(out, `knot-${m.name}.jsonc`);
      const v = c.vars.STATION;
      assert.deepEqual([v.layers, v.heads, v.cols, v.knot], [m.layers, m.heads, m.cols, "qwen7b.knot"]);
      const ps = p.stations.find((s) => s.id === m.id);
      assert.deepEqual(v.layers, ps.layers);
      assert.equal(v.resident, ps.mode !== "fluid");
      assert.match(c.main, /^\/.*\/workers\/station\/index\.mjs$/);
    }
    for (const [i, s] of p.shards.entries())
      assert.deepEqual(config(out, `knot-sh${i}.jsonc`).vars.SHARD.vocab, s.vocab);
    const coord = config(out, "wrangler.jsonc");
    assert.deepEqual(coord.vars.TOPOLOGY, t);
    // at most 6 links per holder: the resident plan's 56 station members form a chain
    const l = links(t);
    assert.equal(t.chain ?? false, members.length >= 6);
    assert.equal((coord.services ?? []).length, l.coordinator.length);
    assert.ok(l.coordinator.length <= 6);
    for (const m of members) {
      const {next, followers} = l.stations.get(m.name);
      assert.equal((config(out, `knot-${m.name}.jsonc`).services ?? []).length, followers.length + (next ? 1 : 0));
      assert.ok(followers.length + (next ? 1 : 0) <= 6);
    }
    assert.ok(checkLimits(t, {tokens: 4096}).ok, JSON.stringify(checkLimits(t, {tokens: 4096}).problems));
    // the planner's link count (C++) is the layout the workers build (JS)
    const b = linkBudget(t);
    assert.deepEqual(p.per_token.links, {chain: t.chain ?? false, session: l.coordinator.length,
      max_per_holder: Math.max(b.links, b.stationLinks, b.hubLinks), total: p.per_token.links.total});
    assert.equal(p.per_token.links.total, l.coordinator.length + [...l.stations.values()].reduce((a, x) => a + x.followers.length + (x.next ? 1 : 0), 0) +
                 (t.shardGroups ?? []).reduce((a, g) => a + g.length - 1, 0));
    // the node CLI plans with the same core planner in wasm and writes the same files
    const js = spawnSync(process.execPath, ["bin/knotwork.mjs", "plan", q7, ...flags, "--wrangler", outJs, "--knot", "qwen7b.knot"],
                         {encoding: "utf8", timeout: 60_000});
    assert.equal(js.status, 0, js.stderr);
    assert.equal(js.stdout, r.stdout);
    assert.deepEqual(readdirSync(outJs).sort(), readdirSync(out).sort());
    for (const f of readdirSync(out)) assert.equal(readFileSync(join(outJs, f), "utf8"), readFileSync(join(out, f), "utf8"), f);
  }
});

test("--knot without --wrangler and a plan file that is not a plan are refused", (t) => {
  const r = knot(["plan", sharedModel(t, "stories260K-pad256-llama-q4_k_m.gguf"), "--knot", "x.knot"]);
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /--knot goes with --wrangler DIR/);
  const bad = join(dir, "not-a-plan.json");
  writeFileSync(bad, JSON.stringify({stations: []}));
  const w = spawnSync(process.execPath, ["bin/knotwork.mjs", "wrangler", bad, join(dir, "nope")], {encoding: "utf8"});
  assert.equal(w.status, 1);
  assert.match(w.stderr, /not-a-plan\.json: not a planner plan/);
});
