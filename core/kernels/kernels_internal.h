// kernels_internal.h — shared between quant.cpp and the kernel back ends
// (kernels_generic.cpp, kernels_avx2.cpp, kernels_wasm.cpp). Not a public interface.
//
// Every dot kernel has one signature: a weight row of n elements against nt (1..4)
// activation rows already in the kernel's activation format (vec_dot_type, or Q16_0 for
// the *_q16 kernels); out[t] = dot(w, act[t]).
// A multi-token call decodes each weight block once and reuses it for all nt tokens.
//
// Numerics contract that makes Simd == Scalar bit for bit on the quantized types:
// each block's integer dot (and, for K-quants, the integer min correction) is exact,
// and the per-block float combine is done in scalar float, in block order, with the
// expressions written in block_accum_* below (floating contraction disabled in every
// kernel TU so no FMA changes rounding).
#pragma once
#include <cstdint>
#include <cstring>

#include "kernels/kernels.h"
#include "kernels/quant.h"

namespace knot {

// Mutable kernel scratch at namespace scope carries KNOT_KERNEL_TLS: thread_local in the
// threaded wasm module (kernels run on every thread of its pool, parallel.h), nothing
// elsewhere. Only trivially destructible types (a pointer to heap scratch, arrays): no
// thread-exit destructor is ever registered.
#if defined(KNOT_WASM_THREADS)
#define KNOT_KERNEL_TLS thread_local
#else
#define KNOT_KERNEL_TLS
#endif

constexpr int KMAX_TOK = 4;  // token tile width of the multi-token kernels

typedef void (*dot_fn)(int64_t n, const void* w, const void* const* act, int nt, float* out);

// Higher-precision activation format for Q4_0/Q8_0 weights in matvec/matmul: int16
// quants per 32-block with an f32 scale (d = amax/32767). Q8_0 activations (int8, fp16
// scale) moved Q8_0-model logits by up to 0.17; int16 makes activation rounding
// negligible (2^-16 relative) at the same integer-dot cost (pmaddwd / dot_i16x8 on the
// int16 lanes the int8 path widened to anyway). Products stay exact in i32:
// |q8 * q16| * 32 <= 127 * 32768 * 32 < 2^31.
struct block_q16_0 {
  float d;
  int16_t qs[QK8_0];
};
static_assert(sizeof(block_q16_0) == 68, "block_q16_0 size");

// Batched (prefill) kernel: Y[t*ldy + r] = dot(row r of W, act row t) for r < nrows,
// t < nt (nt >= 2), rows rb bytes apart, activation rows (act_format) ab bytes apart,
// n % 256 == 0. Must equal the table's dot_fn for every (r, t) bit for bit: same
// integer block sums, same per-block float combine in block order. Optional (nullptr:
// matmul_rows loops the dot_fn over tiles).
typedef void (*mm_fn)(int64_t n, const uint8_t* W, size_t rb, int64_t nrows, const uint8_t* act,
                      size_t ab, int64_t nt, float* Y, int64_t ldy);

// Mat-vec kernel body (decode, one token): y[r] = dot(row r of W, act) for r < nrows, rows
// rb bytes apart, act one row in act_format; bit for bit the table's dot_fn. A back end
// fills DotKernels::mv[] with it through as_mv<> (the mm_fn shape, nt == 1).
typedef void (*mv_fn)(int64_t n, const uint8_t* W, size_t rb, int64_t nrows, const uint8_t* act, float* y);
template <mv_fn F>
void as_mv(int64_t n, const uint8_t* W, size_t rb, int64_t nrows, const uint8_t* act, size_t, int64_t, float* Y, int64_t) {
  F(n, W, rb, nrows, act, Y);
}

// Activation quantizer: dst = n floats in an ActFormat (n a multiple of its block).
// A SIMD one must equal the scalar one byte for byte (nullptr: use the scalar one).
typedef void (*act_q_fn)(const float* x, void* dst, int64_t n);

// One back end's kernels, as arrays indexed by type id (type_index) — ggml's
// type_traits_cpu[] shape: a new type fills its slots, nothing else changes.
//   dot[t]       weights t x vec_dot_type(t) activations (every storage type)
//   dot_q16[t]   weights t x Q16_0 activations, for types whose act format is Q16_0
//   mm[t]        batched prefill kernel (may be nullptr: matmul_rows tiles the dot)
//   mv[t]        decode kernel: an mm_fn called with nt == 1, for single-token chunks that
//                mm[] does not take (mm_min_tokens > 1); may be nullptr (dot per row)
//   quant_act[f] SIMD activation quantizer of format f (may be nullptr: scalar one)
struct DotKernels {
  const char* name = "scalar";  // back end, for reports ("avx2", "wasm-simd128", ...)
  dot_fn dot[kDTypeSlots] = {};
  dot_fn dot_q16[kDTypeSlots] = {};
  mm_fn mm[kDTypeSlots] = {};
  mm_fn mv[kDTypeSlots] = {};
  act_q_fn quant_act[kActFormats] = {};
  int mm_min_tokens = 2;  // matmul_rows uses mm[] for chunks of at least this many tokens
};

inline mm_fn pick_mm_batch(const DotKernels& k, DType t) {
  const int i = type_index(t);
  return i >= 0 && i < kDTypeSlots ? k.mm[i] : nullptr;
}
inline mm_fn pick_mv(const DotKernels& k, DType t) {
  const int i = type_index(t);
  return i >= 0 && i < kDTypeSlots ? k.mv[i] : nullptr;
}

// Activation format matvec/matmul feed the kernels for weight type wtype (the traits'
// `act`): Q16_0 (block_q16_0) for Q4_0/Q8_0, else vec_dot_type(wtype). vec_dot() keeps
// vec_dot_type (the llama.cpp-compatible Q8_0 activations). Throws for non-weight types.
ActFormat act_format(DType wtype);
size_t act_row_bytes(ActFormat f, int64_t n);
void quantize_act_row(ActFormat f, const float* x, void* dst, int64_t n);
// Same bytes, using table k's quantizer when it has one.
void quantize_act_row(const DotKernels& k, ActFormat f, const float* x, void* dst, int64_t n);
// The scalar Q16_0 quantizer of one 32-block (nearest-even, clamped to +-32767).
void quantize_block_q16_0(const float* x, block_q16_0* y);
void dequantize_act_row(ActFormat f, const void* src, float* dst, int64_t n);
// Dot kernel of table k for weights wtype against act_format(wtype) activations.
dot_fn pick_mm_dot(const DotKernels& k, DType wtype);

// Scalar integer kernels (kernels_generic.cpp): always available.
extern const DotKernels kDotGeneric;
// Native AVX2+FMA+F16C kernels (kernels_avx2.cpp); only valid when the CPU has them.
#if defined(__x86_64__) || defined(__i386__)
#define KNOT_HAVE_AVX2_TU 1
extern const DotKernels kDotAvx2;
// Q4_K / Q6_K x Q8_K decode mat-vecs (mv_fn), 8 rows per pass, bit for bit the dot kernels
// (kernels_avx2.cpp; the AVX-VNNI table's one-token path too). AVX2+F16C CPUs only.
void mv_q4_K_rows8_avx2(int64_t n, const uint8_t* W, size_t rb, int64_t nrows, const uint8_t* act, float* Y);
void mv_q6_K_rows8_avx2(int64_t n, const uint8_t* W, size_t rb, int64_t nrows, const uint8_t* act, float* Y);
// f16_to_f32_row with F16C (kernels_avx2.cpp); only valid when the CPU has AVX2+F16C.
void f16_to_f32_row_f16c(const uint16_t* src, float* dst, size_t n);
// AVX-512 F/BW/VL + AVX512-VNNI kernels (kernels_avx512.cpp); only valid when the CPU has them.
extern const DotKernels kDotAvx512Vnni;
// AVX-VNNI (256-bit VEX) kernels (kernels_avxvnni.cpp); only valid when the CPU has them.
extern const DotKernels kDotAvxVnni;
#endif
// wasm simd128 kernels (kernels_wasm.cpp).
#if defined(__wasm_simd128__)
extern const DotKernels kDotWasm;
#endif
// wasm relaxed-SIMD kernels (kernels_wasm_relaxed.cpp, clang-19 -mrelaxed-simd); only in
// the relaxed module, whose kernels.cpp is compiled with -DKNOT_WASM_RELAXED.
#if defined(KNOT_WASM_RELAXED) || defined(__wasm_relaxed_simd__)
extern const DotKernels kDotWasmRelaxed;
// io: int8 a[16], uint8 b[16] (0..127), int32 c[4] -> c = relaxed_dot_i8x16_i7x16_add(a, b, c).
void relaxed_dot_probe(uint8_t* io);
#endif

// Every SIMD table this machine can run, best first (natively: AVX-512 VNNI, AVX-VNNI, AVX2; wasm:
// the module's one). Tests iterate it so each variant is checked against the scalar one.
struct NamedKernels {
  const char* name;
  const DotKernels* table;
};
int usable_simd_tables(NamedKernels out[4]);

// The table Kernel k runs on this machine (Simd falls back to kDotGeneric). kernels.cpp.
const DotKernels& dot_kernels(Kernel k);
// Test hook: replace the Simd table (nullptr restores). Lets tests prove that the
// selftest catches a deliberately broken SIMD kernel. Not thread-safe; tests only.
void set_simd_kernels_for_test(const DotKernels* k);

inline dot_fn pick_dot(const DotKernels& k, DType t) {
  const int i = type_index(t);
  return i >= 0 && i < kDTypeSlots ? k.dot[i] : nullptr;
}

// Q4_K/Q5_K packed 6-bit scale and min of sub-block j (0..7) from the 12 scale bytes:
// bytes 0..3 hold scales 0..3 (low 6 bits) and the top 2 bits of scales 4..7,
// bytes 4..7 hold mins 0..3 and the top 2 bits of mins 4..7, bytes 8..11 hold the low
// nibbles of scales 4..7 (low) and mins 4..7 (high).
inline void k4_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (uint8_t)((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
    *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Unpack all 8 scales and 8 mins of a Q4_K/Q5_K block.
inline void k4_unpack_scales(const uint8_t* q, uint8_t sc[8], uint8_t m[8]) {
  for (int j = 0; j < 8; j++) k4_scale_min(j, q, &sc[j], &m[j]);
}

// Per-block float combines shared by all back ends (see header comment).
// K-quants with mins: acc += (dw*da)*sumi - (dminw*da)*summs.
inline float block_accum_kmin(float acc, float dw, float dminw, float da, int32_t sumi,
                              int32_t summs) {
  const float d = dw * da;
  const float dm = dminw * da;
  const float a = d * (float)sumi;
  const float b = dm * (float)summs;
  return acc + (a - b);
}
// Q6_K, Q4_0, Q8_0: acc += (dw*da)*sumi.
inline float block_accum(float acc, float dw, float da, int32_t sumi) {
  const float d = dw * da;
  return acc + d * (float)sumi;
}

}  // namespace knot
