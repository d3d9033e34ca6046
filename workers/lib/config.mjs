// config.mjs — a worker's JSON configuration (TOPOLOGY, STATION, SHARD, TIMEOUTS,
// FOLLOWERS ...): a binding that arrives as a JSON string (wrangler vars) or an object
// (Miniflare), parsed once per isolate (cached by the string), never on every call.
// The value is shared: callers read it, never change it.

const parsed = new Map();  // JSON text -> its value

/** The value of JSON binding `v`; a missing one throws naming `what`. */
export function jsonBinding(v, what) {
  if (v === undefined || v === null) throw new Error(`missing binding ${what}`);
  if (typeof v !== "string") return v;
  let out = parsed.get(v);
  if (out === undefined) { out = JSON.parse(v); parsed.set(v, out); }
  return out;
}
