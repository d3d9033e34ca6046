// Faults under workerd: shards failing, stalling or down (Abstain / Decline), stations down,
// sessions lost (re-prefill), bad frames, poisoned caches (docs/protocol.md, docs/traps.md).
import {test} from "node:test";
import assert from "node:assert/strict";
import {sharedKnot, single, meshFor} from "./helpers.mjs";
import {encodeFrame} from "../../workers/lib/frame.mjs";

const MODEL = "stories260K-pad256-llama-q4_k_m.gguf";
const GREEDY = {maxTokens: 16, temperature: 0};

test("a shard answering 500, timing out or stalling: Abstain, the request completes, telemetry names the slice", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes) return;
  // ids 130 and 200 (positions 2 and 4) are in sh1's slice [128, 256)
  const want = await single(bytes, [1, 400, 130, 300, 200, 420], GREEDY);
  const mesh = await meshFor(bytes, {stations: [2, 3], shards: 4}, {testHooks: true, timeouts: {shardMs: 400}});
  try {
    for (const fault of [{status: 500}, {hangMs: 1500}, {hangMs: 600_000}]) {
      await mesh.fault("sh1", fault);
      const t0 = Date.now();
      const r = await mesh.run({ids: want.promptIds, options: GREEDY});
      assert.equal(r.error, undefined, `${JSON.stringify(fault)}: ${r.error?.error}`);
      assert.equal(r.summary.ids.length, GREEDY.maxTokens, "the request completes");
      const ab = r.telemetry.filter((e) => e.event === "abstain");
      assert.ok(ab.length > 0, `${JSON.stringify(fault)}: abstain events`);
      assert.equal(r.summary.abstains, ab.length, "the summary counts every abstain event");
      assert.equal(ab.filter((e) => e.phase === "lm-head").length, GREEDY.maxTokens, "the slice abstained at every token's lm-head");
      assert.ok(ab.every((e) => e.shard === "sh1" && e.slice[0] === 128 && e.slice[1] === 256), JSON.stringify(ab[0]));
      assert.match(ab[0].reason, fault.status ? /HTTP 500/ : /no answer within 400 ms/);
      // tokens of the missing slice in the prompt are flagged
      const owned = want.promptIds.map((id, pos) => [id, pos]).filter(([id]) => id >= 128 && id < 256).map(([, pos]) => pos);
      assert.deepEqual(owned, [2, 4], "the prompt has tokens of the missing slice");
      assert.deepEqual(r.summary.flaggedTokens, owned, "exactly the prompt positions of the missing slice flagged");
      assert.ok(Date.now() - t0 < 60_000);
      await mesh.fault("sh1", null);
    }
    // healthy again: the exact single-process ids
    const r = await mesh.run({ids: want.promptIds, options: GREEDY});
    assert.deepEqual(r.summary.ids, want.ids);
    assert.equal(r.summary.abstains, 0);
  } finally { await mesh.close(); }
});

test("every shard down: Decline with a clear error", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes) return;
  const mesh = await meshFor(bytes, {stations: [5], shards: 2}, {testHooks: true, timeouts: {shardMs: 400}});
  try {
    await mesh.fault("sh0", {status: 503});
    await mesh.fault("sh1", {hangMs: 600_000});
    const r = await mesh.run({ids: [1, 400, 300], options: GREEDY});
    assert.ok(r.error, "an error event");
    assert.match(r.error.error, /embed: every shard asked failed \(decline\)/);
    assert.equal(r.summary, undefined);
  } finally { await mesh.close(); }
});

test("a station down: a clear error naming it within the stated time (station timeout 1 s)", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes) return;
  const mesh = await meshFor(bytes, {stations: [2, 3], shards: 1}, {testHooks: true, timeouts: {stationMs: 1000}});
  try {
    await mesh.fault("st1", {hangMs: 600_000});
    let t0 = Date.now();
    let r = await mesh.run({ids: [1, 400, 300], options: GREEDY});
    assert.match(r.error?.error ?? "", /st1: no answer within 1000 ms/);
    assert.ok(Date.now() - t0 < 5000, `error after ${Date.now() - t0} ms`);
    await mesh.fault("st1", {status: 500});
    t0 = Date.now();
    r = await mesh.run({ids: [1, 400, 300], options: GREEDY});
    assert.match(r.error?.error ?? "", /st1: HTTP 500: injected fault/);
    assert.ok(Date.now() - t0 < 5000);
  } finally { await mesh.close(); }
});

// Generate with the shards slowed (so a restart lands mid-generation); at token n restart
// `station`'s object of this session (wipe: its KV snapshot too). Returns {events, summary, sid}.
async function generateWithRestart(mesh, ids, options, station, n, wipe) {
  await mesh.fault("sh0", {hangMs: 150});
  await mesh.fault("sh1", {hangMs: 150});
  const events = [];
  let sid = null, restarted = false;
  for await (const e of mesh.generate({ids, options})) {
    events.push(e);
    if (e.event === "route") sid = e.sid;
    if (e.type === "token" && e.telemetry.n === n && !restarted) {
      restarted = true;
      const w = await mesh.worker(`knot-${station}`);
      await w.fetch(`http://x/debug/restart?sid=${sid}${wipe ? "&wipe=1" : ""}`).then((r) => r.arrayBuffer()).catch(() => {});
    }
  }
  await mesh.fault("sh0", null);
  await mesh.fault("sh1", null);
  const summary = events.find((e) => e.type === "summary");
  assert.ok(summary, JSON.stringify(events.find((e) => e.type === "error")));
  assert.ok(restarted && sid);
  return {events, summary, sid};
}

const stationStats = async (mesh, name, sid) => (await (await mesh.worker(`knot-${name}`)).fetch(`http://x/stats${sid ? `?sid=${sid}` : ""}`)).json();

// After the generation: every member's snapshot of the session is gone (the end frames).
// The session ended (the prefix index ends it after its request when reuse is off, with end
// frames it does not wait for): every station's snapshot and KV for it are gone. Polled until
// the end frames have landed (at most 100 x 50 ms), then asserted.
async function assertStorageEmpty(mesh, sid, what) {
  for (const m of mesh.topology.stations.flatMap((s) => s.members.map((x) => x.name))) {
    let u;
    for (let i = 0; i < 100; i++) {
      u = (await stationStats(mesh, m, sid)).session;
      if (u.stored.sessions === 0 && u.live.length === 0) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.deepEqual(u.stored, {sessions: 0, blocks: 0, bytes: 0}, `${what}: ${m} storage after the session`);
    assert.deepEqual(u.live, [], `${what}: ${m} holds no KV`);
  }
}

test("a station's Durable Object restarted mid-session restores the session from its KV snapshot: no re-prefill, same ids; without the snapshot it re-prefills", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes) return;
  const opts = {maxTokens: 20, temperature: 0};
  const want = await single(bytes, "Once upon a time", opts);
  for (const linkMode of ["ws", "http"]) {
    // prefix reuse off: the session ends with its request (the snapshot must go with it)
    const mesh = await meshFor(bytes, {stations: [2, 3], shards: 2}, {testHooks: true, linkMode, prefixCache: {kvTokens: 0}});
    try {
      const before = await stationStats(mesh, "st1");
      let r = await generateWithRestart(mesh, want.promptIds, opts, "st1", 6, false);
      const after = await stationStats(mesh, "st1");
      assert.equal(r.summary.reprefills, 0, `${linkMode}: no re-prefill`);
      assert.ok(!r.events.some((e) => e.event === "reprefill"), `${linkMode}: no reprefill event`);
      assert.equal(after.stats.restores - before.stats.restores, 1, `${linkMode}: st1 restored the session once`);
      // the restart lands after token 5 or token 6 was fed (the coordinator feeds it as it yields it)
      const restored = after.stats.restoredPositions - before.stats.restoredPositions, P = want.promptIds.length;
      assert.ok(restored === P + 5 || restored === P + 6, `${linkMode}: restored every position fed before the restart: ${restored}`);
      assert.equal(after.stats.appended - before.stats.appended, P + opts.maxTokens - 1, `${linkMode}: no position fed twice`);
      assert.deepEqual(r.summary.ids, want.ids, `${linkMode}: same ids after the restore`);
      await assertStorageEmpty(mesh, r.sid, linkMode);
      // the snapshot wiped too: the station answers 409 and the coordinator re-prefills
      r = await generateWithRestart(mesh, want.promptIds, opts, "st1", 6, true);
      assert.equal(r.summary.reprefills, 1, `${linkMode}: re-prefilled once (one restart)`);
      assert.equal(r.events.filter((e) => e.event === "reprefill").length, 1);
      assert.deepEqual(r.summary.ids, want.ids, `${linkMode}: same ids after the re-prefill`);
      await assertStorageEmpty(mesh, r.sid, `${linkMode} (re-prefilled)`);
    } finally { await mesh.close(); }
  }
});

test("in a station chain: a mid station restarted restores from its snapshot (same ids, no re-prefill), wiped re-prefills through the chain; a hung one is a timeout naming it", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes) return;
  const opts = {maxTokens: 16, temperature: 0};
  const want = await single(bytes, "Once upon a time", opts);
  const mesh = await meshFor(bytes, {stations: [1, 2, 2], shards: 2, chain: true},
                             {testHooks: true, timeouts: {stationMs: 1500}, prefixCache: {kvTokens: 0}});
  try {
    const before = await stationStats(mesh, "st1");
    let r = await generateWithRestart(mesh, want.promptIds, opts, "st1", 5, false);
    assert.equal(r.summary.reprefills, 0, "no re-prefill");
    assert.equal((await stationStats(mesh, "st1")).stats.restores - before.stats.restores, 1, "st1 restored the session");
    assert.deepEqual(r.summary.ids, want.ids, "same ids after the restore");
    await assertStorageEmpty(mesh, r.sid, "chain");
    r = await generateWithRestart(mesh, want.promptIds, opts, "st1", 5, true);
    assert.equal(r.summary.reprefills, 1, "re-prefilled once (one restart)");
    const rp = r.events.filter((e) => e.event === "reprefill");
    assert.equal(rp.length, 1);
    assert.match(rp[0].reason, /st0 -> st1/);
    assert.deepEqual(r.summary.ids, want.ids, "same ids after the re-prefill");
    await mesh.fault("st2", {hangMs: 600_000});
    const t0 = Date.now();
    const e = await mesh.run({ids: [1, 400, 300], options: GREEDY});
    assert.match(e.error?.error ?? "", /st1 -> st2: no answer within 1500 ms/);
    assert.ok(Date.now() - t0 < 8000, `error after ${Date.now() - t0} ms`);
  } finally { await mesh.close(); }
});

test("bad frames are a 400 with a message, never a crash; the station keeps serving", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes) return;
  const mesh = await meshFor(bytes, {stations: [5], shards: 1}, {testHooks: true});
  try {
    const st = await mesh.worker("knot-st0");
    const post = async (body) => {
      const r = await st.fetch("http://x/?sid=bad", {method: "POST", body});
      return {status: r.status, body: await r.text()};
    };
    const good = encodeFrame({kind: "prefill", sid: "bad", pos: 0, width: 256, nCtx: 16, data: new Float32Array(256)});
    let r = await post(new Uint8Array(10));
    assert.equal(r.status, 400); assert.match(r.body, /shorter than the 36-byte header/);
    const badMagic = good.slice(); badMagic[0] ^= 1;
    r = await post(badMagic); assert.equal(r.status, 400); assert.match(r.body, /bad magic/);
    const badVer = good.slice(); badVer[4] = 9;
    r = await post(badVer); assert.equal(r.status, 400); assert.match(r.body, /version 9/);
    r = await post(good.slice(0, good.length - 4)); assert.equal(r.status, 400); assert.match(r.body, /1 rows x 256 values/);
    r = await post(encodeFrame({kind: "prefill", sid: "bad", pos: 0, width: 64, nCtx: 16, data: new Float32Array(64)}));
    assert.equal(r.status, 400); assert.match(r.body, /width 64, this worker's hidden dim is 256/);
    r = await post(encodeFrame({kind: "decode", sid: "nosuch", pos: 7, width: 256, nCtx: 16, data: new Float32Array(256)}));
    assert.equal(r.status, 409); assert.match(r.body, /session nosuch lost/);
    r = await post(good);
    assert.equal(r.status, 200, r.body);
  } finally { await mesh.close(); }
});

// A .knot without one tensor: the header rewritten without it, the payload repacked.
function dropTensor(bytes, name) {
  const b = Buffer.from(bytes), metaLen = b.readUInt32LE(6);
  const meta = JSON.parse(b.subarray(10, 10 + metaLen).toString());
  const payload = ((10 + metaLen + 3) & ~3) + 1;
  const keep = meta.tensors.filter((t) => t.name !== name);
  assert.equal(keep.length, meta.tensors.length - 1, `${name} is in the file`);
  const regions = [...keep, ...(meta.tokenizer?.size ? [meta.tokenizer] : [])].sort((a, c) => a.offset - c.offset);
  const parts = [];
  let at = 0;
  for (const t of regions) { parts.push(b.subarray(payload + t.offset, payload + t.offset + t.size)); t.offset = at; at += t.size; }
  meta.tensors = keep;
  const json = Buffer.from(JSON.stringify(meta));
  const head = Buffer.alloc(((10 + json.length + 3) & ~3) + 1);
  b.copy(head, 0, 0, 6);
  head.writeUInt32LE(json.length, 6);
  json.copy(head, 10);
  head[head.length - 1] = 0x40;
  return new Uint8Array(Buffer.concat([head, ...parts]));
}

test("trap 7: a missing tensor is an error naming phase, layer and tensor (resident and fluid stations)", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes) return;
  const broken = dropTensor(bytes, "blk_3_ffn_up_weight");
  for (const resident of [true, false]) {
    const mesh = await meshFor(broken, {stations: [2, 3], shards: 1, resident});
    try {
      const r = await mesh.run({ids: [1, 400, 300], options: GREEDY});
      assert.ok(r.error, `resident ${resident}: an error, not a silent skip`);
      assert.match(r.error.error, /st1: HTTP 500: station st1: missing tensor blk_3_ffn_up_weight \(layer 3, phase ffn_up\)/);
    } finally { await mesh.close(); }
  }
});
