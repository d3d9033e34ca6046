// workers/coordinator — the mesh's entry Worker (docs/architecture.md, docs/protocol.md),
// the only publicly routable script. Its parts: session.mjs (SessionDO: each generation
// runs in the session Durable Object its session id names), mesh.mjs (MeshCoordinator: the
// generation loop), backend.mjs (the OpenAI API's backend over the mesh), prompt.mjs (the
// tokenizer, once per isolate), request.mjs (what a public request may ask), prefixes.mjs
// (PrefixDO: the held sessions of a route, reused by prompt prefix), routes.mjs (replicas:
// a session's route, back-off, failover), stats.mjs (every isolate's memory).
//
// HTTP:  POST /v1/mesh/generate {prompt | ids | messages, options}
//          -> NDJSON events (bindings/events.mjs: telemetry, token, summary | error); a bad
//          field (request.mjs: ids, options, and the internal knobs session, timeouts,
//          linkMode) is a 400 naming it, before anything streams
//        GET /v1/mesh/topology, GET /v1/mesh/stats (every isolate's memory)
//        the OpenAI-compatible API (bindings/openai.mjs) over meshBackend(env): /v1/models,
//        /v1/chat/completions, /v1/completions, /health, / (chat page), and llama-server's
//        /tokenize, /detokenize, /apply-template, /props, /metrics (this isolate's counters);
//        /v1/embeddings is a 501 naming why (backend.mjs)
// With API_KEY set, /v1/mesh/ routes need it as a Bearer token (the OpenAI routes too:
// openai.mjs checks them).
/**
 * @typedef {object} Env
 * @property {string|object} TOPOLOGY  JSON (lib/topology.mjs shape)
 * @property {R2Bucket} MODELS  the .knot files
 * @property {DurableObjectNamespace<import("./session.mjs").SessionDO>} SESSION
 * @property {DurableObjectNamespace<import("./prefixes.mjs").PrefixDO>} PREFIXES  one per model and route
 * @property {string|{kvTokens?: number, ttlMs?: number, similarity?: number}} [PREFIX_CACHE]  JSON (prefixes.mjs)
 * @property {string} [LINK_MODE]  "ws" (default) | "http"
 * @property {string|{shardMs?: number, stationMs?: number, backoffMs?: number, backoffMaxMs?: number}} [TIMEOUTS]  JSON
 *   (backoff*: how long a copy that failed is not asked: routes.mjs)
 * @property {string} [API_KEY]  required as Bearer token when set
 * @property {string} [CHAT_TEMPLATE]  chatml | llama2 | llama3 | zephyr | jinja: the chat
 *   template by name; by default the model's own, and one the core cannot render is a 400 naming it
 * @property {string} [MODEL_ID]  the model's id in /v1/models (default: the .knot's name)
 * @property {string|{knot: string, n?: number}} [DRAFT]  JSON: the draft model of speculative decoding
 *   (its .knot in MODELS, at most n tokens per pass; draft.mjs): on for every request unless it
 *   asks draft: false (or fewer tokens: draftN)
 * @property {string} [TEST_HOOKS]
 * M_<name>: a service binding (Fetcher) per station member and shard the coordinator links to
 */
import {createHandler} from "../../bindings/openai.mjs";
import {jsonBinding} from "../lib/config.mjs";
import {HttpError, errorResponse} from "../lib/errors.mjs";
import {sessionStream} from "./session.mjs";
import {textModel} from "./prompt.mjs";
import {checkGenerateBody} from "./request.mjs";
import {meshBackend} from "./backend.mjs";
import {isolateStats} from "./stats.mjs";
import {draftConfig} from "./draft.mjs";

export {SessionDO} from "./session.mjs";
export {PrefixDO} from "./prefixes.mjs";

const OPENAI_ROUTES = new Set(["/", "/health", "/tokenize", "/detokenize", "/apply-template", "/props", "/metrics"]);

// One OpenAI handler (and its /metrics counters) per isolate and env.
const handlers = new WeakMap();
function handlerOf(env) {
  let h = handlers.get(env);
  if (!h) handlers.set(env, h = createHandler(meshBackend(env), {apiKey: env.API_KEY}));
  return h;
}

export default {
  /** @param {Request} req @param {Env} env */
  async fetch(req, env) {
    const url = new URL(req.url);
    try {
      if (env.API_KEY && url.pathname.startsWith("/v1/mesh/") && req.headers.get("authorization") !== `Bearer ${env.API_KEY}`)
        throw new HttpError(401, "missing or wrong API key");
      if (url.pathname === "/v1/mesh/topology") return Response.json(jsonBinding(env.TOPOLOGY, "TOPOLOGY"));
      if (url.pathname === "/v1/mesh/stats") return Response.json(await isolateStats(env));
      if (url.pathname === "/v1/mesh/generate" && req.method === "POST") {
        const body = await req.json().catch(() => { throw new HttpError(400, "body is not JSON"); });
        const checked = await checkGenerateBody(await textModel(env), body, env.CHAT_TEMPLATE ?? "", {draftMax: draftConfig(env)?.n ?? 0});
        return new Response(await sessionStream(env, checked), {headers: {"content-type": "application/x-ndjson"}});
      }
      if (OPENAI_ROUTES.has(url.pathname.replace(/\/+$/, "") || "/") || url.pathname.startsWith("/v1/"))
        return handlerOf(env)(req);
      throw new HttpError(404, `no route ${req.method} ${url.pathname}`);
    } catch (e) { return errorResponse(e); }
  },
};
