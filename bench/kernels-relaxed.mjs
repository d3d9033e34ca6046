#!/usr/bin/env node
// bench/kernels-relaxed.mjs — Simd matvec throughput of the baseline and the relaxed-SIMD
// wasm modules, both in the SAME runtime process, in workerd (Miniflare) and in headless
// Chromium; JSON lines on stdout (one per runtime x type x size).
//
//   node bench/kernels-relaxed.mjs [--min-s S] [--rounds R] [--only workerd|chromium]
//
// Sizes: 4096 x 4096 (the cache-resident figure of bench/kernels.mjs) and >= 96 MiB of
// weights (decode streams from memory). Q4_K, Q6_K (relaxed kernels) and Q8_0 (same
// simd128 kernel in both: a control). G weights/s = rows * cols * tokens * iterations / time.
// Timing: workerd freezes its clocks inside a request, so each run's cost is the workerd
// process's CPU time (/proc/PID/stat utime+stime, 10 ms ticks; runs of >= --min-s CPU
// seconds); Chromium: performance.now() on the page (wall time). Best of --rounds
// alternating baseline/relaxed rounds; x_baseline = relaxed / baseline of the same
// process and round set. loadavg at the start of each line (the host is shared).
import {existsSync, readFileSync, readdirSync, writeFileSync} from "node:fs";
import {join, resolve} from "node:path";
import {Miniflare} from "miniflare";
import {ROOT, bindingsRoutes, serveFiles, tmpDir, CHROMIUM, launchChromium} from "../tests/wasm/helpers.mjs";

const COMPATIBILITY_DATE = "2026-04-01";  // the mesh Workers' date

const args = process.argv.slice(2);
const opt = (k, d) => { const i = args.indexOf(k); return i >= 0 ? args.splice(i, 2)[1] : d; };
const minS = Number(opt("--min-s", 0.6)), rounds = Number(opt("--rounds", 3)), only = opt("--only", "");
const COLS = 4096;
const ROW_BYTES = {Q4_K: 144 * 16, Q6_K: 210 * 16, Q8_0: 34 * 128};
// [label, rows, tokens]: matvec resident and >= 96 MiB, and the prefill chunk (matmul over
// 64 tokens, G weight x token products/s) on the resident matrix.
const sizes = (t) => [["resident", 4096, 1], ["large", Math.ceil((96 << 20) / ROW_BYTES[t]), 1], ["matmul64", 4096, 64]];
const loadavg = () => Number(readFileSync("/proc/loadavg", "utf8").split(" ")[0]);
const out = (o) => console.log(JSON.stringify(o));

function workerdPid() {
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const st = readFileSync(`/proc/${d}/stat`, "utf8");
      const comm = st.slice(st.indexOf("(") + 1, st.lastIndexOf(")"));
      const ppid = Number(st.slice(st.lastIndexOf(")") + 2).split(" ")[1]);
      if (comm.startsWith("workerd") && ppid === process.pid) return Number(d);
    } catch {}
  }
  throw new Error("no workerd child process found");
}
const cpuSeconds = (pid) => {
  const st = readFileSync(`/proc/${pid}/stat`, "utf8");
  const f = st.slice(st.lastIndexOf(")") + 2).split(" ");
  return (Number(f[11]) + Number(f[12])) / 100;  // utime + stime, USER_HZ = 100
};

async function benchWorkerd() {
  const mf = new Miniflare({
    modules: true, modulesRoot: ROOT, scriptPath: resolve(ROOT, "bench/lib/relaxed-bench-worker.mjs"),
    modulesRules: [{type: "CompiledWasm", include: ["**/*.wasm"]}],
    compatibilityDate: COMPATIBILITY_DATE, compatibilityFlags: ["nodejs_compat"],
  });
  try {
    const call = async (q) => {
      const r = await mf.dispatchFetch(`http://bench/?${new URLSearchParams(q)}`);
      const j = await r.json();
      if (r.status !== 200) throw new Error(j.error);
      return j;
    };
    await call({variant: "baseline", type: "Q8_0", rows: 16, cols: 256, iters: 1});
    const pid = workerdPid();
    for (const type of ["Q4_K", "Q6_K", "Q8_0"]) {
      for (const [size, rows, ntok] of sizes(type)) {
        const la = loadavg(), best = {}, kernels = {};
        let bytes = 0;
        for (let r = 0; r < rounds; r++) {
          for (const variant of ["baseline", "relaxed"]) {
            const q = {variant, type, rows, cols: COLS, ntok};
            const p = await call({...q, iters: 2});  // prepare + warm-up
            kernels[variant] = p.kernels, bytes = p.bytes;
            let iters = 2, cpu = 0;
            for (;;) {
              const c0 = cpuSeconds(pid);
              await call({...q, iters});
              cpu = cpuSeconds(pid) - c0;
              if (cpu >= minS) break;
              iters = Math.ceil(iters * Math.min(8, Math.max(2, (minS * 1.2) / Math.max(cpu, 0.01))));
            }
            best[variant] = Math.max(best[variant] ?? 0, (rows * COLS * ntok * iters) / cpu / 1e9);
          }
        }
        out({bench: "wasm-kernels-relaxed", runtime: "workerd", timing: "workerd process CPU time", type, size,
             shape: [rows, COLS], tokens: ntok, weight_bytes: bytes, kernels, unit: "G weights/s",
             baseline: +best.baseline.toFixed(3), relaxed: +best.relaxed.toFixed(3),
             x_baseline: +(best.relaxed / best.baseline).toFixed(2), rounds, loadavg: la});
      }
    }
  } finally {
    await mf.dispose();
  }
}

async function benchChromium() {
  if (!existsSync(CHROMIUM)) { console.error(`no chromium at ${CHROMIUM}`); return; }
  const blank = join(tmpDir(), "blank.html");
  writeFileSync(blank, "<!doctype html><meta charset=utf-8><title>bench</title>");
  const server = await serveFiles({
    "/blank.html": blank,
    ...bindingsRoutes(),
    "/bench/lib/relaxed-bench.mjs": join(ROOT, "bench/lib/relaxed-bench.mjs"),
    "/build/wasm/knotwork.wasm": join(ROOT, "build/wasm/knotwork.wasm"),
    "/build/wasm/knotwork-relaxed.wasm": join(ROOT, "build/wasm/knotwork-relaxed.wasm"),
  });
  const ctx = await launchChromium();
  try {
    const page = await ctx.newPage();
    await page.goto(`${server.url}/blank.html`);
    await page.evaluate(async () => {
      const {loadWasm} = await import("/bindings/loader.mjs");
      const {relaxedBench} = await import("/bench/lib/relaxed-bench.mjs");
      const u = (f) => new URL(`/build/wasm/${f}`, location.href);
      window.bench = relaxedBench(loadWasm, {baseline: u("knotwork.wasm"), relaxed: u("knotwork-relaxed.wasm")});
    });
    for (const type of ["Q4_K", "Q6_K", "Q8_0"]) {
      for (const [size, rows, ntok] of sizes(type)) {
        const la = loadavg();
        const r = await page.evaluate(async ({type, rows, cols, ntok, minS, rounds}) => {
          const best = {}, kernels = {};
          let bytes = 0;
          for (let k = 0; k < rounds; k++) {
            for (const variant of ["baseline", "relaxed"]) {
              const p = await window.bench.prepare(variant, type, rows, cols);
              kernels[variant] = p.kernels, bytes = p.bytes;
              window.bench.run(p.key, 2, ntok);
              let iters = 2, s = 0;
              for (;;) {
                const t0 = performance.now();
                window.bench.run(p.key, iters, ntok);
                s = (performance.now() - t0) / 1000;
                if (s >= minS) break;
                iters = Math.ceil(iters * Math.min(8, Math.max(2, (minS * 1.2) / Math.max(s, 0.001))));
              }
              best[variant] = Math.max(best[variant] ?? 0, (rows * cols * ntok * iters) / s / 1e9);
            }
          }
          return {best, kernels, bytes, ua: navigator.userAgent};
        }, {type, rows, cols: COLS, ntok, minS, rounds});
        out({bench: "wasm-kernels-relaxed", runtime: "chromium", timing: "performance.now (wall)", type, size,
             shape: [rows, COLS], tokens: ntok, weight_bytes: r.bytes, kernels: r.kernels, unit: "G weights/s",
             baseline: +r.best.baseline.toFixed(3), relaxed: +r.best.relaxed.toFixed(3),
             x_baseline: +(r.best.relaxed / r.best.baseline).toFixed(2), rounds, loadavg: la,
             browser: r.ua.match(/Chrome\/[\d.]+/)?.[0]});
      }
    }
  } finally {
    await ctx.close();
    await server.close();
  }
}

if (only !== "chromium") await benchWorkerd();
if (only !== "workerd") await benchChromium();
