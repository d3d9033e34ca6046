// threads.mjs — the threaded module build/wasm/knotwork-mt.wasm and its pool of worker
// threads: Node worker_threads, or browser Workers (SharedArrayBuffer: the page must be
// cross-origin isolated, COOP same-origin + COEP require-corp). Cloudflare Workers keep
// the single-threaded modules (bindings/loader.mjs); nothing here runs there.
//
// loadThreadedWasm({threads: N}) creates one shared WebAssembly.Memory, instantiates the
// module on it for the caller (a KnotworkWasm, as loadWasm returns) and once more in each
// of N - 1 workers (bindings/thread-worker.mjs). Each worker gets its own stack and TLS
// from the module (kw_thread_block) and then serves row jobs in kw_thread_main until
// close(). The module's kernel driver splits every mat-vec / mat-mat by output rows over
// the caller and the workers (wasm/abi_threads.cpp): each row is computed by one thread
// with the same code, so the ids are the same for any N. No Emscripten JS runtime.
import {KnotworkWasm, WasmExit, defaultWasmUrl, compileWasm} from "./loader.mjs";

const isNode = typeof process !== "undefined" && !!process.versions?.node;
// The module's memory limits (scripts/build-wasm.sh: -sINITIAL_MEMORY=16MB,
// -sMAXIMUM_MEMORY=128MB); a shared memory must be created with them.
export const MT_MEMORY = Object.freeze({initial: 256, maximum: 2048});
export const MAX_THREADS = 16;

/** The imports of one instance of the threaded module (the caller's or a worker's). */
export function threadedImports(memory, holder, {isMain}) {
  return {
    env: {
      memory,
      emscripten_notify_memory_growth: () => { holder.grows = (holder.grows ?? 0) + 1; },
      // -mt libc's main-thread constructor (runs once, in the caller's _initialize): TLS and
      // the thread pointer of the instance.
      // A browser's main thread may not block (futex waits spin there).
      __emscripten_init_main_thread_js: (tb) => {
        holder.exports.kw_thread_main_tls();  // TLS of the caller's thread, before any thread_local
        const browserMain = !isNode && typeof window !== "undefined";
        holder.exports._emscripten_thread_init(tb, isMain && browserMain ? 1 : 0, isMain ? 1 : 0, browserMain ? 0 : 1, 0);
      },
      emscripten_check_blocking_allowed: () => {},
      emscripten_unwind_to_js_event_loop: () => { throw new Error("knotwork-mt: unwind_to_js_event_loop"); },
    },
    wasi_snapshot_preview1: {
      proc_exit: (code) => { throw new WasmExit(code); },
      clock_time_get: (id, precision, out) => {
        const ns = BigInt(Math.round((id === 0 ? Date.now() : performance.now()) * 1e6));
        new BigUint64Array(memory.buffer, out, 1)[0] = ns;
        return 0;
      },
      // -mt libc's diagnostics (the core itself never writes): to the console.
      fd_write: (fd, iovs, n, outLen) => {
        const u32 = new Uint32Array(memory.buffer);
        let text = "", total = 0;
        for (let i = 0; i < n; i++) {
          const p = u32[(iovs >> 2) + 2 * i], len = u32[(iovs >> 2) + 2 * i + 1];
          text += new TextDecoder().decode(new Uint8Array(memory.buffer, p, len).slice());
          total += len;
        }
        if (text) console.error(`knotwork-mt: ${text.trimEnd()}`);
        u32[outLen >> 2] = total;
        return 0;
      },
    },
  };
}

function spawn(url) {
  if (isNode) {
    return import("node:worker_threads").then(({Worker}) => {
      const w = new Worker(url);
      w.unref();  // idle workers never keep the process alive
      return {
        post: (m) => w.postMessage(m),
        on: (fn) => { w.on("message", fn); w.on("error", (e) => fn({error: e.message})); },
        terminate: () => w.terminate(),
      };
    });
  }
  const w = new Worker(url, {type: "module"});
  return Promise.resolve({
    post: (m) => w.postMessage(m),
    on: (fn) => { w.onmessage = (e) => fn(e.data); w.onerror = (e) => fn({error: e.message || "worker failed"}); },
    terminate: () => w.terminate(),
  });
}

/**
 * The threaded module with `threads` threads in all (the caller's + threads - 1 workers).
 * Returns a KnotworkWasm with .variant "threaded", .threads, and close() (stops and
 * terminates the workers; the instance is unusable for kernels on other threads after).
 * @param {{threads: number, source?: WebAssembly.Module|ArrayBuffer|ArrayBufferView|URL|string}} opts
 */
export async function loadThreadedWasm({threads, source} = {}) {
  if (!Number.isInteger(threads) || threads < 1 || threads > MAX_THREADS)
    throw new RangeError(`knotwork: threads must be an integer in [1, ${MAX_THREADS}], got ${threads}`);
  if (typeof SharedArrayBuffer === "undefined" || (globalThis.crossOriginIsolated === false && !isNode))
    throw new Error("knotwork: threads need SharedArrayBuffer; serve the page cross-origin isolated " +
                    "(Cross-Origin-Opener-Policy: same-origin, Cross-Origin-Embedder-Policy: require-corp)");
  const module = await compileWasm(source ?? defaultWasmUrl("knotwork-mt.wasm"));
  const memory = new WebAssembly.Memory({...MT_MEMORY, shared: true});
  const holder = {memory};
  const instance = await WebAssembly.instantiate(module, threadedImports(memory, holder, {isMain: true}));
  holder.exports = instance.exports;
  const w = new KnotworkWasm(instance, holder);  // runs the constructors (_initialize), once
  w.variant = "threaded";
  const workers = [];
  const close = () => {
    w.exports.kw_threads_stop();
    for (const t of workers) t.terminate();
    workers.length = 0;
  };
  try {
    const url = new URL("./thread-worker.mjs", import.meta.url);
    const ready = [];
    for (let i = 1; i < threads; i++) {
      const block = w.exports.kw_thread_block(i);
      if (!block) throw new Error(w.lastError());
      const stackTop = new Uint32Array(memory.buffer, block, 1)[0];
      const t = await spawn(url);
      workers.push(t);
      ready.push(new Promise((resolve, reject) => t.on((m) => {
        if (m?.error) reject(new Error(`knotwork: thread ${i} failed: ${m.error}`));
        else if (m?.ready) resolve();
      })));
      t.post({module, memory, block, stackTop});
    }
    await Promise.all(ready);
    w.call("kw_threads_start", threads - 1);
  } catch (e) {
    close();
    throw e;
  }
  w.threads = threads;
  w.close = close;
  return w;
}
