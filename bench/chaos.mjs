#!/usr/bin/env node
// bench/chaos.mjs — chaos and load, measured: many clients drive a local mesh under real
// workerd (deploy/miniflare.mjs startMesh, loopback HTTP) through the official `openai`
// client while a fault driver breaks it; every reply is classified against a single-process
// run of the same request (Model.generate with the options the mesh's backend derives).
//
//   node bench/chaos.mjs [--clients 32] [--seconds 60] [--seed 1] [--model NAME.gguf] [--replicas R]
//                        [--stall-ms 60000] [--deadline-ms 300000]
//                        [--out bench/chaos-2026-12-01.jsonl]      (appends the result as a JSON line)
//   import {runChaos} from "./chaos.mjs"; const r = await runChaos({clients: 4, seconds: 20});
//
// Load: each client runs, until `seconds` have passed, a seeded script of multi-turn chats
// (each turn resends the conversation so far with the mesh's reply: prefix reuse across
// turns, usage.prompt_tokens_details.cached_tokens) and completions, greedy or seeded
// sampling (temperature 0.8, with or without top_k), streamed (TTFT), maxRetries 0 (a
// failure is seen, not retried). A request that receives no byte (a token, a telemetry comment)
// for `stallMs` is given up as lost, and none outlives `deadlineMs`: a slow answer that is still
// streaming (a loaded host) is not lost.
// Faults (a seeded driver, one every `faultEveryMs` on average, each cleared after 0.5-2.5 s):
//   station-restart  a station member's Durable Object of a live session restarted (kinds:
//                    restore from the KV snapshot, wipe it too (re-prefill), ctx.abort() only)
//   shard-500        a shard answers HTTP 500 (the coordinator abstains that slice)
//   shard-stall      a shard holds its answers past the shard timeout (4 s; abstain)
//   warden-corrupt   bytes of a cached tensor flipped in the fluid station's layer warden
//                    (the station's hash check rejects them, reads R2, invalidates)
//   replica-kill     (only when the topology has replicas R > 1) one copy of a station member
//                    or shard answers 503 / drops its links (failover to another copy)
// Classes of a reply (the single-process run of the same prompt ids and options is the
// reference): identical; degraded (completed, and its telemetry names an abstain or a
// failover, identical or not); failed (an HTTP error, or an error in the stream, whose
// message names the cause); lost (no byte for stallMs or no end by deadlineMs, a dropped connection or a
// stream that ended without a finish reason or an error: must be 0); wrong (completed, not
// degraded, not identical: must be 0).
// Result (one JSON object): clients, seconds, requests, completed, identical, degraded
// (degraded_identical of them identical), failed, lost, wrong, p50_ms, p99_ms, ttft_p50_ms,
// cached_ratio (cached / prompt tokens of completed requests), faults {kind: injected},
// observed {abstains, reprefills, failovers, restores, copyRestores, wardenRejects}, memory per isolate
// {baseline, after, delta} (wasm heap bytes, after the sessions drained back: every station's
// liveSessions 0), errors (the distinct failure messages, counted), and the examples of any
// lost / wrong reply.
import {appendFileSync} from "node:fs";
import {resolve, dirname, join} from "node:path";
import {fileURLToPath} from "node:url";
import OpenAI from "openai";
import * as kw from "../bindings/knotwork.mjs";
import {parseRequest} from "../bindings/openai.mjs";
import {requestOptions, defaultContext} from "../bindings/options.mjs";
import {startMesh} from "../deploy/miniflare.mjs";
import {topologyFromCounts, replicaName} from "../workers/lib/topology.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const MODELS = process.env.KNOT_SHARED_MODELS ?? resolve(root, "../shared/models");

// mulberry32: a seeded PRNG, so a run's requests and faults are the same for the same seed
function rng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {next, int: (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)), pick: (xs) => xs[Math.floor(next() * xs.length)]};
}

// The shard timeout: above what a shard takes under the load (so an abstain is the fault's), and a stall is longer
const SHARD_MS = 4000;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const pct = (xs, p) => (xs.length ? [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))] : null);

const WORDS = ["Once upon a time", "The little dog", "Lily wanted to", "Tom and Sue went to the park", "A big red ball",
  "One day, a cat", "The sun was shining", "Mom said", "Tell me a story", "What did the bird see?"];

// The seeded parameters of one request: greedy, or seeded sampling with or without top_k
function sampling(r) {
  const max_tokens = r.int(6, 20);
  const kind = r.int(0, 2);
  if (kind === 0) return {max_tokens, temperature: 0};
  return {max_tokens, temperature: 0.8, seed: r.int(1, 1 << 30), ...(kind === 1 ? {top_k: 40} : {})};
}

// A fetch that passes the response on unchanged but records the stream's `: knotwork {json}`
// telemetry comments (bindings/openai.mjs), which the openai client ignores. Each request
// goes on its own connection (`connection: close`): with keep-alive reuse, a request sent on a
// pooled connection as the local server closes it fails with "other side closed" before any
// byte of an answer (seen at 1-3 of ~25 requests per 15 s run with no fault injected; none in
// the same runs with connection: close) — a race of the client's pool with the local server's
// idle close, not of the mesh.
function tapFetch(rec) {
  return async (url, init) => {
    const headers = new Headers(init?.headers);
    headers.set("connection", "close");
    const res = await fetch(url, {...init, headers});
    rec.status = res.status;
    if (!res.body || !/event-stream/.test(res.headers.get("content-type") ?? "")) return res;
    const dec = new TextDecoder();
    let buf = "";
    const tap = new TransformStream({
      transform(chunk, ctl) {
        buf += dec.decode(chunk, {stream: true});
        let i;
        while ((i = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, i);
          buf = buf.slice(i + 1);
          if (line.startsWith(": knotwork ")) { try { rec.onTele(JSON.parse(line.slice(11))); } catch {} }
        }
        rec.onBytes?.();
        ctl.enqueue(chunk);
      },
    });
    return new Response(res.body.pipeThrough(tap), {status: res.status, statusText: res.statusText, headers: res.headers});
  };
}

const GENERIC = /^(Connection error\.?|Request timed out\.?|terminated|fetch failed|The operation was aborted\.?|Request was aborted\.?|other side closed)$/i;

// One streamed request through the official client: {kind, body, text, finish, usage, ms,
// ttftMs, tele, error?, lost?}.
async function request(baseURL, kind, body, {deadlineMs, stallMs}, live) {
  const rec = {kind, body, text: "", finish: null, usage: null, tele: [], t0: performance.now()};
  let sid = null;
  rec.onTele = (e) => {
    rec.tele.push(e);
    if (e.type === "route" && e.sid) { sid = e.sid; live.set(sid, e); }
  };
  const ac = new AbortController();
  let last = performance.now(), why = "";
  rec.onBytes = () => { last = performance.now(); };
  const timer = setTimeout(() => { why = `no end within the deadline of ${deadlineMs} ms`; ac.abort(new Error(why)); }, deadlineMs);
  const watch = setInterval(() => {
    if (performance.now() - last > stallMs) { why = `no byte for ${stallMs} ms`; ac.abort(new Error(why)); }
  }, 500);
  const client = new OpenAI({baseURL, apiKey: "unused", maxRetries: 0, timeout: deadlineMs + 1000, fetch: tapFetch(rec)});
  try {
    const args = {...body, model: "model", stream: true, stream_options: {include_usage: true}};
    const stream = kind === "chat" ? await client.chat.completions.create(args, {signal: ac.signal})
      : await client.completions.create(args, {signal: ac.signal});
    for await (const ch of stream) {
      if (ch.usage) rec.usage = ch.usage;
      const c = ch.choices?.[0];
      if (!c) continue;
      const piece = kind === "chat" ? c.delta?.content : c.text;
      if (piece) { rec.ttftMs ??= performance.now() - rec.t0; rec.text += piece; }
      if (c.finish_reason) rec.finish = c.finish_reason;
    }
    if (!rec.finish) rec.lost = "the stream ended without a finish reason or an error";
  } catch (e) {
    const msg = e?.message ?? String(e);
    if (ac.signal.aborted) rec.lost = why;
    else if (e instanceof OpenAI.APIConnectionError || GENERIC.test(msg.trim()) || !msg.trim()) rec.lost = `connection: ${msg}${e?.cause ? ` (cause: ${e.cause.message ?? e.cause}${e.cause.cause ? `: ${e.cause.cause.message ?? e.cause.cause}` : ""})` : ""}`;
    else rec.error = {status: e?.status ?? null, message: msg};
  } finally {
    clearTimeout(timer);
    clearInterval(watch);
    delete rec.onBytes;
    if (sid) live.delete(sid);
    rec.ms = performance.now() - rec.t0;
    delete rec.onTele;
  }
  return rec;
}

// A client: until the end time, conversations of 1-4 turns and completions, from its own seed.
async function client(i, {baseURL, seed, endAt, limits, live, out}) {
  const r = rng(seed * 1000 + i);
  while (performance.now() < endAt) {
    if (r.next() < 0.6) {
      const messages = [];
      const turns = r.int(1, 4);
      for (let t = 0; t < turns && performance.now() < endAt; t++) {
        messages.push({role: "user", content: r.pick(WORDS)});
        const rec = await request(baseURL, "chat", {messages: messages.map((m) => ({...m})), ...sampling(r)}, limits, live);
        rec.turn = t;
        out.push(rec);
        if (rec.error || rec.lost) break;
        messages.push({role: "assistant", content: rec.text});
      }
    } else {
      out.push(await request(baseURL, "completion", {prompt: r.pick(WORDS), ...sampling(r)}, limits, live));
    }
  }
}

// The fault driver: one fault at a time per target, each cleared after a while; returns the
// injected counts by kind once stopped.
function faultDriver(mesh, {seed, everyMs, kinds, live, fluid, wardenNames, log}) {
  const r = rng(seed ^ 0x5eed);
  const t = mesh.topology, R = t.replicas ?? 1;
  const members = t.stations.flatMap((s) => s.members.map((m) => m.name));
  const shards = t.shards.map((s) => s.name);
  const injected = Object.fromEntries(kinds.map((k) => [k, 0]));
  const busy = new Set(), pending = [];
  let stopped = false;
  const w = (name) => mesh.worker(`knot-${name}`);
  const clearLater = (name, ms) => pending.push(sleep(ms).then(() => mesh.fault(name, null)).catch(() => {}).finally(() => busy.delete(name)));

  const inject = {
    async "station-restart"() {
      const sids = [...live.keys()];
      if (!sids.length) return false;
      const sid = r.pick(sids), route = live.get(sid)?.route;
      const m = r.pick(members), name = route?.[m] !== undefined ? replicaName(m, route[m]) : m;
      const mode = r.pick(["", "&wipe=1", "&abort=1"]);
      await (await w(name)).fetch(`http://x/debug/restart?sid=${encodeURIComponent(sid)}${mode}`).then((x) => x.arrayBuffer());
      log?.(`restart ${name} ${sid}${mode}`);
      return true;
    },
    async "shard-500"() { return shardFault({status: 500}); },
    async "shard-stall"() { return shardFault({hangMs: r.int(SHARD_MS + 500, 2 * SHARD_MS)}); },
    async "warden-corrupt"() {
      if (!fluid) return false;
      const key = `${t.knot}|${fluid.layers[0]}-${fluid.layers[1]}`, name = r.pick(wardenNames);
      const res = await (await w("warden")).fetch(`http://x/do/layer/${encodeURIComponent(key)}/debug/corrupt`,
                                                  {method: "POST", body: JSON.stringify({name})});
      const j = await res.json();
      log?.(`corrupt ${key} ${name}: ${j.corrupted}`);
      return j.corrupted > 0;
    },
    async "replica-kill"() {
      const base = r.pick([...members, ...shards]), name = replicaName(base, r.int(0, R - 1));
      if (busy.has(name)) return false;
      busy.add(name);
      await mesh.fault(name, r.next() < 0.5 ? {status: 503} : {drop: 2});
      log?.(`kill ${name}`);
      clearLater(name, r.int(500, 2500));
      return true;
    },
  };
  async function shardFault(f) {
    const free = shards.flatMap((s) => Array.from({length: R}, (_, k) => replicaName(s, k))).filter((s) => !busy.has(s));
    // never every shard at once: one slice abstains, the rest answer
    if (!free.length || busy.size >= shards.length * R - 1) return false;
    const name = r.pick(free);
    busy.add(name);
    await mesh.fault(name, f);
    log?.(`shard ${name} ${JSON.stringify(f)}`);
    clearLater(name, r.int(500, 2500));
    return true;
  }

  const loop = (async () => {
    while (!stopped) {
      await sleep(r.int(everyMs / 2, everyMs * 1.5));
      if (stopped) break;
      const kind = r.pick(kinds);
      try { if (await inject[kind]()) injected[kind]++; } catch (e) { log?.(`fault ${kind}: ${e.message}`); }
    }
  })();
  return {async stop() { stopped = true; await loop; await Promise.all(pending); return injected; }};
}

// The mesh's /v1/mesh/stats: every isolate's memory and counters.
const meshStats = async (url) => (await fetch(new URL("/v1/mesh/stats", url))).json();

// Wait (bounded) until every station member holds no session; the last stats, and how long it took.
async function drained(url, members, ms) {
  const t0 = Date.now(), until = t0 + ms;
  let s;
  for (;;) {
    s = await meshStats(url);
    if (members.every((m) => s[m]?.stats?.liveSessions === 0) || Date.now() > until) return Object.assign(s, {drainMs: Date.now() - t0});
    await sleep(250);
  }
}

/**
 * Run the chaos load; resolves with the result object (see the header).
 * @param {{clients?: number, seconds?: number, seed?: number, model?: string, replicas?: number,
 *   deadlineMs?: number, stallMs?: number, faultEveryMs?: number, kinds?: string[], log?: (s: string) => void}} o
 */
export async function runChaos({clients = 32, seconds = 60, seed = 1, model = "stories260K-pad256-llama-q4_k_m.gguf", replicas = 1,
                                deadlineMs = 300_000, stallMs = 60_000, faultEveryMs = 1500, kinds, fluid: withFluid = true, log} = {}) {
  const gguf = await kw.openModel(await kw.fileSource(join(MODELS, model)));
  const bytes = gguf.toKnot();
  gguf.close();
  const ref = await kw.openModel(kw.bytesSource(bytes, "single.knot"));
  const config = (await kw.parseKnotHeader(kw.bytesSource(bytes, "model.knot"))).config;
  const L = config.n_layer, split = [Math.floor(L / 2), L - Math.floor(L / 2)];
  const topology = topologyFromCounts(config, {knot: "model.knot", stations: split, shards: 3, ...(replicas > 1 ? {replicas} : {})});
  if (withFluid) topology.stations[0].resident = false;  // a fluid station: its phases load through the layer warden (corruptible)
  const fluid = withFluid ? topology.stations[0] : null;
  const wardenNames = [];
  for (let l = fluid?.layers[0]; l < fluid?.layers[1]; l++)
    for (const n of ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_up", "ffn_gate", "ffn_down"]) wardenNames.push(`blk_${l}_${n}_weight`);
  const members = topology.stations.flatMap((s) => s.members.flatMap((m) => Array.from({length: replicas}, (_, r) => replicaName(m.name, r))));
  kinds ??= ["station-restart", "shard-500", "shard-stall", ...(fluid ? ["warden-corrupt"] : []), ...(replicas > 1 ? ["replica-kill"] : [])];
  const t0 = Date.now();
  const mesh = await startMesh({knotBytes: bytes, topology, port: 0, testHooks: true, warden: true,
                                timeouts: {shardMs: SHARD_MS, stationMs: 30_000}, ttlMs: 20_000,
                                prefixCache: {ttlMs: 2000, kvTokens: (clients + 4) * defaultContext(config)}});  // a held session per client
  const baseURL = new URL("/v1", mesh.url).href;
  const live = new Map(), out = [], limits = {deadlineMs, stallMs};
  let result;
  try {
    // warm-up: every isolate booted (one chat, one completion), the held sessions drained
    for (const kind of ["chat", "completion"]) {
      const body = kind === "chat" ? {messages: [{role: "user", content: "Hi"}], max_tokens: 4, temperature: 0}
        : {prompt: "Once", max_tokens: 4, temperature: 0};
      const w = await request(baseURL, kind, body, limits, new Map());
      if (w.error || w.lost) throw new Error(`chaos: warm-up ${kind} failed: ${w.error?.message ?? w.lost}`);
    }
    const baseline = await drained(mesh.url, members, 20_000);
    const before = await counters(mesh, members);
    const start = performance.now(), endAt = start + seconds * 1000;
    const driver = faultDriver(mesh, {seed, everyMs: faultEveryMs, kinds, live, fluid, wardenNames, log});
    await Promise.all(Array.from({length: clients}, (_, i) => client(i, {baseURL, seed, endAt, limits, live, out})));
    const injected = await driver.stop();
    const elapsed = (performance.now() - start) / 1000;
    for (const s of [...topology.stations.flatMap((x) => x.members.map((m) => m.name)), ...topology.shards.map((x) => x.name)])
      for (let r = 0; r < replicas; r++) await mesh.fault(replicaName(s, r), null);
    const after = await drained(mesh.url, members, 45_000);  // the held sessions' TTL (2 s), the stations' idle TTL (20 s) as the backstop
    const drainMs = after.drainMs;
    delete after.drainMs;
    delete baseline.drainMs;
    const afterCounters = await counters(mesh, members);
    result = await classify(ref, config, out);
    const lat = out.filter((x) => !x.lost && !x.error).map((x) => x.ms), ttft = out.filter((x) => x.ttftMs !== undefined).map((x) => x.ttftMs);
    const memory = {};
    for (const [n, v] of Object.entries(after)) {
      const b = baseline[n]?.memory?.heap, a = v?.memory?.heap;
      memory[n] = {baseline: b ?? null, after: a ?? null, delta: a !== undefined && b !== undefined ? a - b : null,
                   ...(v?.stats ? {liveSessions: v.stats.liveSessions, ...(v.stats.phasesInFlight ? {phasesInFlight: v.stats.phasesInFlight, phaseTurns: v.phaseTurns} : {})} : {})};
    }
    const obs = result.observed;
    result = {
      date: new Date().toISOString(), model, topology: {stations: split, shards: 3, replicas, fluid: fluid ? "st0" : null, warden: true},
      clients, seconds: Math.round(elapsed * 10) / 10, seed, requests: out.length, ...result.counts,
      p50_ms: round(pct(lat, 0.5)), p99_ms: round(pct(lat, 0.99)), ttft_p50_ms: round(pct(ttft, 0.5)), ttft_p99_ms: round(pct(ttft, 0.99)),
      cached_ratio: result.cachedRatio, cached_tokens: result.cached, prompt_tokens: result.prompt,
      faults: injected,
      observed: {...obs, restores: afterCounters.restores - before.restores, wardenRejects: afterCounters.wardenRejects - before.wardenRejects,
                 relinks: afterCounters.relinks - before.relinks, copyRestores: afterCounters.copyRestores - before.copyRestores},
      drained: members.every((m) => after[m]?.stats?.liveSessions === 0), drain_ms: drainMs,
      memory, errors: result.errors, examples: result.examples, wallSeconds: Math.round((Date.now() - t0) / 100) / 10,
    };
  } finally {
    await mesh.close();
    ref.close();
  }
  return result;
}

const round = (x) => (x === null ? null : Math.round(x));

async function counters(mesh, members) {
  const c = {restores: 0, wardenRejects: 0, relinks: 0, copyRestores: 0};
  for (const m of members) {
    const s = await (await (await mesh.worker(`knot-${m}`)).fetch("http://x/stats")).json();
    c.restores += s.stats.restores;
    c.wardenRejects += s.stats.wardenRejects;
    c.relinks += s.stats.relinks;
    c.copyRestores += s.stats.copyRestores;  // sessions a failover moved to this copy, restored from the failed copy's snapshot
  }
  return c;
}

// Each reply against the single-process run of the same prompt ids and options.
function classify(m, config, out) {
  const counts = {completed: 0, identical: 0, degraded: 0, degraded_identical: 0, failed: 0, lost: 0, wrong: 0};
  const observed = {abstains: 0, reprefills: 0, failovers: 0};
  const errors = {}, examples = [];
  const memo = new Map();
  let cached = 0, prompt = 0;
  return (async () => {
    for (const x of out) {
      const tele = x.tele;
      const ab = tele.filter((e) => e.type === "shard" && e.state === "failed").length;
      const rp = tele.filter((e) => e.type === "retry").length;
      const fo = tele.filter((e) => e.type === "failover").length;
      observed.abstains += ab;
      observed.reprefills += rp;
      observed.failovers += fo;
      if (x.lost) {
        counts.lost++;
        if (examples.length < 10) examples.push({class: "lost", why: x.lost, kind: x.kind, body: x.body, ms: Math.round(x.ms), tele: tele.slice(-4)});
        continue;
      }
      if (x.error) {
        counts.failed++;
        const key = `${x.error.status ?? "stream"}: ${x.error.message.replace(/\b[ps]-?[0-9a-z-]{8,}\b/g, "<sid>").slice(0, 200)}`;
        errors[key] = (errors[key] ?? 0) + 1;
        continue;
      }
      counts.completed++;
      cached += x.usage?.prompt_tokens_details?.cached_tokens ?? 0;
      prompt += x.usage?.prompt_tokens ?? 0;
      const req = parseRequest({...x.body, model: "model"}, x.kind);
      const ids = x.kind === "chat" ? m.tokenize(m.applyChatTemplate(req.messages), {addBos: true, parseSpecial: true})
        : m.tokenize(req.prompt, {parseSpecial: true});
      const opts = {...requestOptions(req, {maxTokens: req.maxTokens, seed: req.seed}), nCtx: defaultContext(config)};
      for (const k of Object.keys(opts)) if (opts[k] === undefined) delete opts[k];
      const key = JSON.stringify([ids, opts]);
      if (!memo.has(key)) memo.set(key, await m.complete(ids, opts));
      const want = memo.get(key);
      const same = want.text === x.text && want.ids.length === x.usage?.completion_tokens;
      if (ab || fo) { counts.degraded++; if (same) counts.degraded_identical++; }
      else if (same) counts.identical++;
      else {
        counts.wrong++;
        if (examples.length < 10) examples.push({class: "wrong", kind: x.kind, body: x.body, got: x.text, want: want.text,
                                                 gotTokens: x.usage?.completion_tokens, wantTokens: want.ids.length, tele: tele.filter((e) => e.type !== "tokens")});
      }
    }
    return {counts, observed, errors, examples, cached, prompt, cachedRatio: prompt ? Math.round((cached / prompt) * 1000) / 1000 : 0};
  })();
}

// ---- CLI ----------------------------------------------------------------------------------
if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const opt = (name, def) => { const i = args.indexOf(name); return i >= 0 ? args[i + 1] : def; };
  const outFile = opt("--out", null);
  const r = await runChaos({clients: Number(opt("--clients", 32)), seconds: Number(opt("--seconds", 60)), seed: Number(opt("--seed", 1)),
                            model: opt("--model", undefined), replicas: Number(opt("--replicas", 1)),
                            faultEveryMs: Number(opt("--fault-every-ms", 1500)), fluid: !args.includes("--no-fluid"),
                            deadlineMs: Number(opt("--deadline-ms", 300_000)), stallMs: Number(opt("--stall-ms", 60_000)),
                            kinds: opt("--kinds", undefined)?.split(",").filter(Boolean),
                            log: args.includes("--verbose") ? (s) => console.error(`[chaos ${new Date().toISOString().slice(11, 23)}] ${s}`) : undefined});
  const line = JSON.stringify(r);
  console.log(line);
  if (outFile) appendFileSync(resolve(outFile), line + "\n");
  process.exitCode = r.lost || r.wrong ? 1 : 0;
}
