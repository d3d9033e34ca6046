// loader.mjs — instantiate build/wasm/knotwork.wasm (or, where relaxed SIMD works,
// build/wasm/knotwork-relaxed.wasm: bindings/wasm-choice.mjs picks) without any
// Emscripten JS runtime.
// Works in Node, browsers and Cloudflare Workers. Workers cannot compile wasm from bytes
// at run time, so a precompiled WebAssembly.Module is accepted as well as bytes, a URL
// (browser: fetch) or a file path / file: URL (Node).
//
// The module is built -sSTANDALONE_WASM: it imports env.emscripten_notify_memory_growth
// and wasi_snapshot_preview1.proc_exit, nothing else (scripts/build-wasm.sh fails the
// build when another import appears). Memory may grow, which detaches old views of
// memory.buffer: always take fresh views (u8(), f32(), ...) after any call into wasm.

/** Imports this loader implements; scripts/build-wasm.sh checks the module against it. */
export const PROVIDED_IMPORTS = Object.freeze([
  "env.emscripten_notify_memory_growth",
  "wasi_snapshot_preview1.proc_exit",
]);

/** Imports of the threaded module build/wasm/knotwork-mt.wasm (bindings/threads.mjs
 *  provides them): the shared memory, and the few hooks of Emscripten's -mt libc. */
export const PROVIDED_IMPORTS_MT = Object.freeze([
  ...PROVIDED_IMPORTS,
  "env.memory",
  "env.__emscripten_init_main_thread_js",
  "env.emscripten_check_blocking_allowed",
  "env.emscripten_unwind_to_js_event_loop",
  "wasi_snapshot_preview1.clock_time_get",
  "wasi_snapshot_preview1.fd_write",
]);

/** Thrown when the module calls exit (it should never: every ABI entry catches). */
export class WasmExit extends Error {
  constructor(code) { super(`knotwork wasm called proc_exit(${code})`); this.code = code; }
}

import {instantiateBest} from "./wasm-choice.mjs";

const isNode = typeof process !== "undefined" && !!process.versions?.node;

/**
 * Default location of the module: this package's build output. Computed lazily: in a
 * Cloudflare Worker import.meta.url may be absent, and there the caller passes the
 * WebAssembly.Module (imported from the .wasm file) anyway.
 */
export function defaultWasmUrl(file = "knotwork.wasm") {
  try {
    return new URL(`../build/wasm/${file}`, import.meta.url);
  } catch {
    throw new Error("knotwork: no default wasm location here; pass the WebAssembly.Module (Workers) or a URL");
  }
}

async function readSource(source) {
  if (source instanceof URL) {
    if (source.protocol === "file:") {
      const {readFile} = await import("node:fs/promises");
      return new Uint8Array(await readFile(source));
    }
    const res = await fetch(source);
    if (!res.ok) throw new Error(`knotwork: fetching ${source} failed: HTTP ${res.status}`);
    return new Uint8Array(await res.arrayBuffer());
  }
  if (typeof source === "string") {
    if (/^(https?|file|blob|data):/i.test(source)) return readSource(new URL(source));
    if (isNode) {
      const {readFile} = await import("node:fs/promises");
      return new Uint8Array(await readFile(source));
    }
    // Browser: a relative URL string, resolved against the page.
    return readSource(new URL(source, globalThis.location?.href));
  }
  throw new TypeError("knotwork: wasm source must be a WebAssembly.Module, bytes, a URL or a path");
}

/**
 * Instantiate the module. No source: the build output next to this package, relaxed or
 * baseline as wasm-choice.mjs picks. {baseline, relaxed}: the same pick between those
 * two (Workers pass their two imported WebAssembly.Modules). One module (a Module, bytes,
 * URL or path): exactly that one. The result's .variant says "relaxed" or "baseline"
 * after a pick (undefined for an explicit single module).
 * @param {WebAssembly.Module|ArrayBuffer|ArrayBufferView|URL|string|{baseline: any, relaxed?: any}} [source]
 * @returns {Promise<KnotworkWasm>}
 */
export async function loadWasm(source) {
  source ??= {baseline: defaultWasmUrl(), relaxed: defaultWasmUrl("knotwork-relaxed.wasm")};
  if (isPair(source)) return instantiateBest(source, readSource, loadWasm);
  const state = {memory: null, grows: 0};
  const imports = {
    env: {
      // Called after memory.grow; views are always re-created, so only count.
      emscripten_notify_memory_growth: () => { state.grows++; },
    },
    wasi_snapshot_preview1: {
      proc_exit: (code) => { throw new WasmExit(code); },
    },
  };
  let instance;
  if (source instanceof WebAssembly.Module) {
    instance = await WebAssembly.instantiate(source, imports);
  } else {
    let bytes = source;
    if (!(bytes instanceof ArrayBuffer) && !ArrayBuffer.isView(bytes)) bytes = await readSource(source);
    ({instance} = await WebAssembly.instantiate(bytes, imports));
  }
  return new KnotworkWasm(instance, state);
}

const isPair = (s) => s !== null && typeof s === "object" && !(s instanceof URL) && !(s instanceof WebAssembly.Module) &&
  !(s instanceof ArrayBuffer) && !ArrayBuffer.isView(s) && "baseline" in s;

/** Compile the module once (e.g. at module scope) and instantiate it many times. */
export async function compileWasm(source) {
  source ??= defaultWasmUrl();
  if (source instanceof WebAssembly.Module) return source;
  let bytes = source;
  if (!(bytes instanceof ArrayBuffer) && !ArrayBuffer.isView(bytes)) bytes = await readSource(source);
  return WebAssembly.compile(bytes);
}

const te = new TextEncoder();
const td = new TextDecoder("utf-8", {fatal: false, ignoreBOM: true});  // a leading U+FEFF is text, not a marker

/** Thrown for a non-zero ABI status; message is the core's kw_last_error(). */
export class KnotworkError extends Error {
  constructor(fn, status, message) {
    super(message || `${fn} failed with status ${status}`);
    this.name = "KnotworkError";
    this.fn = fn;
    this.status = status;
  }
}

/** A live instance: raw exports plus the small memory helpers every caller needs. */
export class KnotworkWasm {
  constructor(instance, state) {
    this.instance = instance;
    this.exports = instance.exports;
    this.memory = instance.exports.memory ?? state.memory;  // the threaded module imports its memory
    this.shared = typeof SharedArrayBuffer !== "undefined" && this.memory.buffer instanceof SharedArrayBuffer;
    this.state = state;
    // Standalone reactor: run static constructors.
    if (this.exports._initialize) this.exports._initialize();
  }
  u8() { return new Uint8Array(this.memory.buffer); }
  i32(ptr, n) { return new Int32Array(this.memory.buffer, ptr, n); }
  u32(ptr, n) { return new Uint32Array(this.memory.buffer, ptr, n); }
  f32(ptr, n) { return new Float32Array(this.memory.buffer, ptr, n); }
  f64(ptr, n) { return new Float64Array(this.memory.buffer, ptr, n); }

  lastError() {
    const p = this.exports.kw_last_error();
    const n = this.exports.kw_last_error_len();
    return this.text(p, n);
  }
  /** UTF-8 text at [p, p + n) (copied first when the memory is shared: TextDecoder
   *  refuses views of a SharedArrayBuffer). */
  text(p, n) {
    const v = this.u8().subarray(p, p + n);
    return td.decode(this.shared ? v.slice() : v);
  }
  /** Call an ABI function that returns a status; throw KnotworkError on non-zero. */
  call(fn, ...args) {
    const f = this.exports[fn];
    if (!f) throw new Error(`knotwork: the wasm module has no export ${fn}`);
    const status = f(...args);
    if (status !== 0) throw new KnotworkError(fn, status, this.lastError());
    return status;
  }
  /** The module-owned result buffer of the last call that filled it. */
  resultBytes() {
    const p = this.exports.kw_result_ptr(), n = this.exports.kw_result_len();
    return this.u8().slice(p, p + n);
  }
  resultText() {
    return this.text(this.exports.kw_result_ptr(), this.exports.kw_result_len());
  }
  resultJSON() { return JSON.parse(this.resultText()); }
  /** A generation step's result (kw_session_step, kw_generator_step*): a JSON line
   *  {id, done, reason, text_len[, logprob, top]} then the text bytes (complete UTF-8).
   *  Returns the head's fields (text_len dropped) plus text. */
  resultStep() {
    const raw = this.resultBytes();
    const nl = raw.indexOf(10);
    const {text_len, ...head} = JSON.parse(td.decode(raw.subarray(0, nl)));
    return {...head, text: td.decode(raw.subarray(nl + 1))};
  }

  malloc(n) {
    const p = this.exports.kw_alloc(Math.max(1, n));
    if (!p) throw new KnotworkError("kw_alloc", -1, this.lastError() || `out of wasm memory allocating ${n} bytes`);
    return p;
  }
  free(p) { if (p) this.exports.kw_free(p); }
  /** Copy bytes into a fresh allocation; returns its pointer (caller frees). */
  copyIn(bytes) {
    const p = this.malloc(bytes.length);
    this.u8().set(bytes, p);
    return p;
  }
  /** Run fn(ptr, len) with a UTF-8 copy of str in wasm memory. */
  withString(str, fn) {
    const b = te.encode(str);
    const p = this.copyIn(b);
    try { return fn(p, b.length); } finally { this.free(p); }
  }
}
