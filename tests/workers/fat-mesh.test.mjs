// A mesh with a native fat station (`knot station`, deploy/fat.mjs) between Worker stations:
// the topology names its member by URL (workers/lib/topology.mjs), the coordinator links to it
// over WebSocket (and over HTTP with LINK_MODE http) from inside workerd, and the fat station
// reads the model by HTTP range from a local Node server. Checked: greedy and seeded ids equal
// the single-process run (shared llama and a synth qwen2 with biases); the range server served
// the header window and then exactly the fat station's own tensors; the deployment renders no
// script for it; a fat station killed mid-session ends the generation with an error naming it,
// raised by its closed link (not by the 60 s station timeout).
import {test} from "node:test";
import assert from "node:assert/strict";
import {existsSync} from "node:fs";
import * as kw from "../../bindings/knotwork.mjs";
import {sharedKnot, synthKnot, single, configOf, startMesh, SYNTH_QWEN} from "./helpers.mjs";
import {topologyFromCounts, withUrls} from "../../workers/lib/topology.mjs";
import {rangeServer, startFatStations, KNOT_BIN} from "../../deploy/fat.mjs";
import {describeDeployment} from "../../deploy/description.mjs";
import {ROOT} from "../../deploy/miniflare.mjs";
import {sharedModel} from "../wasm/helpers.mjs";

const GREEDY = {maxTokens: 24, temperature: 0};
const SEEDED = {maxTokens: 24, temperature: 0.9, topK: 40, topP: 0.95, repeatPenalty: 1.1, seed: 42};

function needBin(t) {
  if (existsSync(KNOT_BIN)) return true;
  if (process.env.CI) throw new Error(`${KNOT_BIN} missing (CI is set)`);
  t.skip(`${KNOT_BIN} missing`);
  return false;
}

// A mesh of stations `counts` whose stations `fat` run natively; {mesh, topology, range, fat}.
async function fatMesh(bytes, counts, fat, opts = {}) {
  const c = await configOf(bytes);
  const base = topologyFromCounts(c, {knot: "model.knot", ...counts});
  const range = await rangeServer(bytes);
  const started = await startFatStations(base, fat, range);
  const topology = withUrls(c, base, started.urls);
  const mesh = await startMesh({knotBytes: bytes, topology, ...opts});
  return {mesh, topology, range, stations: started.stations,
          close: async () => { await mesh.close(); await Promise.all(started.stations.map((s) => s.stop())); await range.close(); }};
}

const layerOf = (name) => { const m = /^blk_(\d+)_/.exec(name); return m ? +m[1] : -1; };

async function sameAsSingle(t, bytes, counts, fat, prompt, {linkMode} = {}) {
  const m = await fatMesh(bytes, counts, fat, linkMode ? {linkMode} : {});
  try {
    for (const options of [GREEDY, SEEDED]) {
      const want = await single(bytes, prompt, options);
      const r = await m.mesh.run({ids: want.promptIds, options});
      assert.equal(r.error, undefined, r.error?.error);
      assert.deepEqual(r.summary.ids, want.ids, `${JSON.stringify(counts)} fat ${fat} ${linkMode ?? "ws"} temperature ${options.temperature}: mesh ids vs single process`);
      assert.equal(r.summary.text, want.text);
      assert.ok(want.ids.length >= 4, "a non-trivial continuation");
    }
    // the fat station read the header window, then exactly its own tensors, each once
    const h = await kw.parseKnotHeader(kw.bytesSource(bytes, "model.knot"));
    const [l0, l1] = m.topology.stations[fat[0]].layers;
    const own = h.tensors.filter((x) => layerOf(x.name) >= l0 && layerOf(x.name) < l1);
    const byRange = new Map(h.tensors.map((x) => [`${x.offset}-${x.offset + x.size}`, x.name]));
    // the header window: reads from byte 0 (a size probe, then the header, at most 64 KiB
    // past it on a file this small); every other read is one of its tensors, whole
    const header = m.range.reads.filter(([a]) => a === 0), rest = m.range.reads.filter(([a]) => a !== 0);
    const tensors = rest.map(([a, b]) => byRange.get(`${a}-${b}`) ?? `bytes ${a}-${b}`);
    assert.ok(header.length >= 1 && header.length <= 3, `header reads ${JSON.stringify(header)}`);
    assert.ok(header.every(([, b]) => b <= Math.max(h.payload_offset, 65536)), `header reads ${JSON.stringify(header)}`);
    assert.deepEqual([...tensors].sort(), own.map((x) => x.name).sort(), `layers [${l0},${l1}): its own tensors only`);
    const served = rest.reduce((a, [x, y]) => a + y - x, 0);
    assert.equal(served, own.reduce((a, x) => a + x.size, 0), "past the header: exactly its tensors' bytes");
    // its /health through the mesh's stats
    const st = await m.mesh.stats();
    assert.deepEqual(st[m.topology.stations[fat[0]].members[0].name].layers, [l0, l1]);
  } finally { await m.close(); }
}

test("a native fat station between two Worker stations: greedy and seeded ids == single process (shared llama)", async (t) => {
  const bytes = await sharedKnot(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!bytes || !needBin(t)) return;
  await sameAsSingle(t, bytes, {stations: [2, 1, 2], shards: 2}, [1], "Once upon a time");
});

test("a fat middle station over HTTP links (LINK_MODE http) == single process (shared llama)", async (t) => {
  const bytes = await sharedKnot(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!bytes || !needBin(t)) return;
  await sameAsSingle(t, bytes, {stations: [1, 3, 1], shards: 1}, [1], "Once upon a time", {linkMode: "http"});
});

test("a fat middle station on a synth qwen2 (biases, GQA): greedy and seeded ids == single process", async (t) => {
  if (!needBin(t)) return;
  const bytes = synthKnot(t, "qwen", SYNTH_QWEN);
  if (!bytes) return;
  await sameAsSingle(t, bytes, {stations: [1, 2, 1], shards: 2}, [1], [1, 17, 250, 99, 3, 288, 42, 160]);
});

test("the deployment of a topology with a URL member renders no script and no binding for it", async (t) => {
  const bytes = await sharedKnot(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!bytes) return;
  const c = await configOf(bytes);
  const topo = withUrls(c, topologyFromCounts(c, {knot: "model.knot", stations: [2, 1, 2], shards: 2}), {1: "http://127.0.0.1:9"});
  const d = await describeDeployment(topo);
  const names = d.scripts.map((s) => s.name);
  assert.deepEqual(names, ["knot-coordinator", "knot-st0", "knot-st2", "knot-sh0", "knot-sh1", "knot-warden"]);
  const co = d.scripts[0];
  assert.deepEqual(co.services.map((s) => s.binding), ["M_st0", "M_st2", "M_sh0", "M_sh1"]);
  assert.equal(co.vars.TOPOLOGY.stations[1].members[0].url, "http://127.0.0.1:9", "the coordinator finds the url in TOPOLOGY");
});

test("a fat station killed mid-session: the generation ends with an error naming it, from its closed link", async (t) => {
  const bytes = await sharedKnot(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!bytes || !needBin(t)) return;
  const m = await fatMesh(bytes, {stations: [2, 1, 2], shards: 1}, [1], {timeouts: {stationMs: 60_000}});
  try {
    const ids = (await single(bytes, "Once upon a time", {maxTokens: 1, temperature: 0})).promptIds;
    const events = [];
    let killedAt = -1;
    for await (const e of m.mesh.generate({ids, options: {maxTokens: 200, temperature: 0, ignoreEos: true}})) {
      events.push(e);
      if (e.type === "token" && killedAt < 0 && events.filter((x) => x.type === "token").length === 3) {
        killedAt = events.length;
        m.stations[0].proc.kill("SIGKILL");
        assert.equal((await m.stations[0].exited).signal, "SIGKILL");
      }
    }
    assert.ok(killedAt > 0, "the station was killed during the generation");
    const err = events.find((e) => e.type === "error");
    assert.ok(err, `an error event (got ${events.at(-1)?.type})`);
    assert.equal(events.at(-1), err, "the error ends the stream");
    t.diagnostic(`error: ${err.error} (status ${err.status})`);
    assert.match(err.error, /\bst1\b/, `the error names the fat station: ${err.error}`);
    assert.doesNotMatch(err.error, /no answer within/, "raised by the closed link, not by the station timeout");
    assert.ok(!events.some((e) => e.type === "summary"));
    // the tokens after the kill: those already on the way (one per pending decode frame at most)
    const after = events.slice(killedAt).filter((e) => e.type === "token").length;
    assert.ok(after <= 1, `${after} tokens after the kill`);
  } finally { await m.close(); }
});

test("a URL member with 2 copies (two knot station processes): one SIGKILLed mid-generation, the other completes the request with the single-process ids", async (t) => {
  const bytes = await sharedKnot(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!bytes || !needBin(t)) return;
  const m = await fatMesh(bytes, {stations: [2, 1, 2], shards: 1, replicas: 2}, [1],
                          {timeouts: {stationMs: 10_000, backoffMs: 60_000}, prefixCache: {kvTokens: 0}});
  try {
    const urls = m.topology.stations[1].members[0].url;
    assert.ok(Array.isArray(urls) && urls.length === 2 && urls[0] !== urls[1], `one url per copy: ${JSON.stringify(urls)}`);
    const seeded = {maxTokens: 40, temperature: 0.9, topK: 40, seed: 7, ignoreEos: true};
    for (const [what, options] of [["greedy", {maxTokens: 40, temperature: 0, ignoreEos: true}]]) {
      const want = await single(bytes, "Once upon a time", options);
      const events = [];
      let route = null, killed = null;
      for await (const e of m.mesh.generate({ids: want.promptIds, options})) {
        events.push(e);
        if (e.event === "route") route = e.route;
        if (e.type === "token" && !killed && e.telemetry.n === 3) {
          killed = m.stations.find((s) => s.url === urls[route.st1]);
          killed.proc.kill("SIGKILL");
          assert.equal((await killed.exited).signal, "SIGKILL");
        }
      }
      const summary = events.find((e) => e.type === "summary");
      assert.ok(killed, `${what}: a copy was killed during the generation`);
      assert.ok(summary, `${what}: completed: ${JSON.stringify(events.find((e) => e.type === "error"))}`);
      assert.deepEqual(summary.ids, want.ids, `${what}: the single-process ids`);
      const fo = events.filter((e) => e.event === "failover" && e.rebuilt !== "resend");
      const [from, to] = route.st1 === 0 ? ["st1", "st1r1"] : ["st1r1", "st1"];
      assert.deepEqual(fo.map((e) => [e.member, e.from, e.replica, e.rebuilt]), [["st1", from, to, "replay"]],
                       `${what}: moved to the other process, the history replayed there (a native station keeps no snapshot): ${JSON.stringify(fo)}`);
      assert.equal(summary.failovers, 1);
      // the next request (seeded): the killed copy is backing off, the live one serves it
      const want2 = await single(bytes, "Once upon a time", seeded);
      const r = await m.mesh.run({ids: want2.promptIds, options: seeded});
      assert.deepEqual(r.summary?.ids, want2.ids, `the next request on the copy left: ${JSON.stringify(r.error)}`);
      assert.equal(r.telemetry.filter((e) => e.event === "failover").length, 0, "routed around the killed copy");
      assert.equal(r.telemetry.find((e) => e.event === "route").route.st1, 1 - route.st1);
    }
  } finally { await m.close(); }
});

test("knotwork mesh --fat 1: station 1 native, stdout the ids of knotwork generate; a bad index is refused naming it", async (t) => {
  const model = sharedModel(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!model || !needBin(t)) return;
  const {spawnSync} = await import("node:child_process");
  const cli = (args) => spawnSync(process.execPath, [`${ROOT}/bin/knotwork.mjs`, ...args], {encoding: "utf8", timeout: 120_000});
  const common = ["-p", "Once upon a time", "-n", "12", "--temp", "0", "--ids"];
  const want = cli(["generate", model, ...common]);
  assert.equal(want.status, 0, want.stderr);
  const r = cli(["mesh", model, "--stations", "2,1,2", "--fat", "1", ...common]);
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout, want.stdout);
  assert.match(r.stderr, /mesh 3 stations \(2 isolates \+ 1 fat: \[0,2\] \[2,3\] fat \[3,5\]\)/);
  assert.match(r.stderr, /st1 [\d.]+ \(native fat station, rss\)/);
  const bad = cli(["mesh", model, "--stations", "2,1,2", "--fat", "3", ...common]);
  assert.notEqual(bad.status, 0);
  assert.match(bad.stderr, /--fat 3: no station 3 \(the topology has 3\)/);
});
