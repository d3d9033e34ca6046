// `knot generate --draft SMALL`: speculative decoding with a draft model in the native CLI —
// the same ids as plain greedy decoding, drafted/accepted on stderr, a vocabulary mismatch
// named; the same through wasm: `knotwork generate --draft` and the JS API's {draft, draftN}
// (the draft model's own engine in the target's session, kw_session_new "draft_model").
import {test} from "node:test";
import assert from "node:assert/strict";
import {execFile} from "node:child_process";
import {promisify} from "node:util";
import {mkdtempSync, rmSync} from "node:fs";
import {tmpdir} from "node:os";
import {join} from "node:path";
import {ROOT, KNOT_BIN, MODELS, haveFiles} from "./helpers.mjs";
import * as kw from "../../bindings/knotwork.mjs";

const run = promisify(execFile);
const exec = (cmd, args) => run(cmd, args, {maxBuffer: 1 << 24}).catch((e) => e);
const shared = MODELS;
const Q8 = join(shared, "stories260K-pad256-llama-q8_0.gguf"), Q4 = join(shared, "stories260K-pad256-llama-q4_k_m.gguf");

test("knot generate --draft: the same greedy ids as plain decoding, speculation on stderr", async (t) => {
  if (!haveFiles(t, Q8, Q4, KNOT_BIN)) return;
  const args = [Q8, "-p", "Once upon a time, there was a little girl named Lily. She", "-n", "40", "--temp", "0", "--ignore-eos", "--ids"];
  const plain = await exec(KNOT_BIN, ["generate", ...args]);
  assert.ok(!(plain instanceof Error), plain.stderr);
  for (const n of ["2", "5"]) {
    const spec = await exec(KNOT_BIN, ["generate", ...args, "--draft", Q4, "--draft-n", n]);
    assert.ok(!(spec instanceof Error), spec.stderr);
    assert.equal(spec.stdout, plain.stdout, `--draft-n ${n}`);
    const m = new RegExp(`speculative \\(draft .*q4_k_m\\.gguf, n ${n}\\): (\\d+) drafted, (\\d+) accepted`).exec(spec.stderr);
    assert.ok(m, spec.stderr);
    assert.ok(Number(m[2]) > 0 && Number(m[2]) <= Number(m[1]), spec.stderr);
  }
});

test("knot generate --draft with another vocabulary names both models", async (t) => {
  if (!haveFiles(t, Q8, KNOT_BIN)) return;
  const dir = mkdtempSync(join(tmpdir(), "knot-draft-cli-"));
  try {
    const other = join(dir, "other.knot");
    await run(KNOT_BIN, ["synth", "--arch", "llama", "--vocab", "300", other]);
    const r = await exec(KNOT_BIN, ["generate", Q8, "-p", "x", "-n", "2", "--draft", other]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /draft model .*other\.knot and target model .*q8_0\.gguf have different vocabularies: 300 vs 512 tokens/);
    const bad = await exec(KNOT_BIN, ["generate", Q8, "-p", "x", "--draft-n", "0"]);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--draft-n/);
  } finally { rmSync(dir, {recursive: true}); }
});

test("wasm: knotwork generate --draft and {draft, draftN} give the plain greedy ids; telemetry reports the draft", async (t) => {
  if (!haveFiles(t, Q8, Q4)) return;
  const cli = (extra) => exec(process.execPath, [join(ROOT, "bin/knotwork.mjs"), "generate", Q8, "-p", "Once upon a time, Lily",
                                                "-n", "30", "--temp", "0", "--ignore-eos", "--ids", ...extra]);
  const plain = await cli([]), spec = await cli(["--draft", Q4, "--draft-n", "3"]);
  assert.ok(!(plain instanceof Error) && !(spec instanceof Error), `${plain.stderr}${spec.stderr}`);
  assert.equal(spec.stdout, plain.stdout);
  assert.match(spec.stderr, /speculative \(draft .*q4_k_m\.gguf, n 3\): \d+ drafted, [1-9]\d* accepted/);
  const target = await kw.openModel(await kw.fileSource(Q8)), draft = await kw.openModel(await kw.fileSource(Q4));
  try {
    const o = {maxTokens: 36, temperature: 0, ignoreEos: true};
    const a = await target.complete("Tom had a red ball. He", o);
    for (const draftN of [1, 4]) {
      let last;
      for await (const ev of target.generate("Tom had a red ball. He", {...o, draft, draftN})) if (ev.type === "token") last = ev.telemetry.speculative;
      const b = await target.complete("Tom had a red ball. He", {...o, draft, draftN});
      assert.deepEqual(b.ids, a.ids, `draftN ${draftN}`);
      assert.equal(b.speculative.draftN, draftN);
      assert.ok(b.speculative.accepted > 0 && b.speculative.accepted <= b.speculative.drafted, JSON.stringify(b.speculative));
      assert.equal(last.drafted, b.speculative.drafted);
    }
    await assert.rejects(async () => target.complete("x", {...o, draft: {}}), /draft must be a loaded Model/);
  } finally { target.close(); draft.close(); }
});

test("wasm: a Drafter (kw_drafter_*, a mesh coordinator's) proposes the draft model's greedy tokens after any history", async (t) => {
  if (!haveFiles(t, Q8, Q4)) return;
  const {Drafter, draftFits} = await import("../../bindings/drafter.mjs");
  const target = await kw.openModel(await kw.fileSource(Q8)), draft = await kw.openModel(await kw.fileSource(Q4));
  try {
    const greedy = async (ids, n) => (await draft.complete(ids, {maxTokens: n, temperature: 0, ignoreEos: true})).ids;
    const d = await Drafter.open(draft, target, {nCtx: 256, n: 4});
    assert.equal(d.n, 4);
    assert.ok(d.info.kv_bytes > 0);
    const hist = target.tokenize("Once upon a time, Lily");
    d.prime(hist);
    const a = d.propose(hist, 8);
    assert.equal(a.q, null, "a greedy draft: one-hot");
    assert.deepEqual(a.ids, await greedy(hist, 4), "min(n, room) tokens: the draft's greedy continuation");
    assert.deepEqual(d.propose(hist, 2).ids, (await greedy(hist, 2)), "room 2: two");
    // a history that keeps the first proposal and then goes elsewhere (a rejection): the KV is cut back
    const next = [...hist, a.ids[0], 42];
    assert.deepEqual(d.propose(next, 4).ids, await greedy(next, 4));
    assert.deepEqual(d.propose(next, 0).ids, []);
    assert.ok(d.telemetry().passes > 0);
    d.free();
    const header = await kw.parseKnotHeader(await kw.fileSource(Q4));
    const fit = await draftFits(header, {nCtx: 256, name: "q4"});
    assert.ok(fit.weightBytes > 0 && fit.kvBytes === 2 * header.config.n_layer * header.config.n_head_kv * header.config.head_dim * 2 * 256);
    const huge = {...header, tensors: [{size: 200 << 20}]};
    await assert.rejects(draftFits(huge, {nCtx: 256, name: "huge.gguf"}), /draft model huge\.gguf does not fit in the coordinator's 128 MB wasm memory: 209715200 bytes of weights/);
    // a draft whose weights and KV cache fit but not with its activation buffers and
    // proposal distributions: refused, naming it (the buffers were not counted before)
    const margin = 8 << 20;
    assert.ok(fit.bufferBytes > 0);
    const tight = {...header, tensors: [{size: fit.free - fit.kvBytes - margin - (fit.bufferBytes >> 1)}]};
    await assert.rejects(draftFits(tight, {nCtx: 256, name: "tight.gguf", margin}),
                         /draft model tight\.gguf does not fit .* bytes of KV cache \(256 positions\) \+ \d+ bytes of buffers and proposal distributions/);
    // the core counts them too: a context whose KV cache alone fits what is left, but not
    // with the engine's buffers, is refused naming the draft
    const perTok = 2 * header.config.n_layer * header.config.n_head_kv * header.config.head_dim * 2;
    const room = 128 * 1024 * 1024 - (await kw.memoryStats()).heap;
    const nCtx = Math.floor(room / perTok) - 100;  // KV: room - 256 KB; its buffers: ~68 bytes a position more
    await assert.rejects(Drafter.open(draft, target, {nCtx, n: 4}),
                         /kw_drafter_new: draft model .*q4_k_m.* does not fit: a context of \d+ tokens needs \d+ bytes of F16 KV cache \+ \d+ bytes of buffers and proposal distributions/);
    // freeing the draft model frees its drafters
    const d2 = await Drafter.open(draft, target, {n: 2});
    draft.close();
    assert.throws(() => d2.propose(hist, 2), /unknown or freed handle/);
  } finally { target.close(); draft.close(); }
});

test("wasm: drafting ahead (workers/coordinator/ahead.mjs) drafts the greedy tokens after a pass; taken only after base + its first", async (t) => {
  if (!haveFiles(t, Q8, Q4)) return;
  const {Drafter} = await import("../../bindings/drafter.mjs");
  const {DraftAhead} = await import("../../workers/coordinator/ahead.mjs");
  const target = await kw.openModel(await kw.fileSource(Q8)), draft = await kw.openModel(await kw.fileSource(Q4));
  try {
    const greedy = async (ids, n) => (await draft.complete(ids, {maxTokens: n, temperature: 0, ignoreEos: true})).ids;
    const d = await Drafter.open(draft, target, {nCtx: 256, n: 4});
    const hist = target.tokenize("Once upon a time, Lily");
    const drafts = d.propose(hist, 4).ids;
    const base = [...hist, ...drafts];
    const a = await new Promise((resolve) => { const x = new DraftAhead(d, base, 5).start(); setTimeout(() => resolve(x), 200); });
    await a.stop();
    assert.deepEqual(a.ids, await greedy(base, 5), "n + 1 greedy tokens after the pass's drafts");
    assert.deepEqual(a.take([...base, a.ids[0]], 4), a.ids.slice(1, 5), "every draft kept, the last row gave the first: the rest");
    assert.deepEqual(a.take([...base, a.ids[0]], 2), a.ids.slice(1, 3), "at most room");
    assert.equal(a.take([...base, (a.ids[0] + 1) % 256], 4), null, "the last row gave another token");
    assert.equal(a.take([...hist, drafts[0], 7], 4), null, "a draft was rejected");
    // the drafter continues from what it fed ahead: the same greedy proposals after the taken ones
    const next = [...base, ...a.ids.slice(0, 5)];
    assert.deepEqual(d.propose(next, 4).ids, await greedy(next, 4));
    // stopped at once: no step runs after stop()
    const b = new DraftAhead(d, base, 5).start();
    await b.stop();
    assert.deepEqual(b.ids, []);
    d.free();
  } finally { target.close(); draft.close(); }
});
