// planner.mjs — the mesh planner (core/infer/planner.h) from JS: the same code and the
// same JSON text as native `knot plan`, through kw_plan. Reads the header only.
//
//   import {plan} from "./bindings/planner.mjs";
//   const p = await plan("qwen7b.knot", {budget: "128MB", mode: "fluid", stations: 2});
//   p.stations[0].memory.total, p.per_token.subrequests, p.context, p.chunk
//
// Options (all optional): budget ("128MB" | bytes), mode ("resident" | "fluid"), context,
// chunk, shards, stations (fluid), module_bytes, js_heap_bytes. A budget that cannot be
// met throws a KnotworkError whose message gives the reason.
import {init, _resolveSource as resolveSource, _parsePrefix as parsePrefix, _nameArgs as nameArgs} from "./knotwork.mjs";

/** The plan's JSON text (byte-identical to `knot plan` stdout for the same options). */
export async function planText(source, opts = {}, {probe = 256 * 1024} = {}) {
  const w = await init();
  const given = await source;
  source = await resolveSource(given);
  const nm = nameArgs(w, source.name?.split("/").pop());
  const o = new TextEncoder().encode(JSON.stringify(opts));
  const po = w.copyIn(o);
  try {
    let text;
    await parsePrefix(w, source, probe, (p, len) => {
      w.call("kw_plan", p, len, source.size, nm.ptr, nm.len, po, o.length);
      text = w.resultText();
      return text.startsWith('{"need":') ? JSON.parse(text) : {};
    });
    return text;
  } finally {
    w.free(nm.ptr);
    w.free(po);
    if (source !== given) await source.close?.();
  }
}

/** The plan as an object (see planner.h for every field). */
export async function plan(source, opts = {}, io) {
  return JSON.parse(await planText(source, opts, io));
}
