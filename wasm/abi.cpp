// abi.cpp — C ABI of the wasm module. Every entry goes through guard(): exceptions
// become a status code + kw_last_error(), memory high-water marks are sampled.
#include "abi.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "abi_internal.h"
#include "kernels/common.h"
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"
#include "container/model.h"
#include "kernels/quant.h"
#include "kernels/selftest.h"

namespace kw {

std::string g_error;
std::string g_result;

namespace {
uint32_t g_peak_linear = 0;

uint32_t linear_bytes() { return (uint32_t)(__builtin_wasm_memory_size(0) * 65536u); }
}  // namespace

void sample_memory() {
  const uint32_t l = linear_bytes();
  if (l > g_peak_linear) g_peak_linear = l;
}

}  // namespace kw

using namespace kw;

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
    out[3] = heap_peak();
  });
}

KW_EXPORT(kw_memory_reset_peak) int kw_memory_reset_peak() {
  return guard([&] {
    g_peak_linear = linear_bytes();
    heap_reset_peak();
  });
}

// ---- kernel benchmark ----------------------------------------------------------------
// JS times kw_bench_matvec_run (no clock import in the module). The matrix is `rows`
// distinct-address rows; only 16 distinct rows are quantized (the reference quantizers
// are slow) and then tiled, which keeps the memory traffic of a real matrix.

namespace {
struct BenchMat {
  knot::DType type;
  int64_t rows, cols;
  std::shared_ptr<uint8_t> w;  // rows * row_bytes
  std::vector<float> x, y;     // [cols], [rows]
};
Table<BenchMat> g_bench;

uint32_t lcg(uint64_t& s) {
  s = s * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(s >> 33);
}
float frand(uint64_t& s) { return (float)lcg(s) / 2147483648.0f - 1.0f; }  // [-1, 1)
}  // namespace

KW_EXPORT(kw_bench_matvec_prepare)
int kw_bench_matvec_prepare(uint32_t type_id, int32_t rows, int32_t cols, uint32_t seed, int32_t* out_handle) {
  return guard([&] {
    *out_handle = 0;
    knot::DType t = knot::dtype_from_id(type_id, "kw_bench_matvec_prepare");
    if (rows <= 0 || cols <= 0) knot::fail("kw_bench_matvec_prepare: rows and cols must be positive");
    size_t rb = knot::row_bytes(t, cols, "bench matrix");
    auto b = std::make_unique<BenchMat>();
    b->type = t;
    b->rows = rows;
    b->cols = cols;
    b->w = knot::alloc_aligned(rb * (size_t)rows);
    b->x.resize(cols);
    b->y.resize(rows);
    uint64_t s = seed * 2654435761ull + 1;
    std::vector<float> row(cols);
    const int distinct = rows < 16 ? rows : 16;
    for (int r = 0; r < distinct; r++) {
      for (auto& v : row) v = frand(s);
      knot::quantize_row(t, row.data(), b->w.get() + (size_t)r * rb, cols);
    }
    for (int r = distinct; r < rows; r++)
      std::memcpy(b->w.get() + (size_t)r * rb, b->w.get() + (size_t)(r % distinct) * rb, rb);
    for (auto& v : b->x) v = frand(s);
    // Where the data lives, so a host can run its own loop on the same bytes.
    set_result("{\"w_ptr\":" + std::to_string((uintptr_t)b->w.get()) + ",\"w_bytes\":" +
               std::to_string(rb * (size_t)rows) + ",\"row_bytes\":" + std::to_string(rb) +
               ",\"x_ptr\":" + std::to_string((uintptr_t)b->x.data()) +
               ",\"y_ptr\":" + std::to_string((uintptr_t)b->y.data()) + "}");
    *out_handle = g_bench.add(std::move(b));
  });
}

// kernel: 0 reference, 1 scalar, 2 simd. result: f64 checksum (sum of y) of the last run.
KW_EXPORT(kw_bench_matvec_run)
int kw_bench_matvec_run(int32_t h, int32_t kernel, int32_t iters) {
  return guard([&] {
    BenchMat& b = g_bench.get(h, "kw_bench_matvec_run");
    if (kernel < 0 || kernel > 2) knot::fail("kw_bench_matvec_run: kernel must be 0 (reference), 1 (scalar) or 2 (simd)");
    auto k = (knot::Kernel)kernel;
    for (int i = 0; i < iters; i++) knot::matvec(b.type, b.w.get(), b.rows, b.cols, b.x.data(), b.y.data(), k);
    double sum = 0;
    for (float v : b.y) sum += v;
    set_result_bytes(&sum, sizeof sum);
  });
}

KW_EXPORT(kw_bench_free)
int kw_bench_free(int32_t h) {
  return guard([&] {
    if (!g_bench.remove(h)) throw HandleError("kw_bench_free: unknown or freed handle " + std::to_string(h));
  });
}

// ---- kernel self-check -------------------------------------------------------------------
// result: {"failures": N, "simd": bool, "report": "..."} — SIMD (simd128) vs scalar on
// random and adversarial blocks, run inside the module.
KW_EXPORT(kw_kernel_selftest)
int kw_kernel_selftest(uint32_t seed) {
  return guard([&] {
    std::string report;
    int failures = knot::kernel_selftest(seed, &report);
    std::string out = "{\"failures\":" + std::to_string(failures) +
                      ",\"simd\":" + (knot::simd_compiled() ? "true" : "false") +
                      ",\"kernels\":\"" + knot::simd_kernels_name() + "\",\"report\":\"";
    for (char c : report) {  // JSON string escape
      if (c == '"' || c == '\\') out += '\\', out += c;
      else if (c == '\n') out += "\\n";
      else if ((unsigned char)c < 0x20) out += ' ';
      else out += c;
    }
    set_result(out + "\"}");
  });
}

#if defined(KNOT_WASM_RELAXED)
// Relaxed module only: io = int8 a[16], uint8 b[16] (0..127), int32 c[4]; c becomes
// i32x4.relaxed_dot_i8x16_i7x16_add(a, b, c). The loader runs it once on inputs it picks
// and checks the exact answer before choosing this module (bindings/wasm-choice.mjs).
KW_EXPORT(kw_relaxed_probe) void kw_relaxed_probe(uint8_t* io) { knot::relaxed_dot_probe(io); }
#endif

// ---- the type-traits table ------------------------------------------------------------------
// result: JSON array, one object per type of knot::all_types() (ids ascending):
// {id, name, block_elems, block_bytes, storage, k_quant, vec_dot_type, act_format,
//  max_rel_rms}. bindings/ reads sizes and ids from here instead of restating them.
KW_EXPORT(kw_type_traits)
int kw_type_traits() {
  return guard([&] {
    nlohmann::json out = nlohmann::json::array();
    for (const knot::TypeTraits& t : knot::all_types())
      out.push_back({{"id", (uint32_t)t.type},
                     {"name", t.name},
                     {"block_elems", t.block_elems},
                     {"block_bytes", t.block_bytes},
                     {"storage", t.storage},
                     {"k_quant", t.k_quant},
                     {"vec_dot_type", knot::dtype_name(t.vec_dot_type)},
                     {"act_format", knot::act_format_name(t.act)},
                     {"max_rel_rms", t.max_rel_rms}});
    set_result(out.dump());
  });
}

// ---- raw kernels over caller buffers ------------------------------------------------------
// Types are ggml ids; an unknown or non-storage type is an error naming it (never zeros).
// kernel: 0 reference, 1 scalar, 2 simd.

namespace {
knot::Kernel kernel_arg(int32_t k, const char* fn) {
  if (k < 0 || k > 2) knot::fail(std::string(fn) + ": kernel must be 0 (reference), 1 (scalar) or 2 (simd)");
  return (knot::Kernel)k;
}
void ptrs_ok(const char* fn, std::initializer_list<const void*> ps) {
  for (const void* p : ps)
    if (!p) knot::fail(std::string(fn) + ": null buffer");
}
}  // namespace

// dst[n] = dequantized row src (row_bytes(type, n) bytes)
KW_EXPORT(kw_dequantize_row)
int kw_dequantize_row(uint32_t type_id, const void* src, float* dst, int32_t n) {
  return guard([&] {
    ptrs_ok("kw_dequantize_row", {src, dst});
    knot::DType t = knot::dtype_from_id(type_id, "kw_dequantize_row");
    knot::row_bytes(t, n, "kw_dequantize_row");  // throws on a misaligned length
    knot::dequantize_row(t, src, dst, n);
  });
}

// dst (row_bytes(type, n) bytes) = reference quantization of src[n]
KW_EXPORT(kw_quantize_row)
int kw_quantize_row(uint32_t type_id, const float* src, void* dst, int32_t n) {
  return guard([&] {
    ptrs_ok("kw_quantize_row", {src, dst});
    knot::DType t = knot::dtype_from_id(type_id, "kw_quantize_row");
    knot::row_bytes(t, n, "kw_quantize_row");
    knot::quantize_row(t, src, dst, n);
  });
}

// y[rows] = W[rows, cols] x[cols]
KW_EXPORT(kw_matvec)
int kw_matvec(uint32_t type_id, const void* W, int32_t rows, int32_t cols, const float* x, float* y, int32_t kernel) {
  return guard([&] {
    ptrs_ok("kw_matvec", {W, x, y});
    knot::matvec(knot::dtype_from_id(type_id, "kw_matvec"), W, rows, cols, x, y, kernel_arg(kernel, "kw_matvec"));
  });
}

// Y[ntok, rows] = X[ntok, cols] W^T   (batched prefill form)
KW_EXPORT(kw_matmul)
int kw_matmul(uint32_t type_id, const void* W, int32_t rows, int32_t cols, const float* X, int32_t ntok, float* Y,
              int32_t kernel) {
  return guard([&] {
    ptrs_ok("kw_matmul", {W, X, Y});
    knot::matmul(knot::dtype_from_id(type_id, "kw_matmul"), W, rows, cols, X, ntok, Y, kernel_arg(kernel, "kw_matmul"));
  });
}
