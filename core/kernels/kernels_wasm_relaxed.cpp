// kernels_wasm_relaxed.cpp — wasm relaxed-SIMD dot kernels (Kernel::Simd in the relaxed
// module build/wasm/knotwork-relaxed.wasm only). Compiled by clang-19 with -mrelaxed-simd
// (scripts/build-wasm.sh); empty everywhere else. The baseline module never contains it.
//
// i32x4.relaxed_dot_i8x16_i7x16_add(a, b, c): c[i] + sum_{j<4} a[4i+j] * b[4i+j], with a
// signed int8 and b "i7": the result is implementation-defined only when a lane of b has
// its top bit set (x86 engines read b unsigned, ARM signed) or when a pair saturates i16.
// Here b is always an unsigned weight quant with the top bit clear — Q4_K 0..15, Q6_K
// 0..63 (the -32 offset is applied afterwards through the Q8_K block sums, as the AVX2
// kernels do) — and a is the Q8_K activation, so |pair| <= 2*128*63 < 2^15 and every
// engine that implements the final opcode computes the same exact integers.
// Integer block sums are exact (order-free); the per-block float combine is the shared
// scalar block_accum_*, so results equal kernels_generic.cpp bit for bit.
//
// Table: kDotWasm with the Q4_K / Q6_K dot slots replaced (decode, and prefill tails).
// Prefill chunks keep kDotWasm's batched int16 kernels: matmul tiled through these dots
// measured 0.71x of them over 64 tokens in workerd (bench/kernels-relaxed.mjs).
#if defined(__wasm_relaxed_simd__)

#include "kernels/no_fp_contract.h"  // first: no FMA contraction (relaxed_madd) in this file

#include <wasm_simd128.h>

#include <cstring>

#include "kernels/kernels_internal.h"

namespace knot {

static inline int32_t hsum_i32x4(v128_t v) {
  v = wasm_i32x4_add(v, wasm_i32x4_shuffle(v, v, 2, 3, 0, 1));
  v = wasm_i32x4_add(v, wasm_i32x4_shuffle(v, v, 1, 0, 3, 2));
  return wasm_i32x4_extract_lane(v, 0);
}

// a: 16 int8 activations, b: 16 weights in 0..127.
static inline v128_t rdot(const int8_t* a, v128_t b, v128_t acc) {
  return wasm_i32x4_relaxed_dot_i8x16_i7x16_add(wasm_v128_load(a), b, acc);
}

// ---- Q4_K x Q8_K: per 32-weight sub-block j, <q_j, a_j> (q 0..15) by two relaxed dots,
// times the 6-bit scale sc[j] (i32 lanes), summed over the block; mins via the bsums.
template <int NT>
static void q4_K_relaxed(int64_t n, const void* w, const void* const* act, float* out) {
  const block_q4_K* x = (const block_q4_K*)w;
  const int64_t nb = n / QK_K;
  float acc[NT];
  for (int t = 0; t < NT; t++) acc[t] = 0.f;
  const v128_t m4 = wasm_i8x16_splat(0x0F), zero = wasm_i32x4_splat(0);
  for (int64_t i = 0; i < nb; i++) {
    uint8_t sc[8], m[8];
    k4_unpack_scales(x[i].scales, sc, m);
    const int8_t* a[NT];
    v128_t isum[NT];
    for (int t = 0; t < NT; t++) {
      a[t] = ((const block_q8_K*)act[t])[i].qs;
      isum[t] = zero;
    }
    for (int c = 0; c < 4; c++) {  // hot loop: 64 weights = sub-blocks 2c (low nibbles), 2c+1 (high)
      const uint8_t* qs = x[i].qs + 32 * c;
      const v128_t q0 = wasm_v128_load(qs), q1 = wasm_v128_load(qs + 16);
      const v128_t lo0 = wasm_v128_and(q0, m4), lo1 = wasm_v128_and(q1, m4);
      const v128_t hi0 = wasm_v128_and(wasm_u16x8_shr(q0, 4), m4), hi1 = wasm_v128_and(wasm_u16x8_shr(q1, 4), m4);
      const v128_t s_lo = wasm_i32x4_splat(sc[2 * c]), s_hi = wasm_i32x4_splat(sc[2 * c + 1]);
      for (int t = 0; t < NT; t++) {
        const int8_t* at = a[t] + 64 * c;
        const v128_t d_lo = rdot(at + 16, lo1, rdot(at, lo0, zero));
        const v128_t d_hi = rdot(at + 48, hi1, rdot(at + 32, hi0, zero));
        isum[t] = wasm_i32x4_add(isum[t], wasm_i32x4_add(wasm_i32x4_mul(d_lo, s_lo), wasm_i32x4_mul(d_hi, s_hi)));
      }
    }
    const float dw = half_to_float(x[i].d), dminw = half_to_float(x[i].dmin);
    for (int t = 0; t < NT; t++) {
      const block_q8_K* ab = (const block_q8_K*)act[t] + i;
      int32_t summs = 0;
      for (int j = 0; j < 8; j++) summs += m[j] * (ab->bsums[2 * j] + ab->bsums[2 * j + 1]);
      acc[t] = block_accum_kmin(acc[t], dw, dminw, ab->d, hsum_i32x4(isum[t]), summs);
    }
  }
  for (int t = 0; t < NT; t++) out[t] = acc[t];
}

// ---- Q6_K x Q8_K: unsigned q (0..63) per 16-weight sub-block by one relaxed dot, times
// the int8 scale, then subtract 32 * sum_j scale_j * bsums_j once per block.
template <int NT>
static void q6_K_relaxed(int64_t n, const void* w, const void* const* act, float* out) {
  const block_q6_K* x = (const block_q6_K*)w;
  const int64_t nb = n / QK_K;
  float acc[NT];
  for (int t = 0; t < NT; t++) acc[t] = 0.f;
  const v128_t m4 = wasm_i8x16_splat(0x0F), m30 = wasm_i8x16_splat(0x30), zero = wasm_i32x4_splat(0);
  for (int64_t i = 0; i < nb; i++) {
    const int8_t* scales = x[i].scales;
    v128_t isum[NT];
    for (int t = 0; t < NT; t++) isum[t] = zero;
    for (int h = 0; h < 2; h++) {
      const uint8_t* ql = x[i].ql + 64 * h;
      const uint8_t* qh = x[i].qh + 32 * h;
      for (int g = 0; g < 2; g++) {  // hot loop: l = 16g..16g+15 -> 4 x 16 weights
        const v128_t qa = wasm_v128_load(ql + 16 * g);
        const v128_t qb = wasm_v128_load(ql + 32 + 16 * g);
        const v128_t hb = wasm_v128_load(qh + 16 * g);
        // v[k]: elements 32k + 16g + (0..15) of this half = sub-block 8h + 2k + g
        v128_t v[4];
        v[0] = wasm_v128_or(wasm_v128_and(qa, m4), wasm_v128_and(wasm_i16x8_shl(hb, 4), m30));
        v[1] = wasm_v128_or(wasm_v128_and(qb, m4), wasm_v128_and(wasm_i16x8_shl(hb, 2), m30));
        v[2] = wasm_v128_or(wasm_v128_and(wasm_u16x8_shr(qa, 4), m4), wasm_v128_and(hb, m30));
        v[3] = wasm_v128_or(wasm_v128_and(wasm_u16x8_shr(qb, 4), m4), wasm_v128_and(wasm_u16x8_shr(hb, 2), m30));
        v128_t s[4];
        for (int k = 0; k < 4; k++) s[k] = wasm_i32x4_splat(scales[8 * h + 2 * k + g]);
        for (int t = 0; t < NT; t++) {
          const int8_t* a = ((const block_q8_K*)act[t])[i].qs + 128 * h + 16 * g;
          v128_t p = isum[t];
          for (int k = 0; k < 4; k++) p = wasm_i32x4_add(p, wasm_i32x4_mul(rdot(a + 32 * k, v[k], zero), s[k]));
          isum[t] = p;
        }
      }
    }
    const v128_t sc0 = wasm_i16x8_load8x8(scales), sc1 = wasm_i16x8_load8x8(scales + 8);
    const float dw = half_to_float(x[i].d);
    for (int t = 0; t < NT; t++) {
      const block_q8_K* a = (const block_q8_K*)act[t] + i;
      const v128_t off = wasm_i32x4_add(wasm_i32x4_dot_i16x8(wasm_v128_load(a->bsums), sc0),
                                        wasm_i32x4_dot_i16x8(wasm_v128_load(a->bsums + 8), sc1));
      acc[t] = block_accum(acc[t], dw, a->d, hsum_i32x4(isum[t]) - 32 * hsum_i32x4(off));
    }
  }
  for (int t = 0; t < NT; t++) out[t] = acc[t];
}

#define KNOT_NT_DISPATCH(name, tmpl)                                                     \
  static void name(int64_t n, const void* w, const void* const* act, int nt, float* out) { \
    switch (nt) {                                                                        \
      case 1: tmpl<1>(n, w, act, out); break;                                            \
      case 2: tmpl<2>(n, w, act, out); break;                                            \
      case 3: tmpl<3>(n, w, act, out); break;                                            \
      default: tmpl<4>(n, w, act, out); break;                                           \
    }                                                                                    \
  }

KNOT_NT_DISPATCH(dot_q4_K_relaxed, q4_K_relaxed)
KNOT_NT_DISPATCH(dot_q6_K_relaxed, q6_K_relaxed)

static DotKernels make_relaxed_table() {
  DotKernels k = kDotWasm;  // constant-initialized in kernels_wasm.cpp
  k.name = "wasm-relaxed-simd";
  k.dot[type_index(DType::Q4_K)] = dot_q4_K_relaxed;
  k.dot[type_index(DType::Q6_K)] = dot_q6_K_relaxed;
  return k;
}

const DotKernels kDotWasmRelaxed = make_relaxed_table();

// Known-answer probe for the loader (exported by wasm/abi.cpp as kw_relaxed_probe):
// io = 16 int8 a, then 16 bytes b (0..127), then 4 int32 c; the 4 int32 results
// overwrite c. The caller checks them against the exact answer it computes itself.
void relaxed_dot_probe(uint8_t* io) {
  const v128_t r = wasm_i32x4_relaxed_dot_i8x16_i7x16_add(wasm_v128_load(io), wasm_v128_load(io + 16),
                                                           wasm_v128_load(io + 32));
  wasm_v128_store(io + 32, r);
}

}  // namespace knot

#endif  // __wasm_relaxed_simd__
