// Sampling drafts in wasm (core/infer/draft_model.h): with {draft} and temperature > 0 the
// draft model samples its proposals from its own distribution q, and the session verifies
// them by min(1, p/q) / norm(max(0, p - q)). A seed reproduces the run; sampled drafts are
// kept more often than one-hot ones ({draftOneHot}); the ABI a mesh coordinator drafts with
// (kw_session_propose: ids + the q each was drawn from; kw_generator_step_draft_q_topk:
// verification against that q) round-trips; a draft whose engine does not fit beside the
// target's is refused by kw_session_new naming the draft. The output distribution itself is
// tested natively (tests/native/infer_draft_model.cpp, many seeds).
import {test} from "node:test";
import assert from "node:assert/strict";
import {join} from "node:path";
import * as kw from "../../bindings/knotwork.mjs";
import {Generator, topkLse} from "../../bindings/generator.mjs";
import {MODELS, haveFiles} from "./helpers.mjs";

const shared = MODELS;
const Q8 = join(shared, "stories260K-pad256-llama-q8_0.gguf"), Q4 = join(shared, "stories260K-pad256-llama-q4_k_m.gguf");
const open = async (path) => { const src = await kw.fileSource(path); try { return await kw.openModel(src); } finally { await src.close?.(); } };
const PROMPT = "Once upon a time, there was a little girl named Lily. She";

test("sampled drafts: a seed reproduces; they are kept more often than one-hot drafts at temperature 1", async (t) => {
  if (!haveFiles(t, Q8, Q4)) return;
  const target = await open(Q8), draft = await open(Q4);
  try {
    const o = {maxTokens: 32, temperature: 1, topK: 0, topP: 1, minP: 0, ignoreEos: true};
    const a = await target.complete(PROMPT, {...o, seed: 5, draft}), b = await target.complete(PROMPT, {...o, seed: 5, draft});
    assert.deepEqual(b.ids, a.ids, "the same seed, the same ids");
    const c = await target.complete(PROMPT, {...o, seed: 6, draft});
    assert.notDeepEqual(c.ids, a.ids);
    const rate = {sampled: [0, 0], oneHot: [0, 0]};
    for (let seed = 1; seed <= 12; seed++)
      for (const [k, extra] of [["sampled", {}], ["oneHot", {draftOneHot: true}]]) {
        const r = await target.complete(PROMPT, {...o, seed, draft, ...extra});
        assert.equal(r.ids.length, 32);
        rate[k][0] += r.speculative.accepted, rate[k][1] += r.speculative.drafted;
      }
    const rs = rate.sampled[0] / rate.sampled[1], ro = rate.oneHot[0] / rate.oneHot[1];
    t.diagnostic(`acceptance: sampled ${rate.sampled.join("/")} = ${rs.toFixed(3)}, one-hot ${rate.oneHot.join("/")} = ${ro.toFixed(3)}`);
    const se = Math.sqrt(rs * (1 - rs) / rate.sampled[1] + ro * (1 - ro) / rate.oneHot[1]);
    assert.ok(rs - ro > 4 * se, `sampled ${rs}, one-hot ${ro}`);
    // greedy: the draft stays greedy and the ids are the plain ones
    const g = {maxTokens: 24, temperature: 0, ignoreEos: true};
    assert.deepEqual((await target.complete(PROMPT, {...g, draft})).ids, (await target.complete(PROMPT, g)).ids);
  } finally { target.close(); draft.close(); }
});

test("kw_session_propose gives ids and the q each was drawn from; kw_generator_step_draft_q_topk verifies against it", async (t) => {
  if (!haveFiles(t, Q8, Q4)) return;
  const target = await open(Q8), draft = await open(Q4);
  const w = await kw.init();
  const newSession = (model) => w.withString(JSON.stringify({n_ctx: 64}), (p, n) => {
    const out = w.malloc(4);
    try { w.call("kw_session_new", model.handle, p, n, out); return w.i32(out, 1)[0]; } finally { w.free(out); }
  });
  const ds = newSession(draft), ts = newSession(target);
  try {
    const hist = target.tokenize(PROMPT);
    const gen = await Generator.open(target, {temperature: 1, topK: 20, topP: 1, minP: 0, seed: 9, maxTokens: 8});
    gen.start(hist);
    const pr = gen.proposeWith(ds, hist, 4);
    assert.equal(pr.ids.length, 4);
    for (let i = 0; i < 4; i++) {
      const q = pr.q[i];
      assert.ok(q && q.ids.length > 1 && q.ids.length <= 20, `q ${i} has ${q?.ids.length} candidates (top-k 20)`);
      assert.ok(Math.abs(q.p.reduce((a, v) => a + v, 0) - 1) < 1e-9);
      assert.ok(q.p[q.ids.indexOf(pr.ids[i])] > 0, "the drafted token is in its q");
    }
    // the same seed and history propose the same tokens (the draft's KV follows hist)
    const gen2 = await Generator.open(target, {temperature: 1, topK: 20, topP: 1, minP: 0, seed: 9, maxTokens: 8});
    gen2.start(hist);
    assert.deepEqual(gen2.proposeWith(ds, hist, 4).ids, pr.ids);
    gen2.free();
    // verify draft 0 against the target's logits at the last prompt position
    const a = Int32Array.from(hist), p = w.copyIn(new Uint8Array(a.buffer));
    try { w.call("kw_session_eval", ts, p, a.length); } finally { w.free(p); }
    const lg = new Float32Array(w.resultBytes().buffer.slice(0));
    const top = await topkLse(lg, 0, lg.length, lg.length);
    const s = gen.stepDraft(top, pr.ids[0], pr.q[0]);
    assert.equal(typeof s.accepted, "boolean");
    if (s.accepted) assert.equal(s.id, pr.ids[0]);
    assert.throws(() => gen.stepDraft(top, 3, {ids: [pr.ids[1] === 3 ? 4 : pr.ids[1]], p: [1]}), /not drawn from it/);
    gen.free();
    // a greedy generator: the argmax, one-hot (q null)
    const greedy = await Generator.open(target, {temperature: 0, maxTokens: 8});
    greedy.start(hist);
    const gp = greedy.proposeWith(ds, hist, 3);
    assert.equal(gp.ids.length, 3);
    assert.deepEqual(gp.q, [null, null, null]);
    greedy.free();
  } finally {
    w.call("kw_session_free", ds); w.call("kw_session_free", ts);
    target.close(); draft.close();
  }
});

test("kw_session_new counts the draft's engine: a draft that does not fit beside the target is refused naming it", async (t) => {
  if (!haveFiles(t, Q8, Q4)) return;
  const target = await open(Q8), draft = await open(Q4);
  try {
    const c = target.info.config;
    // bytes per position of one engine: F16 K and V, plus the f32 K/V head copies and scores
    const perPos = 2 * c.n_layer * c.n_head_kv * c.head_dim * 2 + 4 * (2 * c.head_dim + 1);
    const free = 128 * 1024 * 1024 - (await kw.memoryStats()).heap;
    const nCtx = Math.floor(0.62 * free / perPos);  // one engine fits, two do not
    const o = {maxTokens: 2, temperature: 0, nCtx};
    const alone = await target.complete("Lily", o);
    assert.equal(alone.ids.length, 2, "the target alone fits");
    await assert.rejects(target.complete("Lily", {...o, draft}),
                         /kw_session_new: draft model .*q4_k_m\.gguf does not fit: its engine needs \d+ bytes \(\d+ bytes of F16 KV cache for \d+ positions/);
    const small = await target.complete("Lily", {...o, nCtx: 256, draft});
    assert.equal(small.ids.length, 2, "the same draft with a smaller context fits");
  } finally { target.close(); draft.close(); }
});
