// Wardens and the R2 object's etag, under workerd: a model replaced in R2 under the same key
// is followed (the same shape: the mesh serves the new model) or refused with an error naming
// the key and both etags (another shape) — never a mesh stuck on boot. Real models.
import {test} from "node:test";
import assert from "node:assert/strict";
import {sharedKnot, synthKnot, single, meshFor} from "./helpers.mjs";

const A = "stories260K-pad256-llama-q4_k_m.gguf";
// the same shape (dimensions) as A, another model
const SYNTH_SAME_SHAPE = ["--arch", "llama", "--hidden", "256", "--layers", "5", "--heads", "32", "--kv-heads", "16",
  "--ffn", "256", "--vocab", "512", "--type", "Q4_K_M", "--seed", "3"];
const OTHER = "llama-2-tiny-random.gguf";            // another shape
const GREEDY = {maxTokens: 12, temperature: 0};

async function wardenCall(mesh, kind, key, path, body) {
  const w = await mesh.worker("knot-warden");
  const r = await w.fetch(`http://x/do/${kind}/${encodeURIComponent(key)}${path}`, {method: body ? "POST" : "GET", body: body && JSON.stringify(body)});
  return {status: r.status, json: await r.json()};
}

test("a layer warden follows the R2 object's etag: the same key replaced (same shape) -> re-configured, the mesh serves the new model; another shape -> refused naming the key and both etags; restored -> served again", async (t) => {
  const a = await sharedKnot(t, A), other = await sharedKnot(t, OTHER), b = a && synthKnot(t, "same-shape-as-stories", SYNTH_SAME_SHAPE);
  if (!a || !b || !other) return;
  const prompt = "Once upon a time";
  const wantA = await single(a, prompt, GREEDY);
  const wantB = await single(b, wantA.promptIds, GREEDY);
  assert.notDeepEqual(wantA.ids, wantB.ids, "the two models answer differently (else this test could not tell them apart)");
  const mesh = await meshFor(a, {stations: [2, 3], shards: 2}, {testHooks: true, warden: true});
  try {
    let r = await mesh.run({ids: wantA.promptIds, options: GREEDY});
    assert.deepEqual(r.summary?.ids, wantA.ids, r.error?.error);
    const etagA = (await mesh.bucket.head("model.knot")).etag;
    assert.equal((await wardenCall(mesh, "layer", "model.knot|0-2", "/stats")).json.identity.etag, etagA);

    // the same key, another model of the same shape
    await mesh.bucket.put("model.knot", b);
    const etagB = (await mesh.bucket.head("model.knot")).etag;
    assert.notEqual(etagB, etagA);
    r = await mesh.run({ids: wantA.promptIds, options: GREEDY});
    assert.deepEqual(r.summary?.ids, wantB.ids, `after the replacement: ${r.error?.error}`);
    for (const key of ["model.knot|0-2", "model.knot|2-5"]) {
      const ws = (await wardenCall(mesh, "layer", key, "/stats")).json;
      assert.equal(ws.identity.etag, etagB, `${key} follows the new etag`);
      assert.equal(ws.reconfigured, 1, `${key}: ${JSON.stringify(ws)}`);
    }
    // a caller still naming the old etag is refused, naming both
    let c = await wardenCall(mesh, "layer", "model.knot|0-2", "/configure", {identity: {knot: "model.knot", etag: etagA, size: a.length}});
    assert.equal(c.status, 409);
    assert.equal(c.json.error, `warden: refused /configure for model.knot (etag ${etagA}, ${a.length} bytes): R2 object model.knot ` +
                               `has etag ${etagB} (${b.length} bytes); configured for etag ${etagB}`);

    // another shape under the same key: refused with a clear error, every time (not stuck)
    await mesh.bucket.put("model.knot", other);
    const etagO = (await mesh.bucket.head("model.knot")).etag;
    for (let i = 0; i < 2; i++) {
      r = await mesh.run({ids: wantA.promptIds, options: GREEDY});
      assert.equal(r.summary, undefined);
      assert.ok(r.error, "an error event");
      assert.match(r.error.error, new RegExp(`R2 object model\\.knot was replaced \\(etag ${etagA} -> ${etagO}\\) by a model of another shape ` +
                                             `\\(n_layer 5 -> 1, n_embd 256 -> 8, .*\\); this mesh was planned for the old one`), r.error.error);
    }
    // the warden itself refuses the other shape (its shape is in its storage, so a fresh
    // station isolate is refused too)
    c = await wardenCall(mesh, "layer", "model.knot|0-2", "/configure", {identity: {knot: "model.knot", etag: etagO, size: other.length},
      shape: {...(await wardenCall(mesh, "layer", "model.knot|0-2", "/stats")).json.shape, n_embd: 8}});
    assert.equal(c.status, 409);
    assert.match(c.json.error, new RegExp(`R2 object model\\.knot was replaced \\(etag ${etagB} -> ${etagO}\\) by a model of another shape \\(n_embd 256 -> 8\\)`));

    // the old model back: served again
    await mesh.bucket.put("model.knot", a);
    r = await mesh.run({ids: wantA.promptIds, options: GREEDY});
    assert.deepEqual(r.summary?.ids, wantA.ids, `restored: ${r.error?.error}`);
  } finally { await mesh.close(); }
});

// The cobordism path of the poisoned-entry trap (docs/traps.md 8): the shard checks every row
// the warden sends against the rows the core read from R2 (.knot chunk hashes), reads a
// rejected row from R2 and invalidates it at the warden.
test("cobordism warden: a poisoned L2 or L1 row -> the shard's hash check rejects it, R2 fallback, the entry invalidated; a replaced model is never served stale rows", async (t) => {
  const a = await sharedKnot(t, A);
  const b = a && synthKnot(t, "same-shape-as-stories", SYNTH_SAME_SHAPE);
  if (!a || !b) return;
  const wantA = await single(a, "Once upon a time", GREEDY);
  const wantB = await single(b, wantA.promptIds, GREEDY);
  const mesh = await meshFor(a, {stations: [5], shards: 2}, {testHooks: true, warden: true});
  const shardStats = async (name) => (await (await mesh.worker(`knot-${name}`)).fetch("http://x/stats")).json().then((j) => j.stats);
  const poll = async (what, f) => {
    for (let i = 0; i < 100; i++) { const v = await f(); if (v) return v; await new Promise((ok) => setTimeout(ok, 50)); }
    assert.fail(`${what}: not seen within 100 polls`);
  };
  try {
    const kv = await mesh.mf.getKVNamespace("ROWS_KV", "knot-warden");
    const etagA = (await mesh.bucket.head("model.knot")).etag;
    const tok = wantA.promptIds[1];
    const owner = mesh.topology.shards.find((s) => tok >= s.vocab[0] && tok < s.vocab[1]);
    const rowsKey = `model.knot|${owner.vocab[0]}-${owner.vocab[1]}`;
    const E = 256;
    // L2 poisoned with a row of the right length (its length check passes)
    const poison = new Float32Array(E).fill(0.75);
    await kv.put(`model.knot|${etagA}|row|${tok}`, poison.buffer);
    let r = await mesh.run({ids: wantA.promptIds, options: GREEDY});
    assert.deepEqual(r.summary?.ids, wantA.ids, `poisoned L2: ${r.error?.error}`);
    let ws = (await wardenCall(mesh, "rows", rowsKey, "/stats")).json;
    assert.ok(ws.l2 >= 1, `the poisoned row was served from L2: ${JSON.stringify(ws)}`);
    let s = await shardStats(owner.name);
    assert.equal(s.wardenRowRejects, 1, JSON.stringify(s));
    assert.deepEqual(s.rejectedRows, [tok]);
    assert.equal(ws.invalidated, 1, JSON.stringify(ws));
    await poll("the poisoned L2 entry deleted", async () => {
      const v = await kv.get(`model.knot|${etagA}|row|${tok}`, "arrayBuffer");
      return v === null || !new Float32Array(v).every((x) => x === 0.75);
    });
    r = await mesh.run({ids: wantA.promptIds, options: GREEDY});
    assert.deepEqual(r.summary?.ids, wantA.ids, r.error?.error);
    assert.equal((await shardStats(owner.name)).wardenRowRejects, 1, "the next request is clean");

    // L1 poisoned (bits of the raw row flipped in the warden's memory)
    const c = await wardenCall(mesh, "rows", rowsKey, "/debug/corrupt", {ids: [tok]});
    assert.equal(c.json.corrupted, 1, JSON.stringify(c.json));
    r = await mesh.run({ids: wantA.promptIds, options: GREEDY});
    assert.deepEqual(r.summary?.ids, wantA.ids, `poisoned L1: ${r.error?.error}`);
    s = await shardStats(owner.name);
    assert.equal(s.wardenRowRejects, 2, JSON.stringify(s));
    assert.deepEqual(s.rejectedRows, [tok, tok]);
    ws = (await wardenCall(mesh, "rows", rowsKey, "/stats")).json;
    assert.equal(ws.invalidated, 2);
    const l3 = ws.l3;
    r = await mesh.run({ids: wantA.promptIds, options: GREEDY});
    assert.deepEqual(r.summary?.ids, wantA.ids, r.error?.error);
    assert.equal((await shardStats(owner.name)).wardenRowRejects, 2, "the bad L1 row was dropped, not served again");
    assert.ok((await wardenCall(mesh, "rows", rowsKey, "/stats")).json.l3 > l3, "the dropped row was read from R2 again");

    // the model replaced under the same key: the warden's L1 (keyed by etag) serves none of
    // the old model's rows — the shards reject nothing and the ids are the new model's
    await mesh.bucket.put("model.knot", b);
    r = await mesh.run({ids: wantA.promptIds, options: GREEDY});
    assert.deepEqual(r.summary?.ids, wantB.ids, `replaced: ${r.error?.error}`);
    for (const sh of mesh.topology.shards) {
      const st = await shardStats(sh.name);
      assert.equal(st.wardenRowRejects ?? 0, sh.name === owner.name ? 2 : 0, `${sh.name}: no stale row served: ${JSON.stringify(st)}`);
    }
  } finally { await mesh.close(); }
});
