// kernels_generic.cpp — scalar integer dot kernels (Kernel::Scalar, and the fallback of
// Kernel::Simd). Each weight block is decoded once into small integer arrays and dotted
// with the nt (<= KMAX_TOK) activation rows; integer sums are exact, the per-block float
// combine is the shared block_accum_* (see kernels_internal.h).
#include "kernels/no_fp_contract.h"  // first: no FMA contraction in this file

#include "kernels/kernels_internal.h"

namespace knot {

// ---- float weights x f32 activations (sequential f32 accumulation)

static void dot_f32_generic(int64_t n, const void* w, const void* const* act, int nt, float* out) {
  const float* x = (const float*)w;
  for (int t = 0; t < nt; t++) {
    const float* a = (const float*)act[t];
    float s = 0.f;
    for (int64_t i = 0; i < n; i++) s += x[i] * a[i];
    out[t] = s;
  }
}

static void dot_f16_generic(int64_t n, const void* w, const void* const* act, int nt, float* out) {
  const uint16_t* x = (const uint16_t*)w;
  float s[KMAX_TOK] = {0, 0, 0, 0};
  for (int64_t i = 0; i < n; i++) {
    const float v = half_to_float(x[i]);
    for (int t = 0; t < nt; t++) s[t] += v * ((const float*)act[t])[i];
  }
  for (int t = 0; t < nt; t++) out[t] = s[t];
}

static void dot_bf16_generic(int64_t n, const void* w, const void* const* act, int nt, float* out) {
  const uint16_t* x = (const uint16_t*)w;
  float s[KMAX_TOK] = {0, 0, 0, 0};
  for (int64_t i = 0; i < n; i++) {
    const float v = bf16_bits_to_float(x[i]);
    for (int t = 0; t < nt; t++) s[t] += v * ((const float*)act[t])[i];
  }
  for (int t = 0; t < nt; t++) out[t] = s[t];
}

// ---- Q4_0 / Q8_0 x Q8_0

static void dot_q4_0_generic(int64_t n, const void* w, const void* const* act, int nt, float* out) {
  const block_q4_0* x = (const block_q4_0*)w;
  const int64_t nb = n / QK4_0;
  float acc[KMAX_TOK] = {0, 0, 0, 0};
  int8_t q[QK4_0];
  for (int64_t i = 0; i < nb; i++) {
    for (int j = 0; j < QK4_0 / 2; j++) {
      q[j] = (int8_t)((x[i].qs[j] & 0x0F) - 8);
      q[j + QK4_0 / 2] = (int8_t)((x[i].qs[j] >> 4) - 8);
    }
    const float dw = half_to_float(x[i].d);
    for (int t = 0; t < nt; t++) {
      const block_q8_0* a = (const block_q8_0*)act[t] + i;
      int32_t sumi = 0;
      for (int j = 0; j < QK4_0; j++) sumi += q[j] * a->qs[j];
      acc[t] = block_accum(acc[t], dw, half_to_float(a->d), sumi);
    }
  }
  for (int t = 0; t < nt; t++) out[t] = acc[t];
}

static void dot_q8_0_generic(int64_t n, const void* w, const void* const* act, int nt, float* out) {
  const block_q8_0* x = (const block_q8_0*)w;
  const int64_t nb = n / QK8_0;
  float acc[KMAX_TOK] = {0, 0, 0, 0};
  for (int64_t i = 0; i < nb; i++) {
    const float dw = half_to_float(x[i].d);
    for (int t = 0; t < nt; t++) {
      const block_q8_0* a = (const block_q8_0*)act[t] + i;
      int32_t sumi = 0;
      for (int j = 0; j < QK8_0; j++) sumi += x[i].qs[j] * a->qs[j];
      acc[t] = block_accum(acc[t], dw, half_to_float(a->d), sumi);
    }
  }
  for (int t = 0; t < nt; t++) out[t] = acc[t];
}

// ---- Q4_0 / Q8_0 x Q16_0 (int16 activations)

static void dot_q4_0_q16_generic(int64_t n, const void* w, const void* const* act, int nt,
                                 float* out) {
  const block_q4_0* x = (const block_q4_0*)w;
  const int64_t nb = n / QK4_0;
  float acc[KMAX_TOK] = {0, 0, 0, 0};
  int32_t q[QK4_0];
  for (int64_t i = 0; i < nb; i++) {
    for (int j = 0; j < QK4_0 / 2; j++) {
      q[j] = (x[i].qs[j] & 0x0F) - 8;
      q[j + QK4_0 / 2] = (x[i].qs[j] >> 4) - 8;
    }
    const float dw = half_to_float(x[i].d);
    for (int t = 0; t < nt; t++) {
      const block_q16_0* a = (const block_q16_0*)act[t] + i;
      int32_t sumi = 0;
      for (int j = 0; j < QK4_0; j++) sumi += q[j] * a->qs[j];
      acc[t] = block_accum(acc[t], dw, a->d, sumi);
    }
  }
  for (int t = 0; t < nt; t++) out[t] = acc[t];
}

static void dot_q8_0_q16_generic(int64_t n, const void* w, const void* const* act, int nt,
                                 float* out) {
  const block_q8_0* x = (const block_q8_0*)w;
  const int64_t nb = n / QK8_0;
  float acc[KMAX_TOK] = {0, 0, 0, 0};
  for (int64_t i = 0; i < nb; i++) {
    const float dw = half_to_float(x[i].d);
    for (int t = 0; t < nt; t++) {
      const block_q16_0* a = (const block_q16_0*)act[t] + i;
      int32_t sumi = 0;
      for (int j = 0; j < QK8_0; j++) sumi += x[i].qs[j] * a->qs[j];
      acc[t] = block_accum(acc[t], dw, a->d, sumi);
    }
  }
  for (int t = 0; t < nt; t++) out[t] = acc[t];
}

// ---- K-quants x Q8_K

// Q4_K / Q5_K: sumi = sum_j sc[j] * <q_j, a_j>  (q in [0,15] or [0,31]),
//              summs = sum_j m[j] * (bsums[2j] + bsums[2j+1]).
static void dot_kmin_blocks(const uint8_t q[QK_K], const uint8_t sc[8], const uint8_t m[8],
                            float dw, float dminw, int64_t i, const void* const* act, int nt,
                            float* acc) {
  for (int t = 0; t < nt; t++) {
    const block_q8_K* a = (const block_q8_K*)act[t] + i;
    int32_t sumi = 0, summs = 0;
    for (int j = 0; j < 8; j++) {
      int32_t s = 0;
      for (int l = 0; l < 32; l++) s += q[32 * j + l] * a->qs[32 * j + l];
      sumi += sc[j] * s;
      summs += m[j] * (a->bsums[2 * j] + a->bsums[2 * j + 1]);
    }
    acc[t] = block_accum_kmin(acc[t], dw, dminw, a->d, sumi, summs);
  }
}

static void dot_q4_K_generic(int64_t n, const void* w, const void* const* act, int nt, float* out) {
  const block_q4_K* x = (const block_q4_K*)w;
  const int64_t nb = n / QK_K;
  float acc[KMAX_TOK] = {0, 0, 0, 0};
  uint8_t q[QK_K], sc[8], m[8];
  for (int64_t i = 0; i < nb; i++) {
    for (int c = 0; c < 4; c++)
      for (int l = 0; l < 32; l++) {
        q[64 * c + l] = x[i].qs[32 * c + l] & 0x0F;
        q[64 * c + 32 + l] = x[i].qs[32 * c + l] >> 4;
      }
    k4_unpack_scales(x[i].scales, sc, m);
    dot_kmin_blocks(q, sc, m, half_to_float(x[i].d), half_to_float(x[i].dmin), i, act, nt, acc);
  }
  for (int t = 0; t < nt; t++) out[t] = acc[t];
}

static void dot_q5_K_generic(int64_t n, const void* w, const void* const* act, int nt, float* out) {
  const block_q5_K* x = (const block_q5_K*)w;
  const int64_t nb = n / QK_K;
  float acc[KMAX_TOK] = {0, 0, 0, 0};
  uint8_t q[QK_K], sc[8], m[8];
  for (int64_t i = 0; i < nb; i++) {
    for (int c = 0; c < 4; c++)
      for (int l = 0; l < 32; l++) {
        const uint8_t h = x[i].qh[l];
        q[64 * c + l] = (uint8_t)((x[i].qs[32 * c + l] & 0x0F) | (((h >> (2 * c)) & 1) << 4));
        q[64 * c + 32 + l] = (uint8_t)((x[i].qs[32 * c + l] >> 4) | (((h >> (2 * c + 1)) & 1) << 4));
      }
    k4_unpack_scales(x[i].scales, sc, m);
    dot_kmin_blocks(q, sc, m, half_to_float(x[i].d), half_to_float(x[i].dmin), i, act, nt, acc);
  }
  for (int t = 0; t < nt; t++) out[t] = acc[t];
}

// Q6_K: sumi = sum_j sc[j] * <q_j - 32, a_j> over 16 sub-blocks of 16.
static void dot_q6_K_generic(int64_t n, const void* w, const void* const* act, int nt, float* out) {
  const block_q6_K* x = (const block_q6_K*)w;
  const int64_t nb = n / QK_K;
  float acc[KMAX_TOK] = {0, 0, 0, 0};
  int8_t q[QK_K];
  for (int64_t i = 0; i < nb; i++) {
    for (int h = 0; h < 2; h++) {
      const uint8_t* ql = x[i].ql + 64 * h;
      const uint8_t* qh = x[i].qh + 32 * h;
      int8_t* qq = q + 128 * h;
      for (int l = 0; l < 32; l++) {
        qq[l] = (int8_t)(((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32);
        qq[l + 32] = (int8_t)(((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32);
        qq[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        qq[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
    }
    const float dw = half_to_float(x[i].d);
    for (int t = 0; t < nt; t++) {
      const block_q8_K* a = (const block_q8_K*)act[t] + i;
      int32_t sumi = 0;
      for (int j = 0; j < 16; j++) {
        int32_t s = 0;
        for (int l = 0; l < 16; l++) s += q[16 * j + l] * a->qs[16 * j + l];
        sumi += x[i].scales[j] * s;
      }
      acc[t] = block_accum(acc[t], dw, a->d, sumi);
    }
  }
  for (int t = 0; t < nt; t++) out[t] = acc[t];
}

// No batched kernels (matmul_rows tiles the dot) and the scalar activation quantizers.
static constexpr DotKernels make_generic_table() {
  DotKernels k;
  k.dot[type_index(DType::F32)] = dot_f32_generic;
  k.dot[type_index(DType::F16)] = dot_f16_generic;
  k.dot[type_index(DType::BF16)] = dot_bf16_generic;
  k.dot[type_index(DType::Q4_0)] = dot_q4_0_generic;
  k.dot[type_index(DType::Q8_0)] = dot_q8_0_generic;
  k.dot[type_index(DType::Q4_K)] = dot_q4_K_generic;
  k.dot[type_index(DType::Q5_K)] = dot_q5_K_generic;
  k.dot[type_index(DType::Q6_K)] = dot_q6_K_generic;
  k.dot_q16[type_index(DType::Q4_0)] = dot_q4_0_q16_generic;
  k.dot_q16[type_index(DType::Q8_0)] = dot_q8_0_q16_generic;
  return k;
}

const DotKernels kDotGeneric = make_generic_table();

}  // namespace knot
