// attn_simd.h — the attention loops' f32 kernels (infer/forward.cpp attn; swiglu's exp),
// written with GCC/clang vector extensions (SSE2 natively, simd128 in wasm; no intrinsics,
// no CPU checks). Inline, for the hot loops; tests/native/infer_attn_simd.cpp holds each
// four-lane form to its scalar form.
//
// Contract:
//   - exp_fast(x): exp for the fast kernels (~2 ulp; overflow inf, underflow 0, NaN stays).
//   - exp_fast4(v) is exp_fast lane by lane, bit for bit (the same operations in the same
//     order); exp_shifted(s, n, mx) sets s[j] = exp_fast(s[j] - mx), bit for bit.
//   - dot_f32(a, b, n): two four-lane accumulators over blocks of 8, then
//     (acc[0] + acc[1]) + (acc[2] + acc[3]), then the tail; scores_hd8(q, kf, n, hd, scale,
//     s) sets s[j] = dot_f32(q, k_j, hd) * scale bit for bit (hd a multiple of 8) and
//     returns their max as the loop mx = std::max(mx, s[j]) from -inf gives it (a zero's
//     sign aside: the two zeros compare equal).
//   - axpy_f32(p, x, y, n): y += p * x; weighted_values<NV>(s, inv, vf, n, hd, oh) sets
//     oh[0..4 NV) to what oh = 0 then axpy_f32(s[j] * inv, v_j, oh, hd) for j < n gives,
//     bit for bit (hd = 4 NV: the accumulators stay in registers); weighted_values_cols32
//     gives the same for any hd that is a multiple of 32, 32 columns per pass over the values.
//   - swiglu_fast_row(g, u, n): g[i] = g[i] / (1 + exp_fast(-g[i])) * u[i], four lanes at a
//     time through exp_fast4, bit for bit the scalar expression.
//   - Two rows at once (a GQA group's query heads, a verify pass's tokens: the same keys and
//     values, each row its own scores): sum_rows2 gives each row's sum as the plain loop
//     sum += s[j] from 0 in j order gives it, and weighted_values2<NV> each row's
//     weighted_values<NV>, bit for bit — the two rows' add chains (one add per key each,
//     latency-bound on one row) interleaved, and each value row loaded once for both.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace knot {
namespace attn_simd {

// f32 dot / axpy for the attention loops, with GCC/clang vector extensions (SSE2
// natively, simd128 in wasm): two independent accumulators break the add chain.
typedef float v4f __attribute__((vector_size(16)));

inline v4f load4(const float* p) {
  v4f v;
  std::memcpy(&v, p, 16);
  return v;
}

inline float dot_f32(const float* a, const float* b, int n) {
  v4f acc0 = {0, 0, 0, 0}, acc1 = {0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    acc0 += load4(a + i) * load4(b + i);
    acc1 += load4(a + i + 4) * load4(b + i + 4);
  }
  const v4f acc = acc0 + acc1;
  float s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  for (; i < n; i++) s += a[i] * b[i];
  return s;
}

// y += p * x
inline void axpy_f32(float p, const float* x, float* y, int n) {
  int i = 0;
  const v4f pv = {p, p, p, p};
  for (; i + 4 <= n; i += 4) {
    const v4f r = load4(y + i) + pv * load4(x + i);
    std::memcpy(y + i, &r, 16);
  }
  for (; i < n; i++) y[i] += p * x[i];
}


// exp(x) for the fast kernels (Reference keeps std::exp): n = round(x/ln2) by the
// 1.5*2^23 trick (no float->int conversion, so NaN is no UB), r = x - n*ln2 in two parts
// (n*ln2_hi exact), degree-7 Taylor on |r| <= ln2/2 (truncation < 1e-8), times 2^n as
// two factors so n in [-150, 128] stays representable: overflow gives inf, underflow 0,
// NaN stays NaN. ~2 ulp. Branch-free, so the loops below vectorize (simd128 / SSE):
// libm expf was ~6% of wasm prefill.
inline int32_t f32_bits(float f) {
  int32_t i;
  std::memcpy(&i, &f, 4);
  return i;
}
inline float bits_f32(int32_t i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
inline float exp_fast(float x) {
  const float xc = std::min(std::max(x, -104.f), 89.f);  // NaN passes through
  const float t = xc * 1.44269504f + 12582912.f;
  const float nf = t - 12582912.f;
  const int32_t n = f32_bits(t) - 0x4B400000;
  const float r = (xc - nf * 0.693359375f) - nf * -2.12194440e-4f;
  float p = 1.f / 5040.f;
  p = p * r + 1.f / 720.f;
  p = p * r + 1.f / 120.f;
  p = p * r + 1.f / 24.f;
  p = p * r + 1.f / 6.f;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  const int32_t n1 = n >> 1, n2 = n - n1;
  const float s1 = bits_f32((n1 + 127) << 23), s2 = bits_f32((n2 + 127) << 23);
  return p * s1 * s2;
}

// exp_fast on four lanes, lane for lane the same operations (so the same values) as the
// scalar exp_fast: the attention softmax's loop, which the compilers left scalar (GCC -O2).
typedef int32_t v4i __attribute__((vector_size(16)));
inline v4f exp_fast4(v4f x) {
  const v4f lo = {-104.f, -104.f, -104.f, -104.f}, hi = {89.f, 89.f, 89.f, 89.f};
  const v4i below = x < lo;                        // std::max(x, -104): x < -104 ? -104 : x
  v4f xc = (v4f)((below & (v4i)lo) | (~below & (v4i)x));
  const v4i above = hi < xc;                       // std::min(., 89): 89 < . ? 89 : .
  xc = (v4f)((above & (v4i)hi) | (~above & (v4i)xc));
  const v4f t = xc * 1.44269504f + 12582912.f;
  const v4f nf = t - 12582912.f;
  const v4i n = (v4i)t - 0x4B400000;
  const v4f r = (xc - nf * 0.693359375f) - nf * -2.12194440e-4f;
  v4f p = {1.f / 5040.f, 1.f / 5040.f, 1.f / 5040.f, 1.f / 5040.f};
  p = p * r + 1.f / 720.f;
  p = p * r + 1.f / 120.f;
  p = p * r + 1.f / 24.f;
  p = p * r + 1.f / 6.f;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  const v4i n1 = n >> 1, n2 = n - n1;
  const v4f s1 = (v4f)((n1 + 127) << 23), s2 = (v4f)((n2 + 127) << 23);
  return p * s1 * s2;
}

// s[j] = dot_f32(q, k_j, hd) * scale for j < n (hd a multiple of 8), four keys at a time:
// each key's two accumulators as dot_f32 forms them, the four sums transposed so their
// horizontal adds (acc[0] + acc[1]) + (acc[2] + acc[3]) run as vertical ones: the same
// operations on the same values. Returns the max of the scores (std::max order's value).
inline float scores_hd8(const float* q, const float* kf, int n, int hd, float scale, float* s) {
  auto acc_of = [&](const float* k) {
    v4f a0 = {0, 0, 0, 0}, a1 = {0, 0, 0, 0};
    for (int i = 0; i < hd; i += 8) {
      a0 += load4(q + i) * load4(k + i);
      a1 += load4(q + i + 4) * load4(k + i + 4);
    }
    return a0 + a1;
  };
  v4f mv = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
  const v4f sc = {scale, scale, scale, scale};
  int j = 0;
  for (; j + 4 <= n; j += 4) {
    const float* k = kf + (size_t)j * hd;
    const v4f A = acc_of(k), B = acc_of(k + hd), C = acc_of(k + 2 * hd), D = acc_of(k + 3 * hd);
    const v4f t0 = __builtin_shufflevector(A, B, 0, 4, 1, 5), t1 = __builtin_shufflevector(A, B, 2, 6, 3, 7);
    const v4f t2 = __builtin_shufflevector(C, D, 0, 4, 1, 5), t3 = __builtin_shufflevector(C, D, 2, 6, 3, 7);
    const v4f T0 = __builtin_shufflevector(t0, t2, 0, 1, 4, 5), T1 = __builtin_shufflevector(t0, t2, 2, 3, 6, 7);
    const v4f T2 = __builtin_shufflevector(t1, t3, 0, 1, 4, 5), T3 = __builtin_shufflevector(t1, t3, 2, 3, 6, 7);
    const v4f v = ((T0 + T1) + (T2 + T3)) * sc;
    std::memcpy(s + j, &v, 16);
    const v4i gt = mv < v;  // std::max(m, v): m < v ? v : m, lane by lane
    mv = (v4f)((gt & (v4i)v) | (~gt & (v4i)mv));
  }
  float mx = -INFINITY;
  for (int l = 0; l < 4; l++) mx = std::max(mx, mv[l]);
  for (; j < n; j++) {
    s[j] = dot_f32(q, kf + (size_t)j * hd, hd) * scale;
    mx = std::max(mx, s[j]);
  }
  return mx;
}

// s[j] = exp_fast(s[j] - mx) for j < n, four at a time.
inline void exp_shifted(float* s, int n, float mx) {
  const v4f m = {mx, mx, mx, mx};
  int j = 0;
  for (; j + 4 <= n; j += 4) {
    v4f v;
    std::memcpy(&v, s + j, 16);
    v = exp_fast4(v - m);
    std::memcpy(s + j, &v, 16);
  }
  for (; j < n; j++) s[j] = exp_fast(s[j] - mx);
}

// oh[0..4*NV) = sum over j < n of (s[j] * inv) * v_j, accumulated in j order as
// axpy_f32 does (oh starts at 0), the accumulators held in registers.
template <int NV>
inline void weighted_values(const float* s, float inv, const float* vf, int n, int hd, float* oh) {
  v4f acc[NV];
  for (int c = 0; c < NV; c++) acc[c] = (v4f){0, 0, 0, 0};
  for (int j = 0; j < n; j++) {
    const float p = s[j] * inv;
    const v4f pv = {p, p, p, p};
    const float* x = vf + (size_t)j * hd;
    for (int c = 0; c < NV; c++) acc[c] = acc[c] + pv * load4(x + 4 * c);
  }
  std::memcpy(oh, acc, sizeof(acc));
}

// weighted_values for hd a multiple of 32: each 32-column strip in registers, one pass over
// the n value rows per strip; per column the same products and the same j-order sums.
inline void weighted_values_cols32(const float* s, float inv, const float* vf, int n, int hd, float* oh) {
  for (int c0 = 0; c0 + 32 <= hd; c0 += 32) weighted_values<8>(s, inv, vf + c0, n, hd, oh + c0);
}

// SwiGLU of the fast kernels: g[i] = g[i] / (1 + exp_fast(-g[i])) * u[i].
inline void swiglu_fast_row(float* g, const float* u, size_t n) {
  size_t i = 0;
  const v4f one = {1.f, 1.f, 1.f, 1.f};
  for (; i + 4 <= n; i += 4) {
    const v4f x = load4(g + i);
    const v4f r = x / (one + exp_fast4(-x)) * load4(u + i);
    std::memcpy(g + i, &r, 16);
  }
  for (; i < n; i++) g[i] = g[i] / (1.f + exp_fast(-g[i])) * u[i];
}

// *sa = sa_[0] + ... + sa_[na-1] and *sb likewise, each from 0 in j order (the plain loop's
// sums, bit for bit), the two chains interleaved.
inline void sum_rows2(const float* a, int na, const float* b, int nb, float* sa, float* sb) {
  float x = 0, y = 0;
  const int n = std::min(na, nb);
  int j = 0;
  for (; j < n; j++) {
    x += a[j];
    y += b[j];
  }
  for (int i = j; i < na; i++) x += a[i];
  for (int i = j; i < nb; i++) y += b[i];
  *sa = x;
  *sb = y;
}

// weighted_values<NV>(sa, inva, vf, na, hd, oa) and weighted_values<NV>(sb, invb, vf, nb,
// hd, ob), bit for bit, in one pass over the value rows they share.
template <int NV>
inline void weighted_values2(const float* sa, float inva, const float* sb, float invb, const float* vf, int na,
                             int nb, int hd, float* oa, float* ob) {
  v4f a[NV], b[NV];
  for (int c = 0; c < NV; c++) a[c] = b[c] = (v4f){0, 0, 0, 0};
  const int n = std::min(na, nb);
  int j = 0;
  for (; j < n; j++) {
    const float pa = sa[j] * inva, pb = sb[j] * invb;
    const v4f pav = {pa, pa, pa, pa}, pbv = {pb, pb, pb, pb};
    const float* x = vf + (size_t)j * hd;
    for (int c = 0; c < NV; c++) {
      const v4f xv = load4(x + 4 * c);
      a[c] = a[c] + pav * xv;
      b[c] = b[c] + pbv * xv;
    }
  }
  for (int i = j; i < na; i++) {
    const float p = sa[i] * inva;
    const v4f pv = {p, p, p, p};
    for (int c = 0; c < NV; c++) a[c] = a[c] + pv * load4(vf + (size_t)i * hd + 4 * c);
  }
  for (int i = j; i < nb; i++) {
    const float p = sb[i] * invb;
    const v4f pv = {p, p, p, p};
    for (int c = 0; c < NV; c++) b[c] = b[c] + pv * load4(vf + (size_t)i * hd + 4 * c);
  }
  std::memcpy(oa, a, sizeof(a));
  std::memcpy(ob, b, sizeof(b));
}

}  // namespace attn_simd
}  // namespace knot
