// abi_threads.cpp — the thread pool of the threaded module (build/wasm/knotwork-mt.wasm,
// compiled with -DKNOT_WASM_THREADS; in the single-threaded modules this file is empty).
// No Emscripten pthread runtime: bindings/threads.mjs instantiates the same module once
// per worker (Node worker_threads, browser Workers) on the one shared WebAssembly.Memory.
//
// Life of a pool of T threads (the caller's thread + T-1 workers):
//   main:   kw_thread_main_tls() at start-up (its own TLS block), then
//           kw_thread_block() per worker -> a block {stack top, TLS, thread state},
//           allocated here (only the main thread allocates before the workers run);
//   worker: stackRestore(block's stack top) from JS, then kw_thread_main(block): TLS
//           (__wasm_init_tls), thread state, counts itself ready, then serves jobs
//           until kw_threads_stop();
//   main:   kw_threads_start(T-1) waits for them and installs the row runner
//           (core/kernels/parallel.h), so every matmul_rows splits its rows.
// A job: the caller publishes {fn, ctx, n, chunk} under a new ticket (job number in the
// high 32 bits, next chunk in the low), wakes the workers (memory.atomic.notify) and
// claims chunks itself; a worker claims a chunk by compare-and-swap on the ticket, so it
// can never take a chunk of a job it did not read. The caller returns when every chunk is
// done (it spins: a browser's main thread may not wait). Each output row is computed by
// exactly one thread with the same code: the same bits for any thread count.
#include "abi_internal.h"

#if defined(KNOT_WASM_THREADS)
#include <atomic>
#include <cstdlib>

#include "kernels/parallel.h"

using namespace kw;

extern "C" {
void __wasm_init_tls(void* mem);                          // wasm-ld, --shared-memory
void _emscripten_thread_init(void* self, int is_main, int is_runtime, int can_block, int profile);
}

namespace {

constexpr uint32_t kStackBytes = 512 << 10;  // per worker (the kernels use a few KB)
constexpr uint32_t kSelfBytes = 512;         // zeroed stand-in for musl's struct pthread

struct ThreadBlock {  // one per worker; JS reads stack_top (offset 0)
  uint32_t stack_top;
  void* stack;
  void* tls;
  void* self;
  int index;
};

std::atomic<uint64_t> g_ticket{0};   // job << 32 | next chunk
std::atomic<uint32_t> g_wake{0};     // job number, the word workers sleep on
std::atomic<int32_t> g_left{0};      // chunks of the current job not finished
std::atomic<int32_t> g_ready{0};     // workers that entered kw_thread_main
std::atomic<int32_t> g_stop{0};
std::atomic<knot::RowsFn> g_fn{nullptr};
std::atomic<void*> g_ctx{nullptr};
std::atomic<int64_t> g_n{0}, g_chunk{0};
std::atomic<int32_t> g_nchunks{0};
int g_workers = 0;
thread_local int t_index = 0;           // 0 the caller, i the worker of kw_thread_block(i)
std::atomic<uint32_t> g_rows[16] = {};  // rows each thread computed (kw_threads_rows)
uint32_t g_job = 0;  // the caller's job counter

// Claim and run chunks of job `job` until none is left; false when the ticket has moved
// on to another job.
void run_chunks(uint32_t job) {
  for (;;) {
    uint64_t t = g_ticket.load();
    if ((uint32_t)(t >> 32) != job) return;
    const knot::RowsFn fn = g_fn.load();
    void* ctx = g_ctx.load();
    const int64_t n = g_n.load(), chunk = g_chunk.load();
    const int32_t nchunks = g_nchunks.load();
    const uint32_t c = (uint32_t)t;
    if ((int32_t)c >= nchunks) return;
    if (!g_ticket.compare_exchange_strong(t, t + 1)) continue;  // someone else took it, or a new job
    const int64_t r0 = (int64_t)c * chunk, r1 = std::min(n, r0 + chunk);
    fn(ctx, r0, r1);
    g_rows[t_index & 15].fetch_add((uint32_t)(r1 - r0));
    g_left.fetch_sub(1);
  }
}

void pool_runner(int64_t n, int64_t grain, knot::RowsFn fn, void* ctx) {
  const int threads = g_workers + 1;
  // Two chunks per thread (a loaded host: a late thread's share is taken by the others),
  // whole grains; fewer when the rows are few.
  int64_t chunk = (n + 2 * threads - 1) / (2 * threads);
  chunk = (chunk + grain - 1) / grain * grain;
  const int32_t nchunks = (int32_t)((n + chunk - 1) / chunk);
  if (nchunks < 2) return fn(ctx, 0, n);
  const uint32_t job = ++g_job;
  g_fn.store(fn);
  g_ctx.store(ctx);
  g_n.store(n);
  g_chunk.store(chunk);
  g_nchunks.store(nchunks);
  g_left.store(nchunks);
  g_ticket.store((uint64_t)job << 32);
  g_wake.store(job);
  __builtin_wasm_memory_atomic_notify((int*)&g_wake, (unsigned)g_workers);
  run_chunks(job);
  while (g_left.load() != 0) {
  }
}

}  // namespace

KW_EXPORT(kw_thread_block) uint32_t kw_thread_block(int32_t index) {
  auto* b = (ThreadBlock*)calloc(1, sizeof(ThreadBlock));
  b->stack = aligned_alloc(16, kStackBytes);
  const size_t align = __builtin_wasm_tls_align() < 16 ? 16 : __builtin_wasm_tls_align();
  b->tls = aligned_alloc(align, (__builtin_wasm_tls_size() + align - 1) & ~(align - 1));
  b->self = calloc(1, kSelfBytes);
  if (!b->stack || !b->tls || !b->self) {
    g_error = "kw_thread_block: out of memory for a worker's stack";
    return 0;
  }
  *(void**)b->self = b->self;  // musl: pthread->self points at itself
  b->stack_top = (uint32_t)(uintptr_t)b->stack + kStackBytes;
  b->index = index;
  return (uint32_t)(uintptr_t)b;
}

// The caller's thread-local storage: bindings/threads.mjs calls this from the -mt libc's
// main-thread constructor hook (__emscripten_init_main_thread_js), before anything touches
// a thread_local (wasm-ld's shared-memory start function leaves __tls_base at 0).
KW_EXPORT(kw_thread_main_tls) void kw_thread_main_tls() {
  const size_t align = __builtin_wasm_tls_align() < 16 ? 16 : __builtin_wasm_tls_align();
  void* tls = aligned_alloc(align, (__builtin_wasm_tls_size() + align - 1) & ~(align - 1));
  if (!tls) __builtin_trap();  // at start-up, with the whole memory free
  __wasm_init_tls(tls);
}

// The worker's whole life; returns after kw_threads_stop().
KW_EXPORT(kw_thread_main) void kw_thread_main(uint32_t block) {
  auto* b = (ThreadBlock*)(uintptr_t)block;
  __wasm_init_tls(b->tls);
  _emscripten_thread_init(b->self, 0, 0, 1, 0);
  t_index = b->index;
  g_ready.fetch_add(1);
  uint32_t seen = g_wake.load();
  for (;;) {
    uint32_t w;
    for (int spin = 0; (w = g_wake.load()) == seen && !g_stop.load(); spin++) {
      if (spin > 20000) __builtin_wasm_memory_atomic_wait32((int*)&g_wake, (int)seen, 1000000000ll);
    }
    if (g_stop.load()) return;
    seen = w;
    run_chunks(w);
  }
}

// Wait (spinning, at most ~10 s) until `workers` workers are in kw_thread_main, then split
// every matmul_rows across them and the caller.
KW_EXPORT(kw_threads_start) int kw_threads_start(int32_t workers) {
  return guard([&] {
    if (workers < 0) knot::fail("kw_threads_start: negative worker count");
    for (int64_t i = 0; g_ready.load() < workers; i++)
      if (i > 2000000000ll) knot::fail("kw_threads_start: the workers did not start");
    g_workers = workers;
    knot::set_rows_runner(workers > 0 ? pool_runner : nullptr);
  });
}

KW_EXPORT(kw_threads_stop) int kw_threads_stop() {
  knot::set_rows_runner(nullptr);
  g_stop.store(1);
  __builtin_wasm_memory_atomic_notify((int*)&g_wake, 0xffffffffu);
  return 0;
}

// out[i] = rows thread i computed in split jobs so far (i < min(n, 16); 0 = the caller).
KW_EXPORT(kw_threads_rows) int kw_threads_rows(uint32_t* out, int32_t n) {
  for (int i = 0; i < n && i < 16; i++) out[i] = g_rows[i].load();
  return 0;
}

KW_EXPORT(kw_threads_count) int32_t kw_threads_count() { return g_workers + 1; }

#endif  // KNOT_WASM_THREADS
