// common.mjs — pieces every mesh worker shares: JSON bindings, error responses, the fault
// hooks the tests drive (only when the TEST_HOOKS binding is set), float helpers.
import {FrameError} from "./frame.mjs";

/** A binding that may arrive as a JSON string (wrangler [vars]) or an object (Miniflare). */
export const jsonBinding = (v, what) => {
  if (v === undefined || v === null) throw new Error(`missing binding ${what}`);
  return typeof v === "string" ? JSON.parse(v) : v;
};

export class HttpError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

export function errorResponse(e) {
  const status = e instanceof FrameError ? 400 : e instanceof HttpError ? e.status : 500;
  return new Response(JSON.stringify({error: e.message ?? String(e)}), {status, headers: {"content-type": "application/json"}});
}

// Fault injection for tests: {status} answers that status, {hangMs} waits before answering,
// {corrupt: true} (wardens) flips bytes. Set through POST /debug/fault (TEST_HOOKS only).
export const faults = {current: null};
export async function applyFault(env) {
  const f = env.TEST_HOOKS ? faults.current : null;
  if (!f) return null;
  if (f.hangMs) await new Promise((r) => setTimeout(r, f.hangMs));
  if (f.status) return new HttpError(f.status, `injected fault: HTTP ${f.status}`);
  return null;
}
export async function debugRoute(url, req, env) {
  if (!env.TEST_HOOKS || !url.pathname.startsWith("/debug/")) return null;
  if (url.pathname === "/debug/fault") {
    faults.current = await req.json();
    return Response.json({ok: true, fault: faults.current});
  }
  return null;
}

/**
 * A boot cache at module scope: one value per isolate and config key (docs/architecture.md). A new key
 * closes the old value first (close(value)); a failed boot is forgotten, so the next request
 * retries it. cache(key, build) -> the promise of build()'s value.
 */
export function bootCache(close) {
  let boot = null;  // {key, promise}
  return (key, build) => {
    if (boot?.key === key) return boot.promise;
    const old = boot;
    boot = {key, promise: (async () => {
      if (old) { const v = await old.promise.catch(() => null); if (v) close(v); }
      return build();
    })()};
    const mine = boot;
    mine.promise.catch(() => { if (boot === mine) boot = null; });
    return mine.promise;
  };
}

export function addInto(acc, x) {
  for (let i = 0; i < acc.length; i++) acc[i] += x[i];
  return acc;
}

/** A binary WebSocket message as bytes (workerd may hand over an ArrayBuffer or a Blob). */
export async function messageBytes(data) {
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  return new Uint8Array(await data.arrayBuffer());
}
