// quant.cpp — type table, fp16/bf16 conversion, row sizing, dequantize and the
// reference quantizers for ggml's block formats.
// Quantizer numerics follow ggml's reference quantizers (same rounding rule, same scale
// searches) so that activations quantized here (Q8_0, Q8_K) match llama.cpp's closely.
#include <cfloat>
#include <cstddef>
#include <cmath>
#include <cstring>
#include <string>

#include "kernels/kernels_internal.h"
#include "kernels/quant.h"

namespace knot {

// ---------------------------------------------------------------------------------------
// row sizing

size_t row_bytes(DType t, int64_t n, std::string_view what) {
  const TypeTraits& tt = type_traits(t);
  if (n < 0 || n % tt.block_elems != 0) {
    std::string msg = "row length " + std::to_string(n) + " is not a multiple of the " +
                      tt.name + " block size " + std::to_string(tt.block_elems);
    if (!what.empty()) msg = "tensor '" + std::string(what) + "': " + msg;
    fail(msg);
  }
  return (size_t)(n / tt.block_elems) * (size_t)tt.block_bytes;
}

// ---------------------------------------------------------------------------------------
// fp16 / bf16

float fp16_to_fp32(fp16_t h) { return half_to_float(h); }

// Exact round-to-nearest-even, including subnormal halves, overflow to inf, NaN kept NaN.
fp16_t fp32_to_fp16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  x &= 0x7FFFFFFFu;
  if (x >= 0x7F800000u) {  // inf or nan
    if (x == 0x7F800000u) return sign | 0x7C00;
    return (uint16_t)(sign | 0x7E00 | ((x >> 13) & 0x3FF));  // quiet nan, keep payload top
  }
  if (x >= 0x477FF000u) return sign | 0x7C00;  // >= 65520 rounds to inf
  if (x < 0x38800000u) {                       // below 2^-14: half subnormal or zero
    const int e = (int)(x >> 23);
    if (e == 0) return sign;  // f32 zero/subnormal is far below half's smallest step
    const uint32_t m = (x & 0x7FFFFFu) | 0x800000u;
    const int shift = 126 - e;  // value / 2^-24 = m >> shift
    if (shift > 24) return sign;
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    return (uint16_t)(sign | q);
  }
  uint32_t h = (((x >> 23) - 112) << 10) | ((x >> 13) & 0x3FF);
  const uint32_t rem = x & 0x1FFF;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;  // carry may bump the exponent
  return (uint16_t)(sign | h);
}

float bf16_to_fp32(bf16_t h) { return bf16_bits_to_float(h); }

bf16_t fp32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (bf16_t)((x >> 16) | 0x40);  // quiet nan
  x += 0x7FFFu + ((x >> 16) & 1);
  return (bf16_t)(x >> 16);
}

// ---------------------------------------------------------------------------------------
// dequantize

static void check_row(DType t, int64_t n, const char* op) {
  const TypeTraits& tt = type_traits(t);
  if (n < 0 || n % tt.block_elems != 0)
    fail(std::string(op) + ": row length " + std::to_string(n) + " is not a multiple of the " +
         tt.name + " block size " + std::to_string(tt.block_elems));
}

static void dequant_block_q4_0(const block_q4_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, y += QK4_0) {
    const float d = half_to_float(b[i].d);
    for (int j = 0; j < QK4_0 / 2; j++) {
      y[j] = (float)((b[i].qs[j] & 0x0F) - 8) * d;
      y[j + QK4_0 / 2] = (float)((b[i].qs[j] >> 4) - 8) * d;
    }
  }
}

static void dequant_block_q8_0(const block_q8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, y += QK8_0) {
    const float d = half_to_float(b[i].d);
    for (int j = 0; j < QK8_0; j++) y[j] = (float)b[i].qs[j] * d;
  }
}

// Q4_K: 4 chunks of 64; chunk c: low nibbles of qs[32c..32c+32) are sub-block 2c,
// high nibbles sub-block 2c+1. y = d*sc*q - dmin*m.
static void dequant_block_q4_K(const block_q4_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++) {
    const float d = half_to_float(b[i].d);
    const float dmin = half_to_float(b[i].dmin);
    const uint8_t* q = b[i].qs;
    for (int c = 0; c < 4; c++, q += 32) {
      uint8_t sc0, m0, sc1, m1;
      k4_scale_min(2 * c, b[i].scales, &sc0, &m0);
      k4_scale_min(2 * c + 1, b[i].scales, &sc1, &m1);
      const float d0 = d * sc0, mm0 = dmin * m0, d1 = d * sc1, mm1 = dmin * m1;
      for (int l = 0; l < 32; l++) *y++ = d0 * (float)(q[l] & 0x0F) - mm0;
      for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] >> 4) - mm1;
    }
  }
}

// Q5_K: as Q4_K plus a fifth bit: qh[l] bit 2c for sub-block 2c, bit 2c+1 for 2c+1.
static void dequant_block_q5_K(const block_q5_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++) {
    const float d = half_to_float(b[i].d);
    const float dmin = half_to_float(b[i].dmin);
    const uint8_t* q = b[i].qs;
    for (int c = 0; c < 4; c++, q += 32) {
      uint8_t sc0, m0, sc1, m1;
      k4_scale_min(2 * c, b[i].scales, &sc0, &m0);
      k4_scale_min(2 * c + 1, b[i].scales, &sc1, &m1);
      const float d0 = d * sc0, mm0 = dmin * m0, d1 = d * sc1, mm1 = dmin * m1;
      for (int l = 0; l < 32; l++)
        *y++ = d0 * (float)((q[l] & 0x0F) + (((b[i].qh[l] >> (2 * c)) & 1) << 4)) - mm0;
      for (int l = 0; l < 32; l++)
        *y++ = d1 * (float)((q[l] >> 4) + (((b[i].qh[l] >> (2 * c + 1)) & 1) << 4)) - mm1;
    }
  }
}

// Q6_K: two halves of 128; in half h, for l < 32 the four 6-bit values
//   q(l)    = ql[l] low  | qh[l] bits 0-1      (sub-block 8h + l/16)
//   q(l+32) = ql[l+32] low | qh[l] bits 2-3    (sub-block 8h + 2 + l/16)
//   q(l+64) = ql[l] high | qh[l] bits 4-5      (sub-block 8h + 4 + l/16)
//   q(l+96) = ql[l+32] high | qh[l] bits 6-7   (sub-block 8h + 6 + l/16)
// y = d * scale * (q - 32).
static void dequant_block_q6_K(const block_q6_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++) {
    const float d = half_to_float(b[i].d);
    const uint8_t* ql = b[i].ql;
    const uint8_t* qh = b[i].qh;
    const int8_t* sc = b[i].scales;
    for (int h = 0; h < 2; h++, ql += 64, qh += 32, sc += 8, y += 128) {
      for (int l = 0; l < 32; l++) {
        const int is = l / 16;
        const int q1 = (int)((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = (int)((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = (int)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * (float)sc[is] * (float)q1;
        y[l + 32] = d * (float)sc[is + 2] * (float)q2;
        y[l + 64] = d * (float)sc[is + 4] * (float)q3;
        y[l + 96] = d * (float)sc[is + 6] * (float)q4;
      }
    }
  }
}

static void dequant_block_q8_K(const block_q8_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, y += QK_K)
    for (int j = 0; j < QK_K; j++) y[j] = b[i].d * (float)b[i].qs[j];
}

static void f32_to_float(const void* src, float* dst, int64_t n) { std::memcpy(dst, src, (size_t)n * 4); }
static void f16_to_float(const void* src, float* dst, int64_t n) {
  const uint16_t* s = (const uint16_t*)src;
  for (int64_t i = 0; i < n; i++) dst[i] = half_to_float(s[i]);
}
static void bf16_to_float(const void* src, float* dst, int64_t n) {
  const uint16_t* s = (const uint16_t*)src;
  for (int64_t i = 0; i < n; i++) dst[i] = bf16_bits_to_float(s[i]);
}
// Block dequantizers in the table's to_float shape (n elements).
template <typename B, void (*F)(const B*, float*, int64_t), int QK>
static void blocks_to_float(const void* src, float* dst, int64_t n) {
  F((const B*)src, dst, n / QK);
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  check_row(t, n, "dequantize_row");
  const TypeTraits& tt = type_traits(t);
  if (!tt.to_float) fail("dequantize_row: unsupported type id " + std::to_string((uint32_t)t));
  tt.to_float(src, dst, n);
}

// Scales only: a block with finite scales dequantizes to finite values (quants are ints).
int64_t first_nonfinite(DType t, const void* src, int64_t n) {
  check_row(t, n, "first_nonfinite");
  const uint8_t* p = (const uint8_t*)src;
  const TypeTraits& tt = type_traits(t);
  // one value at offset off: an fp16/bf16 (size 2) or f32 (size 4) is Inf/NaN
  auto bad_at = [&](const uint8_t* b, int size) {
    if (size == 4) {
      float f;
      std::memcpy(&f, b, 4);
      return !std::isfinite(f);
    }
    uint16_t h;
    std::memcpy(&h, b, 2);
    return t == DType::BF16 ? (h & 0x7F80) == 0x7F80 : (h & 0x7C00) == 0x7C00;
  };
  const int64_t nb = n / tt.block_elems;
  for (int64_t i = 0; i < nb; i++) {
    const uint8_t* b = p + (size_t)i * tt.block_bytes;
    bool bad = false;
    if (tt.scale_size == 0) {
      bad = bad_at(b, tt.block_bytes);  // float types: the element itself
    } else {
      for (int off : tt.scale_off)
        if (off >= 0) bad = bad || bad_at(b + off, tt.scale_size);
    }
    if (bad) return i * tt.block_elems;
  }
  return -1;
}

// ---------------------------------------------------------------------------------------
// reference quantizers

// Round half to even, as ggml's nearest_int (valid for |f| < 2^22; callers clamp).
static inline int nearest_int(float f) {
  if (!(std::fabs(f) < 4194303.f)) return f > 0 ? 4194303 : -4194303;
  float v = f + 12582912.f;
  int32_t i;
  std::memcpy(&i, &v, 4);
  return (i & 0x007FFFFF) - 0x00400000;
}

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

static void check_finite(const float* x, int64_t n, const char* tname) {
  for (int64_t i = 0; i < n; i++)
    if (!std::isfinite(x[i]))
      fail(std::string("quantize_row(") + tname + "): non-finite value " +
           std::to_string(x[i]) + " at index " + std::to_string(i));
}

static void quant_block_q4_0(const float* x, block_q4_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, x += QK4_0) {
    float amax = 0.f, vmax = 0.f;  // vmax: the value with the largest magnitude, signed
    for (int j = 0; j < QK4_0; j++)
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        vmax = x[j];
      }
    const float d = vmax / -8.f;  // the extreme value maps to q = 0 (i.e. -8)
    const float id = d != 0.f ? 1.f / d : 0.f;
    y[i].d = fp32_to_fp16(d);
    for (int j = 0; j < QK4_0 / 2; j++) {
      const int q0 = clampi((int)(x[j] * id + 8.5f), 0, 15);
      const int q1 = clampi((int)(x[j + QK4_0 / 2] * id + 8.5f), 0, 15);
      y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
    }
  }
}

// d = amax/127, q = round(x/d) (round half away from zero, as roundf).
static void quant_block_q8_0(const float* x, block_q8_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, x += QK8_0) {
    float amax = 0.f;
    for (int j = 0; j < QK8_0; j++) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    y[i].d = fp32_to_fp16(d);
    for (int j = 0; j < QK8_0; j++) y[i].qs[j] = (int8_t)std::round(x[j] * id);
  }
}

// Q8_K: scale from the signed extreme so it maps to -127 exactly; bsums per 16.
static void quant_block_q8_K(const float* x, block_q8_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, x += QK_K) {
    float amax = 0.f, vmax = 0.f;
    for (int j = 0; j < QK_K; j++)
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        vmax = x[j];
      }
    if (amax == 0.f) {
      y[i].d = 0.f;
      std::memset(y[i].qs, 0, sizeof(y[i].qs));
      std::memset(y[i].bsums, 0, sizeof(y[i].bsums));
      continue;
    }
    const float iscale = -127.f / vmax;
    for (int j = 0; j < QK_K; j++) y[i].qs[j] = (int8_t)std::min(127, nearest_int(iscale * x[j]));
    for (int g = 0; g < QK_K / 16; g++) {
      int s = 0;
      for (int l = 0; l < 16; l++) s += y[i].qs[16 * g + l];
      y[i].bsums[g] = (int16_t)s;
    }
    y[i].d = 1.f / iscale;
  }
}

// Asymmetric quantization of n values to [0, nmax] with weights w: x ~ scale*L - mn.
// Starts from the min/max grid and tries nstep nearby grids, keeping the weighted
// least-squares (scale, min) of whichever grid has the lowest weighted error.
// Returns scale; *neg_min = -min (>= 0).
static float quant_asym_search(int n, int nmax, const float* x, const float* w, uint8_t* L,
                               float* neg_min, uint8_t* Laux, float rmin, float rdelta,
                               int nstep) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < n; i++) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  if (lo > 0) lo = 0;
  if (hi == lo) {
    std::memset(L, 0, (size_t)n);
    *neg_min = -lo;
    return 0.f;
  }
  float sw = 0, sx = 0;
  for (int i = 0; i < n; i++) {
    sw += w[i];
    sx += w[i] * x[i];
  }
  float iscale = nmax / (hi - lo);
  float scale = 1.f / iscale;
  float best = 0;
  for (int i = 0; i < n; i++) {
    const int l = clampi(nearest_int(iscale * (x[i] - lo)), 0, nmax);
    L[i] = (uint8_t)l;
    const float diff = scale * l + lo - x[i];
    best += w[i] * diff * diff;
  }
  for (int s = 0; s <= nstep; s++) {
    iscale = (rmin + rdelta * s + nmax) / (hi - lo);
    float sl = 0, sl2 = 0, sxl = 0;
    for (int i = 0; i < n; i++) {
      const int l = clampi(nearest_int(iscale * (x[i] - lo)), 0, nmax);
      Laux[i] = (uint8_t)l;
      sl += w[i] * l;
      sl2 += w[i] * l * l;
      sxl += w[i] * l * x[i];
    }
    const float D = sw * sl2 - sl * sl;
    if (D > 0) {
      float this_scale = (sw * sxl - sx * sl) / D;
      float this_min = (sl2 * sx - sl * sxl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sxl / sl2;
      }
      float err = 0;
      for (int i = 0; i < n; i++) {
        const float diff = this_scale * Laux[i] + this_min - x[i];
        err += w[i] * diff * diff;
      }
      if (err < best) {
        std::memcpy(L, Laux, (size_t)n);
        best = err;
        scale = this_scale;
        lo = this_min;
      }
    }
  }
  *neg_min = -lo;
  return scale;
}

// Symmetric quantization of n values to [-nmax, nmax-1] weighted by x^2; tries the
// grids around nmax/amax and keeps the best least-squares scale. L gets l + nmax.
static float quant_sym_search(int n, int nmax, const float* x, int8_t* L) {
  float amax = 0, vmax = 0;
  for (int i = 0; i < n; i++)
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      vmax = x[i];
    }
  if (amax < 1e-15f) {
    std::memset(L, 0, (size_t)n);
    return 0.f;
  }
  float iscale = -nmax / vmax;
  float slx = 0, sl2 = 0;
  for (int i = 0; i < n; i++) {
    const int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = (int8_t)(l + nmax);
    const float w = x[i] * x[i];
    slx += w * x[i] * l;
    sl2 += w * l * l;
  }
  float scale = sl2 > 0 ? slx / sl2 : 0.f;
  float best = scale * slx;
  for (int s = -9; s <= 9; s++) {
    if (s == 0) continue;
    iscale = -(nmax + 0.1f * s) / vmax;
    slx = sl2 = 0;
    for (int i = 0; i < n; i++) {
      const int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      slx += w * x[i] * l;
      sl2 += w * l * l;
    }
    if (sl2 > 0 && slx * slx > best * sl2) {
      for (int i = 0; i < n; i++)
        L[i] = (int8_t)(nmax + clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1));
      scale = slx / sl2;
      best = scale * slx;
    }
  }
  return scale;
}

// Shared Q4_K/Q5_K scale selection: per sub-block (scale, min) search, then the 6-bit
// quantization of scales and mins against the super-block d/dmin, then requantize
// every value with the rounded scales. L gets values in [0, nmax].
// Weights of the search: av + |x|, av the rms of the sub-block (Q4_K) or of the whole
// super-block (Q5_K), as ggml's reference quantizers do.
static void quant_k_asym(const float* x, int nmax, float rmin, int nstep, bool sub_rms,
                         uint8_t* scales, fp16_t* d_out, fp16_t* dmin_out, uint8_t L[QK_K]) {
  float w[32];
  uint8_t Laux[32];
  float sub_scale[8], sub_min[8];
  float sum2 = 0;
  for (int l = 0; l < QK_K; l++) sum2 += x[l] * x[l];
  float av = std::sqrt(sum2 / QK_K);
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; j++) {
    if (sub_rms) {
      float s2 = 0;
      for (int l = 0; l < 32; l++) s2 += x[32 * j + l] * x[32 * j + l];
      av = std::sqrt(s2 / 32);
    }
    for (int l = 0; l < 32; l++) w[l] = av + std::fabs(x[32 * j + l]);
    sub_scale[j] = quant_asym_search(32, nmax, x + 32 * j, w, L + 32 * j, &sub_min[j], Laux,
                                     rmin, 0.1f, nstep);
    max_scale = std::max(max_scale, sub_scale[j]);
    max_min = std::max(max_min, sub_min[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  std::memset(scales, 0, K_SCALE_SIZE);
  for (int j = 0; j < 8; j++) {
    const uint8_t ls = (uint8_t)std::min(63, nearest_int(inv_scale * sub_scale[j]));
    const uint8_t lm = (uint8_t)std::min(63, nearest_int(inv_min * sub_min[j]));
    if (j < 4) {
      scales[j] = ls;
      scales[j + 4] = lm;
    } else {
      scales[j + 4] = (uint8_t)((ls & 0x0F) | ((lm & 0x0F) << 4));
      scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
      scales[j] |= (uint8_t)((lm >> 4) << 6);
    }
  }
  *d_out = fp32_to_fp16(max_scale / 63.f);
  *dmin_out = fp32_to_fp16(max_min / 63.f);
  const float d = half_to_float(*d_out), dmin = half_to_float(*dmin_out);
  for (int j = 0; j < 8; j++) {
    uint8_t sc, m;
    k4_scale_min(j, scales, &sc, &m);
    const float dj = d * sc;
    if (dj == 0.f) continue;  // keep the search's L (all multiply by zero anyway)
    const float dm = dmin * m;
    for (int l = 0; l < 32; l++)
      L[32 * j + l] = (uint8_t)clampi(nearest_int((x[32 * j + l] + dm) / dj), 0, nmax);
  }
}

static void quant_block_q4_K(const float* x, block_q4_K* y, int64_t nb) {
  uint8_t L[QK_K];
  for (int64_t i = 0; i < nb; i++, x += QK_K) {
    quant_k_asym(x, 15, -1.f, 20, true, y[i].scales, &y[i].d, &y[i].dmin, L);
    for (int c = 0; c < 4; c++)
      for (int l = 0; l < 32; l++)
        y[i].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
  }
}

static void quant_block_q5_K(const float* x, block_q5_K* y, int64_t nb) {
  uint8_t L[QK_K];
  for (int64_t i = 0; i < nb; i++, x += QK_K) {
    quant_k_asym(x, 31, -0.5f, 15, false, y[i].scales, &y[i].d, &y[i].dmin, L);
    std::memset(y[i].qh, 0, sizeof(y[i].qh));
    for (int c = 0; c < 4; c++)
      for (int l = 0; l < 32; l++) {
        const int a = L[64 * c + l], b = L[64 * c + 32 + l];
        y[i].qs[32 * c + l] = (uint8_t)((a & 0x0F) | ((b & 0x0F) << 4));
        y[i].qh[l] |= (uint8_t)(((a >> 4) << (2 * c)) | ((b >> 4) << (2 * c + 1)));
      }
  }
}

static void quant_block_q6_K(const float* x, block_q6_K* y, int64_t nb) {
  int8_t L[QK_K];
  float sub_scale[16];
  for (int64_t i = 0; i < nb; i++, x += QK_K) {
    float amax = 0, vmax = 0;
    for (int j = 0; j < 16; j++) {
      sub_scale[j] = quant_sym_search(16, 32, x + 16 * j, L + 16 * j);
      if (std::fabs(sub_scale[j]) > amax) {
        amax = std::fabs(sub_scale[j]);
        vmax = sub_scale[j];
      }
    }
    if (amax < 1e-15f) {
      std::memset(&y[i], 0, sizeof(block_q6_K));
      continue;
    }
    const float iscale = -128.f / vmax;
    y[i].d = fp32_to_fp16(1.f / iscale);
    for (int j = 0; j < 16; j++) y[i].scales[j] = (int8_t)std::min(127, nearest_int(iscale * sub_scale[j]));
    const float d = half_to_float(y[i].d);
    for (int j = 0; j < 16; j++) {
      const float dj = d * y[i].scales[j];
      if (dj == 0.f) continue;
      for (int l = 0; l < 16; l++)
        L[16 * j + l] = (int8_t)(clampi(nearest_int(x[16 * j + l] / dj), -32, 31) + 32);
    }
    for (int h = 0; h < 2; h++) {
      uint8_t* ql = y[i].ql + 64 * h;
      uint8_t* qh = y[i].qh + 32 * h;
      const int8_t* Lh = L + 128 * h;
      for (int l = 0; l < 32; l++) {
        const int q1 = Lh[l], q2 = Lh[l + 32], q3 = Lh[l + 64], q4 = Lh[l + 96];
        ql[l] = (uint8_t)((q1 & 0x0F) | ((q3 & 0x0F) << 4));
        ql[l + 32] = (uint8_t)((q2 & 0x0F) | ((q4 & 0x0F) << 4));
        qh[l] = (uint8_t)((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
      }
    }
  }
}

static void f32_from_float(const float* src, void* dst, int64_t n) { std::memcpy(dst, src, (size_t)n * 4); }
static void f16_from_float(const float* src, void* dst, int64_t n) {
  uint16_t* d = (uint16_t*)dst;
  for (int64_t i = 0; i < n; i++) d[i] = fp32_to_fp16(src[i]);
}
static void bf16_from_float(const float* src, void* dst, int64_t n) {
  uint16_t* d = (uint16_t*)dst;
  for (int64_t i = 0; i < n; i++) d[i] = fp32_to_bf16(src[i]);
}
// Block quantizers in the table's from_float shape: refuse non-finite input first.
template <typename B, void (*F)(const float*, B*, int64_t), int QK, DType T>
static void blocks_from_float(const float* src, void* dst, int64_t n) {
  check_finite(src, n, dtype_name(T));
  F(src, (B*)dst, n / QK);
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  check_row(t, n, "quantize_row");
  const TypeTraits& tt = type_traits(t);
  if (!tt.from_float_ref) fail("quantize_row: unsupported type id " + std::to_string((uint32_t)t));
  tt.from_float_ref(src, dst, n);
}

// ---------------------------------------------------------------------------------------
// the type table (ggml's type_traits[]): one row per type, ids ascending

#define KNOT_BLOCK(T, B, QK) \
  blocks_to_float<B, dequant_##B, QK>, blocks_from_float<B, quant_##B, QK, DType::T>

static const TypeTraits kTypes[] = {
    // type       name    elems  bytes                  store  kq     vec_dot_type  act               scale  offsets                       bound
    {DType::F32,  "F32",  1,     4,                     true,  false, DType::F32,   ActFormat::F32,   0, {-1, -1},                            0.0,   f32_to_float, f32_from_float},
    {DType::F16,  "F16",  1,     2,                     true,  false, DType::F32,   ActFormat::F32,   0, {-1, -1},                            4e-4,  f16_to_float, f16_from_float},
    {DType::Q4_0, "Q4_0", QK4_0, (int)sizeof(block_q4_0), true, false, DType::Q8_0, ActFormat::Q16_0, 2, {0, -1},                             0.12,  KNOT_BLOCK(Q4_0, block_q4_0, QK4_0)},
    {DType::Q8_0, "Q8_0", QK8_0, (int)sizeof(block_q8_0), true, false, DType::Q8_0, ActFormat::Q16_0, 2, {0, -1},                             0.008, KNOT_BLOCK(Q8_0, block_q8_0, QK8_0)},
    {DType::Q4_K, "Q4_K", QK_K,  (int)sizeof(block_q4_K), true, true,  DType::Q8_K, ActFormat::Q8_K,  2, {0, 2},                              0.10,  KNOT_BLOCK(Q4_K, block_q4_K, QK_K)},
    {DType::Q5_K, "Q5_K", QK_K,  (int)sizeof(block_q5_K), true, true,  DType::Q8_K, ActFormat::Q8_K,  2, {0, 2},                              0.05,  KNOT_BLOCK(Q5_K, block_q5_K, QK_K)},
    {DType::Q6_K, "Q6_K", QK_K,  (int)sizeof(block_q6_K), true, true,  DType::Q8_K, ActFormat::Q8_K,  2, {(int)offsetof(block_q6_K, d), -1}, 0.025, KNOT_BLOCK(Q6_K, block_q6_K, QK_K)},
    {DType::Q8_K, "Q8_K", QK_K,  (int)sizeof(block_q8_K), false, true, DType::Q8_K, ActFormat::Q8_K,  4, {0, -1},                             0.008, KNOT_BLOCK(Q8_K, block_q8_K, QK_K)},
    {DType::BF16, "BF16", 1,     2,                     true,  false, DType::F32,   ActFormat::F32,   0, {-1, -1},                            3e-3,  bf16_to_float, bf16_from_float},
};
#undef KNOT_BLOCK

const char* act_format_name(ActFormat f) {
  static const char* const names[kActFormats] = {"F32", "Q8_0", "Q8_K", "Q16_0"};
  return names[(int)f];
}

TypeTable all_types() { return {kTypes, kTypes + sizeof kTypes / sizeof kTypes[0]}; }

const TypeTraits* type_traits(uint32_t id) {
  for (const TypeTraits& t : kTypes)
    if ((uint32_t)t.type == id) return &t;
  return nullptr;
}

const TypeTraits& type_traits(DType t) {
  const TypeTraits* tt = type_traits((uint32_t)t);
  if (!tt) fail("unsupported tensor type id " + std::to_string((uint32_t)t));
  return *tt;
}

const char* dtype_name(DType t) {
  const TypeTraits* tt = type_traits((uint32_t)t);
  return tt ? tt->name : "unknown";
}

DType dtype_from_id(uint32_t id, std::string_view what) {
  const TypeTraits* tt = type_traits(id);
  if (!tt) {
    std::string msg = "unsupported tensor type id " + std::to_string(id);
    if (!what.empty()) msg += " for " + std::string(what);
    fail(msg);
  }
  return tt->type;
}

DType dtype_from_name(std::string_view name) {
  for (const TypeTraits& t : kTypes) {
    const char* n = t.name;
    size_t len = std::strlen(n);
    if (len != name.size()) continue;
    bool eq = true;
    for (size_t i = 0; i < len && eq; i++) {
      char c = name[i];
      if (c >= 'a' && c <= 'z') c = (char)(c - 'a' + 'A');
      eq = c == n[i];
    }
    if (eq) return t.type;
  }
  fail("unknown tensor type name '" + std::string(name) + "'");
}

}  // namespace knot
