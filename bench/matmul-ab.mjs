#!/usr/bin/env node
// bench/matmul-ab.mjs — prefill mat-mat (kw_matmul, 4096 x 4096, 64 tokens) of two builds'
// baseline and relaxed wasm modules (BEFORE_DIR/knotwork{,-relaxed}.wasm, e.g. main's
// build/wasm copied before a change, against this checkout's build/wasm) in ONE headless
// Chromium page, rounds interleaved; JSON line per type on stdout.
//
//   node bench/matmul-ab.mjs BEFORE_DIR [Q4_K,Q6_K,Q8_0] [ROUNDS] [NTOK] [ROWSxCOLS]
//
// NTOK (default 64) = 1 times the decode mat-vec (kw_bench_matvec_run) instead of kw_matmul.
// ROWSxCOLS defaults to 4096x4096.
//
// Timing: the CPU time (utime + stime, 10 ms ticks) of the Chromium process tree this
// script started, over runs of >= 0.4 CPU s; best of ROUNDS. On a loaded host this is far
// steadier than wall time (bench/kernels-relaxed.mjs). bo/bn/ro/rn = baseline old/new,
// relaxed old/new, G weight x token products per CPU second; loadavg at the line's start.
import {existsSync, readFileSync, readdirSync, writeFileSync} from "node:fs";
import {join, resolve} from "node:path";
import {ROOT, bindingsRoutes, launchChromium, serveFiles, tmpDir} from "../tests/wasm/helpers.mjs";

const before = process.argv[2];
if (!before || !existsSync(join(before, "knotwork.wasm")) || !existsSync(join(before, "knotwork-relaxed.wasm"))) {
  console.error("usage: node bench/matmul-ab.mjs BEFORE_DIR [TYPES] [ROUNDS] (BEFORE_DIR holds knotwork.wasm and knotwork-relaxed.wasm)");
  process.exit(2);
}
const types = (process.argv[3] || "Q4_K,Q6_K,Q8_0").split(","), rounds = Number(process.argv[4] || 3), minS = 0.4;
const ntok = Number(process.argv[5] || 64);
const [rows, cols] = (process.argv[6] || "4096x4096").split("x").map(Number);
if (!(ntok >= 1) || !(rows >= 1) || !(cols >= 1)) { console.error(`bad NTOK ${process.argv[5]} or shape ${process.argv[6]}`); process.exit(2); }
const blank = join(tmpDir(), "blank.html");
writeFileSync(blank, "<!doctype html><title>b</title>");
const server = await serveFiles({"/blank.html": blank, ...bindingsRoutes(),
  "/bench/lib/relaxed-bench.mjs": join(ROOT, "bench/lib/relaxed-bench.mjs"),
  "/w/bo.wasm": join(resolve(before), "knotwork.wasm"), "/w/ro.wasm": join(resolve(before), "knotwork-relaxed.wasm"),
  "/w/bn.wasm": join(ROOT, "build/wasm/knotwork.wasm"), "/w/rn.wasm": join(ROOT, "build/wasm/knotwork-relaxed.wasm")});
const ctx = await launchChromium();
try {
  const page = await ctx.newPage();
  await page.goto(`${server.url}/blank.html`);
  await page.evaluate(async () => {
    const {loadWasm} = await import("/bindings/loader.mjs");
    const {relaxedBench} = await import("/bench/lib/relaxed-bench.mjs");
    const u = (f) => new URL(`/w/${f}`, location.href);
    window.bench = relaxedBench(loadWasm, {bo: u("bo.wasm"), ro: u("ro.wasm"), bn: u("bn.wasm"), rn: u("rn.wasm")});
  });
  const procs = () => { const m = new Map();
    for (const d of readdirSync("/proc")) { if (!/^\d+$/.test(d)) continue;
      try { const st = readFileSync(`/proc/${d}/stat`, "utf8"); const f = st.slice(st.lastIndexOf(")") + 2).split(" ");
        m.set(Number(d), {ppid: Number(f[1]), cpu: (Number(f[11]) + Number(f[12])) / 100}); } catch {} }
    return m; };
  const treeCpu = () => { const m = procs(); const mine = new Set([process.pid]); let tot = 0, grow = true;
    while (grow) { grow = false; for (const [pid, p] of m) if (!mine.has(pid) && mine.has(p.ppid)) { mine.add(pid); grow = true; } }
    for (const pid of mine) if (pid !== process.pid) tot += m.get(pid).cpu; return tot; };
  for (const type of types) {
    const la = Number(readFileSync("/proc/loadavg", "utf8").split(" ")[0]);
    const best = {};
    for (let k = 0; k < rounds; k++) for (const v of ["bo", "bn", "ro", "rn"]) {
      const key = await page.evaluate(async ({v, type, rows, cols, ntok}) => { const p = await window.bench.prepare(v, type, rows, cols); window.bench.run(p.key, 1, ntok); return p.key; }, {v, type, rows, cols, ntok});
      let iters = 1, s = 0;
      for (;;) { const c0 = treeCpu(); await page.evaluate(({key, iters, ntok}) => window.bench.run(key, iters, ntok), {key, iters, ntok}); s = treeCpu() - c0;
        if (s >= minS) break; iters = Math.ceil(iters * Math.min(8, Math.max(2, minS * 1.2 / Math.max(s, 0.01)))); }
      best[v] = Math.max(best[v] ?? 0, rows * cols * ntok * iters / s / 1e9);
    }
    const r = best, f = (x) => +x.toFixed(2);
    console.log(JSON.stringify({bench: "wasm-matmul-ab", runtime: "chromium", type, shape: [rows, cols], tokens: ntok, unit: "G weights/s", timing: "chromium process-tree CPU", bo: f(r.bo), bn: f(r.bn), ro: f(r.ro), rn: f(r.rn), base_new_old: f(r.bn / r.bo), rel_new_old: f(r.rn / r.ro), rn_vs_bo: f(r.rn / r.bo), rn_vs_bn: f(r.rn / r.bn), rounds, loadavg: la}));
  }
} finally { await ctx.close(); await server.close(); }
