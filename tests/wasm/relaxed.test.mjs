// The module pick in Node (bindings/wasm-choice.mjs via bindings/loader.mjs): Node 20
// must run the baseline module — it refuses relaxed SIMD without a flag, and with
// --experimental-wasm-relaxed-simd it validates the relaxed module but computes the
// pre-final semantics, which the known-answer probe catches. A module without the probe
// export is never taken as the relaxed one.
import {test} from "node:test";
import assert from "node:assert/strict";
import {execFileSync} from "node:child_process";
import {existsSync, readFileSync} from "node:fs";
import {join} from "node:path";
import {loadWasm} from "../../bindings/loader.mjs";
import {relaxedDotAnswer} from "../../bindings/wasm-choice.mjs";
import {ROOT, WASM_PATH} from "./helpers.mjs";

const RELAXED = join(ROOT, "build/wasm/knotwork-relaxed.wasm");
const node20 = process.versions.node.split(".")[0] === "20";

function needRelaxed(t) {
  if (existsSync(RELAXED)) return true;
  if (process.env.CI) throw new Error(`${RELAXED} missing (CI is set: not skipping)`);
  t.skip(`${RELAXED} missing`);
  return false;
}

const kernelsOf = (w) => (w.call("kw_kernel_selftest", 1), w.resultJSON());

test("Node 20 picks the baseline module by default (relaxed SIMD does not validate)", {timeout: 120_000}, async (t) => {
  if (!needRelaxed(t)) return;
  if (!node20) return t.skip(`Node ${process.versions.node}: the assertion is about Node 20`);
  assert.equal(WebAssembly.validate(readFileSync(RELAXED)), false);
  assert.equal(WebAssembly.validate(readFileSync(WASM_PATH)), true);
  const w = await loadWasm();
  assert.equal(w.variant, "baseline");
  const st = kernelsOf(w);
  assert.equal(st.kernels, "wasm-simd128");
  assert.equal(st.failures, 0);
});

test("Node 20 with --experimental-wasm-relaxed-simd: the module validates, the probe is wrong, the baseline is picked", {timeout: 120_000}, (t) => {
  if (!needRelaxed(t)) return;
  if (!node20) return t.skip(`Node ${process.versions.node}: the assertion is about Node 20`);
  const script = `
    import {readFileSync} from "node:fs";
    import {loadWasm} from ${JSON.stringify(join(ROOT, "bindings/loader.mjs"))};
    import {relaxedProbeOk} from ${JSON.stringify(join(ROOT, "bindings/wasm-choice.mjs"))};
    const valid = WebAssembly.validate(readFileSync(${JSON.stringify(RELAXED)}));
    const r = await loadWasm(${JSON.stringify(RELAXED)});
    const p = r.malloc(48);
    r.u8().fill(1, p, p + 32); r.i32(p + 32, 4).fill(0);
    r.exports.kw_relaxed_probe(p);
    const ones = Array.from(r.i32(p + 32, 4));
    const w = await loadWasm();
    console.log(JSON.stringify({valid, probeOk: relaxedProbeOk(r), ones, variant: w.variant}));`;
  const out = JSON.parse(execFileSync(process.execPath, ["--experimental-wasm-relaxed-simd", "--no-warnings",
    "--input-type=module", "-e", script], {encoding: "utf8"}));
  assert.equal(out.valid, true);
  assert.equal(out.probeOk, false, "Node 20's pre-final relaxed dot passed the probe");
  // all-ones inputs: the exact answer is 4 per lane; Node 20 computes something else
  assert.notDeepEqual(out.ones, [4, 4, 4, 4]);
  assert.equal(out.variant, "baseline");
});

test("a module without the probe export is not taken as the relaxed one", {timeout: 120_000}, async () => {
  const w = await loadWasm({baseline: WASM_PATH, relaxed: WASM_PATH});
  assert.equal(w.variant, "baseline");
  const missing = await loadWasm({baseline: WASM_PATH, relaxed: join(ROOT, "build/wasm/no-such.wasm")});
  assert.equal(missing.variant, "baseline");
});

test("relaxedDotAnswer is the exact lane sum (i32 wrap)", () => {
  const a = Int8Array.from({length: 16}, (_, i) => i - 8), b = Uint8Array.from({length: 16}, (_, i) => 127 - i);
  const c = Int32Array.of(0, 2 ** 31 - 1, -5, 100);
  const want = [0, 0, 0, 0];
  for (let i = 0; i < 16; i++) want[i >> 2] += a[i] * b[i];
  assert.deepEqual(Array.from(relaxedDotAnswer(a, b, c)),
                   want.map((v, i) => (v + c[i]) | 0));
});
