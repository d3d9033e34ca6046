// wasm.mjs — the knotwork wasm builds a Worker runs. Both are imported (workerd compiles
// them when the script loads: Workers cannot compile wasm from bytes later); boot.mjs's
// initWasm() passes the pair through init() (bindings/knotwork.mjs) to bindings/loader.mjs,
// whose pick (bindings/wasm-choice.mjs) instantiates the relaxed-SIMD build where its known-answer
// probe is exact, else the baseline.
import baseline from "../../build/wasm/knotwork.wasm";
import relaxed from "../../build/wasm/knotwork-relaxed.wasm";

export const wasmModules = {baseline, relaxed};
