// mesh.mjs — the coordinator's generation loop over a mesh (docs/architecture.md, docs/protocol.md), independent of
// where it runs (a session Durable Object; Node tests drive it the same way):
//   tokens -> embed (fan-out to the shards owning them; partials summed) -> stations in order
//   (a split station: head-group / FFN-slice partials summed per layer) -> exit: normed last
//   row -> lm-head fan-out (top-k + lse + min per shard, merged by the core; or full slice
//   logits) -> the core Generator (bindings/generator.mjs: sampler, UTF-8 streaming, stop
//   strings, stop reason: the loop Engine::generate runs, so the same ids as one process).
// How many candidates the shards send: shardK() below; with a grammar a step whose merged
// list holds fewer allowed tokens than the sampler keeps asks again, wider (#widen).
// Shard fan-outs are fork/race/fold gathers: Accept (all answered), Abstain (some: merged
// without them, telemetry names the missing slice and the tokens it touched), Decline
// (none: a clear error). A station answering 409 (session lost) triggers one re-prefill of
// everything fed so far. Prefill is chunked; each station appends its own KV. Links go
// through the session's route (routes.mjs: replicas, resend, back-off, failover).
// While drafting, the embedding rows seen are kept (rows.mjs), so a greedy verify pass makes
// the round trips of a plain greedy step: stations and lm-head, no embed fan-out.
import {encodeFrame, decodeFrame, decodeTopK, decodeTopKs, splitTopRow, splitTopRows, FLAG} from "../lib/frame.mjs";
import {Counter, LinkError, gather} from "../lib/link.mjs";
import {Generator, mergeTopK, topkLse, draftLookup, LookupBudget} from "../../bindings/generator.mjs";
import {Drafter} from "../../bindings/drafter.mjs";
import {DraftAhead} from "./ahead.mjs";
import {linkBudget, replicaName, replicaCount} from "../lib/topology.mjs";
import {RouteLinks, Health} from "./routes.mjs";
import {EmbedRows} from "./rows.mjs";
import {addPartials} from "../lib/partials.mjs";
import {defaultContext} from "../../bindings/options.mjs";

export class MeshError extends Error {}

/**
 * What the shards send for the next step so that sampling equals sampling from the full
 * logits (Sampler::sample_topk is exact whenever the merged list holds every token the
 * sampler can keep). p: a Generator's resolved params; history: the ids the penalty window
 * sees (prompt + generated); logprobs: top entries reported (or undefined).
 *   greedy: 1; temperature > 0 with top-k T (0 < T < n_vocab): T — top-p and min-p act
 *   inside the top T;
 *   penalties that only lower logits (repeat_penalty >= 1, presence/frequency >= 0), with
 *   P distinct ids in the window: + P. A lowered token can only fall, and past any token
 *   only unpenalised ones rise, so the penalised top T lies in the unpenalised top T + P;
 *   logprobs n: at least n (the raw top n, and the sampled token's raw logit, are listed).
 * Unbounded — top-k off with temperature > 0, or a penalty that raises logits (an old token
 * could climb from anywhere) — returns {full: true}: every shard sends its whole slice and
 * the Generator samples the full logits.
 * @returns {{full: true} | {full: false, k: number}}
 */
export function shardK(p, history, logprobs) {
  const V = p.n_vocab, greedy = p.temperature <= 0;
  const pen = p.repeat_penalty !== 1 || p.presence_penalty !== 0 || p.frequency_penalty !== 0;
  if (pen && (p.repeat_penalty < 1 || p.presence_penalty < 0 || p.frequency_penalty < 0)) return {full: true};
  if (!greedy && !(p.top_k > 0 && p.top_k < V)) return {full: true};
  let k = greedy ? 1 : p.top_k;
  if (pen && p.repeat_last_n !== 0) {
    const win = p.repeat_last_n > 0 ? history.slice(-p.repeat_last_n) : history;
    k += new Set(win).size;
  }
  if (logprobs >= 0) k = Math.max(k, logprobs);
  return {full: false, k: Math.min(k, V)};
}

let nextSid = 1;

export class MeshCoordinator {
  /**
   * @param {object} a
   * @param {object} a.topology   lib/topology.mjs shape
   * @param {import("../../bindings/knotwork.mjs").Model} a.text  tokenizer + config (lib/text.mjs)
   * @param {(name: string, sid: string) => import("../lib/link.mjs").Link} a.connect  a link to a member or shard
   * @param {{shardMs?: number, stationMs?: number, backoffMs?: number, backoffMaxMs?: number}} [a.timeouts]
   * @param {Health} [a.health]  back-off state of the physical names (routes.mjs; the session's)
   */
  constructor({topology, text, connect, timeouts = {}, counter = new Counter(), health}) {
    Object.assign(this, {topology: topology, text, connect, counter});
    this.timeouts = {shardMs: timeouts.shardMs ?? 15_000, stationMs: timeouts.stationMs ?? 60_000};
    this.health = health ?? new Health(timeouts);
    this.E = topology.n_embd;
    this.V = topology.n_vocab;
    this.groups = shardGroups(topology);
    this.chainHops = linkBudget(topology).stationMsgs;
  }

  /**
   * Stream a completion: {type: "telemetry", event, ...} events, {type: "token", token, text,
   * telemetry} per token, then {type: "summary", ...} (the schema of bindings/events.mjs).
   * prompt: token ids (use text.tokenize / applyChatTemplate first). opts: Model.generate's sampling options (logprobs: n adds each
   * token's raw logprob and top n, from the merged top-k or the full logits) plus chunk (the prefill
   * chunk; default the topology's prefill_chunk, else 64 capped at its chunk), sid, nCtx,
   * and for a session held across requests (session.mjs, prefixes.mjs): cached (the stations
   * of session `sid` hold prompt positions [0, cached): only the rest is fed, from position
   * cached, and the stations rewind to it first: docs/protocol.md) and keep (a generation that
   * completes leaves the session at its stations, and this.held is the ids they hold; one that
   * fails or is stopped ends it there, and this.held stays null); route: the replica of each
   * member and shard hub (routes.mjs pickRoute; this.route is the one it ended on).
   * Speculative decoding: lookup K (prompt-lookup drafts), or draftModel ({model, knot, n}: a
   * loaded draft model with the target's vocabulary, draft.mjs; it drafts instead of the
   * lookup) with draft (false: off) and draftN (at most its n): the drafts and the pending
   * token go through the stations as one pass and are verified by the acceptance rule
   * (Generator.stepDraft, with the draft's distribution q when it has one).
   */
  async *generate(ids, opts = {}) {
    const t = this.topology;
    const sid = opts.sid ?? `s${Date.now().toString(36)}-${nextSid++}-${Math.random().toString(36).slice(2, 8)}`;
    const q = new EventQueue();
    const ev = (e) => q.push({type: "telemetry", ...e});
    const links = new RouteLinks(t, {sid, connect: this.connect, assign: opts.route, health: this.health, ev});
    const link = (name) => links.open(name);
    const c = this.text.info.config;
    const nCtx = opts.nCtx > 0 ? opts.nCtx : defaultContext(c);
    if (opts.logprobs > 20) throw new MeshError(`logprobs must be at most 20, got ${opts.logprobs}`);
    const prefill = opts.prefill ?? "pipelined";
    if (prefill !== "pipelined" && prefill !== "sequential") throw new MeshError(`prefill must be "pipelined" or "sequential", got ${JSON.stringify(prefill)}`);
    const lookup = opts.lookup ?? opts.options?.lookup ?? 0;
    if (!(Number.isInteger(lookup) && lookup >= 0 && lookup <= 64)) throw new MeshError(`lookup must be an integer in [0, 64], got ${JSON.stringify(opts.lookup)}`);
    const spec = {drafted: 0, accepted: 0, passes: 0, draftMs: 0, ahead: {passes: 0, drafted: 0, used: 0}};
    const dm = opts.draftModel && opts.draft !== false ? opts.draftModel : null;
    const draftN = dm ? opts.draftN ?? dm.n : 0;
    if (dm && !(Number.isInteger(draftN) && draftN >= 1 && draftN <= dm.n)) throw new MeshError(`draftN must be an integer in [1, ${dm.n}] (the draft model's n), got ${JSON.stringify(opts.draftN)}`);
    const gen = await Generator.open(this.text, {...opts, lookup: undefined, draft: undefined, draftN: undefined, draftModel: undefined, nCtx});
    const logprobs = opts.logprobs >= 0 ? opts.logprobs : undefined;
    const first = shardK(gen.params, ids, logprobs);
    const cached = Math.max(0, Math.min(opts.cached ?? 0, ids.length - 1));
    const state = {sid, links, reqId: 1, nCtx, fed: ids.slice(0, cached), link, ev, hops: 0, reprefills: 0, restores: 0, abstains: 0, flagged: [], maxK: 0, widened: 0,
                   nextRow: null, rowsPrefetched: 0, pipelined: prefill === "pipelined", inFlight: 0,
                   // drafting (lookup or the draft model): the rows seen so far, so a pass's drafts and pending token skip the embed fan-out
                   rows: (lookup || dm) && !first.full && gen.params.grammar !== true ? new EmbedRows(this.E) : null, rowsCached: 0};
    // the request's chunk, else the plan's prefill chunk (the latency objective's choice), else 64
    // (no more than the plan's chunk: the stations' scratch is sized for it)
    const chunk = opts.chunk ?? t.prefill_chunk ?? Math.min(64, t.chunk ?? 64);
    const t0 = Date.now();
    const out = [];
    let text = "", reason = "", prefillMs = 0, decodeMs = 0, nDecoded = 0, kept = false;
    this.held = null;
    this.route = links.assign;
    let drafter = null;  // the draft model's own KV for this generation (freed below)
    try {
      // a grammar, or a sampler that needs the full logits: no drafting (a draft is verified
      // over the merged top-k, which the grammar's filter does not see)
      if (dm && !first.full && gen.params.grammar !== true) drafter = await Drafter.open(dm.model, this.text, {nCtx, n: draftN});
      ev({event: "route", sid, stations: t.stations.length, members: t.stations.reduce((a, s) => a + s.members.length, 0),
          shards: t.shards.length, ...(replicaCount(t) > 1 ? {replicas: replicaCount(t), route: {...links.assign}} : {}), knot: t.knot, nCtx, logits: first.full ? "full" : "top-k+lse", k: first.full ? undefined : first.k});
      const fresh = ids.slice(cached);  // prefix reuse: the stations hold [0, cached) already
      ev({event: "prefill_started", tokens: fresh.length, cached, mode: prefill});
      gen.start(ids);
      // every phase runs under live(): its events leave as they happen, not when it ends
      const feeding = this.#feed(state, fresh, cached, chunk, (done) => ev({event: "prefill_progress", done, total: fresh.length}));
      if (drafter) {  // the draft prefills the prompt here while the first frames are out at the stations
        feeding.catch(() => {});
        await new Promise((r) => setTimeout(r, 0));
        const td = Date.now();
        drafter.prime(ids);
        spec.draftPrimeMs = Date.now() - td;
      }
      let xn = yield* live(q, feeding);
      prefillMs = Date.now() - t0;
      ev({event: "prefill_completed", tokens: fresh.length, cached, ms: prefillMs, mode: prefill, maxInFlight: state.inFlight});
      let next = yield* live(q, this.#lmHead(state, xn, shardK(gen.params, ids, logprobs)));
      // a grammar: no drafting (a draft is verified over the merged top-k, which the grammar's
      // filter does not see), and every top-k step is widened until it holds what the sampler keeps
      const grammar = gen.params.grammar === true;
      const drafting = drafter ? "draft" : lookup && !first.full && !grammar ? "lookup" : null;
      ev({event: "decode_started", ...(lookup ? {lookup} : {}), ...(dm ? {draft: dm.knot, draftN} : {}),
          ...(lookup || dm ? {drafting: drafting !== null} : {})});
      // A pass: rows[i] is the lm-head answer for the position of batch[i]; rows[i] verifies
      // batch[i + 1] (a draft), the last row gives the next token. Plain decoding: one row.
      const hist = ids.slice();
      let rows = [next], batch = [null], qs = [null], passTokens = 0;
      // greedy drafts are drafted ahead while a pass is out (ahead.mjs); ahead: the last pass's
      const aheadOk = drafter !== null && !(gen.params.temperature > 0);
      let ahead = null;
      for (;;) {
        let pending = null, done = false;
        for (let i = 0; i < rows.length; i++) {
          let nx = rows[i];
          const draft = batch[i + 1];
          if (grammar && nx.top) nx = yield* live(q, this.#widen(state, gen, nx, shardK(gen.params, hist, undefined).k));
          const s = draft !== undefined ? gen.stepDraft(nx.top, draft, qs[i + 1]) : gen.step(nx.top ?? nx.logits);
          if (s.needWider) throw new MeshError(`the merged top-k of ${nx.top.ids.length} tokens holds none the grammar allows`);
          if (logprobs !== undefined) Object.assign(s, await this.#logprobs(nx, s.id, logprobs));
          out.push(s.id);
          hist.push(s.id);
          text += s.text;
          if (out.length > 1) nDecoded++;
          if (s.accepted) spec.accepted++;
          yield* q.drain();
          const tel = {n: out.length, elapsedMs: Date.now() - t0, decodeTokS: nDecoded ? nDecoded / (decodeMs / 1000) : 0, hops: state.hops};
          if (lookup || dm) tel.speculative = {drafted: spec.drafted, accepted: spec.accepted, acceptance: spec.drafted ? spec.accepted / spec.drafted : 0};
          yield {type: "token", token: s.id, text: s.text, ...(s.logprob !== undefined ? {logprob: s.logprob, top: s.top} : {}), telemetry: tel};
          if (s.done) { reason = s.reason; done = true; break; }
          if (!s.accepted) { pending = s.id; break; }  // a plain step, a rejected draft's replacement, or the last row's token
        }
        if (done) break;
        // feed the pending token, with drafts when the lookup finds some that fit the context,
        // the chunk and the tokens still to generate (the rule of core/infer/speculative.cpp);
        // a pass below the positions the stations hold rewinds them (docs/protocol.md)
        const pos = ids.length + out.length - 1;
        const ts = Date.now();  // the decode time of a pass counts its drafting in the coordinator
        let drafts = [], dq = null;
        if (drafting) {
          // lookup: LookupBudget (bindings/generator.mjs) sizes the pass from the pass before
          // (batch: its pending token and drafts; spec.accepted - spec.acceptedAt: those kept)
          const budget = drafter ? null : (spec.budget ??= new LookupBudget(lookup));
          budget?.update(batch.length - 1, spec.accepted - (spec.acceptedAt ?? 0));
          spec.acceptedAt = spec.accepted;
          const left = gen.params.n_predict >= 0 ? gen.params.n_predict - out.length : Infinity;
          const room = Math.min(nCtx - pos - 1, chunk - 1, left, drafter ? draftN : budget.size);
          const early = room > 0 ? ahead?.take(hist, room) ?? [] : [];  // drafted while the last pass was out
          spec.ahead.used += early.length;
          if (room > early.length && drafter) {
            const td = Date.now();
            // drawn as gen samples; dq: their distributions (null: one-hot; always so after early drafts)
            const p = drafter.propose(early.length ? hist.concat(early) : hist, room - early.length, gen);
            drafts = early.concat(p.ids);
            dq = early.length ? null : p.q;
            spec.draftMs += Date.now() - td;
          } else if (room > 0 && drafter) drafts = early;
          else if (room > 0) drafts = draftLookup(hist, room);
        }
        spec.drafted += drafts.length;
        if (drafts.length) spec.passes++;
        batch = [pending, ...drafts];
        qs = [null, ...drafts.map((_, i) => dq?.[i] ?? null)];
        const passing = (async () => {
          const want = shardK(gen.params, hist, logprobs);
          const x = await this.#feed(state, batch, pos, chunk, undefined, batch.length > 1);
          return batch.length > 1 ? this.#lmHeadRows(state, x, batch.length, want) : [await this.#lmHead(state, x, want)];
        })();
        // the tokens after this pass's drafts (and the one its last row gives), drafted while it is out
        ahead = aheadOk && drafts.length ? new DraftAhead(drafter, hist.concat(drafts), draftN + 1).start() : null;
        try { rows = yield* live(q, passing); } finally {
          if (ahead) {
            await ahead.stop();
            spec.ahead.passes++, spec.ahead.drafted += ahead.ids.length, spec.draftMs += ahead.ms;
          }
        }
        decodeMs += Date.now() - ts;
        passTokens++;
      }
      yield* q.drain();
      if (opts.keep) kept = true, this.held = state.fed.slice();
      yield {type: "summary", ids: out, text, reason, promptIds: ids, nPrompt: ids.length, cachedTokens: cached, nGenerated: out.length, nDecoded,
             nCtx, shardK: state.maxK || "full", prefillMs, decodeMs, prefillTokS: (ids.length - cached) / (prefillMs / 1000),
             decodeTokS: nDecoded ? nDecoded / (decodeMs / 1000) : 0, mode: "mesh", prefill, passes: passTokens, hops: state.hops,
             ...(lookup || dm ? {speculative: {...(dm ? {draft: dm.knot, draftN, draftMs: spec.draftMs, draftPrimeMs: spec.draftPrimeMs ?? 0, ahead: spec.ahead, ...draftMemory(drafter, dm)} : {lookup}),
                                               drafted: spec.drafted, accepted: spec.accepted, acceptance: spec.drafted ? spec.accepted / spec.drafted : 0,
                                               verifyPasses: spec.passes, ...(state.rows ? {rowsCached: state.rowsCached} : {})}} : {}),
             reprefills: state.reprefills, restores: state.restores, failovers: links.failovers, abstains: state.abstains, widened: state.widened, rowsPrefetched: state.rowsPrefetched, flaggedTokens: state.flagged, ...this.counter.snapshot()};
    } finally {
      drafter?.free();
      gen.free();
      if (!kept) await this.#end(sid, links, state);
      for (const l of links.values()) l.close();
      // the copies a failover left: the session ends there (their snapshot was needed until the
      // new copies restored) now, or when its back-off ends (a copy backing off is not asked);
      // this.left: those still to be told, each {physical, chain, notBefore} (session.mjs asks later)
      const due = links.left.filter((x) => !this.health.down(x.physical));
      this.left = [...(due.length ? await this.endLeft(sid, due) : []), ...links.left.filter((x) => !due.includes(x))]
        .map((x) => ({...x, notBefore: this.health.state.get(x.physical)?.until ?? 0}));
    }
  }

  /**
   * End session `sid` at station copies a failover left (routes.mjs RouteLinks.left:
   * [{physical, chain}]; a chain's first leader passes it on). Returns the ones that did not
   * answer, to be asked again (session.mjs: an alarm, while back-off lasts).
   */
  async endLeft(sid, left) {
    const failed = [];
    await Promise.all(left.map(async (x) => {
      const l = this.connect(x.physical, sid);
      try {
        await l.request(encodeFrame({kind: "end", sid, reqId: 1, width: 0, flags: x.chain ? FLAG.chain : 0}), x.chain ? 5000 : 1000);
      } catch { failed.push(x); } finally { l.close(); }
    }));
    return failed;
  }

  /** End session `sid` at every station (a held session the prefix index evicted; route: its replicas). */
  async end(sid, route = {}) {
    const t = this.topology, links = new Map(), state = {reqId: 1};
    for (const m of t.chain ? [t.stations[0].members[0]] : t.stations.flatMap((s) => s.members)) links.set(m.name, this.connect(replicaName(m.name, route[m.name] ?? 0), sid));
    try { await this.#end(sid, links, state); } finally { for (const l of links.values()) l.close(); }
  }

  // explicit end: stations free the session's KV (best effort; the TTL covers the rest); in a
  // chain the first leader passes it on
  async #end(sid, links, state) {
    const t = this.topology;
    await Promise.all(t.stations.flatMap((s) => s.members.map((m) => links.get(m.name)?.request(
      encodeFrame({kind: "end", sid, reqId: state.reqId++, width: 0, flags: t.chain ? FLAG.chain : 0}), t.chain ? 5000 : 1000).catch(() => {}))));
  }

  // Feed ids at positions [pos, pos + n) in chunks; returns the normed last row (allRows:
  // every row of the last chunk, normed: a verify pass fits one chunk). A pos below what was
  // fed rewinds (the stations truncate their KV on that frame). A member moved to another
  // copy restores there: the feed goes on from the positions every station completed
  // (state.fed; the stations ahead of it rewind to there). A lost session at a station, or a
  // restore that found no snapshot, re-feeds everything before pos from position 0 once, then ids.
  async #feed(state, ids, pos, chunk, progress, allRows = false) {
    if (state.fed.length > pos) state.fed.length = pos;
    let history = null;  // the ids before pos, once a replay is needed
    let restoring = null;  // recover()'s answer while the moved member restores from a snapshot
    for (;;) {
      try {
        if (history) {
          state.fed.length = 0;
          if (history.length) await this.#feedRaw(state, history, 0, chunk);
        }
        // a restore goes on after the chunks every station completed
        const skip = restoring ? Math.max(0, Math.min(state.fed.length - pos, ids.length - 1)) : 0;
        if (restoring) state.fed.length = pos + skip;
        const xn = await this.#feedRaw(state, ids.slice(skip), pos + skip, chunk, progress && ((d) => progress(skip + d)), allRows);
        if (restoring) state.ev({event: "restored", member: restoring.member, replica: restoring.replica, positions: pos + skip});
        return xn;
      } catch (e) {
        // 409: the station no longer holds the session; 0: its link dropped (DO restarted) and a
        // resend failed; with replicas also a timeout or 5xx: the route moves the member to
        // another copy (routes.mjs recover), which restores from the failed copy's snapshot or
        // has the token history replayed
        if (!(e instanceof LinkError) || state.reprefills + state.restores >= 2 * replicaCount(this.topology)) throw e;
        if (restoring && e.status === 409 && e.link === restoring.replica) {
          // the new copy found no snapshot to restore from (the failed copy's was lost or unreadable)
          state.ev({event: "failover", member: restoring.member, from: restoring.from, replica: restoring.replica,
                    reason: `no snapshot to restore from: ${e.message}`, rebuilt: "replay"});
          restoring = null;
        } else {
          const r = state.links.recover(e);
          if (!r) throw e;
          if (r.rebuilt === "restore" && !history) { restoring = r; state.restores++; continue; }
          restoring = null;
        }
        state.reprefills++;
        state.ev({event: "reprefill", reason: e.message, tokens: pos + ids.length});
        history ??= state.fed.slice(0, pos);
      }
    }
  }

  async #feedRaw(state, ids, pos, chunk, progress, allRows = false) {
    const chunks = [];
    for (let i = 0; i < ids.length; i += chunk)
      chunks.push({part: ids.slice(i, i + chunk), pos: pos + i, last: i + chunk >= ids.length, done: i + Math.min(chunk, ids.length - i)});
    if (!state.pipelined || chunks.length < 2) {
      let xn = null;
      for (const ch of chunks) {
        const x = await this.#embed(state, ch.part, ch.pos);
        xn = await this.#stations(state, x, ch.pos, ch.part.length, ch.last, ch.last && allRows);
        state.fed.push(...ch.part);
        progress?.(ch.done);
      }
      return xn;
    }
    return this.#pipelined(state, chunks, progress);
  }

  // Pipelined prefill: chunk c + 1 enters station s as soon as station s has answered chunk
  // c (and station s - 1 has answered chunk c + 1), so up to one chunk per station is in
  // flight; a split range's station is its members' layer-by-layer fan-outs. A chain is sent
  // chunk after chunk without waiting for answers (in position order on the one link): each
  // leader computes a frame at a time in arrival order and takes the next chunk while the
  // last one goes down the chain. Either way every station sees the chunks in position
  // order, so it appends its KV as the sequential prefill does. Progress is reported per
  // chunk, in order, as the exit answers it. A failure stops new frames, waits for those in
  // flight (so a re-prefill never races them) and throws the first error.
  async #pipelined(state, chunks, progress) {
    const chain = this.topology.chain;
    const stages = chain ? [null] : this.topology.stations.map((_, si) => si);
    const window = stages.length + 1;                       // chunks in flight at most
    const tails = stages.map(() => Promise.resolve());      // chain: the last chunk's frame was sent
    const done = [];
    let failure = null, xn = null, inFlight = 0, before = Promise.resolve();
    const fail = (e) => { failure ??= e; throw e; };
    for (const [c, ch] of chunks.entries()) {
      if (c >= window) await done[c - window].catch(() => {});
      if (failure) break;
      inFlight++;
      state.inFlight = Math.max(state.inFlight, inFlight);
      const n = ch.part.length;
      let x = this.#embed(state, ch.part, ch.pos).catch(fail);
      for (const [k, si] of stages.entries()) {
        const prev = tails[k], input = x;
        const ready = Promise.all([input, prev]);
        const run = ready.then(([v]) => {
          if (failure) throw failure;
          return si === null ? this.#stations(state, v, ch.pos, n, ch.last) : this.#station(state, si, v, ch.pos, n, ch.last);
        });
        // a chain's next chunk waits until this one's frame is sent (#stations sends before
        // its first await), a station's until this one is answered
        tails[k] = chain ? ready.then(() => {}, () => {}) : run.then(() => {}, () => {});
        x = run.catch(fail);
      }
      const prevDone = before;
      done[c] = Promise.all([x, prevDone]).then(([v]) => {
        inFlight--;
        state.fed.push(...ch.part);
        progress?.(ch.done);
        if (ch.last) xn = v;
      });
      done[c].catch(() => {});
      before = done[c].catch(() => {});
    }
    await Promise.allSettled(done);
    if (failure) throw failure;
    return xn;
  }

  // Fan a frame out to the shard groups (each answered by its hub), gather, and resolve
  // the verdict per shard: a hub that answered names failed followers in its flags.
  async #fanOut(state, groups, frame, phase, ids = null, pos = 0) {
    state.hops += groups.length;
    const g = await gather(groups.map((grp) => ({name: grp.hub, run: () => state.link(grp.hub).request(frame(), this.timeouts.shardMs)})),
                           this.timeouts.shardMs * replicaCount(this.topology));  // a copy answers for one that failed
    const answers = [], failed = [];
    g.results.forEach((r, i) => {
      const grp = groups[i];
      if (!r.ok) { for (const s of grp.shards) failed.push({shard: s, reason: r.error.message}); return; }
      const f = decodeFrame(r.value);
      answers.push({grp, f});
      grp.shards.forEach((s, j) => { if (j > 0 && f.flags & (1 << j)) failed.push({shard: s, reason: `hub ${grp.hub}: follower ${s.name} did not answer`}); });
    });
    const asked = groups.flatMap((grp) => grp.shards.filter((s) => !ids || ids.some((id) => id >= s.vocab[0] && id < s.vocab[1])));
    const failedAsked = failed.filter((x) => asked.includes(x.shard));
    if (asked.length && failedAsked.length === asked.length)
      throw new MeshError(`${phase}: every shard asked failed (decline): ` + failedAsked.map((x) => `${x.shard.name}: ${x.reason}`).join("; "));
    for (const {shard, reason} of failedAsked) {
      const [v0, v1] = shard.vocab;
      const tokens = ids ? ids.map((id, i) => [id, pos + i]).filter(([id]) => id >= v0 && id < v1).map(([id, p]) => ({id, pos: p})) : [];
      state.abstains++;
      state.flagged.push(...tokens.map((t) => t.pos));
      state.ev({event: "abstain", phase, shard: shard.name, slice: [v0, v1], reason, tokens});
    }
    return answers;
  }

  async #embed(state, ids, pos) {
    for (const id of ids) if (!(id >= 0 && id < this.V)) throw new MeshError(`token id ${id} outside the vocabulary [0, ${this.V})`);
    const pre = state.nextRow;
    state.nextRow = null;
    if (pre?.id === ids[0]) state.rows?.put(pre.id, pre.row);  // a pass's pending token, then its drafts
    if (ids.length === 1 && pre?.id === ids[0]) { state.rowsPrefetched++; return Float32Array.from(pre.row); }
    const held = state.rows?.gather(ids);  // drafting: every row seen before, no round trip
    if (held) { state.rowsCached += ids.length; return held; }
    const abstains = state.abstains;
    const groups = this.groups.filter((grp) => grp.shards.some((s) => ids.some((id) => id >= s.vocab[0] && id < s.vocab[1])));
    const frame = () => encodeFrame({kind: "embed", sid: state.sid, reqId: state.reqId++, pos, width: 1, data: Int32Array.from(ids)});
    const x = new Float32Array(ids.length * this.E);
    for (const {grp, f} of await this.#fanOut(state, groups, frame, "embed", ids, pos)) {
      if (f.data.length !== x.length) throw new MeshError(`shard ${grp.hub}: embed returned ${f.data.length} values, want ${x.length}`);
      addPartials(x, f.data);
    }
    if (state.rows && state.abstains === abstains) state.rows.putAll(ids, x);  // rows of a slice that abstained are not kept
    return x;
  }

  async #stations(state, x, pos, n, last, allRows = false) {
    const st = this.topology.stations;
    if (this.topology.chain) {  // one message: the chain runs every station and answers the exit's rows
      state.hops += this.chainHops;
      const r = await state.link(st[0].members[0].name).request(encodeFrame({kind: pos === 0 || n > 1 ? "prefill" : "decode",
        sid: state.sid, reqId: state.reqId++, pos, width: this.E, flags: FLAG.chain | (allRows ? FLAG.normAll : last ? FLAG.normLast : 0), nCtx: state.nCtx, data: x}),
        this.timeouts.stationMs * st.length);  // each station's link waits stationMs per station after it
      const d = decodeFrame(r, {width: this.E}).data;
      return last ? d : null;
    }
    for (let si = 0; si < st.length; si++) x = await this.#station(state, si, x, pos, n, last, allRows);
    return x;
  }

  // Station si over rows x at pos: its output rows; the exit's: the normed last row when
  // last (every row normed when allRows), else null.
  async #station(state, si, x, pos, n, last, allRows = false) {
    const st = this.topology.stations, s = st[si];
    const exit = si === st.length - 1;
    if (s.members.length === 1) {
      const m = s.members[0];
      const flags = exit && last ? (allRows ? FLAG.normAll : FLAG.normLast) : 0;
      state.hops++;
      const r = await state.link(m.name).request(encodeFrame({kind: pos === 0 || n > 1 ? "prefill" : "decode", sid: state.sid,
        reqId: state.reqId++, pos, width: this.E, flags, nCtx: state.nCtx, data: x}), this.timeouts.stationMs);
      const d = decodeFrame(r, {width: this.E}).data;
      return exit && !last ? null : d;
    }
    for (let l = s.layers[0]; l < s.layers[1]; l++) {
      for (const phase of ["attn", "ffn"]) {
        state.hops += s.members.length;
        // a split layer cannot degrade: every head group / FFN slice is needed
        const parts = await Promise.all(s.members.map((m) => state.link(m.name).request(encodeFrame({
          kind: n > 1 ? "prefill" : "decode", sid: state.sid, reqId: state.reqId++, pos, width: this.E, layer: l, phase,
          nCtx: state.nCtx, data: x}), this.timeouts.stationMs)));
        addPartials(x, addPartials(new Float32Array(x.length), ...parts.map((p) => decodeFrame(p, {width: this.E}).data)));
      }
    }
    if (!exit) return x;
    if (!last) return null;
    state.hops++;
    const r = await state.link(s.members[0].name).request(encodeFrame({kind: "decode", sid: state.sid, reqId: state.reqId++, pos,
      width: this.E, phase: "norm", flags: allRows ? FLAG.normAll : 0, nCtx: state.nCtx, data: allRows ? x : x.subarray((n - 1) * this.E)}),
      this.timeouts.stationMs);
    return decodeFrame(r, {width: this.E}).data;
  }

  // The lm-head fan-out for one step: {top} (the shards' top-k lists merged by the core) or,
  // when want.full, {logits} [n_vocab] (the slices side by side; a slice that abstained is -inf).
  async #lmHead(state, xn, want) {
    if (!want.full) state.maxK = Math.max(state.maxK, want.k);
    // greedy (k = 1): each shard also sends its best token's embedding row, so the next step
    // needs no embed round trip when the pick is one of them (it always is for greedy)
    const topRow = !want.full && want.k === 1;
    const frame = () => encodeFrame({kind: "lmhead", sid: state.sid, reqId: state.reqId++, pos: want.full ? 0 : want.k,
      width: this.E, flags: want.full ? FLAG.fullLogits : topRow ? FLAG.topRow : 0, data: xn});
    const answers = await this.#fanOut(state, this.groups, frame, "lm-head");
    state.nextRow = null;
    if (!want.full) {
      const rows = new Map();
      const parts = answers.map(({grp, f}) => {
        try {
          const {top, row} = topRow ? splitTopRow(f.data, this.E) : {top: f.data, row: null};
          const t = decodeTopK(top);
          if (row && t.ids.length) rows.set(t.ids[0], row);
          return t;
        } catch (e) { throw new MeshError(`shard ${grp.hub}: ${e.message}`); }
      });
      const top = await mergeTopK(parts, want.k);
      if (top.ids.length && rows.has(top.ids[0])) state.nextRow = {id: top.ids[0], row: rows.get(top.ids[0])};
      return {top, k: want.k, xn};
    }
    const logits = new Float32Array(this.V).fill(-Infinity);
    for (const {grp, f} of answers) {
      const d = f.data, [v0, v1] = grp.vocab;
      if (d.length !== v1 - v0) throw new MeshError(`shard ${grp.hub}: ${d.length} logits for slice [${v0},${v1})`);
      logits.set(d, v0);
    }
    return {logits};
  }

  // A grammar's top-k step: the merged list must hold as many tokens the grammar allows as
  // the sampler keeps (need: shardK's k without logprobs, i.e. 1 greedy, top-k T, + P
  // penalised ids), or the allowed tokens the full pass keeps may lie outside it (the core
  // then samples from the few listed, or says needWider when none is). Until it does, the
  // shards are asked again for this position with k x 4, then, once k would reach the
  // largest slice, for their full slices (the Generator filters the full logits exactly).
  // Each retry is a "widen" event and counts in the summary's `widened`. Returns the lm-head
  // answer to step from (nx itself when it holds enough).
  async #widen(state, gen, nx, need) {
    const maxSlice = Math.max(...this.groups.map((g) => g.vocab[1] - g.vocab[0]));
    for (;;) {
      const allowed = gen.allowedCount(nx.top.ids);
      if (allowed >= need || nx.top.ids.length >= this.V) return nx;
      const to = nx.k * 4 >= maxSlice ? {full: true} : {full: false, k: nx.k * 4};
      state.widened++;
      state.ev({event: "widen", step: gen.ids.length, k: nx.k, listed: nx.top.ids.length, allowed, need, to: to.full ? "full" : to.k});
      const wider = await this.#lmHead(state, nx.xn, to);
      if (to.full) return wider;
      nx = wider;
    }
  }

  // The lm-head fan-out for a verify pass: xn [rows, n_embd] normed; one merged {top} per
  // row (top-k only: drafting is off when the sampler needs full logits). Greedy: the shards
  // also send each row's best token's embedding row (FLAG.topRow), kept in state.rows, so the
  // next pass's pending token (some row's best) needs no embed round trip.
  async #lmHeadRows(state, xn, rows, want) {
    state.maxK = Math.max(state.maxK, want.k);
    const topRow = want.k === 1 && !!state.rows;
    const frame = () => encodeFrame({kind: "lmhead", sid: state.sid, reqId: state.reqId++, pos: want.k, width: this.E,
      flags: topRow ? FLAG.topRow : 0, data: xn});
    const answers = await this.#fanOut(state, this.groups, frame, "lm-head");
    state.nextRow = null;
    const sent = Array.from({length: rows}, () => new Map());  // per row: best id -> its embedding row
    const lists = answers.map(({grp, f}) => {
      try {
        const {top, rows: emb} = topRow ? splitTopRows(f.data, rows, this.E) : {top: f.data, rows: null};
        const l = decodeTopKs(top, rows);
        if (emb) l.forEach((t, r) => { if (t.ids.length) sent[r].set(t.ids[0], emb.subarray(r * this.E, (r + 1) * this.E)); });
        return l;
      } catch (e) { throw new MeshError(`shard ${grp.hub}: ${e.message}`); }
    });
    const out = [];
    for (let r = 0; r < rows; r++) {
      const top = await mergeTopK(lists.map((l) => l[r]), want.k);
      if (top.ids.length && sent[r].has(top.ids[0])) state.rows.put(top.ids[0], sent[r].get(top.ids[0]));
      out.push({top});
    }
    return out;
  }

  // A token's raw log-probability and the top n, as one process reports them (kw_session_step):
  // logit - lse over the whole vocabulary, from the merged list (it holds the top n and every
  // token the sampler can pick) or from the full logits.
  async #logprobs(next, id, n) {
    const top = next.top ?? await topkLse(next.logits, 0, next.logits.length, n);
    const lse = top.lse ?? -Infinity;
    const at = top.ids.indexOf(id);
    const logit = next.logits ? next.logits[id] : at >= 0 ? top.logits[at] : -Infinity;
    return {logprob: logit - lse, top: top.ids.slice(0, n).map((token, i) => ({token, logprob: top.logits[i] - lse}))};
  }
}

// What the draft model holds in the coordinator's wasm memory: its weights, and this
// generation's KV cache and buffers (none when drafting was off for it).
function draftMemory(drafter, dm) {
  const t = drafter?.telemetry();
  return {draftPasses: t?.passes ?? 0, draftWeightBytes: dm.weightBytes ?? 0, draftKvBytes: t?.kv_bytes ?? 0, draftEngineBytes: t?.engine_bytes ?? 0};
}

/** Telemetry waiting to leave: push() from anywhere, drain() in the generator. */
class EventQueue {
  items = [];
  wake = null;
  push(e) { this.items.push(e); const w = this.wake; this.wake = null; w?.(); }
  *drain() { while (this.items.length) yield this.items.shift(); }
}

// Yield q's events as they come while work runs; then its value (or its error). A consumer
// that waits on an event does not hold the work up.
async function* live(q, work) {
  let settled = false, value, error, failed = false;
  work.then((v) => { value = v; }, (e) => { error = e; failed = true; }).finally(() => { settled = true; q.wake?.(); q.wake = null; });
  for (;;) {
    yield* q.drain();
    if (settled) break;
    await new Promise((r) => { q.wake = r; });
  }
  yield* q.drain();
  if (failed) throw error;
  return value;
}

/** Shard groups: topology.shardGroups (hub first) or one group per shard. */
export function shardGroups(t) {
  const byName = new Map(t.shards.map((s) => [s.name, s]));
  const names = t.shardGroups ?? t.shards.map((s) => [s.name]);
  return names.map((g) => {
    const shards = g.map((n) => byName.get(n));
    return {hub: g[0], shards, vocab: [shards[0].vocab[0], shards.at(-1).vocab[1]]};
  });
}
