// knotwork.mjs — typed JS API over the wasm C ABI (wasm/abi.h). Plain glue: every
// call maps to one kw_* export; the core does the work and the validation.
//
//   import {openModel, fileSource} from "knotwork";
//   const model = await openModel(await fileSource("m.knot"));
//   for await (const ev of model.generate("Once upon a time", {maxTokens: 32})) ...
//
// One wasm instance per JS realm (module scope) is shared by every model: a Worker
// isolate has 128 MB, and the module's memory is capped at that.
import {loadWasm, KnotworkError} from "./loader.mjs";
import {loadThreadedWasm} from "./threads.mjs";
import {bytesSource, fileSource, urlSource, countingSource, blobSource, cachedUrlSource} from "./sources.mjs";
import {coreOptions} from "./options.mjs";
import {reusable} from "./prefix.mjs";

// The engine options of a session (kw_session_new's; kw_session_renew keeps them).
const ENGINE_KEYS = ["mode", "n_ctx", "chunk", "kv_budget"];

export {bytesSource, fileSource, urlSource, countingSource, blobSource, cachedUrlSource, KnotworkError};

const te = new TextEncoder();

/** @type {Promise<import("./loader.mjs").KnotworkWasm>|null} */
let runtime = null;

let runtimeThreads;  // the threads init() was first called with (undefined: single-threaded)

/**
 * Load (once) the wasm module. Call before anything else to pass a precompiled
 * WebAssembly.Module (Workers), bytes, or a URL/path; otherwise the default build
 * output next to this package is used.
 * {threads: N} (Node, or a cross-origin isolated page; not Workers): the threaded module
 * build/wasm/knotwork-mt.wasm with N threads (the caller's + N - 1 workers, see
 * bindings/threads.mjs; wasmSource, if given, is that module). The ids are the same for
 * any N and as the single-threaded modules give. Without it: the single-threaded modules.
 * @param {WebAssembly.Module|ArrayBuffer|ArrayBufferView|URL|string} [wasmSource]
 * @param {{threads?: number}} [opts]
 */
export function init(wasmSource, {threads} = {}) {
  if (runtime && threads !== undefined && threads !== runtimeThreads)
    throw new Error(`knotwork: the wasm runtime is already loaded with ${runtimeThreads ?? "no"} threads; ` +
                    `init({threads: ${threads}}) must come first`);
  if (!runtime) runtimeThreads = threads;
  runtime ??= (threads !== undefined ? loadThreadedWasm({threads, source: wasmSource}) : loadWasm(wasmSource))
    .then((w) => { readTypeTraits(w); return w; })
    .catch((e) => { runtime = null; throw e; });  // a failed load may be retried
  return runtime;
}

/** Threads the loaded runtime computes with (1 for the single-threaded modules). */
export async function threadCount() {
  const w = await init();
  return w.threads ?? 1;
}

/** Stop the threaded runtime's workers (Node exits without it too: they are unref'd). */
export async function shutdown() {
  if (!runtime) return;
  const w = await runtime;
  w.close?.();
  runtime = null;
  runtimeThreads = undefined;
}

/**
 * The core's type-traits table (kw_type_traits), filled by init(): name -> {id, name,
 * block_elems, block_bytes, storage, k_quant, vec_dot_type, act_format, max_rel_rms}.
 * DTYPES maps the weight (storage) type names to their ggml ids.
 */
export const TYPES = {};
export const DTYPES = {};
function readTypeTraits(w) {
  w.call("kw_type_traits");
  for (const t of w.resultJSON()) {
    TYPES[t.name] = Object.freeze(t);
    if (t.storage) DTYPES[t.name] = t.id;
  }
  Object.freeze(TYPES);
  Object.freeze(DTYPES);
}

/** Current and peak linear memory and malloc'd bytes, from the module. */
export async function memoryStats() {
  const w = await init();
  return readMemoryStats(w);
}

function readMemoryStats(w) {
  const p = w.malloc(16);
  try {
    w.call("kw_memory_stats", p);
    const [linear, peakLinear, heap, peakHeap] = w.u32(p, 4);
    return {linear, peakLinear, heap, peakHeap};
  } finally { w.free(p); }
}

/** Reset the peak marks to the current values. */
export async function resetPeakMemory() {
  (await init()).call("kw_memory_reset_peak");
}

// Call fn(ptr) with a fresh 4-byte out slot; returns the i32 left in it.
function withOut(w, fn) {
  const p = w.malloc(8);
  try { fn(p); return w.i32(p, 1)[0]; } finally { w.free(p); }
}

/**
 * Drive a prefix-parsing ABI call through a byte source: fetch `probe` bytes, and when
 * the core answers {"need": N}, fetch the first N bytes and call again (two-fetch case).
 * fn(ptr, len) must fill the result buffer. Returns the parsed JSON result.
 */
async function parsePrefix(w, source, probe, fn) {
  let len = Math.min(source.size, probe);
  for (let attempt = 0; ; attempt++) {
    const bytes = await source.read(0, len);
    const p = w.copyIn(bytes);
    let res;
    try { res = fn(p, len); } finally { w.free(p); }
    if (res.need === undefined) return res;
    if (!(res.need > len) || res.need > source.size || attempt > 32)
      throw new KnotworkError("parse", -1, `${source.name}: header parse asked for ${res.need} bytes after ${len} (file ${source.size})`);
    len = res.need;
  }
}

function nameArgs(w, name) {
  const b = te.encode(name ?? "model");
  return {ptr: w.copyIn(b), len: b.length};
}

async function resolveSource(source) {
  source = await source;
  if (typeof source === "string" || source instanceof URL) {
    const s = String(source);
    if (/^https?:/i.test(s)) return urlSource(s);
    return fileSource(source instanceof URL ? source.pathname : s);
  }
  if (source instanceof Uint8Array || source instanceof ArrayBuffer) return bytesSource(source);
  if (!source || typeof source.read !== "function" || !(source.size >= 0))
    throw new TypeError("knotwork: a source is {size, read(offset, len)}, bytes, a path or an http(s) URL");
  return source;
}

/**
 * Parse a .knot or .gguf header through a byte source (probe, then one more read when
 * the header is longer than the probe).
 * @param {import("./sources.mjs").ByteSource} source
 * @param {{probe?: number}} [opts]
 */
export async function parseKnotHeader(source, {probe = 64 * 1024} = {}) {
  const w = await init();
  const given = await source;
  source = await resolveSource(given);
  const nm = nameArgs(w, source.name);
  try {
    return await parsePrefix(w, source, probe, (p, len) => {
      w.call("kw_parse_header", p, len, source.size, nm.ptr, nm.len);
      return w.resultJSON();
    });
  } finally {
    w.free(nm.ptr);
    if (source !== given) await source.close?.();
  }
}
export {parseKnotHeader as parseHeader};

/**
 * Open a model (.knot or .gguf) from a byte source: the header by range, then each
 * tensor by range straight into wasm memory (in chunks, so the JS heap stays small);
 * the core verifies every tensor (.knot content hashes, finite block scales).
 * @param {import("./sources.mjs").ByteSource|string|URL|Uint8Array} source
 * @param {{probe?: number, chunkBytes?: number, onProgress?: (done: number, total: number) => void}} [opts]
 * @returns {Promise<Model>}
 */
export async function openModel(source, {probe = 256 * 1024, chunkBytes = 4 << 20, onProgress} = {}) {
  const w = await init();
  const given = await source;
  source = await resolveSource(given);
  const owned = source !== given;  // opened here from a path/URL/bytes: close it here
  let handle = 0;
  try {
    let table;
    ({handle, table} = await openTable(w, source, probe));
    const total = table.tensors.reduce((a, t) => a + t.size, 0);
    let done = 0;
    for (const t of table.tensors) {
      await loadTensor(w, source, handle, t, chunkBytes);
      done += t.size;
      onProgress?.(done, total);
    }
    w.call("kw_model_finish", handle);
    const info = w.resultJSON();
    const model = new Model(w, handle, info);
    handle = 0;
    return model;
  } finally {
    if (handle) w.exports.kw_model_free(handle);
    if (owned) await source.close?.();
  }
}

/**
 * Open a .knot from a URL through the browser's Cache API (cachedUrlSource): downloaded
 * once, then read from the cache with no request. openModel verifies every tensor's
 * content hash as it loads, so a corrupted cached copy fails there: it is evicted and the
 * model fetched and cached again. model.cache says what happened: {hit, refetched,
 * reason?}. A .gguf (no tensor hashes) is refused: its cached copy could not be verified.
 * @param {string|URL} url  @param {{cacheName?: string} & Parameters<typeof openModel>[1]} [opts]
 * @returns {Promise<Model>}
 */
export async function openCachedModel(url, {cacheName, ...opts} = {}) {
  const open = async (c) => {
    const m = await openModel(c.source, opts);
    if (m.info.format !== "knot") {
      m.close();
      await c.evict();
      throw new Error(`${url}: openCachedModel caches .knot files only (a ${m.info.format} has no tensor hashes to verify a cached copy by)`);
    }
    return m;
  };
  const c = await cachedUrlSource(url, {cacheName});
  try {
    const m = await open(c);
    m.cache = {hit: c.fromCache, refetched: false};
    return m;
  } catch (e) {
    if (!c.fromCache) throw e;
    await c.evict();  // the cached copy failed verification: fetch it again
    const m = await open(await cachedUrlSource(url, {cacheName}));
    m.cache = {hit: false, refetched: true, reason: e.message};
    return m;
  }
}

/**
 * Low level (used by mesh.mjs): parse the header into a model handle with no tensor
 * bytes. Returns {handle, table: {format, tensors: [{i, name, offset, size}]}}.
 */
export async function openTable(w, source, probe = 256 * 1024) {
  const nm = nameArgs(w, source.name);
  let handle = 0;
  try {
    const table = await parsePrefix(w, source, probe, (p, len) => {
      handle = withOut(w, (out) => w.call("kw_model_open", p, len, source.size, nm.ptr, nm.len, out));
      return w.resultJSON();
    });
    return {handle, table};
  } finally { w.free(nm.ptr); }
}

/** Low level: fetch table entry t by range straight into its wasm buffer; the core verifies it. */
export async function loadTensor(w, source, handle, t, chunkBytes = 4 << 20) {
  const dst = withOut(w, (out) => w.call("kw_model_tensor_buffer", handle, t.i, out)) >>> 0;
  for (let off = 0; off < t.size; off += chunkBytes) {
    const n = Math.min(chunkBytes, t.size - off);
    const bytes = await source.read(t.offset + off, n);
    if (bytes.length !== n) throw new Error(`${source.name}: short read of ${t.name} at ${t.offset + off}`);
    w.u8().set(bytes, dst + off);  // fresh view: memory may have grown during the await
  }
  w.call("kw_model_tensor_loaded", handle, t.i);
}

export {resolveSource as _resolveSource, withOut as _withOut, parsePrefix as _parsePrefix, nameArgs as _nameArgs};

/** Run the SIMD-vs-scalar kernel checks inside wasm; returns the core's report. */
export async function kernelSelftest({seed = 1} = {}) {
  const w = await init();
  w.call("kw_kernel_selftest", seed);
  return w.resultJSON();
}

/** ABI status codes (wasm/abi.h); KnotworkError.status carries one. */
export const STATUS = Object.freeze({OK: 0, KNOT: 1, OOM: 2, STD: 3, HANDLE: 4, UNKNOWN: 5, USAGE: 6});

/**
 * Parse a command line with the core's option spec (core/infer/options.h), the one the
 * native CLI uses: {action: "help"|"usage"} or {action: "run", args, options, cli}.
 * `options` are generate()'s `options` (the core's keys). A refused command line throws
 * KnotworkError with status STATUS.USAGE and the core's message.
 * @param {string} command e.g. "generate"
 * @param {string[]} args the arguments after the command name
 * @param {string} prog the program name messages use
 */
export async function parseCommandLine(command, args, prog) {
  const w = await init();
  w.withString(command, (cp, cn) => w.withString(JSON.stringify(args), (ap, an) =>
    w.withString(prog, (pp, pn) => w.call("kw_cli_parse", cp, cn, ap, an, pp, pn))));
  return w.resultJSON();
}

/** The usage text of a command, from the same spec. */
export async function commandUsage(command, prog) {
  const w = await init();
  w.withString(command, (cp, cn) => w.withString(prog, (pp, pn) => w.call("kw_cli_usage", cp, cn, pp, pn)));
  return w.resultText();
}

/** printf("%g", x) from the core (the float format of `knot inspect` and the usage text). */
export async function formatG(x) {
  const w = await init();
  w.call("kw_cli_format_g", x);
  return w.resultText();
}

export const KERNELS = Object.freeze({reference: 0, scalar: 1, simd: 2});

/**
 * Time the core's matvec on a rows x cols matrix of `type` with a kernel path.
 * @returns {Promise<{type, kernel, rows, cols, iters, msPerIter, gWeightsPerS, checksum}>}
 */
export async function benchMatvec(type, rows, cols, {kernel = "simd", minMs = 500, minIters = 3, seed = 1} = {}) {
  const w = await init();
  const h = withOut(w, (out) => w.call("kw_bench_matvec_prepare", DTYPES[type], rows, cols, seed, out));
  try {
    const k = KERNELS[kernel];
    w.call("kw_bench_matvec_run", h, k, 1);  // warm-up (and tier-up)
    let iters = 0;
    const t0 = performance.now();
    while (iters < minIters || performance.now() - t0 < minMs) { w.call("kw_bench_matvec_run", h, k, 1); iters++; }
    const ms = (performance.now() - t0) / iters;
    const checksum = new Float64Array(w.resultBytes().buffer)[0];
    return {type, kernel, rows, cols, iters, msPerIter: ms, gWeightsPerS: rows * cols / ms / 1e6, checksum};
  } finally { w.exports.kw_bench_free(h); }
}

/** Bytes of a row of n elements of a type (the core's type table; after init()). */
export function rowBytes(type, n) {
  if (!Object.isFrozen(TYPES)) throw new Error("knotwork: rowBytes needs the type table: await init() first");
  const {block_elems: be, block_bytes: bb} = TYPES[type] ?? {};
  if (!be) throw new Error(`knotwork: unknown type ${type}`);
  if (n % be) throw new Error(`knotwork: a ${type} row of ${n} elements is not a multiple of ${be}`);
  return n / be * bb;
}

const typeId = (type) => {
  const id = typeof type === "number" ? type : DTYPES[type];
  if (id === undefined) throw new Error(`knotwork: unknown type ${type}`);
  return id;
};

/** Reference-quantize a Float32Array row to `type`; returns its bytes. */
export async function quantizeRow(type, x) {
  const w = await init();
  const out = w.malloc(rowBytes(type, x.length));
  const p = w.copyIn(new Uint8Array(x.buffer, x.byteOffset, x.byteLength));
  try {
    w.call("kw_quantize_row", typeId(type), p, out, x.length);
    return w.u8().slice(out, out + rowBytes(type, x.length));
  } finally { w.free(p); w.free(out); }
}

/** Dequantize n elements of `type` from bytes; returns a Float32Array. */
export async function dequantizeRow(type, bytes, n) {
  const w = await init();
  const p = w.copyIn(bytes);
  const out = w.malloc(n * 4);
  try {
    w.call("kw_dequantize_row", typeId(type), p, out, n);
    return w.f32(out, n).slice();
  } finally { w.free(p); w.free(out); }
}

/**
 * Y[ntok, rows] = X[ntok, cols] W^T with the core's kernels (ntok = X.length / cols);
 * W: rows x row_bytes(type, cols) bytes. kernel: "simd" | "scalar" | "reference".
 */
export async function matmul(type, W, rows, cols, X, {kernel = "simd"} = {}) {
  const w = await init();
  const ntok = X.length / cols;
  if (!Number.isInteger(ntok) || ntok < 1) throw new Error(`knotwork: X has ${X.length} values, not a multiple of cols ${cols}`);
  const pw = w.copyIn(W), px = w.copyIn(new Uint8Array(X.buffer, X.byteOffset, X.byteLength)), py = w.malloc(ntok * rows * 4);
  try {
    if (ntok === 1) w.call("kw_matvec", typeId(type), pw, rows, cols, px, py, KERNELS[kernel]);
    else w.call("kw_matmul", typeId(type), pw, rows, cols, px, ntok, py, KERNELS[kernel]);
    return w.f32(py, ntok * rows).slice();
  } finally { w.free(pw); w.free(px); w.free(py); }
}

export class Model {
  constructor(w, handle, info) {
    this.w = w;
    this.handle = handle;
    /** config, tokenizer summary, tensor list, format */
    this.info = info;
  }
  get closed() { return this.handle === 0; }
  #h() { if (!this.handle) throw new Error("knotwork: model is closed"); return this.handle; }

  /**
   * @param {string|Uint8Array} text  a string, or raw bytes (need not be valid UTF-8)
   * @returns {number[]} token ids
   */
  tokenize(text, {addBos = true, parseSpecial = false} = {}) {
    const w = this.w;
    const call = (p, n) => w.call("kw_tokenize", this.#h(), p, n, addBos ? 1 : 0, parseSpecial ? 1 : 0);
    if (typeof text === "string") w.withString(text, call);
    else {
      const p = w.copyIn(text);
      try { call(p, text.length); } finally { w.free(p); }
    }
    const b = w.resultBytes();
    return Array.from(new Int32Array(b.buffer, b.byteOffset, b.length / 4));
  }

  /**
   * Format chat messages with the model's template: the file's own Jinja template when the
   * core's interpreter parses it, else the format its markers (or the vocab) name (ChatML,
   * Llama-2, Llama-3, Zephyr); `template` forces one of those or "jinja". A template that
   * neither parses nor carries one of those formats' markers is a KnotworkError quoting its
   * start, unless `template` picks one. serve's OpenAI handler and the mesh coordinator use
   * this default. generate() parses the role markers of the result as special tokens (its
   * default for text prompts).
   * `vars`: template variables besides messages (e.g. {tools: [...]}, {enable_thinking: false}),
   * for the file's own Jinja template only (a built-in format: KnotworkError).
   * @param {{role: string, content: string}[]} messages
   */
  applyChatTemplate(messages, {addGenerationPrompt = true, template = "", vars} = {}) {
    const w = this.w;
    w.withString(JSON.stringify(messages), (p, n) =>
      w.withString(template, (tp, tn) => vars === undefined
        ? w.call("kw_chat_apply", this.#h(), p, n, addGenerationPrompt ? 1 : 0, tp, tn)
        : w.withString(JSON.stringify(vars), (vp, vn) =>
          w.call("kw_chat_apply_vars", this.#h(), p, n, addGenerationPrompt ? 1 : 0, tp, tn, vp, vn))));
    return w.resultText();
  }

  /** The chat template: {name: the one applyChatTemplate uses by default, text: the file's own ("" when none)}. */
  chatTemplate() {
    this.w.call("kw_chat_template", this.#h());
    return this.w.resultJSON();
  }

  /**
   * The bytes of one token (need not be valid UTF-8 alone).
   * special: control tokens give their text ("<|im_end|>") instead of nothing.
   * @returns {Uint8Array}
   */
  tokenBytes(id, {special = false} = {}) {
    this.w.call("kw_token_piece", this.#h(), id, special ? 1 : 0);
    return this.w.resultBytes().slice();
  }

  /** @returns {string} text of ids (llama.cpp detokenize rules) */
  detokenize(ids) {
    const w = this.w;
    const a = Int32Array.from(ids);
    const p = w.copyIn(new Uint8Array(a.buffer));
    try { w.call("kw_detokenize", this.#h(), p, a.length); } finally { w.free(p); }
    return w.resultText();
  }

  /**
   * Stream a completion. Yields {type: "token", token, text, telemetry} per sampled token
   * (text: the complete UTF-8 it released, may be "" while a character or a possible stop
   * string is pending; telemetry: {n: tokens so far, elapsedMs, decodeTokS, memory: {linear,
   * peakLinear, heap, peakHeap}: wasm linear memory and malloc'd bytes now and at their
   * peak}), then one {type: "summary", ...} (the schema: bindings/events.mjs). Options left undefined take the
   * core's defaults; every value is checked against the core's option table
   * (core/infer/options.cpp, the CLIs' ranges; a refusal is KnotworkError with status
   * STATUS.USAGE). temperature 0 is greedy.
   * With `logprobs: k` (0..20) each token event also carries `logprob` (the sampled token's
   * log-probability under the model's raw distribution) and `top` ([{token, logprob}] x k).
   * With `prefillProgress: n` the prompt is fed in pieces of about n tokens (whole prefill
   * chunks, so the result is the same) and {type: "prefill", done, total, elapsedMs} events
   * come before the first piece and after each one.
   * kvBudget: bytes the KV cache may take (--kv-budget; a context that needs more is an
   * error naming both numbers).
   * slot: a Model.slot() — prefix reuse across calls (llama-server's cache_prompt): a
   * generation that completes leaves its session (KV and the ids it holds) in the slot, and
   * the next one with the same engine options keeps the positions bindings/prefix.mjs
   * reusable() allows and feeds only the rest (summary.cachedTokens; the prefill events'
   * total counts the tokens fed). The ids are the same as a fresh session's. A generation
   * that fails or is abandoned frees the session and leaves the slot empty.
   * signal: an AbortSignal; once aborted, the generator frees its session and throws the
   * signal's reason (an AbortError by default) before the next step (between prompt pieces
   * during the prefill), so at most one more forward pass runs.
   * @param {string|number[]} prompt text (BOS added; special-token text such as
   *   "<|im_start|>" becomes its token unless parseSpecial is false, as llama.cpp's CLI does)
   *   or token ids
   * @param {{maxTokens?: number, temperature?: number, topK?: number, topP?: number,
   *          minP?: number, repeatPenalty?: number, repeatLastN?: number, seed?: number,
   *          presencePenalty?: number, frequencyPenalty?: number, logprobs?: number,
   *          prefillProgress?: number,
   *          stop?: string[], reference?: boolean, ignoreEos?: boolean, nCtx?: number,
   *          chunk?: number, kvBudget?: number, addBos?: boolean, parseSpecial?: boolean,
   *          slot?: object, signal?: AbortSignal, options?: object}} [opts]  options: the core's option keys (n_predict, top_k,
   *          ... as parseCommandLine() returns them), applied over the named ones
   */
  async *generate(prompt, opts = {}) {
    const w = this.w;
    const signal = opts.signal;
    signal?.throwIfAborted();
    const ids = typeof prompt === "string"
      ? this.tokenize(prompt, {addBos: opts.addBos ?? true, parseSpecial: opts.parseSpecial ?? true})
      : Array.from(prompt);
    const o = coreOptions(opts);
    const mem0 = readMemoryStats(w);
    // {draft: Model, draftN, draftOneHot}: speculative decoding with a draft model of the same
    // vocabulary, loaded in this runtime (its own engine and KV in the session;
    // core/infer/draft_model.h); when sampling it samples its drafts from its own distribution
    // (draftOneHot: proposes its argmax instead)
    const draft = opts.draft ?? null;
    if (draft !== null && !(draft instanceof Model)) throw new Error("generate: draft must be a loaded Model (openModel)");
    const slot = opts.slot, engineKey = JSON.stringify([...ENGINE_KEYS.map((k) => o[k] ?? null), draft ? draft.#h() : 0, opts.draftN ?? 4, !!opts.draftOneHot]);
    if (slot && slot.model !== this) throw new Error("generate: the slot is another model's (model.slot())");
    let sess = 0, keep = 0, kept = false, chunk, mode;
    if (slot?.handle) {  // the slot is this generation's now: reused, or freed before a new session takes its memory
      keep = slot.engine === engineKey ? reusable(slot.ids, ids) : 0;
      if (keep) ({handle: sess, chunk, mode} = slot);
      else w.exports.kw_session_free(slot.handle);
      Object.assign(slot, {handle: 0, ids: []});
    }
    if (!sess) {
      const so = draft ? {...o, draft_model: draft.#h(), ...(opts.draftN !== undefined ? {draft_n: opts.draftN} : {}),
                          ...(opts.draftOneHot ? {draft_one_hot: true} : {})} : o;
      sess = w.withString(JSON.stringify(so), (p, n) => withOut(w, (out) => w.call("kw_session_new", this.#h(), p, n, out)));
      ({chunk, mode} = w.resultJSON());
    }
    try {
      const a = Int32Array.from(ids), fed = a.length - keep;
      const sampling = JSON.stringify(Object.fromEntries(Object.entries(o).filter(([k]) => !ENGINE_KEYS.includes(k))));
      // prompt pieces: whole chunks, so the forward passes are the same as in one call
      const piece = opts.prefillProgress > 0 ? Math.max(1, Math.round(opts.prefillProgress / chunk)) * chunk : fed;
      const t0 = performance.now();
      const cached = keep ? {cached: keep} : {};
      for (let at = keep; at < a.length || at === 0; at += piece) {
        if (at > keep) signal?.throwIfAborted();
        if (opts.prefillProgress > 0) yield {type: "prefill", done: at - keep, total: fed, elapsedMs: performance.now() - t0, ...cached};
        const end = Math.min(a.length, at + piece);
        if (at === keep && keep) {  // a held session: keep [0, keep), feed the first piece
          const p = w.copyIn(new Uint8Array(a.buffer, 0, end * 4));
          try { w.withString(sampling, (q, n) => w.call("kw_session_renew", sess, q, n, p, end, keep)); } finally { w.free(p); }
          continue;
        }
        const part = a.subarray(at, end);
        const p = w.copyIn(new Uint8Array(part.buffer, part.byteOffset, part.byteLength));
        try { w.call(at === 0 ? "kw_session_prefill" : "kw_session_prefill_more", sess, p, part.length); } finally { w.free(p); }
      }
      const prefillMs = performance.now() - t0;
      if (opts.prefillProgress > 0) yield {type: "prefill", done: fed, total: fed, elapsedMs: prefillMs, ...cached};
      const out = [];
      let decodeMs = 0, nDecoded = 0, reason = o.n_predict === 0 ? "length" : "", text = "", drafted = 0, accepted = 0;
      while (!reason) {
        signal?.throwIfAborted();  // the finally below frees the session
        const t = performance.now();
        w.call("kw_session_step", sess);
        const dt = performance.now() - t;
        const head = w.resultStep(), piece = head.text;
        out.push(head.id);
        text += piece;
        // a step runs the forward pass its predecessor needs (none for the first, none for a
        // token a speculative pass already verified), then samples
        if (out.length > 1) { decodeMs += dt; nDecoded++; }
        reason = head.done ? head.reason : "";
        const ev = {type: "token", token: head.id, text: piece,
                    telemetry: {n: out.length, elapsedMs: prefillMs + decodeMs,
                                decodeTokS: nDecoded ? nDecoded / (decodeMs / 1000) : 0,
                                memory: readMemoryStats(w)}};
        if (head.drafted !== undefined) {
          drafted = head.drafted; accepted = head.accepted;
          ev.telemetry.speculative = {drafted, accepted, acceptance: drafted ? accepted / drafted : 0};
        }
        if (head.logprob !== undefined) {
          ev.logprob = head.logprob;
          ev.top = head.top.map(([token, logprob]) => ({token, logprob}));
        }
        yield ev;
      }
      const mem = readMemoryStats(w);
      w.call("kw_session_telemetry", sess);
      const engine = w.resultJSON();
      if (slot) {  // the positions the KV holds: the prompt and the generated tokens fed
        kept = true;
        Object.assign(slot, {handle: sess, ids: ids.concat(out).slice(0, engine.n_pos), engine: engineKey, chunk, mode});
      }
      yield {type: "summary", engine, nCtx: engine.n_ctx, ids: out, text, reason, promptIds: ids, nPrompt: ids.length,
             cachedTokens: keep, nGenerated: out.length, nDecoded, prefillMs, decodeMs,
             prefillTokS: (ids.length - keep) / (prefillMs / 1000),
             decodeTokS: nDecoded ? nDecoded / (decodeMs / 1000) : 0,
             mode, memory: {...mem, atStart: mem0.linear},
             ...(draft ? {speculative: {draft: draft.info?.name ?? "draft", draftN: opts.draftN ?? 4, drafted, accepted, acceptance: drafted ? accepted / drafted : 0}}
                 : o.lookup > 0 ? {speculative: {lookup: o.lookup, drafted, accepted, acceptance: drafted ? accepted / drafted : 0}} : {})};
    } finally {
      if (!kept) w.exports.kw_session_free(sess);
    }
  }

  /**
   * A slot for generate({slot}): holds the session of the last generation that completed
   * (its KV and the ids it holds) for the next one to reuse; free() releases it.
   */
  slot() {
    const w = this.w;
    return {model: this, handle: 0, ids: [], engine: "", chunk: 0, mode: "",
            free() { if (this.handle && this.model.handle) w.exports.kw_session_free(this.handle); this.handle = 0; this.ids = []; }};
  }

  /**
   * A raw forward session: eval(ids) appends ids at the next positions and returns the
   * logits of the last one (Float32Array [n_vocab]); truncate(n) forgets positions >= n.
   * Options as generate()'s (checked by the same table): kvBudget bounds the KV cache bytes.
   */
  session({reference = false, nCtx, chunk, kvBudget} = {}) {
    const w = this.w;
    const o = JSON.stringify(coreOptions({reference, nCtx, chunk, kvBudget}));
    const h = w.withString(o, (p, n) => withOut(w, (out) => w.call("kw_session_new", this.#h(), p, n, out)));
    return {
      eval(ids) {
        const a = Int32Array.from(ids);
        const p = w.copyIn(new Uint8Array(a.buffer));
        try { w.call("kw_session_eval", h, p, a.length); } finally { w.free(p); }
        const b = w.resultBytes();
        return new Float32Array(b.buffer, b.byteOffset, b.length / 4);
      },
      truncate(n) { w.call("kw_session_reset", h, n); },
      free() { w.exports.kw_session_free(h); },
    };
  }

  /**
   * An embedding of a prompt: the mean over its positions of the final normed hidden state
   * (output_norm of the last layer), L2-normalised (kw_session_embed). Deterministic: the
   * same ids and options give the same bytes.
   * @param {string|number[]} prompt  text (BOS added, special-token text parsed, as
   *   generate()) or token ids
   * @param {{nCtx?: number, chunk?: number, reference?: boolean, addBos?: boolean, parseSpecial?: boolean}} [opts]
   *   nCtx: the session's context (default: the prompt's length)
   * @returns {Float32Array} [n_embd]
   */
  embed(prompt, {nCtx, chunk, reference = false, addBos = true, parseSpecial = true} = {}) {
    const w = this.w;
    const ids = typeof prompt === "string" ? this.tokenize(prompt, {addBos, parseSpecial}) : Array.from(prompt);
    if (ids.length === 0) throw new Error("knotwork: embed: the prompt encodes to no tokens");
    const o = JSON.stringify(coreOptions({reference, nCtx: nCtx ?? ids.length, chunk}));
    const h = w.withString(o, (p, n) => withOut(w, (out) => w.call("kw_session_new", this.#h(), p, n, out)));
    try {
      const a = Int32Array.from(ids);
      const p = w.copyIn(new Uint8Array(a.buffer));
      try { w.call("kw_session_embed", h, p, a.length); } finally { w.free(p); }
      const b = w.resultBytes();
      return new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.length));
    } finally { w.exports.kw_session_free(h); }
  }

  /** Collect generate(): {text, ids, ...summary}. */
  async complete(prompt, opts = {}) {
    let summary;
    for await (const ev of this.generate(prompt, opts)) if (ev.type === "summary") summary = ev;
    return summary;
  }

  /** The model re-encoded as .knot bytes (tensor types kept, hashes computed). */
  toKnot() {
    this.w.call("kw_model_to_knot", this.#h());
    return this.w.resultBytes();
  }

  close() {
    if (this.handle) { this.w.exports.kw_model_free(this.handle); this.handle = 0; }
  }
}
