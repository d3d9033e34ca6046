// description.mjs — the one deployment description of a mesh, from JS: the core's
// (core/infer/deployment.h, through kw_deploy; native `knot plan --wrangler` runs the same
// code). A topology (workers/lib/topology.mjs) and options become the Worker scripts that run
// it, one per isolate, coordinator first (a member named by url, a native fat station, gets no
// script and no binding: the coordinator links to its url):
//   {compatibility_date, compatibility_flags, scripts: [{name, main, kind, workers_dev, vars,
//    services, durable_objects, r2_buckets, kv_namespaces, migrations}]}
// Renderers: deploy/wrangler.mjs (wrangler.jsonc files, rendered by the core too) and
// deploy/miniflare.mjs (Miniflare worker options); they add nothing the workers read.
//
// Options (defaults in brackets):
//   bucket [knot-models]             R2 bucket of the models (binding MODELS on every script)
//   compatibilityDate [2026-04-01]
//   warden [false]                   stations and shards bind the warden's DOs (WARDEN, COB_WARDEN)
//   linkMode [ws]                    LINK_MODE of the coordinator: "ws" or "http"
//   timeouts [{}]                    TIMEOUTS of the coordinator {stationMs?, shardMs?, backoffMs?, backoffMaxMs?}; stationMs
//                                    is also each station's linkTimeoutMs, shardMs - 100 a hub's
//                                    FOLLOWER_TIMEOUT_MS (default 15 s - 100 ms)
//   ttlMs                            a station's idle session TTL (STATION.ttlMs)
//   wardenBudget                     the layer warden's cache budget in bytes (WARDEN_BUDGET)
//   chatTemplate                     CHAT_TEMPLATE of the coordinator (a template name, e.g. "chatml")
//   testHooks [false]                TEST_HOOKS=1 on every script (fault and debug routes)
//   prefixCache [{}]                 PREFIX_CACHE of the coordinator {kvTokens?, ttlMs?, similarity?}: the held
//                                    sessions reused by prompt prefix (workers/coordinator/prefixes.mjs)
//   draft                            DRAFT of the coordinator {knot, n?}: the draft model of speculative decoding
//                                    (its .knot key in the bucket, at most n tokens per pass; workers/coordinator/draft.mjs)
// An unknown option or a bad value is refused naming it.
import {init} from "../bindings/knotwork.mjs";

/**
 * The core's deployment request: {topology | plan + knot?, options?, main_prefix?} ->
 * {topology, description, files: [{file, text}]} (files: the wrangler.jsonc of every script,
 * each main = main_prefix + the script's main relative to the checkout).
 */
export async function deploymentOf(request) {
  const w = await init();
  w.withString(JSON.stringify(request), (p, n) => w.call("kw_deploy", p, n));
  return w.resultJSON();
}

export async function describeDeployment(topology, options = {}) {
  return (await deploymentOf({topology, options})).description;
}
