// kernels_avx2.cpp — AVX2/FMA/F16C dot kernels (Kernel::Simd natively). Compiled with
// -mavx2 -mfma -mf16c (CMakeLists.txt); used only when the CPU reports all three.
// Integer block dots are exact; per-block float combine is the shared scalar
// block_accum_* with contraction off, so results equal kernels_generic.cpp bit for bit.
// Multi-token (NT <= 4): each weight block is loaded and unpacked once, then multiplied
// with every token's activation block. Prefill (matmul, 2+ tokens) has batched kernels:
// Q4_0/Q8_0 x Q16_0 (8-row x 4-token vpmaddwd tiles on pair-major int16 panels) and
// Q4_K/Q6_K x Q8_K (8-row x 8-token maddubs tiles).
// Q4_0/Q8_0 and Q4_K/Q6_K decode (one token) run 8-row lanes-as-rows kernels in mv[] (no
// per-row horizontal sum or scalar combine per block; mv_q4_K_rows8_avx2 below).
// f16_to_f32_row_f16c: the F16 KV cache read (kernels.h f16_to_f32_row) with F16C.
#if defined(__x86_64__) || defined(__i386__)

#include "kernels/no_fp_contract.h"  // first: no FMA contraction in this file

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/kernels_internal.h"

namespace knot {

static inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

static inline float hsum_f32(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Exact signed 8-bit dot of 32 bytes: sign-extend to 16 bits, madd (no saturation).
static inline __m256i dot_i8x32(__m256i w_lo16, __m256i w_hi16, const int8_t* a) {
  const __m256i a_lo = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)a));
  const __m256i a_hi = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(a + 16)));
  return _mm256_add_epi32(_mm256_madd_epi16(w_lo16, a_lo), _mm256_madd_epi16(w_hi16, a_hi));
}

// ---- float weights: 16 elements per step, two accumulators per token, scalar tail.
// The per-token operation sequence does not depend on NT (matmul == loop of matvec).

template <int NT, typename Load16>
static inline void dot_float_avx2(int64_t n, const void* const* act, float* out, Load16 load) {
  __m256 acc0[NT], acc1[NT];
  for (int t = 0; t < NT; t++) acc0[t] = acc1[t] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {  // hot loop
    __m256 w0, w1;
    load(i, w0, w1);
    for (int t = 0; t < NT; t++) {
      const float* a = (const float*)act[t] + i;
      acc0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(a), acc0[t]);
      acc1[t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(a + 8), acc1[t]);
    }
  }
  for (int t = 0; t < NT; t++) out[t] = hsum_f32(_mm256_add_ps(acc0[t], acc1[t]));
}

template <int NT>
static void f32_avx2(int64_t n, const void* w, const void* const* act, float* out) {
  const float* x = (const float*)w;
  dot_float_avx2<NT>(n, act, out, [x](int64_t i, __m256& w0, __m256& w1) {
    w0 = _mm256_loadu_ps(x + i);
    w1 = _mm256_loadu_ps(x + i + 8);
  });
  for (int64_t i = n & ~(int64_t)15; i < n; i++)
    for (int t = 0; t < NT; t++) out[t] += x[i] * ((const float*)act[t])[i];
}

template <int NT>
static void f16_avx2(int64_t n, const void* w, const void* const* act, float* out) {
  const uint16_t* x = (const uint16_t*)w;
  dot_float_avx2<NT>(n, act, out, [x](int64_t i, __m256& w0, __m256& w1) {
    w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(x + i)));
    w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(x + i + 8)));
  });
  for (int64_t i = n & ~(int64_t)15; i < n; i++)
    for (int t = 0; t < NT; t++) out[t] += half_to_float(x[i]) * ((const float*)act[t])[i];
}

template <int NT>
static void bf16_avx2(int64_t n, const void* w, const void* const* act, float* out) {
  const uint16_t* x = (const uint16_t*)w;
  dot_float_avx2<NT>(n, act, out, [x](int64_t i, __m256& w0, __m256& w1) {
    const __m256i v = _mm256_loadu_si256((const __m256i*)(x + i));
    w0 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(v)), 16));
    w1 = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(v, 1)), 16));
  });
  for (int64_t i = n & ~(int64_t)15; i < n; i++)
    for (int t = 0; t < NT; t++) out[t] += bf16_bits_to_float(x[i]) * ((const float*)act[t])[i];
}

// ---- Q4_0 / Q8_0 weights x Q8_0 (int8) or Q16_0 (int16) activations: weights widened
// to i16 once per block; madd with int16 activations pairs <= 2 * 128 * 32768 = 2^24, exact.
// One block loop for the four pairs; the overloads below say how each block unpacks.

static inline __m256i dot_i16x32(__m256i w_lo16, __m256i w_hi16, const int16_t* a) {
  return _mm256_add_epi32(_mm256_madd_epi16(w_lo16, _mm256_loadu_si256((const __m256i*)a)),
                          _mm256_madd_epi16(w_hi16, _mm256_loadu_si256((const __m256i*)(a + 16))));
}

static inline void unpack_w(const block_q4_0& b, __m256i& w_lo, __m256i& w_hi) {
  const __m128i m4 = _mm_set1_epi8(0x0F), k8 = _mm_set1_epi8(8);
  const __m128i q = _mm_loadu_si128((const __m128i*)b.qs);
  w_lo = _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_and_si128(q, m4), k8));                     // elems 0..15
  w_hi = _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), m4), k8));  // 16..31
}
static inline void unpack_w(const block_q8_0& b, __m256i& w_lo, __m256i& w_hi) {
  w_lo = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)b.qs));
  w_hi = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(b.qs + 16)));
}
static inline __m256i act_dot(__m256i w_lo, __m256i w_hi, const block_q8_0& a) { return dot_i8x32(w_lo, w_hi, a.qs); }
static inline __m256i act_dot(__m256i w_lo, __m256i w_hi, const block_q16_0& a) { return dot_i16x32(w_lo, w_hi, a.qs); }
static inline float act_scale(const block_q8_0& a) { return half_to_float(a.d); }
static inline float act_scale(const block_q16_0& a) { return a.d; }

template <int NT, class WBlock, class ABlock>
static void q_0_avx2(int64_t n, const void* w, const void* const* act, float* out) {
  static_assert(QK4_0 == QK8_0, "Q4_0 and Q8_0 blocks pair with the same activation blocks");
  const WBlock* x = (const WBlock*)w;
  const int64_t nb = n / QK8_0;
  float acc[NT];
  for (int t = 0; t < NT; t++) acc[t] = 0.f;
  for (int64_t i = 0; i < nb; i++) {  // hot loop
    __m256i w_lo, w_hi;
    unpack_w(x[i], w_lo, w_hi);
    const float dw = half_to_float(x[i].d);
    for (int t = 0; t < NT; t++) {
      const ABlock& a = ((const ABlock*)act[t])[i];
      acc[t] = block_accum(acc[t], dw, act_scale(a), hsum_i32(act_dot(w_lo, w_hi, a)));
    }
  }
  for (int t = 0; t < NT; t++) out[t] = acc[t];
}

template <int NT>
static void q4_0_avx2(int64_t n, const void* w, const void* const* act, float* out) {
  q_0_avx2<NT, block_q4_0, block_q8_0>(n, w, act, out);
}
template <int NT>
static void q8_0_avx2(int64_t n, const void* w, const void* const* act, float* out) {
  q_0_avx2<NT, block_q8_0, block_q8_0>(n, w, act, out);
}
template <int NT>
static void q4_0_q16_avx2(int64_t n, const void* w, const void* const* act, float* out) {
  q_0_avx2<NT, block_q4_0, block_q16_0>(n, w, act, out);
}
template <int NT>
static void q8_0_q16_avx2(int64_t n, const void* w, const void* const* act, float* out) {
  q_0_avx2<NT, block_q8_0, block_q16_0>(n, w, act, out);
}

// ---- K-quants x Q8_K
// maddubs(u8 weights, s8 activations) cannot saturate here: |pair| <= 2*63*128 < 32767.

// Scales/mins of all 8 sub-blocks with 32-bit masks (same packing as k4_scale_min):
// returns bytes [sc0..sc7, m0..m7].
static inline __m128i k4_scales_avx2(const uint8_t* s) {
  uint32_t a, b, c;
  std::memcpy(&a, s, 4);
  std::memcpy(&b, s + 4, 4);
  std::memcpy(&c, s + 8, 4);
  const uint32_t sc_lo = a & 0x3F3F3F3Fu, m_lo = b & 0x3F3F3F3Fu;
  const uint32_t sc_hi = (c & 0x0F0F0F0Fu) | ((a >> 2) & 0x30303030u);
  const uint32_t m_hi = ((c >> 4) & 0x0F0F0F0Fu) | ((b >> 2) & 0x30303030u);
  return _mm_setr_epi32((int)sc_lo, (int)sc_hi, (int)m_lo, (int)m_hi);
}

template <int NT, bool Q5>
static void kmin_avx2(int64_t n, const void* w, const void* const* act, float* out) {
  const int64_t nb = n / QK_K;
  const size_t bsz = Q5 ? sizeof(block_q5_K) : sizeof(block_q4_K);
  float acc[NT];
  for (int t = 0; t < NT; t++) acc[t] = 0.f;
  const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  // byte pairs (2j, 2j+1) of an i16 vector: splat lane j
  const __m256i lane_idx = _mm256_set1_epi16(0x0100), lane_step = _mm256_set1_epi16(0x0202);
  const __m128i mins_dup = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
  for (int64_t i = 0; i < nb; i++) {
    const uint8_t* blk = (const uint8_t*)w + (size_t)i * bsz;
    fp16_t d16, dmin16;
    std::memcpy(&d16, blk, 2);
    std::memcpy(&dmin16, blk + 2, 2);
    const uint8_t* qh = blk + 16;                 // Q5_K only
    const uint8_t* qs = blk + (Q5 ? 48 : 16);
    const __m128i scm = k4_scales_avx2(blk + 4);
    const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scm));  // [sc0..sc7] x2
    const __m256i mp = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(scm, mins_dup));   // m0,m0,..,m7,m7
    __m256i isum[NT];
    for (int t = 0; t < NT; t++) isum[t] = _mm256_setzero_si256();
    __m256i hb = Q5 ? _mm256_loadu_si256((const __m256i*)qh) : _mm256_setzero_si256();
    __m256i idx = lane_idx;
    for (int c = 0; c < 4; c++) {  // hot loop: 64 weights = sub-blocks 2c, 2c+1
      const __m256i q = _mm256_loadu_si256((const __m256i*)(qs + 32 * c));
      __m256i lo = _mm256_and_si256(q, m4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      if (Q5) {  // bit 2c -> lo, bit 2c+1 -> hi; hb is shifted right by 2 per chunk
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(hb, one), 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 1), one), 4));
        hb = _mm256_srli_epi16(hb, 2);
      }
      const __m256i s_lo = _mm256_shuffle_epi8(sc16, idx);
      idx = _mm256_add_epi8(idx, lane_step);
      const __m256i s_hi = _mm256_shuffle_epi8(sc16, idx);
      idx = _mm256_add_epi8(idx, lane_step);
      for (int t = 0; t < NT; t++) {
        const int8_t* a = ((const block_q8_K*)act[t])[i].qs + 64 * c;
        const __m256i p_lo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i*)a));
        const __m256i p_hi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i*)(a + 32)));
        isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(_mm256_madd_epi16(p_lo, s_lo),
                                                              _mm256_madd_epi16(p_hi, s_hi)));
      }
    }
    const float dw = half_to_float(d16), dminw = half_to_float(dmin16);
    for (int t = 0; t < NT; t++) {
      const block_q8_K* a = (const block_q8_K*)act[t] + i;
      const int32_t summs = hsum_i32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)a->bsums), mp));
      acc[t] = block_accum_kmin(acc[t], dw, dminw, a->d, hsum_i32(isum[t]), summs);
    }
  }
  for (int t = 0; t < NT; t++) out[t] = acc[t];
}

// Byte indices selecting i16 lane 2k in the low 128 bits and lane 2k+1 in the high.
static inline __m256i q6_scale_idx(int k) {
  const __m128i lo = _mm_set1_epi16((short)(((4 * k + 1) << 8) | (4 * k)));
  const __m128i hi = _mm_set1_epi16((short)(((4 * k + 3) << 8) | (4 * k + 2)));
  return _mm256_setr_m128i(lo, hi);
}

// Q6_K: unsigned 6-bit q (0..63) via maddubs, then subtract 32 * sum_j sc[j]*bsums[j].
template <int NT>
static void q6_K_avx2(int64_t n, const void* w, const void* const* act, float* out) {
  const block_q6_K* x = (const block_q6_K*)w;
  const int64_t nb = n / QK_K;
  float acc[NT];
  for (int t = 0; t < NT; t++) acc[t] = 0.f;
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
  for (int64_t i = 0; i < nb; i++) {
    const __m128i sc8 = _mm_loadu_si128((const __m128i*)x[i].scales);
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);  // [16] scales as i16
    __m256i isum[NT];
    for (int t = 0; t < NT; t++) isum[t] = _mm256_setzero_si256();
    for (int h = 0; h < 2; h++) {  // hot loop: 128 weights
      const __m256i q0 = _mm256_loadu_si256((const __m256i*)(x[i].ql + 64 * h));
      const __m256i q1 = _mm256_loadu_si256((const __m256i*)(x[i].ql + 64 * h + 32));
      const __m256i hb = _mm256_loadu_si256((const __m256i*)(x[i].qh + 32 * h));
      __m256i v[4];
      v[0] = _mm256_or_si256(_mm256_and_si256(q0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
      v[1] = _mm256_or_si256(_mm256_and_si256(q1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
      v[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q0, 4), m4), _mm256_and_si256(hb, m30));
      v[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q1, 4), m4),
                             _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
      // v[k] covers sub-blocks 8h+2k (first 16 bytes) and 8h+2k+1 (last 16): scale
      // vectors [sc[8h+2k] x8 | sc[8h+2k+1] x8] by byte shuffles of the half's 8 scales.
      const __m256i sch = _mm256_broadcastsi128_si256(
          _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i*)(x[i].scales + 8 * h))));
      __m256i s[4];
      for (int k = 0; k < 4; k++) s[k] = _mm256_shuffle_epi8(sch, q6_scale_idx(k));
      for (int t = 0; t < NT; t++) {
        const int8_t* a = ((const block_q8_K*)act[t])[i].qs + 128 * h;
        for (int k = 0; k < 4; k++) {
          const __m256i p = _mm256_maddubs_epi16(v[k], _mm256_loadu_si256((const __m256i*)(a + 32 * k)));
          isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p, s[k]));
        }
      }
    }
    const float dw = half_to_float(x[i].d);
    for (int t = 0; t < NT; t++) {
      const block_q8_K* a = (const block_q8_K*)act[t] + i;
      const int32_t off = hsum_i32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)a->bsums), sc16));
      acc[t] = block_accum(acc[t], dw, a->d, hsum_i32(isum[t]) - 32 * off);
    }
  }
  for (int t = 0; t < NT; t++) out[t] = acc[t];
}


namespace {

// Decode (one token, mv[]): 8 weight rows at a time, one row per 32-bit lane. Per
// 32-weight block and row two madd of the int16-widened weights with the int16
// activations (exact, pairs <= 2^24), a hadd tree puts the 8 rows' block sums into one
// vector, block_accum runs on the 8 lanes in block order (contraction off): every row
// equals the scalar dot bit for bit, and there is no per-row horizontal sum and scalar
// combine per block. The panel PF_PANELS ahead is prefetched (a slice per block).
constexpr int64_t PF_PANELS = 2;

inline __m256i reduce8(const __m256i v[8]) {  // lane r = sum of the 8 lanes of v[r]
  const __m256i x = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i y = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(x, y, 0x20), _mm256_permute2x128_si256(x, y, 0x31));
}

template <class WBlock>
void mv_rows8(int64_t n, const uint8_t* W, size_t rb, int64_t nrows, const uint8_t* act, float* Y) {
  const int64_t nb = n / QK8_0;
  const block_q16_0* a = (const block_q16_0*)act;
  const __m256i lo16 = _mm256_set1_epi32(0xFFFF);
  const uint8_t* const end = W + (size_t)nrows * rb;
  const size_t panel = 8 * rb;
  const size_t pf_step = (panel + (size_t)nb - 1) / (size_t)nb;
  for (int64_t r0 = 0; r0 < nrows; r0 += 8) {
    const int nr = (int)std::min<int64_t>(8, nrows - r0);
    const WBlock* row[8];
    alignas(32) int32_t offs[8];
    for (int r = 0; r < 8; r++) {  // rows past the end repeat the last one; not stored
      row[r] = (const WBlock*)(W + (size_t)(r0 + std::min(r, nr - 1)) * rb);
      offs[r] = (int32_t)((const uint8_t*)row[r] - (const uint8_t*)row[0]);
    }
    const __m256i voff = _mm256_load_si256((const __m256i*)offs);
    const uint8_t* pf = (const uint8_t*)row[0] + PF_PANELS * panel;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {  // hot loop: one block of 8 rows
      for (size_t o = 0; o < pf_step; o += 64)
        if (pf + o < end) _mm_prefetch((const char*)(pf + o), _MM_HINT_T0);
      pf += pf_step;
      __m256i s[8];
#pragma GCC unroll 8
      for (int r = 0; r < 8; r++) {
        __m256i w_lo, w_hi;
        unpack_w(row[r][i], w_lo, w_hi);
        s[r] = dot_i16x32(w_lo, w_hi, a[i].qs);
      }
      const __m256i sumi = reduce8(s);
      const __m256i d32 = _mm256_and_si256(_mm256_i32gather_epi32((const int*)&row[0][i], voff, 1), lo16);
      const __m256i d16 = _mm256_permute4x64_epi64(_mm256_packus_epi32(d32, d32), 0x08);  // 8 halves low
      const __m256 dw = _mm256_cvtph_ps(_mm256_castsi256_si128(d16));
      const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(a[i].d));             // block_accum, lanewise:
      acc = _mm256_add_ps(acc, _mm256_mul_ps(d, _mm256_cvtepi32_ps(sumi)));  // acc + (dw*da)*sumi
    }
    alignas(32) float o[8];
    _mm256_store_ps(o, acc);
    for (int r = 0; r < nr; r++) Y[r0 + r] = o[r];
  }
}

}  // namespace

static void mv_q4_0_avx2(int64_t n, const uint8_t* W, size_t rb, int64_t nr, const uint8_t* a, size_t, int64_t, float* Y, int64_t) {
  mv_rows8<block_q4_0>(n, W, rb, nr, a, Y);
}
static void mv_q8_0_avx2(int64_t n, const uint8_t* W, size_t rb, int64_t nr, const uint8_t* a, size_t, int64_t, float* Y, int64_t) {
  mv_rows8<block_q8_0>(n, W, rb, nr, a, Y);
}

// ---- K-quant decode (one token, mv[]): 8 rows per pass, one row per 32-bit lane of the
// block sums (the 256-bit form of kernels_avx512.cpp's mv_q4_K_rows16 / mv_q6_K_rows16).
// Per row and block the integer work is the dot kernels' (vpmaddubsw u8 weights x s8
// activations, vpmaddwd with the row's sub-block scales) into one ymm per row; reduce8
// puts the 8 rows' exact block sums into one vector, and what was per row and block in
// the dot kernels — the horizontal sums, the scale / min unpacking, the fp16 conversions
// and the float combine — runs once for 8 rows:
//   Q4_K: the rows' 16-byte block headers (d, dmin, 12 scale bytes) are transposed so that
//     lane r holds row r's dwords; k4_scales_avx2's 32-bit mask decode runs lanewise; the
//     min sum sum_j m[j] * (bsums[2j] + bsums[2j+1]) is four vpmaddwd of (m[j], m[j+2]) i16
//     pairs against broadcast activation pairs; block_accum_kmin lanewise.
//   Q6_K: the -32 offset is folded into the row's own sum (vpmaddwd of -32*sc[j] against
//     the 16 bsums, exact: |-32 sc| <= 4096, |bsums| <= 2032); block_accum lanewise.
// All integer sums are exact and the float combine is the scalar one lanewise in block
// order (contraction off), so every row equals the dot kernels (and kernels_generic.cpp)
// bit for bit. The panel PF_PANELS ahead is prefetched, a slice per block.
namespace {

inline uint32_t pair16(int a, int b) { return (uint32_t)(uint16_t)(int16_t)a | ((uint32_t)(uint16_t)(int16_t)b << 16); }

// 8 row pointers of the panel at r0 (rows past nrows repeat the last one; not stored).
inline void panel_rows8(const uint8_t* W, size_t rb, int64_t r0, int nr, const uint8_t* row[8]) {
  for (int r = 0; r < 8; r++) row[r] = W + (size_t)(r0 + std::min(r, nr - 1)) * rb;
}

// Transpose of 8 rows' 16-byte slices: out[k] lane r = dword k of the slice at row[r].
inline void load_t8x4(const uint8_t* const* row, size_t off, __m256i out[4]) {
  __m256i in[4];
  for (int q = 0; q < 4; q++)  // 128-bit half L of in[q]: row 4L+q
    in[q] = _mm256_setr_m128i(_mm_loadu_si128((const __m128i*)(row[q] + off)), _mm_loadu_si128((const __m128i*)(row[4 + q] + off)));
  const __m256i t0 = _mm256_unpacklo_epi32(in[0], in[1]), t1 = _mm256_unpackhi_epi32(in[0], in[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(in[2], in[3]), t3 = _mm256_unpackhi_epi32(in[2], in[3]);
  out[0] = _mm256_unpacklo_epi64(t0, t2);
  out[1] = _mm256_unpackhi_epi64(t0, t2);
  out[2] = _mm256_unpacklo_epi64(t1, t3);
  out[3] = _mm256_unpackhi_epi64(t1, t3);
}

inline void prefetch_slice8(const uint8_t*& pf, size_t step, const uint8_t* end) {
  const uint8_t* const stop = std::min(pf + step, end);
  for (const uint8_t* p = pf; p < stop; p += 64) _mm_prefetch((const char*)p, _MM_HINT_T0);
  pf += step;
}

// Lanes 0..nr-1 of v to y.
inline void store_rows8(float* y, int nr, __m256 v) {
  if (nr == 8) {
    _mm256_storeu_ps(y, v);
    return;
  }
  alignas(32) float o[8];
  _mm256_store_ps(o, v);
  for (int r = 0; r < nr; r++) y[r] = o[r];
}

// fp16 low halves of the 8 dword lanes of v -> f32.
inline __m256 low_halves_to_f32(__m256i v) {
  const __m256i lo = _mm256_and_si256(v, _mm256_set1_epi32(0xFFFF));
  return _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(lo, lo), 0x08)));
}

}  // namespace

void mv_q4_K_rows8_avx2(int64_t n, const uint8_t* W, size_t rb, int64_t nrows, const uint8_t* act, float* Y) {
  const int64_t nb = n / QK_K;
  const block_q8_K* a = (const block_q8_K*)act;
  const uint8_t* const end = W + (size_t)nrows * rb;
  const size_t panel = 8 * rb;
  const size_t pf_step = (panel + (size_t)nb - 1) / (size_t)nb;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256i sidx[8];  // vpshufb on [sc0..sc7] as i16 (both halves): splat i16 lane j
  for (int j = 0; j < 8; j++) sidx[j] = _mm256_set1_epi16((short)(((2 * j + 1) << 8) | (2 * j)));
  const __m256i k3f = _mm256_set1_epi32(0x3F3F3F3F), k0f = _mm256_set1_epi32(0x0F0F0F0F);
  const __m256i k30 = _mm256_set1_epi32(0x30303030), kff = _mm256_set1_epi32(0x00FF00FF);
  // qword of the two unpacked scale vectors (below) that holds row r's 8 scale bytes
  int qsel[8];
  for (int r = 0; r < 8; r++) qsel[r] = ((r & 3) < 2 ? 0 : 4) + 2 * (r >> 2) + (r & 1);
  for (int64_t r0 = 0; r0 < nrows; r0 += 8) {
    const int nr = (int)std::min<int64_t>(8, nrows - r0);
    const uint8_t* row[8];
    panel_rows8(W, rb, r0, nr, row);
    const uint8_t* pf = row[0] + PF_PANELS * panel;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
      prefetch_slice8(pf, pf_step, end);
      const size_t bo = (size_t)i * sizeof(block_q4_K);
      __m256i h[4];  // lane r: row r's d|dmin, scale bytes 0..3, 4..7, 8..11
      load_t8x4(row, bo, h);
      const __m256i sc_lo = _mm256_and_si256(h[1], k3f), m_lo = _mm256_and_si256(h[2], k3f);
      const __m256i sc_hi = _mm256_or_si256(_mm256_and_si256(h[3], k0f), _mm256_and_si256(_mm256_srli_epi32(h[1], 2), k30));
      const __m256i m_hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(h[3], 4), k0f),
                                           _mm256_and_si256(_mm256_srli_epi32(h[2], 2), k30));
      alignas(32) uint64_t sc8[8];  // row r's sc[0..7] at qword qsel[r]
      _mm256_store_si256((__m256i*)sc8, _mm256_unpacklo_epi32(sc_lo, sc_hi));
      _mm256_store_si256((__m256i*)(sc8 + 4), _mm256_unpackhi_epi32(sc_lo, sc_hi));
      const int8_t* aq = a[i].qs;
      __m256i s[8];
#pragma GCC unroll 8
      for (int r = 0; r < 8; r++) {  // hot loop: one block of one row
        const uint8_t* qs = row[r] + bo + offsetof(block_q4_K, qs);
        const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i*)(sc8 + qsel[r]))));
        __m256i sr = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {  // 64 weights = sub-blocks 2c, 2c+1
          const __m256i q = _mm256_loadu_si256((const __m256i*)(qs + 32 * c));
          const __m256i p_lo = _mm256_maddubs_epi16(_mm256_and_si256(q, m4), _mm256_loadu_si256((const __m256i*)(aq + 64 * c)));
          const __m256i p_hi = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
                                                    _mm256_loadu_si256((const __m256i*)(aq + 64 * c + 32)));
          sr = _mm256_add_epi32(sr, _mm256_add_epi32(_mm256_madd_epi16(p_lo, _mm256_shuffle_epi8(sc16, sidx[2 * c])),
                                                     _mm256_madd_epi16(p_hi, _mm256_shuffle_epi8(sc16, sidx[2 * c + 1]))));
        }
        s[r] = sr;
      }
      const __m256i sumi = reduce8(s);
      // mins: lane r = sum_j m[j] * (bsums[2j] + bsums[2j+1]); i16 pairs (m[j], m[j+2])
      int32_t bs[8];
      for (int j = 0; j < 8; j++) bs[j] = a[i].bsums[2 * j] + a[i].bsums[2 * j + 1];
      __m256i summs = _mm256_madd_epi16(_mm256_and_si256(m_lo, kff), _mm256_set1_epi32((int)pair16(bs[0], bs[2])));
      summs = _mm256_add_epi32(summs, _mm256_madd_epi16(_mm256_and_si256(_mm256_srli_epi32(m_lo, 8), kff),
                                                        _mm256_set1_epi32((int)pair16(bs[1], bs[3]))));
      summs = _mm256_add_epi32(summs, _mm256_madd_epi16(_mm256_and_si256(m_hi, kff), _mm256_set1_epi32((int)pair16(bs[4], bs[6]))));
      summs = _mm256_add_epi32(summs, _mm256_madd_epi16(_mm256_and_si256(_mm256_srli_epi32(m_hi, 8), kff),
                                                        _mm256_set1_epi32((int)pair16(bs[5], bs[7]))));
      const __m256 dw = low_halves_to_f32(h[0]);
      const __m256 dminw = low_halves_to_f32(_mm256_srli_epi32(h[0], 16));
      const __m256 da = _mm256_set1_ps(a[i].d);
      const __m256 d = _mm256_mul_ps(dw, da), dm = _mm256_mul_ps(dminw, da);  // block_accum_kmin, lanewise
      const __m256 xs = _mm256_mul_ps(d, _mm256_cvtepi32_ps(sumi));
      const __m256 ys = _mm256_mul_ps(dm, _mm256_cvtepi32_ps(summs));
      acc = _mm256_add_ps(acc, _mm256_sub_ps(xs, ys));
    }
    store_rows8(Y + r0, nr, acc);
  }
}

void mv_q6_K_rows8_avx2(int64_t n, const uint8_t* W, size_t rb, int64_t nrows, const uint8_t* act, float* Y) {
  const int64_t nb = n / QK_K;
  const block_q8_K* a = (const block_q8_K*)act;
  const uint8_t* const end = W + (size_t)nrows * rb;
  const size_t panel = 8 * rb;
  const size_t pf_step = (panel + (size_t)nb - 1) / (size_t)nb;
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
  const __m256i km32 = _mm256_set1_epi16(-32);
  __m256i sidx[4];
  for (int k = 0; k < 4; k++) sidx[k] = q6_scale_idx(k);
  for (int64_t r0 = 0; r0 < nrows; r0 += 8) {
    const int nr = (int)std::min<int64_t>(8, nrows - r0);
    const uint8_t* row[8];
    panel_rows8(W, rb, r0, nr, row);
    const uint8_t* pf = row[0] + PF_PANELS * panel;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
      prefetch_slice8(pf, pf_step, end);
      const size_t bo = (size_t)i * sizeof(block_q6_K);
      const int8_t* aq = a[i].qs;
      const __m256i bsums = _mm256_loadu_si256((const __m256i*)a[i].bsums);
      __m256i s[8];
      alignas(16) uint16_t dh[8];
#pragma GCC unroll 8
      for (int r = 0; r < 8; r++) {  // hot loop: one block of one row
        const block_q6_K* x = (const block_q6_K*)(row[r] + bo);
        dh[r] = x->d;
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)x->scales));
        // -32 * sum_j sc[j] * bsums[j], exact
        __m256i sr = _mm256_madd_epi16(_mm256_mullo_epi16(sc16, km32), bsums);
#pragma GCC unroll 2
        for (int hh = 0; hh < 2; hh++) {  // 128 weights
          const __m256i q0 = _mm256_loadu_si256((const __m256i*)(x->ql + 64 * hh));
          const __m256i q1 = _mm256_loadu_si256((const __m256i*)(x->ql + 64 * hh + 32));
          const __m256i hb = _mm256_loadu_si256((const __m256i*)(x->qh + 32 * hh));
          __m256i v[4];
          v[0] = _mm256_or_si256(_mm256_and_si256(q0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
          v[1] = _mm256_or_si256(_mm256_and_si256(q1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
          v[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q0, 4), m4), _mm256_and_si256(hb, m30));
          v[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q1, 4), m4),
                                 _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
          const __m256i sch = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i*)(x->scales + 8 * hh))));
#pragma GCC unroll 4
          for (int k = 0; k < 4; k++) {
            const __m256i p = _mm256_maddubs_epi16(v[k], _mm256_loadu_si256((const __m256i*)(aq + 128 * hh + 32 * k)));
            sr = _mm256_add_epi32(sr, _mm256_madd_epi16(p, _mm256_shuffle_epi8(sch, sidx[k])));
          }
        }
        s[r] = sr;
      }
      const __m256i sumi = reduce8(s);
      const __m256 dw = _mm256_cvtph_ps(_mm_load_si128((const __m128i*)dh));
      const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(a[i].d));             // block_accum, lanewise:
      acc = _mm256_add_ps(acc, _mm256_mul_ps(d, _mm256_cvtepi32_ps(sumi)));  // acc + (dw*da)*sumi
    }
    store_rows8(Y + r0, nr, acc);
  }
}

static void mv_q4_K_avx2(int64_t n, const uint8_t* W, size_t rb, int64_t nr, const uint8_t* a, size_t, int64_t, float* Y, int64_t) {
  mv_q4_K_rows8_avx2(n, W, rb, nr, a, Y);
}
static void mv_q6_K_avx2(int64_t n, const uint8_t* W, size_t rb, int64_t nr, const uint8_t* a, size_t, int64_t, float* Y, int64_t) {
  mv_q6_K_rows8_avx2(n, W, rb, nr, a, Y);
}


// ---- K-quant prefill (2+ tokens) for CPUs without VNNI: 8 rows x KT tokens register
// tiles, lanes = rows — kernels_avxvnni.cpp's panel layout (each 8-row panel unpacked once
// per call into u8 quants in element order, transposed so that ymm g of a block holds
// elements 4g..4g+3 of all 8 rows) with vpmaddubsw + vpmaddwd in place of vpdpbusd. Per
// token a broadcast 4-activation dword; vpmaddubsw gives every row's two pair sums (u8 x
// s8, |pair| <= 2*63*128 < 2^15, no saturation), HG groups of them are added in i16 (Q4_K:
// the 8 groups of a 32-sub-block, 8*2*15*128 < 2^15; Q6_K: 2 groups, 2*2*63*128 < 2^15),
// and vpmaddwd with the rows' (sc, sc) pairs scales them into the i32 block sum. The
// min / -32 corrections are vpmaddwd of the Q8_K bsums with (m, m) / (sc, sc') pairs. All
// integer sums exact; the per-block float combine is block_accum_kmin / block_accum
// lanewise in block order (contraction off): equal to the scalar dot bit for bit.

namespace {

struct KPanel8 {
  __m256i w[64];    // w[g] lane r: row r's quants 4g..4g+3 (u8)
  __m256i sc[16];   // (sc[j], sc[j]) i16 pairs (Q4_K: j < 8)
  __m256i pair[8];  // Q4_K: (m[j], m[j]) i16 pairs; Q6_K: (sc[2k], sc[2k+1]) i16 pairs
  __m256 d, dmin;   // rows' fp16 d / dmin as f32
};
thread_local std::vector<KPanel8> g_kpanel8;

// 8 x 8 dword transpose: out[k] lane r = in[r] lane k.
inline void transpose8(const __m256i in[8], __m256i out[8]) {
  __m256i t[8], u[8];
  for (int i = 0; i < 4; i++) {
    t[2 * i] = _mm256_unpacklo_epi32(in[2 * i], in[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi32(in[2 * i], in[2 * i + 1]);
  }
  for (int i = 0; i < 2; i++) {  // u[4i+j], 128-bit half L: rows 4i..4i+3 of column 4L+j
    u[4 * i + 0] = _mm256_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm256_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm256_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm256_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int j = 0; j < 4; j++) {
    out[j] = _mm256_permute2x128_si256(u[j], u[4 + j], 0x20);
    out[4 + j] = _mm256_permute2x128_si256(u[j], u[4 + j], 0x31);
  }
}

// Q4_K row block -> 8 ymm of quants in element order (ymm v: elements 32v..32v+31).
inline void unpack8_q4_K(const block_q4_K& b, __m256i q[8]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int c = 0; c < 4; c++) {
    const __m256i x = _mm256_loadu_si256((const __m256i*)(b.qs + 32 * c));
    q[2 * c] = _mm256_and_si256(x, m4);
    q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
  }
}
// Q6_K row block -> 8 ymm of unsigned quants 0..63 in element order.
inline void unpack8_q6_K(const block_q6_K& b, __m256i q[8]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
  for (int h = 0; h < 2; h++) {
    const __m256i q0 = _mm256_loadu_si256((const __m256i*)(b.ql + 64 * h));
    const __m256i q1 = _mm256_loadu_si256((const __m256i*)(b.ql + 64 * h + 32));
    const __m256i hb = _mm256_loadu_si256((const __m256i*)(b.qh + 32 * h));
    q[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(q0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
    q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(q1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
    q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q0, 4), m4), _mm256_and_si256(hb, m30));
    q[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q1, 4), m4),
                                   _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
  }
}

template <bool Q6>
void pack_k_panel8(const uint8_t* const* row, int64_t nb, KPanel8* pb) {
  for (int64_t i = 0; i < nb; i++) {
    KPanel8& o = pb[i];
    __m256i q[8][8];
    alignas(32) int32_t sc[16][8], pr[8][8];
    alignas(32) float d[8], dm[8];
    for (int r = 0; r < 8; r++) {
      if (Q6) {
        const block_q6_K& b = ((const block_q6_K*)row[r])[i];
        unpack8_q6_K(b, q[r]);
        for (int j = 0; j < 16; j++) sc[j][r] = (int32_t)pair16(b.scales[j], b.scales[j]);
        for (int k = 0; k < 8; k++) pr[k][r] = (int32_t)pair16(b.scales[2 * k], b.scales[2 * k + 1]);
        d[r] = half_to_float(b.d);
        dm[r] = 0.f;
      } else {
        const block_q4_K& b = ((const block_q4_K*)row[r])[i];
        unpack8_q4_K(b, q[r]);
        uint8_t s8[8], m8[8];
        k4_unpack_scales(b.scales, s8, m8);
        for (int j = 0; j < 8; j++) sc[j][r] = (int32_t)pair16(s8[j], s8[j]), pr[j][r] = (int32_t)pair16(m8[j], m8[j]);
        for (int j = 8; j < 16; j++) sc[j][r] = 0;
        d[r] = half_to_float(b.d);
        dm[r] = half_to_float(b.dmin);
      }
    }
    for (int v = 0; v < 8; v++) {
      __m256i in[8];
      for (int r = 0; r < 8; r++) in[r] = q[r][v];
      transpose8(in, o.w + 8 * v);
    }
    for (int j = 0; j < 16; j++) o.sc[j] = _mm256_load_si256((const __m256i*)sc[j]);
    for (int k = 0; k < 8; k++) o.pair[k] = _mm256_load_si256((const __m256i*)pr[k]);
    o.d = _mm256_load_ps(d);
    o.dmin = _mm256_load_ps(dm);
  }
}

inline __m256i bcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

#if defined(__clang__)
#define KNOT_UNROLL _Pragma("unroll")
#else
#define KNOT_UNROLL _Pragma("GCC unroll 16")
#endif

// ---- Q4_0 / Q8_0 x Q16_0 prefill (2+ tokens): 8 rows x QT tokens register tiles, lanes =
// rows (kernels_avxvnni.cpp's mm_gemm8 with vpmaddwd + vpaddd in place of vpdpwssd). Each
// 8-row panel is repacked once per call into pair-major int16: for weight pair p (elements
// 2p, 2p+1) of a block, one ymm holding that pair of all 8 rows. A token's block sums for
// the 8 rows are then 16 vpmaddwd against a broadcast activation pair (|pair| <= 2 * 128 *
// 32767 < 2^24, block sum < 2^28: exact), with no horizontal reduction; the float combine
// is block_accum lanewise in block order (contraction off), as mv_rows8 does: every row
// equals the scalar dot bit for bit.

struct Q0Panel8 {  // one block of an 8-row panel
  __m256i w[16];  // w[p] lane r: row r's int16 weights 2p, 2p+1
  __m256 d;       // rows' fp16 scales as f32
};
thread_local std::vector<Q0Panel8> g_q0panel8;

template <class WBlock>
void pack_q0_panel8(const uint8_t* const* row, int64_t nb, Q0Panel8* pb) {
  for (int64_t i = 0; i < nb; i++) {
    __m256i lo[8], hi[8];
    alignas(32) float d[8];
    for (int r = 0; r < 8; r++) {
      const WBlock& b = ((const WBlock*)row[r])[i];
      unpack_w(b, lo[r], hi[r]);
      d[r] = half_to_float(b.d);
    }
    transpose8(lo, pb[i].w);      // pairs 0..7 (elements 0..15)
    transpose8(hi, pb[i].w + 8);  // pairs 8..15
    pb[i].d = _mm256_load_ps(d);
  }
}

// An empty asm the accumulator passes through: GCC's reassociation otherwise turns each
// token's 16-term vpaddd chain into a tree over all 16 vpmaddwd results of the block,
// spilling them to the stack (2x the instructions). The integer sum is exact either way.
inline void keep_in_register(__m256i& v) {
#if defined(__GNUC__)
  __asm__("" : "+x"(v));
#endif
}

template <int TT>
void q0gemm8_tile(const Q0Panel8* pb, int64_t nb, const block_q16_0* const* a, __m256* acc) {
  KNOT_UNROLL
  for (int t = 0; t < TT; t++) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; i++) {  // hot loop: one block, 8 rows x TT tokens
    __m256i s[TT];
    KNOT_UNROLL
    for (int t = 0; t < TT; t++) s[t] = _mm256_setzero_si256();
    KNOT_UNROLL
    for (int p = 0; p < 16; p++) {
      const __m256i wv = _mm256_load_si256(pb[i].w + p);
      KNOT_UNROLL
      for (int t = 0; t < TT; t++) {
        s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(wv, bcast4(a[t][i].qs + 2 * p)));
        keep_in_register(s[t]);
      }
    }
    KNOT_UNROLL
    for (int t = 0; t < TT; t++) {
      const __m256 d = _mm256_mul_ps(pb[i].d, _mm256_set1_ps(a[t][i].d));            // block_accum, lanewise:
      acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(d, _mm256_cvtepi32_ps(s[t])));  // acc + (dw*da)*sumi
    }
  }
}

constexpr int QT = 4;  // token tile of the Q4_0/Q8_0 prefill kernel

template <class WBlock>
void mm_q0_8_avx2(int64_t n, const uint8_t* W, size_t rb, int64_t nrows, const uint8_t* act, size_t ab,
                  int64_t nt, float* Y, int64_t ldy) {
  const int64_t nb = n / QK8_0;
  std::vector<Q0Panel8>& pb = g_q0panel8;
  if ((int64_t)pb.size() < nb) pb.resize((size_t)nb);
  for (int64_t r0 = 0; r0 < nrows; r0 += 8) {
    const int nr = (int)std::min<int64_t>(8, nrows - r0);
    const uint8_t* row[8];
    for (int r = 0; r < 8; r++) row[r] = W + (size_t)(r0 + std::min(r, nr - 1)) * rb;  // tail repeats, not stored
    pack_q0_panel8<WBlock>(row, nb, pb.data());
    for (int64_t t0 = 0; t0 < nt; t0 += QT) {
      const int tt = (int)std::min<int64_t>(QT, nt - t0);
      const block_q16_0* a[QT];
      for (int t = 0; t < tt; t++) a[t] = (const block_q16_0*)(act + (size_t)(t0 + t) * ab);
      __m256 acc[QT];
      switch (tt) {  // tails of 1..QT-1 tokens
        case 1: q0gemm8_tile<1>(pb.data(), nb, a, acc); break;
        case 2: q0gemm8_tile<2>(pb.data(), nb, a, acc); break;
        case 3: q0gemm8_tile<3>(pb.data(), nb, a, acc); break;
        default: q0gemm8_tile<QT>(pb.data(), nb, a, acc); break;
      }
      for (int t = 0; t < tt; t++) {
        float* y = Y + (t0 + t) * ldy + r0;
        if (nr == 8) {
          _mm256_storeu_ps(y, acc[t]);
        } else {
          alignas(32) float o[8];
          _mm256_store_ps(o, acc[t]);
          for (int r = 0; r < nr; r++) y[r] = o[r];
        }
      }
    }
  }
}

template <bool Q6, int TT>
void kgemm8_tile(const KPanel8* pb, int64_t nb, const block_q8_K* const* a, __m256* acc) {
  // sub-blocks, dword groups per sub-block, groups summed in i16 before vpmaddwd
  constexpr int NSUB = Q6 ? 16 : 8, GPS = Q6 ? 4 : 8, HG = Q6 ? 2 : 8;
  KNOT_UNROLL
  for (int t = 0; t < TT; t++) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; i++) {
    const KPanel8& b = pb[i];
    __m256i isum[TT];
    KNOT_UNROLL
    for (int t = 0; t < TT; t++) isum[t] = _mm256_setzero_si256();
    for (int j = 0; j < NSUB; j++) {  // hot loop: one sub-block, 8 rows x TT tokens
      KNOT_UNROLL
      for (int g0 = GPS * j; g0 < GPS * (j + 1); g0 += HG) {
        __m256i s[TT];
        KNOT_UNROLL
        for (int t = 0; t < TT; t++) s[t] = _mm256_setzero_si256();
        KNOT_UNROLL
        for (int g = g0; g < g0 + HG; g++) {
          const __m256i wv = _mm256_load_si256(b.w + g);
          KNOT_UNROLL
          for (int t = 0; t < TT; t++)
            s[t] = _mm256_add_epi16(s[t], _mm256_maddubs_epi16(wv, bcast4(a[t][i].qs + 4 * g)));
        }
        KNOT_UNROLL
        for (int t = 0; t < TT; t++) isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(s[t], b.sc[j]));
      }
    }
    KNOT_UNROLL
    for (int t = 0; t < TT; t++) {
      __m256i corr = _mm256_setzero_si256();
      KNOT_UNROLL
      for (int k = 0; k < 8; k++) corr = _mm256_add_epi32(corr, _mm256_madd_epi16(b.pair[k], bcast4(a[t][i].bsums + 2 * k)));
      const __m256 da = _mm256_set1_ps(a[t][i].d);
      if (Q6) {  // block_accum lanewise: acc + (dw*da)*(sumi - 32*off)
        const __m256i sumi = _mm256_sub_epi32(isum[t], _mm256_slli_epi32(corr, 5));
        const __m256 d = _mm256_mul_ps(b.d, da);
        acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(d, _mm256_cvtepi32_ps(sumi)));
      } else {  // block_accum_kmin lanewise: acc + ((dw*da)*sumi - (dminw*da)*summs)
        const __m256 d = _mm256_mul_ps(b.d, da), dm = _mm256_mul_ps(b.dmin, da);
        const __m256 x = _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum[t]));
        const __m256 y = _mm256_mul_ps(dm, _mm256_cvtepi32_ps(corr));
        acc[t] = _mm256_add_ps(acc[t], _mm256_sub_ps(x, y));
      }
    }
  }
}

constexpr int KT8 = 8;  // token tile of the K-quant prefill kernel

template <bool Q6>
void mm_kquant8_avx2(int64_t n, const uint8_t* W, size_t rb, int64_t nrows, const uint8_t* act, size_t ab,
                     int64_t nt, float* Y, int64_t ldy) {
  const int64_t nb = n / QK_K;
  if (nt < 2) {  // decode: 8 rows per pass
    for (int64_t t = 0; t < nt; t++) (Q6 ? mv_q6_K_rows8_avx2 : mv_q4_K_rows8_avx2)(n, W, rb, nrows, act + (size_t)t * ab, Y + t * ldy);
    return;
  }
  std::vector<KPanel8>& pb = g_kpanel8;
  if ((int64_t)pb.size() < nb) pb.resize((size_t)nb);
  for (int64_t r0 = 0; r0 < nrows; r0 += 8) {
    const int nr = (int)std::min<int64_t>(8, nrows - r0);
    const uint8_t* row[8];
    for (int r = 0; r < 8; r++) row[r] = W + (size_t)(r0 + std::min(r, nr - 1)) * rb;  // tail repeats, not stored
    pack_k_panel8<Q6>(row, nb, pb.data());
    for (int64_t t0 = 0; t0 < nt; t0 += KT8) {
      const int tt = (int)std::min<int64_t>(KT8, nt - t0);
      const block_q8_K* a[KT8];
      for (int t = 0; t < tt; t++) a[t] = (const block_q8_K*)(act + (size_t)(t0 + t) * ab);
      __m256 acc[KT8];
      switch (tt) {  // tails of 1..KT8-1 tokens
        case 1: kgemm8_tile<Q6, 1>(pb.data(), nb, a, acc); break;
        case 2: kgemm8_tile<Q6, 2>(pb.data(), nb, a, acc); break;
        case 3: kgemm8_tile<Q6, 3>(pb.data(), nb, a, acc); break;
        case 4: kgemm8_tile<Q6, 4>(pb.data(), nb, a, acc); break;
        case 5: kgemm8_tile<Q6, 5>(pb.data(), nb, a, acc); break;
        case 6: kgemm8_tile<Q6, 6>(pb.data(), nb, a, acc); break;
        case 7: kgemm8_tile<Q6, 7>(pb.data(), nb, a, acc); break;
        default: kgemm8_tile<Q6, 8>(pb.data(), nb, a, acc); break;
      }
      for (int t = 0; t < tt; t++) {
        float* y = Y + (t0 + t) * ldy + r0;
        if (nr == 8) {
          _mm256_storeu_ps(y, acc[t]);
        } else {
          alignas(32) float o[8];
          _mm256_store_ps(o, acc[t]);
          for (int r = 0; r < nr; r++) y[r] = o[r];
        }
      }
    }
  }
}

}  // namespace

// ---- Q8_K activation quantizer: the scalar quant_block_q8_K's bytes, 8 lanes (the
// 256-bit form of quant_q8_K_avx512: same first largest-magnitude element, iscale =
// -127/x[jm], products in f32, round-to-nearest-even (vcvtps2dq under the default MXCSR,
// as nearest_int), min 127, saturating packs, bsums of 16).
static void quant_q8_K_avx2(const float* x, void* dst, int64_t n) {
  block_q8_K* y = (block_q8_K*)dst;
  const float* x0 = x;
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    __m256 m = _mm256_setzero_ps(), nan = _mm256_setzero_ps();
    for (int j = 0; j < QK_K; j += 8) {
      const __m256 v = _mm256_loadu_ps(x + j);
      m = _mm256_max_ps(m, _mm256_and_ps(v, absmask));
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    // inf or nan (max_ps can drop a nan, hence the separate mask): the scalar quantizer
    // throws, naming the index
    if (!(amax < INFINITY) || _mm256_movemask_ps(nan) != 0) {
      quantize_row(DType::Q8_K, x0, dst, n);
      return;
    }
    if (!(amax >= 1e-30f)) {  // zero or tiny (inf scale): scalar reference for this block
      quantize_row(DType::Q8_K, x, y + i, QK_K);
      continue;
    }
    int jm = 0;  // first element of largest magnitude (as the scalar scan picks it)
    while (std::fabs(x[jm]) != amax) jm++;
    const float iscale = -127.f / x[jm];
    const __m256 vs = _mm256_set1_ps(iscale);
    const __m256i k127 = _mm256_set1_epi32(127);
    for (int g = 0; g < QK_K / 16; g++) {
      const __m256i q0 = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(vs, _mm256_loadu_ps(x + 16 * g))), k127);
      const __m256i q1 = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(vs, _mm256_loadu_ps(x + 16 * g + 8))), k127);
      y[i].bsums[g] = (int16_t)hsum_i32(_mm256_add_epi32(q0, q1));
      const __m256i p16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), 0xD8);  // 16 i16 in order
      _mm_storeu_si128((__m128i*)(y[i].qs + 16 * g),
                       _mm_packs_epi16(_mm256_castsi256_si128(p16), _mm256_extracti128_si256(p16, 1)));
    }
    y[i].d = 1.f / iscale;
  }
}

// ---- Q16_0 activation quantizer: quantize_block_q16_0's bytes, 8 lanes (the 256-bit form
// of quant_q16_0_avx512). Per 32-block amax in SIMD (max is exact), then d = amax/32767
// and id = 1/d in scalar f32 as the scalar code does, q = round-to-nearest-even(x*id)
// (vcvtps2dq under the default MXCSR, as nearbyint) clamped to +-32767 (saturating packs
// keep that range); blocks with amax < 1e-30 (zero, or 1/d near overflow) take the scalar
// block quantizer. Rows with inf/nan go to the scalar quantizer, which throws naming the index.
static void quant_q16_0_avx2(const float* x, void* dst, int64_t n) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)), vinf = _mm256_set1_ps(INFINITY);
  for (int64_t j = 0; j < n; j += 8)  // |x| !< inf: inf or nan
    if (_mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + j), absmask), vinf, _CMP_NLT_UQ))) {
      quantize_act_row(ActFormat::Q16_0, x, dst, n);  // throws
      return;
    }
  block_q16_0* y = (block_q16_0*)dst;
  const __m256i kmax = _mm256_set1_epi32(32767), kmin = _mm256_set1_epi32(-32767);
  for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
    __m256 v[4], m = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
      v[k] = _mm256_loadu_ps(x + 8 * k);
      m = _mm256_max_ps(m, _mm256_and_ps(v[k], absmask));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    if (!(amax >= 1e-30f)) {  // zero or tiny (1/d may overflow): the scalar block
      quantize_block_q16_0(x, y + i);
      continue;
    }
    const float d = amax / 32767.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    const __m256 vid = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; k++)
      q[k] = _mm256_max_epi32(_mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(v[k], vid)), kmax), kmin);
    y[i].d = d;
    // packs interleaves 128-bit halves: [q0 lo, q1 lo, q0 hi, q1 hi] -> permute to order
    _mm256_storeu_si256((__m256i*)y[i].qs, _mm256_permute4x64_epi64(_mm256_packs_epi32(q[0], q[1]), 0xD8));
    _mm256_storeu_si256((__m256i*)(y[i].qs + 16), _mm256_permute4x64_epi64(_mm256_packs_epi32(q[2], q[3]), 0xD8));
  }
}

// nt -> template instantiation
#define KNOT_NT_DISPATCH(name, tmpl)                                                     \
  static void name(int64_t n, const void* w, const void* const* act, int nt, float* out) { \
    switch (nt) {                                                                        \
      case 1: tmpl<1>(n, w, act, out); break;                                            \
      case 2: tmpl<2>(n, w, act, out); break;                                            \
      case 3: tmpl<3>(n, w, act, out); break;                                            \
      default: tmpl<4>(n, w, act, out); break;                                           \
    }                                                                                    \
  }

template <int NT>
static void q4_K_avx2(int64_t n, const void* w, const void* const* act, float* out) {
  kmin_avx2<NT, false>(n, w, act, out);
}
template <int NT>
static void q5_K_avx2(int64_t n, const void* w, const void* const* act, float* out) {
  kmin_avx2<NT, true>(n, w, act, out);
}

KNOT_NT_DISPATCH(dot_f32_avx2, f32_avx2)
KNOT_NT_DISPATCH(dot_f16_avx2, f16_avx2)
KNOT_NT_DISPATCH(dot_bf16_avx2, bf16_avx2)
KNOT_NT_DISPATCH(dot_q4_0_avx2, q4_0_avx2)
KNOT_NT_DISPATCH(dot_q8_0_avx2, q8_0_avx2)
KNOT_NT_DISPATCH(dot_q4_K_avx2, q4_K_avx2)
KNOT_NT_DISPATCH(dot_q5_K_avx2, q5_K_avx2)
KNOT_NT_DISPATCH(dot_q6_K_avx2, q6_K_avx2)
KNOT_NT_DISPATCH(dot_q4_0_q16_avx2, q4_0_q16_avx2)
KNOT_NT_DISPATCH(dot_q8_0_q16_avx2, q8_0_q16_avx2)

static void mm_q4_K_avx2(int64_t n, const uint8_t* W, size_t rb, int64_t nr, const uint8_t* a, size_t ab, int64_t nt, float* Y, int64_t ldy) {
  mm_kquant8_avx2<false>(n, W, rb, nr, a, ab, nt, Y, ldy);
}
static void mm_q6_K_avx2(int64_t n, const uint8_t* W, size_t rb, int64_t nr, const uint8_t* a, size_t ab, int64_t nt, float* Y, int64_t ldy) {
  mm_kquant8_avx2<true>(n, W, rb, nr, a, ab, nt, Y, ldy);
}

static void mm_q4_0_avx2(int64_t n, const uint8_t* W, size_t rb, int64_t nr, const uint8_t* a, size_t ab, int64_t nt, float* Y, int64_t ldy) {
  mm_q0_8_avx2<block_q4_0>(n, W, rb, nr, a, ab, nt, Y, ldy);
}
static void mm_q8_0_avx2(int64_t n, const uint8_t* W, size_t rb, int64_t nr, const uint8_t* a, size_t ab, int64_t nt, float* Y, int64_t ldy) {
  mm_q0_8_avx2<block_q8_0>(n, W, rb, nr, a, ab, nt, Y, ldy);
}

// n halves -> f32 with F16C, 16 at a time: vcvtph2ps is exact for every non-NaN half; it
// quiets a signalling NaN, so lanes holding a NaN take half_to_float (payload kept): the
// same bits as half_to_float_row for every input.
void f16_to_f32_row_f16c(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {  // hot loop: attention reads of the F16 KV cache
    const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(src + i)));
    const __m256 b = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(src + i + 8)));
    _mm256_storeu_ps(dst + i, a);
    _mm256_storeu_ps(dst + i + 8, b);
    if (_mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_UNORD_Q)))
      for (size_t j = i; j < i + 16; j++) dst[j] = half_to_float(src[j]);
  }
  for (; i < n; i++) dst[i] = half_to_float(src[i]);
}

// The Q8_K and Q16_0 activation quantizers above; the scalar Q8_0 one.
static constexpr DotKernels make_avx2_table() {
  DotKernels k;
  k.name = "avx2";
  k.dot[type_index(DType::F32)] = dot_f32_avx2;
  k.dot[type_index(DType::F16)] = dot_f16_avx2;
  k.dot[type_index(DType::BF16)] = dot_bf16_avx2;
  k.dot[type_index(DType::Q4_0)] = dot_q4_0_avx2;
  k.dot[type_index(DType::Q8_0)] = dot_q8_0_avx2;
  k.dot[type_index(DType::Q4_K)] = dot_q4_K_avx2;
  k.dot[type_index(DType::Q5_K)] = dot_q5_K_avx2;
  k.dot[type_index(DType::Q6_K)] = dot_q6_K_avx2;
  k.dot_q16[type_index(DType::Q4_0)] = dot_q4_0_q16_avx2;
  k.dot_q16[type_index(DType::Q8_0)] = dot_q8_0_q16_avx2;
  k.mm[type_index(DType::Q4_0)] = mm_q4_0_avx2;
  k.mm[type_index(DType::Q8_0)] = mm_q8_0_avx2;
  k.mm[type_index(DType::Q4_K)] = mm_q4_K_avx2;
  k.mm[type_index(DType::Q6_K)] = mm_q6_K_avx2;
  k.quant_act[(int)ActFormat::Q8_K] = quant_q8_K_avx2;
  k.quant_act[(int)ActFormat::Q16_0] = quant_q16_0_avx2;
  k.mv[type_index(DType::Q4_0)] = mv_q4_0_avx2;
  k.mv[type_index(DType::Q8_0)] = mv_q8_0_avx2;
  k.mv[type_index(DType::Q4_K)] = mv_q4_K_avx2;
  k.mv[type_index(DType::Q6_K)] = mv_q6_K_avx2;
  return k;
}

const DotKernels kDotAvx2 = make_avx2_table();

}  // namespace knot

#endif  // x86
