// Station session TTL, the layer warden's byte budget, fluid stations holding one phase, and
// the vocab shard's logit softcap — under workerd, with frames sent straight to the workers.
import {test} from "node:test";
import assert from "node:assert/strict";
import * as kw from "../../bindings/knotwork.mjs";
import {openParts} from "../../bindings/mesh.mjs";
import {encodeFrame, decodeFrame, decodeTopK, FLAG} from "../../workers/lib/frame.mjs";
import {sharedKnot, single, meshFor, startMesh, topologyFromCounts, configOf} from "./helpers.mjs";

const MODEL = "stories260K-pad256-llama-q4_k_m.gguf";
const GREEDY = {maxTokens: 10, temperature: 0};

async function post(mesh, name, frame, sid) {
  const w = await mesh.worker(`knot-${name}`);
  const r = await w.fetch(`http://x/?sid=${sid}`, {method: "POST", body: frame});
  return r.ok ? {status: 200, frame: decodeFrame(new Uint8Array(await r.arrayBuffer()))} : {status: r.status, error: (await r.json()).error};
}
const stats = async (mesh, name) => (await (await mesh.worker(`knot-${name}`)).fetch("http://x/stats")).json();

test("a station session past its TTL is freed: the next frame is a 409 naming it (re-prefill), a fresh prefill works", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes) return;
  const E = (await configOf(bytes)).n_embd;
  const mesh = await meshFor(bytes, {stations: [5], shards: 1}, {ttlMs: 300});
  try {
    const x = new Float32Array(3 * E).fill(0.01);
    const frame = (pos, rows) => encodeFrame({kind: pos ? "decode" : "prefill", sid: "ttl-1", reqId: pos + 1, pos, width: E, nCtx: 64,
                                              data: x.subarray(0, rows * E)});
    let r = await post(mesh, "st0", frame(0, 3), "ttl-1");
    assert.equal(r.status, 200, r.error);
    r = await post(mesh, "st0", frame(3, 1), "ttl-1");  // within the TTL: the session goes on
    assert.equal(r.status, 200, r.error);
    await new Promise((res) => setTimeout(res, 600));
    r = await post(mesh, "st0", frame(4, 1), "ttl-1");
    assert.equal(r.status, 409);
    assert.match(r.error, /session ttl-1 lost: it holds no positions, the frame starts at 4; re-prefill/);
    r = await post(mesh, "st0", frame(0, 3), "ttl-1");
    assert.equal(r.status, 200, r.error);
  } finally { await mesh.close(); }
});

test("layer warden under a small byte budget: LRU keeps it within budget, norms stay, fluid stations hold one phase, same ids", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes) return;
  const want = await single(bytes, "Once upon a time", GREEDY);
  const parts = await openParts(kw.bytesSource(bytes, "m.knot"));
  const phaseBytes = (l, names) => names.reduce((a, n) => a + (parts.entries.get(`blk_${l}_${n}`)?.size ?? 0), 0);
  const largestPhase = Math.max(...[0, 1, 2, 3, 4].flatMap((l) => ["attn", "ffn_gate", "ffn_up", "ffn_down"]
    .map((ph) => phaseBytes(l, parts.arch.phases[ph].filter((x) => x.per_layer && !/norm/.test(x.name)).map((x) => x.name)))));
  const layerBytes = [0, 1].reduce((a, l) => a + [...parts.entries.values()].filter((e) => e.name.startsWith(`blk_${l}_`)).reduce((b, e) => b + e.size, 0), 0);
  parts.close();
  const budget = Math.floor(layerBytes / 3);  // far less than the range [0,2) the warden serves
  const mesh = await meshFor(bytes, {stations: [2, 3], shards: 1, resident: false}, {warden: true, wardenBudget: budget, testHooks: true});
  try {
    for (let i = 0; i < 2; i++) {
      const r = await mesh.run({ids: want.promptIds, options: GREEDY});
      assert.deepEqual(r.summary?.ids, want.ids, r.error?.error);
    }
    const w = await mesh.worker("knot-warden");
    const ws = await (await w.fetch(`http://x/do/layer/${encodeURIComponent("model.knot|0-2")}/stats`)).json();
    assert.equal(ws.budget, budget, JSON.stringify(ws));
    assert.ok(ws.bytes <= budget, `warden holds ${ws.bytes} bytes, budget ${budget}`);
    assert.ok(ws.misses > ws.entries, `evictions happened: ${ws.misses} misses for ${ws.entries} entries`);
    assert.ok(ws.residentEntries >= 4, `norms (residency rule) kept: ${ws.residentEntries}`);
    const st = await stats(mesh, "st0");
    assert.ok(st.stats.peakPhaseBytes > 0 && st.stats.peakPhaseBytes <= largestPhase,
              `fluid station held ${st.stats.peakPhaseBytes} bytes of matmul weights at once; the largest phase is ${largestPhase}`);
  } finally { await mesh.close(); }
});

test("vocab shard softcap: full logits == c * tanh(x / c) of the uncapped slice; top-k + lse agree with them", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes) return;
  const config = await configOf(bytes);
  const E = config.n_embd, cap = 2.5;
  const topology = topologyFromCounts(config, {knot: "model.knot", stations: [5], shards: 2});
  topology.shards[1].softcap = cap;
  const mesh = await startMesh({knotBytes: bytes, topology});
  const parts = await openParts(kw.bytesSource(bytes, "m.knot"));
  try {
    const [v0, v1] = topology.shards[1].vocab;
    await parts.load(["output_weight"]);
    const xn = Float32Array.from({length: E}, (_, i) => Math.sin(i * 0.37) * 3);
    const plain = parts.lmHead(xn, 1, v0, v1);
    const capped = plain.map((x) => cap * Math.tanh(x / cap));
    assert.ok(Math.max(...plain.map(Math.abs)) > cap, "the cap changes something");
    let r = await post(mesh, "sh1", encodeFrame({kind: "lmhead", sid: "c", reqId: 1, width: E, flags: FLAG.fullLogits, data: xn}), "c");
    assert.equal(r.status, 200, r.error);
    assert.equal(r.frame.data.length, v1 - v0);
    r.frame.data.forEach((x, i) => assert.ok(Math.abs(x - capped[i]) < 1e-4, `logit ${v0 + i}: ${x} vs ${capped[i]}`));
    assert.ok(Math.max(...r.frame.data) <= cap);
    r = await post(mesh, "sh1", encodeFrame({kind: "lmhead", sid: "c", reqId: 2, pos: 5, width: E, data: xn}), "c");
    const top = decodeTopK(r.frame.data), k = top.ids.length;
    assert.equal(k, 5);
    const order = [...capped.keys()].sort((a, b) => capped[b] - capped[a]).slice(0, k).map((i) => i + v0);
    assert.deepEqual(top.ids, order);
    const m = Math.max(...capped);
    const lse = m + Math.log(capped.reduce((a, x) => a + Math.exp(x - m), 0));
    assert.ok(Math.abs(top.lse - lse) < 1e-4, `lse ${top.lse} vs ${lse}`);
    assert.ok(Math.abs(top.min - Math.min(...capped)) < 1e-4, `min ${top.min}`);
    // the uncapped shard answers the plain logits
    const [u0, u1] = topology.shards[0].vocab;
    r = await post(mesh, "sh0", encodeFrame({kind: "lmhead", sid: "c", reqId: 3, width: E, flags: FLAG.fullLogits, data: xn}), "c");
    const plain0 = parts.lmHead(xn, 1, u0, u1);
    r.frame.data.forEach((x, i) => assert.ok(Math.abs(x - plain0[i]) < 1e-4));
  } finally { parts.close(); await mesh.close(); }
});
