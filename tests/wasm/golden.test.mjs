// Outputs of `node bin/knotwork.mjs generate` recorded from the build before the
// generation loop moved into core/text/generator.h (tests/golden/record.mjs ->
// outputs.json): every shared model x sampler path must give the same ids and text bytes
// through model.generate() today (tests/native/infer_golden.cpp checks the native side).
// A regression guard only: the recording is our own build's output, sampled paths
// included, not a correctness reference; correctness is checked against the float64
// reference and llama.cpp (reference-outputs.json: generate.test.mjs, infer_greedy.cpp).
import {test} from "node:test";
import assert from "node:assert/strict";
import {readFileSync} from "node:fs";
import {join} from "node:path";

import * as kw from "../../bindings/knotwork.mjs";
import {sharedModel, ROOT} from "./helpers.mjs";

const golden = JSON.parse(readFileSync(join(ROOT, "tests/golden/outputs.json"), "utf8"));

// The recorded CLI flags -> model.generate() options (as bin/knotwork.mjs maps them).
function options(args) {
  const o = {stop: []};
  for (let i = 0; i < args.length; i++) {
    const a = args[i], v = () => args[++i];
    switch (a) {
      case "--temp": o.temperature = Number(v()); break;
      case "--top-k": o.topK = Number(v()); break;
      case "--top-p": o.topP = Number(v()); break;
      case "--min-p": o.minP = Number(v()); break;
      case "--repeat-penalty": o.repeatPenalty = Number(v()); break;
      case "--seed": o.seed = Number(v()); break;
      case "--stop": o.stop.push(v()); break;
      case "--ignore-eos": o.ignoreEos = true; break;
      case "--reference": o.reference = true; break;
      case "--ctx": o.nCtx = Number(v()); break;
      case "--chunk": o.chunk = Number(v()); break;
      default: throw new Error(`unknown recorded flag ${a}`);
    }
  }
  return o;
}

test("regression guard (recorded from our own build, not a reference): generate outputs (ids, text bytes) unchanged on the shared models", async (t) => {
  const models = new Map();
  let n = 0;
  for (const c of golden.cases) {
    const p = sharedModel(t, c.model);
    if (!p) return;
    if (!models.has(c.model)) models.set(c.model, await kw.openModel(p));
    const m = models.get(c.model);
    const r = await m.complete(golden.prompt, {maxTokens: golden.n_predict, ...options(c.args)});
    const what = `${c.model} ${c.setting}`;
    assert.deepEqual(r.ids, c.wasm.ids, what);
    assert.equal(Buffer.from(r.text, "utf8").toString("hex"), c.wasm.text_hex, what);
    n++;
  }
  for (const m of models.values()) m.close();
  assert.ok(golden.cases.length >= 42, `${golden.cases.length} recorded cases`);
  assert.equal(n, golden.cases.length, "every recorded case checked");
});
