// A client that aborts mid-generation (its AbortController) frees the session at every station,
// a chain's included: through POST /v1/mesh/generate and through the OpenAI route of the mesh
// entry. Observed at the stations: each one's live sessions (and wasm heap) back at its baseline.
import {test} from "node:test";
import assert from "node:assert/strict";
import {sharedKnot, configOf} from "./helpers.mjs";
import {startMesh} from "../../deploy/miniflare.mjs";
import {topologyFromCounts} from "../../workers/lib/topology.mjs";

const MODEL = "stories260K-pad256-llama-q4_k_m.gguf";

const names = (t) => t.stations.flatMap((s) => s.members.map((m) => m.name));
const live = async (mesh) => {
  const out = {};
  for (const n of names(mesh.topology)) out[n] = (await (await (await mesh.worker(`knot-${n}`)).fetch("http://x/stats")).json()).stats.liveSessions;
  return out;
};

// polled until every station is back at `base` (at most 200 x 50 ms), then asserted
async function assertBack(mesh, base, what) {
  let now;
  for (let i = 0; i < 200; i++) {
    now = await live(mesh);
    if (JSON.stringify(now) === JSON.stringify(base)) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.deepEqual(now, base, `${what}: every station's live sessions back at the baseline`);
}

// read a streamed body until `enough` bytes arrived (the generation is under way), then abort
async function readThenAbort(url, body, enough, beforeAbort) {
  const ac = new AbortController();
  const res = await fetch(url, {method: "POST", body: JSON.stringify(body), headers: {"content-type": "application/json"}, signal: ac.signal});
  assert.equal(res.status, 200);
  const reader = res.body.getReader();
  let got = 0, text = "";
  const dec = new TextDecoder();
  while (got < enough.bytes || !enough.until.test(text)) {
    const {value, done} = await reader.read();
    if (done) throw new Error(`the stream ended before the abort: ${text.slice(-300)}`);
    got += value.length;
    text += dec.decode(value, {stream: true});
  }
  await beforeAbort?.();
  ac.abort();
  await reader.cancel().catch(() => {});
  return text;
}

for (const chain of [false, true]) {
  test(`a client abort frees the session at every station (${chain ? "a chain" : "stations linked by the coordinator"}): /v1/mesh/generate and the OpenAI route`, async (t) => {
    const bytes = await sharedKnot(t, MODEL);
    if (!bytes) return;
    const topology = topologyFromCounts(await configOf(bytes), {knot: "model.knot", stations: [2, 3], shards: 2, chain});
    const mesh = await startMesh({knotBytes: bytes, topology, testHooks: true, port: 0});
    try {
      assert.equal(!!mesh.topology.chain, chain);
      const base = await live(mesh);
      // while it runs every station holds the session (so the observation below can fail)
      const during = async () => {
        const now = await live(mesh);
        for (const n of names(topology)) assert.equal(now[n], base[n] + 1, `${n} holds the session while it runs`);
      };
      for (const s of topology.shards) await mesh.fault(s.name, {hangMs: 100});  // slow enough to abort mid-way
      const text = await readThenAbort(new URL("/v1/mesh/generate", mesh.url), {prompt: "Once upon a time", options: {maxTokens: 200, temperature: 0, ignoreEos: true}},
                                       {bytes: 0, until: /"type":"token"[^\n]*\n[^\n]*"type":"token"/}, during);
      assert.ok(!text.includes('"type":"summary"'), "aborted before the end");
      await assertBack(mesh, base, "/v1/mesh/generate");
      const sse = await readThenAbort(new URL("/v1/chat/completions", mesh.url),
        {model: "model", stream: true, max_tokens: 200, temperature: 0, messages: [{role: "user", content: "Tell me a story"}]},
        {bytes: 0, until: /"content":"[^"]+"[\s\S]*"content":"[^"]+"/}, during);
      assert.ok(!sse.includes("[DONE]"), "aborted before the end");
      await assertBack(mesh, base, "OpenAI route");
    } finally { await mesh.close(); }
  });
}
