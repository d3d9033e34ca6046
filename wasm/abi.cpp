// abi.cpp — C ABI of the wasm module. Every entry goes through guard(): exceptions
// become a status code + kw_last_error(), memory high-water marks are sampled.
#include "abi.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "common.h"

#define KW_EXPORT(name) extern "C" __attribute__((export_name(#name)))

namespace {

std::string g_error;   // last error message
std::string g_result;  // module-owned result buffer

uint32_t g_peak_linear = 0;
uint32_t g_peak_heap = 0;

uint32_t linear_bytes() { return (uint32_t)(__builtin_wasm_memory_size(0) * 65536u); }
uint32_t heap_in_use() { return (uint32_t)mallinfo().uordblks; }

void sample_memory() {
  uint32_t l = linear_bytes(), h = heap_in_use();
  if (l > g_peak_linear) g_peak_linear = l;
  if (h > g_peak_heap) g_peak_heap = h;
}

template <class F>
int guard(F&& f) {
  sample_memory();
  int status = KW_OK;
  try {
    f();
  } catch (const knot::Error& e) {
    g_error = e.what();
    status = KW_ERR_KNOT;
  } catch (const std::bad_alloc&) {
    g_error = "out of memory: wasm linear memory is capped at 128 MB";
    status = KW_ERR_OOM;
  } catch (const std::exception& e) {
    g_error = e.what();
    status = KW_ERR_STD;
  } catch (...) {
    g_error = "unknown exception";
    status = KW_ERR_UNKNOWN;
  }
  sample_memory();
  return status;
}

}  // namespace

KW_EXPORT(kw_last_error) const char* kw_last_error() { return g_error.c_str(); }
KW_EXPORT(kw_last_error_len) uint32_t kw_last_error_len() { return (uint32_t)g_error.size(); }
KW_EXPORT(kw_result_ptr) const uint8_t* kw_result_ptr() { return (const uint8_t*)g_result.data(); }
KW_EXPORT(kw_result_len) uint32_t kw_result_len() { return (uint32_t)g_result.size(); }

KW_EXPORT(kw_alloc) void* kw_alloc(uint32_t n) {
  void* p = aligned_alloc(16, (n + 15) & ~15u);
  if (!p) g_error = "out of memory: kw_alloc(" + std::to_string(n) + ") failed (128 MB cap)";
  sample_memory();
  return p;
}
KW_EXPORT(kw_free) void kw_free(void* p) { free(p); }

KW_EXPORT(kw_memory_stats) int kw_memory_stats(uint32_t* out) {
  return guard([&] {
    if (!out) knot::fail("kw_memory_stats: null output pointer");
    out[0] = linear_bytes();
    out[1] = g_peak_linear;
    out[2] = heap_in_use();
    out[3] = g_peak_heap;
  });
}

KW_EXPORT(kw_memory_reset_peak) int kw_memory_reset_peak() {
  return guard([&] {
    g_peak_linear = linear_bytes();
    g_peak_heap = heap_in_use();
  });
}
