// link.mjs — the coordinator's links to stations and shards, and the counters behind the
// platform limits (docs/limits.md: 10,000 subrequests per incoming request, 6 simultaneous
// outgoing connections). Local workerd enforces neither, so every outgoing call is counted
// here: an HTTP request is one subrequest and one connection while it is in flight; a
// WebSocket link is one subrequest when opened and one connection while open, and its
// messages cost no subrequest.
import {messageBytes} from "./socket.mjs";
import {requestId} from "./frame.mjs";

export class Counter {
  constructor() { this.subrequests = 0; this.open = 0; this.maxOpen = 0; this.messages = 0; }
  acquire() { this.open++; this.maxOpen = Math.max(this.maxOpen, this.open); }
  release() { this.open--; }
  snapshot() { return {subrequests: this.subrequests, maxConnections: this.maxOpen, messages: this.messages}; }
}

export class LinkError extends Error {
  constructor(link, status, message) {
    super(`${link}: ${message}`);
    this.link = link;
    this.status = status;  // HTTP status, 0 for transport failures, -1 for timeouts
  }
}

/**
 * A fetcher for a peer outside the Workers (a topology member's url: a native fat station):
 * fetch(u, init) goes to u's path and query under `base`, over the network (one subrequest,
 * as through a service binding; a WebSocket upgrade works the same way).
 */
export function urlFetcher(base) {
  return {fetch: (u, init) => { const p = new URL(u); return fetch(new URL(p.pathname + p.search, base), init); }};
}

/**
 * The fetcher of a peer the coordinator links to: for a station member named by url (member:
 * its topology entry, lib/topology.mjs) urlFetcher(url), else its service binding
 * `${prefix}_${name}` in env. A fat member with no url is an error naming it.
 */
export function peerFetcher(env, prefix, name, member = null) {
  if (member?.url) return urlFetcher(member.url);
  if (member?.fat) throw new LinkError(name, 500, "a fat station with no url (set the member's url in the topology)");
  return env[`${prefix}_${name}`];
}

/**
 * One peer (a service binding `fetcher`). mode "ws" keeps a WebSocket open; "http" POSTs
 * each frame. request(frame) resolves with the answer frame's bytes.
 */
export class Link {
  constructor(name, fetcher, {mode = "ws", counter = new Counter(), sid = "", timeoutMs = 30_000} = {}) {
    if (!fetcher) throw new Error(`link ${name}: no service binding`);
    Object.assign(this, {name, fetcher, mode, counter, sid, timeoutMs});
    this.ws = null;
    this.pending = new Map();
  }

  async #connect() {
    if (this.ws) return this.ws;
    this.connecting ??= (async () => {
      this.counter.subrequests++;
      const res = await this.fetcher.fetch(`https://${this.name}/link?sid=${encodeURIComponent(this.sid)}`, {headers: {Upgrade: "websocket"}});
      const ws = res.webSocket;
      if (!ws) {
        const body = await res.text().catch(() => "");
        let msg = body;
        try { msg = JSON.parse(body).error ?? body; } catch {}
        throw new LinkError(this.name, res.status, `HTTP ${res.status}: ${msg} (WebSocket refused)`);
      }
      ws.accept();
      this.counter.acquire();
      ws.addEventListener("message", async (ev) => {
        if (typeof ev.data === "string") {
          const m = JSON.parse(ev.data);
          this.#settle(m.reqId, null, new LinkError(this.name, m.status, `HTTP ${m.status}: ${m.error}`));
        } else {
          const b = await messageBytes(ev.data);
          this.#settle(requestId(b), b, null);
        }
      });
      const down = (why) => {
        if (this.ws === ws) { this.ws = null; this.counter.release(); }
        for (const [id] of this.pending) this.#settle(id, null, new LinkError(this.name, 0, `link closed (${why})`));
      };
      ws.addEventListener("close", (ev) => down(`code ${ev.code}`));
      ws.addEventListener("error", (ev) => down(ev.message ?? "error"));
      this.ws = ws;
      return ws;
    })().finally(() => { this.connecting = null; });
    return this.connecting;
  }

  #settle(id, bytes, err) {
    const p = this.pending.get(id);
    if (!p) return;
    this.pending.delete(id);
    clearTimeout(p.timer);
    err ? p.reject(err) : p.resolve(bytes);
  }

  /** Send one frame (its request id must be unique among this link's pending frames). */
  async request(frame, timeoutMs = this.timeoutMs) {
    this.counter.messages++;
    if (this.mode === "http") return this.#http(frame, timeoutMs);
    const id = requestId(frame);
    const answer = new Promise((resolve, reject) => {
      const timer = setTimeout(() => this.#settle(id, null, new LinkError(this.name, -1, `no answer within ${timeoutMs} ms`)), timeoutMs);
      this.pending.set(id, {resolve, reject, timer});
    });
    try {
      const ws = await Promise.race([this.#connect(), answer.then(() => null)]);
      ws?.send(frame);
    } catch (e) {
      this.#settle(id, null, e instanceof LinkError ? e : new LinkError(this.name, 0, e.message));
    }
    return answer;
  }

  async #http(frame, timeoutMs) {
    this.counter.subrequests++;
    this.counter.acquire();
    let timer;
    const call = this.fetcher.fetch(`https://${this.name}/?sid=${encodeURIComponent(this.sid)}`, {method: "POST", body: frame})
      .then(async (res) => {
        if (!res.ok) {
          const body = await res.text();
          let msg = body;
          try { msg = JSON.parse(body).error ?? body; } catch {}
          throw new LinkError(this.name, res.status, `HTTP ${res.status}: ${msg}`);
        }
        return new Uint8Array(await res.arrayBuffer());
      })
      .catch((e) => { throw e instanceof LinkError ? e : new LinkError(this.name, 0, e.message); })
      .finally(() => this.counter.release());
    const timeout = new Promise((_, reject) => { timer = setTimeout(() => reject(new LinkError(this.name, -1, `no answer within ${timeoutMs} ms`)), timeoutMs); });
    try { return await Promise.race([call, timeout]); } finally { clearTimeout(timer); }
  }

  close() {
    if (this.ws) { try { this.ws.close(1000, "session end"); } catch {} this.ws = null; this.counter.release(); }
  }
}

/**
 * Fork/race/fold: run every task, each raced against its timeout; never rejects. Verdict
 * "accept" (all answered), "abstain" (some), "decline" (none). results[i] = {ok, value|error}.
 */
export async function gather(tasks, timeoutMs) {
  const results = await Promise.all(tasks.map(async (t) => {
    let timer;
    try {
      const value = await Promise.race([t.run(), new Promise((_, reject) => {
        timer = setTimeout(() => reject(new LinkError(t.name, -1, `no answer within ${timeoutMs} ms`)), timeoutMs);
      })]);
      return {task: t, ok: true, value};
    } catch (error) {
      return {task: t, ok: false, error};
    } finally { clearTimeout(timer); }
  }));
  const nOk = results.filter((r) => r.ok).length;
  return {verdict: nOk === results.length ? "accept" : nOk ? "abstain" : "decline", results};
}
