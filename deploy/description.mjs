// description.mjs — the one deployment description of a mesh: a topology (workers/lib/topology.mjs)
// and its options become the Worker scripts that run it, one per isolate: the coordinator (the
// entry, the only public route, with the per-session SessionDO), one script per station member
// and per vocab shard (so two of them never share an isolate's 128 MB), and the warden (layer and
// cobordism caches in front of R2). Two renderers read it and add nothing the workers read:
// deploy/wrangler.mjs (wrangler.jsonc files for `wrangler dev` / `wrangler deploy`) and
// deploy/miniflare.mjs (Miniflare worker options for the tests, `knotwork mesh`, bench/mesh.mjs).
// Runtime-neutral (no node: imports).
//
//   describeDeployment(topology, options) -> {compatibility_date, compatibility_flags, scripts: [script]}
//   script = {name, main, kind, workers_dev, vars, services, durable_objects, r2_buckets, kv_namespaces, migrations}
//     main            the Worker source, relative to the checkout
//     kind            "coordinator" | "station" | "shard" | "warden"
//     vars            {NAME: string | JSON value}: JSON values are JSON bindings in both renderings
//     services        [{binding, service}]                   service bindings (links)
//     durable_objects [{name, class_name, script_name?}]     script_name: a class of another script
//     r2_buckets      [{binding, bucket_name}]
//     kv_namespaces   [{binding, id}]
//     migrations      [{tag, new_classes}]                   the classes this script defines
//   The coordinator is scripts[0] (the order `wrangler dev -c A -c B ...` wants).
//
// Options (defaults in brackets):
//   bucket [knot-models]             R2 bucket of the models (binding MODELS on every script)
//   compatibilityDate [2026-04-01]
//   warden [false]                   stations and shards bind the warden's DOs (WARDEN, COB_WARDEN)
//   linkMode [ws]                    LINK_MODE of the coordinator: "ws" or "http"
//   timeouts [{}]                    TIMEOUTS of the coordinator {stationMs?, shardMs?, ...}; stationMs
//                                    is also each station's linkTimeoutMs, shardMs - 100 a hub's
//                                    FOLLOWER_TIMEOUT_MS (default 15 s - 100 ms)
//   ttlMs                            a station's idle session TTL (STATION.ttlMs; the worker's default
//                                    when absent)
//   wardenBudget                     the layer warden's cache budget in bytes (WARDEN_BUDGET)
//   chatTemplate                     CHAT_TEMPLATE of the coordinator (a template name, e.g. "chatml")
//   testHooks [false]                TEST_HOOKS=1 on every script (fault and debug routes)
// Names (knot-<member>, M_/L_/F_<name>, SessionDO, StationDO, LayerWardenDO, CobordismWardenDO,
// MODELS, ROWS_KV) are what the workers read: keep them.
import {links} from "../workers/lib/topology.mjs";

export const COMPATIBILITY_DATE = "2026-04-01";
export const COMPATIBILITY_FLAGS = Object.freeze(["nodejs_compat"]);  // *.wasm imports as CompiledWasm modules
export const COORDINATOR = "knot-coordinator";
export const WARDEN = "knot-warden";
export const scriptName = (member) => `knot-${member}`;

const json = (v) => JSON.parse(JSON.stringify(v));  // JSON vars: no undefined fields

const OPTIONS = new Set(["bucket", "compatibilityDate", "warden", "linkMode", "timeouts", "ttlMs", "wardenBudget", "chatTemplate", "testHooks"]);

export function describeDeployment(topology, options = {}) {
  for (const k of Object.keys(options)) if (!OPTIONS.has(k)) throw new Error(`deployment: unknown option ${k}`);
  const {bucket = "knot-models", compatibilityDate = COMPATIBILITY_DATE, warden = false, linkMode = "ws", timeouts = {},
         ttlMs, wardenBudget, chatTemplate, testHooks = false} = options;
  if (!["ws", "http"].includes(linkMode)) throw new Error(`deployment: linkMode must be "ws" or "http", not ${JSON.stringify(linkMode)}`);
  const hooks = testHooks ? {TEST_HOOKS: "1"} : {};
  const models = [{binding: "MODELS", bucket_name: bucket}];
  const script = (name, main, kind, parts) => ({
    name, main, kind, workers_dev: kind === "coordinator", vars: {}, services: [], durable_objects: [],
    r2_buckets: models, kv_namespaces: [], migrations: [], ...parts});
  const link = (prefix) => (n) => ({binding: `${prefix}_${n}`, service: scriptName(n)});
  const l = links(topology);
  const scripts = [script(COORDINATOR, "workers/coordinator/index.mjs", "coordinator", {
    vars: {TOPOLOGY: json(topology), LINK_MODE: linkMode, ...(Object.keys(timeouts).length ? {TIMEOUTS: json(timeouts)} : {}),
           ...hooks, ...(chatTemplate ? {CHAT_TEMPLATE: chatTemplate} : {})},
    services: l.coordinator.map(link("M")),
    durable_objects: [{name: "SESSION", class_name: "SessionDO"}],
    migrations: [{tag: "v1", new_classes: ["SessionDO"]}],
  })];
  for (const s of topology.stations) for (const m of s.members) {
    const {next, followers, downstream} = l.stations.get(m.name);
    scripts.push(script(scriptName(m.name), "workers/station/index.mjs", "station", {
      vars: {STATION: json({name: m.name, knot: topology.knot, layers: s.layers, heads: m.heads, cols: m.cols, role: s.role,
                            resident: s.resident !== false, ...(topology.chain ? {next, followers, downstream} : {}),
                            ...(timeouts.stationMs ? {linkTimeoutMs: timeouts.stationMs} : {}), ...(ttlMs ? {ttlMs} : {})}), ...hooks},
      services: [...followers, ...(next ? [next] : [])].map(link("L")),
      durable_objects: [{name: "STATION_DO", class_name: "StationDO"},
                        ...(warden ? [{name: "WARDEN", class_name: "LayerWardenDO", script_name: WARDEN}] : [])],
      migrations: [{tag: "v1", new_classes: ["StationDO"]}],
    }));
  }
  const groups = topology.shardGroups ?? topology.shards.map((s) => [s.name]);
  const byName = new Map(topology.shards.map((s) => [s.name, s]));
  for (const s of topology.shards) {
    const followers = groups.find((g) => g[0] === s.name)?.slice(1) ?? [];
    scripts.push(script(scriptName(s.name), "workers/cobordism/index.mjs", "shard", {
      vars: {SHARD: json({name: s.name, knot: topology.knot, vocab: s.vocab, softcap: s.softcap}), ...hooks,
             ...(followers.length ? {FOLLOWERS: followers.map((n) => ({name: n, vocab: byName.get(n).vocab})),
                                     FOLLOWER_TIMEOUT_MS: String(Math.max(100, (timeouts.shardMs ?? 15_000) - 100))} : {})},
      services: followers.map(link("F")),
      durable_objects: warden ? [{name: "COB_WARDEN", class_name: "CobordismWardenDO", script_name: WARDEN}] : [],
    }));
  }
  scripts.push(script(WARDEN, "workers/warden/index.mjs", "warden", {
    vars: {...hooks, ...(wardenBudget ? {WARDEN_BUDGET: String(wardenBudget)} : {})},
    durable_objects: [{name: "LAYER_WARDEN", class_name: "LayerWardenDO"}, {name: "COB_WARDEN", class_name: "CobordismWardenDO"}],
    kv_namespaces: [{binding: "ROWS_KV", id: "knot-rows"}],
    migrations: [{tag: "v1", new_classes: ["LayerWardenDO", "CobordismWardenDO"]}],
  }));
  return {compatibility_date: compatibilityDate, compatibility_flags: [...COMPATIBILITY_FLAGS], scripts};
}

/** One line per script for a config's header comment: what the isolate holds. */
export function describeScript(s) {
  if (s.kind === "coordinator") return "the mesh's entry: coordinator Worker + per-session Durable Object";
  if (s.kind === "warden") return "layer and cobordism wardens (caches in front of R2)";
  if (s.kind === "station") {
    const m = s.vars.STATION;
    return `station ${m.name}: layers [${m.layers}]${m.heads ? ` heads [${m.heads}] ffn [${m.cols}]` : ""}, ${m.role}`;
  }
  const sh = s.vars.SHARD, f = s.vars.FOLLOWERS;
  return `vocab shard ${sh.name}: tokens [${sh.vocab}]${f ? `, hub of ${f.map((x) => x.name).join(", ")}` : ""}`;
}
