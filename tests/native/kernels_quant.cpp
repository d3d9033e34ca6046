// Block formats, fp16/bf16 conversion, row sizing, dequantize of hand-built blocks
// (expected values worked out by hand from the ggml formulas), quantize error bounds.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/quant.h"

using namespace knot;

namespace {

float bits_f(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
uint32_t f_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

std::vector<float> gauss(size_t n, uint32_t seed, float sigma = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

}  // namespace

TEST(KernelsQuant, BlockSizes) {
  struct E {
    DType t;
    int elems, bytes;
    bool storage;
  } want[] = {{DType::F32, 1, 4, true},       {DType::F16, 1, 2, true},
              {DType::BF16, 1, 2, true},      {DType::Q4_0, 32, 18, true},
              {DType::Q8_0, 32, 34, true},    {DType::Q4_K, 256, 144, true},
              {DType::Q5_K, 256, 176, true},  {DType::Q6_K, 256, 210, true},
              {DType::Q8_K, 256, 292, false}};
  for (const E& e : want) {
    const TypeTraits& tt = type_traits(e.t);
    EXPECT_EQ(tt.block_elems, e.elems) << tt.name;
    EXPECT_EQ(tt.block_bytes, e.bytes) << tt.name;
    EXPECT_EQ(tt.storage, e.storage) << tt.name;
    EXPECT_EQ(dtype_from_name(tt.name), e.t);
    EXPECT_EQ(dtype_from_id((uint32_t)e.t), e.t);
  }
  EXPECT_EQ(row_bytes(DType::Q4_K, 4096), 16u * 144u);
  EXPECT_EQ(row_bytes(DType::Q6_K, 512), 2u * 210u);
  EXPECT_EQ(row_bytes(DType::Q8_0, 64), 68u);
  EXPECT_EQ(row_bytes(DType::F16, 3), 6u);
  EXPECT_EQ(dtype_from_name("q4_k"), DType::Q4_K);
  EXPECT_EQ(dtype_from_name("bf16"), DType::BF16);
}

TEST(KernelsQuant, RowBytesMisalignedNamesTensorAndLength) {
  try {
    row_bytes(DType::Q4_K, 4000, "blk_3_ffn_down_weight");
    FAIL() << "expected knot::Error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("blk_3_ffn_down_weight"), std::string::npos) << m;
    EXPECT_NE(m.find("4000"), std::string::npos) << m;
    EXPECT_NE(m.find("Q4_K"), std::string::npos) << m;
  }
  EXPECT_THROW(row_bytes(DType::Q8_0, 33), Error);
  EXPECT_THROW(row_bytes(DType::Q8_0, -32), Error);
}

TEST(KernelsQuant, UnknownTypesThrowNeverZeros) {
  EXPECT_EQ(type_traits(7u), nullptr);  // Q5_1 in ggml: not supported here
  EXPECT_EQ(type_traits(99u), nullptr);
  EXPECT_THROW(type_traits((DType)99), Error);
  try {
    dtype_from_id(6, "blk_0_attn_q_weight");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk_0_attn_q_weight"), std::string::npos);
  }
  std::vector<uint8_t> src(1024, 0x11);
  std::vector<float> dst(256, 123.f);
  EXPECT_THROW(dequantize_row((DType)6, src.data(), dst.data(), 256), Error);
  EXPECT_THROW(quantize_row((DType)99, dst.data(), src.data(), 256), Error);
  for (float v : dst) EXPECT_EQ(v, 123.f);  // nothing was written
  EXPECT_THROW(dtype_from_name("q5_1"), Error);
  EXPECT_THROW(dequantize_row(DType::Q4_K, src.data(), dst.data(), 100), Error);
}

TEST(KernelsQuant, Fp16Conversion) {
  EXPECT_EQ(fp32_to_fp16(0.f), 0x0000);
  EXPECT_EQ(fp32_to_fp16(-0.f), 0x8000);
  EXPECT_EQ(fp32_to_fp16(1.f), 0x3C00);
  EXPECT_EQ(fp32_to_fp16(-2.f), 0xC000);
  EXPECT_EQ(fp32_to_fp16(65504.f), 0x7BFF);                   // max finite
  EXPECT_EQ(fp32_to_fp16(65519.99f), 0x7BFF);                 // below the halfway point
  EXPECT_EQ(fp32_to_fp16(65520.f), 0x7C00);                   // tie rounds to even = inf
  EXPECT_EQ(fp32_to_fp16(1e10f), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(-INFINITY), 0xFC00);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.f, -14)), 0x0400);      // min normal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.f, -24)), 0x0001);      // min subnormal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.f, -25)), 0x0000);      // tie -> even (0)
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.5f, -25)), 0x0001);     // above tie
  EXPECT_EQ(fp32_to_fp16(std::ldexp(3.f, -25)), 0x0002);      // 1.5 ulp tie -> even (2)
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1023.f, -24)), 0x03FF);   // max subnormal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(2047.f, -25)), 0x0400);   // rounds up into normal
  EXPECT_EQ(fp32_to_fp16(1.f + std::ldexp(1.f, -11)), 0x3C00);       // tie -> even
  EXPECT_EQ(fp32_to_fp16(1.f + 3 * std::ldexp(1.f, -11)), 0x3C02);   // tie -> even (up)
  EXPECT_EQ(fp32_to_fp16(1.f + std::ldexp(1.f, -11) + std::ldexp(1.f, -20)), 0x3C01);
  EXPECT_EQ(fp32_to_fp16(1e-30f), 0x0000);
  EXPECT_EQ(fp32_to_fp16(bits_f(0x00000001)), 0x0000);        // f32 subnormal
  const uint16_t hn = fp32_to_fp16(NAN);
  EXPECT_EQ(hn & 0x7C00, 0x7C00);
  EXPECT_NE(hn & 0x03FF, 0);
  EXPECT_EQ(fp16_to_fp32(0x0001), std::ldexp(1.f, -24));
  EXPECT_EQ(fp16_to_fp32(0x03FF), std::ldexp(1023.f, -24));
  EXPECT_EQ(fp16_to_fp32(0x3555), 0.333251953125f);
  EXPECT_TRUE(std::isinf(fp16_to_fp32(0x7C00)));
  EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7E00)));
  EXPECT_TRUE(std::signbit(fp16_to_fp32(0x8000)));
  // every non-NaN half round-trips exactly; every NaN stays NaN
  for (uint32_t h = 0; h < 65536; h++) {
    const float f = fp16_to_fp32((uint16_t)h);
    if (std::isnan(f)) {
      EXPECT_TRUE((h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0);
      EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(f))));
    } else {
      ASSERT_EQ(fp32_to_fp16(f), h) << h;
    }
  }
  // values between two halves go to the nearer one (checked against the neighbours)
  std::mt19937 rng(5);
  for (int i = 0; i < 20000; i++) {
    const float f = bits_f(rng() & 0x477FFFFFu);  // |f| < 65536
    if (std::fabs(f) >= 65520.f) continue;        // rounds to inf (tested above)
    const uint16_t h = fp32_to_fp16(f);
    const double e = std::fabs((double)fp16_to_fp32(h) - f);
    if ((h & 0x7FFF) < 0x7BFF) {
      EXPECT_LE(e, std::fabs((double)fp16_to_fp32(h + 1) - f));
    }
    if ((h & 0x7FFF) > 0) {
      EXPECT_LE(e, std::fabs((double)fp16_to_fp32(h - 1) - f));
    }
  }
}

TEST(KernelsQuant, Bf16Conversion) {
  EXPECT_EQ(fp32_to_bf16(1.f), 0x3F80);
  EXPECT_EQ(fp32_to_bf16(-1.f), 0xBF80);
  EXPECT_EQ(fp32_to_bf16(bits_f(0x3F808000u)), 0x3F80);  // tie -> even
  EXPECT_EQ(fp32_to_bf16(bits_f(0x3F818000u)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(fp32_to_bf16(bits_f(0x3F808001u)), 0x3F81);
  EXPECT_EQ(fp32_to_bf16(bits_f(0x7F7FFFFFu)), 0x7F80);  // FLT_MAX rounds to inf
  EXPECT_EQ(fp32_to_bf16(INFINITY), 0x7F80);
  EXPECT_EQ(fp32_to_bf16(bits_f(0x00000001u)), 0x0000);  // subnormal rounds to 0
  EXPECT_EQ(fp32_to_bf16(bits_f(0x00018000u)), 0x0002);  // subnormal tie -> even
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(NAN))));
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(bits_f(0x7F800001u)))));  // not inf
  for (uint32_t h = 0; h < 65536; h++) {
    const float f = bf16_to_fp32((uint16_t)h);
    EXPECT_EQ(f_bits(f), h << 16);
    if (!std::isnan(f)) {
      ASSERT_EQ(fp32_to_bf16(f), h);
    }
  }
}

TEST(KernelsQuant, DequantQ4_0Q8_0ByHand) {
  block_q4_0 b4;
  std::memset(&b4, 0, sizeof b4);
  b4.d = 0x3800;  // 0.5
  b4.qs[0] = 0x1F;  // element 0: q=15 -> (15-8)*0.5 = 3.5; element 16: q=1 -> -3.5
  b4.qs[5] = 0x80;  // element 5: 0 -> -4; element 21: 8 -> 0
  float y[32];
  dequantize_row(DType::Q4_0, &b4, y, 32);
  EXPECT_EQ(y[0], 3.5f);
  EXPECT_EQ(y[16], -3.5f);
  EXPECT_EQ(y[5], -4.f);
  EXPECT_EQ(y[21], 0.f);
  EXPECT_EQ(y[1], -4.f);  // nibble 0

  block_q8_0 b8[2];
  std::memset(b8, 0, sizeof b8);
  b8[0].d = 0x3C00;  // 1
  b8[1].d = 0xC400;  // -4
  b8[0].qs[3] = -128;
  b8[1].qs[31] = 127;
  float z[64];
  dequantize_row(DType::Q8_0, b8, z, 64);
  EXPECT_EQ(z[3], -128.f);
  EXPECT_EQ(z[32 + 31], -508.f);
  EXPECT_EQ(z[32], -0.f);
}

// Q4_K/Q5_K scale bytes for: sub-block 0 (sc 3, m 2), sub-block 5 (sc 37, m 49), rest 0.
//   j<4: sc = s[j]&63, m = s[j+4]&63
//   j>=4: sc = (s[j+4]&15) | (s[j-4]>>6)<<4 ; m = (s[j+4]>>4) | (s[j]>>6)<<4
//   37 = 0b10'0101 -> s[9] low nibble 5, s[1] top bits 2; 49 = 0b11'0001 -> s[9] high
//   nibble 1, s[5] top bits 3.
static void hand_k_scales(uint8_t* s) {
  std::memset(s, 0, 12);
  s[0] = 3;
  s[4] = 2;
  s[9] = 0x15;
  s[1] = 0x80;
  s[5] = 0xC0;
}

TEST(KernelsQuant, DequantQ4_KByHand) {
  block_q4_K b;
  std::memset(&b, 0, sizeof b);
  b.d = 0x3C00;     // 1.0
  b.dmin = 0x3800;  // 0.5
  hand_k_scales(b.scales);
  b.qs[0] = 0x07;   // element 0 (sub-block 0): 1*3*7 - 0.5*2 = 20; element 32: sub-block 1 = 0
  b.qs[67] = 0xA0;  // element 128+32+3 = 163 (sub-block 5, high nibble 10): 37*10 - 24.5
  std::vector<float> y(256);
  dequantize_row(DType::Q4_K, &b, y.data(), 256);
  EXPECT_EQ(y[0], 20.f);
  EXPECT_EQ(y[1], -1.f);     // q=0 in sub-block 0: -dmin*m = -1
  EXPECT_EQ(y[32], 0.f);
  EXPECT_EQ(y[163], 345.5f);
  EXPECT_EQ(y[160], -24.5f);  // q=0 in sub-block 5
  EXPECT_EQ(y[131], 0.f);     // sub-block 4: sc 0, m 0
}

TEST(KernelsQuant, DequantQ5_KByHand) {
  block_q5_K b;
  std::memset(&b, 0, sizeof b);
  b.d = 0x3C00;
  b.dmin = 0x3800;
  hand_k_scales(b.scales);
  b.qs[0] = 0x07;
  b.qh[0] = 0x01;   // element 0 gets the fifth bit (bit 0 = sub-block 0): q = 23
  b.qs[67] = 0xA0;
  b.qh[3] = 0x20;   // element 163: sub-block 5 -> bit 5: q = 26
  std::vector<float> y(256);
  dequantize_row(DType::Q5_K, &b, y.data(), 256);
  EXPECT_EQ(y[0], 3.f * 23 - 1.f);
  EXPECT_EQ(y[163], 37.f * 26 - 24.5f);
  EXPECT_EQ(y[3], -1.f);   // qh[3] bit 5 does not leak into sub-block 0
  EXPECT_EQ(y[35], 0.f);   // nor into sub-block 1 (sc 0, m 0)
}

TEST(KernelsQuant, DequantQ6_KByHand) {
  block_q6_K b;
  std::memset(&b, 0, sizeof b);
  b.d = 0x3400;  // 0.25
  b.scales[0] = -3;
  b.scales[2] = 7;
  b.scales[4] = 2;
  b.scales[9] = -128;
  b.ql[1] = 0xF5;  // element 1: low 5; element 65: high 15
  b.qh[1] = 0x8D;  // bits 0-1 = 1 (elem 1), 2-3 = 3 (elem 33), 4-5 = 0 (elem 65), 6-7 = 2 (elem 97)
  b.ql[81] = 0x0E;  // second half, l = 17 (sub-block 9): low 14
  b.qh[49] = 0x03;  //   bits 0-1 = 3 -> q = 62
  std::vector<float> y(256);
  dequantize_row(DType::Q6_K, &b, y.data(), 256);
  EXPECT_EQ(y[1], 0.25f * -3 * (21 - 32));    // 8.25
  EXPECT_EQ(y[33], 0.25f * 7 * (48 - 32));    // 28
  EXPECT_EQ(y[65], 0.25f * 2 * (15 - 32));    // -8.5
  EXPECT_EQ(y[97], 0.f);                      // q = 32, scale 0 anyway
  EXPECT_EQ(y[128 + 17], 0.25f * -128 * 30);  // -960
  EXPECT_EQ(y[0], 0.25f * -3 * -32);          // q = 0 -> -32
}

TEST(KernelsQuant, DequantQ8_KAndFloats) {
  block_q8_K b;
  std::memset(&b, 0, sizeof b);
  b.d = 0.5f;
  b.qs[7] = -128;
  b.qs[255] = 127;
  std::vector<float> y(256);
  dequantize_row(DType::Q8_K, &b, y.data(), 256);
  EXPECT_EQ(y[7], -64.f);
  EXPECT_EQ(y[255], 63.5f);
  uint16_t h[3] = {0x3C00, 0xC000, 0x7BFF};
  float f[3];
  dequantize_row(DType::F16, h, f, 3);
  EXPECT_EQ(f[0], 1.f);
  EXPECT_EQ(f[1], -2.f);
  EXPECT_EQ(f[2], 65504.f);
  uint16_t bf[2] = {0x3F80, 0x4049};
  dequantize_row(DType::BF16, bf, f, 2);
  EXPECT_EQ(f[0], 1.f);
  EXPECT_EQ(f[1], bits_f(0x40490000u));
}

// Relative RMS error of quantize -> dequantize on Gaussian data, per type of the table.
// Bounds (the table's max_rel_rms, shared with the selftest) are 1.3-2x what these
// schemes achieve (rms of a uniform error of half a step is step/sqrt(12); 4-bit ~0.1,
// 5-bit ~0.05, 6-bit ~0.025, 8-bit ~0.006 of sigma).
TEST(KernelsQuant, QuantDequantErrorBounds) {
  const int64_t n = 4096;
  // (Scales well inside fp16's normal range: far below it the fp16 super-scales of the
  // K-quants go subnormal and lose precision, in ggml's format as here.)
  for (int scale_exp : {-7, 0, 10}) {
    std::vector<float> x = gauss(n, 17 + scale_exp, std::ldexp(1.f, scale_exp));
    double s2 = 0;
    for (float v : x) s2 += (double)v * v;
    const double rms = std::sqrt(s2 / n);
    for (const TypeTraits& b : all_types()) {
      std::vector<uint8_t> q(row_bytes(b.type, n));
      std::vector<float> y(n);
      quantize_row(b.type, x.data(), q.data(), n);
      dequantize_row(b.type, q.data(), y.data(), n);
      double e2 = 0;
      for (int64_t i = 0; i < n; i++) e2 += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
      const double rel = std::sqrt(e2 / n) / rms;
      EXPECT_LE(rel, b.max_rel_rms) << dtype_name(b.type) << " scale 2^" << scale_exp;
      if (b.type != DType::F32) {
        EXPECT_GT(rel, 0.0) << dtype_name(b.type);  // it did quantize
      }
    }
  }
}

// Q8_0/Q8_K are the activation formats: per-element error at most half a step.
TEST(KernelsQuant, ActivationFormatsHalfStep) {
  std::vector<float> x = gauss(1024, 3, 2.f);
  x[5] = 40.f;  // an outlier sets its block's scale
  {
    std::vector<block_q8_0> q(1024 / 32);
    std::vector<float> y(1024);
    quantize_row(DType::Q8_0, x.data(), q.data(), 1024);
    dequantize_row(DType::Q8_0, q.data(), y.data(), 1024);
    for (int i = 0; i < 1024; i++) {
      const float d = fp16_to_fp32(q[i / 32].d);
      // half a step plus the fp16 rounding of d (rel 2^-11) times |q| <= 127
      EXPECT_LE(std::fabs(y[i] - x[i]), 0.5f * d + 127.f * d * 0x1p-11f + 1e-6f) << i;
    }
  }
  {
    std::vector<block_q8_K> q(1024 / 256);
    std::vector<float> y(1024);
    quantize_row(DType::Q8_K, x.data(), q.data(), 1024);
    dequantize_row(DType::Q8_K, q.data(), y.data(), 1024);
    for (int i = 0; i < 1024; i++) EXPECT_LE(std::fabs(y[i] - x[i]), 0.5001f * std::fabs(q[i / 256].d));
    // the extreme value maps to exactly -127 (ggml's sign convention) and bsums add up
    EXPECT_EQ(q[0].qs[5], -127);
    for (int b = 0; b < 4; b++)
      for (int g = 0; g < 16; g++) {
        int s = 0;
        for (int l = 0; l < 16; l++) s += q[b].qs[16 * g + l];
        EXPECT_EQ(q[b].bsums[g], s);
      }
  }
}

TEST(KernelsQuant, ZeroAndNonFinite) {
  std::vector<float> z(256, 0.f), y(256, 1.f);
  for (const TypeTraits& tt : all_types()) {
    if (!tt.scale_size) continue;  // block types
    const DType t = tt.type;
    std::vector<uint8_t> q(row_bytes(t, 256));
    quantize_row(t, z.data(), q.data(), 256);
    dequantize_row(t, q.data(), y.data(), 256);
    for (float v : y) EXPECT_EQ(v, 0.f) << dtype_name(t);
    std::vector<float> bad = z;
    bad[77] = NAN;
    EXPECT_THROW(quantize_row(t, bad.data(), q.data(), 256), Error) << dtype_name(t);
    bad[77] = INFINITY;
    EXPECT_THROW(quantize_row(t, bad.data(), q.data(), 256), Error) << dtype_name(t);
  }
}

// Activation rounding rules, worked by hand with exactly representable ties.
// Block max magnitude 1.984375 = 127/64, so Q8_K's iscale = -127/(-1.984375) = 64 and
// Q8_0's d = 1.984375/127 = 1/64 exactly.
TEST(KernelsQuant, ActivationRoundingByHand) {
  std::vector<float> x(256, 0.f);
  x[0] = -1.984375f;   // the signed extreme: Q8_K maps it to -127
  x[1] = 5.f / 128;    // * 64 = 2.5   -> Q8_K nearest-even 2, Q8_0 roundf (away) 3
  x[2] = -5.f / 128;   // * 64 = -2.5  -> -2 / -3
  x[3] = 7.f / 128;    // * 64 = 3.5   -> 4 / 4
  x[4] = 0.25f;        // * 64 = 16
  x[17] = 1.f;         // * 64 = 64 (second group of 16)
  block_q8_K k;
  quantize_row(DType::Q8_K, x.data(), &k, 256);
  EXPECT_EQ(k.d, 1.f / 64);
  EXPECT_EQ(k.qs[0], -127);
  EXPECT_EQ(k.qs[1], 2);
  EXPECT_EQ(k.qs[2], -2);
  EXPECT_EQ(k.qs[3], 4);
  EXPECT_EQ(k.qs[4], 16);
  EXPECT_EQ(k.qs[17], 64);
  EXPECT_EQ(k.bsums[0], -127 + 2 - 2 + 4 + 16);
  EXPECT_EQ(k.bsums[1], 64);
  EXPECT_EQ(k.bsums[2], 0);
  // positive extreme: iscale is negative -> the extreme maps to -127 and d < 0
  std::vector<float> y(256, 0.f);
  y[9] = 2.f;
  y[10] = -1.f;
  quantize_row(DType::Q8_K, y.data(), &k, 256);
  EXPECT_EQ(k.qs[9], -127);
  EXPECT_EQ(k.qs[10], 64);  // -1 * -63.5 = 63.5 -> nearest even 64
  EXPECT_EQ(k.d, -2.f / 127);

  block_q8_0 b[8];
  quantize_row(DType::Q8_0, x.data(), b, 256);
  EXPECT_EQ(b[0].d, 0x2400);  // fp16(1/64)
  EXPECT_EQ(b[0].qs[0], -127);
  EXPECT_EQ(b[0].qs[1], 3);
  EXPECT_EQ(b[0].qs[2], -3);
  EXPECT_EQ(b[0].qs[3], 4);
  EXPECT_EQ(b[0].qs[17], 64);
  EXPECT_EQ(b[1].d, 0);  // all-zero block
}

TEST(KernelsQuant, FirstNonFiniteFindsBadScales) {
  std::vector<float> x(512);
  for (int i = 0; i < 512; i++) x[i] = std::sin(0.1f * i);
  for (const TypeTraits& tt : all_types()) {
    const DType t = tt.type;
    std::vector<uint8_t> q(row_bytes(t, 512));
    quantize_row(t, x.data(), q.data(), 512);
    EXPECT_EQ(first_nonfinite(t, q.data(), 512), -1) << dtype_name(t);
  }
  // corrupt the second block's scale of each block type, by hand at the ggml offsets
  std::vector<uint8_t> q(row_bytes(DType::Q4_K, 512));
  quantize_row(DType::Q4_K, x.data(), q.data(), 512);
  q[144 + 2] = 0x00;
  q[144 + 3] = 0x7C;  // dmin = +inf
  EXPECT_EQ(first_nonfinite(DType::Q4_K, q.data(), 512), 256);
  std::vector<uint8_t> q6(row_bytes(DType::Q6_K, 512));
  quantize_row(DType::Q6_K, x.data(), q6.data(), 512);
  q6[210 + 208] = 0x01;
  q6[210 + 209] = 0xFE;  // d = nan (0xFE01)
  EXPECT_EQ(first_nonfinite(DType::Q6_K, q6.data(), 512), 256);
  std::vector<uint8_t> q8(row_bytes(DType::Q8_0, 64));
  quantize_row(DType::Q8_0, x.data(), q8.data(), 64);
  q8[34 + 1] = 0x7C;
  EXPECT_EQ(first_nonfinite(DType::Q8_0, q8.data(), 64), 32);
  std::vector<uint16_t> h(5, 0x3C00);
  h[3] = 0xFC00;
  EXPECT_EQ(first_nonfinite(DType::F16, h.data(), 5), 3);
  float f[3] = {1.f, NAN, 2.f};
  EXPECT_EQ(first_nonfinite(DType::F32, f, 3), 1);
  EXPECT_THROW(first_nonfinite(DType::Q4_K, q.data(), 300), Error);
}

// f16_to_f32_row (F16C natively, the KV cache read) gives half_to_float's bits for every one
// of the 65536 halves (signalling and quiet NaNs with their payloads, infinities,
// subnormals, both zeros), as one long row and as short rows (every length 0..40) from
// every start offset 0..16 — the 16-wide body, its tail, unaligned loads — with the
// element after the row left untouched.
TEST(Fp16, RowConversionMatchesScalarForEveryHalf) {
  std::vector<uint16_t> h(65536);
  for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
  std::vector<float> got(65536 + 1, -3.f);
  f16_to_f32_row(h.data(), got.data(), h.size());
  for (uint32_t i = 0; i < 65536; i++) {
    const float want = half_to_float((uint16_t)i);
    ASSERT_EQ(std::memcmp(&got[i], &want, 4), 0) << "half 0x" << std::hex << i;
  }
  ASSERT_EQ(got[65536], -3.f);
  // rows mixing NaNs (0x7C01 signalling, 0xFE00 quiet), subnormals and normals
  std::vector<uint16_t> mix(64);
  for (size_t i = 0; i < mix.size(); i++) mix[i] = (uint16_t)(i % 7 == 3 ? 0x7C01 : (i % 5 == 1 ? 0xFE00 : i * 977 + 1));
  for (size_t off = 0; off <= 16; off++)
    for (size_t n = 0; n + off <= 56 && n <= 40; n++) {
      std::vector<float> out(n + 1, -3.f);
      f16_to_f32_row(mix.data() + off, out.data(), n);
      for (size_t i = 0; i < n; i++) {
        const float want = half_to_float(mix[off + i]);
        ASSERT_EQ(std::memcmp(&out[i], &want, 4), 0) << "offset " << off << " length " << n << " at " << i;
      }
      ASSERT_EQ(out[n], -3.f) << "wrote past a row of " << n;
    }
}
