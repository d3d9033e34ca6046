// Topology members named by URL (native fat stations) and plans with fat stations: the checks
// of workers/lib/topology.mjs and core/infer/deployment.cpp (through kw_deploy), the planner's
// --fat through the wasm planner and `node bin/knotwork.mjs plan --fat`.
import {test} from "node:test";
import assert from "node:assert/strict";
import {execFileSync} from "node:child_process";
import {topologyFromCounts, topologyFromPlan, validateTopology, withUrls, memberOf} from "../../workers/lib/topology.mjs";
import {peerFetcher, urlFetcher} from "../../workers/lib/link.mjs";
import {describeDeployment, deploymentOf} from "../../deploy/description.mjs";
import {ROOT} from "../../deploy/miniflare.mjs";
import {sharedModel} from "../wasm/helpers.mjs";

const C = {n_layer: 6, n_embd: 64, n_head: 8, n_head_kv: 2, n_ff: 512, n_vocab: 300};
const base = () => topologyFromCounts(C, {knot: "m.knot", stations: [2, 2, 2], shards: 2});

test("withUrls names members by URL; memberOf finds them; a bad url or a chain is refused naming the member", () => {
  const t = withUrls(C, base(), {1: "http://127.0.0.1:8123"});
  assert.equal(memberOf(t, "st1").url, "http://127.0.0.1:8123");
  assert.equal(memberOf(t, "st0").url, undefined);
  assert.equal(memberOf(t, "sh0"), null);
  assert.equal(base().stations[1].members[0].url, undefined, "the given topology is not changed");
  for (const url of ["ftp://x", "http://x/path", "127.0.0.1:80", 5, "http://"])
    assert.throws(() => withUrls(C, base(), {1: url}), /member st1: url must be http\[s\]:\/\/host\[:port\]/, String(url));
  assert.throws(() => withUrls(C, base(), {3: "http://x"}), /no station 3 \(the topology has 3\)/);
  assert.throws(() => validateTopology(C, {...t, chain: true}), /member st1: a URL member \(http:\/\/127\.0\.0\.1:8123\) cannot be in a chain/);
  const split = topologyFromCounts(C, {knot: "m.knot", stations: [3, 3], slices: 2});
  assert.throws(() => withUrls(C, split, {0: "http://x"}), /station 0 has 2 members, 1 urls given/);
  assert.deepEqual(withUrls(C, split, {0: ["http://a:1", "http://b:2"]}).stations[0].members.map((m) => m.url), ["http://a:1", "http://b:2"]);
});

test("peerFetcher: a URL member through urlFetcher, a Worker through its binding, a fat member without url refused", async () => {
  const binding = {fetch: () => "bound"};
  assert.equal(peerFetcher({M_st0: binding}, "M", "st0", {name: "st0"}), binding);
  assert.equal(peerFetcher({M_sh0: binding}, "M", "sh0", null), binding);
  assert.notEqual(peerFetcher({M_st1: binding}, "M", "st1", {name: "st1", url: "http://127.0.0.1:9"}), binding);
  assert.throws(() => peerFetcher({}, "M", "st1", {name: "st1", fat: true}), /st1: a fat station with no url/);
  // urlFetcher keeps the path and query of the link's request, under its base
  const http = await import("node:http");
  const seen = [];
  const srv = http.createServer((q, r) => { seen.push(q.url); r.end("ok"); });
  await new Promise((ok) => srv.listen(0, "127.0.0.1", ok));
  try {
    const f = urlFetcher(`http://127.0.0.1:${srv.address().port}`);
    assert.equal(await (await f.fetch("https://st1/?sid=a%20b", {method: "POST", body: "x"})).text(), "ok");
    assert.deepEqual(seen, ["/?sid=a%20b"]);
  } finally { srv.close(); }
});

test("the core's deployment: URL and fat members get no script or binding; its checks match topology.mjs", async () => {
  const t = withUrls(C, base(), {0: "https://fat.example:8443"});
  const d = await describeDeployment(t);
  assert.deepEqual(d.scripts.map((s) => s.name), ["knot-coordinator", "knot-st1", "knot-st2", "knot-sh0", "knot-sh1", "knot-warden"]);
  assert.deepEqual(d.scripts[0].services.map((s) => s.binding), ["M_st1", "M_st2", "M_sh0", "M_sh1"]);
  const {files} = await deploymentOf({topology: t});
  assert.ok(!files.some((f) => f.file === "knot-st0.jsonc"), "no wrangler file for the URL member");
  const bad = structuredClone(t);
  bad.stations[0].members[0].url = "http://x/y";
  await assert.rejects(describeDeployment(bad), /member st0: url must be http\[s\]:\/\/host\[:port\], got "http:\/\/x\/y"/);
  await assert.rejects(describeDeployment({...t, chain: true}), /member st0: a URL member \(https:\/\/fat.example:8443\) cannot be in a chain/);
  const fat = structuredClone(base());
  fat.stations[2].members[0].fat = true;
  assert.ok(!(await describeDeployment(fat)).scripts.some((s) => s.name === "knot-st2"));
  await assert.rejects(describeDeployment({...fat, chain: true}), /member st2: a fat station cannot be in a chain/);
});

test("knot plan --fat (node CLI, wasm planner): a fat station entry, Workers for the rest, topologies mark it fat", async (t) => {
  const model = sharedModel(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!model) return;
  const run = (args) => JSON.parse(execFileSync(process.execPath, [`${ROOT}/bin/knotwork.mjs`, "plan", model, ...args], {encoding: "utf8"}));
  const p = run(["--fat", "2GiB"]);
  assert.equal(p.fat_stations, 1);
  assert.equal(p.stations[0].fat, true);
  assert.equal(p.stations[0].fat_memory, 2 ** 31);
  assert.deepEqual(p.stations[0].layers, [0, p.model.n_layer], "a 2 GiB station holds the whole small model");
  assert.equal(p.isolates, p.shards.length);
  const topo = topologyFromPlan(p.model, p, {knot: "m.knot"});
  assert.equal(topo.stations[0].members[0].fat, true);
  const d = await deploymentOf({plan: p, knot: "m.knot"});
  assert.equal(d.topology.stations[0].members[0].fat, true, "the core's topology from the plan marks it too");
  assert.ok(!d.description.scripts.some((s) => s.kind === "station"), "no station script: the fat station runs all layers");
  assert.throws(() => run(["--fat", "2GiB,1GiB"]), /fat station 1 \(1024\.0 MiB\) gets no layer/);
});

test("replicas of a URL member: one url per copy; memberOf gives each copy its url; a string or a list of the wrong length is refused naming the member, here and in the core", async () => {
  const t2 = {...base(), replicas: 2};
  const t = withUrls(C, t2, {1: ["http://127.0.0.1:8001", "http://127.0.0.1:8002"]});
  assert.deepEqual(t.stations[1].members[0].url, ["http://127.0.0.1:8001", "http://127.0.0.1:8002"]);
  assert.equal(memberOf(t, "st1").url, "http://127.0.0.1:8001");
  assert.deepEqual([memberOf(t, "st1r1").name, memberOf(t, "st1r1").url], ["st1r1", "http://127.0.0.1:8002"]);
  assert.deepEqual([memberOf(t, "st0r1").name, memberOf(t, "st0r1").url], ["st0r1", undefined], "a Worker member's copy");
  assert.throws(() => withUrls(C, t2, {1: "http://127.0.0.1:8001"}), /member st1: with replicas 2 its url must be a list of 2 urls \(one per copy\)/);
  assert.throws(() => withUrls(C, t2, {1: ["http://a:1", "http://a:2", "http://a:3"]}), /member st1: with replicas 2 its url must be a list of 2 urls/);
  assert.throws(() => withUrls(C, t2, {1: ["http://a:1", "ftp://b"]}), /member st1: url must be http\[s\]:\/\/host\[:port\], got "ftp:\/\/b"/);
  const d = await describeDeployment(t);
  assert.ok(!d.scripts.some((s) => /^knot-st1(r1)?$/.test(s.name)), "no script for either copy of the URL member");
  assert.deepEqual(d.scripts[0].services.map((s) => s.binding).filter((b) => /st1/.test(b)), [], "and no binding");
  const bad = structuredClone(t);
  bad.stations[1].members[0].url = "http://127.0.0.1:8001";
  await assert.rejects(describeDeployment(bad), /member st1: with replicas 2 its url must be a list of 2 urls \(one per copy\), got "http:\/\/127\.0\.0\.1:8001"/);
  bad.stations[1].members[0].url = ["http://a:1", "http://x/y"];
  await assert.rejects(describeDeployment(bad), /member st1: url must be http\[s\]:\/\/host\[:port\], got "http:\/\/x\/y"/);
});
