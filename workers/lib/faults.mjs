// faults.mjs — fault injection for tests, only when the TEST_HOOKS binding is set:
// POST /debug/fault {status} answers that status, {hangMs} waits before answering,
// {gate: {after: n, ms}} holds every frame after the first n this isolate sees until
// POST /debug/release (or ms pass: the hold then ends by itself and says so in the log)
// ({corrupt: true} is the wardens' own /debug/corrupt); a station's {loadDelayMs} makes each
// phase load that much slower (a slow byte source); {drop: n}: the next n frames are not
// answered, the WebSocket link they came on is closed instead (a dropped link; ws links only).
// null clears it (and the log).
// GET /debug/log: the gate's log, one entry per held frame: {frame, released: "test"|"timeout"}.
import {HttpError} from "./errors.mjs";

export const faults = {current: null, seen: 0, log: [], release: null, dropped: 0};

/** The injected fault of this isolate as an error to throw (after any hang or gate), or null. */
export async function applyFault(env) {
  const f = env.TEST_HOOKS ? faults.current : null;
  if (!f) return null;
  const frame = ++faults.seen;
  if (f.gate && frame > f.gate.after) {
    const released = await new Promise((r) => {
      const timer = setTimeout(() => r("timeout"), f.gate.ms ?? 20_000);
      const prev = faults.release;
      faults.release = (why) => { clearTimeout(timer); prev?.(why); r(why); };
    });
    faults.log.push({frame, released});
  }
  if (f.hangMs) await new Promise((r) => setTimeout(r, f.hangMs));
  if (f.drop && faults.dropped < f.drop) {
    faults.dropped++;
    return Object.assign(new HttpError(502, "injected fault: link dropped"), {drop: true});  // lib/socket.mjs closes the link
  }
  if (f.status) return new HttpError(f.status, `injected fault: HTTP ${f.status}`);
  return null;
}

/** The answer to a /debug/ route (TEST_HOOKS only), or null for any other request. */
export async function debugRoute(url, req, env) {
  if (!env.TEST_HOOKS || !url.pathname.startsWith("/debug/")) return null;
  if (url.pathname === "/debug/fault") {
    faults.current = await req.json();
    faults.seen = 0;
    faults.dropped = 0;
    faults.log = [];
    return Response.json({ok: true, fault: faults.current});
  }
  if (url.pathname === "/debug/release") {
    const r = faults.release;
    faults.release = null;
    r?.("test");
    return Response.json({ok: true, released: !!r});
  }
  if (url.pathname === "/debug/log") return Response.json({seen: faults.seen, log: faults.log});
  return null;
}
