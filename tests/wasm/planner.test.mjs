// The planner in wasm (bindings/planner.mjs) gives byte-identical JSON to native
// `knot plan` — one implementation, two builds — on a qwen2.5-coder-7b-shaped header
// (sparse .gguf from `knot synth --header-only`, ~4.4 GB, written in milliseconds), its
// .knot-shaped small sibling and a shared model; refusals carry the same reason; and
// `--wrangler DIR` writes one Worker configuration per isolate of the plan.
import {test} from "node:test";
import assert from "node:assert/strict";
import {spawnSync} from "node:child_process";
import {existsSync, readdirSync, readFileSync, statSync} from "node:fs";
import {join} from "node:path";
import {KNOT_BIN, sharedModel, tmpDir} from "./helpers.mjs";
import {plan, planText} from "../../bindings/planner.mjs";

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
    for (const s of [...p.stations, ...p.shards]) assert.ok(s.memory.total <= p.budget, `${s.id} over budget`);
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

test("--wrangler writes one Worker config per isolate, plus wardens and coordinator", () => {
  synth7b();
  const out = join(dir, "deploy");
  const r = knot(["plan", q7, "--wrangler", out, "--key", "qwen7b.knot"]);
  assert.equal(r.status, 0, r.stderr);
  const p = JSON.parse(r.stdout);
  const files = readdirSync(out).filter((f) => f.endsWith(".toml")).sort();
  assert.equal(files.length, p.isolates + 2);
  for (const s of [...p.stations, ...p.shards]) {
    const toml = readFileSync(join(out, `knotwork-${s.id}.toml`), "utf8");
    assert.match(toml, new RegExp(`^name = "knotwork-${s.id}"$`, "m"));
    assert.match(toml, /^KNOT_KEY = "qwen7b.knot"$/m);
    if (s.layers) assert.match(toml, new RegExp(`^LAYERS = "${s.layers[0]}-${s.layers[1]}"$`, "m"));
    if (s.heads) assert.match(toml, new RegExp(`^HEADS = "${s.heads[0]}-${s.heads[1]}"$`, "m"));
    if (s.vocab) assert.match(toml, new RegExp(`^VOCAB = "${s.vocab[0]}-${s.vocab[1]}"$`, "m"));
  }
  const coord = readFileSync(join(out, "knotwork-coordinator.toml"), "utf8");
  assert.equal((coord.match(/^\[\[services\]\]$/gm) || []).length, p.isolates);
  assert.match(coord, /^workers_dev = true$/m);
  assert.deepEqual(JSON.parse(readFileSync(join(out, "plan.json"), "utf8")), p);
});
