// abi_heap.cpp — the module's malloc family, counting the bytes in use and their peak.
// mallinfo() walks every malloc chunk: with a real 128k-token vocabulary loaded that is
// ~21 ms, and the ABI sampled it on every call (so on every generated token). Here the
// public malloc / free / calloc / realloc / memalign / posix_memalign (aligned_alloc and
// operator new go through them) are strong definitions over emscripten_builtin_malloc /
// _free / _memalign (emscripten's dlmalloc.c makes the public names weak, for this), and
// every block's chunk size is added to or taken from a counter: O(1), and the peak is
// exact instead of sampled at ABI boundaries.
// In the threaded module (KNOT_WASM_THREADS) the pool's workers allocate kernel scratch,
// so each call holds a spin lock (dlmalloc-mt locks itself; the counters need it too).
#include <cstddef>
#include <cstdint>

#include "abi_internal.h"

#include <cstring>
#if defined(KNOT_WASM_THREADS)
#include <atomic>
#endif

// emscripten's dlmalloc.c: malloc, free and memalign under names an application's own
// malloc can call; malloc_usable_size stays dlmalloc's (not replaced here).
extern "C" {
void* emscripten_builtin_malloc(size_t);
void emscripten_builtin_free(void*);
void* emscripten_builtin_memalign(size_t, size_t);
size_t malloc_usable_size(void*);
}

namespace {
#if defined(KNOT_WASM_THREADS)
std::atomic<int> g_lock{0};
struct Locked {
  Locked() { while (g_lock.exchange(1, std::memory_order_acquire)) {} }
  ~Locked() { g_lock.store(0, std::memory_order_release); }
};
#else
struct Locked {
  Locked() {}  // single-threaded: no lock
};
#endif
// Each live block's chunk: its usable bytes + dlmalloc's size word (what mallinfo's
// uordblks counts).
size_t g_in_use = 0;
size_t g_peak = 0;

inline size_t chunk_bytes(void* p) { return malloc_usable_size(p) + sizeof(size_t); }
inline void* counted(void* p) {
  if (p) {
    g_in_use += chunk_bytes(p);
    if (g_in_use > g_peak) g_peak = g_in_use;
  }
  return p;
}
}  // namespace

extern "C" {
void* malloc(size_t n) {
  Locked l;
  return counted(emscripten_builtin_malloc(n));
}
void free(void* p) {
  if (!p) return;
  Locked l;
  g_in_use -= chunk_bytes(p);
  emscripten_builtin_free(p);
}
void* calloc(size_t n, size_t size) {
  if (size && n > SIZE_MAX / size) return nullptr;
  void* p = malloc(n * size);
  if (p) std::memset(p, 0, n * size);
  return p;
}
// Not in place: nothing hot reallocs (containers use operator new / delete).
void* realloc(void* old, size_t n) {
  if (!old) return malloc(n);
  if (n == 0) { free(old); return nullptr; }
  const size_t have = malloc_usable_size(old);
  if (n <= have) return old;
  void* p = malloc(n);
  if (!p) return nullptr;  // the old block stays as it was
  std::memcpy(p, old, have);
  free(old);
  return p;
}
void* memalign(size_t align, size_t n) {
  Locked l;
  return counted(emscripten_builtin_memalign(align, n));
}
int posix_memalign(void** out, size_t align, size_t n) {
  if (align < sizeof(void*) || (align & (align - 1))) return 22;  // EINVAL
  void* p = memalign(align, n);
  if (!p) return 12;  // ENOMEM
  *out = p;
  return 0;
}
}

namespace kw {
uint32_t heap_in_use() { return (uint32_t)g_in_use; }
uint32_t heap_peak() { return (uint32_t)g_peak; }
void heap_reset_peak() { g_peak = g_in_use; }
}  // namespace kw
