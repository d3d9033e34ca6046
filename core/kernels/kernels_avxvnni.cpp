// kernels_avxvnni.cpp — AVX-VNNI (VEX, 256-bit: Alder Lake and later cores without
// AVX-512) kernels for Kernel::Simd natively; chosen at run time when the CPU has AVX2 +
// AVX-VNNI but not AVX-512 VNNI (kernels.cpp). Compiled with -mavxvnni -mavx2 -mfma
// -mf16c (CMakeLists.txt). The table is kDotAvx2 with one slot pair replaced:
//   Q4_0 / Q8_0 x Q16_0: the batched kernel for decode AND prefill (mm, also for one
//     token): 8 weight rows at a time, one row per 32-bit lane; per 32-weight block and
//     row two vpdpwssd of the int16-widened weights with the int16 activations (exact), a
//     hadd tree puts the 8 rows' block sums into one vector, and block_accum runs on the
//     8 lanes in block order (contraction off): every row equals the scalar dot bit for bit.
// Same scheme as the 16-row AVX-512 kernel in kernels_avx512.cpp, at half the width; in
// decode (one token) the panel PF_PANELS ahead is prefetched, a slice per block.
#if defined(__x86_64__) || defined(__i386__)

#include "kernels/no_fp_contract.h"  // first: no FMA contraction in this file

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/kernels_internal.h"

namespace knot {

namespace {

#if defined(__clang__)
#define KNOT_UNROLL _Pragma("unroll")
#else
#define KNOT_UNROLL _Pragma("GCC unroll 16")
#endif

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

// 8 x 8 dword transpose: out[p] lane r = in[r] lane p.
inline void transpose8(const __m256i in[8], __m256i* out) {
  __m256i t[8], u[8];
  for (int i = 0; i < 4; i++) {
    t[2 * i] = _mm256_unpacklo_epi32(in[2 * i], in[2 * i + 1]);      // per 128: r0p0 r1p0 r0p1 r1p1
    t[2 * i + 1] = _mm256_unpackhi_epi32(in[2 * i], in[2 * i + 1]);  // r0p2 r1p2 r0p3 r1p3
  }
  for (int i = 0; i < 2; i++) {  // rows 4i..4i+3, per 128-bit half: columns j (+4 in the high half)
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

DotKernels make_avxvnni_table() {
  DotKernels k = kDotAvx2;  // constant-initialized in kernels_avx2.cpp
  k.name = "avxvnni";
  k.mm[type_index(DType::Q4_0)] = mm_q4_0_avxvnni;
  k.mm[type_index(DType::Q8_0)] = mm_q8_0_avxvnni;
  k.mm_min_tokens = 1;  // the 8-row kernels are the decode (one token) path too
  return k;
}

}  // namespace

const DotKernels kDotAvxVnni = make_avxvnni_table();

}  // namespace knot

#endif  // x86
