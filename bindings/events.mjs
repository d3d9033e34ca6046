// events.mjs — the events of one generation: one schema for every layer that streams a
// completion. Model.generate (knotwork.mjs) and the mesh's loop (MeshCoordinator.generate,
// workers/coordinator/mesh.mjs) yield them; the backends of the OpenAI handler
// (local-backend.mjs, workers/coordinator/backend.mjs) pass them on unrenamed, adding
// `accepted` first; openai.mjs consumes them (its SSE `: knotwork {json}` telemetry and the
// OpenAI chunks are that handler's own output format). The mesh's HTTP API
// (POST /v1/mesh/generate) writes them as NDJSON, one event a line, plus `error`.
//
// In order:
//   accepted     once, first — the OpenAI backend interface only (the request fits)
//   prefill      Model.generate with prefillProgress: before the first piece, after each
//   telemetry    the mesh's named progress: route, prefill_started, prefill_progress,
//                prefill_completed, decode_started, reprefill, abstain, failover, restored; and queue (a
//                backend's wait); anything else a backend names passes as telemetry too
//   token        one per sampled token
//   summary      once, last, when the generation ended
//   error        NDJSON only: the generation failed (a thrown error anywhere else)
//
// Types (JSDoc only; nothing here runs):
/**
 * @typedef {{type: "accepted", promptTokens: number, nCtx: number, seed?: number, arch?: string,
 *            mode?: string, quantization?: string, topology?: object}} AcceptedEvent
 *   the prompt was tokenized and fits: an OpenAI handler commits to HTTP 200 here
 * @typedef {{type: "prefill", done: number, total: number, elapsedMs: number}} PrefillEvent
 *   prompt tokens fed so far of total
 * @typedef {{type: "telemetry", event: string, [field: string]: any}} TelemetryEvent
 *   event "route": {sid, stations, members, shards, replicas?, route?, knot, nCtx, logits: "full"|"top-k+lse", k?}
 *   (replicas > 1: route is the copy serving each station member and shard hub, {st0: 1, ...});
 *   "prefill_started": {tokens, cached?, mode?}; "prefill_progress": {done, total} (the mesh:
 *   sent as each chunk leaves the exit, not when the prefill ends); "prefill_completed":
 *   {tokens, cached?, ms, mode?, maxInFlight?} (tokens, done, total: the prompt tokens fed;
 *   cached: those a held session already had, not fed again; mode "pipelined" | "sequential":
 *   the mesh's prefill; maxInFlight: chunks in the stations at once); "decode_started":
 *   {lookup?, draft?, draftN?, drafting?};
 *   "reprefill": {reason, tokens}; "abstain": {phase, shard, slice: [v0, v1], reason,
 *   tokens: [{id, pos}]}; "failover": {member, from, replica, reason, rebuilt} (the mesh's routes,
 *   workers/coordinator/routes.mjs: member, the logical station member or shard hub; from, the
 *   copy that failed; replica, the copy now serving it (the same one for a resend); rebuilt:
 *   "resend" (the frame sent again on a fresh link), "restore" (the new copy restores the
 *   session from the snapshot the failed copy persisted), "replay" (the token history re-fed
 *   from position 0; after a "restore" that found no snapshot, a second event says so) or
 *   "none (stateless)" (a shard)); "restored": {member, replica, positions} (the restore
 *   succeeded: positions [0, positions) were not fed again); "queue": {ahead}
 * @typedef {{type: "token", token: number, text: string, logprob?: number,
 *            top?: {token: number, logprob: number}[],
 *            telemetry: {n: number, elapsedMs: number, decodeTokS: number,
 *                        memory?: {linear: number, peakLinear: number, heap: number, peakHeap: number},
 *                        speculative?: {drafted: number, accepted: number, acceptance: number},
 *                        hops?: number}}} TokenEvent
 *   text: the complete UTF-8 this token released ("" while a character or a possible stop
 *   string is pending); logprob / top (the raw distribution's) when logprobs was asked
 * @typedef {{type: "summary", ids: number[], text: string, reason: "eog"|"stop"|"length"|"context",
 *            promptIds: number[], nPrompt: number, cachedTokens?: number, nGenerated: number, nDecoded: number, nCtx: number,
 *            prefillMs: number, decodeMs: number, prefillTokS: number, decodeTokS: number,
 *            mode: string, engine?: object, memory?: object, prefill?: "pipelined"|"sequential", passes?: number,
 *            speculative?: {lookup?: number, draft?: string, draftN?: number, drafted: number, accepted: number, acceptance: number,
 *                           verifyPasses?: number, rowsCached?: number, draftMs?: number, draftPrimeMs?: number, draftPasses?: number,
 *                           draftWeightBytes?: number, draftKvBytes?: number, draftEngineBytes?: number},
 *            hops?: number, subrequests?: number, maxConnections?: number, messages?: number,
 *            abstains?: number, reprefills?: number, restores?: number, failovers?: number, rowsPrefetched?: number, flaggedTokens?: number[],
 *            shardK?: number|"full", coordinatorMemory?: object}} SummaryEvent
 *   cachedTokens: prompt tokens reused from a held session (its KV already held them);
 *   engine / memory: a single process's (Model.generate); speculative (lookup > 0, or a draft
 *   model: draft names it, draftN its tokens per pass): both (the mesh adds verifyPasses: passes
 *   that carried drafts, and with lookup rowsCached: input rows taken from the rows already seen
 *   instead of an embed fan-out; with a draft model draftMs / draftPrimeMs: the coordinator's drafting
 *   time in decode / while the stations prefill, draftPasses, and the draft's weights, KV and
 *   buffers in the coordinator's wasm memory); prefill, passes (decode
 *   passes through the stations), hops ... coordinatorMemory: the mesh's
 * @typedef {{type: "error", error: string, status: number}} ErrorEvent
 * @typedef {AcceptedEvent|PrefillEvent|TelemetryEvent|TokenEvent|SummaryEvent|ErrorEvent} GenerationEvent
 */
export {};
