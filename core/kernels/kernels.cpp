// kernels.cpp — kernel selection and the mat-vec / mat-mat drivers.
// Reference: dequantize the weight row to f32, dot in double accumulation (rounded to
//            f32 once at the end), activations unquantized.
// Scalar/Simd: activations quantized once per token to act_format(w) (in chunks of 64
//            tokens), then tiles of ROW_TILE weight rows x KMAX_TOK tokens through the
//            multi-token dot kernels (each weight block decoded once per token tile).
//            Per token the arithmetic does not depend on the tiling, so matmul equals a
//            loop of matvec bit for bit, and (quantized types) Simd equals Scalar.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"
#include "kernels/parallel.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace knot {

const char* kernel_name(Kernel k) {
  switch (k) {
    case Kernel::Reference: return "reference";
    case Kernel::Scalar: return "scalar";
    case Kernel::Simd: return "simd";
  }
  return "unknown";
}

#if defined(KNOT_HAVE_AVX2_TU)
// AVX2 + FMA via the compiler's CPU check (includes OS YMM support); F16C from CPUID
// leaf 1 ECX bit 29 (clang's __builtin_cpu_supports has no "f16c").
static bool cpu_has_avx2() {
  static const bool ok = [] {
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return false;
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    return (c & (1u << 29)) != 0;
  }();
  return ok;
}
// AVX-512 F/BW/VL + VNNI (the compiler's check includes OS ZMM state support).
static bool cpu_has_avx512vnni() {
  static const bool ok = cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  return ok;
}
// AVX-VNNI: CPUID leaf 7 subleaf 1 EAX bit 4 (GCC 12's __builtin_cpu_supports("avxvnni")
// reports 0 on CPUs that have it), on top of AVX2 (which covers OS YMM support).
static bool cpu_has_avxvnni() {
  static const bool ok = [] {
    if (!cpu_has_avx2()) return false;
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4)) != 0;
  }();
  return ok;
}
#endif

int usable_simd_tables(NamedKernels out[4]) {
  int n = 0;
#if defined(KNOT_WASM_RELAXED)
  out[n++] = {kDotWasmRelaxed.name, &kDotWasmRelaxed};
#elif defined(__wasm_simd128__)
  out[n++] = {kDotWasm.name, &kDotWasm};
#elif defined(KNOT_HAVE_AVX2_TU)
  if (cpu_has_avx512vnni()) out[n++] = {kDotAvx512Vnni.name, &kDotAvx512Vnni};
  if (cpu_has_avxvnni()) out[n++] = {kDotAvxVnni.name, &kDotAvxVnni};
  if (cpu_has_avx2()) out[n++] = {kDotAvx2.name, &kDotAvx2};
#endif
  return n;
}

bool simd_compiled() {
#if defined(__wasm_simd128__)
  return true;
#elif defined(KNOT_HAVE_AVX2_TU)
  return cpu_has_avx2();  // built in, and usable on this CPU
#else
  return false;
#endif
}

void f16_to_f32_row(const uint16_t* src, float* dst, size_t n) {
#if defined(KNOT_HAVE_AVX2_TU)
  if (cpu_has_avx2()) return f16_to_f32_row_f16c(src, dst, n);
#endif
  half_to_float_row(src, dst, n);
}

const char* simd_kernels_name() { return dot_kernels(Kernel::Simd).name; }

static const DotKernels* g_simd_override = nullptr;

void set_simd_kernels_for_test(const DotKernels* k) { g_simd_override = k; }

const DotKernels& dot_kernels(Kernel k) {
  if (k == Kernel::Simd) {
    if (g_simd_override) return *g_simd_override;
#if defined(KNOT_WASM_RELAXED)
    return kDotWasmRelaxed;
#elif defined(__wasm_simd128__)
    return kDotWasm;
#elif defined(KNOT_HAVE_AVX2_TU)
    if (cpu_has_avx512vnni()) return kDotAvx512Vnni;
    if (cpu_has_avxvnni()) return kDotAvxVnni;
    if (cpu_has_avx2()) return kDotAvx2;
#endif
  }
  return kDotGeneric;
}

// Weight types only (the table's storage rows); the traits say which activations.
static const TypeTraits& weight_traits(DType wtype) {
  const TypeTraits* tt = type_traits((uint32_t)wtype);
  if (!tt) fail("unsupported weight type id " + std::to_string((uint32_t)wtype));
  if (!tt->storage) fail(std::string(tt->name) + " is an activation format, not a weight type");
  return *tt;
}

DType vec_dot_type(DType wtype) { return weight_traits(wtype).vec_dot_type; }

ActFormat act_format(DType wtype) { return weight_traits(wtype).act; }

static DType act_dtype(ActFormat f) {  // formats quant.cpp knows
  return f == ActFormat::F32 ? DType::F32 : (f == ActFormat::Q8_0 ? DType::Q8_0 : DType::Q8_K);
}

size_t act_row_bytes(ActFormat f, int64_t n) {
  if (f != ActFormat::Q16_0) return row_bytes(act_dtype(f), n);
  if (n % QK8_0) fail("Q16_0 activations: row length " + std::to_string(n) + " is not a multiple of 32");
  return (size_t)(n / QK8_0) * sizeof(block_q16_0);
}

// Q16_0: d = amax/32767 in f32, q = nearest-even(x/d) clamped to +-32767 (rows are
// checked finite first by quantize_act_row).
void quantize_block_q16_0(const float* x, block_q16_0* y) {
  float amax = 0.f;
  for (int j = 0; j < QK8_0; j++) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 32767.f;
  const float id = d != 0.f ? 1.f / d : 0.f;
  y->d = d;
  for (int j = 0; j < QK8_0; j++) {
    const float v = std::nearbyint(x[j] * id);
    y->qs[j] = (int16_t)(v >= 32767.f ? 32767 : (v <= -32767.f ? -32767 : (v == v ? v : 0)));
  }
}

void quantize_act_row(ActFormat f, const float* x, void* dst, int64_t n) {
  if (f == ActFormat::Q16_0) {
    act_row_bytes(f, n);  // length check
    for (int64_t i = 0; i < n; i++)  // never a silent NaN (as quantize_row)
      if (!std::isfinite(x[i]))
        fail("quantize_act_row(Q16_0): non-finite value " + std::to_string(x[i]) + " at index " +
             std::to_string(i) + " of " + std::to_string(n));
    for (int64_t i = 0; i < n / QK8_0; i++) quantize_block_q16_0(x + i * QK8_0, (block_q16_0*)dst + i);
  } else {
    quantize_row(act_dtype(f), x, dst, n);
  }
}

void quantize_act_row(const DotKernels& k, ActFormat f, const float* x, void* dst, int64_t n) {
  const act_q_fn q = k.quant_act[(int)f];
  if (!q) return quantize_act_row(f, x, dst, n);
  act_row_bytes(f, n);  // length check
  q(x, dst, n);
}

void dequantize_act_row(ActFormat f, const void* src, float* dst, int64_t n) {
  if (f != ActFormat::Q16_0) return dequantize_row(act_dtype(f), src, dst, n);
  act_row_bytes(f, n);
  const block_q16_0* b = (const block_q16_0*)src;
  for (int64_t i = 0; i < n / QK8_0; i++)
    for (int j = 0; j < QK8_0; j++) dst[i * QK8_0 + j] = b[i].d * (float)b[i].qs[j];
}

dot_fn pick_mm_dot(const DotKernels& k, DType wtype) {
  if (act_format(wtype) == ActFormat::Q16_0) return k.dot_q16[type_index(wtype)];
  return pick_dot(k, wtype);
}

// Validates a weight type + row length; returns the weight row size in bytes.
static size_t check_weights(DType wtype, int64_t cols, const char* op) {
  const DType vt = vec_dot_type(wtype);  // throws for non-weight types
  const TypeTraits& wt = type_traits(wtype);
  const TypeTraits& at = type_traits(vt);
  if (cols < 0 || cols % wt.block_elems != 0 || cols % at.block_elems != 0)
    fail(std::string(op) + ": row length " + std::to_string(cols) + " is not a multiple of the " +
         wt.name + " block size " + std::to_string(std::max(wt.block_elems, at.block_elems)));
  return row_bytes(wtype, cols);
}

static dot_fn dot_for(DType wtype, Kernel k) {
  dot_fn f = pick_dot(dot_kernels(k), wtype);
  if (!f) fail(std::string("no dot kernel for weight type ") + dtype_name(wtype));
  return f;
}

float vec_dot(DType wtype, int64_t n, const void* w_row, const void* act, Kernel k) {
  check_weights(wtype, n, "vec_dot");
  if (k == Kernel::Reference) {
    // Reference on an already-quantized activation row: dequantize both sides.
    const DType vt = vec_dot_type(wtype);
    std::vector<float> wf((size_t)n), af((size_t)n);
    dequantize_row(wtype, w_row, wf.data(), n);
    dequantize_row(vt, act, af.data(), n);
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)wf[i] * (double)af[i];
    return (float)s;
  }
  const void* acts[1] = {act};
  float out = 0.f;
  dot_for(wtype, k)(n, w_row, acts, 1, &out);
  return out;
}

void matvec(DType wtype, const void* W, int64_t rows, int64_t cols, const float* x, float* y,
            Kernel k) {
  matmul_rows(wtype, W, 0, rows, cols, x, 1, y, k);
}

void matmul(DType wtype, const void* W, int64_t rows, int64_t cols, const float* X, int64_t ntok,
            float* Y, Kernel k) {
  matmul_rows(wtype, W, 0, rows, cols, X, ntok, Y, k);
}

static void matmul_reference(DType wtype, const uint8_t* W, size_t rb, int64_t r0, int64_t r1,
                             int64_t cols, const float* X, int64_t ntok, float* Y) {
  const int64_t nout = r1 - r0;
  std::vector<float> w((size_t)cols);  // [cols] one dequantized weight row
  for (int64_t r = r0; r < r1; r++) {
    dequantize_row(wtype, W + (size_t)r * rb, w.data(), cols);
    for (int64_t t = 0; t < ntok; t++) {
      const float* x = X + t * cols;
      double s = 0;
      for (int64_t c = 0; c < cols; c++) s += (double)w[c] * (double)x[c];
      Y[t * nout + (r - r0)] = (float)s;
    }
  }
}

// One token chunk of matmul_rows: activations quantized, weights from the range's first
// row. run_chunk_rows computes output rows [r0, r1) of it (parallel_rows' fn).
struct ChunkJob {
  dot_fn dot;
  mm_fn mm;  // the batched kernel, or nullptr: tiles of the dot kernel
  mm_fn mv;  // the decode kernel (one token, mm[] not taking it), or nullptr
  int64_t cols;
  const uint8_t* W;  // row 0 of the range
  size_t rb;
  const uint8_t* acts;
  size_t ab;
  int64_t nc;  // tokens in the chunk
  float* Y;    // [nc, nout]
  int64_t nout;
};

constexpr int64_t ROW_TILE = 16;  // weight rows kept in cache while every token tile passes

static void run_chunk_rows(void* ctx, int64_t r0, int64_t r1) {
  const ChunkJob& j = *(const ChunkJob*)ctx;
  if (j.mm) {  // batched kernel: all tokens of the chunk at once
    j.mm(j.cols, j.W + (size_t)r0 * j.rb, j.rb, r1 - r0, j.acts, j.ab, j.nc, j.Y + r0, j.nout);
    return;
  }
  if (j.mv) {  // decode kernel: one token, several rows per pass
    j.mv(j.cols, j.W + (size_t)r0 * j.rb, j.rb, r1 - r0, j.acts, j.ab, 1, j.Y + r0, j.nout);
    return;
  }
  for (int64_t rt = r0; rt < r1; rt += ROW_TILE) {
    const int64_t rt_end = std::min(r1, rt + ROW_TILE);
    for (int64_t t0 = 0; t0 < j.nc; t0 += KMAX_TOK) {
      const int nt = (int)std::min<int64_t>(KMAX_TOK, j.nc - t0);
      const void* acts[KMAX_TOK];
      for (int t = 0; t < nt; t++) acts[t] = j.acts + (size_t)(t0 + t) * j.ab;
      float* yt = j.Y + t0 * j.nout;  // [nt, nout]
      for (int64_t r = rt; r < rt_end; r++) {  // hot loop: one weight row x nt tokens
        float out[KMAX_TOK];
        j.dot(j.cols, j.W + (size_t)r * j.rb, acts, nt, out);
        for (int t = 0; t < nt; t++) yt[t * j.nout + r] = out[t];
      }
    }
  }
}

void matmul_rows(DType wtype, const void* W, int64_t row_begin, int64_t row_end, int64_t cols,
                 const float* X, int64_t ntok, float* Y, Kernel k) {
  const size_t rb = check_weights(wtype, cols, "matmul");
  if (row_begin < 0 || row_end < row_begin)
    fail("matmul: bad row range [" + std::to_string(row_begin) + ", " + std::to_string(row_end) +
         ")");
  if (ntok < 0) fail("matmul: negative token count " + std::to_string(ntok));
  const int64_t nout = row_end - row_begin;
  if (nout == 0 || ntok == 0) return;
  if (!W || !X || !Y) fail("matmul: null weight, input or output buffer");
  const uint8_t* Wb = (const uint8_t*)W;

  if (k == Kernel::Reference) {
    matmul_reference(wtype, Wb, rb, row_begin, row_end, cols, X, ntok, Y);
    return;
  }

  // Activations in vec_dot_type, quantized once per token. Tokens go in chunks of
  // TOK_CHUNK so the scratch stays small (64 x 18944 cols as Q8_K ~ 1.4 MB) for long
  // prefills in a 128 MB wasm budget; each chunk streams the weights once.
  const ActFormat af = act_format(wtype);
  const size_t ab = act_row_bytes(af, cols);
  const int64_t TOK_CHUNK = 64;
  std::unique_ptr<uint32_t[]> qa;  // [min(ntok, TOK_CHUNK), ab bytes], 4-byte aligned
  if (af != ActFormat::F32) qa.reset(new uint32_t[(ab * (size_t)std::min(ntok, TOK_CHUNK) + 3) / 4]);

  const dot_fn dot = pick_mm_dot(dot_kernels(k), wtype);
  if (!dot) fail(std::string("no matmul kernel for weight type ") + dtype_name(wtype));
  const mm_fn mm = pick_mm_batch(dot_kernels(k), wtype);
  const int64_t mm_min = dot_kernels(k).mm_min_tokens;
  const mm_fn mv = pick_mv(dot_kernels(k), wtype);
  for (int64_t c0 = 0; c0 < ntok; c0 += TOK_CHUNK) {
    const int64_t nc = std::min(TOK_CHUNK, ntok - c0);
    const uint8_t* acts_base;
    if (af == ActFormat::F32) {
      acts_base = (const uint8_t*)(X + c0 * cols);
    } else {
      for (int64_t t = 0; t < nc; t++)
        quantize_act_row(dot_kernels(k), af, X + (c0 + t) * cols, (uint8_t*)qa.get() + (size_t)t * ab, cols);
      acts_base = (const uint8_t*)qa.get();
    }
    // Output rows of this token chunk, split by parallel_rows (one thread per range; the
    // same code per row whatever the range, so the same bits for any thread count).
    const bool batched = mm && nc >= mm_min && cols % 256 == 0;
    ChunkJob job{dot, batched ? mm : nullptr, !batched && nc == 1 ? mv : nullptr, cols, Wb + (size_t)row_begin * rb, rb,
                 acts_base, ab, nc, Y + c0 * nout, nout};
    parallel_rows(nout, ROW_TILE, run_chunk_rows, &job);
  }
}

}  // namespace knot
