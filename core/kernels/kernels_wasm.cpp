// kernels_wasm.cpp — wasm simd128 dot kernels (Kernel::Simd in the wasm build).
// Compiled only when __wasm_simd128__ is defined (CMake excludes this file natively).
//
// Design for V8's simd128 code generation: everything runs in 16-bit lanes.
// v128.load8x8_u / load8x8_s load 8 bytes and widen in one instruction (pmovzx/pmovsx),
// nibble/bit unpacking is done on those i16 lanes, the per-sub-block scale is folded
// into the weights with one i16x8.mul (|q*scale| < 2^15 for every format), and
// i32x4.dot_i16x8_s (pmaddwd) multiplies with the widened int8 activations, so each
// token costs one load + one dot + one add per 8 weights. Weight unpacking is shared by
// the NT (<= 4) tokens of a tile. Integer block sums are exact; the per-block float
// combine is the shared scalar block_accum_* (bit-identical to kernels_generic.cpp).
// Decode of Q8_0 / Q4_K goes through multi-row mat-vec kernels (mv_fn: 4 rows per pass,
// the float combine lanewise = rows); prefill through the batched mm_fn kernels below.
// Q6_K decode stays on the dot per row: a 4-row Q6_K mat-vec (activations widened once
// for 4 rows) measured 0.67-0.73x of it in workerd (CPU time, 2026-12-02; cause not examined).
#if defined(__wasm_simd128__)

#include <wasm_simd128.h>

#include <algorithm>
#include <cstddef>
#include <cmath>
#include <vector>

#include "kernels/kernels_internal.h"

namespace knot {

static inline int32_t hsum_i32x4(v128_t v) {
  v = wasm_i32x4_add(v, wasm_i32x4_shuffle(v, v, 2, 3, 0, 1));
  v = wasm_i32x4_add(v, wasm_i32x4_shuffle(v, v, 1, 0, 3, 2));
  return wasm_i32x4_extract_lane(v, 0);
}

static inline float hsum_f32x4(v128_t v) {
  v = wasm_f32x4_add(v, wasm_i32x4_shuffle(v, v, 2, 3, 0, 1));
  v = wasm_f32x4_add(v, wasm_i32x4_shuffle(v, v, 1, 0, 3, 2));
  return wasm_f32x4_extract_lane(v, 0);
}

// ---- float weights: 16 elements per step in four f32x4 accumulators per token
// (no FMA in simd128), fixed per-token order so matmul == loop of matvec.

template <int NT, typename Load4>
static inline void dot_float_wasm(int64_t n, const void* const* act, float* out, Load4 load) {
  v128_t acc[NT][4];
  for (int t = 0; t < NT; t++)
    for (int k = 0; k < 4; k++) acc[t][k] = wasm_f32x4_splat(0.f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {  // hot loop
    v128_t w[4];
    for (int k = 0; k < 4; k++) w[k] = load(i + 4 * k);
    for (int t = 0; t < NT; t++) {
      const float* a = (const float*)act[t] + i;
      for (int k = 0; k < 4; k++)
        acc[t][k] = wasm_f32x4_add(acc[t][k], wasm_f32x4_mul(w[k], wasm_v128_load(a + 4 * k)));
    }
  }
  for (int t = 0; t < NT; t++)
    out[t] = hsum_f32x4(wasm_f32x4_add(wasm_f32x4_add(acc[t][0], acc[t][1]),
                                       wasm_f32x4_add(acc[t][2], acc[t][3])));
}

// 4 halves -> 4 floats, exact: shift exponent+mantissa into f32 position and rescale by
// 2^112 (also normalises subnormal halves); inf/nan get the f32 all-ones exponent.
static inline v128_t half_bits_to_f32x4(v128_t h) {  // h: 4 halves in the low 16 bits of u32 lanes
  const v128_t sign = wasm_i32x4_shl(wasm_v128_and(h, wasm_i32x4_splat(0x8000)), 16);
  const v128_t em = wasm_i32x4_shl(wasm_v128_and(h, wasm_i32x4_splat(0x7FFF)), 13);
  const v128_t scaled = wasm_f32x4_mul(em, wasm_f32x4_splat(0x1p112f));
  const v128_t infnan = wasm_i32x4_eq(wasm_v128_and(h, wasm_i32x4_splat(0x7C00)), wasm_i32x4_splat(0x7C00));
  const v128_t special = wasm_v128_or(em, wasm_i32x4_splat(0x7F800000));
  return wasm_v128_or(sign, wasm_v128_bitselect(special, scaled, infnan));
}
static inline v128_t half4_to_f32x4(const uint16_t* p) { return half_bits_to_f32x4(wasm_u32x4_load16x4(p)); }

template <int NT>
static void f32_wasm(int64_t n, const void* w, const void* const* act, float* out) {
  const float* x = (const float*)w;
  dot_float_wasm<NT>(n, act, out, [x](int64_t i) { return wasm_v128_load(x + i); });
  for (int64_t i = n & ~(int64_t)15; i < n; i++)
    for (int t = 0; t < NT; t++) out[t] += x[i] * ((const float*)act[t])[i];
}

template <int NT>
static void f16_wasm(int64_t n, const void* w, const void* const* act, float* out) {
  const uint16_t* x = (const uint16_t*)w;
  dot_float_wasm<NT>(n, act, out, [x](int64_t i) { return half4_to_f32x4(x + i); });
  for (int64_t i = n & ~(int64_t)15; i < n; i++)
    for (int t = 0; t < NT; t++) out[t] += half_to_float(x[i]) * ((const float*)act[t])[i];
}

template <int NT>
static void bf16_wasm(int64_t n, const void* w, const void* const* act, float* out) {
  const uint16_t* x = (const uint16_t*)w;
  dot_float_wasm<NT>(n, act, out, [x](int64_t i) { return wasm_i32x4_shl(wasm_u32x4_load16x4(x + i), 16); });
  for (int64_t i = n & ~(int64_t)15; i < n; i++)
    for (int t = 0; t < NT; t++) out[t] += bf16_bits_to_float(x[i]) * ((const float*)act[t])[i];
}

// ---- Q4_0 / Q8_0 weights x Q8_0 (int8) or Q16_0 (int16) activations.
// One block loop for the four pairs; the overloads below say how each block unpacks.

static inline void unpack_w(const block_q4_0& b, v128_t wv[4]) {  // elems 0-7, 8-15 (low nibbles), 16-31 (high)
  const v128_t m4 = wasm_i16x8_splat(0x0F), k8 = wasm_i16x8_splat(8);
  for (int g = 0; g < 2; g++) {
    const v128_t q = wasm_u16x8_load8x8(b.qs + 8 * g);
    wv[g] = wasm_i16x8_sub(wasm_v128_and(q, m4), k8);
    wv[g + 2] = wasm_i16x8_sub(wasm_u16x8_shr(q, 4), k8);
  }
}
static inline void unpack_w(const block_q8_0& b, v128_t wv[4]) {
  for (int g = 0; g < 4; g++) wv[g] = wasm_i16x8_load8x8(b.qs + 8 * g);
}
static inline v128_t act_i16(const block_q8_0& a, int g) { return wasm_i16x8_load8x8(a.qs + 8 * g); }
static inline v128_t act_i16(const block_q16_0& a, int g) { return wasm_v128_load(a.qs + 8 * g); }  // straight into i16 lanes
static inline float act_scale(const block_q8_0& a) { return half_to_float(a.d); }
static inline float act_scale(const block_q16_0& a) { return a.d; }

template <int NT, class WBlock, class ABlock>
static void q_0_wasm(int64_t n, const void* w, const void* const* act, float* out) {
  static_assert(QK4_0 == QK8_0, "Q4_0 and Q8_0 blocks pair with the same activation blocks");
  const WBlock* x = (const WBlock*)w;
  const int64_t nb = n / QK8_0;
  float acc[NT];
  for (int t = 0; t < NT; t++) acc[t] = 0.f;
  for (int64_t i = 0; i < nb; i++) {  // hot loop
    v128_t wv[4];
    unpack_w(x[i], wv);
    const float dw = half_to_float(x[i].d);
    for (int t = 0; t < NT; t++) {
      const ABlock& a = ((const ABlock*)act[t])[i];
      v128_t s = wasm_i32x4_dot_i16x8(wv[0], act_i16(a, 0));
      for (int g = 1; g < 4; g++) s = wasm_i32x4_add(s, wasm_i32x4_dot_i16x8(wv[g], act_i16(a, g)));
      acc[t] = block_accum(acc[t], dw, act_scale(a), hsum_i32x4(s));
    }
  }
  for (int t = 0; t < NT; t++) out[t] = acc[t];
}

template <int NT>
static void q4_0_wasm(int64_t n, const void* w, const void* const* act, float* out) {
  q_0_wasm<NT, block_q4_0, block_q8_0>(n, w, act, out);
}
template <int NT>
static void q8_0_wasm(int64_t n, const void* w, const void* const* act, float* out) {
  q_0_wasm<NT, block_q8_0, block_q8_0>(n, w, act, out);
}
template <int NT>
static void q4_0_q16_wasm(int64_t n, const void* w, const void* const* act, float* out) {
  q_0_wasm<NT, block_q4_0, block_q16_0>(n, w, act, out);
}
template <int NT>
static void q8_0_q16_wasm(int64_t n, const void* w, const void* const* act, float* out) {
  q_0_wasm<NT, block_q8_0, block_q16_0>(n, w, act, out);
}

// ---- Q8_0 mat-vec (decode) x Q16_0: 4 weight rows per pass share every activation load;
// the 4 rows' block sums are transposed into one i32x4 (lanes = rows), their fp16 scales
// converted 4 at a time, and the float combine runs lanewise with the operations and
// order of block_accum (d = dw * da; acc + d * sumi), so each lane equals the dot kernel's
// result for its row bit for bit. Rows beyond the last multiple of 4 use the dot kernel.
// Software prefetch: wasm has no prefetch instruction, and the 4 interleaved row streams
// defeat the hardware prefetchers once the matrix is out of cache (Chromium, Zen 5,
// 98304 x 768: 4.8 G weights/s, vs 13 for the one-row dot and 20 cache-resident). Each
// block step therefore loads one byte from each of the 3 cache lines of the NEXT 4-row
// group that this step's share covers (4 * 34 = 136 bytes per step; the last group
// touches itself, so every load stays inside the matrix); the bytes go to a sink and
// never touch the results. Out of cache: 4.8 -> 20 G weights/s (bench/RESULTS.md).

static inline v128_t reduce4_i32(v128_t a, v128_t b, v128_t c, v128_t d) {  // -> [sum a, sum b, sum c, sum d]
  const v128_t ab = wasm_i32x4_add(wasm_i32x4_shuffle(a, b, 0, 4, 1, 5), wasm_i32x4_shuffle(a, b, 2, 6, 3, 7));
  const v128_t cd = wasm_i32x4_add(wasm_i32x4_shuffle(c, d, 0, 4, 1, 5), wasm_i32x4_shuffle(c, d, 2, 6, 3, 7));
  return wasm_i32x4_add(wasm_i32x4_shuffle(ab, cd, 0, 1, 4, 5), wasm_i32x4_shuffle(ab, cd, 2, 3, 6, 7));
}

KNOT_KERNEL_TLS uint32_t g_touch_sink;  // keeps mv_q8_0_wasm's touch loads alive

static void mv_q8_0_wasm(int64_t n, const uint8_t* W, size_t rb, int64_t nrows, const uint8_t* act, float* y) {
  static_assert(sizeof(block_q8_0) == 34 && offsetof(block_q8_0, qs) == 2, "block_q8_0 layout");
  static_assert(offsetof(block_q16_0, qs) == 4, "block_q16_0 layout");
  const int32_t nb = (int32_t)(n / QK8_0);
  const v128_t zero = wasm_i32x4_splat(0);
  uint32_t sink = 0;
  int64_t r = 0;
  for (; r + 4 <= nrows; r += 4) {
    // Pointer bumps with every load at a constant offset from one of them (V8 emits each
    // wasm address add as an instruction; base + i * 34 cost 4 muls and ~15 adds a step).
    const uint8_t* p0 = W + (size_t)r * rb;
    const uint8_t* p1 = p0 + rb;
    const uint8_t* p2 = p1 + rb;
    const uint8_t* p3 = p2 + rb;
    const uint8_t* pa = act;
    // next 4-row group (or this one for the last group: every touch stays in the matrix)
    const uint8_t* pt = W + (size_t)(r + 8 <= nrows ? r + 4 : r) * rb;
    v128_t acc = wasm_f32x4_splat(0.f);
    for (int32_t i = 0; i < nb; i++) {  // hot loop: 32 weights x 4 rows
      sink ^= (uint32_t)pt[0] ^ (uint32_t)pt[64] ^ (uint32_t)pt[128];
      const v128_t a0 = wasm_v128_load(pa + 4), a1 = wasm_v128_load(pa + 20);
      const v128_t a2 = wasm_v128_load(pa + 36), a3 = wasm_v128_load(pa + 52);
      auto row = [&](const uint8_t* b) {
        const v128_t s01 = wasm_i32x4_add(wasm_i32x4_dot_i16x8(wasm_i16x8_load8x8(b + 2), a0),
                                          wasm_i32x4_dot_i16x8(wasm_i16x8_load8x8(b + 10), a1));
        const v128_t s23 = wasm_i32x4_add(wasm_i32x4_dot_i16x8(wasm_i16x8_load8x8(b + 18), a2),
                                          wasm_i32x4_dot_i16x8(wasm_i16x8_load8x8(b + 26), a3));
        return wasm_i32x4_add(s01, s23);
      };
      const v128_t sumi = reduce4_i32(row(p0), row(p1), row(p2), row(p3));
      // the 4 fp16 scales zero-extended into u32 lanes (i16 lanes 0, 2, 4, 6)
      v128_t h = wasm_v128_load16_lane(p0, zero, 0);
      h = wasm_v128_load16_lane(p1, h, 2);
      h = wasm_v128_load16_lane(p2, h, 4);
      h = wasm_v128_load16_lane(p3, h, 6);
      const v128_t dw = half_bits_to_f32x4(h);
      const v128_t d = wasm_f32x4_mul(dw, wasm_v128_load32_splat(pa));  // block_q16_0::d
      acc = wasm_f32x4_add(acc, wasm_f32x4_mul(d, wasm_f32x4_convert_i32x4(sumi)));
      p0 += 34, p1 += 34, p2 += 34, p3 += 34, pa += 68, pt += 136;
    }
    wasm_v128_store(y + r, acc);
  }
  g_touch_sink = sink;
  for (; r < nrows; r++) {
    const void* one[1] = {act};
    q8_0_q16_wasm<1>(n, W + (size_t)r * rb, one, y + r);
  }
}

// ---- K-quants x Q8_K

// Q4_K / Q5_K. Scales and mins of all 8 sub-blocks decoded at once with 32-bit masks
// (same packing as k4_scale_min): bytes 0-3 of the 12 give sc0-3 (+ top bits of sc4-7),
// bytes 4-7 m0-3 (+ top bits of m4-7), bytes 8-11 the low nibbles of sc4-7 / m4-7.
struct KScales {
  v128_t sc16;    // i16x8: sc0..sc7
  v128_t mp[2];   // i16x8: m0,m0,m1,m1,m2,m2,m3,m3 / m4..m7 pairs (vs bsums)
};
static inline KScales k4_scales_wasm(const uint8_t* s) {
  uint32_t a, b, c;
  std::memcpy(&a, s, 4);
  std::memcpy(&b, s + 4, 4);
  std::memcpy(&c, s + 8, 4);
  const uint32_t sc_lo = a & 0x3F3F3F3Fu, m_lo = b & 0x3F3F3F3Fu;
  const uint32_t sc_hi = (c & 0x0F0F0F0Fu) | ((a >> 2) & 0x30303030u);
  const uint32_t m_hi = ((c >> 4) & 0x0F0F0F0Fu) | ((b >> 2) & 0x30303030u);
  const v128_t v8 = wasm_i32x4_make((int32_t)sc_lo, (int32_t)sc_hi, (int32_t)m_lo, (int32_t)m_hi);
  const v128_t m16 = wasm_u16x8_extend_high_u8x16(v8);
  KScales k;
  k.sc16 = wasm_u16x8_extend_low_u8x16(v8);
  k.mp[0] = wasm_i16x8_shuffle(m16, m16, 0, 0, 1, 1, 2, 2, 3, 3);
  k.mp[1] = wasm_i16x8_shuffle(m16, m16, 4, 4, 5, 5, 6, 6, 7, 7);
  return k;
}

// One chunk of 64 weights (sub-blocks 2C from low nibbles, 2C+1 from high nibbles).
// The 6-bit scale is folded into the weights (q*sc <= 31*63 fits i16) so each token
// needs only load8x8_s + dot + add per 8 weights.
template <int NT, int C, bool Q5>
static inline void kmin_chunk_wasm(const uint8_t* qs, const uint8_t* qh, const KScales& ks,
                                   const int8_t* const* a, v128_t* isum) {
  const v128_t m4 = wasm_i16x8_splat(0x0F), bit4 = wasm_i16x8_splat(0x10);
  const v128_t s_lo = wasm_i16x8_shuffle(ks.sc16, ks.sc16, 2 * C, 2 * C, 2 * C, 2 * C, 2 * C, 2 * C, 2 * C, 2 * C);
  const v128_t s_hi = wasm_i16x8_shuffle(ks.sc16, ks.sc16, 2 * C + 1, 2 * C + 1, 2 * C + 1, 2 * C + 1,
                                         2 * C + 1, 2 * C + 1, 2 * C + 1, 2 * C + 1);
  for (int g = 0; g < 4; g++) {  // hot loop: 8 bytes -> 8 low + 8 high weights
    const v128_t q = wasm_u16x8_load8x8(qs + 32 * C + 8 * g);
    v128_t lo = wasm_v128_and(q, m4);
    v128_t hi = wasm_u16x8_shr(q, 4);
    if (Q5) {  // fifth bit: qh[l] bit 2C (low) / 2C+1 (high)
      const v128_t h = wasm_u16x8_load8x8(qh + 8 * g);
      lo = wasm_v128_or(lo, wasm_v128_and(wasm_i16x8_shl(wasm_u16x8_shr(h, 2 * C), 4), bit4));
      hi = wasm_v128_or(hi, wasm_v128_and(wasm_i16x8_shl(wasm_u16x8_shr(h, 2 * C + 1), 4), bit4));
    }
    lo = wasm_i16x8_mul(lo, s_lo);
    hi = wasm_i16x8_mul(hi, s_hi);
    for (int t = 0; t < NT; t++) {
      const int8_t* at = a[t] + 64 * C + 8 * g;
      isum[t] = wasm_i32x4_add(isum[t], wasm_i32x4_add(wasm_i32x4_dot_i16x8(lo, wasm_i16x8_load8x8(at)),
                                                       wasm_i32x4_dot_i16x8(hi, wasm_i16x8_load8x8(at + 32))));
    }
  }
}

template <int NT, bool Q5>
static void kmin_wasm(int64_t n, const void* w, const void* const* act, float* out) {
  const int64_t nb = n / QK_K;
  const size_t bsz = Q5 ? sizeof(block_q5_K) : sizeof(block_q4_K);
  float acc[NT];
  for (int t = 0; t < NT; t++) acc[t] = 0.f;
  for (int64_t i = 0; i < nb; i++) {
    const uint8_t* blk = (const uint8_t*)w + (size_t)i * bsz;
    fp16_t d16, dmin16;
    std::memcpy(&d16, blk, 2);
    std::memcpy(&dmin16, blk + 2, 2);
    const uint8_t* qh = blk + 16;  // Q5_K only
    const uint8_t* qs = blk + (Q5 ? 48 : 16);
    const KScales ks = k4_scales_wasm(blk + 4);
    const int8_t* a[NT];
    v128_t isum[NT];
    for (int t = 0; t < NT; t++) {
      a[t] = ((const block_q8_K*)act[t])[i].qs;
      isum[t] = wasm_i32x4_splat(0);
    }
    kmin_chunk_wasm<NT, 0, Q5>(qs, qh, ks, a, isum);
    kmin_chunk_wasm<NT, 1, Q5>(qs, qh, ks, a, isum);
    kmin_chunk_wasm<NT, 2, Q5>(qs, qh, ks, a, isum);
    kmin_chunk_wasm<NT, 3, Q5>(qs, qh, ks, a, isum);
    const float dw = half_to_float(d16), dminw = half_to_float(dmin16);
    for (int t = 0; t < NT; t++) {
      const block_q8_K* ab = (const block_q8_K*)act[t] + i;
      const v128_t ms = wasm_i32x4_add(wasm_i32x4_dot_i16x8(wasm_v128_load(ab->bsums), ks.mp[0]),
                                       wasm_i32x4_dot_i16x8(wasm_v128_load(ab->bsums + 8), ks.mp[1]));
      acc[t] = block_accum_kmin(acc[t], dw, dminw, ab->d, hsum_i32x4(isum[t]), hsum_i32x4(ms));
    }
  }
  for (int t = 0; t < NT; t++) out[t] = acc[t];
}

// Q6_K: unsigned q (0..63) * scale (|.| <= 8064, fits i16), then subtract
// 32 * sum_j scale_j * bsums_j once per block.
template <int NT>
static void q6_K_wasm(int64_t n, const void* w, const void* const* act, float* out) {
  const block_q6_K* x = (const block_q6_K*)w;
  const int64_t nb = n / QK_K;
  float acc[NT];
  for (int t = 0; t < NT; t++) acc[t] = 0.f;
  const v128_t m4 = wasm_i16x8_splat(0x0F), m30 = wasm_i16x8_splat(0x30);
  for (int64_t i = 0; i < nb; i++) {
    const int8_t* scales = x[i].scales;
    v128_t isum[NT];
    for (int t = 0; t < NT; t++) isum[t] = wasm_i32x4_splat(0);
    for (int h = 0; h < 2; h++) {
      const uint8_t* ql = x[i].ql + 64 * h;
      const uint8_t* qh = x[i].qh + 32 * h;
      for (int g = 0; g < 4; g++) {  // hot loop: l = 8g..8g+7 -> 4 x 8 weights
        const int j = 8 * h + (g >> 1);  // sub-block of l; +2, +4, +6 for the other three
        const v128_t qa = wasm_u16x8_load8x8(ql + 8 * g);
        const v128_t qb = wasm_u16x8_load8x8(ql + 32 + 8 * g);
        const v128_t hb = wasm_u16x8_load8x8(qh + 8 * g);
        v128_t v[4];
        v[0] = wasm_v128_or(wasm_v128_and(qa, m4), wasm_v128_and(wasm_i16x8_shl(hb, 4), m30));
        v[1] = wasm_v128_or(wasm_v128_and(qb, m4), wasm_v128_and(wasm_i16x8_shl(hb, 2), m30));
        v[2] = wasm_v128_or(wasm_u16x8_shr(qa, 4), wasm_v128_and(hb, m30));
        v[3] = wasm_v128_or(wasm_u16x8_shr(qb, 4), wasm_v128_and(wasm_u16x8_shr(hb, 2), m30));
        for (int k = 0; k < 4; k++) v[k] = wasm_i16x8_mul(v[k], wasm_i16x8_splat(scales[j + 2 * k]));
        for (int t = 0; t < NT; t++) {
          const int8_t* a = ((const block_q8_K*)act[t])[i].qs + 128 * h + 8 * g;
          const v128_t s01 = wasm_i32x4_add(wasm_i32x4_dot_i16x8(v[0], wasm_i16x8_load8x8(a)),
                                            wasm_i32x4_dot_i16x8(v[1], wasm_i16x8_load8x8(a + 32)));
          const v128_t s23 = wasm_i32x4_add(wasm_i32x4_dot_i16x8(v[2], wasm_i16x8_load8x8(a + 64)),
                                            wasm_i32x4_dot_i16x8(v[3], wasm_i16x8_load8x8(a + 96)));
          isum[t] = wasm_i32x4_add(isum[t], wasm_i32x4_add(s01, s23));
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

template <int NT>
static void q4_K_wasm(int64_t n, const void* w, const void* const* act, float* out) {
  kmin_wasm<NT, false>(n, w, act, out);
}
template <int NT>
static void q5_K_wasm(int64_t n, const void* w, const void* const* act, float* out) {
  kmin_wasm<NT, true>(n, w, act, out);
}


// ---- Q4_K mat-vec (decode) x Q8_K: 4 weight rows per pass share the widened activations.
// Per 32-weight sub-block and row the integer dot is accumulated unscaled (q 0..15) and
// multiplied by the 6-bit scale once in i32 (exact: |.| < 2^31); the 4 rows' block sums
// and min corrections are transposed into i32x4 lanes = rows and the float combine runs
// lanewise with the operations and order of block_accum_kmin, so each lane equals the dot
// kernel's result for its row bit for bit. Rows beyond the last multiple of 4: the dot.
static inline v128_t lane_i16_to_i32(v128_t v, int j) {  // splat of u16 lane j as i32
  switch (j) {
    case 0: return wasm_i16x8_shuffle(v, wasm_i32x4_splat(0), 0, 8, 0, 8, 0, 8, 0, 8);
    case 1: return wasm_i16x8_shuffle(v, wasm_i32x4_splat(0), 1, 8, 1, 8, 1, 8, 1, 8);
    case 2: return wasm_i16x8_shuffle(v, wasm_i32x4_splat(0), 2, 8, 2, 8, 2, 8, 2, 8);
    case 3: return wasm_i16x8_shuffle(v, wasm_i32x4_splat(0), 3, 8, 3, 8, 3, 8, 3, 8);
    case 4: return wasm_i16x8_shuffle(v, wasm_i32x4_splat(0), 4, 8, 4, 8, 4, 8, 4, 8);
    case 5: return wasm_i16x8_shuffle(v, wasm_i32x4_splat(0), 5, 8, 5, 8, 5, 8, 5, 8);
    case 6: return wasm_i16x8_shuffle(v, wasm_i32x4_splat(0), 6, 8, 6, 8, 6, 8, 6, 8);
    default: return wasm_i16x8_shuffle(v, wasm_i32x4_splat(0), 7, 8, 7, 8, 7, 8, 7, 8);
  }
}

static void mv_q4_K_wasm(int64_t n, const uint8_t* W, size_t rb, int64_t nrows, const uint8_t* act, float* y) {
  const block_q8_K* a = (const block_q8_K*)act;
  const int64_t nb = n / QK_K;
  const v128_t m4 = wasm_i16x8_splat(0x0F), zero = wasm_i32x4_splat(0);
  int64_t r = 0;
  for (; r + 4 <= nrows; r += 4) {
    const block_q4_K* x[4];
    for (int k = 0; k < 4; k++) x[k] = (const block_q4_K*)(W + (size_t)(r + k) * rb);
    v128_t acc = wasm_f32x4_splat(0.f);
    for (int64_t i = 0; i < nb; i++) {
      KScales ks[4];
      for (int k = 0; k < 4; k++) ks[k] = k4_scales_wasm(x[k][i].scales);
      const int8_t* aq = a[i].qs;
      v128_t isum[4] = {zero, zero, zero, zero};
      for (int c = 0; c < 4; c++) {  // 64 weights: sub-block 2c (low nibbles), 2c+1 (high)
        v128_t dlo[4] = {zero, zero, zero, zero}, dhi[4] = {zero, zero, zero, zero};
#pragma clang loop unroll(disable)
        for (int g = 0; g < 4; g++) {  // hot loop: 8 bytes -> 8 low + 8 high weights x 4 rows
          const v128_t alo = wasm_i16x8_load8x8(aq + 64 * c + 8 * g), ahi = wasm_i16x8_load8x8(aq + 64 * c + 32 + 8 * g);
          for (int k = 0; k < 4; k++) {
            const v128_t q = wasm_u16x8_load8x8(x[k][i].qs + 32 * c + 8 * g);
            dlo[k] = wasm_i32x4_add(dlo[k], wasm_i32x4_dot_i16x8(wasm_v128_and(q, m4), alo));
            dhi[k] = wasm_i32x4_add(dhi[k], wasm_i32x4_dot_i16x8(wasm_u16x8_shr(q, 4), ahi));
          }
        }
        for (int k = 0; k < 4; k++)
          isum[k] = wasm_i32x4_add(isum[k], wasm_i32x4_add(wasm_i32x4_mul(dlo[k], lane_i16_to_i32(ks[k].sc16, 2 * c)),
                                                           wasm_i32x4_mul(dhi[k], lane_i16_to_i32(ks[k].sc16, 2 * c + 1))));
      }
      const v128_t b0 = wasm_v128_load(a[i].bsums), b1 = wasm_v128_load(a[i].bsums + 8);
      v128_t m[4];
      for (int k = 0; k < 4; k++)
        m[k] = wasm_i32x4_add(wasm_i32x4_dot_i16x8(b0, ks[k].mp[0]), wasm_i32x4_dot_i16x8(b1, ks[k].mp[1]));
      const v128_t sumi = reduce4_i32(isum[0], isum[1], isum[2], isum[3]);
      const v128_t summs = reduce4_i32(m[0], m[1], m[2], m[3]);
      const v128_t dw = half_bits_to_f32x4(wasm_u32x4_make(x[0][i].d, x[1][i].d, x[2][i].d, x[3][i].d));
      const v128_t dmw = half_bits_to_f32x4(wasm_u32x4_make(x[0][i].dmin, x[1][i].dmin, x[2][i].dmin, x[3][i].dmin));
      const v128_t da = wasm_f32x4_splat(a[i].d);
      const v128_t x1 = wasm_f32x4_mul(wasm_f32x4_mul(dw, da), wasm_f32x4_convert_i32x4(sumi));
      const v128_t x2 = wasm_f32x4_mul(wasm_f32x4_mul(dmw, da), wasm_f32x4_convert_i32x4(summs));
      acc = wasm_f32x4_add(acc, wasm_f32x4_sub(x1, x2));  // block_accum_kmin, lanewise
    }
    wasm_v128_store(y + r, acc);
  }
  for (; r < nrows; r++) {
    const void* one[1] = {act};
    kmin_wasm<1, false>(n, W + (size_t)r * rb, one, y + r);
  }
}

// ---- Batched prefill kernels (mm_fn, see kernels_internal.h) ---------------------------
// Per 256-weight super-block, RD weight rows are decoded once into int16 with the
// sub-block scale folded in (wdec: 8 KB, stays in L1) and reused by every token of the
// chunk; activation quants are widened to int16 once per call (a16). Register tile:
// 4 rows x 2 tokens = 8 i32x4 accumulators, one dot_i16x8 (pmaddwd) per 8 products and
// no per-token weight unpacking. At each float block the 4 rows' integer sums are
// reduced by one 4x4 transpose, and the float combine runs on f32x4 lanes = 4 rows with
// exactly the operations and order of block_accum / block_accum_kmin (lanewise IEEE,
// no FMA in simd128), so every output equals the dot kernel's bit for bit.
// Integer ranges: |decoded weight| <= 4096 (Q6_K (q-32)*sc), activations |a| <= 32768,
// block sums < 2^31 (256 * 4096 * 128; Q8_0 x Q16_0: 32 * 128 * 32768).

namespace {

constexpr int RD = 16;   // weight rows decoded per pass (4 register tiles of 4)
constexpr int SB = 256;  // weights per decoded super-block

struct MmScratch {
  std::vector<int16_t> a16;  // [nt][n] widened activation quants
  std::vector<float> ad;     // [nt][n/BE] activation block scales
  std::vector<int16_t> ap;   // [nt][n/256][8] Q8_K pair sums bsums[2j]+bsums[2j+1]
  std::vector<v128_t> acc;   // [RD/4][nt] f32x4 accumulators (lanes = 4 rows)
};
// Per thread (KNOT_KERNEL_TLS): the threaded module runs this kernel on several threads;
// there each thread's scratch is allocated at its first call (never freed: a thread_local
// with a destructor would need thread-exit support the pool does not have).
#if defined(KNOT_WASM_THREADS)
KNOT_KERNEL_TLS MmScratch* g_mm_p;
inline MmScratch& mm_scratch() { return g_mm_p ? *g_mm_p : *(g_mm_p = new MmScratch); }
#else
MmScratch g_mm;
inline MmScratch& mm_scratch() { return g_mm; }
#endif

alignas(16) KNOT_KERNEL_TLS int16_t wdec[RD][SB];  // decoded, pre-scaled weights of one super-block
alignas(16) KNOT_KERNEL_TLS float wd[8][RD];       // [block in super-block][row] weight scale d
alignas(16) KNOT_KERNEL_TLS float wdm[RD];         // [row] dmin (Q4_K/Q5_K)
alignas(16) KNOT_KERNEL_TLS int16_t wm[RD][8];     // [row] mins m0..m7 (Q4_K/Q5_K)

inline v128_t reduce4(v128_t a, v128_t b, v128_t c, v128_t d) {  // -> [sum a, sum b, sum c, sum d]
  const v128_t ab = wasm_i32x4_add(wasm_i32x4_shuffle(a, b, 0, 4, 1, 5), wasm_i32x4_shuffle(a, b, 2, 6, 3, 7));
  const v128_t cd = wasm_i32x4_add(wasm_i32x4_shuffle(c, d, 0, 4, 1, 5), wasm_i32x4_shuffle(c, d, 2, 6, 3, 7));
  return wasm_i32x4_add(wasm_i32x4_shuffle(ab, cd, 0, 1, 4, 5), wasm_i32x4_shuffle(ab, cd, 2, 3, 6, 7));
}

void zero_row(int r, bool pairs) {  // pairs: the row-pair layout of the Q8_0 / Q4_0 tiles
  if (pairs)
    for (int k = 0; k < SB; k += 8) wasm_v128_store64_lane(&wdec[0][0] + (r & ~1) * SB + 4 * (r & 1) + 2 * k, wasm_i16x8_splat(0), 0),
                                    wasm_v128_store64_lane(&wdec[0][0] + (r & ~1) * SB + 4 * (r & 1) + 2 * k + 8, wasm_i16x8_splat(0), 0);
  else
    std::memset(wdec[r], 0, sizeof wdec[r]);
  for (int b = 0; b < 8; b++) wd[b][r] = 0.f;
  wdm[r] = 0.f;
  std::memset(wm[r], 0, sizeof wm[r]);
}

template <bool Q5>
struct FmtKmin {  // Q4_K / Q5_K x Q8_K
  static constexpr int BE = 256, NBI = 1, GPB = 32;
  static constexpr bool KMIN = true, Q16 = false;
  static constexpr size_t BYTES = Q5 ? sizeof(block_q5_K) : sizeof(block_q4_K);
  static void decode(const uint8_t* blk, int r) {
    fp16_t d16, dmin16;
    std::memcpy(&d16, blk, 2);
    std::memcpy(&dmin16, blk + 2, 2);
    const uint8_t* qh = blk + 16;
    const uint8_t* qs = blk + (Q5 ? 48 : 16);
    uint8_t sc[8], m[8];
    k4_unpack_scales(blk + 4, sc, m);
    const v128_t m4 = wasm_i16x8_splat(0x0F), bit4 = wasm_i16x8_splat(0x10);
    for (int c = 0; c < 4; c++) {
      const v128_t s_lo = wasm_i16x8_splat(sc[2 * c]), s_hi = wasm_i16x8_splat(sc[2 * c + 1]);
      for (int g = 0; g < 4; g++) {
        const v128_t q = wasm_u16x8_load8x8(qs + 32 * c + 8 * g);
        v128_t lo = wasm_v128_and(q, m4), hi = wasm_u16x8_shr(q, 4);
        if (Q5) {
          const v128_t h = wasm_u16x8_load8x8(qh + 8 * g);
          lo = wasm_v128_or(lo, wasm_v128_and(wasm_i16x8_shl(wasm_u16x8_shr(h, 2 * c), 4), bit4));
          hi = wasm_v128_or(hi, wasm_v128_and(wasm_i16x8_shl(wasm_u16x8_shr(h, 2 * c + 1), 4), bit4));
        }
        wasm_v128_store(wdec[r] + 64 * c + 8 * g, wasm_i16x8_mul(lo, s_lo));
        wasm_v128_store(wdec[r] + 64 * c + 32 + 8 * g, wasm_i16x8_mul(hi, s_hi));
      }
    }
    wd[0][r] = half_to_float(d16);
    wdm[r] = half_to_float(dmin16);
    for (int j = 0; j < 8; j++) wm[r][j] = m[j];
  }
};

struct FmtQ6K {  // Q6_K x Q8_K: weights (q - 32) * sc
  static constexpr int BE = 256, NBI = 1, GPB = 32;
  static constexpr bool KMIN = false, Q16 = false;
  static constexpr size_t BYTES = sizeof(block_q6_K);
  static void decode(const uint8_t* p, int r) {
    const block_q6_K* x = (const block_q6_K*)p;
    const v128_t m4 = wasm_i16x8_splat(0x0F), m30 = wasm_i16x8_splat(0x30), k32 = wasm_i16x8_splat(32);
    for (int h = 0; h < 2; h++) {
      const uint8_t* ql = x->ql + 64 * h;
      const uint8_t* qh = x->qh + 32 * h;
      for (int g = 0; g < 4; g++) {
        const int j = 8 * h + (g >> 1);
        const v128_t qa = wasm_u16x8_load8x8(ql + 8 * g);
        const v128_t qb = wasm_u16x8_load8x8(ql + 32 + 8 * g);
        const v128_t hb = wasm_u16x8_load8x8(qh + 8 * g);
        v128_t v[4];
        v[0] = wasm_v128_or(wasm_v128_and(qa, m4), wasm_v128_and(wasm_i16x8_shl(hb, 4), m30));
        v[1] = wasm_v128_or(wasm_v128_and(qb, m4), wasm_v128_and(wasm_i16x8_shl(hb, 2), m30));
        v[2] = wasm_v128_or(wasm_u16x8_shr(qa, 4), wasm_v128_and(hb, m30));
        v[3] = wasm_v128_or(wasm_u16x8_shr(qb, 4), wasm_v128_and(wasm_u16x8_shr(hb, 2), m30));
        for (int k = 0; k < 4; k++)
          wasm_v128_store(wdec[r] + 128 * h + 32 * k + 8 * g,
                          wasm_i16x8_mul(wasm_i16x8_sub(v[k], k32), wasm_i16x8_splat(x->scales[j + 2 * k])));
      }
    }
    wd[0][r] = half_to_float(x->d);
  }
};

// Row-pair layout of the Q8_0 / Q4_0 tiles (in wdec's memory): rows 2p and 2p+1 of the
// pass share one 2*SB run, by groups of 4 weights: [row 2p k..k+3 | row 2p+1 k..k+3] at
// int16 offset 2p*SB + 2k, so one v128 load is 4 weights of 2 rows (see mm_tile_q16).
inline int16_t* pair_base(int r) { return &wdec[0][0] + (r & ~1) * SB + 4 * (r & 1); }
inline void store_pair8(int r, int k, v128_t v) {  // v: weights k..k+7 (k % 8 == 0) of row r
  int16_t* p = pair_base(r) + 2 * k;
  wasm_v128_store64_lane(p, v, 0);
  wasm_v128_store64_lane(p + 8, v, 1);
}

struct FmtQ8_0 {  // 8 x block_q8_0 x Q16_0
  static constexpr int BE = 32, NBI = 8, GPB = 4;
  static constexpr bool KMIN = false, Q16 = true;
  static constexpr size_t BYTES = 8 * sizeof(block_q8_0);
  static void decode(const uint8_t* p, int r) {
    const block_q8_0* x = (const block_q8_0*)p;
    for (int b = 0; b < 8; b++) {
      for (int g = 0; g < 4; g++) store_pair8(r, 32 * b + 8 * g, wasm_i16x8_load8x8(x[b].qs + 8 * g));
      wd[b][r] = half_to_float(x[b].d);
    }
  }
};

struct FmtQ4_0 {  // 8 x block_q4_0 x Q16_0
  static constexpr int BE = 32, NBI = 8, GPB = 4;
  static constexpr bool KMIN = false, Q16 = true;
  static constexpr size_t BYTES = 8 * sizeof(block_q4_0);
  static void decode(const uint8_t* p, int r) {
    const block_q4_0* x = (const block_q4_0*)p;
    const v128_t m4 = wasm_i16x8_splat(0x0F), k8 = wasm_i16x8_splat(8);
    for (int b = 0; b < 8; b++) {
      for (int g = 0; g < 2; g++) {
        const v128_t q = wasm_u16x8_load8x8(x[b].qs + 8 * g);
        store_pair8(r, 32 * b + 8 * g, wasm_i16x8_sub(wasm_v128_and(q, m4), k8));
        store_pair8(r, 32 * b + 16 + 8 * g, wasm_i16x8_sub(wasm_u16x8_shr(q, 4), k8));
      }
      wd[b][r] = half_to_float(x[b].d);
    }
  }
};

// 4 decoded rows (w, row stride SB) x NT tokens over one super-block; acc[t] += per block.
template <class F, int NT>
inline void mm_tile(const int16_t* w, const int16_t* const* a, const float* const* adt,
                    const int16_t* const* apt, int sub, v128_t* acc) {
  for (int b = 0; b < F::NBI; b++) {
    // Pointer bumps, rows reached by constant load offsets: V8 emits each wasm address
    // add as is (+12-25% over base+index adds). No clang unroll: it hoists the next
    // iterations' loads and V8 then spills the 8 accumulators (measured slower).
    const int16_t* wp = w + b * F::GPB * 8;
    const int16_t* ap[NT];
    for (int t = 0; t < NT; t++) ap[t] = a[t] + b * F::GPB * 8;
    // The block's first 8 weights start the sums (no zeroing, no add): for Q8_0 / Q4_0
    // (4 groups per float block) that is 2 of the ~13 vector ops per 8 products.
    v128_t s[4][NT];
    {
      v128_t av[NT];
      for (int t = 0; t < NT; t++) av[t] = wasm_v128_load(ap[t]), ap[t] += 8;
      for (int r = 0; r < 4; r++) {
        const v128_t wv = wasm_v128_load(wp + r * SB);
        for (int t = 0; t < NT; t++) s[r][t] = wasm_i32x4_dot_i16x8(wv, av[t]);
      }
      wp += 8;
    }
#pragma clang loop unroll(disable)
    for (int g = 1; g < F::GPB; g++) {  // hot loop: 8 weights x 4 rows x NT tokens
      v128_t av[NT];
      for (int t = 0; t < NT; t++) av[t] = wasm_v128_load(ap[t]), ap[t] += 8;
      for (int r = 0; r < 4; r++) {
        const v128_t wv = wasm_v128_load(wp + r * SB);
        for (int t = 0; t < NT; t++) s[r][t] = wasm_i32x4_add(s[r][t], wasm_i32x4_dot_i16x8(wv, av[t]));
      }
      wp += 8;
    }
    const v128_t dw = wasm_v128_load(&wd[b][4 * sub]);
    for (int t = 0; t < NT; t++) {
      const v128_t sumi = reduce4(s[0][t], s[1][t], s[2][t], s[3][t]);
      const v128_t da = wasm_f32x4_splat(adt[t][b]);
      const v128_t d = wasm_f32x4_mul(dw, da);
      if (F::KMIN) {  // block_accum_kmin, lanewise
        const v128_t pr = wasm_v128_load(apt[t]);
        const v128_t ms = reduce4(wasm_i32x4_dot_i16x8(wasm_v128_load(wm[4 * sub + 0]), pr),
                                  wasm_i32x4_dot_i16x8(wasm_v128_load(wm[4 * sub + 1]), pr),
                                  wasm_i32x4_dot_i16x8(wasm_v128_load(wm[4 * sub + 2]), pr),
                                  wasm_i32x4_dot_i16x8(wasm_v128_load(wm[4 * sub + 3]), pr));
        const v128_t dm = wasm_f32x4_mul(wasm_v128_load(&wdm[4 * sub]), da);
        const v128_t x1 = wasm_f32x4_mul(d, wasm_f32x4_convert_i32x4(sumi));
        const v128_t x2 = wasm_f32x4_mul(dm, wasm_f32x4_convert_i32x4(ms));
        acc[t] = wasm_f32x4_add(acc[t], wasm_f32x4_sub(x1, x2));
      } else {  // block_accum, lanewise
        acc[t] = wasm_f32x4_add(acc[t], wasm_f32x4_mul(d, wasm_f32x4_convert_i32x4(sumi)));
      }
    }
  }
}

// Q8_0 / Q4_0 (F::Q16): 4 rows (2 row pairs, w0 / w1) x NT <= 4 tokens per 32-weight
// block. Per 4 weights: one load per row pair, the token's 4 activations splatted to both
// halves (load64_splat), one dot_i16x8 = 2 rows x 4 weights; lanes [r0 r0 r1 r1] and
// [r2 r2 r3 r3], so the block's 4 row sums are one shuffle pair + add (integer, exact)
// instead of a 4x4 transpose, and 2 accumulators per token leave room for 4 tokens.
template <int NT>
inline void mm_tile_q16(const int16_t* w0, const int16_t* const* a, const float* const* adt, int sub, v128_t* acc) {
  const int16_t* w1 = w0 + 2 * SB;
  for (int b = 0; b < 8; b++) {
    v128_t s0[NT], s1[NT];
    const int16_t* wp0 = w0 + 64 * b;
    const int16_t* wp1 = w1 + 64 * b;
    const int16_t* ap[NT];
    for (int t = 0; t < NT; t++) ap[t] = a[t] + 32 * b;
    {  // the block's first 4 weights start the sums
      const v128_t x0 = wasm_v128_load(wp0), x1 = wasm_v128_load(wp1);
      for (int t = 0; t < NT; t++) {
        const v128_t av = wasm_v128_load64_splat(ap[t]);
        s0[t] = wasm_i32x4_dot_i16x8(x0, av);
        s1[t] = wasm_i32x4_dot_i16x8(x1, av);
        ap[t] += 4;
      }
      wp0 += 8, wp1 += 8;
    }
#pragma clang loop unroll(disable)
    for (int g = 1; g < 8; g++) {  // hot loop: 4 weights x 4 rows x NT tokens
      v128_t av[NT];
      for (int t = 0; t < NT; t++) av[t] = wasm_v128_load64_splat(ap[t]), ap[t] += 4;
      const v128_t x0 = wasm_v128_load(wp0);
      for (int t = 0; t < NT; t++) s0[t] = wasm_i32x4_add(s0[t], wasm_i32x4_dot_i16x8(x0, av[t]));
      const v128_t x1 = wasm_v128_load(wp1);
      for (int t = 0; t < NT; t++) s1[t] = wasm_i32x4_add(s1[t], wasm_i32x4_dot_i16x8(x1, av[t]));
      wp0 += 8, wp1 += 8;
    }
    const v128_t dw = wasm_v128_load(&wd[b][4 * sub]);
    for (int t = 0; t < NT; t++) {  // block_accum, lanewise
      const v128_t sumi = wasm_i32x4_add(wasm_i32x4_shuffle(s0[t], s1[t], 0, 2, 4, 6), wasm_i32x4_shuffle(s0[t], s1[t], 1, 3, 5, 7));
      const v128_t d = wasm_f32x4_mul(dw, wasm_f32x4_splat(adt[t][b]));
      acc[t] = wasm_f32x4_add(acc[t], wasm_f32x4_mul(d, wasm_f32x4_convert_i32x4(sumi)));
    }
  }
}

template <int NT>
inline void mm_tiles_q16(int nsub, const MmScratch& m, int64_t n, int64_t nbe, int64_t nt, int64_t s, int64_t t) {
  const int16_t* a[NT];
  const float* adt[NT];
  for (int i = 0; i < NT; i++) a[i] = m.a16.data() + (t + i) * n + s * SB, adt[i] = m.ad.data() + (t + i) * nbe + s * 8;
  for (int sub = 0; sub < nsub; sub++)
    mm_tile_q16<NT>(&wdec[0][0] + 4 * sub * SB, a, adt, sub, const_cast<v128_t*>(&m.acc[(size_t)(sub * nt + t)]));
}

template <class F>
void mm_wasm(int64_t n, const uint8_t* W, size_t rb, int64_t nrows, const uint8_t* act, size_t ab,
             int64_t nt, float* Y, int64_t ldy) {
  const int64_t ns = n / SB, nbe = n / F::BE;
  MmScratch& m = mm_scratch();
  m.a16.resize((size_t)(nt * n));
  m.ad.resize((size_t)(nt * nbe));
  if (F::KMIN) m.ap.resize((size_t)(nt * ns * 8));
  m.acc.resize((size_t)(RD / 4 * nt));
  // widen the activations once: [nt][n] int16 + scales (+ pair sums)
  for (int64_t t = 0; t < nt; t++) {
    int16_t* dst = m.a16.data() + t * n;
    if (F::Q16) {
      const block_q16_0* x = (const block_q16_0*)(act + (size_t)t * ab);
      for (int64_t i = 0; i < nbe; i++) {
        std::memcpy(dst + 32 * i, x[i].qs, sizeof x[i].qs);
        m.ad[(size_t)(t * nbe + i)] = x[i].d;
      }
    } else {
      const block_q8_K* x = (const block_q8_K*)(act + (size_t)t * ab);
      for (int64_t i = 0; i < ns; i++) {
        for (int g = 0; g < QK_K / 8; g++)
          wasm_v128_store(dst + QK_K * i + 8 * g, wasm_i16x8_load8x8(x[i].qs + 8 * g));
        m.ad[(size_t)(t * nbe + i)] = x[i].d;
        if (F::KMIN)
          for (int j = 0; j < 8; j++)
            m.ap[(size_t)((t * ns + i) * 8 + j)] = (int16_t)(x[i].bsums[2 * j] + x[i].bsums[2 * j + 1]);
      }
    }
  }
  for (int64_t r0 = 0; r0 < nrows; r0 += RD) {
    const int nr = (int)std::min<int64_t>(RD, nrows - r0), nsub = (nr + 3) / 4;
    for (int64_t k = 0; k < nsub * nt; k++) m.acc[(size_t)k] = wasm_f32x4_splat(0.f);
    for (int64_t s = 0; s < ns; s++) {
      for (int r = 0; r < 4 * nsub; r++) {
        if (r < nr) F::decode(W + (size_t)(r0 + r) * rb + (size_t)s * F::BYTES, r);
        else zero_row(r, F::Q16);
      }
      int64_t t = 0;
      if constexpr (F::Q16) {
        for (; t + 4 <= nt; t += 4) mm_tiles_q16<4>(nsub, m, n, nbe, nt, s, t);
        switch (nt - t) {
          case 3: mm_tiles_q16<3>(nsub, m, n, nbe, nt, s, t); break;
          case 2: mm_tiles_q16<2>(nsub, m, n, nbe, nt, s, t); break;
          case 1: mm_tiles_q16<1>(nsub, m, n, nbe, nt, s, t); break;
          default: break;
        }
        continue;
      }
      for (; t + 2 <= nt; t += 2) {
        const int16_t* a[2] = {m.a16.data() + t * n + s * SB, m.a16.data() + (t + 1) * n + s * SB};
        const float* adt[2] = {m.ad.data() + t * nbe + s * F::NBI, m.ad.data() + (t + 1) * nbe + s * F::NBI};
        const int16_t* apt[2] = {nullptr, nullptr};
        if (F::KMIN) apt[0] = m.ap.data() + (t * ns + s) * 8, apt[1] = m.ap.data() + ((t + 1) * ns + s) * 8;
        for (int sub = 0; sub < nsub; sub++) mm_tile<F, 2>(wdec[4 * sub], a, adt, apt, sub, &m.acc[(size_t)(sub * nt + t)]);
      }
      if (t < nt) {  // odd token count
        const int16_t* a[1] = {m.a16.data() + t * n + s * SB};
        const float* adt[1] = {m.ad.data() + t * nbe + s * F::NBI};
        const int16_t* apt[1] = {F::KMIN ? m.ap.data() + (t * ns + s) * 8 : nullptr};
        for (int sub = 0; sub < nsub; sub++) mm_tile<F, 1>(wdec[4 * sub], a, adt, apt, sub, &m.acc[(size_t)(sub * nt + t)]);
      }
    }
    for (int sub = 0; sub < nsub; sub++)
      for (int64_t t = 0; t < nt; t++) {
        alignas(16) float o[4];
        wasm_v128_store(o, m.acc[(size_t)(sub * nt + t)]);
        for (int r = 0; r < 4 && 4 * sub + r < nr; r++) Y[t * ldy + r0 + 4 * sub + r] = o[r];
      }
  }
}

}  // namespace

static void mm_q4_0_wasm(int64_t n, const uint8_t* W, size_t rb, int64_t nr, const uint8_t* a, size_t ab, int64_t nt, float* Y, int64_t ldy) {
  mm_wasm<FmtQ4_0>(n, W, rb, nr, a, ab, nt, Y, ldy);
}
static void mm_q8_0_wasm(int64_t n, const uint8_t* W, size_t rb, int64_t nr, const uint8_t* a, size_t ab, int64_t nt, float* Y, int64_t ldy) {
  mm_wasm<FmtQ8_0>(n, W, rb, nr, a, ab, nt, Y, ldy);
}
static void mm_q4_K_wasm(int64_t n, const uint8_t* W, size_t rb, int64_t nr, const uint8_t* a, size_t ab, int64_t nt, float* Y, int64_t ldy) {
  mm_wasm<FmtKmin<false>>(n, W, rb, nr, a, ab, nt, Y, ldy);
}
static void mm_q5_K_wasm(int64_t n, const uint8_t* W, size_t rb, int64_t nr, const uint8_t* a, size_t ab, int64_t nt, float* Y, int64_t ldy) {
  mm_wasm<FmtKmin<true>>(n, W, rb, nr, a, ab, nt, Y, ldy);
}
static void mm_q6_K_wasm(int64_t n, const uint8_t* W, size_t rb, int64_t nr, const uint8_t* a, size_t ab, int64_t nt, float* Y, int64_t ldy) {
  mm_wasm<FmtQ6K>(n, W, rb, nr, a, ab, nt, Y, ldy);
}

// ---- Activation quantizers (byte-identical to quant.cpp's Q8_K / kernels.cpp's Q16_0;
// blocks whose max is not finite go through the scalar code).
// Every step is a single x64 instruction under V8 (f32x4.min/max/nearest and
// i32x4.trunc_sat_f32x4 are NaN-safe multi-instruction sequences there):
//  - amax: integer max of the |x| bit patterns. For non-NaN floats >= 0 the i32 order
//    of the bits is the float order, so the max's bits are the largest magnitude's (a
//    NaN's bits exceed inf's, so a NaN block still reads as not finite).
//  - round: v + 1.5 * 2^23 rounds v to the nearest integer, ties to even (the sum's ulp
//    is 1 and 1.5 * 2^23 is even), and its bits minus the constant's are that integer,
//    exact for |v| < 2^22 (quant.cpp's nearest_int; here |v| <= ~32767).
//  - clamp in i32 after the rounding (the bounds are integers, so clamping the integer
//    valued float first gives the same value); Q16_0's +32767 bound is narrow's saturation.

static inline v128_t abs_bits_f32x4(v128_t v) { return wasm_v128_and(v, wasm_i32x4_splat(0x7FFFFFFF)); }

static inline float hmax_abs_bits(v128_t m) {  // m: |x| bits (max so far) -> the largest as float
  m = wasm_i32x4_max(m, wasm_i32x4_shuffle(m, m, 2, 3, 0, 1));
  m = wasm_i32x4_max(m, wasm_i32x4_shuffle(m, m, 1, 0, 3, 2));
  return wasm_f32x4_extract_lane(m, 0);
}

constexpr float kRoundMagic = 12582912.f;  // 1.5 * 2^23

static inline v128_t round_to_i32(v128_t v) {  // nearest integer, ties to even; |v| < 2^22
  const v128_t magic = wasm_f32x4_splat(kRoundMagic);
  return wasm_i32x4_sub(wasm_f32x4_add(v, magic), magic);
}

static void quant_q8_K_wasm(const float* x, void* dst, int64_t n) {
  block_q8_K* y = (block_q8_K*)dst;
  const float* x0 = x;
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    v128_t m = wasm_i32x4_splat(0);
    for (int j = 0; j < QK_K; j += 4) m = wasm_i32x4_max(m, abs_bits_f32x4(wasm_v128_load(x + j)));
    const float amax = hmax_abs_bits(m);
    if (!(amax < INFINITY)) {  // inf or nan: the scalar quantizer throws, naming the row index
      quantize_row(DType::Q8_K, x0, dst, n);
      return;
    }
    if (!(amax >= 1e-30f)) {  // zero or tiny (inf scale): scalar reference for this block
      quantize_row(DType::Q8_K, x, y + i, QK_K);
      continue;
    }
    int jm = 0;  // first element of largest magnitude (as the scalar scan picks it)
    while (std::fabs(x[jm]) != amax) jm++;
    const float iscale = -127.f / x[jm];  // |iscale * x| <= 127 (+ rounding)
    const v128_t vs = wasm_f32x4_splat(iscale), k127 = wasm_i32x4_splat(127);
    for (int g = 0; g < QK_K / 16; g++) {  // 16 values -> 16 int8 + their sum
      v128_t q[4];
      for (int k = 0; k < 4; k++)
        q[k] = wasm_i32x4_min(round_to_i32(wasm_f32x4_mul(vs, wasm_v128_load(x + 16 * g + 4 * k))), k127);
      const v128_t s = wasm_i32x4_add(wasm_i32x4_add(q[0], q[1]), wasm_i32x4_add(q[2], q[3]));
      y[i].bsums[g] = (int16_t)hsum_i32x4(s);
      const v128_t h0 = wasm_i16x8_narrow_i32x4(q[0], q[1]), h1 = wasm_i16x8_narrow_i32x4(q[2], q[3]);
      wasm_v128_store(y[i].qs + 16 * g, wasm_i8x16_narrow_i16x8(h0, h1));
    }
    y[i].d = 1.f / iscale;
  }
}

static void quant_q16_0_wasm(const float* x, void* dst, int64_t n) {
  block_q16_0* y = (block_q16_0*)dst;
  const float* x0 = x;
  const v128_t nlim = wasm_i32x4_splat(-32767);
  for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
    v128_t v[8];
    v128_t m = wasm_i32x4_splat(0);
    for (int k = 0; k < 8; k++) {
      v[k] = wasm_v128_load(x + 4 * k);
      m = wasm_i32x4_max(m, abs_bits_f32x4(v[k]));
    }
    const float amax = hmax_abs_bits(m);
    if (!(amax < INFINITY)) {  // inf or nan: the scalar quantizer throws, naming the row index
      quantize_act_row(ActFormat::Q16_0, x0, dst, n);
      return;
    }
    if (amax != 0.f && amax < 1e-30f) {  // tiny (huge 1/d): scalar reference for this block
      quantize_block_q16_0(x, y + i);
      continue;
    }
    const float d = amax / 32767.f;
    const float id = d != 0.f ? 1.f / d : 0.f;  // |x * id| <= 32767 (+ rounding)
    y[i].d = d;
    const v128_t vid = wasm_f32x4_splat(id);
    for (int k = 0; k < 8; k += 2) {
      const v128_t a = wasm_i32x4_max(round_to_i32(wasm_f32x4_mul(v[k], vid)), nlim);
      const v128_t b = wasm_i32x4_max(round_to_i32(wasm_f32x4_mul(v[k + 1], vid)), nlim);
      wasm_v128_store(y[i].qs + 4 * k, wasm_i16x8_narrow_i32x4(a, b));  // saturates at +32767
    }
  }
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

KNOT_NT_DISPATCH(dot_f32_wasm, f32_wasm)
KNOT_NT_DISPATCH(dot_f16_wasm, f16_wasm)
KNOT_NT_DISPATCH(dot_bf16_wasm, bf16_wasm)
KNOT_NT_DISPATCH(dot_q4_0_wasm, q4_0_wasm)
KNOT_NT_DISPATCH(dot_q8_0_wasm, q8_0_wasm)
KNOT_NT_DISPATCH(dot_q4_K_wasm, q4_K_wasm)
KNOT_NT_DISPATCH(dot_q5_K_wasm, q5_K_wasm)
KNOT_NT_DISPATCH(dot_q6_K_wasm, q6_K_wasm)
KNOT_NT_DISPATCH(dot_q4_0_q16_wasm, q4_0_q16_wasm)
KNOT_NT_DISPATCH(dot_q8_0_q16_wasm, q8_0_q16_wasm)

static constexpr DotKernels make_wasm_table() {
  DotKernels k;
  k.name = "wasm-simd128";
  k.dot[type_index(DType::F32)] = dot_f32_wasm;
  k.dot[type_index(DType::F16)] = dot_f16_wasm;
  k.dot[type_index(DType::BF16)] = dot_bf16_wasm;
  k.dot[type_index(DType::Q4_0)] = dot_q4_0_wasm;
  k.dot[type_index(DType::Q8_0)] = dot_q8_0_wasm;
  k.dot[type_index(DType::Q4_K)] = dot_q4_K_wasm;
  k.dot[type_index(DType::Q5_K)] = dot_q5_K_wasm;
  k.dot[type_index(DType::Q6_K)] = dot_q6_K_wasm;
  k.dot_q16[type_index(DType::Q4_0)] = dot_q4_0_q16_wasm;
  k.dot_q16[type_index(DType::Q8_0)] = dot_q8_0_q16_wasm;
  k.mv[type_index(DType::Q8_0)] = as_mv<mv_q8_0_wasm>;
  k.mv[type_index(DType::Q4_K)] = as_mv<mv_q4_K_wasm>;
  k.mm[type_index(DType::Q4_0)] = mm_q4_0_wasm;
  k.mm[type_index(DType::Q8_0)] = mm_q8_0_wasm;
  k.mm[type_index(DType::Q4_K)] = mm_q4_K_wasm;
  k.mm[type_index(DType::Q5_K)] = mm_q5_K_wasm;
  k.mm[type_index(DType::Q6_K)] = mm_q6_K_wasm;
  k.quant_act[(int)ActFormat::Q8_K] = quant_q8_K_wasm;
  k.quant_act[(int)ActFormat::Q16_0] = quant_q16_0_wasm;
  return k;
}

const DotKernels kDotWasm = make_wasm_table();

}  // namespace knot

#endif  // __wasm_simd128__
