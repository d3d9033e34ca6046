// Station sessions under workerd, frames sent straight to the stations (docs/protocol.md):
// a frame below the positions held rewinds the session (plain stations, a chain, split
// layers); KV snapshots in the station DO's SQLite storage restore a restarted station bit
// for bit; the lifecycle alarm frees a session whose coordinator vanished; frames wrong in
// form or here are a 400 naming the field.
import {test} from "node:test";
import assert from "node:assert/strict";
import {encodeFrame, decodeFrame, FLAG} from "../../workers/lib/frame.mjs";
import {addPartials} from "../../workers/lib/partials.mjs";
import {sharedKnot, synthKnot, meshFor, configOf, SYNTH_QWEN} from "./helpers.mjs";

const MODEL = "stories260K-pad256-llama-q4_k_m.gguf";
const N_CTX = 64;

async function post(mesh, name, frame, sid) {
  const w = await mesh.worker(`knot-${name}`);
  const r = await w.fetch(`http://x/?sid=${sid}`, {method: "POST", body: frame});
  return r.ok ? {status: 200, frame: decodeFrame(new Uint8Array(await r.arrayBuffer()))} : {status: r.status, error: (await r.json()).error};
}
const stationStats = async (mesh, name, sid) =>
  (await (await mesh.worker(`knot-${name}`)).fetch(`http://x/stats${sid ? `?sid=${sid}` : ""}`)).json();
const members = (mesh) => mesh.topology.stations.flatMap((s) => s.members.map((m) => m.name));
async function restart(mesh, name, sid) {
  const w = await mesh.worker(`knot-${name}`);
  await w.fetch(`http://x/debug/restart?sid=${sid}`).then((r) => r.arrayBuffer()).catch(() => {});
}

// Hidden-state rows in [-1, 1): a deterministic function of (seed, position, column).
const rows = (E, seed, pos0, n) => Float32Array.from({length: n * E}, (_, i) => Math.sin(seed * 7.1 + (pos0 + i / E) * 1.7 + (i % E) * 0.37));

/**
 * Rows [pos, pos + n) through every station, as the coordinator sends them (no chain: each
 * member in turn, a split range's attn / ffn partials summed per layer; chain: one frame to
 * the first leader). Returns the exit's rows (all of them: no normLast), or {status, error}.
 */
async function through(mesh, sid, pos, x) {
  const t = mesh.topology, E = t.n_embd, n = x.length / E;
  x = Float32Array.from(x);
  let reqId = 1;
  const frame = (over) => encodeFrame({kind: pos === 0 || n > 1 ? "prefill" : "decode", sid, reqId: reqId++, pos, width: E, nCtx: N_CTX, data: x, ...over});
  if (t.chain) {
    const r = await post(mesh, t.stations[0].members[0].name, frame({flags: FLAG.chain}), sid);
    return r.status === 200 ? r.frame.data : r;
  }
  for (const s of t.stations) {
    if (s.members.length === 1) {
      const r = await post(mesh, s.members[0].name, frame({}), sid);
      if (r.status !== 200) return r;
      x = r.frame.data;
      continue;
    }
    for (let l = s.layers[0]; l < s.layers[1]; l++) {
      for (const phase of ["attn", "ffn"]) {
        const sum = new Float32Array(x.length);
        for (const m of s.members) {
          const r = await post(mesh, m.name, frame({kind: n > 1 ? "prefill" : "decode", layer: l, phase}), sid);
          if (r.status !== 200) return r;
          addPartials(sum, r.frame.data);
        }
        addPartials(x, sum);
      }
    }
  }
  return x;
}

async function feed(mesh, sid, pos, x) {
  const out = await through(mesh, sid, pos, x);
  assert.ok(out instanceof Float32Array, `${sid} at ${pos}: HTTP ${out.status}: ${out.error}`);
  return out;
}

async function end(mesh, sid) {
  const t = mesh.topology;
  const names = t.chain ? [t.stations[0].members[0].name] : members(mesh);
  for (const n of names) {
    const r = await post(mesh, n, encodeFrame({kind: "end", sid, reqId: 99, width: 0, flags: t.chain ? FLAG.chain : 0}), sid);
    assert.equal(r.status, 200, r.error);
  }
}

const sameBits = (a, b, what) => {
  assert.equal(a.length, b.length, what);
  assert.deepEqual(new Uint32Array(a.buffer, a.byteOffset, a.length), new Uint32Array(b.buffer, b.byteOffset, b.length), `${what}: bit for bit`);
};

// The rewind scenario on one mesh: session A is fed [0, 10) (a 6-row prefill, 4 decodes),
// then fed again from position 6 with other rows; session B is fed [0, 6) then those rows.
// A's answers equal B's bit for bit, and every member counted a rewind.
async function rewindScenario(mesh, tag) {
  const E = mesh.topology.n_embd, a = `rw-a-${tag}`, b = `rw-b-${tag}`;
  const before = await Promise.all(members(mesh).map((m) => stationStats(mesh, m)));
  await feed(mesh, a, 0, rows(E, 1, 0, 6));
  for (let p = 6; p < 10; p++) await feed(mesh, a, p, rows(E, 1, p, 1));
  await feed(mesh, b, 0, rows(E, 1, 0, 6));
  for (const [p, x] of [[6, rows(E, 2, 6, 1)], [7, rows(E, 2, 7, 2)], [9, rows(E, 2, 9, 1)]]) {
    const ra = await feed(mesh, a, p, x), rb = await feed(mesh, b, p, x);
    sameBits(ra, rb, `${tag}: rows at ${p} after the rewind`);
  }
  const after = await Promise.all(members(mesh).map((m) => stationStats(mesh, m)));
  after.forEach((s, i) => assert.equal(s.stats.rewinds - before[i].stats.rewinds, 1, `${tag}: ${s.name} rewound once`));
  // the rewound session goes on as the fresh one, and a position past the held ones is a 409
  sameBits(await feed(mesh, a, 10, rows(E, 3, 10, 1)), await feed(mesh, b, 10, rows(E, 3, 10, 1)), `${tag}: rows at 10`);
  const lost = await through(mesh, a, 12, rows(E, 3, 12, 1));
  assert.equal(lost.status, 409, `${tag}: past the held positions`);
  assert.match(lost.error, new RegExp(`session ${a} lost: it holds 11 positions, the frame starts at 12`));
  await end(mesh, a);
  await end(mesh, b);
}

test("rewind: a frame below the held positions truncates the station's KV, then appends (== a fresh session, bit for bit)", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes) return;
  for (const [tag, counts] of [["plain", {stations: [2, 3], shards: 1}], ["chain", {stations: [1, 2, 2], shards: 1, chain: true}]]) {
    const mesh = await meshFor(bytes, counts);
    try { await rewindScenario(mesh, tag); } finally { await mesh.close(); }
  }
});

test("rewind through split layers: the phase frames of a split range rewind at a position's first layer (coordinator loop and chain)", async (t) => {
  const bytes = synthKnot(t, "qwen", SYNTH_QWEN);
  if (!bytes) return;
  for (const [tag, counts] of [["split", {stations: [1, 3], shards: 1, slices: 2}], ["split-chain", {stations: [2, 2], shards: 1, slices: 2, chain: true}]]) {
    const mesh = await meshFor(bytes, counts);
    try { await rewindScenario(mesh, tag); } finally { await mesh.close(); }
  }
});

// Sessions A and B fed alike, both rewound into the middle of a prefill chunk (and of a
// snapshot block); A's stations restarted (KV gone from memory). A's next answers equal B's
// bit for bit: restored from the snapshot, with no position fed again.
async function restoreScenario(mesh, tag) {
  const E = mesh.topology.n_embd, a = `rs-a-${tag}`, b = `rs-b-${tag}`;
  for (const sid of [a, b]) {
    await feed(mesh, sid, 0, rows(E, 1, 0, 6));
    for (let p = 6; p < 9; p++) await feed(mesh, sid, p, rows(E, 1, p, 1));
  }
  // 4 positions per block: the blocks of [0, 6) are [0, 4) and [4, 6); rewinding to 3 cuts the first
  const bpt = (await stationStats(mesh, members(mesh)[0], a)).session.live[0].kvBytesPerToken;
  const usage = await stationStats(mesh, members(mesh)[0], a);
  assert.equal(usage.session.stored.bytes, 9 * bpt, `${tag}: 9 positions persisted`);
  for (const sid of [a, b]) await feed(mesh, sid, 3, rows(E, 4, 3, 2));
  const before = await Promise.all(members(mesh).map((m) => stationStats(mesh, m)));
  for (const m of members(mesh)) await restart(mesh, m, a);
  for (const m of members(mesh)) assert.deepEqual((await stationStats(mesh, m, a)).session.live, [], `${tag}: ${m} lost the session's KV`);
  for (const p of [5, 6]) sameBits(await feed(mesh, a, p, rows(E, 5, p, 1)), await feed(mesh, b, p, rows(E, 5, p, 1)), `${tag}: rows at ${p} after the restart`);
  const after = await Promise.all(members(mesh).map((m) => stationStats(mesh, m)));
  after.forEach((s, i) => {
    assert.equal(s.stats.restores - before[i].stats.restores, 1, `${tag}: ${s.name} restored once`);
    assert.equal(s.stats.restoredPositions - before[i].stats.restoredPositions, 5, `${tag}: ${s.name} restored positions [0, 5)`);
  });
  // ctx.abort() alone: the aborted instance's KV is still in the isolate's heap; the next
  // instance of the object frees it and restores from the snapshot (one live session, not two)
  const live0 = await Promise.all(members(mesh).map((m) => stationStats(mesh, m)));
  for (const m of members(mesh)) {
    const w = await mesh.worker(`knot-${m}`);
    await w.fetch(`http://x/debug/restart?sid=${a}&abort=1`).then((r) => r.arrayBuffer()).catch(() => {});
  }
  sameBits(await feed(mesh, a, 7, rows(E, 5, 7, 1)), await feed(mesh, b, 7, rows(E, 5, 7, 1)), `${tag}: rows at 7 after ctx.abort()`);
  const live1 = await Promise.all(members(mesh).map((m) => stationStats(mesh, m)));
  live1.forEach((s, i) => {
    assert.equal(s.stats.liveSessions, live0[i].stats.liveSessions, `${tag}: ${s.name} freed the aborted instance's KV`);
    assert.equal(s.stats.restores - live0[i].stats.restores, 1, `${tag}: ${s.name} restored after ctx.abort()`);
  });
  // a restart that loses the snapshot too: the station asks for a re-prefill
  for (const m of members(mesh)) {
    const w = await mesh.worker(`knot-${m}`);
    await w.fetch(`http://x/debug/restart?sid=${a}&wipe=1`).then((r) => r.arrayBuffer()).catch(() => {});
  }
  const lost = await through(mesh, a, 8, rows(E, 5, 8, 1));
  assert.equal(lost.status, 409);
  assert.match(lost.error, /it holds no positions, the frame starts at 8; re-prefill/);
  await end(mesh, a);
  await end(mesh, b);
  for (const m of members(mesh)) assert.deepEqual((await stationStats(mesh, m, a)).session.stored, {sessions: 0, blocks: 0, bytes: 0}, `${tag}: ${m} storage empty`);
  for (const m of members(mesh)) assert.deepEqual((await stationStats(mesh, m, b)).session.stored, {sessions: 0, blocks: 0, bytes: 0}, `${tag}: ${m} storage empty`);
}

test("KV snapshots: a restarted station restores the session from DO storage (cut blocks, chain, split layers); end empties the storage", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  const split = synthKnot(t, "qwen", SYNTH_QWEN);
  if (!bytes || !split) return;
  for (const [tag, b, counts] of [["plain", bytes, {stations: [2, 3], shards: 1}], ["chain", bytes, {stations: [1, 2, 2], shards: 1, chain: true}],
                                   ["split", split, {stations: [1, 3], shards: 1, slices: 2}]]) {
    const mesh = await meshFor(b, counts, {testHooks: true});
    try {
      // blocks of 4 positions at every member (bytes per token from one session)
      const probe = `probe-${tag}`;
      await feed(mesh, probe, 0, rows(mesh.topology.n_embd, 9, 0, 1));
      for (const m of members(mesh)) {
        const bpt = (await stationStats(mesh, m, probe)).session.live[0].kvBytesPerToken;
        const w = await mesh.worker(`knot-${m}`);
        assert.ok((await w.fetch("http://x/debug/snapshot", {method: "POST", body: JSON.stringify({blockBytes: 4 * bpt})})).ok);
      }
      await end(mesh, probe);
      await restoreScenario(mesh, tag);
    } finally { await mesh.close(); }
  }
});

test("lifecycle alarm: a session whose coordinator vanished is freed after its TTL with no further frame (sessions, heap, storage)", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes) return;
  const ttlMs = 800;
  const mesh = await meshFor(bytes, {stations: [5], shards: 1}, {ttlMs});
  try {
    const E = mesh.topology.n_embd;
    // the baseline: after one session of the same frames ended by an end frame
    const session = async (sid) => { await feed(mesh, sid, 0, rows(E, 1, 0, 4)); await feed(mesh, sid, 4, rows(E, 1, 4, 1)); };
    await session("alarm-base");
    await end(mesh, "alarm-base");
    const base = await stationStats(mesh, "st0");
    await session("alarm-gone");  // and then nothing: no end frame, no other frame
    const t0 = Date.now();
    const live = await stationStats(mesh, "st0", "alarm-gone");
    assert.equal(live.stats.liveSessions, base.stats.liveSessions + 1);
    assert.ok(live.memory.heap > base.memory.heap, "the session holds heap");
    assert.equal(live.session.stored.sessions, 1);
    await new Promise((r) => setTimeout(r, ttlMs + 2500 - (Date.now() - t0)));
    const after = await stationStats(mesh, "st0");
    assert.equal(after.stats.liveSessions, base.stats.liveSessions, "the session was freed");
    assert.equal(after.memory.heap, base.memory.heap, "the wasm heap is back to its baseline");
    assert.ok(after.stats.alarms > base.stats.alarms, "by the alarm");
    assert.equal(after.stats.frames, live.stats.frames, "no frame arrived meanwhile");
    assert.deepEqual((await stationStats(mesh, "st0", "alarm-gone")).session.stored, {sessions: 0, blocks: 0, bytes: 0}, "its snapshot is gone");
  } finally { await mesh.close(); }
});

test("bad frames: zero rows, n_ctx 0, positions past the context, a layer outside the range, normLast mid-mesh: 400 naming the field", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes) return;
  const E = (await configOf(bytes)).n_embd;
  const mesh = await meshFor(bytes, {stations: [2, 3], shards: 1});
  try {
    const f = (over) => encodeFrame({kind: "prefill", sid: "bad", reqId: 1, pos: 0, width: E, nCtx: 16, data: rows(E, 1, 0, 2), ...over});
    const expect400 = async (name, frame, re) => {
      const r = await post(mesh, name, frame, "bad");
      assert.equal(r.status, 400, `${re}: ${r.error}`);
      assert.match(r.error, re);
    };
    for (const phase of ["norm", "all", "attn"])
      await expect400("st1", f({kind: "decode", pos: 3, phase, layer: 2, data: new Float32Array(0)}), /frame: a decode frame with 0 rows/);
    await expect400("st0", f({data: new Float32Array(0)}), /frame: a prefill frame with 0 rows/);
    await expect400("st0", f({nCtx: 0}), /n_ctx 0 in a prefill frame/);
    await expect400("st0", f({nCtx: 1}), /positions \[0, 2\) \(pos \+ rows\) past the session's context n_ctx 1/);
    await expect400("st0", f({nCtx: 0x7fffffff}), /n_ctx 2147483647/);
    assert.deepEqual((await stationStats(mesh, "st0", "bad")).session.live, [], "no session opened");
    // on a held session (2 positions): refused frames advance, rewind and open nothing
    assert.equal((await post(mesh, "st0", f({}), "bad")).status, 200);
    const held = async () => (await stationStats(mesh, "st0", "bad")).session.live.map((x) => x.nPos);
    const one = rows(E, 1, 2, 1);
    await expect400("st0", f({kind: "decode", pos: 2, flags: FLAG.normLast, data: one}), /normLast asked of a entry station/);
    await expect400("st0", f({kind: "decode", pos: 1, phase: "attn", layer: 4, data: one}), /layer 4 outside \[0,2\)/);
    await expect400("st0", f({kind: "decode", pos: 1, nCtx: 0, data: one}), /n_ctx 0 in a decode frame/);
    await expect400("st0", f({kind: "decode", pos: 15, data: rows(E, 1, 15, 2)}), /positions \[15, 17\) \(pos \+ rows\) past the session's context n_ctx 16/);
    assert.deepEqual(await held(), [2], "the session still holds 2 positions");
    const r = await post(mesh, "st0", f({kind: "decode", pos: 2, data: one}), "bad");
    assert.equal(r.status, 200, r.error);
    assert.deepEqual(await held(), [3]);
    // the exit's norm phase with one row still answers
    const norm = await post(mesh, "st1", f({kind: "decode", pos: 3, phase: "norm", data: rows(E, 1, 3, 1)}), "bad");
    assert.equal(norm.status, 200, norm.error);
    assert.equal(norm.frame.data.length, E);
  } finally { await mesh.close(); }
});
