// Test Worker for tests/workers/relaxed.test.mjs: the two builds exactly as the mesh
// Workers import them (workers/lib/wasm.mjs), checked inside workerd.
import {wasmModules} from "../../workers/lib/wasm.mjs";
import {loadWasm} from "../../bindings/loader.mjs";
import {relaxedCheck} from "../wasm/relaxed-check.mjs";

export default {
  async fetch(req) {
    const seed = Number(new URL(req.url).searchParams.get("seed") || 1);
    try {
      return Response.json(await relaxedCheck(loadWasm, wasmModules, seed));
    } catch (e) {
      return Response.json({error: String(e?.stack || e)}, {status: 500});
    }
  },
};
