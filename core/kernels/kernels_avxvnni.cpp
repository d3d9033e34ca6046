// kernels_avxvnni.cpp — AVX-VNNI (VEX, 256-bit: Alder Lake and later cores without
// AVX-512) kernels for Kernel::Simd natively; chosen at run time when the CPU has AVX2 +
// AVX-VNNI but not AVX-512 VNNI (kernels.cpp). Compiled with -mavxvnni -mavx2 -mfma
// -mf16c (CMakeLists.txt). The table is kDotAvx2 with these slots replaced:
//   Q4_0 / Q8_0 x Q16_0: the batched kernel for decode AND prefill (mm, also for one
//     token): 8 weight rows at a time, one row per 32-bit lane; per 32-weight block and
//     row two vpdpwssd of the int16-widened weights with the int16 activations (exact), a
//     hadd tree puts the 8 rows' block sums into one vector, and block_accum runs on the
//     8 lanes in block order (contraction off): every row equals the scalar dot bit for bit.
//     Prefill (2+ tokens) repacks each 8-row panel pair-major and runs 8-row x 4-token
//     vpdpwssd tiles (mm_gemm8, no per-token reduction), same sums and combine.
//   Q4_K / Q6_K x Q8_K prefill (2+ tokens): 8-row x 8-token vpdpbusd tiles (mm, below);
//     one token goes to kernels_avx2.cpp's 8-row decode mat-vecs (mv_q4_K_rows8_avx2).
// Same schemes as the AVX-512 kernels in kernels_avx512.cpp, at half the width; in
// decode (one token) the Q4_0/Q8_0 panel PF_PANELS ahead is prefetched, a slice per block.
#if defined(__x86_64__) || defined(__i386__)

#include "kernels/no_fp_contract.h"  // first: no FMA contraction in this file

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/kernels_internal.h"

namespace knot {

// Full unroll of the short token / group loops of the prefill tiles.
#if defined(__clang__)
#define KNOT_UNROLL _Pragma("unroll")
#else
#define KNOT_UNROLL _Pragma("GCC unroll 16")
#endif

namespace {

// Lane r of the result = sum of the 8 lanes of v[r] (exact integer adds).
inline __m256i reduce8(const __m256i v[8]) {
  const __m256i x = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i y = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  // x: per 128-bit half L, [S_L(v0), S_L(v1), S_L(v2), S_L(v3)]; y the same for v4..v7
  return _mm256_add_epi32(_mm256_permute2x128_si256(x, y, 0x20), _mm256_permute2x128_si256(x, y, 0x31));
}

struct RowsQ8_0 {
  static constexpr size_t BLOCK = sizeof(block_q8_0);
  static void weights(const uint8_t* blk, __m256i& lo, __m256i& hi) {
    lo = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(blk + 2)));
    hi = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(blk + 18)));
  }
};
struct RowsQ4_0 {
  static constexpr size_t BLOCK = sizeof(block_q4_0);
  static void weights(const uint8_t* blk, __m256i& lo, __m256i& hi) {
    const __m128i q = _mm_loadu_si128((const __m128i*)(blk + 2));
    const __m128i m4 = _mm_set1_epi8(0x0F), k8 = _mm_set1_epi8(8);
    lo = _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_and_si128(q, m4), k8));                     // elems 0..15
    hi = _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), m4), k8));  // 16..31
  }
};

// Decode streams 8 interleaved rows per panel; the panel PF_PANELS ahead is prefetched
// (a proportional slice of its bytes per block), as the AVX-512 decode kernel does.
constexpr int64_t PF_PANELS = 2;

template <class F>
void mm_rows8(int64_t n, const uint8_t* W, size_t rb, int64_t nrows, const uint8_t* act, size_t ab,
              int64_t nt, float* Y, int64_t ldy) {
  const int64_t nb = n / QK8_0;
  const __m256i lo16 = _mm256_set1_epi32(0xFFFF);
  const uint8_t* const end = W + (size_t)nrows * rb;
  const size_t panel = 8 * rb;
  const size_t pf_step = (panel + (size_t)nb - 1) / (size_t)nb;  // bytes of a later panel per block
  for (int64_t r0 = 0; r0 < nrows; r0 += 8) {
    const int nr = (int)std::min<int64_t>(8, nrows - r0);
    const uint8_t* row[8];
    alignas(32) int32_t offs[8];
    for (int r = 0; r < 8; r++) {  // rows past the end repeat the last one; not stored
      row[r] = W + (size_t)(r0 + std::min(r, nr - 1)) * rb;
      offs[r] = (int32_t)(row[r] - row[0]);
    }
    const __m256i voff = _mm256_load_si256((const __m256i*)offs);
    for (int64_t t = 0; t < nt; t++) {
      const block_q16_0* a = (const block_q16_0*)(act + (size_t)t * ab);
      const uint8_t* pf = t == 0 ? row[0] + PF_PANELS * panel : end;  // once per panel
      __m256 acc = _mm256_setzero_ps();
      for (int64_t i = 0; i < nb; i++) {  // hot loop: one block of 8 rows
        for (size_t o = 0; o < pf_step; o += 64)
          if (pf + o < end) _mm_prefetch((const char*)(pf + o), _MM_HINT_T0);
        pf += pf_step;
        const __m256i a_lo = _mm256_loadu_si256((const __m256i*)a[i].qs);
        const __m256i a_hi = _mm256_loadu_si256((const __m256i*)(a[i].qs + 16));
        __m256i s[8];
        KNOT_UNROLL
        for (int r = 0; r < 8; r++) {
          __m256i w_lo, w_hi;
          F::weights(row[r] + (size_t)i * F::BLOCK, w_lo, w_hi);
          s[r] = _mm256_dpwssd_avx_epi32(_mm256_dpwssd_avx_epi32(_mm256_setzero_si256(), w_lo, a_lo), w_hi, a_hi);
        }
        const __m256i sumi = reduce8(s);
        // the 8 rows' fp16 block scales (low half of a 4-byte gather at each block)
        const __m256i d32 = _mm256_and_si256(
            _mm256_i32gather_epi32((const int*)(row[0] + (size_t)i * F::BLOCK), voff, 1), lo16);
        const __m256i d16 = _mm256_permute4x64_epi64(_mm256_packus_epi32(d32, d32), 0x08);  // 8 halves low
        const __m256 dw = _mm256_cvtph_ps(_mm256_castsi256_si128(d16));
        const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(a[i].d));             // block_accum, lanewise:
        acc = _mm256_add_ps(acc, _mm256_mul_ps(d, _mm256_cvtepi32_ps(sumi)));  // acc + (dw*da)*sumi
      }
      alignas(32) float o[8];
      _mm256_store_ps(o, acc);
      for (int r = 0; r < nr; r++) Y[t * ldy + r0 + r] = o[r];
    }
  }
}

// Prefill (2+ tokens): the 8 rows' blocks are repacked once per call into pair-major
// int16 (for weight pair p of a block, one ymm holding that pair of all 8 rows), then each
// token tile accumulates one block's sums for all 8 rows with 16 vpdpwssd against a
// broadcast activation pair — no horizontal reduction. Same integer block sums and the
// same lanewise block_accum as mm_rows8, so the same bits.

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

struct PackScratch8 {
  std::vector<__m256i> w;  // [nb][16 pairs] 8 rows' weight pairs
  std::vector<__m256> d;   // [nb] 8 rows' weight scales
};
thread_local PackScratch8 g_pack8;

template <int TT>
inline void gemm_tile8(const __m256i* pw, const __m256* pd, int64_t nb, const block_q16_0* const* a, __m256* acc) {
  KNOT_UNROLL
  for (int t = 0; t < TT; t++) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; i++) {  // hot loop: one block, 8 rows x TT tokens
    __m256i s[TT];
    KNOT_UNROLL
    for (int t = 0; t < TT; t++) s[t] = _mm256_setzero_si256();
    const __m256i* w = pw + 16 * i;
    KNOT_UNROLL
    for (int p = 0; p < 16; p++) {
      const __m256i wv = _mm256_load_si256(w + p);
      KNOT_UNROLL
      for (int t = 0; t < TT; t++) {
        int32_t pair;
        std::memcpy(&pair, a[t][i].qs + 2 * p, 4);
        s[t] = _mm256_dpwssd_avx_epi32(s[t], wv, _mm256_set1_epi32(pair));
      }
    }
    KNOT_UNROLL
    for (int t = 0; t < TT; t++) {
      const __m256 d = _mm256_mul_ps(pd[i], _mm256_set1_ps(a[t][i].d));         // block_accum, lanewise:
      acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(d, _mm256_cvtepi32_ps(s[t])));  // acc + (dw*da)*sumi
    }
  }
}

template <class F>
void mm_gemm8(int64_t n, const uint8_t* W, size_t rb, int64_t nrows, const uint8_t* act, size_t ab,
              int64_t nt, float* Y, int64_t ldy) {
  if (nt < 2) return mm_rows8<F>(n, W, rb, nrows, act, ab, nt, Y, ldy);
  const int64_t nb = n / QK8_0;
  PackScratch8& ps = g_pack8;
  ps.w.resize((size_t)(nb * 16));
  ps.d.resize((size_t)nb);
  const __m256i lo16 = _mm256_set1_epi32(0xFFFF);
  for (int64_t r0 = 0; r0 < nrows; r0 += 8) {
    const int nr = (int)std::min<int64_t>(8, nrows - r0);
    const uint8_t* row[8];
    alignas(32) int32_t offs[8];
    for (int r = 0; r < 8; r++) {  // rows past the end repeat the last one; not stored
      row[r] = W + (size_t)(r0 + std::min(r, nr - 1)) * rb;
      offs[r] = (int32_t)(row[r] - row[0]);
    }
    const __m256i voff = _mm256_load_si256((const __m256i*)offs);
    for (int64_t i = 0; i < nb; i++) {  // repack: rows' int16 pairs -> pair-major
      __m256i lo[8], hi[8];
      for (int r = 0; r < 8; r++) F::weights(row[r] + (size_t)i * F::BLOCK, lo[r], hi[r]);
      transpose8(lo, &ps.w[(size_t)(16 * i)]);
      transpose8(hi, &ps.w[(size_t)(16 * i + 8)]);
      const __m256i d32 = _mm256_and_si256(
          _mm256_i32gather_epi32((const int*)(row[0] + (size_t)i * F::BLOCK), voff, 1), lo16);
      const __m256i d16 = _mm256_permute4x64_epi64(_mm256_packus_epi32(d32, d32), 0x08);
      ps.d[(size_t)i] = _mm256_cvtph_ps(_mm256_castsi256_si128(d16));
    }
    for (int64_t t0 = 0; t0 < nt; t0 += 4) {
      const int tt = (int)std::min<int64_t>(4, nt - t0);
      const block_q16_0* a[4];
      for (int t = 0; t < tt; t++) a[t] = (const block_q16_0*)(act + (size_t)(t0 + t) * ab);
      __m256 acc[4];
      switch (tt) {
        case 1: gemm_tile8<1>(ps.w.data(), ps.d.data(), nb, a, acc); break;
        case 2: gemm_tile8<2>(ps.w.data(), ps.d.data(), nb, a, acc); break;
        case 3: gemm_tile8<3>(ps.w.data(), ps.d.data(), nb, a, acc); break;
        default: gemm_tile8<4>(ps.w.data(), ps.d.data(), nb, a, acc); break;
      }
      for (int t = 0; t < tt; t++) {
        alignas(32) float o[8];
        _mm256_store_ps(o, acc[t]);
        for (int r = 0; r < nr; r++) Y[(t0 + t) * ldy + r0 + r] = o[r];
      }
    }
  }
}

void mm_q8_0_avxvnni(int64_t n, const uint8_t* W, size_t rb, int64_t nr, const uint8_t* a, size_t ab, int64_t nt, float* Y, int64_t ldy) {
  mm_gemm8<RowsQ8_0>(n, W, rb, nr, a, ab, nt, Y, ldy);
}
void mm_q4_0_avxvnni(int64_t n, const uint8_t* W, size_t rb, int64_t nr, const uint8_t* a, size_t ab, int64_t nt, float* Y, int64_t ldy) {
  mm_gemm8<RowsQ4_0>(n, W, rb, nr, a, ab, nt, Y, ldy);
}

// ---- K-quant prefill (2+ tokens): 8 rows x KT tokens register tiles, lanes = rows.
// The 256-bit form of kernels_avx512.cpp's mm_kquant16. Each 8-row panel is unpacked
// once per call into unsigned 8-bit quants in element order and transposed so that ymm
// g of a block holds elements 4g..4g+3 of all 8 rows (one dword per row); a token's 4
// activations are broadcast and vpdpbusd (u8 weight x s8 activation, exact: 4*63*128 <
// 2^31) accumulates every row's dot at once — no horizontal reduction. Per sub-block the
// i32 dots are scaled with vpmulld by the 8 rows' sub-block scales; the min / -32
// corrections come from the Q8_K bsums with vpdpwssd. All integer sums are exact, and the
// per-block float combine is block_accum_kmin / block_accum lanewise in block order
// (contraction off): every (row, token) equals the scalar dot bit for bit.

struct KPanel8 {
  __m256i w[64];    // w[g] lane r: row r's quants 4g..4g+3 (u8)
  __m256i sc[16];   // Q4_K: sub-block scales sc[0..7]; Q6_K: int8 scales sc[0..15] (i32 lanes)
  __m256i pair[8];  // Q4_K: (m[j], m[j]) i16 pairs; Q6_K: (sc[2k], sc[2k+1]) i16 pairs
  __m256 d, dmin;   // rows' fp16 d / dmin as f32
};
thread_local std::vector<KPanel8> g_kpanel8;

inline uint32_t pair16(int a, int b) { return (uint32_t)(uint16_t)(int16_t)a | ((uint32_t)(uint16_t)(int16_t)b << 16); }

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
        for (int j = 0; j < 16; j++) sc[j][r] = b.scales[j];
        for (int k = 0; k < 8; k++) pr[k][r] = (int32_t)pair16(b.scales[2 * k], b.scales[2 * k + 1]);
        d[r] = half_to_float(b.d);
        dm[r] = 0.f;
      } else {
        const block_q4_K& b = ((const block_q4_K*)row[r])[i];
        unpack8_q4_K(b, q[r]);
        uint8_t s8[8], m8[8];
        k4_unpack_scales(b.scales, s8, m8);
        for (int j = 0; j < 8; j++) sc[j][r] = s8[j], pr[j][r] = (int32_t)pair16(m8[j], m8[j]);
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

template <bool Q6, int TT>
void kgemm8_tile(const KPanel8* pb, int64_t nb, const block_q8_K* const* a, __m256* acc) {
  constexpr int NSUB = Q6 ? 16 : 8, GPS = Q6 ? 4 : 8;  // sub-blocks, dword groups per sub-block
  KNOT_UNROLL
  for (int t = 0; t < TT; t++) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; i++) {
    const KPanel8& b = pb[i];
    __m256i isum[TT];
    KNOT_UNROLL
    for (int t = 0; t < TT; t++) isum[t] = _mm256_setzero_si256();
    for (int j = 0; j < NSUB; j++) {  // hot loop: one sub-block, 8 rows x TT tokens
      __m256i s[TT];
      KNOT_UNROLL
      for (int t = 0; t < TT; t++) s[t] = _mm256_setzero_si256();
      KNOT_UNROLL
      for (int g = GPS * j; g < GPS * (j + 1); g++) {
        const __m256i wv = _mm256_load_si256(b.w + g);
        KNOT_UNROLL
        for (int t = 0; t < TT; t++) s[t] = _mm256_dpbusd_avx_epi32(s[t], wv, bcast4(a[t][i].qs + 4 * g));
      }
      KNOT_UNROLL
      for (int t = 0; t < TT; t++) isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(s[t], b.sc[j]));
    }
    KNOT_UNROLL
    for (int t = 0; t < TT; t++) {
      __m256i corr = _mm256_setzero_si256();
      KNOT_UNROLL
      for (int k = 0; k < 8; k++) corr = _mm256_dpwssd_avx_epi32(corr, b.pair[k], bcast4(a[t][i].bsums + 2 * k));
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
void mm_kquant8(int64_t n, const uint8_t* W, size_t rb, int64_t nrows, const uint8_t* act, size_t ab,
                int64_t nt, float* Y, int64_t ldy) {
  const int64_t nb = n / QK_K;
  if (nt < 2) {  // decode (mm_min_tokens is 1 for the Q4_0/Q8_0 kernels): the AVX2 8-row mat-vec
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
      switch (tt) {  // KT8 independent vpdpbusd chains per weight load; tails of 1..KT8-1 tokens
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

void mm_q4_K_avxvnni(int64_t n, const uint8_t* W, size_t rb, int64_t nr, const uint8_t* a, size_t ab, int64_t nt, float* Y, int64_t ldy) {
  mm_kquant8<false>(n, W, rb, nr, a, ab, nt, Y, ldy);
}
void mm_q6_K_avxvnni(int64_t n, const uint8_t* W, size_t rb, int64_t nr, const uint8_t* a, size_t ab, int64_t nt, float* Y, int64_t ldy) {
  mm_kquant8<true>(n, W, rb, nr, a, ab, nt, Y, ldy);
}

DotKernels make_avxvnni_table() {
  DotKernels k = kDotAvx2;  // constant-initialized in kernels_avx2.cpp
  k.name = "avxvnni";
  k.mm[type_index(DType::Q4_0)] = mm_q4_0_avxvnni;
  k.mm[type_index(DType::Q8_0)] = mm_q8_0_avxvnni;
  k.mm[type_index(DType::Q4_K)] = mm_q4_K_avxvnni;
  k.mm[type_index(DType::Q6_K)] = mm_q6_K_avxvnni;
  k.mm_min_tokens = 1;  // the 8-row kernels are the decode (one token) path too
  return k;
}

}  // namespace

const DotKernels kDotAvxVnni = make_avxvnni_table();

}  // namespace knot

#endif  // x86
