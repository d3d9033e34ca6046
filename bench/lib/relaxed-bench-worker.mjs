// Worker for bench/kernels-relaxed.mjs: /prepare and /run over bench/lib/relaxed-bench.mjs
// with the two modules as the mesh Workers import them (workers/lib/wasm.mjs).
import {wasmModules} from "../../workers/lib/wasm.mjs";
import {loadWasm} from "../../bindings/loader.mjs";
import {relaxedBench} from "./relaxed-bench.mjs";

const bench = relaxedBench(loadWasm, wasmModules);

export default {
  async fetch(req) {
    const q = new URL(req.url).searchParams;
    try {
      const p = await bench.prepare(q.get("variant"), q.get("type"), Number(q.get("rows")), Number(q.get("cols")));
      const sum = bench.run(p.key, Number(q.get("iters") || 0), Number(q.get("ntok") || 1));
      return Response.json({...p, sum});
    } catch (e) {
      return Response.json({error: String(e?.stack || e)}, {status: 500});
    }
  },
};
