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
    assert.equal(ws.json.invalidated, c.json.corrupted, "every corrupted entry of the tensor dropped");
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

// The design: a wrong-length L2 entry is deleted without blocking the answer, and the good
// rows are written after the answer through ctx.waitUntil. The warden's L2 puts are held
// (test hook) while the request runs, so the order is observed, not timed: the answer
// arrives while every put is still held, the wrong entry is gone although no good row has
// replaced it yet, and the held puts land once released. (A Durable Object stays alive
// while its promises are pending, so waitUntil and a floating promise are not told apart
// here; what the design needs from waitUntil, the write landing after the answer, is.)
test("traps 4 + 5: cobordism warden rows — a wrong-length KV entry deleted and never served; KV writes land after the answer", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes) return;
  const want = await single(bytes, "Once upon a time", GREEDY);
  const config = await configOf(bytes);
  const topology = topologyFromCounts(config, {knot: "model.knot", stations: [5], shards: 2});
  const mesh = await startMesh({knotBytes: bytes, topology, testHooks: true, warden: true});
  const poll = async (what, f) => {
    for (let i = 0; i < 100; i++) { const v = await f(); if (v) return v; await new Promise((ok) => setTimeout(ok, 50)); }
    assert.fail(`${what}: not seen within 100 polls`);
  };
  try {
    const kv = await mesh.mf.getKVNamespace("ROWS_KV", "knot-warden");
    const head = await mesh.bucket.head("model.knot");
    const key = (tok) => `model.knot|${head.etag}|row|${tok}`;
    const tok = want.promptIds[1];
    const owner = topology.shards.find((s) => tok >= s.vocab[0] && tok < s.vocab[1]);
    const rows = `model.knot|${owner.vocab[0]}-${owner.vocab[1]}`;
    const hold = async (body) => (await wardenCall(mesh, "rows", rows, "/debug/hold-l2-writes", body)).json;
    // a poisoned L2 entry before the first request; the owner's L2 puts held
    await kv.put(key(tok), new Uint8Array(12));
    assert.equal((await hold({hold: true})).hold, true);
    let r = await mesh.run({ids: want.promptIds, options: GREEDY});
    assert.equal(r.error, undefined, r.error?.error);
    // a warden that awaited its puts would not answer while they are held: its shard abstains
    assert.deepEqual(r.telemetry.filter((e) => e.event === "abstain"), [], "the warden answered while its L2 puts were held");
    assert.equal((await hold({})).hold, true, "the puts were still held when the answer arrived");
    assert.deepEqual(r.summary.ids, want.ids);
    const st = (await wardenCall(mesh, "rows", rows, "/stats")).json;
    assert.equal(st.l2Rejected, 1, `the poisoned entry rejected once: ${JSON.stringify(st)}`);
    assert.equal(st.l2, 0, "nothing served from L2");
    assert.ok(st.l3 >= 1, JSON.stringify(st));
    // the wrong entry is deleted with no good row to replace it (every put still held)
    await poll("the wrong-length entry deleted", async () => (await kv.get(key(tok), "arrayBuffer")) === null);
    await poll(`all ${st.l3} rows read from R2 waiting to be written to L2`, async () => (await hold({})).held === st.l3);
    const owned = (name) => { const id = Number(name.split("|").at(-1)); return id >= owner.vocab[0] && id < owner.vocab[1]; };
    assert.deepEqual((await kv.list()).keys.map((k) => k.name).filter(owned), [], "no row of the held warden in L2 before the release");
    // released: the puts land (kept alive after the answer)
    assert.equal((await hold({hold: false})).held, st.l3);
    const row = await poll("the good row written to L2", async () => {
      const b = await kv.get(key(tok), "arrayBuffer");
      return b && b.byteLength === config.n_embd * 4 ? b : null;
    });
    assert.equal(row.byteLength, config.n_embd * 4, "L2 holds the right-length row");
    // a second request: rows from L1 (same warden object), same ids
    r = await mesh.run({ids: want.promptIds, options: GREEDY});
    assert.deepEqual(r.summary?.ids, want.ids, r.error?.error);
    const st2 = (await wardenCall(mesh, "rows", rows, "/stats")).json;
    assert.equal(st2.l3, st.l3, "no R2 read for rows already in L1");
    assert.ok(st2.l1 > st.l1, JSON.stringify(st2));
  } finally { await mesh.close(); }
});
