// The attention loops' four-lane kernels (infer/attn_simd.h) against their scalar forms, bit
// for bit: exp_fast4 / exp_shifted vs exp_fast (specials included), scores_hd8 vs the
// dot_f32 loop (head sizes 8, 16, 64, 128; key counts not a multiple of 4), weighted_values
// vs the axpy_f32 loop (head sizes 4, 8, 16); sum_rows2 / weighted_values2 vs each row on
// its own.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "infer/attn_simd.h"

using namespace knot::attn_simd;

namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::vector<float> randoms(size_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace

TEST(AttnSimd, ExpOnFourLanesIsTheScalarExpBitForBit) {
  std::vector<float> xs = randoms(4000, 30.f, 1);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (float x : {0.f, -0.f, -104.f, -104.5f, -200.f, 89.f, 89.5f, 300.f, inf, -inf, nan, 1e-30f, -1e-40f, 0.693359375f})
    xs.push_back(x);
  while (xs.size() % 4) xs.push_back(1.f);
  for (size_t i = 0; i < xs.size(); i += 4) {
    v4f v;
    std::memcpy(&v, &xs[i], 16);
    const v4f e = exp_fast4(v);
    for (int l = 0; l < 4; l++) {
      const float want = exp_fast(xs[i + l]);
      if (std::isnan(want)) EXPECT_TRUE(std::isnan(e[l])) << xs[i + l];
      else EXPECT_EQ(bits(e[l]), bits(want)) << "exp_fast4 lane " << l << " at x = " << xs[i + l];
    }
  }
  for (int n : {1, 3, 4, 7, 33}) {  // exp_shifted: the four-lane body and the scalar tail
    std::vector<float> s = randoms(n, 5.f, 2 + n), ref = s;
    exp_shifted(s.data(), n, 1.25f);
    for (int j = 0; j < n; j++) EXPECT_EQ(bits(s[j]), bits(exp_fast(ref[j] - 1.25f))) << "n " << n << " j " << j;
  }
}

TEST(AttnSimd, ScoresFourKeysAtATimeAreTheDotLoopBitForBit) {
  for (int hd : {8, 16, 64, 128})
    for (int n : {1, 3, 4, 5, 17, 64, 403}) {
      const std::vector<float> q = randoms(hd, 1.f, 10 + hd), kf = randoms((size_t)n * hd, 2.f, 20 + hd + n);
      const float scale = 1.f / std::sqrt((float)hd);
      std::vector<float> s(n), ref(n);
      float mx_ref = -INFINITY;
      for (int j = 0; j < n; j++) {
        ref[j] = dot_f32(q.data(), kf.data() + (size_t)j * hd, hd) * scale;
        mx_ref = std::max(mx_ref, ref[j]);
      }
      const float mx = scores_hd8(q.data(), kf.data(), n, hd, scale, s.data());
      for (int j = 0; j < n; j++) ASSERT_EQ(bits(s[j]), bits(ref[j])) << "hd " << hd << " n " << n << " key " << j;
      EXPECT_EQ(bits(mx), bits(mx_ref)) << "hd " << hd << " n " << n;
    }
}

TEST(AttnSimd, WeightedValuesInRegistersAreTheAxpyLoopBitForBit) {
  auto check = [](auto nv, int hd) {
    constexpr int NV = decltype(nv)::value;
    for (int n : {1, 2, 5, 64, 300}) {
      const std::vector<float> s = randoms(n, 1.f, 30 + n), vf = randoms((size_t)n * hd, 1.f, 40 + n + hd);
      const float inv = 1.f / 3.7f;
      std::vector<float> ref(hd, 0.f), oh(hd, -1.f);
      for (int j = 0; j < n; j++) axpy_f32(s[j] * inv, vf.data() + (size_t)j * hd, ref.data(), hd);
      weighted_values<NV>(s.data(), inv, vf.data(), n, hd, oh.data());
      for (int d = 0; d < hd; d++) ASSERT_EQ(bits(oh[d]), bits(ref[d])) << "hd " << hd << " n " << n << " dim " << d;
    }
  };
  check(std::integral_constant<int, 1>{}, 4);
  check(std::integral_constant<int, 2>{}, 8);
  check(std::integral_constant<int, 4>{}, 16);
}

TEST(AttnSimd, WeightedValuesInStripsOf32AreTheAxpyLoopBitForBit) {
  for (int hd : {32, 64, 96, 128})
    for (int n : {1, 3, 64, 257}) {
      const std::vector<float> s = randoms(n, 1.f, 50 + n), vf = randoms((size_t)n * hd, 1.f, 60 + n + hd);
      const float inv = 1.f / 2.9f;
      std::vector<float> ref(hd, 0.f), oh(hd + 1, -1.f);
      for (int j = 0; j < n; j++) axpy_f32(s[j] * inv, vf.data() + (size_t)j * hd, ref.data(), hd);
      weighted_values_cols32(s.data(), inv, vf.data(), n, hd, oh.data());
      for (int d = 0; d < hd; d++) ASSERT_EQ(bits(oh[d]), bits(ref[d])) << "hd " << hd << " n " << n << " dim " << d;
      EXPECT_EQ(oh[hd], -1.f) << "wrote past hd " << hd;
    }
}

// swiglu_fast_row vs its scalar expression through exp_fast, every length 0..13 (the
// four-lane body and its tail) and gate values that overflow exp (-100: g / inf = -0),
// underflow it (+100), zero, NaN and infinities.
TEST(AttnSimd, SwigluRowIsTheScalarExpressionBitForBit) {
  std::vector<float> g0 = randoms(64, 6.f, 70), u = randoms(64, 2.f, 71);
  const float sp[] = {-100.f, 100.f, 0.f, -0.f, std::numeric_limits<float>::quiet_NaN(), INFINITY, -INFINITY, 88.f, -88.f};
  for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++) g0[3 + 5 * i] = sp[i];
  for (size_t n = 0; n <= 13; n++)
    for (size_t off : {0, 1, 18, 40}) {
      std::vector<float> g(g0.begin() + off, g0.begin() + off + n + 1);
      const float sentinel = g[n];
      swiglu_fast_row(g.data(), u.data() + off, n);
      for (size_t i = 0; i < n; i++) {
        const float x = g0[off + i];
        const float want = x / (1.f + exp_fast(-x)) * u[off + i];
        ASSERT_EQ(bits(g[i]), bits(want)) << "n " << n << " offset " << off << " at " << i << " g " << x;
      }
      EXPECT_EQ(bits(g[n]), bits(sentinel));
    }
}

// Two rows at once: each row's sum and weighted values are its one-row form's, bit for bit,
// whichever row is longer (a verify pass's tokens see 1 more key each), and the pair kernels
// do not write past their rows' outputs.
TEST(AttnSimd, TwoRowsAtOnceAreEachRowOnItsOwnBitForBit) {
  const std::pair<int, int> lens[] = {{1, 1}, {1, 2}, {2, 1}, {5, 5}, {64, 67}, {403, 399}, {300, 1}, {1, 300}};
  for (auto [na, nb] : lens) {
    const std::vector<float> a = randoms(na, 1.f, 50 + na), b = randoms(nb, 1.f, 60 + nb);
    float sa = -1, sb = -1, ra = 0, rb = 0;
    sum_rows2(a.data(), na, b.data(), nb, &sa, &sb);
    for (int j = 0; j < na; j++) ra += a[j];
    for (int j = 0; j < nb; j++) rb += b[j];
    EXPECT_EQ(bits(sa), bits(ra)) << "sum of row a, na " << na << " nb " << nb;
    EXPECT_EQ(bits(sb), bits(rb)) << "sum of row b, na " << na << " nb " << nb;
  }
  auto check = [&](auto nv, int hd) {
    constexpr int NV = decltype(nv)::value;
    for (auto [na, nb] : lens) {
      const int n = std::max(na, nb);
      const std::vector<float> a = randoms(na, 1.f, 70 + na), b = randoms(nb, 1.f, 80 + nb);
      const std::vector<float> vf = randoms((size_t)n * hd, 1.f, 90 + n + hd);
      const float inva = 1.f / 3.7f, invb = 1.f / 0.61f;
      std::vector<float> ra(hd), rb(hd), out(3 * hd, -7.f);  // oa, ob, then a guard row
      weighted_values<NV>(a.data(), inva, vf.data(), na, hd, ra.data());
      weighted_values<NV>(b.data(), invb, vf.data(), nb, hd, rb.data());
      weighted_values2<NV>(a.data(), inva, b.data(), invb, vf.data(), na, nb, hd, out.data(), out.data() + hd);
      for (int d = 0; d < hd; d++) {
        ASSERT_EQ(bits(out[d]), bits(ra[d])) << "row a, hd " << hd << " na " << na << " nb " << nb << " dim " << d;
        ASSERT_EQ(bits(out[hd + d]), bits(rb[d])) << "row b, hd " << hd << " na " << na << " nb " << nb << " dim " << d;
        ASSERT_EQ(out[2 * hd + d], -7.f) << "wrote past row b";
      }
    }
  };
  check(std::integral_constant<int, 1>{}, 4);
  check(std::integral_constant<int, 2>{}, 8);
  check(std::integral_constant<int, 4>{}, 16);
}
