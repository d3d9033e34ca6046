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
// Table: kDotWasm with the Q4_K / Q6_K dot slots (Q6_K decode, prefill tails), the Q4_K
// decode mat-vec slot (mv_q4_K_relaxed, 4 rows per pass) and the batched
// prefill slots (mm_q4_K_relaxed / mm_q6_K_relaxed below) replaced. Q8_0 / Q4_0 keep
// kDotWasm's int16 kernels: their Q16_0 activations are int16 and Q8_0 weights
// (-128..127) do not fit the i7 operand, so no relaxed dot applies exactly.
#if defined(__wasm_relaxed_simd__)

#include "kernels/no_fp_contract.h"  // first: no FMA contraction (relaxed_madd) in this file

#include <wasm_simd128.h>

#include <algorithm>
#include <cstring>
#include <vector>

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

// ---- Q4_K decode mat-vec (mv_fn, one token): 4 weight rows per pass share every
// activation load. Per 16 weights and row: i16x8.relaxed_dot_i8x16_i7x16 (pair sums,
// |.| <= 2*15*128, no saturation); the two halves of a 32-weight sub-block are added in
// i16 (|.| <= 4*15*128), then i32x4.dot_i16x8 against the sub-block scale splatted in i16
// (exact in i32). At the block end the 4 rows' integer sums and min corrections are
// transposed into i32x4 lanes = rows; the 4 fp16 scales are converted 4 at a time (exact,
// as half_to_float) and the float combine runs lanewise with the operations and order of
// block_accum_kmin, so each lane equals the dot kernel's result for its row bit for bit.
// Rows beyond the last multiple of 4 use the dot kernel. (A Q6_K version of the same shape
// measured 0.93-1.09x of q6_K_relaxed per row in workerd, 2026-12-02: not kept.)

static inline v128_t reduce4_rows(v128_t a, v128_t b, v128_t c, v128_t d) {  // -> [sum a, sum b, sum c, sum d]
  const v128_t ab = wasm_i32x4_add(wasm_i32x4_shuffle(a, b, 0, 4, 1, 5), wasm_i32x4_shuffle(a, b, 2, 6, 3, 7));
  const v128_t cd = wasm_i32x4_add(wasm_i32x4_shuffle(c, d, 0, 4, 1, 5), wasm_i32x4_shuffle(c, d, 2, 6, 3, 7));
  return wasm_i32x4_add(wasm_i32x4_shuffle(ab, cd, 0, 1, 4, 5), wasm_i32x4_shuffle(ab, cd, 2, 3, 6, 7));
}

// 4 halves (low 16 bits of u32 lanes) -> 4 floats, exactly half_to_float (kernels_wasm.cpp's).
static inline v128_t halves_to_f32x4(uint16_t h0, uint16_t h1, uint16_t h2, uint16_t h3) {
  const v128_t h = wasm_u32x4_make(h0, h1, h2, h3);
  const v128_t sign = wasm_i32x4_shl(wasm_v128_and(h, wasm_i32x4_splat(0x8000)), 16);
  const v128_t em = wasm_i32x4_shl(wasm_v128_and(h, wasm_i32x4_splat(0x7FFF)), 13);
  const v128_t scaled = wasm_f32x4_mul(em, wasm_f32x4_splat(0x1p112f));
  const v128_t infnan = wasm_i32x4_eq(wasm_v128_and(h, wasm_i32x4_splat(0x7C00)), wasm_i32x4_splat(0x7C00));
  const v128_t special = wasm_v128_or(em, wasm_i32x4_splat(0x7F800000));
  return wasm_v128_or(sign, wasm_v128_bitselect(special, scaled, infnan));
}

// Q4_K scales / mins of the 8 sub-blocks as i16x8 (same packing as k4_scale_min), the
// mins as pairs m0,m0,m1,m1,.. against the 16 bsums.
struct K4Scales {
  v128_t sc16, mp0, mp1;
};
static inline K4Scales k4_scales_i16(const uint8_t* s) {
  uint32_t a, b, c;
  std::memcpy(&a, s, 4);
  std::memcpy(&b, s + 4, 4);
  std::memcpy(&c, s + 8, 4);
  const uint32_t sc_lo = a & 0x3F3F3F3Fu, m_lo = b & 0x3F3F3F3Fu;
  const uint32_t sc_hi = (c & 0x0F0F0F0Fu) | ((a >> 2) & 0x30303030u);
  const uint32_t m_hi = ((c >> 4) & 0x0F0F0F0Fu) | ((b >> 2) & 0x30303030u);
  const v128_t v8 = wasm_i32x4_make((int32_t)sc_lo, (int32_t)sc_hi, (int32_t)m_lo, (int32_t)m_hi);
  const v128_t m16 = wasm_u16x8_extend_high_u8x16(v8);
  return {wasm_u16x8_extend_low_u8x16(v8), wasm_i16x8_shuffle(m16, m16, 0, 0, 1, 1, 2, 2, 3, 3),
          wasm_i16x8_shuffle(m16, m16, 4, 4, 5, 5, 6, 6, 7, 7)};
}

template <int J>
static inline v128_t splat_i16(v128_t v) { return wasm_i16x8_shuffle(v, v, J, J, J, J, J, J, J, J); }

static inline v128_t rdot16(v128_t a, v128_t w) { return wasm_i16x8_relaxed_dot_i8x16_i7x16(a, w); }

// One 64-weight chunk C of a Q4_K row: sub-block 2C (low nibbles), 2C+1 (high).
template <int C>
static inline v128_t q4_K_mv_chunk(const uint8_t* qs, v128_t sc16, const v128_t* av, v128_t s) {
  const v128_t m4 = wasm_i8x16_splat(0x0F);
  const v128_t q0 = wasm_v128_load(qs + 32 * C), q1 = wasm_v128_load(qs + 32 * C + 16);
  const v128_t plo = wasm_i16x8_add(rdot16(av[0], wasm_v128_and(q0, m4)), rdot16(av[1], wasm_v128_and(q1, m4)));
  const v128_t phi = wasm_i16x8_add(rdot16(av[2], wasm_v128_and(wasm_u16x8_shr(q0, 4), m4)),
                                    rdot16(av[3], wasm_v128_and(wasm_u16x8_shr(q1, 4), m4)));
  s = wasm_i32x4_add(s, wasm_i32x4_dot_i16x8(plo, splat_i16<2 * C>(sc16)));
  return wasm_i32x4_add(s, wasm_i32x4_dot_i16x8(phi, splat_i16<2 * C + 1>(sc16)));
}

static void mv_q4_K_relaxed(int64_t n, const uint8_t* W, size_t rb, int64_t nrows, const uint8_t* act, float* y) {
  const block_q8_K* a = (const block_q8_K*)act;
  const int64_t nb = n / QK_K;
  const v128_t zero = wasm_i32x4_splat(0);
  int64_t r = 0;
  for (; r + 4 <= nrows; r += 4) {
    const block_q4_K* x[4];
    for (int k = 0; k < 4; k++) x[k] = (const block_q4_K*)(W + (size_t)(r + k) * rb);
    v128_t acc = wasm_f32x4_splat(0.f);
    for (int64_t i = 0; i < nb; i++) {
      const int8_t* aq = a[i].qs;
      v128_t isum[4], m[4], sc16[4];
      const v128_t b0 = wasm_v128_load(a[i].bsums), b1 = wasm_v128_load(a[i].bsums + 8);
      for (int k = 0; k < 4; k++) {
        const K4Scales ks = k4_scales_i16(x[k][i].scales);
        m[k] = wasm_i32x4_add(wasm_i32x4_dot_i16x8(b0, ks.mp0), wasm_i32x4_dot_i16x8(b1, ks.mp1));
        sc16[k] = ks.sc16;
        isum[k] = zero;
      }
      const v128_t summs = reduce4_rows(m[0], m[1], m[2], m[3]);
      // hot loop: per 64-weight chunk the 4 activation vectors are loaded once for the 4 rows
#define KNOT_Q4K_CHUNK(C)                                                                  \
  {                                                                                        \
    const v128_t av[4] = {wasm_v128_load(aq + 64 * C), wasm_v128_load(aq + 64 * C + 16),  \
                          wasm_v128_load(aq + 64 * C + 32), wasm_v128_load(aq + 64 * C + 48)}; \
    for (int k = 0; k < 4; k++)                                                            \
      isum[k] = q4_K_mv_chunk<C>(x[k][i].qs, sc16[k], av, isum[k]);                      \
  }
      KNOT_Q4K_CHUNK(0) KNOT_Q4K_CHUNK(1) KNOT_Q4K_CHUNK(2) KNOT_Q4K_CHUNK(3)
#undef KNOT_Q4K_CHUNK
      const v128_t sumi = reduce4_rows(isum[0], isum[1], isum[2], isum[3]);
      const v128_t dw = halves_to_f32x4(x[0][i].d, x[1][i].d, x[2][i].d, x[3][i].d);
      const v128_t dmw = halves_to_f32x4(x[0][i].dmin, x[1][i].dmin, x[2][i].dmin, x[3][i].dmin);
      const v128_t da = wasm_f32x4_splat(a[i].d);
      const v128_t x1 = wasm_f32x4_mul(wasm_f32x4_mul(dw, da), wasm_f32x4_convert_i32x4(sumi));
      const v128_t x2 = wasm_f32x4_mul(wasm_f32x4_mul(dmw, da), wasm_f32x4_convert_i32x4(summs));
      acc = wasm_f32x4_add(acc, wasm_f32x4_sub(x1, x2));  // block_accum_kmin, lanewise
    }
    wasm_v128_store(y + r, acc);
  }
  for (; r < nrows; r++) {
    const void* one[1] = {act};
    q4_K_relaxed<1>(n, W + (size_t)r * rb, one, y + r);
  }
}

// ---- Batched prefill (mm_fn, see kernels_internal.h). Per 256-weight super-block, RD
// weight rows are decoded once into unsigned bytes in activation order (wq: Q4_K 0..15,
// Q6_K 0..63 — the i7 operand) and reused by every token of the chunk; the Q8_K activation
// quants are read in place (no widening). Every integer sum is exact; the float combine runs
// on f32x4 lanes = 4 rows with the operations and order of block_accum_kmin / block_accum
// (lanewise IEEE, no FMA), so every output equals the scalar dot's bit for bit.
//
// Both formats (2026-12-04): 4 rows' quants interleaved per 4 weights (wqi) against each
// token's 4 activations splatted (v128.load32_splat), so i16 lane pairs (2r, 2r+1) and the
// i32 accumulator lanes are rows (no 4x4 reduce at the block end); 4 rows x 4 tokens per
// register tile (6 tokens measured slower). Relaxed pair sums (i16x8.relaxed_dot_i8x16_i7x16,
// pmaddubsw: |pair| <= 2*63*128 < 2^15, no saturation) are summed in i16 while they fit,
// then one i32x4.dot_i16x8 with [sc_r0 x2, .., sc_r3 x2]. The 2-row x 3-token tile before
// (one scale dot per 16 weights and row) needed 12 multiply-pipe ops per 128 MACs.
//
// Q6_K (mm_q6K_rows / rltile_q6K): per 16-weight sub-block two groups' pair sums per i16
// sum (|.| <= 2 * 2*63*128 = 32256): 2 scale dots, 6 multiply ops per 64 MACs (was 8).
// -32 offset: sumi - 32 * sum_j sc_j * bsums_j, lanes = rows the same way.
//
// Q4_K (mm_q4K_rows / rltile_q4K): per 32-weight sub-block 8 pair-sum dots summed in i16
// (|.| <= 8 * 2*15*128 = 30720), one scale dot: 9 multiply ops per 128 MACs. Mins against
// the bsums pair-summed once per token and super-block (g_bp), lanes = rows. Measured and dropped on the way
// (bench/RESULTS.md): i32x4.relaxed_dot_i8x16_i7x16_add + i32x4.mul by the scale.

namespace {

constexpr int RD = 16;   // weight rows decoded per pass (4 register tiles of 4)
constexpr int SB = 256;  // weights per decoded super-block

alignas(16) KNOT_KERNEL_TLS uint8_t wq[RD][SB];   // decoded unsigned quants of one super-block, activation order
alignas(16) KNOT_KERNEL_TLS int16_t wsc[RD][16];  // [row] sub-block scales (Q4_K: 8 of 32 weights; Q6_K: 16 of 16)
alignas(16) KNOT_KERNEL_TLS int16_t wm8[RD][8];   // [row] Q4_K mins m0..m7 (against the pair-summed bsums)
alignas(16) KNOT_KERNEL_TLS float wd[RD];         // [row] d
alignas(16) KNOT_KERNEL_TLS float wdm[RD];        // [row] dmin (Q4_K)
std::vector<v128_t> g_acc;        // [RD/4][nt] f32x4 accumulators (lanes = 4 rows)
std::vector<v128_t> g_bp;         // [nt] Q4_K: the current super-block's bsums[2j] + bsums[2j+1], j = 0..7 (i16)

void zero_row(int r) {
  std::memset(wq[r], 0, sizeof wq[r]);
  std::memset(wsc[r], 0, sizeof wsc[r]);
  std::memset(wm8[r], 0, sizeof wm8[r]);
  wd[r] = 0.f;
  wdm[r] = 0.f;
}

struct RQ4K {
  static constexpr size_t BYTES = sizeof(block_q4_K);
  static void decode(const uint8_t* p, int r) {
    const block_q4_K* x = (const block_q4_K*)p;
    uint8_t sc[8], m[8];
    k4_unpack_scales(x->scales, sc, m);
    const v128_t m4 = wasm_i8x16_splat(0x0F);
    for (int c = 0; c < 4; c++) {  // 64 weights: sub-block 2c = low nibbles, 2c+1 = high
      const v128_t q0 = wasm_v128_load(x->qs + 32 * c), q1 = wasm_v128_load(x->qs + 32 * c + 16);
      wasm_v128_store(wq[r] + 64 * c, wasm_v128_and(q0, m4));
      wasm_v128_store(wq[r] + 64 * c + 16, wasm_v128_and(q1, m4));
      wasm_v128_store(wq[r] + 64 * c + 32, wasm_v128_and(wasm_u16x8_shr(q0, 4), m4));
      wasm_v128_store(wq[r] + 64 * c + 48, wasm_v128_and(wasm_u16x8_shr(q1, 4), m4));
    }
    for (int j = 0; j < 8; j++) {
      wsc[r][j] = sc[j];
      wm8[r][j] = m[j];
    }
    wd[r] = half_to_float(x->d);
    wdm[r] = half_to_float(x->dmin);
  }
};

struct RQ6K {
  static constexpr size_t BYTES = sizeof(block_q6_K);
  static void decode(const uint8_t* p, int r) {
    const block_q6_K* x = (const block_q6_K*)p;
    const v128_t m4 = wasm_i8x16_splat(0x0F), m30 = wasm_i8x16_splat(0x30);
    for (int h = 0; h < 2; h++) {
      const uint8_t* ql = x->ql + 64 * h;
      const uint8_t* qh = x->qh + 32 * h;
      for (int g = 0; g < 2; g++) {  // elements 128h + 32k + 16g + (0..15) = sub-block 8h + 2k + g
        const v128_t qa = wasm_v128_load(ql + 16 * g), qb = wasm_v128_load(ql + 32 + 16 * g);
        const v128_t hb = wasm_v128_load(qh + 16 * g);
        uint8_t* o = wq[r] + 128 * h + 16 * g;
        wasm_v128_store(o, wasm_v128_or(wasm_v128_and(qa, m4), wasm_v128_and(wasm_i16x8_shl(hb, 4), m30)));
        wasm_v128_store(o + 32, wasm_v128_or(wasm_v128_and(qb, m4), wasm_v128_and(wasm_i16x8_shl(hb, 2), m30)));
        wasm_v128_store(o + 64, wasm_v128_or(wasm_v128_and(wasm_u16x8_shr(qa, 4), m4), wasm_v128_and(hb, m30)));
        wasm_v128_store(o + 96, wasm_v128_or(wasm_v128_and(wasm_u16x8_shr(qb, 4), m4),
                                             wasm_v128_and(wasm_u16x8_shr(hb, 2), m30)));
      }
    }
    for (int j = 0; j < 16; j++) wsc[r][j] = x->scales[j];
    wd[r] = half_to_float(x->d);
  }
};

// Q4_K row-lane layout (see the section comment): wqi[g] = [64 groups of 4 weights][4 rows][4 bytes].
alignas(16) KNOT_KERNEL_TLS uint8_t wqi[RD / 4][SB * 4];
alignas(16) KNOT_KERNEL_TLS v128_t wsci[RD / 4][8];  // [group][sub-block] i16 [sc_r0, sc_r0, .., sc_r3, sc_r3]
alignas(16) KNOT_KERNEL_TLS v128_t wmi[RD / 4][4];   // [group][pair k] i16 [m_r0(2k), m_r0(2k+1), .., m_r3(2k+1)]

void interleave4_q(int g) {  // wq rows 4g..4g+3 -> wqi[g]
  const int r0 = 4 * g;
  for (int c = 0; c < SB / 16; c++) {
    const v128_t x0 = wasm_v128_load(wq[r0] + 16 * c), x1 = wasm_v128_load(wq[r0 + 1] + 16 * c);
    const v128_t x2 = wasm_v128_load(wq[r0 + 2] + 16 * c), x3 = wasm_v128_load(wq[r0 + 3] + 16 * c);
    const v128_t a = wasm_i32x4_shuffle(x0, x1, 0, 4, 1, 5), b = wasm_i32x4_shuffle(x0, x1, 2, 6, 3, 7);
    const v128_t e = wasm_i32x4_shuffle(x2, x3, 0, 4, 1, 5), f = wasm_i32x4_shuffle(x2, x3, 2, 6, 3, 7);
    uint8_t* o = wqi[g] + 64 * c;
    wasm_v128_store(o, wasm_i32x4_shuffle(a, e, 0, 1, 4, 5));
    wasm_v128_store(o + 16, wasm_i32x4_shuffle(a, e, 2, 3, 6, 7));
    wasm_v128_store(o + 32, wasm_i32x4_shuffle(b, f, 0, 1, 4, 5));
    wasm_v128_store(o + 48, wasm_i32x4_shuffle(b, f, 2, 3, 6, 7));
  }
}

void interleave4(int g) {  // Q4_K: quants, scales and mins of rows 4g..4g+3
  const int r0 = 4 * g;
  interleave4_q(g);
  for (int j = 0; j < 8; j++) {
    alignas(16) int16_t v[8];
    for (int r = 0; r < 4; r++) v[2 * r] = v[2 * r + 1] = wsc[r0 + r][j];
    wsci[g][j] = wasm_v128_load(v);
  }
  for (int k = 0; k < 4; k++) {
    alignas(16) int16_t v[8];
    for (int r = 0; r < 4; r++) v[2 * r] = wm8[r0 + r][2 * k], v[2 * r + 1] = wm8[r0 + r][2 * k + 1];
    wmi[g][k] = wasm_v128_load(v);
  }
}

template <int NT>
inline void rltile_q4K(const block_q8_K* const* a, const v128_t* bp, int g, v128_t* acc) {
  v128_t s[NT];
  const int8_t* ap[NT];
  for (int t = 0; t < NT; t++) s[t] = wasm_i32x4_splat(0), ap[t] = a[t]->qs;
  const uint8_t* wp = wqi[g];
  const v128_t* sp = wsci[g];
#pragma clang loop unroll(disable)
  for (int j = 0; j < 8; j++) {  // hot loop: one 32-weight sub-block x 4 rows x NT tokens
    v128_t p[NT];
    for (int t = 0; t < NT; t++) p[t] = wasm_i16x8_splat(0);
    for (int q = 0; q < 8; q++) {
      const v128_t w = wasm_v128_load(wp + 16 * q);
      for (int t = 0; t < NT; t++)
        p[t] = wasm_i16x8_add(p[t], wasm_i16x8_relaxed_dot_i8x16_i7x16(wasm_v128_load32_splat(ap[t] + 4 * q), w));
    }
    const v128_t c = sp[0];
    for (int t = 0; t < NT; t++) s[t] = wasm_i32x4_add(s[t], wasm_i32x4_dot_i16x8(p[t], c)), ap[t] += 32;
    wp += 128, sp += 1;
  }
  const int r0 = 4 * g;
  const v128_t dw = wasm_v128_load(&wd[r0]), dmw = wasm_v128_load(&wdm[r0]);
  for (int t = 0; t < NT; t++) {
    const v128_t b = bp[t];
    v128_t ms = wasm_i32x4_dot_i16x8(wmi[g][0], wasm_i32x4_shuffle(b, b, 0, 0, 0, 0));
    ms = wasm_i32x4_add(ms, wasm_i32x4_dot_i16x8(wmi[g][1], wasm_i32x4_shuffle(b, b, 1, 1, 1, 1)));
    ms = wasm_i32x4_add(ms, wasm_i32x4_dot_i16x8(wmi[g][2], wasm_i32x4_shuffle(b, b, 2, 2, 2, 2)));
    ms = wasm_i32x4_add(ms, wasm_i32x4_dot_i16x8(wmi[g][3], wasm_i32x4_shuffle(b, b, 3, 3, 3, 3)));
    const v128_t da = wasm_f32x4_splat(a[t]->d);
    const v128_t d = wasm_f32x4_mul(dw, da);
    const v128_t dm = wasm_f32x4_mul(dmw, da);  // block_accum_kmin, lanewise
    const v128_t x1 = wasm_f32x4_mul(d, wasm_f32x4_convert_i32x4(s[t]));
    const v128_t x2 = wasm_f32x4_mul(dm, wasm_f32x4_convert_i32x4(ms));
    acc[t] = wasm_f32x4_add(acc[t], wasm_f32x4_sub(x1, x2));
  }
}

void mm_q4K_rows(int64_t n, const uint8_t* W, size_t rb, int64_t nrows, const uint8_t* act, size_t ab,
                 int64_t nt, float* Y, int64_t ldy) {
  constexpr int TT = 4;
  const int64_t ns = n / SB;
  g_acc.resize((size_t)(RD / 4 * nt));
  g_bp.resize((size_t)nt);
  auto ablk = [&](int64_t t, int64_t s) { return (const block_q8_K*)(act + (size_t)t * ab) + s; };
  for (int64_t r0 = 0; r0 < nrows; r0 += RD) {
    const int nr = (int)std::min<int64_t>(RD, nrows - r0), nsub = (nr + 3) / 4;
    for (int64_t k = 0; k < nsub * nt; k++) g_acc[(size_t)k] = wasm_f32x4_splat(0.f);
    for (int64_t s = 0; s < ns; s++) {
      for (int r = 0; r < 4 * nsub; r++) {
        if (r < nr) RQ4K::decode(W + (size_t)(r0 + r) * rb + (size_t)s * RQ4K::BYTES, r);
        else zero_row(r);
      }
      for (int g = 0; g < nsub; g++) interleave4(g);
      for (int64_t u = 0; u < nt; u++) {
        const v128_t one = wasm_i16x8_splat(1);
        const int16_t* bs = ablk(u, s)->bsums;
        g_bp[(size_t)u] = wasm_i16x8_narrow_i32x4(wasm_i32x4_dot_i16x8(wasm_v128_load(bs), one),
                                                 wasm_i32x4_dot_i16x8(wasm_v128_load(bs + 8), one));
      }
      int64_t t = 0;
      for (; t + TT <= nt; t += TT) {
        const block_q8_K* a[TT];
        for (int u = 0; u < TT; u++) a[u] = ablk(t + u, s);
        for (int g = 0; g < nsub; g++) rltile_q4K<TT>(a, &g_bp[(size_t)t], g, &g_acc[(size_t)(g * nt + t)]);
      }
      const block_q8_K* a[TT - 1];
      for (int u = 0; u < nt - t; u++) a[u] = ablk(t + u, s);
      for (int g = 0; g < nsub; g++) {  // token tail (< TT)
        v128_t* acc = &g_acc[(size_t)(g * nt + t)];
        const v128_t* bp = &g_bp[(size_t)t];
        if (nt - t == 3) rltile_q4K<3>(a, bp, g, acc);
        else if (nt - t == 2) rltile_q4K<2>(a, bp, g, acc);
        else if (nt - t == 1) rltile_q4K<1>(a, bp, g, acc);
      }
    }
    for (int sub = 0; sub < nsub; sub++)
      for (int64_t t = 0; t < nt; t++) {
        alignas(16) float o[4];
        wasm_v128_store(o, g_acc[(size_t)(sub * nt + t)]);
        for (int r = 0; r < 4 && 4 * sub + r < nr; r++) Y[t * ldy + r0 + 4 * sub + r] = o[r];
      }
  }
}

// Q6_K row-lane tile: as Q4_K's, per 16-weight sub-block (4 groups of 4): two groups' pair
// sums summed in i16 (|.| <= 2 * 2*63*128 = 32256, exact), each pair of groups one
// dot_i16x8 with [sc_r0 x2, .., sc_r3 x2]: 6 multiply-pipe ops per 64 MACs (2-row tile: 8).
alignas(16) KNOT_KERNEL_TLS v128_t wsci6[RD / 4][16];  // [group][sub-block] i16 [sc_r0, sc_r0, .., sc_r3, sc_r3]
alignas(16) KNOT_KERNEL_TLS v128_t wsco6[RD / 4][8];   // [group][pair k] i16 [sc_r0(2k), sc_r0(2k+1), .., sc_r3(2k+1)]

void interleave4_q6(int g) {
  const int r0 = 4 * g;
  interleave4_q(g);
  for (int j = 0; j < 16; j++) {
    alignas(16) int16_t v[8];
    for (int r = 0; r < 4; r++) v[2 * r] = v[2 * r + 1] = wsc[r0 + r][j];
    wsci6[g][j] = wasm_v128_load(v);
  }
  for (int k = 0; k < 8; k++) {
    alignas(16) int16_t v[8];
    for (int r = 0; r < 4; r++) v[2 * r] = wsc[r0 + r][2 * k], v[2 * r + 1] = wsc[r0 + r][2 * k + 1];
    wsco6[g][k] = wasm_v128_load(v);
  }
}

template <int NT>
inline void rltile_q6K(const block_q8_K* const* a, int g, v128_t* acc) {
  v128_t s[NT];
  const int8_t* ap[NT];
  for (int t = 0; t < NT; t++) s[t] = wasm_i32x4_splat(0), ap[t] = a[t]->qs;
  const uint8_t* wp = wqi[g];
  const v128_t* sp = wsci6[g];
#pragma clang loop unroll(disable)
  for (int j = 0; j < 16; j++) {  // hot loop: one 16-weight sub-block x 4 rows x NT tokens
    const v128_t w0 = wasm_v128_load(wp), w1 = wasm_v128_load(wp + 16);
    const v128_t w2 = wasm_v128_load(wp + 32), w3 = wasm_v128_load(wp + 48);
    const v128_t c = sp[0];
    for (int t = 0; t < NT; t++) {
      const v128_t p0 = wasm_i16x8_add(wasm_i16x8_relaxed_dot_i8x16_i7x16(wasm_v128_load32_splat(ap[t]), w0),
                                       wasm_i16x8_relaxed_dot_i8x16_i7x16(wasm_v128_load32_splat(ap[t] + 4), w1));
      const v128_t p1 = wasm_i16x8_add(wasm_i16x8_relaxed_dot_i8x16_i7x16(wasm_v128_load32_splat(ap[t] + 8), w2),
                                       wasm_i16x8_relaxed_dot_i8x16_i7x16(wasm_v128_load32_splat(ap[t] + 12), w3));
      s[t] = wasm_i32x4_add(s[t], wasm_i32x4_add(wasm_i32x4_dot_i16x8(p0, c), wasm_i32x4_dot_i16x8(p1, c)));
      ap[t] += 16;
    }
    wp += 64, sp += 1;
  }
  const v128_t dw = wasm_v128_load(&wd[4 * g]);
  for (int t = 0; t < NT; t++) {  // block_accum with sumi - 32 * sum_j sc_j * bsums_j, lanewise
    v128_t o = wasm_i32x4_splat(0);
    for (int k = 0; k < 8; k++) o = wasm_i32x4_add(o, wasm_i32x4_dot_i16x8(wsco6[g][k], wasm_v128_load32_splat(a[t]->bsums + 2 * k)));
    const v128_t sumi = wasm_i32x4_sub(s[t], wasm_i32x4_shl(o, 5));
    const v128_t d = wasm_f32x4_mul(dw, wasm_f32x4_splat(a[t]->d));
    acc[t] = wasm_f32x4_add(acc[t], wasm_f32x4_mul(d, wasm_f32x4_convert_i32x4(sumi)));
  }
}

void mm_q6K_rows(int64_t n, const uint8_t* W, size_t rb, int64_t nrows, const uint8_t* act, size_t ab,
                 int64_t nt, float* Y, int64_t ldy) {
  constexpr int TT = 4;
  const int64_t ns = n / SB;
  g_acc.resize((size_t)(RD / 4 * nt));
  auto ablk = [&](int64_t t, int64_t s) { return (const block_q8_K*)(act + (size_t)t * ab) + s; };
  for (int64_t r0 = 0; r0 < nrows; r0 += RD) {
    const int nr = (int)std::min<int64_t>(RD, nrows - r0), nsub = (nr + 3) / 4;
    for (int64_t k = 0; k < nsub * nt; k++) g_acc[(size_t)k] = wasm_f32x4_splat(0.f);
    for (int64_t s = 0; s < ns; s++) {
      for (int r = 0; r < 4 * nsub; r++) {
        if (r < nr) RQ6K::decode(W + (size_t)(r0 + r) * rb + (size_t)s * RQ6K::BYTES, r);
        else zero_row(r);
      }
      for (int g = 0; g < nsub; g++) interleave4_q6(g);
      int64_t t = 0;
      for (; t + TT <= nt; t += TT) {
        const block_q8_K* a[TT];
        for (int u = 0; u < TT; u++) a[u] = ablk(t + u, s);
        for (int g = 0; g < nsub; g++) rltile_q6K<TT>(a, g, &g_acc[(size_t)(g * nt + t)]);
      }
      const block_q8_K* a[TT - 1];
      for (int u = 0; u < nt - t; u++) a[u] = ablk(t + u, s);
      for (int g = 0; g < nsub; g++) {  // token tail (< TT)
        v128_t* acc = &g_acc[(size_t)(g * nt + t)];
        if (nt - t == 3) rltile_q6K<3>(a, g, acc);
        else if (nt - t == 2) rltile_q6K<2>(a, g, acc);
        else if (nt - t == 1) rltile_q6K<1>(a, g, acc);
      }
    }
    for (int sub = 0; sub < nsub; sub++)
      for (int64_t t = 0; t < nt; t++) {
        alignas(16) float o[4];
        wasm_v128_store(o, g_acc[(size_t)(sub * nt + t)]);
        for (int r = 0; r < 4 && 4 * sub + r < nr; r++) Y[t * ldy + r0 + 4 * sub + r] = o[r];
      }
  }
}

}  // namespace

static void mm_q4_K_relaxed(int64_t n, const uint8_t* W, size_t rb, int64_t nr, const uint8_t* a, size_t ab, int64_t nt, float* Y, int64_t ldy) {
  mm_q4K_rows(n, W, rb, nr, a, ab, nt, Y, ldy);
}
static void mm_q6_K_relaxed(int64_t n, const uint8_t* W, size_t rb, int64_t nr, const uint8_t* a, size_t ab, int64_t nt, float* Y, int64_t ldy) {
  mm_q6K_rows(n, W, rb, nr, a, ab, nt, Y, ldy);
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
  k.mv[type_index(DType::Q4_K)] = as_mv<mv_q4_K_relaxed>;
  k.mm[type_index(DType::Q4_K)] = mm_q4_K_relaxed;
  k.mm[type_index(DType::Q6_K)] = mm_q6_K_relaxed;
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
