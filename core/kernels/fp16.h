// fp16.h — IEEE half and bfloat16 <-> f32 conversions, inline for hot loops. Owned by
// quant (quant.h includes it); the kernel back ends, the KV cache and the tests use it.
// Contract: every conversion to f32 is exact (subnormal halves included, Inf/NaN kept);
// fp32_to_fp16 / fp32_to_bf16 round to nearest even (quant.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace knot {

typedef uint16_t fp16_t;  // IEEE half, raw bits
typedef uint16_t bf16_t;  // bfloat16, raw bits

// Scalar fp16 -> fp32, exact.
inline float half_to_float(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);  // inf / nan (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {
    // subnormal half: normalise into an f32 normal
    int e = -1;
    do {
      e++;
      mant <<= 1;
    } while ((mant & 0x400) == 0);
    bits = sign | ((uint32_t)(112 - e) << 23) | ((mant & 0x3FF) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline float bf16_bits_to_float(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// n halves -> f32, branch-free. The half's exponent+mantissa placed in a float's bit
// positions reads as value * 2^-112 (subnormals included), so one multiply by 2^112
// rebiases; Inf/NaN (all-ones exponent) are patched by a select. Written with GCC/clang
// vector extensions: SSE2 natively, simd128 in wasm, no intrinsics or CPU checks.
// Same values as half_to_float, element for element.
inline void half_to_float_row(const uint16_t* src, float* dst, size_t n) {
  typedef uint32_t v4u __attribute__((vector_size(16)));
  typedef float v4f __attribute__((vector_size(16)));
  typedef uint16_t v4h __attribute__((vector_size(8)));
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {  // hot loop: attention reads of the F16 KV cache
    v4h h16;
    std::memcpy(&h16, src + i, 8);
    const v4u h = __builtin_convertvector(h16, v4u);  // zero-extend 16 -> 32 bits
    const v4u em = (h & 0x7fffu) << 13;
    const v4f f = (v4f)em * 0x1p112f;
    const v4u inf = (v4u)(em >= 0x0f800000u);  // all-ones lanes where Inf/NaN
    v4u bits = (inf & (em | 0x7f800000u)) | (~inf & (v4u)f);
    bits |= (h & 0x8000u) << 16;
    std::memcpy(dst + i, &bits, 16);
  }
  for (; i < n; i++) dst[i] = half_to_float(src[i]);
}

float fp16_to_fp32(fp16_t h);
fp16_t fp32_to_fp16(float f);
float bf16_to_fp32(bf16_t h);
bf16_t fp32_to_bf16(float f);

// n f32 -> halves, branch-free (vector extensions, as half_to_float_row). Same bits as
// fp32_to_fp16, element for element. With a = |x| bits:
//  - normal halves: (a + 0xFFF + lsb) >> 13 rounds the 13 dropped bits to even (a carry
//    bumps the exponent, so [65504, 65520) stays finite), - (112 << 10) rebiases;
//  - below 2^-14: |x| * 2^24 is exact, and adding 1.5 * 2^23 rounds it to the integer
//    (ties to even) that is the subnormal half's bits (1024 = the smallest normal);
//  - >= 65520 -> inf; nan -> quiet nan keeping the payload's top 10 bits.
inline void fp32_to_fp16_row(const float* src, uint16_t* dst, size_t n) {
  typedef uint32_t v4u __attribute__((vector_size(16)));
  typedef float v4f __attribute__((vector_size(16)));
  typedef uint16_t v4h __attribute__((vector_size(8)));
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {  // hot loop: F16 KV cache appends
    v4u x;
    std::memcpy(&x, src + i, 16);
    const v4u sign = (x >> 16) & 0x8000u;
    const v4u a = x & 0x7FFFFFFFu;
    const v4u norm = ((a + 0xFFFu + ((a >> 13) & 1u)) >> 13) - (112u << 10);
    v4f af;
    std::memcpy(&af, &a, 16);
    const v4f sf = af * 0x1p24f + 12582912.f;
    v4u sub;
    std::memcpy(&sub, &sf, 16);
    sub -= 0x4B400000u;  // the bits of 12582912.f
    const v4u nan = 0x7E00u | ((a >> 13) & 0x3FFu);
    const v4u is_sub = (v4u)(a < 0x38800000u), is_big = (v4u)(a >= 0x477FF000u), is_nan = (v4u)(a > 0x7F800000u);
    v4u h = (is_sub & sub) | (~is_sub & norm);
    h = (is_big & 0x7C00u) | (~is_big & h);
    h = (is_nan & nan) | (~is_nan & h);
    const v4h h16 = __builtin_convertvector(h | sign, v4h);
    std::memcpy(dst + i, &h16, 8);
  }
  for (; i < n; i++) dst[i] = fp32_to_fp16(src[i]);
}

}  // namespace knot
