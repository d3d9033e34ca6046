// Pipelined prefill and live telemetry on the mesh under workerd (Miniflare): chunk c + 1
// enters a station while chunk c is in the next one, the ids equal the sequential prefill's
// and the single process's on every topology shape (stations, a chain, split layers), and
// each chunk's progress event leaves when that chunk is done, not when the prefill ends.
// Order is observed through the stations' test gate (lib/faults.mjs): a station holds its
// frames until the test releases them, so "event k before chunk k + 1 completes" and
// "chunk c + 1 entered station 0 while chunk c was held at the exit" are seen, not timed.
import {test} from "node:test";
import assert from "node:assert/strict";
import {sharedKnot, synthKnot, single, meshFor, configOf, startMesh, topologyFromCounts, SYNTH_QWEN} from "./helpers.mjs";

const STORY = "Once upon a time there was a little girl named Lily. She loved to play in the park with her dog";

async function debug(mesh, name, path, body) {
  const w = await mesh.worker(`knot-${name}`);
  const r = await w.fetch(`http://x/debug/${path}`, body === undefined ? {} : {method: "POST", body: JSON.stringify(body)});
  if (!r.ok) throw new Error(`${name} /debug/${path}: HTTP ${r.status}`);
  return r.json();
}

// The frames a station computed for a session (its /stats frame log), in order.
async function frames(mesh, name, sid) {
  const w = await mesh.worker(`knot-${name}`);
  return (await (await w.fetch("http://x/stats")).json()).stats.frameLog.filter((f) => f.sid === sid);
}

// The stations hold no session: the last run's end frames (sent without waiting, reuse off)
// have landed, so they are not counted by a gate set for the next run.
async function quiet(mesh) {
  for (const name of ["st0", "st1"]) {
    const w = await mesh.worker(`knot-${name}`);
    await until(`${name} idle`, async () => (await (await w.fetch("http://x/stats")).json()).stats.liveSessions === 0);
  }
}

async function until(what, fn, ms = 20_000) {
  const t0 = Date.now();
  for (;;) {
    if (await fn()) return;
    if (Date.now() - t0 > ms) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

// Prefix reuse off: each run prefills the whole prompt (the same prompt runs several times
// here; with reuse the later runs would feed only its last token).
const NO_REUSE = {prefixCache: {kvTokens: 0}};

test("prefill progress is live: chunk k's event arrives while the exit holds chunk k + 1 (pipelined and sequential)", async (t) => {
  const bytes = await sharedKnot(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!bytes) return;
  const mesh = await meshFor(bytes, {stations: [2, 3], shards: 2}, {testHooks: true, ...NO_REUSE});
  try {
    for (const prefill of ["pipelined", "sequential"]) {
      // the exit (st1) computes its first frame, then holds each next one until released
      // here; a held frame the test never releases goes on by itself after 4 s, noted "timeout"
      await quiet(mesh);
      await debug(mesh, "st1", "fault", {gate: {after: 1, ms: 4000}});
      const seen = [];
      let total = 0;
      for await (const e of mesh.generate({prompt: STORY, options: {maxTokens: 4, temperature: 0, chunk: 6, prefill}})) {
        assert.notEqual(e.type, "error", e.error);
        if (e.type !== "telemetry") continue;
        if (e.event === "prefill_progress") {
          seen.push(e.done);
          total = e.total;
          if (e.done < e.total) await debug(mesh, "st1", "release", {});  // only now may chunk k + 1 finish
        }
        if (e.event === "prefill_completed") {
          const log = await debug(mesh, "st1", "log");
          const chunks = Math.ceil(total / 6);
          assert.ok(chunks >= 4, `${chunks} chunks`);
          assert.equal(log.log.length, chunks - 1, `${prefill}: every chunk after the first was held`);
          assert.deepEqual(log.log.map((x) => x.released), Array(chunks - 1).fill("test"),
                           `${prefill}: each held chunk was released by the test, after it saw the chunk before it done`);
          await debug(mesh, "st1", "fault", null);
        }
      }
      assert.deepEqual(seen, Array.from({length: Math.ceil(total / 6)}, (_, i) => Math.min(total, 6 * (i + 1))));
    }
  } finally { await mesh.close(); }
});

test("pipelined prefill overlaps stations: chunk c + 1 reaches station 0 while the exit holds chunk c", async (t) => {
  const bytes = await sharedKnot(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!bytes) return;
  const mesh = await meshFor(bytes, {stations: [2, 3], shards: 2}, {testHooks: true, ...NO_REUSE});
  try {
    for (const prefill of ["pipelined", "sequential"]) {
      await quiet(mesh);
      await debug(mesh, "st1", "fault", {gate: {after: 1, ms: 3000}});  // the exit holds chunk 1 (positions 6..11)
      let sid = null, overlapped = null;
      for await (const e of mesh.generate({prompt: STORY, options: {maxTokens: 2, temperature: 0, chunk: 6, prefill}})) {
        assert.notEqual(e.type, "error", e.error);
        if (e.event === "route") {
          sid = e.sid;
          // while the exit holds chunk 1, does chunk 2 (position 12) reach station 0?
          const t0 = Date.now();
          for (;;) {
            // the hold ended first (the log has its entry): no overlap; chunk 2 at station 0 counts
            // only if the exit still holds chunk 1 after it was seen
            if ((await debug(mesh, "st1", "log")).log.length) { overlapped = false; break; }
            if ((await frames(mesh, "st0", sid)).some((f) => f.pos === 12)) {
              overlapped = (await debug(mesh, "st1", "log")).log.length === 0;
              break;
            }
            if (Date.now() - t0 > 20_000) break;
            await new Promise((r) => setTimeout(r, 20));
          }
          await debug(mesh, "st1", "fault", null);
          await debug(mesh, "st1", "release", {});
        }
      }
      assert.equal(overlapped, prefill === "pipelined", `${prefill}: chunk 2 at station 0 while chunk 1 is held at the exit`);
      // each station still appended its KV in position order
      for (const st of ["st0", "st1"]) {
        const pos = (await frames(mesh, st, sid)).map((f) => f.pos);
        assert.deepEqual(pos, [...pos].sort((a, b) => a - b), `${prefill}: ${st} frames in position order`);
      }
    }
  } finally { await mesh.close(); }
});

async function sameAllWays(t, bytes, counts, prompt, options) {
  const want = await single(bytes, prompt, options);
  assert.ok(want.ids.length >= 4, "a non-trivial continuation");
  const mesh = await meshFor(bytes, counts, NO_REUSE);
  try {
    for (const prefill of ["pipelined", "sequential"]) {
      const r = await mesh.run({ids: want.promptIds, options: {...options, prefill}});
      assert.equal(r.error, undefined, r.error?.error);
      assert.deepEqual(r.summary.ids, want.ids, `${JSON.stringify(counts)} ${prefill}: mesh ids vs single process`);
      assert.equal(r.summary.text, want.text);
      assert.equal(r.summary.prefill, prefill);
      const done = r.telemetry.find((e) => e.event === "prefill_completed");
      if (prefill === "pipelined") assert.ok(done.maxInFlight > 1, `${JSON.stringify(counts)}: chunks in flight together`);
      else assert.equal(done.maxInFlight, 0);
    }
  } finally { await mesh.close(); }
}

test("pipelined prefill == sequential == single process: 2 and 4 stations, a chain (llama, qwen2)", async (t) => {
  const llama = await sharedKnot(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!llama) return;
  const options = {maxTokens: 16, temperature: 0, chunk: 5};
  await sameAllWays(t, llama, {stations: [2, 3], shards: 2}, STORY, options);
  await sameAllWays(t, llama, {stations: [1, 1, 1, 2], shards: 2}, STORY, options);
  const qwen = await sharedKnot(t, "stories260K-pad256-qwen2-q4_k_m.gguf");
  await sameAllWays(t, qwen, {stations: [1, 3, 1], shards: 2, chain: true}, STORY, options);
  // seeded sampling too
  await sameAllWays(t, llama, {stations: [1, 1, 1, 2], shards: 3}, STORY, {maxTokens: 16, temperature: 0.9, topK: 40, seed: 3, chunk: 4});
});

test("pipelined prefill == sequential == single process: split layers, and split layers in a chain (synth qwen2)", async (t) => {
  const q = synthKnot(t, "qwen", SYNTH_QWEN);
  if (!q) return;
  const prompt = [1, 17, 250, 99, 3, 288, 42, 160, 5, 77, 201, 13, 260, 8, 91, 33, 150, 2, 64, 280];
  const options = {maxTokens: 12, temperature: 0, ignoreEos: true, chunk: 3};
  await sameAllWays(t, q, {stations: [1, 3], shards: 2, slices: 2}, prompt, options);
  await sameAllWays(t, q, {stations: [1, 2, 1], shards: 2, slices: 2, chain: true}, prompt, options);
});

test("prefill option: anything but pipelined / sequential is an error naming it", async (t) => {
  const bytes = await sharedKnot(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!bytes) return;
  const mesh = await meshFor(bytes, {stations: [5], shards: 1});
  try {
    // refused where the request enters, before anything streams (tests/workers/requests.test.mjs)
    await assert.rejects(mesh.run({prompt: "Once", options: {prefill: "parallel"}}),
                         /HTTP 400: .*options\.prefill must be \\"pipelined\\" or \\"sequential\\", got \\"parallel\\"/);
  } finally { await mesh.close(); }
});

test("the topology's prefill_chunk (the latency plan's choice) is the default chunk; a request's chunk wins", async (t) => {
  const bytes = await sharedKnot(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!bytes) return;
  const topology = {...topologyFromCounts(await configOf(bytes), {knot: "model.knot", stations: [2, 3], shards: 2}), chunk: 32, prefill_chunk: 7};
  const mesh = await startMesh({knotBytes: bytes, topology, ...NO_REUSE});
  try {
    for (const [options, chunk] of [[{}, 7], [{chunk: 5}, 5]]) {
      const seen = [];
      let total = 0;
      for await (const e of mesh.generate({prompt: STORY, options: {maxTokens: 2, temperature: 0, ...options}})) {
        assert.notEqual(e.type, "error", e.error);
        if (e.type === "telemetry" && e.event === "prefill_progress") { seen.push(e.done); total = e.total; }
      }
      assert.ok(total > 2 * chunk, `${total} prompt tokens`);
      assert.deepEqual(seen, Array.from({length: Math.ceil(total / chunk)}, (_, i) => Math.min(total, chunk * (i + 1))), JSON.stringify(options));
    }
  } finally { await mesh.close(); }
});
