// The threaded module (build/wasm/knotwork-mt.wasm, bindings/threads.mjs) under Node
// worker_threads: every output bit and every generated id the same for 1, 2 and 3 threads,
// and the same as the single-threaded module's; the rows really are split (a worker's
// row count is observed, not assumed); bad thread counts are refused.
import {test} from "node:test";
import assert from "node:assert/strict";
import {existsSync, readFileSync, writeFileSync} from "node:fs";
import {spawnSync} from "node:child_process";
import {join} from "node:path";

import {ROOT, WASM_PATH, sharedModel, referenceOutputs, tmpDir, startServe} from "./helpers.mjs";
import {loadWasm} from "../../bindings/loader.mjs";
import {loadThreadedWasm} from "../../bindings/threads.mjs";

const MT_PATH = join(ROOT, "build/wasm/knotwork-mt.wasm");
const CLI = join(ROOT, "bin/knotwork.mjs");
const run = (args) => spawnSync(process.execPath, [CLI, ...args], {encoding: "utf8", timeout: 120_000});

// Deterministic pseudo-random floats (no Math.random: a failure must reproduce).
function floats(n, seed) {
  const a = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    a[i] = (s / 2 ** 32 - 0.5) * 2;
  }
  return a;
}

// Y of kw_matmul (simd kernel) for weights of ggml type `type` quantized by the module.
function matmulBytes(w, type, rows, cols, ntok, seed) {
  const rb = (() => {  // row bytes from the module's type table
    w.call("kw_type_traits");
    const t = w.resultJSON().find((x) => x.id === type);
    return cols / t.block_elems * t.block_bytes;
  })();
  const wf = floats(rows * cols, seed), x = floats(ntok * cols, seed + 1);
  const pW = w.malloc(rows * rb), pF = w.copyIn(new Uint8Array(wf.buffer));
  try {
    for (let r = 0; r < rows; r++) w.call("kw_quantize_row", type, pF + r * cols * 4, pW + r * rb, cols);
  } finally { w.free(pF); }
  const pX = w.copyIn(new Uint8Array(x.buffer)), pY = w.malloc(ntok * rows * 4);
  try {
    w.call("kw_matmul", type, pW, rows, cols, pX, ntok, pY, 2);
    return w.u8().slice(pY, pY + ntok * rows * 4);
  } finally { w.free(pW); w.free(pX); w.free(pY); }
}

const Q4_K = 12, Q6_K = 14, Q8_0 = 8;

test("the threaded module is built and imports its memory shared", () => {
  assert.ok(existsSync(MT_PATH), `${MT_PATH} missing: run scripts/build-wasm.sh`);
  const imports = WebAssembly.Module.imports(new WebAssembly.Module(readFileSync(MT_PATH)));
  assert.ok(imports.some((i) => i.module === "env" && i.name === "memory" && i.kind === "memory"));
});

test("matmul and matvec: the same bytes for 1, 2, 3 threads and the single-threaded module", async () => {
  const st = await loadWasm(WASM_PATH);
  const pools = [];
  try {
    for (const n of [1, 2, 3]) pools.push(await loadThreadedWasm({threads: n, source: MT_PATH}));
    assert.deepEqual(pools.map((w) => w.exports.kw_threads_count()), [1, 2, 3]);
    // rows not a multiple of the 16-row grain; decode (1 token), a short and a long chunk
    for (const [type, rows, cols, ntok] of [[Q4_K, 1000, 512, 1], [Q4_K, 1000, 512, 7], [Q6_K, 333, 256, 70],
                                            [Q8_0, 517, 256, 3], [Q8_0, 96, 512, 1]]) {
      const want = matmulBytes(st, type, rows, cols, ntok, rows + ntok);
      for (const w of pools)
        assert.deepEqual(matmulBytes(w, type, rows, cols, ntok, rows + ntok), want,
                         `type ${type} ${rows}x${cols} x ${ntok} tokens, ${w.threads} threads`);
    }
    // every thread computes rows (kw_threads_rows: rows per thread so far). Which thread
    // claims a chunk is up to the scheduler (a loaded host may not run a worker for a
    // while), so repeat a larger mat-mat until each thread has taken some, for at most 30 s.
    for (const w of pools.slice(1)) {
      const p = w.malloc(4 * 16);
      try {
        let rows = [];
        for (const t0 = Date.now(); Date.now() - t0 < 30_000;) {
          matmulBytes(w, Q8_0, 4096, 512, 8, 1);
          w.call("kw_threads_rows", p, 16);
          rows = Array.from(w.u32(p, w.threads));
          if (rows.every((r) => r > 0)) break;
        }
        assert.ok(rows.every((r) => r > 0), `every thread computed rows: ${rows}`);
      } finally { w.free(p); }
    }
  } finally { for (const w of pools) w.close(); }
});

test("generate --threads 1, 2, 3: the reference ids, greedy and seeded, short and long prompts", (t) => {
  const refs = referenceOutputs();
  const names = ["stories260K-pad256-llama-q6_k.gguf", "stories260K-pad256-llama-q4_k_m.gguf",
                 "stories260K-pad256-llama-q8_0.gguf", "stories260K-pad256-qwen2-q4_k_m.gguf"];
  const dir = tmpDir("knotwork-threads-");
  const long = join(dir, "long.txt");  // ~150 tokens: prefill in 3 chunks of the mat-mat
  writeFileSync(long, "Once upon a time there was a little girl who liked to play in the park with her dog. ".repeat(8));
  for (const name of names) {
    const p = sharedModel(t, name);
    if (!p) return;
    for (const args of [["-p", refs.prompt, "-n", "32", "--temp", "0"],
                        ["--prompt-file", long, "-n", "24", "--temp", "0.8", "--seed", "7"]]) {
      const st = run(["generate", p, ...args, "--ids"]);
      assert.equal(st.status, 0, st.stderr);
      if (args[0] === "-p" && refs.models[name]?.exactFloat64?.tokenIds && name.includes("q6_k"))
        assert.equal(st.stdout, JSON.stringify(refs.models[name].exactFloat64.tokenIds) + "\n");
      for (const n of ["1", "2", "3"]) {
        const r = run(["generate", p, ...args, "--ids", "--threads", n]);
        assert.equal(r.status, 0, r.stderr);
        assert.equal(r.stdout, st.stdout, `${name} ${args.join(" ")} --threads ${n}`);
      }
    }
  }
});

test("--threads refuses a bad count with exit 2, naming the flag", () => {
  for (const v of ["0", "x", "99"]) {
    const r = run(["generate", "m.gguf", "-p", "x", "--threads", v]);
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, /--threads: expected an integer in \[1, 16\]/);
  }
});

test("serve --threads 2: the greedy reply of `generate` (single-threaded), through the openai client", async (t) => {
  const p = sharedModel(t, "stories260K-pad256-llama-q8_0.gguf");
  if (!p) return;
  const prompt = "Once upon a time, there was a little girl named Lily. She";
  const st = run(["generate", p, "-p", prompt, "-n", "40", "--temp", "0"]);
  assert.equal(st.status, 0, st.stderr);
  const srv = await startServe(p, ["--threads", "2", "--ctx", "256"]);
  try {
    const {default: OpenAI} = await import("openai");
    const c = await new OpenAI({baseURL: `${srv.url}/v1`, apiKey: "unused", maxRetries: 0})
      .completions.create({model: srv.id, prompt, max_tokens: 40, temperature: 0});
    assert.equal(c.usage.completion_tokens, 40);
    assert.ok(c.choices[0].text.length > 20, c.choices[0].text);
    assert.equal(c.choices[0].text, st.stdout.replace(/\n$/, ""), "serve --threads 2 replies as generate does");
    assert.match(srv.stderr, /, 2 wasm threads\n/, "the threaded module serves");
  } finally { await srv.stop(); }
});
