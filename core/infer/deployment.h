// deployment.h — the one deployment description of a mesh, and its wrangler rendering.
//
// A topology (the JSON of workers/lib/topology.mjs: {knot, n_embd, n_vocab, stations:
// [{layers, role, resident, members: [{name, heads?, cols?}]}], shards: [{name, vocab,
// softcap?}], shardGroups?, chain?, context?, chunk?}) and options become the Worker scripts
// that run it, one per isolate: the coordinator (the entry, the only public route, with the
// per-session SessionDO and the PrefixDO index of held sessions), one script per station member and per vocab shard (two of them never
// share an isolate's 128 MB), and the warden (layer and cobordism caches in front of R2):
//
//   description = {compatibility_date, compatibility_flags, scripts: [script]}, coordinator first
//   script = {name, main, kind, workers_dev, vars, services, durable_objects, r2_buckets,
//             kv_namespaces, migrations}
//     main             the Worker source, relative to the checkout
//     kind             "coordinator" | "station" | "shard" | "warden"
//     vars             {NAME: string | JSON value}; JSON values are JSON bindings
//     services         [{binding, service}]                  service bindings (links)
//     durable_objects  [{name, class_name, script_name?}]    script_name: another script's class
//     r2_buckets       [{binding, bucket_name}];  kv_namespaces [{binding, id}]
//     migrations       [{tag, new_classes | new_sqlite_classes}] the classes the script defines
//                                                            (StationDO: SQLite-backed, for its KV snapshots)
//
// Renderings: wrangler.jsonc files here (native `knot plan --wrangler`, and through kw_deploy
// deploy/wrangler.mjs); Miniflare worker options in deploy/miniflare.mjs (JS: Miniflare is a
// Node library). Both carry exactly the description's vars and bindings
// (tests/workers/renderings.test.mjs). The names (knot-<member>, M_/L_/F_<name>, SessionDO, PrefixDO,
// StationDO, LayerWardenDO, CobordismWardenDO, MODELS, ROWS_KV, the vars) are what the workers
// read. Links follow workers/lib/topology.mjs (links, fitLinks): at most 6 per holder.
// No stdio (compiled into the wasm module).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace knot {

struct DeployOptions {
  std::string bucket = "knot-models";          // R2 bucket of the models (MODELS on every script)
  std::string compatibility_date = "2026-04-01";
  bool warden = false;                         // stations and shards bind the warden's DOs
  std::string link_mode = "ws";                // LINK_MODE of the coordinator: ws | http
  nlohmann::ordered_json timeouts = nlohmann::ordered_json::object();  // TIMEOUTS {stationMs?, shardMs?, ...}
  int64_t ttl_ms = 0;                          // STATION.ttlMs (0: the worker's default)
  int64_t warden_budget = 0;                   // WARDEN_BUDGET bytes (0: the worker's default)
  std::string chat_template;                   // CHAT_TEMPLATE of the coordinator ("": none)
  bool test_hooks = false;                     // TEST_HOOKS=1 on every script
  nlohmann::ordered_json prefix_cache = nlohmann::ordered_json::object();  // PREFIX_CACHE {kvTokens?, ttlMs?, similarity?}
  nlohmann::ordered_json draft = nlohmann::ordered_json::object();  // DRAFT {knot, n?}: the coordinator's draft model
};

// From the JS option names {bucket, compatibilityDate, warden, linkMode, timeouts, ttlMs,
// wardenBudget, chatTemplate, testHooks, prefixCache, draft}; an unknown key or a bad value fails naming it.
DeployOptions deploy_options_from_json(const nlohmann::ordered_json& j);

// The R2 object key of a model by default: its file name, .gguf -> .knot.
std::string knot_key_of(const std::string& model_name);

// A planner plan (planner.h JSON) as a topology: slices of one layer range become the members
// of one station (st<i>[s<j>]), shards sh<i>, the plan's ids kept as `id`; links fitted
// (chain, shard hubs) and the coverage checked. Same as workers/lib/topology.mjs
// topologyFromPlan.
nlohmann::ordered_json topology_from_plan(const nlohmann::ordered_json& plan, const std::string& knot);

nlohmann::ordered_json describe_deployment(const nlohmann::ordered_json& topology, const DeployOptions& o);

// The wrangler.jsonc files of a description, [{file name, text}], the coordinator first
// ("wrangler.jsonc", then "knot-<name>.jsonc"); each main is main_prefix + the script's main.
std::vector<std::pair<std::string, std::string>> wrangler_files(const nlohmann::ordered_json& description,
                                                                const std::string& main_prefix);

// JSON indented by 2 with arrays of scalars on one line ("layers": [0, 2]); no newline at the end.
std::string format_json(const nlohmann::ordered_json& v);

// The wasm entry (kw_deploy): request {topology | plan + knot?, options?, main_prefix} ->
// {topology, description, files: [{file, text}]} as JSON text.
std::string deploy_request(const std::string& request_json);

}  // namespace knot
