// local.mjs (Node only) — run a mesh under workerd through Miniflare: one Worker script per
// station member and per vocab shard (each its own isolate, as in production), the
// coordinator entry Worker with its SessionDO, the layer warden, and local R2 holding the
// model. Used by `knotwork mesh`, tests/workers/ and bench/mesh.mjs.
//
//   const mesh = await startMesh({knotBytes, topology, testHooks: true});
//   for await (const ev of mesh.generate({ids, options: {maxTokens: 16, temperature: 0}})) ...
//   await mesh.close();
import {Miniflare} from "miniflare";
import {links} from "./lib/topology.mjs";
import {dirname, resolve} from "node:path";
import {fileURLToPath} from "node:url";

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const COMPATIBILITY_DATE = "2026-04-01";
process.env.CLOUDFLARE_CF_FETCH_ENABLED ??= "false";

const script = (rel) => ({
  modules: true, modulesRoot: ROOT, scriptPath: resolve(ROOT, rel),
  modulesRules: [{type: "CompiledWasm", include: ["**/*.wasm"]}],
  compatibilityDate: COMPATIBILITY_DATE, compatibilityFlags: ["nodejs_compat"],
  r2Buckets: {MODELS: "knot-models"},
});

const json = (v) => JSON.parse(JSON.stringify(v));  // JSON bindings: no undefined fields

/** Miniflare worker options for a topology (first: the entry). */
export function meshWorkers(topology, {testHooks = false, warden = false, linkMode = "ws", timeouts = {}, kv = true,
                                       ttlMs, wardenBudget, chatTemplate} = {}) {
  const hooks = testHooks ? {TEST_HOOKS: "1"} : {};
  const members = topology.stations.flatMap((s) => s.members.map((m) => ({...m, layers: s.layers, role: s.role, resident: s.resident})));
  const service = (n) => `knot-${n}`;
  const l = links(topology);
  const workers = [{
    ...script("workers/coordinator/index.mjs"), name: "knot-coordinator",
    durableObjects: {SESSION: "SessionDO"},
    bindings: {TOPOLOGY: json(topology), LINK_MODE: linkMode, TIMEOUTS: timeouts, ...hooks,
               ...(chatTemplate ? {CHAT_TEMPLATE: chatTemplate} : {})},
    serviceBindings: Object.fromEntries(l.coordinator.map((n) => [`M_${n}`, service(n)])),
  }];
  for (const m of members) {
    const {next, followers, downstream} = l.stations.get(m.name);
    const peers = [...followers, ...(next ? [next] : [])];
    workers.push({
      ...script("workers/station/index.mjs"), name: service(m.name),
      durableObjects: {STATION_DO: "StationDO", ...(warden ? {WARDEN: {className: "LayerWardenDO", scriptName: "knot-warden"}} : {})},
      bindings: {STATION: json({name: m.name, knot: topology.knot, layers: m.layers, heads: m.heads, cols: m.cols, role: m.role,
                                resident: m.resident !== false, ...(topology.chain ? {next, followers, downstream} : {}),
                                ...(timeouts.stationMs ? {linkTimeoutMs: timeouts.stationMs} : {}), ...(ttlMs ? {ttlMs} : {})}), ...hooks},
      serviceBindings: Object.fromEntries(peers.map((n) => [`L_${n}`, service(n)])),
    });
  }
  const groups = topology.shardGroups ?? topology.shards.map((s) => [s.name]);
  const byName = new Map(topology.shards.map((s) => [s.name, s]));
  for (const s of topology.shards) {
    const followers = groups.find((g) => g[0] === s.name)?.slice(1) ?? [];
    workers.push({
      ...script("workers/cobordism/index.mjs"), name: service(s.name),
      bindings: {SHARD: json({name: s.name, knot: topology.knot, vocab: s.vocab, softcap: s.softcap}), ...hooks,
                 ...(followers.length ? {FOLLOWERS: followers.map((n) => ({name: n, vocab: byName.get(n).vocab})),
                                         FOLLOWER_TIMEOUT_MS: String(Math.max(100, (timeouts.shardMs ?? 15_000) - 100))} : {})},
      serviceBindings: Object.fromEntries(followers.map((n) => [`F_${n}`, service(n)])),
      ...(warden ? {durableObjects: {COB_WARDEN: {className: "CobordismWardenDO", scriptName: "knot-warden"}}} : {}),
    });
  }
  workers.push({
    ...script("workers/warden/index.mjs"), name: "knot-warden",
    durableObjects: {LAYER_WARDEN: "LayerWardenDO", COB_WARDEN: "CobordismWardenDO"},
    ...(kv ? {kvNamespaces: {ROWS_KV: "knot-rows"}} : {}),
    bindings: {...hooks, ...(wardenBudget ? {WARDEN_BUDGET: String(wardenBudget)} : {})},
  });
  return workers;
}

/** Start a mesh; the model's .knot bytes are put into local R2 under topology.knot. */
export async function startMesh({knotBytes, topology, port, ...opts}) {
  const mf = new Miniflare({workers: meshWorkers(topology, opts), ...(port !== undefined ? {host: "127.0.0.1", port} : {})});
  const url = await mf.ready;
  const bucket = await mf.getR2Bucket("MODELS");
  if (knotBytes) await bucket.put(topology.knot, knotBytes);
  const worker = (name) => mf.getWorker(name);
  return {
    mf, topology, bucket, worker, url,
    /** NDJSON events of POST /v1/mesh/generate, parsed. */
    async *generate(body) {
      const res = await mf.dispatchFetch("http://mesh/v1/mesh/generate", {method: "POST", body: JSON.stringify(body)});
      if (!res.ok) throw new Error(`mesh: HTTP ${res.status}: ${await res.text()}`);
      let buf = "";
      const dec = new TextDecoder();
      for await (const chunk of res.body) {
        buf += dec.decode(chunk, {stream: true});
        let nl;
        while ((nl = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          if (line) yield JSON.parse(line);
        }
      }
    },
    /** Collect a generation: {summary, events, tokens, error}. */
    async run(body) {
      const events = [];
      for await (const e of this.generate(body)) events.push(e);
      return {events, summary: events.find((e) => e.type === "summary"), error: events.find((e) => e.type === "error"),
              telemetry: events.filter((e) => e.type === "telemetry"), tokens: events.filter((e) => e.type === "token")};
    },
    /** /stats of every isolate: coordinator, each station member, each shard. */
    async stats() {
      const out = {coordinator: await (await mf.dispatchFetch("http://mesh/v1/mesh/stats")).json().then((j) => j.coordinator)};
      const names = [...topology.stations.flatMap((s) => s.members.map((m) => m.name)), ...topology.shards.map((s) => s.name)];
      for (const n of names) out[n] = await (await (await worker(`knot-${n}`)).fetch("http://x/stats")).json();
      return out;
    },
    /** POST a fault ({status} | {hangMs} | null) to one worker's test hook. */
    async fault(name, f) {
      const w = await worker(`knot-${name}`);
      const r = await w.fetch("http://x/debug/fault", {method: "POST", body: JSON.stringify(f)});
      if (!r.ok) throw new Error(`fault ${name}: HTTP ${r.status}`);
    },
    close: () => mf.dispose(),
  };
}
