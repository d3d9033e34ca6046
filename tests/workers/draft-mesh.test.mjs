// A draft model on the mesh under workerd (Miniflare): the coordinator runs the deployment's
// draft model (DRAFT {knot, n}, its .knot in R2) in its own wasm memory, proposes up to n
// tokens per step, and the stations verify them in one multi-position decode pass. Greedy
// ids equal plain mesh decoding's and the single process's; a request may only turn the
// draft off or lower its n; a draft of another vocabulary, or one that does not fit the
// coordinator's 128 MB, is refused naming it.
import {test} from "node:test";
import assert from "node:assert/strict";
import {sharedKnot, synthKnot, single, meshFor, SYNTH_TIED} from "./helpers.mjs";
import {describeDeployment} from "../../deploy/description.mjs";
import {topologyFromCounts} from "../../workers/lib/topology.mjs";
import {execFile} from "node:child_process";
import {promisify} from "node:util";
import {join} from "node:path";
import {sharedModel} from "./helpers.mjs";
import {ROOT} from "../wasm/helpers.mjs";

const run = promisify(execFile);

const TARGET = "stories260K-pad256-llama-q8_0.gguf";
const STORY = "Once upon a time there was a little girl named Lily. She loved to play";
const draftOpts = (bytes, n = 4) => ({draftBytes: bytes, draft: {knot: "draft.knot", n}});

async function pair(t, draftName = "stories260K-pad256-llama-q6_k.gguf") {
  const target = await sharedKnot(t, TARGET), draft = await sharedKnot(t, draftName);
  return target && draft ? {target, draft} : null;
}

test("a draft model on the mesh: greedy ids == plain mesh == single process; telemetry counts drafts", async (t) => {
  const p = await pair(t);
  if (!p) return;
  const options = {maxTokens: 40, temperature: 0};
  const want = await single(p.target, STORY, options);
  assert.ok(want.ids.length >= 8, "a non-trivial continuation");
  // processes: each station and shard in its own workerd process (the coordinator drafts ahead while they compute)
  for (const counts of [{stations: [2, 3], shards: 2}, {stations: [1, 3, 1], shards: 2, chain: true}, {stations: [2, 3], shards: 2, processes: true}]) {
    const {processes, ...c} = counts;
    const mesh = await meshFor(p.target, c, {...draftOpts(p.draft, 4), processes});
    const what = JSON.stringify(counts);
    try {
      const spec = await mesh.run({ids: want.promptIds, options});
      assert.equal(spec.error, undefined, spec.error?.error);
      const plain = await mesh.run({ids: want.promptIds, options: {...options, draft: false}});
      assert.equal(plain.error, undefined, plain.error?.error);
      assert.deepEqual(plain.summary.ids, want.ids, `${what}: plain mesh (draft: false) vs single process`);
      assert.deepEqual(spec.summary.ids, want.ids, `${what}: mesh with the draft model vs single process`);
      assert.equal(spec.summary.text, want.text);
      assert.equal(plain.summary.speculative, undefined, "draft: false drafts nothing");
      const sp = spec.summary.speculative;
      assert.equal(sp.draft, "draft.knot");
      assert.equal(sp.draftN, 4);
      assert.ok(sp.drafted > 0 && sp.accepted > 0, `${what}: drafts proposed and kept: ${JSON.stringify(sp)}`);
      assert.ok(sp.accepted <= sp.drafted);
      assert.equal(sp.acceptance, sp.accepted / sp.drafted);
      assert.ok(sp.draftPasses >= sp.verifyPasses, "the draft ran in the coordinator");
      assert.ok(sp.draftWeightBytes > 0 && sp.draftKvBytes > 0, `the draft's memory is counted: ${JSON.stringify(sp)}`);
      assert.ok(spec.summary.coordinatorMemory.draftWeightBytes > 0);
      assert.ok(spec.summary.passes < plain.summary.passes, `${what}: fewer passes (${spec.summary.passes} vs ${plain.summary.passes})`);
      // greedy: every pass drafts ahead while it is out; a pass after one whose drafts were all
      // kept (and whose last row gave the first drafted-ahead token) takes them
      if (processes) assert.ok(sp.ahead.passes > 0 && sp.ahead.drafted > 0 && sp.ahead.used > 0, `${what}: drafted ahead and used: ${JSON.stringify(sp.ahead)}`);
      assert.ok(sp.ahead.used <= sp.ahead.drafted);
      const last = spec.tokens.at(-1).telemetry.speculative;
      assert.deepEqual(last, {drafted: sp.drafted, accepted: sp.accepted, acceptance: sp.acceptance});
      const started = spec.telemetry.find((e) => e.event === "decode_started");
      assert.equal(started.draft, "draft.knot");
      assert.equal(started.drafting, true);
      // a request lowers K within the configured n: the same ids, at most 2 drafts a pass
      const two = await mesh.run({ids: want.promptIds, options: {...options, draftN: 2}});
      assert.equal(two.error, undefined, two.error?.error);
      assert.deepEqual(two.summary.ids, want.ids, `${what}: draftN 2`);
      assert.equal(two.summary.speculative.draftN, 2);
      assert.ok(two.summary.speculative.drafted <= 2 * two.summary.speculative.verifyPasses);
    } finally { await mesh.close(); }
  }
});

test("a draft model on the mesh with seeded sampling: same seed, same draws; drafts verified", async (t) => {
  const p = await pair(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!p) return;
  const mesh = await meshFor(p.target, {stations: [2, 3], shards: 2}, draftOpts(p.draft, 3));
  try {
    const options = {maxTokens: 32, temperature: 0.8, topK: 20, seed: 5, ignoreEos: true};
    const a = await mesh.run({prompt: STORY, options});
    const b = await mesh.run({prompt: STORY, options});
    assert.equal(a.error, undefined, a.error?.error);
    assert.deepEqual(a.summary.ids, b.summary.ids, "same seed, same draws");
    assert.equal(a.summary.ids.length, 32);
    assert.ok(a.summary.speculative.drafted > 0, JSON.stringify(a.summary.speculative));
    assert.deepEqual(a.summary.speculative.ahead, {passes: 0, drafted: 0, used: 0}, "sampling drafts draw from the RNG: none ahead");
    const c = await mesh.run({prompt: STORY, options: {...options, seed: 6}});
    assert.notDeepEqual(c.summary.ids, a.summary.ids, "another seed, other draws");
  } finally { await mesh.close(); }
});

test("the draft is configuration: a request may turn it off or lower n, nothing else", async (t) => {
  const p = await pair(t);
  if (!p) return;
  const mesh = await meshFor(p.target, {stations: [5], shards: 1}, draftOpts(p.draft, 3));
  try {
    await assert.rejects(mesh.run({prompt: "Once", options: {draftN: 4}}), /HTTP 400: .*options\.draftN must be in \[1, 3\], got 4/);
    await assert.rejects(mesh.run({prompt: "Once", options: {draft: "other.knot"}}),
                         /HTTP 400: .*options\.draft is not settable from a request: the draft model is deployment configuration \(the DRAFT var\)/);
    await assert.rejects(mesh.run({prompt: "Once", options: {draft: 1}}), /HTTP 400: .*options\.draft must be a boolean/);
  } finally { await mesh.close(); }
  const none = await meshFor(p.target, {stations: [5], shards: 1});
  try {
    await assert.rejects(none.run({prompt: "Once", options: {draft: true}}), /HTTP 400: .*options\.draft: this deployment has no draft model \(the DRAFT var\)/);
    await assert.rejects(none.run({prompt: "Once", options: {draftN: 2}}), /HTTP 400: .*options\.draftN: this deployment has no draft model/);
    const ok = await none.run({prompt: "Once", options: {maxTokens: 4, temperature: 0, draft: false}});
    assert.equal(ok.error, undefined, ok.error?.error);
  } finally { await none.close(); }
});

test("a draft of another vocabulary, or one that does not fit the coordinator's 128 MB, is refused naming it", async (t) => {
  const target = await sharedKnot(t, TARGET);
  const other = synthKnot(t, "tied", SYNTH_TIED);  // 300 tokens, not stories260K's 512
  if (!target || !other) return;
  const mesh = await meshFor(target, {stations: [5], shards: 1}, draftOpts(other));
  try {
    const r = await mesh.run({prompt: STORY, options: {maxTokens: 4, temperature: 0}});
    assert.match(r.error?.error ?? "", /draft model r2:draft\.knot and target model r2:model\.knot have different vocabularies: 300 vs 512 tokens/);
    assert.equal(r.tokens.length, 0);
  } finally { await mesh.close(); }
  // a draft whose KV cache for the target's context (2048 positions) needs 134 MB
  const small = synthKnot(t, "tied-ctx2048", [...SYNTH_TIED, "--ctx", "2048"]);
  const big = synthKnot(t, "big-kv", ["--arch", "qwen3", "--hidden", "64", "--layers", "8", "--heads", "16", "--kv-heads", "16",
                                      "--head-dim", "128", "--ffn", "64", "--vocab", "300", "--type", "Q8_0", "--ctx", "2048", "--seed", "3"]);
  if (!small || !big) return;
  const m2 = await meshFor(small, {stations: [2], shards: 1}, draftOpts(big));
  try {
    const r = await m2.run({ids: [1, 5, 9], options: {maxTokens: 4, temperature: 0}});
    assert.match(r.error?.error ?? "", /draft model draft\.knot does not fit in the coordinator's 128 MB wasm memory: \d+ bytes of weights \+ 134217728 bytes of KV cache \(2048 positions\)/);
  } finally { await m2.close(); }
});

test("the deployment description carries the draft as the coordinator's DRAFT var; a bad one is refused", async (t) => {
  const topology = topologyFromCounts({n_layer: 5, n_embd: 64, n_vocab: 512}, {knot: "model.knot", stations: [5], shards: 1});
  const d = await describeDeployment(topology, {draft: {knot: "draft.knot", n: 6}});
  assert.deepEqual(d.scripts[0].vars.DRAFT, {knot: "draft.knot", n: 6});
  assert.ok(d.scripts.slice(1).every((s) => s.vars.DRAFT === undefined), "only the coordinator drafts");
  await assert.rejects(describeDeployment(topology, {draft: {knot: "draft.knot", n: 65}}), /draft\.n must be an integer in \[1, 64\], got 65/);
  await assert.rejects(describeDeployment(topology, {draft: {n: 2}}), /draft needs knot/);
  await assert.rejects(describeDeployment(topology, {draft: {knot: "d.knot", url: "x"}}), /unknown option draft\.url/);
});

test("knotwork mesh --draft: the plain mesh's greedy ids; the drafts and the draft's memory on stderr", async (t) => {
  const q8 = sharedModel(t, TARGET), q6 = sharedModel(t, "stories260K-pad256-llama-q6_k.gguf");
  if (!q8 || !q6) return;
  const mesh = (extra) => run(process.execPath, [join(ROOT, "bin/knotwork.mjs"), "mesh", q8, "--stations", "2,3", "--shards", "2", "-p", STORY,
                                                  "-n", "30", "--temp", "0", "--ignore-eos", "--ids", ...extra], {maxBuffer: 1 << 24}).catch((e) => e);
  const plain = await mesh([]), spec = await mesh(["--draft", q6, "--draft-n", "3"]);
  assert.ok(!(plain instanceof Error) && !(spec instanceof Error), `${plain.stderr}${spec.stderr}`);
  assert.equal(spec.stdout, plain.stdout);
  assert.match(spec.stderr, /speculative \(draft .*q6_k\.gguf, n 3\): \d+ drafted, [1-9]\d* accepted \(\d+%\) in \d+ verify passes; draft \d+ passes in [\d.]+ s, [\d.]+ MiB weights \+ [\d.]+ MiB KV in the coordinator/);
  assert.doesNotMatch(plain.stderr, /speculative/);
  const other = synthKnot(t, "tied", SYNTH_TIED);
  if (!other) return;
  const {writeFileSync, mkdtempSync, rmSync} = await import("node:fs");
  const {tmpdir} = await import("node:os");
  const dir = mkdtempSync(join(tmpdir(), "knot-mesh-draft-"));
  try {
    writeFileSync(join(dir, "other.knot"), other);
    const r = await mesh(["--draft", join(dir, "other.knot")]);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /draft model .*other\.knot and target model .*q8_0\.gguf have different vocabularies: 300 vs 512 tokens/);
  } finally { rmSync(dir, {recursive: true}); }
});
