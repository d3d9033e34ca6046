// draft.mjs — the deployment's draft model (speculative decoding on the mesh): configuration,
// never a request's. The DRAFT var {knot, n} names the draft's .knot in the model bucket
// (MODELS) and the most tokens it proposes per pass; the coordinator loads it once per
// isolate, into its own wasm memory beside the target's tokenizer, and the session's
// generation drafts with it (bindings/drafter.mjs, mesh.mjs). A request may only turn it off
// (options.draft: false) or lower K (options.draftN in [1, n]): request.mjs checks them.
//
//   draftConfig(env) -> null | {knot, n}     (a bad DRAFT is an error naming the field)
//   draftModel(env, text) -> {model, knot, n, weightBytes, kvBytes}
//     refused, naming the draft, when its tensors, KV cache (the target's default
//     context), activation buffers and proposal distributions do not fit what is left of the 128 MB wasm memory (checked from its header,
//     before loading), or when its vocabulary is not the target's (naming both models)
import {openModel, parseKnotHeader} from "../../bindings/knotwork.mjs";
import {Drafter, draftFits} from "../../bindings/drafter.mjs";
import {defaultContext} from "../../bindings/options.mjs";
import {jsonBinding} from "../lib/config.mjs";
import {r2Source} from "../lib/r2.mjs";
import {bootCache, initWasm} from "../lib/boot.mjs";

const cache = bootCache((d) => d.model.close());

/** The DRAFT var, checked: null when the deployment has no draft model. */
export function draftConfig(env) {
  if (env.DRAFT === undefined || env.DRAFT === null || env.DRAFT === "") return null;
  const d = jsonBinding(env.DRAFT, "DRAFT");
  if (typeof d !== "object" || d === null || Array.isArray(d)) throw new Error(`DRAFT must be an object {knot, n}, got ${JSON.stringify(d)}`);
  if (typeof d.knot !== "string" || !d.knot) throw new Error(`DRAFT.knot must be the draft model's object key, got ${JSON.stringify(d.knot)}`);
  const n = d.n ?? 4;
  if (!(Number.isInteger(n) && n >= 1 && n <= 64)) throw new Error(`DRAFT.n must be an integer in [1, 64], got ${JSON.stringify(d.n)}`);
  for (const k of Object.keys(d)) if (k !== "knot" && k !== "n") throw new Error(`DRAFT.${k} is not a field (knot, n)`);
  return {knot: d.knot, n};
}

/** The draft model of env.DRAFT, loaded once per isolate (text: the target's text model). */
export function draftModel(env, text) {
  const cfg = draftConfig(env);
  if (!cfg) return null;
  return cache(`${cfg.knot}#${cfg.n}`, async () => {
    await initWasm();
    const src = await r2Source(env.MODELS, cfg.knot);
    const header = await parseKnotHeader(src);
    const nCtx = defaultContext(text.info.config);
    const fit = await draftFits(header, {nCtx, n: cfg.n, name: cfg.knot});
    const model = await openModel(src);
    try {
      (await Drafter.open(model, text, {nCtx, n: cfg.n})).free();  // the vocabulary and the KV cache, checked once
    } catch (e) { model.close(); throw e; }
    return {model, knot: cfg.knot, n: cfg.n, weightBytes: fit.weightBytes, kvBytes: fit.kvBytes};
  });
}
