// Wardens under workerd: the layer warden (tensor bytes in DO memory, identity-checked,
// invalidated on reject) and the cobordism warden (L1 rows / L2 Workers KV / L3 R2) — the
// traps of docs/traps.md that live in the workers (4, 5, 7, 8, 9).
import {test} from "node:test";
import assert from "node:assert/strict";
import {sharedKnot, single, meshFor, startMesh, topologyFromCounts, configOf} from "./helpers.mjs";

const MODEL = "stories260K-pad256-llama-q4_k_m.gguf";
const GREEDY = {maxTokens: 12, temperature: 0};

async function wardenCall(mesh, kind, key, path, body) {
  const w = await mesh.worker("knot-warden");
  const r = await w.fetch(`http://x/do/${kind}/${encodeURIComponent(key)}${path}`, {method: body ? "POST" : "GET", body: body && JSON.stringify(body)});
  return {status: r.status, json: await r.json()};
}
const stationStats = async (mesh, name) => (await (await mesh.worker(`knot-${name}`)).fetch("http://x/stats")).json();

test("trap 8: a warden serving corrupt bytes -> hash reject, R2 fallback, /invalidate, the next request clean", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes) return;
  const want = await single(bytes, "Once upon a time", GREEDY);
  // fluid stations: every request loads its phases through the warden
  const mesh = await meshFor(bytes, {stations: [2, 3], shards: 2, resident: false}, {testHooks: true, warden: true});
  try {
    let r = await mesh.run({ids: want.promptIds, options: GREEDY});
    assert.deepEqual(r.summary?.ids, want.ids, r.error?.error);
    let s = await stationStats(mesh, "st0");
    assert.ok(s.stats.wardenReads > 0, "station st0 read through the warden");
    assert.equal(s.stats.wardenRejects, 0);
    const c = await wardenCall(mesh, "layer", "model.knot|0-2", "/debug/corrupt", {name: "blk_1_ffn_up_weight"});
    assert.ok(c.json.corrupted >= 1, JSON.stringify(c.json));
    r = await mesh.run({ids: want.promptIds, options: GREEDY});
    assert.deepEqual(r.summary?.ids, want.ids, `after corruption: ${r.error?.error}`);
    s = await stationStats(mesh, "st0");
    assert.equal(s.stats.wardenRejects, 1, "exactly one reject: the entry was invalidated, not served again");
    assert.ok(s.stats.invalidated.includes("blk_1_ffn_up_weight"), JSON.stringify(s.stats.invalidated));
    assert.match(s.stats.lastReject, /blk_1_ffn_up_weight.*content hash/);
    const ws = await wardenCall(mesh, "layer", "model.knot|0-2", "/stats");
    assert.ok(ws.json.invalidated >= 1);
    r = await mesh.run({ids: want.promptIds, options: GREEDY});
    assert.deepEqual(r.summary?.ids, want.ids);
    assert.equal((await stationStats(mesh, "st0")).stats.wardenRejects, 1, "the next request is clean");
  } finally { await mesh.close(); }
});

test("trap 9: a warden configured for one model refuses another; the identity travels with every call", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes) return;
  const mesh = await meshFor(bytes, {stations: [5], shards: 1}, {testHooks: true, warden: true});
  try {
    const r = await mesh.run({ids: [1, 400], options: {maxTokens: 2, temperature: 0}});
    assert.equal(r.error, undefined, r.error?.error);
    const head = await mesh.bucket.head("model.knot");
    const other = {knot: "other.knot", etag: "0123", size: 99};
    let c = await wardenCall(mesh, "layer", "model.knot|0-5", "/configure", {identity: other});
    assert.equal(c.status, 409);
    assert.match(c.json.error, /configured for model\.knot .*refused \/configure for other\.knot/);
    c = await wardenCall(mesh, "layer", "model.knot|0-5", "/tensors", {identity: other, ranges: [{name: "x", offset: 0, size: 4}]});
    assert.equal(c.status, 409);
    c = await wardenCall(mesh, "layer", "model.knot|0-5", "/tensors", {ranges: [{name: "x", offset: 0, size: 4}]});
    assert.equal(c.status, 400);
    assert.match(c.json.error, /carries no model identity/);
    c = await wardenCall(mesh, "layer", "model.knot|0-5", "/configure", {identity: {knot: "model.knot", etag: head.etag, size: head.size}});
    assert.equal(c.status, 200);
    // a fresh warden not yet configured refuses reads
    c = await wardenCall(mesh, "layer", "model.knot|9-9", "/tensors", {identity: other, ranges: []});
    assert.equal(c.status, 409);
    assert.match(c.json.error, /not configured/);
  } finally { await mesh.close(); }
});

test("traps 4 + 5: cobordism warden rows — KV writes through waitUntil, a wrong-length KV entry deleted, never served", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes) return;
  const want = await single(bytes, "Once upon a time", GREEDY);
  const config = await configOf(bytes);
  const topology = topologyFromCounts(config, {knot: "model.knot", stations: [5], shards: 2});
  const mesh = await startMesh({knotBytes: bytes, topology, testHooks: true, warden: true});
  try {
    const kv = await mesh.mf.getKVNamespace("ROWS_KV", "knot-warden");
    const head = await mesh.bucket.head("model.knot");
    const key = (tok) => `model.knot|${head.etag}|row|${tok}`;
    const tok = want.promptIds[1];
    // a poisoned L2 entry before the first request
    await kv.put(key(tok), new Uint8Array(12));
    let r = await mesh.run({ids: want.promptIds, options: GREEDY});
    assert.deepEqual(r.summary?.ids, want.ids, r.error?.error);
    // the wrong entry is gone and the good rows were written after the answer (waitUntil)
    let row = null;
    for (let i = 0; i < 50 && !(row && row.byteLength === config.n_embd * 4); i++) {
      row = await kv.get(key(tok), "arrayBuffer");
      await new Promise((ok) => setTimeout(ok, 100));
    }
    assert.equal(row?.byteLength, config.n_embd * 4, "L2 holds the right-length row (written through waitUntil)");
    const owner = topology.shards.find((s) => tok >= s.vocab[0] && tok < s.vocab[1]);
    const st = await wardenCall(mesh, "rows", `model.knot|${owner.vocab[0]}-${owner.vocab[1]}`, "/stats");
    assert.ok(st.json.l2Rejected >= 1, JSON.stringify(st.json));
    assert.ok(st.json.l3 >= 1);
    // a second request: rows from L1 (same warden object), same ids
    r = await mesh.run({ids: want.promptIds, options: GREEDY});
    assert.deepEqual(r.summary?.ids, want.ids);
    assert.ok((await wardenCall(mesh, "rows", `model.knot|${owner.vocab[0]}-${owner.vocab[1]}`, "/stats")).json.l1 >= 1);
  } finally { await mesh.close(); }
});
