// `knotwork mesh`: the same stdout as `knotwork generate`, the mesh's figures on stderr.
import {test} from "node:test";
import assert from "node:assert/strict";
import {execFile} from "node:child_process";
import {promisify} from "node:util";
import {join} from "node:path";
import {sharedModel} from "./helpers.mjs";
import {ROOT} from "../wasm/helpers.mjs";

const run = promisify(execFile);
const CLI = join(ROOT, "bin/knotwork.mjs");
const node = (args) => run(process.execPath, [CLI, ...args], {maxBuffer: 1 << 24}).catch((e) => e);
// exit status of a run: 0, the code, or the signal that killed it (a killed child has code null)
const exitOf = (r) => (r instanceof Error ? r.signal ?? r.code : 0);

test("knotwork mesh prints exactly what generate prints (text with default sampling + seed; --ids greedy)", async (t) => {
  const model = sharedModel(t, "stories260K-pad256-qwen2-q4_k_m.gguf");
  if (!model) return;
  for (const [flags, topo] of [[["-n", "24", "--seed", "5"], ["--stations", "1,3,1", "--shards", "3"]],
                               [["-n", "20", "--temp", "0", "--ids"], ["--stations", "2,3", "--vocab", "0,37,300,512", "--slices", "2"]],
                               [["-n", "12", "--temp", "0", "--ids"], ["--stations", "2,3", "--shards", "2", "--replicas", "2"]]]) {
    const gen = await node(["generate", model, "-p", "Once upon a time", ...flags]);
    const mesh = await node(["mesh", model, ...topo, "-p", "Once upon a time", ...flags]);
    assert.equal(exitOf(gen), 0, gen.stderr);
    assert.equal(exitOf(mesh), 0, mesh.stderr);
    assert.ok(gen.stdout.length > 10, "generate printed a continuation");
    assert.equal(mesh.stdout, gen.stdout, `${topo.join(" ")} ${flags.join(" ")}`);
    assert.match(mesh.stderr, /hops \d+ .*subrequests \d+, max simultaneous connections \d+/);
    assert.match(mesh.stderr, /peak wasm linear memory per isolate \(MiB\): coordinator [\d.]+, st0/);
    if (topo.includes("--replicas")) assert.match(mesh.stderr, /, 2 replicas,.*\n[\s\S]*st0r1 [\d.]+/, "every copy is an isolate of its own");
  }
});

test("knotwork mesh refuses a topology that does not cover the model, naming it", async (t) => {
  const model = sharedModel(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!model) return;
  const r = await node(["mesh", model, "--stations", "2,2", "-p", "x", "-n", "1"]);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /--stations 2,2 covers 4 layers, the model has 5/);
  const v = await node(["mesh", model, "--vocab", "0,100,600", "-p", "x", "-n", "1"]);
  assert.equal(v.code, 1);
  assert.match(v.stderr, /topology: shards end at 600, the tokenizer has 512 tokens/);
});

test("knotwork mesh --lookup K and --prefill sequential: the same stdout as generate; speculation reported on stderr", async (t) => {
  const model = sharedModel(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!model) return;
  const prompt = "Lily had a red ball. Tom had a blue ball. Lily had a red ball. Tom had a blue ball. Lily";
  const gen = await node(["generate", model, "-p", prompt, "-n", "24", "--temp", "0", "--ids"]);
  for (const flags of [["--lookup", "4"], ["--lookup", "4", "--prefill", "sequential", "--chunk", "5"]]) {
    const mesh = await node(["mesh", model, "--stations", "2,3", "-p", prompt, "-n", "24", "--temp", "0", "--ids", ...flags]);
    assert.equal(mesh.code ?? 0, 0, mesh.stderr);
    assert.equal(mesh.stdout, gen.stdout, flags.join(" "));
    assert.match(mesh.stderr, /speculative \(lookup 4\): \d+ drafted, \d+ accepted \(\d+%\) in \d+ verify passes/);
  }
  const bad = await node(["mesh", model, "-p", "x", "--prefill", "parallel"]);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /--prefill/);
});
