// faults.mjs — fault injection for tests, only when the TEST_HOOKS binding is set:
// POST /debug/fault {status} answers that status, {hangMs} waits before answering
// ({corrupt: true} is the wardens' own /debug/corrupt); a station's {loadDelayMs} makes each
// phase load that much slower (a slow byte source). null clears it.
import {HttpError} from "./errors.mjs";

export const faults = {current: null};

/** The injected fault of this isolate as an error to throw (after any hang), or null. */
export async function applyFault(env) {
  const f = env.TEST_HOOKS ? faults.current : null;
  if (!f) return null;
  if (f.hangMs) await new Promise((r) => setTimeout(r, f.hangMs));
  if (f.status) return new HttpError(f.status, `injected fault: HTTP ${f.status}`);
  return null;
}

/** The answer to a /debug/ route (TEST_HOOKS only), or null for any other request. */
export async function debugRoute(url, req, env) {
  if (!env.TEST_HOOKS || !url.pathname.startsWith("/debug/")) return null;
  if (url.pathname === "/debug/fault") {
    faults.current = await req.json();
    return Response.json({ok: true, fault: faults.current});
  }
  return null;
}
