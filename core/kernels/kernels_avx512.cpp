// kernels_avx512.cpp — AVX-512 (F/BW/VL) + AVX512-VNNI kernels (Kernel::Simd natively on
// CPUs that report all four; kernels.cpp checks). Compiled with -mavx512f -mavx512bw
// -mavx512vl -mavx512vnni -mavx2 -mfma -mf16c (CMakeLists.txt). The table is kDotAvx2
// with these slots replaced:
//   Q4_0 / Q8_0 x Q16_0: one batched kernel for decode AND prefill (mm, also for a single
//     token). Decode: 16 weight rows at a time, one row per 32-bit lane. Per 32-weight
//     block and row, vpdpwssd of the int16-widened weights with the int16 activations
//     (exact), a 16 -> 1 transpose-add tree puts the 16 rows' block sums into one vector,
//     and the per-block float combine runs on the 16 lanes with exactly block_accum's
//     operations in block order (contraction off) — so every row equals the scalar dot
//     bit for bit; the panel two ahead is prefetched. Prefill: pair-major int16 panels,
//     16 rows x 8 tokens of vpdpwssd (below). int16 activations are why these stay 16-bit:
//     an 8-bit vpdpbusd tile on Q16_0 needs two dots (high and low byte) per product, the
//     same 32 products per instruction as vpdpwssd; twice that needs int8 (Q8_0)
//     activations, a numerics change (kernels.h).
//   Q4_K / Q6_K x Q8_K: 512-bit dot kernels (NT <= 4 tokens share each weight decode):
//     vpmaddubsw (u8 weights x s8 activations, pairs <= 2*63*128, no saturation) then
//     vpdpwssd with the sub-block scales; integer block sums exact, block_accum* in scalar.
//   Q4_K / Q6_K decode (one token, mm with nt == 1): 16 rows per pass, the rows' exact
//     block sums reduced into the 16 lanes of one vector, so the scale / min unpacking,
//     fp16 conversions and block_accum* run once per block for 16 rows (mv_q4_K_rows16,
//     mv_q6_K_rows16 below).
//   Q4_K / Q6_K prefill (2+ tokens): 16-row x 8-token vpdpbusd tiles (mm, see below).
//   Q8_K and Q16_0 activations: 16-lane quantizers with the scalar ones' bytes.
// Float weights, Q5_K and the Q8_0-activation vec_dot stay on the AVX2 kernels.
#if defined(__x86_64__) || defined(__i386__)

#include "kernels/no_fp_contract.h"  // first: no FMA contraction in this file

#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's avx512fintrin.h trips its own -Wmaybe-uninitialized (_mm512_undefined_*, GCC PR105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "kernels/kernels_internal.h"

namespace knot {

// Full unroll of the short token / pair loops of the prefill tiles (GCC otherwise keeps
// them rolled with the accumulators in memory).
#if defined(__clang__)
#define KNOT_UNROLL _Pragma("unroll")
#else
#define KNOT_UNROLL _Pragma("GCC unroll 16")
#endif

namespace {

inline int32_t hsum512(__m512i v) { return _mm512_reduce_add_epi32(v); }

inline int32_t hsum256(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// Lane r of the result = sum of the 16 lanes of v[r] (exact integer adds).
inline __m512i reduce16(const __m512i v[16]) {
  __m512i a[8], b[4];
  KNOT_UNROLL
  for (int k = 0; k < 8; k++)  // per 128-bit lane: [x0+x2, y0+y2, x1+x3, y1+y3]
    a[k] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * k], v[2 * k + 1]), _mm512_unpackhi_epi32(v[2 * k], v[2 * k + 1]));
  KNOT_UNROLL
  for (int k = 0; k < 4; k++)  // per 128-bit lane L: [S_L(v4k), S_L(v4k+1), S_L(v4k+2), S_L(v4k+3)]
    b[k] = _mm512_add_epi32(_mm512_unpacklo_epi64(a[2 * k], a[2 * k + 1]), _mm512_unpackhi_epi64(a[2 * k], a[2 * k + 1]));
  const __m512i d01 = _mm512_add_epi32(_mm512_shuffle_i32x4(b[0], b[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                       _mm512_shuffle_i32x4(b[0], b[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512i d23 = _mm512_add_epi32(_mm512_shuffle_i32x4(b[2], b[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                       _mm512_shuffle_i32x4(b[2], b[3], _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm512_add_epi32(_mm512_shuffle_i32x4(d01, d23, _MM_SHUFFLE(2, 0, 2, 0)),
                          _mm512_shuffle_i32x4(d01, d23, _MM_SHUFFLE(3, 1, 3, 1)));
}

// ---- Q4_0 / Q8_0 weights x Q16_0 activations, 16 rows per pass (lanes = rows)

struct RowsQ8_0 {
  static constexpr size_t BLOCK = sizeof(block_q8_0);
  static __m512i weights(const uint8_t* blk) {  // 32 int16 in element order
    return _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)(blk + 2)));
  }
};
struct RowsQ4_0 {
  static constexpr size_t BLOCK = sizeof(block_q4_0);
  static __m512i weights(const uint8_t* blk) {
    const __m128i q = _mm_loadu_si128((const __m128i*)(blk + 2));
    const __m128i m4 = _mm_set1_epi8(0x0F), k8 = _mm_set1_epi8(8);
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(q, m4), k8);                     // elems 0..15
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), m4), k8);  // 16..31
    return _mm512_cvtepi8_epi16(_mm256_set_m128i(hi, lo));
  }
};

// Decode (one token): the 16 rows' block sums need a 16 -> 1 reduction per block, so the
// kernel is bound by the weight stream (16 interleaved rows, ~13 KB per panel for 768
// columns) rather than by vpdpwssd: the next panel is prefetched while this one runs
// (a proportional slice of its bytes per block), and the 16 accumulators stay in
// registers (fully unrolled row loop).
constexpr int64_t PF_PANELS = 2;  // prefetch distance, in 16-row panels

template <class F>
void mv_rows16(int64_t n, const uint8_t* W, size_t rb, int64_t nrows, const uint8_t* act, float* Y) {
  const int64_t nb = n / QK8_0;
  const block_q16_0* a = (const block_q16_0*)act;
  const uint8_t* const end = W + (size_t)nrows * rb;
  const size_t panel = 16 * rb;
  const size_t pf_step = (panel + (size_t)nb - 1) / (size_t)nb;  // bytes of a later panel per block
  for (int64_t r0 = 0; r0 < nrows; r0 += 16) {
    const int nr = (int)std::min<int64_t>(16, nrows - r0);
    const uint8_t* row[16];
    alignas(64) int32_t offs[16];
    for (int r = 0; r < 16; r++) {  // rows past the end repeat the last one; not stored
      row[r] = W + (size_t)(r0 + std::min(r, nr - 1)) * rb;
      offs[r] = (int32_t)(row[r] - row[0]);
    }
    const __m512i voff = _mm512_load_si512(offs);
    const uint8_t* pf = row[0] + PF_PANELS * panel;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {  // hot loop: one block of 16 rows
      for (size_t o = 0; o < pf_step; o += 64)
        if (pf + o < end) _mm_prefetch((const char*)(pf + o), _MM_HINT_T0);
      pf += pf_step;
      const __m512i av = _mm512_loadu_si512((const void*)a[i].qs);
      __m512i s[16];
      KNOT_UNROLL
      for (int r = 0; r < 16; r++)
        s[r] = _mm512_dpwssd_epi32(_mm512_setzero_si512(), F::weights(row[r] + (size_t)i * F::BLOCK), av);
      const __m512i sumi = reduce16(s);
      const __m512i d32 = _mm512_i32gather_epi32(voff, (const void*)(row[0] + (size_t)i * F::BLOCK), 1);
      const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d32));
      const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(a[i].d));             // block_accum, lanewise:
      acc = _mm512_add_ps(acc, _mm512_mul_ps(d, _mm512_cvtepi32_ps(sumi)));  // acc + (dw*da)*sumi
    }
    _mm512_mask_storeu_ps(Y + r0, (__mmask16)((1u << nr) - 1), acc);
  }
}

// Prefill (2+ tokens): the 16 rows' blocks are repacked once per call into pair-major
// int16 (for weight pair p of a block, one zmm holding that pair of all 16 rows), then
// each token tile accumulates one block's sums for all 16 rows with 16 vpdpwssd against a
// broadcast activation pair — no horizontal reduction. Same integer block sums and the
// same lanewise block_accum as mv_rows16, so the same bits.

// 16 x 16 dword transpose: out[p] lane r = in[r] lane p.
inline void transpose16(const __m512i in[16], __m512i out[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_epi32(in[2 * i], in[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(in[2 * i], in[2 * i + 1]);
  }
  for (int i = 0; i < 4; i++) {  // u[4i+j], 128-bit lane L: rows 4i..4i+3 of column 4L+j
    u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int j = 0; j < 4; j++) {  // 4 x 4 transpose of 128-bit lanes of u[j], u[4+j], u[8+j], u[12+j]
    const __m512i x0 = _mm512_shuffle_i32x4(u[j], u[4 + j], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i x1 = _mm512_shuffle_i32x4(u[j], u[4 + j], _MM_SHUFFLE(3, 2, 3, 2));
    const __m512i y0 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i y1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], _MM_SHUFFLE(3, 2, 3, 2));
    out[0 + j] = _mm512_shuffle_i32x4(x0, y0, _MM_SHUFFLE(2, 0, 2, 0));
    out[4 + j] = _mm512_shuffle_i32x4(x0, y0, _MM_SHUFFLE(3, 1, 3, 1));
    out[8 + j] = _mm512_shuffle_i32x4(x1, y1, _MM_SHUFFLE(2, 0, 2, 0));
    out[12 + j] = _mm512_shuffle_i32x4(x1, y1, _MM_SHUFFLE(3, 1, 3, 1));
  }
}

struct PackScratch {
  std::vector<__m512i> w;  // [nb][16 pairs] 16 rows' weight pairs
  std::vector<__m512> d;   // [nb] 16 rows' weight scales
};
thread_local PackScratch g_pack;

template <int TT>
inline void gemm_tile(const __m512i* pw, const __m512* pd, int64_t nb, const block_q16_0* const* a, __m512* acc) {
  KNOT_UNROLL
  for (int t = 0; t < TT; t++) acc[t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; i++) {  // hot loop: one block, 16 rows x TT tokens
    __m512i s[TT];
    KNOT_UNROLL
    for (int t = 0; t < TT; t++) s[t] = _mm512_setzero_si512();
    const __m512i* w = pw + 16 * i;
    KNOT_UNROLL
    for (int p = 0; p < 16; p++) {
      const __m512i wv = _mm512_load_si512((const void*)(w + p));
      KNOT_UNROLL
      for (int t = 0; t < TT; t++) {
        int32_t pair;
        std::memcpy(&pair, a[t][i].qs + 2 * p, 4);
        s[t] = _mm512_dpwssd_epi32(s[t], wv, _mm512_set1_epi32(pair));
      }
    }
    KNOT_UNROLL
    for (int t = 0; t < TT; t++) {
      const __m512 d = _mm512_mul_ps(pd[i], _mm512_set1_ps(a[t][i].d));      // block_accum, lanewise:
      acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(d, _mm512_cvtepi32_ps(s[t])));  // acc + (dw*da)*sumi
    }
  }
}

// Two 16-row panels x TT tokens: each broadcast activation pair feeds two vpdpwssd (one
// per panel), halving the broadcast loads per product; per panel the same integer block
// sums and lanewise block_accum as gemm_tile, so the same bits.
template <int TT>
inline void gemm_tile2(const __m512i* pw0, const __m512* pd0, const __m512i* pw1, const __m512* pd1, int64_t nb,
                       const block_q16_0* const* a, __m512* acc0, __m512* acc1) {
  KNOT_UNROLL
  for (int t = 0; t < TT; t++) acc0[t] = acc1[t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; i++) {  // hot loop: one block, 32 rows x TT tokens
    __m512i s0[TT], s1[TT];
    KNOT_UNROLL
    for (int t = 0; t < TT; t++) s0[t] = s1[t] = _mm512_setzero_si512();
    const __m512i* w0 = pw0 + 16 * i;
    const __m512i* w1 = pw1 + 16 * i;
    KNOT_UNROLL
    for (int p = 0; p < 16; p++) {
      const __m512i wv0 = _mm512_load_si512((const void*)(w0 + p));
      const __m512i wv1 = _mm512_load_si512((const void*)(w1 + p));
      KNOT_UNROLL
      for (int t = 0; t < TT; t++) {
        int32_t pair;
        std::memcpy(&pair, a[t][i].qs + 2 * p, 4);
        const __m512i av = _mm512_set1_epi32(pair);
        s0[t] = _mm512_dpwssd_epi32(s0[t], wv0, av);
        s1[t] = _mm512_dpwssd_epi32(s1[t], wv1, av);
      }
    }
    KNOT_UNROLL
    for (int t = 0; t < TT; t++) {
      const __m512 da = _mm512_set1_ps(a[t][i].d);
      const __m512 d0 = _mm512_mul_ps(pd0[i], da), d1 = _mm512_mul_ps(pd1[i], da);  // block_accum, lanewise
      acc0[t] = _mm512_add_ps(acc0[t], _mm512_mul_ps(d0, _mm512_cvtepi32_ps(s0[t])));
      acc1[t] = _mm512_add_ps(acc1[t], _mm512_mul_ps(d1, _mm512_cvtepi32_ps(s1[t])));
    }
  }
}

constexpr int QT = 8;  // token tile of the Q4_0/Q8_0 prefill kernel

// Repacks nr (1..16) rows starting at W (rows past nr repeat the last one) into pair-major
// int16: pw[16 * i + p] lane r = weight pair p of block i of row r; pd[i] lane r = its scale.
template <class F>
void pack_rows16(const uint8_t* W, size_t rb, int nr, int64_t nb, __m512i* pw, __m512* pd) {
  const uint8_t* row[16];
  alignas(64) int32_t offs[16];
  for (int r = 0; r < 16; r++) {
    row[r] = W + (size_t)std::min(r, nr - 1) * rb;
    offs[r] = (int32_t)(row[r] - row[0]);
  }
  const __m512i voff = _mm512_load_si512(offs);
  for (int64_t i = 0; i < nb; i++) {
    __m512i rw[16];
    for (int r = 0; r < 16; r++) rw[r] = F::weights(row[r] + (size_t)i * F::BLOCK);
    transpose16(rw, pw + 16 * i);
    const __m512i d32 = _mm512_i32gather_epi32(voff, (const void*)(row[0] + (size_t)i * F::BLOCK), 1);
    pd[i] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d32));
  }
}

template <class F>
void mm_gemm16(int64_t n, const uint8_t* W, size_t rb, int64_t nrows, const uint8_t* act, size_t ab,
               int64_t nt, float* Y, int64_t ldy) {
  if (nt < 2) {
    for (int64_t t = 0; t < nt; t++) mv_rows16<F>(n, W, rb, nrows, act + (size_t)t * ab, Y + t * ldy);
    return;
  }
  const int64_t nb = n / QK8_0;
  PackScratch& ps = g_pack;
  ps.w.resize((size_t)(nb * 32));
  ps.d.resize((size_t)(nb * 2));
  int64_t r0 = 0;
  for (; r0 + 32 <= nrows; r0 += 32) {  // two full panels per pass
    pack_rows16<F>(W + (size_t)r0 * rb, rb, 16, nb, ps.w.data(), ps.d.data());
    pack_rows16<F>(W + (size_t)(r0 + 16) * rb, rb, 16, nb, ps.w.data() + nb * 16, ps.d.data() + nb);
    for (int64_t t0 = 0; t0 < nt; t0 += QT) {
      const int tt = (int)std::min<int64_t>(QT, nt - t0);
      const block_q16_0* a[QT];
      for (int t = 0; t < tt; t++) a[t] = (const block_q16_0*)(act + (size_t)(t0 + t) * ab);
      __m512 acc0[QT], acc1[QT];
      const __m512i *w0 = ps.w.data(), *w1 = w0 + nb * 16;
      const __m512 *d0 = ps.d.data(), *d1 = d0 + nb;
      switch (tt) {  // tails of 1..7 tokens
        case 1: gemm_tile2<1>(w0, d0, w1, d1, nb, a, acc0, acc1); break;
        case 2: gemm_tile2<2>(w0, d0, w1, d1, nb, a, acc0, acc1); break;
        case 3: gemm_tile2<3>(w0, d0, w1, d1, nb, a, acc0, acc1); break;
        case 4: gemm_tile2<4>(w0, d0, w1, d1, nb, a, acc0, acc1); break;
        case 5: gemm_tile2<5>(w0, d0, w1, d1, nb, a, acc0, acc1); break;
        case 6: gemm_tile2<6>(w0, d0, w1, d1, nb, a, acc0, acc1); break;
        case 7: gemm_tile2<7>(w0, d0, w1, d1, nb, a, acc0, acc1); break;
        default: gemm_tile2<8>(w0, d0, w1, d1, nb, a, acc0, acc1); break;
      }
      for (int t = 0; t < tt; t++) {
        _mm512_storeu_ps(Y + (t0 + t) * ldy + r0, acc0[t]);
        _mm512_storeu_ps(Y + (t0 + t) * ldy + r0 + 16, acc1[t]);
      }
    }
  }
  for (; r0 < nrows; r0 += 16) {  // the last 1..31 rows, one panel at a time
    const int nr = (int)std::min<int64_t>(16, nrows - r0);
    pack_rows16<F>(W + (size_t)r0 * rb, rb, nr, nb, ps.w.data(), ps.d.data());
    for (int64_t t0 = 0; t0 < nt; t0 += QT) {
      const int tt = (int)std::min<int64_t>(QT, nt - t0);
      const block_q16_0* a[QT];
      for (int t = 0; t < tt; t++) a[t] = (const block_q16_0*)(act + (size_t)(t0 + t) * ab);
      __m512 acc[QT];
      switch (tt) {  // 8 independent vpdpwssd chains per weight load; tails of 1..7 tokens
        case 1: gemm_tile<1>(ps.w.data(), ps.d.data(), nb, a, acc); break;
        case 2: gemm_tile<2>(ps.w.data(), ps.d.data(), nb, a, acc); break;
        case 3: gemm_tile<3>(ps.w.data(), ps.d.data(), nb, a, acc); break;
        case 4: gemm_tile<4>(ps.w.data(), ps.d.data(), nb, a, acc); break;
        case 5: gemm_tile<5>(ps.w.data(), ps.d.data(), nb, a, acc); break;
        case 6: gemm_tile<6>(ps.w.data(), ps.d.data(), nb, a, acc); break;
        case 7: gemm_tile<7>(ps.w.data(), ps.d.data(), nb, a, acc); break;
        default: gemm_tile<8>(ps.w.data(), ps.d.data(), nb, a, acc); break;
      }
      const __mmask16 keep = (__mmask16)((1u << nr) - 1);
      for (int t = 0; t < tt; t++) _mm512_mask_storeu_ps(Y + (t0 + t) * ldy + r0, keep, acc[t]);
    }
  }
}

void mm_q8_0_avx512(int64_t n, const uint8_t* W, size_t rb, int64_t nr, const uint8_t* a, size_t ab, int64_t nt, float* Y, int64_t ldy) {
  mm_gemm16<RowsQ8_0>(n, W, rb, nr, a, ab, nt, Y, ldy);
}
void mm_q4_0_avx512(int64_t n, const uint8_t* W, size_t rb, int64_t nr, const uint8_t* a, size_t ab, int64_t nt, float* Y, int64_t ldy) {
  mm_gemm16<RowsQ4_0>(n, W, rb, nr, a, ab, nt, Y, ldy);
}

// ---- K-quants x Q8_K

// Q4_K: per 64-weight chunk c (sub-blocks 2c: low nibbles, 2c+1: high nibbles of the
// same 32 bytes) one zmm [low nibbles | high nibbles] against the 64 contiguous
// activations; vpmaddubsw pairs, then vpdpwssd with [sc[2c] x16 | sc[2c+1] x16].
// Scales and mins of the 8 sub-blocks as i16 lanes [sc0..sc7, m0..m7] (32-bit mask
// decode of the 12 packed bytes, same packing as k4_scale_min).
inline __m256i k4_scales16(const uint8_t* s) {
  uint32_t a, b, c;
  std::memcpy(&a, s, 4);
  std::memcpy(&b, s + 4, 4);
  std::memcpy(&c, s + 8, 4);
  const uint32_t sc_lo = a & 0x3F3F3F3Fu, m_lo = b & 0x3F3F3F3Fu;
  const uint32_t sc_hi = (c & 0x0F0F0F0Fu) | ((a >> 2) & 0x30303030u);
  const uint32_t m_hi = ((c >> 4) & 0x0F0F0F0Fu) | ((b >> 2) & 0x30303030u);
  return _mm256_cvtepu8_epi16(_mm_setr_epi32((int)sc_lo, (int)sc_hi, (int)m_lo, (int)m_hi));
}

template <int NT>
void q4_K_avx512(int64_t n, const void* w, const void* const* act, float* out) {
  const block_q4_K* x = (const block_q4_K*)w;
  const int64_t nb = n / QK_K;
  float acc[NT];
  for (int t = 0; t < NT; t++) acc[t] = 0.f;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);  // 0 low half, 4 high
  // i16 lane l of chunk c's products: sub-block 2c (l < 16) or 2c+1; mins as pairs vs bsums
  __m512i sidx[4];
  for (int c = 0; c < 4; c++)
    sidx[c] = _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * c)), _mm256_set1_epi16((short)(2 * c + 1)), 1);
  const __m256i midx = _mm256_setr_epi16(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
  for (int64_t i = 0; i < nb; i++) {
    const __m256i scm = k4_scales16(x[i].scales);
    const __m512i scm512 = _mm512_castsi256_si512(scm);
    const __m256i mp = _mm256_permutexvar_epi16(midx, scm);  // m0,m0,m1,m1,..,m7,m7
    __m512i isum[NT];
    for (int t = 0; t < NT; t++) isum[t] = _mm512_setzero_si512();
    for (int c = 0; c < 4; c++) {  // hot loop
      const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)(x[i].qs + 32 * c)));
      const __m512i wv = _mm512_and_si512(_mm512_srlv_epi16(q, shift), m4);
      const __m512i sv = _mm512_permutexvar_epi16(sidx[c], scm512);
      for (int t = 0; t < NT; t++) {
        const int8_t* a = ((const block_q8_K*)act[t])[i].qs + 64 * c;
        const __m512i p = _mm512_maddubs_epi16(wv, _mm512_loadu_si512((const void*)a));
        isum[t] = _mm512_dpwssd_epi32(isum[t], p, sv);
      }
    }
    const float dw = half_to_float(x[i].d), dminw = half_to_float(x[i].dmin);
    for (int t = 0; t < NT; t++) {
      const block_q8_K* ab = (const block_q8_K*)act[t] + i;
      const int32_t summs = hsum256(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)ab->bsums), mp));
      acc[t] = block_accum_kmin(acc[t], dw, dminw, ab->d, hsum512(isum[t]), summs);
    }
  }
  for (int t = 0; t < NT; t++) out[t] = acc[t];
}

// Q6_K: per half h, v01 = sub-blocks 8h+0..3 (elements 0..63), v23 = 8h+4..7 (64..127),
// unsigned q (0..63); subtract 32 * sum_j sc[j] * bsums[j] once per block.
template <int NT>
void q6_K_avx512(int64_t n, const void* w, const void* const* act, float* out) {
  const block_q6_K* x = (const block_q6_K*)w;
  const int64_t nb = n / QK_K;
  float acc[NT];
  for (int t = 0; t < NT; t++) acc[t] = 0.f;
  const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
  const __m512i sh_v01 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);  // left
  const __m512i sh_v23 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);  // right
  // i16 lane l of v01/v23 (pairs of weights 2l, 2l+1) belongs to sub-block l/8 (+4 for v23)
  alignas(64) int16_t idx01[32], idx23[32];
  for (int l = 0; l < 32; l++) idx01[l] = (int16_t)(l / 8), idx23[l] = (int16_t)(4 + l / 8);
  const __m512i i01 = _mm512_load_si512(idx01), i23 = _mm512_load_si512(idx23);
  for (int64_t i = 0; i < nb; i++) {
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)x[i].scales));
    __m512i isum[NT];
    for (int t = 0; t < NT; t++) isum[t] = _mm512_setzero_si512();
    for (int h = 0; h < 2; h++) {  // hot loop: 128 weights
      const __m512i q = _mm512_loadu_si512((const void*)(x[i].ql + 64 * h));
      const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)(x[i].qh + 32 * h)));
      const __m512i v01 = _mm512_or_si512(_mm512_and_si512(q, m4), _mm512_and_si512(_mm512_sllv_epi16(hb, sh_v01), m30));
      const __m512i v23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(q, 4), m4),
                                          _mm512_and_si512(_mm512_srlv_epi16(hb, sh_v23), m30));
      const __m512i sch = _mm512_castsi256_si512(sc16);
      const __m512i idx_h = _mm512_set1_epi16((short)(8 * h));
      const __m512i s01 = _mm512_permutexvar_epi16(_mm512_add_epi16(i01, idx_h), sch);
      const __m512i s23 = _mm512_permutexvar_epi16(_mm512_add_epi16(i23, idx_h), sch);
      for (int t = 0; t < NT; t++) {
        const int8_t* a = ((const block_q8_K*)act[t])[i].qs + 128 * h;
        const __m512i p01 = _mm512_maddubs_epi16(v01, _mm512_loadu_si512((const void*)a));
        const __m512i p23 = _mm512_maddubs_epi16(v23, _mm512_loadu_si512((const void*)(a + 64)));
        isum[t] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(isum[t], p01, s01), p23, s23);
      }
    }
    const float dw = half_to_float(x[i].d);
    for (int t = 0; t < NT; t++) {
      const block_q8_K* a = (const block_q8_K*)act[t] + i;
      const int32_t off = hsum256(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)a->bsums), sc16));
      acc[t] = block_accum(acc[t], dw, a->d, hsum512(isum[t]) - 32 * off);
    }
  }
  for (int t = 0; t < NT; t++) out[t] = acc[t];
}

// ---- K-quant decode (one token): 16 rows per pass, one row per 32-bit lane of the block
// sums (as mv_rows16). Per row and block the integer work is the dot kernels' (vpmaddubsw
// u8 weights x s8 activations, vpdpwssd with the row's sub-block scales) into one zmm per
// row; reduce16 then puts the 16 rows' exact block sums into one vector, and everything
// that was per row and block in the dot kernels — the two horizontal sums, the scale and
// min unpacking, the fp16 conversions and the float combine — runs once for 16 rows:
//   Q4_K: the rows' 16-byte block headers (d, dmin, 12 scale bytes) are transposed so that
//     lane r holds row r's dwords; k4_scales16's 32-bit mask decode runs lanewise; the min
//     sum sum_j m[j] * (bsums[2j] + bsums[2j+1]) is four vpdpwssd of (m[j], m[j+2]) i16
//     pairs against broadcast activation pairs; block_accum_kmin lanewise.
//   Q6_K: the -32 offset is folded into the row's own sum (vpdpwssd of -32*sc[j] against
//     the 16 bsums, exact), d is gathered; block_accum lanewise.
// All integer sums are exact and the float combine is the scalar one lanewise in block
// order (contraction off), so every row equals the dot kernels bit for bit. The panel
// PF_PANELS ahead is prefetched, a slice per block.

inline uint32_t pair16(int a, int b) { return (uint32_t)(uint16_t)(int16_t)a | ((uint32_t)(uint16_t)(int16_t)b << 16); }

// Transpose of 16 rows' 16-byte slices: out[k] lane r = dword k of the slice at row[r].
inline void load_t16x4(const uint8_t* const* row, size_t off, __m512i out[4]) {
  __m512i in[4];
  KNOT_UNROLL
  for (int q = 0; q < 4; q++) {  // 128-bit lane L of in[q]: row 4L+q
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i*)(row[q] + off)));
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i*)(row[4 + q] + off)), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i*)(row[8 + q] + off)), 2);
    in[q] = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i*)(row[12 + q] + off)), 3);
  }
  const __m512i t0 = _mm512_unpacklo_epi32(in[0], in[1]), t1 = _mm512_unpackhi_epi32(in[0], in[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(in[2], in[3]), t3 = _mm512_unpackhi_epi32(in[2], in[3]);
  out[0] = _mm512_unpacklo_epi64(t0, t2);
  out[1] = _mm512_unpackhi_epi64(t0, t2);
  out[2] = _mm512_unpacklo_epi64(t1, t3);
  out[3] = _mm512_unpackhi_epi64(t1, t3);
}

// 16 row pointers of the panel at r0 (rows past nrows repeat the last one; not stored).
inline void panel_rows(const uint8_t* W, size_t rb, int64_t r0, int nr, const uint8_t* row[16]) {
  for (int r = 0; r < 16; r++) row[r] = W + (size_t)(r0 + std::min(r, nr - 1)) * rb;
}

inline void prefetch_slice(const uint8_t*& pf, size_t step, const uint8_t* end) {
  const uint8_t* const stop = std::min(pf + step, end);
  for (const uint8_t* p = pf; p < stop; p += 64) _mm_prefetch((const char*)p, _MM_HINT_T0);
  pf += step;
}

void mv_q4_K_rows16(int64_t n, const uint8_t* W, size_t rb, int64_t nrows, const uint8_t* act, float* Y) {
  const int64_t nb = n / QK_K;
  const block_q8_K* a = (const block_q8_K*)act;
  const uint8_t* const end = W + (size_t)nrows * rb;
  const size_t panel = 16 * rb;
  const size_t pf_step = (panel + (size_t)nb - 1) / (size_t)nb;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);  // 0 low half, 4 high
  __m512i sidx[4];  // vpshufb: i16 lanes of chunk c = sc[2c] (low half) / sc[2c+1] (high half), zero-extended
  for (int c = 0; c < 4; c++)
    sidx[c] = _mm512_inserti64x4(_mm512_set1_epi16((short)(0x8000 | (2 * c))), _mm256_set1_epi16((short)(0x8000 | (2 * c + 1))), 1);
  const __m512i k3f = _mm512_set1_epi32(0x3F3F3F3F), k0f = _mm512_set1_epi32(0x0F0F0F0F);
  const __m512i k30 = _mm512_set1_epi32(0x30303030), kff = _mm512_set1_epi32(0x00FF00FF);
  // qword q of the two unpacked scale vectors (below) that holds row r's 8 scale bytes
  int qsel[16];
  for (int r = 0; r < 16; r++) qsel[r] = ((r & 3) < 2 ? 0 : 8) + 2 * (r >> 2) + (r & 1);
  for (int64_t r0 = 0; r0 < nrows; r0 += 16) {
    const int nr = (int)std::min<int64_t>(16, nrows - r0);
    const uint8_t* row[16];
    panel_rows(W, rb, r0, nr, row);
    const uint8_t* pf = row[0] + PF_PANELS * panel;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
      prefetch_slice(pf, pf_step, end);
      const size_t bo = (size_t)i * sizeof(block_q4_K);
      __m512i h[4];  // lane r: row r's d|dmin, scale bytes 0..3, 4..7, 8..11
      load_t16x4(row, bo, h);
      const __m512i sc_lo = _mm512_and_si512(h[1], k3f), m_lo = _mm512_and_si512(h[2], k3f);
      const __m512i sc_hi = _mm512_or_si512(_mm512_and_si512(h[3], k0f), _mm512_and_si512(_mm512_srli_epi32(h[1], 2), k30));
      const __m512i m_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(h[3], 4), k0f),
                                           _mm512_and_si512(_mm512_srli_epi32(h[2], 2), k30));
      alignas(64) uint64_t sc8[16];  // row r's sc[0..7] at qword qsel[r]
      _mm512_store_si512((void*)sc8, _mm512_unpacklo_epi32(sc_lo, sc_hi));
      _mm512_store_si512((void*)(sc8 + 8), _mm512_unpackhi_epi32(sc_lo, sc_hi));
      const int8_t* aq = a[i].qs;
      __m512i s[16];
      KNOT_UNROLL
      for (int r = 0; r < 16; r++) {  // hot loop: one block of one row
        const block_q4_K* x = (const block_q4_K*)(row[r] + bo);
        const __m512i bsc = _mm512_set1_epi64((long long)sc8[qsel[r]]);
        __m512i sr = _mm512_setzero_si512();
        KNOT_UNROLL
        for (int c = 0; c < 4; c++) {
          const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)(x->qs + 32 * c)));
          const __m512i wv = _mm512_and_si512(_mm512_srlv_epi16(q, shift), m4);
          const __m512i p = _mm512_maddubs_epi16(wv, _mm512_loadu_si512((const void*)(aq + 64 * c)));
          sr = _mm512_dpwssd_epi32(sr, p, _mm512_shuffle_epi8(bsc, sidx[c]));
        }
        s[r] = sr;
      }
      const __m512i sumi = reduce16(s);
      // mins: lane r = sum_j m[j] * (bsums[2j] + bsums[2j+1]); i16 pairs (m[j], m[j+2])
      int32_t bs[8];
      for (int j = 0; j < 8; j++) bs[j] = a[i].bsums[2 * j] + a[i].bsums[2 * j + 1];
      __m512i summs = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_and_si512(m_lo, kff),
                                          _mm512_set1_epi32((int)pair16(bs[0], bs[2])));
      summs = _mm512_dpwssd_epi32(summs, _mm512_and_si512(_mm512_srli_epi32(m_lo, 8), kff), _mm512_set1_epi32((int)pair16(bs[1], bs[3])));
      summs = _mm512_dpwssd_epi32(summs, _mm512_and_si512(m_hi, kff), _mm512_set1_epi32((int)pair16(bs[4], bs[6])));
      summs = _mm512_dpwssd_epi32(summs, _mm512_and_si512(_mm512_srli_epi32(m_hi, 8), kff), _mm512_set1_epi32((int)pair16(bs[5], bs[7])));
      const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h[0]));
      const __m512 dminw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(h[0], 16)));
      const __m512 da = _mm512_set1_ps(a[i].d);
      const __m512 d = _mm512_mul_ps(dw, da), dm = _mm512_mul_ps(dminw, da);  // block_accum_kmin, lanewise
      const __m512 xs = _mm512_mul_ps(d, _mm512_cvtepi32_ps(sumi));
      const __m512 ys = _mm512_mul_ps(dm, _mm512_cvtepi32_ps(summs));
      acc = _mm512_add_ps(acc, _mm512_sub_ps(xs, ys));
    }
    _mm512_mask_storeu_ps(Y + r0, (__mmask16)((1u << nr) - 1), acc);
  }
}

void mv_q6_K_rows16(int64_t n, const uint8_t* W, size_t rb, int64_t nrows, const uint8_t* act, float* Y) {
  const int64_t nb = n / QK_K;
  const block_q8_K* a = (const block_q8_K*)act;
  const uint8_t* const end = W + (size_t)nrows * rb;
  const size_t panel = 16 * rb;
  const size_t pf_step = (panel + (size_t)nb - 1) / (size_t)nb;
  const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
  const __m512i sh_v01 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);  // left
  const __m512i sh_v23 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);  // right
  alignas(64) int16_t idx01[32], idx23[32];  // i16 lane l of v01/v23 -> sub-block l/8 (+4 for v23)
  for (int l = 0; l < 32; l++) idx01[l] = (int16_t)(l / 8), idx23[l] = (int16_t)(4 + l / 8);
  const __m512i i01[2] = {_mm512_load_si512(idx01), _mm512_add_epi16(_mm512_load_si512(idx01), _mm512_set1_epi16(8))};
  const __m512i i23[2] = {_mm512_load_si512(idx23), _mm512_add_epi16(_mm512_load_si512(idx23), _mm512_set1_epi16(8))};
  const __m256i km32 = _mm256_set1_epi16(-32);
  constexpr size_t D_OFF = offsetof(block_q6_K, d) - 2;  // dword ending at d: scales[14..15], d
  for (int64_t r0 = 0; r0 < nrows; r0 += 16) {
    const int nr = (int)std::min<int64_t>(16, nrows - r0);
    const uint8_t* row[16];
    panel_rows(W, rb, r0, nr, row);
    alignas(64) int32_t offs[16];
    for (int r = 0; r < 16; r++) offs[r] = (int32_t)(row[r] - row[0]);
    const __m512i voff = _mm512_load_si512(offs);
    const uint8_t* pf = row[0] + PF_PANELS * panel;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
      prefetch_slice(pf, pf_step, end);
      const size_t bo = (size_t)i * sizeof(block_q6_K);
      const int8_t* aq = a[i].qs;
      const __m512i bsums = _mm512_maskz_loadu_epi16((__mmask32)0xFFFF, (const void*)a[i].bsums);  // upper lanes 0
      __m512i s[16];
      KNOT_UNROLL
      for (int r = 0; r < 16; r++) {  // hot loop: one block of one row
        const block_q6_K* x = (const block_q6_K*)(row[r] + bo);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)x->scales));
        const __m512i sch = _mm512_castsi256_si512(sc16);
        // -32 * sum_j sc[j] * bsums[j], exact (|-32 sc| <= 4096; bsums' upper lanes are 0)
        __m512i sr = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_castsi256_si512(_mm256_mullo_epi16(sc16, km32)), bsums);
        KNOT_UNROLL
        for (int hh = 0; hh < 2; hh++) {
          const __m512i q = _mm512_loadu_si512((const void*)(x->ql + 64 * hh));
          const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)(x->qh + 32 * hh)));
          const __m512i v01 = _mm512_or_si512(_mm512_and_si512(q, m4), _mm512_and_si512(_mm512_sllv_epi16(hb, sh_v01), m30));
          const __m512i v23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(q, 4), m4),
                                              _mm512_and_si512(_mm512_srlv_epi16(hb, sh_v23), m30));
          const __m512i p01 = _mm512_maddubs_epi16(v01, _mm512_loadu_si512((const void*)(aq + 128 * hh)));
          const __m512i p23 = _mm512_maddubs_epi16(v23, _mm512_loadu_si512((const void*)(aq + 128 * hh + 64)));
          sr = _mm512_dpwssd_epi32(sr, p01, _mm512_permutexvar_epi16(i01[hh], sch));
          sr = _mm512_dpwssd_epi32(sr, p23, _mm512_permutexvar_epi16(i23[hh], sch));
        }
        s[r] = sr;
      }
      const __m512i sumi = reduce16(s);
      const __m512i d32 = _mm512_i32gather_epi32(voff, (const void*)(row[0] + bo + D_OFF), 1);
      const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(d32, 16)));
      const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(a[i].d));         // block_accum, lanewise:
      acc = _mm512_add_ps(acc, _mm512_mul_ps(d, _mm512_cvtepi32_ps(sumi)));  // acc + (dw*da)*sumi
    }
    _mm512_mask_storeu_ps(Y + r0, (__mmask16)((1u << nr) - 1), acc);
  }
}

// ---- K-quant prefill (2+ tokens): 16 rows x 8 tokens register tiles, lanes = rows.
// Each 16-row panel is unpacked once per call into unsigned 8-bit quants in element
// order and transposed so that zmm g of a block holds elements 4g..4g+3 of all 16 rows
// (one dword per row); a token's 4 activations are broadcast and vpdpbusd (u8 weight x
// s8 activation, exact: 4*63*128 < 2^31) accumulates every row's dot at once — no
// horizontal reduction. Per sub-block the i32 dots are scaled with vpmullo by the 16
// rows' sub-block scales; the min / -32 corrections come from the Q8_K bsums with
// vpdpwssd. All integer sums are exact, so they equal the scalar kernels' sums, and the
// per-block float combine is block_accum_kmin / block_accum lanewise in block order
// (contraction off): every (row, token) equals the scalar dot bit for bit.

struct KPanelBlock {
  __m512i w[64];     // w[g] lane r: row r's quants 4g..4g+3 (u8)
  __m512i sc[16];    // Q4_K: sub-block scales sc[0..7]; Q6_K: int8 scales sc[0..15] (i32 lanes)
  __m512i pair[8];   // Q4_K: (m[j], m[j]) i16 pairs; Q6_K: (sc[2k], sc[2k+1]) i16 pairs
  __m512 d, dmin;    // rows' fp16 d / dmin as f32
};
thread_local std::vector<KPanelBlock> g_kpanel;


// Q4_K row block -> 4 zmm of quants in element order (zmm c: elements 64c..64c+63).
inline void unpack_q4_K(const block_q4_K& b, __m512i q[4]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int c = 0; c < 4; c++) {
    const __m256i x = _mm256_loadu_si256((const __m256i*)(b.qs + 32 * c));
    q[c] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(x, m4)),
                              _mm256_and_si256(_mm256_srli_epi16(x, 4), m4), 1);
  }
}
// Q6_K row block -> 4 zmm of unsigned quants 0..63 in element order.
inline void unpack_q6_K(const block_q6_K& b, __m512i q[4]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
  const __m512i sh_v01 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
  const __m512i sh_v23 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
  for (int h = 0; h < 2; h++) {
    const __m512i x = _mm512_loadu_si512((const void*)(b.ql + 64 * h));
    const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)(b.qh + 32 * h)));
    q[2 * h] = _mm512_or_si512(_mm512_and_si512(x, m4), _mm512_and_si512(_mm512_sllv_epi16(hb, sh_v01), m30));
    q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(x, 4), m4),
                                   _mm512_and_si512(_mm512_srlv_epi16(hb, sh_v23), m30));
  }
}

template <bool Q6>
void pack_k_panel(const uint8_t* const* row, int64_t nb, KPanelBlock* pb) {
  for (int64_t i = 0; i < nb; i++) {
    KPanelBlock& o = pb[i];
    __m512i q[16][4];
    alignas(64) int32_t sc[16][16], pr[8][16];
    alignas(64) float d[16], dm[16];
    for (int r = 0; r < 16; r++) {
      if (Q6) {
        const block_q6_K& b = ((const block_q6_K*)row[r])[i];
        unpack_q6_K(b, q[r]);
        for (int j = 0; j < 16; j++) sc[j][r] = b.scales[j];
        for (int k = 0; k < 8; k++) pr[k][r] = (int32_t)pair16(b.scales[2 * k], b.scales[2 * k + 1]);
        d[r] = half_to_float(b.d);
        dm[r] = 0.f;
      } else {
        const block_q4_K& b = ((const block_q4_K*)row[r])[i];
        unpack_q4_K(b, q[r]);
        uint8_t s8[8], m8[8];
        k4_unpack_scales(b.scales, s8, m8);
        for (int j = 0; j < 8; j++) sc[j][r] = s8[j], pr[j][r] = (int32_t)pair16(m8[j], m8[j]);
        for (int j = 8; j < 16; j++) sc[j][r] = 0;
        d[r] = half_to_float(b.d);
        dm[r] = half_to_float(b.dmin);
      }
    }
    for (int c = 0; c < 4; c++) {
      __m512i in[16];
      for (int r = 0; r < 16; r++) in[r] = q[r][c];
      transpose16(in, o.w + 16 * c);
    }
    for (int j = 0; j < 16; j++) o.sc[j] = _mm512_load_si512(sc[j]);
    for (int k = 0; k < 8; k++) o.pair[k] = _mm512_load_si512(pr[k]);
    o.d = _mm512_load_ps(d);
    o.dmin = _mm512_load_ps(dm);
  }
}

inline __m512i bcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// SUB: elements per sub-block (32 for Q4_K, 16 for Q6_K).
template <bool Q6, int TT>
void kgemm_tile(const KPanelBlock* pb, int64_t nb, const block_q8_K* const* a, __m512* acc) {
  constexpr int NSUB = Q6 ? 16 : 8, GPS = Q6 ? 4 : 8;  // sub-blocks, dword groups per sub-block
  KNOT_UNROLL
  for (int t = 0; t < TT; t++) acc[t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; i++) {
    const KPanelBlock& b = pb[i];
    __m512i isum[TT];
    KNOT_UNROLL
    for (int t = 0; t < TT; t++) isum[t] = _mm512_setzero_si512();
    for (int j = 0; j < NSUB; j++) {  // hot loop: one sub-block, 16 rows x TT tokens
      __m512i s[TT];
      KNOT_UNROLL
      for (int t = 0; t < TT; t++) s[t] = _mm512_setzero_si512();
      KNOT_UNROLL
      for (int g = GPS * j; g < GPS * (j + 1); g++) {
        const __m512i wv = _mm512_load_si512((const void*)(b.w + g));
        KNOT_UNROLL
        for (int t = 0; t < TT; t++) s[t] = _mm512_dpbusd_epi32(s[t], wv, bcast4(a[t][i].qs + 4 * g));
      }
      KNOT_UNROLL
      for (int t = 0; t < TT; t++) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(s[t], b.sc[j]));
    }
    KNOT_UNROLL
    for (int t = 0; t < TT; t++) {
      __m512i corr = _mm512_setzero_si512();
      KNOT_UNROLL
      for (int k = 0; k < 8; k++) corr = _mm512_dpwssd_epi32(corr, b.pair[k], bcast4(a[t][i].bsums + 2 * k));
      const __m512 da = _mm512_set1_ps(a[t][i].d);
      if (Q6) {  // block_accum lanewise: acc + (dw*da)*(sumi - 32*off)
        const __m512i sumi = _mm512_sub_epi32(isum[t], _mm512_slli_epi32(corr, 5));
        const __m512 d = _mm512_mul_ps(b.d, da);
        acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(d, _mm512_cvtepi32_ps(sumi)));
      } else {  // block_accum_kmin lanewise: acc + ((dw*da)*sumi - (dminw*da)*summs)
        const __m512 d = _mm512_mul_ps(b.d, da), dm = _mm512_mul_ps(b.dmin, da);
        const __m512 x = _mm512_mul_ps(d, _mm512_cvtepi32_ps(isum[t]));
        const __m512 y = _mm512_mul_ps(dm, _mm512_cvtepi32_ps(corr));
        acc[t] = _mm512_add_ps(acc[t], _mm512_sub_ps(x, y));
      }
    }
  }
}

constexpr int KT = 8;  // token tile of the K-quant prefill kernel

template <bool Q6>
void mm_kquant16(int64_t n, const uint8_t* W, size_t rb, int64_t nrows, const uint8_t* act, size_t ab,
                 int64_t nt, float* Y, int64_t ldy) {
  const int64_t nb = n / QK_K;
  if (nt < 2) {  // decode: 16 rows per pass
    for (int64_t t = 0; t < nt; t++) (Q6 ? mv_q6_K_rows16 : mv_q4_K_rows16)(n, W, rb, nrows, act + (size_t)t * ab, Y + t * ldy);
    return;
  }
  std::vector<KPanelBlock>& pb = g_kpanel;
  if ((int64_t)pb.size() < nb) pb.resize((size_t)nb);
  for (int64_t r0 = 0; r0 < nrows; r0 += 16) {
    const int nr = (int)std::min<int64_t>(16, nrows - r0);
    const __mmask16 keep = (__mmask16)((1u << nr) - 1);
    const uint8_t* row[16];
    for (int r = 0; r < 16; r++) row[r] = W + (size_t)(r0 + std::min(r, nr - 1)) * rb;  // tail repeats, not stored
    pack_k_panel<Q6>(row, nb, pb.data());
    for (int64_t t0 = 0; t0 < nt; t0 += KT) {
      const int tt = (int)std::min<int64_t>(KT, nt - t0);
      const block_q8_K* a[KT];
      for (int t = 0; t < tt; t++) a[t] = (const block_q8_K*)(act + (size_t)(t0 + t) * ab);
      __m512 acc[KT];
      switch (tt) {  // 8 independent vpdpbusd chains per weight load; tails of 1..7 tokens
        case 1: kgemm_tile<Q6, 1>(pb.data(), nb, a, acc); break;
        case 2: kgemm_tile<Q6, 2>(pb.data(), nb, a, acc); break;
        case 3: kgemm_tile<Q6, 3>(pb.data(), nb, a, acc); break;
        case 4: kgemm_tile<Q6, 4>(pb.data(), nb, a, acc); break;
        case 5: kgemm_tile<Q6, 5>(pb.data(), nb, a, acc); break;
        case 6: kgemm_tile<Q6, 6>(pb.data(), nb, a, acc); break;
        case 7: kgemm_tile<Q6, 7>(pb.data(), nb, a, acc); break;
        default: kgemm_tile<Q6, 8>(pb.data(), nb, a, acc); break;
      }
      for (int t = 0; t < tt; t++) _mm512_mask_storeu_ps(Y + (t0 + t) * ldy + r0, keep, acc[t]);
    }
  }
}

void mm_q4_K_avx512(int64_t n, const uint8_t* W, size_t rb, int64_t nr, const uint8_t* a, size_t ab, int64_t nt, float* Y, int64_t ldy) {
  mm_kquant16<false>(n, W, rb, nr, a, ab, nt, Y, ldy);
}
void mm_q6_K_avx512(int64_t n, const uint8_t* W, size_t rb, int64_t nr, const uint8_t* a, size_t ab, int64_t nt, float* Y, int64_t ldy) {
  mm_kquant16<true>(n, W, rb, nr, a, ab, nt, Y, ldy);
}

// ---- Q8_K activation quantizer: the scalar quant_block_q8_K's bytes (same first
// largest-magnitude element, iscale = -127/x[jm], products in f32, round-to-nearest-even
// (vcvtps2dq under the default MXCSR, as nearest_int), min 127, bsums of 16), 16 lanes.
void quant_q8_K_avx512(const float* x, void* dst, int64_t n) {
  block_q8_K* y = (block_q8_K*)dst;
  const float* x0 = x;
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    __m512 m = _mm512_setzero_ps();
    __mmask16 nan = 0;  // max_ps can drop a nan (it returns the second operand): a separate mask
    for (int j = 0; j < QK_K; j += 16) {
      const __m512 v = _mm512_loadu_ps(x + j);
      m = _mm512_max_ps(m, _mm512_abs_ps(v));
      nan = (__mmask16)(nan | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q));
    }
    const float amax = _mm512_reduce_max_ps(m);
    if (!(amax < INFINITY) || nan) {  // inf or nan: the scalar quantizer throws, naming the row index
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
    const __m512 vs = _mm512_set1_ps(iscale);
    const __m512i k127 = _mm512_set1_epi32(127);
    for (int g = 0; g < QK_K / 16; g++) {
      const __m512i q = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(vs, _mm512_loadu_ps(x + 16 * g))), k127);
      y[i].bsums[g] = (int16_t)_mm512_reduce_add_epi32(q);
      _mm_storeu_si128((__m128i*)(y[i].qs + 16 * g), _mm512_cvtsepi32_epi8(q));
    }
    y[i].d = 1.f / iscale;
  }
}

// ---- Q16_0 activation quantizer: quantize_block_q16_0's bytes, 16 lanes. Per 32-block
// amax in SIMD (max is exact), then d = amax/32767 and id = 1/d in scalar f32 as the
// scalar code does, q = round-to-nearest-even(x*id) (vcvtps2dq under the default MXCSR,
// as nearbyint) clamped to +-32767; blocks with amax < 1e-30 (zero, or 1/d near
// overflow) take the scalar block quantizer. Rows with inf/nan go to the scalar quantizer, which
// throws naming the index.
void quant_q16_0_avx512(const float* x, void* dst, int64_t n) {
  const __m512 vinf = _mm512_set1_ps(INFINITY);
  for (int64_t j = 0; j < n; j += 16)
    if (_mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + j)), vinf, _CMP_NLT_UQ)) {
      quantize_act_row(ActFormat::Q16_0, x, dst, n);  // throws
      return;
    }
  block_q16_0* y = (block_q16_0*)dst;
  const __m512i kmax = _mm512_set1_epi32(32767), kmin = _mm512_set1_epi32(-32767);
  for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
    const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    if (!(amax >= 1e-30f)) {  // zero or tiny (1/d may overflow): the scalar block
      quantize_block_q16_0(x, y + i);
      continue;
    }
    const float d = amax / 32767.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    const __m512 vid = _mm512_set1_ps(id);
    const __m512i q0 = _mm512_max_epi32(_mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(x0, vid)), kmax), kmin);
    const __m512i q1 = _mm512_max_epi32(_mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(x1, vid)), kmax), kmin);
    y[i].d = d;
    _mm256_storeu_si256((__m256i*)y[i].qs, _mm512_cvtepi32_epi16(q0));
    _mm256_storeu_si256((__m256i*)(y[i].qs + 16), _mm512_cvtepi32_epi16(q1));
  }
}

#define KNOT_NT_DISPATCH(name, tmpl)                                                     \
  void name(int64_t n, const void* w, const void* const* act, int nt, float* out) {      \
    switch (nt) {                                                                        \
      case 1: tmpl<1>(n, w, act, out); break;                                            \
      case 2: tmpl<2>(n, w, act, out); break;                                            \
      case 3: tmpl<3>(n, w, act, out); break;                                            \
      default: tmpl<4>(n, w, act, out); break;                                           \
    }                                                                                    \
  }

KNOT_NT_DISPATCH(dot_q4_K_avx512, q4_K_avx512)
KNOT_NT_DISPATCH(dot_q6_K_avx512, q6_K_avx512)

DotKernels make_avx512_table() {
  DotKernels k = kDotAvx2;  // constant-initialized in kernels_avx2.cpp
  k.name = "avx512vnni";
  k.dot[type_index(DType::Q4_K)] = dot_q4_K_avx512;
  k.dot[type_index(DType::Q6_K)] = dot_q6_K_avx512;
  k.mm[type_index(DType::Q4_0)] = mm_q4_0_avx512;
  k.mm[type_index(DType::Q8_0)] = mm_q8_0_avx512;
  k.mm[type_index(DType::Q4_K)] = mm_q4_K_avx512;
  k.mm[type_index(DType::Q6_K)] = mm_q6_K_avx512;
  k.quant_act[(int)ActFormat::Q8_K] = quant_q8_K_avx512;
  k.quant_act[(int)ActFormat::Q16_0] = quant_q16_0_avx512;
  k.mm_min_tokens = 1;  // the 16-row kernels are the decode (one token) path too
  return k;
}

}  // namespace

const DotKernels kDotAvx512Vnni = make_avx512_table();

}  // namespace knot

#endif  // x86
