// stats.mjs — every isolate's memory and counters, for GET /v1/mesh/stats and /health:
// this coordinator's wasm memory and each station member's and shard's /stats (every copy of
// them when the topology has replicas: "st0", "st0r1", ...).
import {memoryStats} from "../../bindings/knotwork.mjs";
import {jsonBinding} from "../lib/config.mjs";
import {initWasm} from "../lib/boot.mjs";
import {replicaName, replicaCount} from "../lib/topology.mjs";

export async function isolateStats(env) {
  await initWasm();
  const t = jsonBinding(env.TOPOLOGY, "TOPOLOGY");
  const logical = [...t.stations.flatMap((s) => s.members.map((m) => m.name)), ...t.shards.map((s) => s.name)];
  const names = logical.flatMap((n) => Array.from({length: replicaCount(t)}, (_, r) => replicaName(n, r))).filter((n) => env[`M_${n}`]);
  const out = {coordinator: {memory: await memoryStats()}};
  await Promise.all(names.map(async (n) => {
    try { out[n] = await (await env[`M_${n}`].fetch(`https://${n}/stats`)).json(); } catch (e) { out[n] = {error: e.message}; }
  }));
  return out;
}
