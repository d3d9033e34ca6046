// vec_dot / matvec / matmul: hand-computed dots, Reference vs Scalar within the
// activation-quantization bound, Simd vs Scalar bit-exact (quantized types), matmul vs a
// loop of matvec, matmul_rows vs a slice, argument errors, and the full kernel_selftest.
#include <gtest/gtest.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"
#include "kernels/selftest.h"

using namespace knot;

namespace {

// Every weight type of the type-traits table: a new type is tested with no new code here.
std::vector<DType> weight_types() {
  std::vector<DType> v;
  for (const TypeTraits& tt : all_types())
    if (tt.storage) v.push_back(tt.type);
  return v;
}
const std::vector<DType> kWeightTypes = weight_types();
// Block-quantized weight types (the ones with batched kernels and bit-exact SIMD).
std::vector<DType> block_weight_types() {
  std::vector<DType> v;
  for (const TypeTraits& tt : all_types())
    if (tt.storage && tt.scale_size) v.push_back(tt.type);
  return v;
}
const Kernel kKernels[] = {Kernel::Reference, Kernel::Scalar, Kernel::Simd};

bool is_float(DType t) { return type_traits(t).scale_size == 0; }

std::vector<float> gauss(size_t n, uint32_t seed, float sigma = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

std::vector<uint8_t> quant_matrix(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  const size_t rb = row_bytes(t, cols);
  std::vector<uint8_t> W(rb * rows);
  std::vector<float> x = gauss((size_t)(rows * cols), seed, 0.05f);
  for (int64_t r = 0; r < rows; r++) quantize_row(t, x.data() + r * cols, W.data() + rb * r, cols);
  return W;
}

void set_bsums(block_q8_K& b) {
  for (int g = 0; g < 16; g++) {
    int s = 0;
    for (int l = 0; l < 16; l++) s += b.qs[16 * g + l];
    b.bsums[g] = (int16_t)s;
  }
}

bool bit_equal(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

}  // namespace

TEST(KernelsDot, SelftestPasses) {
  for (uint64_t seed : {1ull, 2ull, 0xDEADBEEFull}) {
    std::string report;
    const int failures = kernel_selftest(seed, &report);
    EXPECT_EQ(failures, 0) << report;
    EXPECT_NE(report.find("0 failure(s)"), std::string::npos) << report;
    // with a SIMD path the batched prefill kernels and their checks ran
    for (DType t : block_weight_types())
      if (pick_mm_batch(dot_kernels(Kernel::Simd), t)) {
        EXPECT_NE(report.find(std::string("ok   ") + dtype_name(t) + " batched matmul kernel == scalar dot"),
                  std::string::npos)
            << report;
      }
    if (simd_compiled()) {
      EXPECT_NE(pick_mm_batch(dot_kernels(Kernel::Simd), DType::Q8_0), nullptr);
    }
  }
}

// The selftest must fail on the known trap: a SIMD kernel that sums all lanes of a
// splat (4x the right answer), and on a kernel that drops part of a row.
namespace {
void q4_K_times4(int64_t n, const void* w, const void* const* act, int nt, float* out) {
  kDotGeneric.dot[type_index(DType::Q4_K)](n, w, act, nt, out);
  for (int t = 0; t < nt; t++) out[t] *= 4.f;
}
void f16_drops_tail(int64_t n, const void* w, const void* const* act, int nt, float* out) {
  kDotGeneric.dot[type_index(DType::F16)](n - n % 8, w, act, nt, out);
}
void q6_K_last_token_wrong(int64_t n, const void* w, const void* const* act, int nt, float* out) {
  kDotGeneric.dot[type_index(DType::Q6_K)](n, w, act, nt, out);
  if (nt > 1) {
    const void* first[1] = {act[0]};
    kDotGeneric.dot[type_index(DType::Q6_K)](n, w, first, 1, &out[nt - 1]);  // reuses token 0's activations
  }
}
// int16 activation kernel that drops the low byte of every activation quant (what an
// int8-only path would compute): only the Q16_0 checks can see it.
void q8_0_q16_low_byte_lost(int64_t n, const void* w, const void* const* act, int nt, float* out) {
  std::vector<std::vector<block_q16_0>> tr((size_t)nt, std::vector<block_q16_0>((size_t)(n / 32)));
  const void* p[KMAX_TOK];
  for (int t = 0; t < nt; t++) {
    for (int64_t i = 0; i < n / 32; i++) {
      tr[t][i] = ((const block_q16_0*)act[t])[i];
      for (int j = 0; j < 32; j++) tr[t][i].qs[j] = (int16_t)(tr[t][i].qs[j] & ~0xFF);
    }
    p[t] = tr[t].data();
  }
  kDotGeneric.dot_q16[type_index(DType::Q8_0)](n, w, p, nt, out);
}
}  // namespace

TEST(KernelsDot, SelftestCatchesBrokenSimdKernels) {
  struct Case {
    const char* type;
    DotKernels table;
  } cases[] = {{"Q4_K", kDotGeneric}, {"F16", kDotGeneric}, {"Q6_K", kDotGeneric},
               {"Q8_0 random x Q16_0", kDotGeneric}};
  cases[0].table.dot[type_index(DType::Q4_K)] = q4_K_times4;
  cases[1].table.dot[type_index(DType::F16)] = f16_drops_tail;
  cases[2].table.dot[type_index(DType::Q6_K)] = q6_K_last_token_wrong;
  cases[3].table.dot_q16[type_index(DType::Q8_0)] = q8_0_q16_low_byte_lost;
  for (const Case& c : cases) {
    set_simd_kernels_for_test(&c.table);
    std::string report;
    const int failures = kernel_selftest(1, &report);
    set_simd_kernels_for_test(nullptr);
    EXPECT_GT(failures, 0) << c.type;
    EXPECT_NE(report.find(std::string("FAIL ") + c.type), std::string::npos) << report;
  }
  // and the real table passes again
  EXPECT_EQ(kernel_selftest(1, nullptr), 0);
}

TEST(KernelsDot, SimdIsActiveOnAvx2Machines) {
#if defined(__x86_64__)
  // F16C from CPUID leaf 1 ECX bit 29: clang's __builtin_cpu_supports has no "f16c"
  unsigned a = 0, b = 0, c = 0, d = 0;
  const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c) {
    EXPECT_TRUE(simd_compiled());
  }
#endif
  EXPECT_STREQ(kernel_name(Kernel::Simd), "simd");
}

TEST(KernelsDot, VecDotTypes) {
  EXPECT_EQ(vec_dot_type(DType::Q4_K), DType::Q8_K);
  EXPECT_EQ(vec_dot_type(DType::Q5_K), DType::Q8_K);
  EXPECT_EQ(vec_dot_type(DType::Q6_K), DType::Q8_K);
  EXPECT_EQ(vec_dot_type(DType::Q4_0), DType::Q8_0);
  EXPECT_EQ(vec_dot_type(DType::Q8_0), DType::Q8_0);
  EXPECT_EQ(vec_dot_type(DType::F16), DType::F32);
  EXPECT_EQ(vec_dot_type(DType::BF16), DType::F32);
  EXPECT_THROW(vec_dot_type(DType::Q8_K), Error);
  EXPECT_THROW(vec_dot_type((DType)77), Error);
}

TEST(KernelsDot, ArgumentErrors) {
  std::vector<uint8_t> W(4096);
  std::vector<float> x(512), y(16);
  try {
    matvec(DType::Q4_K, W.data(), 2, 300, x.data(), y.data(), Kernel::Simd);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("300"), std::string::npos) << e.what();
  }
  EXPECT_THROW(matvec(DType::Q8_K, W.data(), 1, 256, x.data(), y.data(), Kernel::Scalar), Error);
  EXPECT_THROW(matvec((DType)3, W.data(), 1, 32, x.data(), y.data(), Kernel::Reference), Error);
  EXPECT_THROW(matmul_rows(DType::F32, W.data(), 3, 2, 4, x.data(), 1, y.data(), Kernel::Scalar), Error);
  EXPECT_THROW(matmul(DType::F32, W.data(), 2, 4, x.data(), -1, y.data(), Kernel::Scalar), Error);
  EXPECT_THROW(vec_dot(DType::Q8_0, 40, W.data(), x.data(), Kernel::Simd), Error);
}

// Hand-computed: y = W x for a 2x3 F32 matrix, all kernels, exact small integers.
TEST(KernelsDot, F32MatvecByHand) {
  const float W[6] = {1, 2, 3, -4, 5, 0.5f};
  const float x[3] = {2, -1, 4};
  for (Kernel k : kKernels) {
    float y[2];
    matvec(DType::F32, W, 2, 3, x, y, k);
    EXPECT_EQ(y[0], 12.f) << kernel_name(k);  // 2 - 2 + 12
    EXPECT_EQ(y[1], -11.f) << kernel_name(k);  // -8 - 5 + 2
  }
}

// Q8_0 x Q8_0 on raw blocks: (sum qw*qa) * dw * da, worked from the integers.
TEST(KernelsDot, Q8_0DotByHand) {
  block_q8_0 w[2], a[2];
  std::memset(w, 0, sizeof w);
  std::memset(a, 0, sizeof a);
  w[0].d = 0x3800;  // 0.5
  a[0].d = 0x4000;  // 2
  w[1].d = 0x3C00;  // 1
  a[1].d = 0xB800;  // -0.5
  for (int j = 0; j < 32; j++) {
    w[0].qs[j] = (int8_t)(j - 16);  // -16..15
    a[0].qs[j] = 3;
    w[1].qs[j] = -128;
    a[1].qs[j] = (int8_t)(j == 5 ? -128 : 0);
  }
  // block 0: sum(j-16)*3 = -16*3 = -48 -> * 0.5*2 = -48; block 1: -128*-128 * -0.5 = -8192
  for (Kernel k : kKernels) EXPECT_EQ(vec_dot(DType::Q8_0, 64, w, a, k), -48.f - 8192.f) << kernel_name(k);
}

// Q4_K block with known dequantized values (see kernels_quant DequantQ4_KByHand),
// dotted with a one-hot-ish Q8_K activation: expected from the ggml formula by hand.
TEST(KernelsDot, Q4_KDotByHand) {
  block_q4_K w;
  std::memset(&w, 0, sizeof w);
  w.d = 0x3C00;
  w.dmin = 0x3800;
  w.scales[0] = 3;
  w.scales[4] = 2;
  w.scales[9] = 0x15;
  w.scales[1] = 0x80;
  w.scales[5] = 0xC0;
  w.qs[0] = 0x07;   // w[0] = 20
  w.qs[67] = 0xA0;  // w[163] = 345.5; w[160] = -24.5; w[1] = -1
  block_q8_K a;
  std::memset(&a, 0, sizeof a);
  a.d = 0.25f;
  a.qs[0] = 4;     // 20 * 1
  a.qs[1] = -8;    // -1 * -2
  a.qs[163] = 2;   // 345.5 * 0.5
  a.qs[160] = 127; // -24.5 * 31.75
  set_bsums(a);
  const float want = 20.f + 2.f + 172.75f - 24.5f * 31.75f;
  for (Kernel k : kKernels) EXPECT_FLOAT_EQ(vec_dot(DType::Q4_K, 256, &w, &a, k), want) << kernel_name(k);
}

TEST(KernelsDot, Q6_KDotByHand) {
  block_q6_K w;
  std::memset(&w, 0, sizeof w);
  w.d = 0x3400;  // 0.25
  for (int j = 0; j < 16; j++) w.scales[j] = 1;
  w.scales[0] = -3;
  w.scales[9] = -128;
  w.ql[1] = 0xF5;
  w.qh[1] = 0x8D;   // w[1] = 0.25*-3*(21-32) = 8.25
  w.ql[81] = 0x0E;
  w.qh[49] = 0x03;  // w[145] = 0.25*-128*30 = -960
  // every other element: q = 0 -> 0.25 * scale * -32
  block_q8_K a;
  std::memset(&a, 0, sizeof a);
  a.d = 2.f;
  a.qs[1] = 3;     // 8.25 * 6
  a.qs[145] = -1;  // -960 * -2
  a.qs[200] = 5;   // sub-block 12 (scale 1), q = 0: 0.25*1*-32 = -8 -> * 10
  set_bsums(a);
  const float want = 8.25f * 6 + 1920.f - 80.f;
  for (Kernel k : kKernels) EXPECT_FLOAT_EQ(vec_dot(DType::Q6_K, 256, &w, &a, k), want) << kernel_name(k);
}

// Reference (f32 activations) vs Scalar (quantized activations): the difference is
// bounded by sum_i |w_i| * |x_i - xq_i| (activation rounding), plus float slack.
TEST(KernelsDot, ReferenceVsScalarWithinQuantizationBound) {
  const int64_t rows = 24, cols = 4096;
  std::vector<float> x = gauss(cols, 77);
  for (DType t : kWeightTypes) {
    std::vector<uint8_t> W = quant_matrix(t, rows, cols, 5);
    std::vector<float> yr(rows), ys(rows);
    matvec(t, W.data(), rows, cols, x.data(), yr.data(), Kernel::Reference);
    matvec(t, W.data(), rows, cols, x.data(), ys.data(), Kernel::Scalar);
    const DType vt = vec_dot_type(t);
    std::vector<uint8_t> qa(row_bytes(vt, cols));
    std::vector<float> xq(cols), wf(cols);
    quantize_row(vt, x.data(), qa.data(), cols);
    dequantize_row(vt, qa.data(), xq.data(), cols);
    for (int64_t r = 0; r < rows; r++) {
      dequantize_row(t, W.data() + row_bytes(t, cols) * r, wf.data(), cols);
      double bound = 0, mag = 0;
      for (int64_t c = 0; c < cols; c++) {
        bound += std::fabs((double)wf[c]) * std::fabs((double)x[c] - xq[c]);
        mag += std::fabs((double)wf[c] * x[c]);
      }
      EXPECT_LE(std::fabs((double)yr[r] - ys[r]), bound + 1e-5 * mag) << dtype_name(t) << " row " << r;
      // and the quantized path really is close (not just "within a loose bound")
      EXPECT_LE(std::fabs((double)yr[r] - ys[r]), 0.02 * mag) << dtype_name(t);
    }
  }
}

TEST(KernelsDot, SimdMatchesScalar) {
  const int64_t rows = 19, cols = 2048;
  std::vector<float> x = gauss(cols, 3, 2.f);
  for (DType t : kWeightTypes) {
    std::vector<uint8_t> W = quant_matrix(t, rows, cols, 9);
    std::vector<float> ys(rows), yv(rows);
    matvec(t, W.data(), rows, cols, x.data(), ys.data(), Kernel::Scalar);
    matvec(t, W.data(), rows, cols, x.data(), yv.data(), Kernel::Simd);
    for (int64_t r = 0; r < rows; r++) {
      if (is_float(t)) {
        EXPECT_NEAR(yv[r], ys[r], 1e-4 * (std::fabs(ys[r]) + 1.f)) << dtype_name(t) << " row " << r;
      } else {
        EXPECT_TRUE(bit_equal(yv[r], ys[r])) << dtype_name(t) << " row " << r << ": " << yv[r] << " vs " << ys[r];
      }
    }
  }
}

TEST(KernelsDot, MatmulEqualsLoopOfMatvecAndRowsSlice) {
  const int64_t rows = 37, ntok = 13;
  for (DType t : kWeightTypes) {
    const int64_t cols = is_float(t) ? 300 : 768;
    std::vector<uint8_t> W = quant_matrix(t, rows, cols, 11);
    std::vector<float> X = gauss((size_t)(ntok * cols), 12);
    for (Kernel k : kKernels) {
      std::vector<float> Y(ntok * rows), y(rows);
      matmul(t, W.data(), rows, cols, X.data(), ntok, Y.data(), k);
      for (int64_t tk = 0; tk < ntok; tk++) {
        matvec(t, W.data(), rows, cols, X.data() + tk * cols, y.data(), k);
        for (int64_t r = 0; r < rows; r++)
          ASSERT_TRUE(bit_equal(Y[tk * rows + r], y[r]))
              << dtype_name(t) << " " << kernel_name(k) << " tok " << tk << " row " << r;
      }
      const int64_t r0 = 5, r1 = 30;
      std::vector<float> Ys(ntok * (r1 - r0));
      matmul_rows(t, W.data(), r0, r1, cols, X.data(), ntok, Ys.data(), k);
      for (int64_t tk = 0; tk < ntok; tk++)
        for (int64_t r = r0; r < r1; r++)
          ASSERT_TRUE(bit_equal(Ys[tk * (r1 - r0) + r - r0], Y[tk * rows + r]))
              << dtype_name(t) << " " << kernel_name(k) << " slice row " << r;
    }
  }
}

// Long prefills are processed in token chunks (scratch bound): results must not depend
// on where the chunk boundaries fall.
TEST(KernelsDot, LongPrefillMatchesMatvec) {
  const int64_t rows = 9, cols = 512, ntok = 133;
  for (DType t : {DType::Q4_K, DType::Q8_0, DType::BF16}) {
    std::vector<uint8_t> W = quant_matrix(t, rows, cols, 21);
    std::vector<float> X = gauss((size_t)(ntok * cols), 22);
    for (Kernel k : {Kernel::Scalar, Kernel::Simd}) {
      std::vector<float> Y(ntok * (rows - 2)), y(rows);
      matmul_rows(t, W.data(), 1, rows - 1, cols, X.data(), ntok, Y.data(), k);
      for (int64_t tk = 0; tk < ntok; tk++) {
        matvec(t, W.data(), rows, cols, X.data() + tk * cols, y.data(), k);
        for (int64_t r = 1; r < rows - 1; r++)
          ASSERT_TRUE(bit_equal(Y[tk * (rows - 2) + r - 1], y[r]))
              << dtype_name(t) << " " << kernel_name(k) << " tok " << tk << " row " << r;
      }
    }
  }
}

// Q4_0/Q8_0 matvec/matmul take int16 (Q16_0) activations: Scalar is within ~1e-4 of
// Reference (f32 activations), far tighter than the Q8_0-activation path vec_dot
// exposes, and the Q16_0 rounding rules hold by hand.
TEST(KernelsDot, Q16ActivationsForQ4_0AndQ8_0) {
  const int64_t rows = 32, cols = 2048;
  std::vector<float> x = gauss(cols, 123, 3.f);
  x[5] = 40.f;  // outlier
  for (DType t : {DType::Q4_0, DType::Q8_0}) {
    EXPECT_EQ(act_format(t), ActFormat::Q16_0);
    std::vector<uint8_t> W = quant_matrix(t, rows, cols, 17);
    std::vector<float> yr(rows), ys(rows), yv(rows);
    matvec(t, W.data(), rows, cols, x.data(), yr.data(), Kernel::Reference);
    matvec(t, W.data(), rows, cols, x.data(), ys.data(), Kernel::Scalar);
    matvec(t, W.data(), rows, cols, x.data(), yv.data(), Kernel::Simd);
    // the old path: Q8_0 activations through vec_dot
    std::vector<uint8_t> q8(row_bytes(DType::Q8_0, cols));
    quantize_row(DType::Q8_0, x.data(), q8.data(), cols);
    double err16 = 0, err8 = 0, mag = 0;
    std::vector<float> wf(cols);
    for (int64_t r = 0; r < rows; r++) {
      const uint8_t* wr = W.data() + row_bytes(t, cols) * r;
      dequantize_row(t, wr, wf.data(), cols);
      double m = 0;
      for (int64_t c = 0; c < cols; c++) m += std::fabs((double)wf[c] * x[c]);
      mag = std::max(mag, m);
      err16 = std::max(err16, std::fabs((double)ys[r] - yr[r]));
      err8 = std::max(err8, std::fabs((double)vec_dot(t, cols, wr, q8.data(), Kernel::Scalar) - yr[r]));
      EXPECT_TRUE(bit_equal(yv[r], ys[r])) << dtype_name(t) << " row " << r;
      EXPECT_LE(std::fabs((double)ys[r] - yr[r]), 2e-5 * m) << dtype_name(t) << " row " << r;
    }
    EXPECT_LT(err16 * 20, err8) << dtype_name(t) << ": int16 activations should be far more precise";
  }
  // rounding by hand: amax 32767 -> d = 1, round half to even, clamp
  float v[32] = {32767.f, -2.5f, 3.5f, 0.49f, -0.5f, 1.5f};
  block_q16_0 b;
  quantize_act_row(ActFormat::Q16_0, v, &b, 32);
  EXPECT_EQ(b.d, 1.f);
  EXPECT_EQ(b.qs[0], 32767);
  EXPECT_EQ(b.qs[1], -2);
  EXPECT_EQ(b.qs[2], 4);
  EXPECT_EQ(b.qs[3], 0);
  EXPECT_EQ(b.qs[4], 0);
  EXPECT_EQ(b.qs[5], 2);
  EXPECT_EQ(b.qs[31], 0);
  EXPECT_EQ(act_row_bytes(ActFormat::Q16_0, 64), 2 * sizeof(block_q16_0));
  EXPECT_THROW(act_row_bytes(ActFormat::Q16_0, 48), Error);
  // non-finite activations are an error naming the index, never a silent NaN or zero
  std::vector<float> bad(64, 1.f);
  bad[40] = NAN;
  std::vector<block_q16_0> qb(2);
  try {
    quantize_act_row(ActFormat::Q16_0, bad.data(), qb.data(), 64);
    ADD_FAILURE() << "NaN activation accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index 40"), std::string::npos) << e.what();
  }
  std::vector<uint8_t> W8 = quant_matrix(DType::Q8_0, 3, 64, 5);
  std::vector<float> y(3);
  for (Kernel k : {Kernel::Scalar, Kernel::Simd})
    EXPECT_THROW(matvec(DType::Q8_0, W8.data(), 3, 64, bad.data(), y.data(), k), Error) << kernel_name(k);
}

// Batched prefill kernels (Simd matmul with >= 2 tokens and rows of whole 256-blocks)
// equal Scalar bit for bit on row counts off the 4/16/32-row tiles, odd token counts, a
// token count crossing the 64-token chunk, and a row slice starting mid-tile.
// Every usable SIMD table's activation quantizers (Q8_K, Q16_0) give the scalar ones' bytes:
// gaussian rows at several scales, exact .5 ties, all-zero and tiny blocks, lone large
// values; and a non-finite value still throws.
TEST(KernelsDot, SimdActivationQuantizersMatchScalarBytes) {
  NamedKernels tables[4];
  const int n = usable_simd_tables(tables);
  const int64_t cols = 1024;
  for (int v = 0; v < n; v++) {
    for (ActFormat f : {ActFormat::Q8_K, ActFormat::Q16_0}) {
      if (!tables[v].table->quant_act[(int)f]) continue;
      const size_t ab = act_row_bytes(f, cols);
      for (int rep = 0; rep < 6; rep++) {
        std::vector<float> x = gauss((size_t)cols, 300 + (uint32_t)rep, rep == 1 ? 1e-3f : (rep == 2 ? 40.f : 1.5f));
        if (rep == 3)
          for (int64_t i = 0; i < cols; i++) x[(size_t)i] = (float)((i % 65) - 32) * 0.5f;  // ties
        if (rep == 4) {
          for (int64_t i = 0; i < 64; i++) x[(size_t)i] = 0.f;         // zero blocks
          for (int64_t i = 64; i < 96; i++) x[(size_t)i] = 1e-35f;     // tiny block
          for (int64_t i = 96; i < 128; i++) x[(size_t)i] = i == 100 ? -1e30f : 1.f;  // lone large
        }
        if (rep == 5)
          for (int64_t i = 0; i < cols; i++) x[(size_t)i] = i % 7 == 0 ? -3.f : 3.f;  // equal magnitudes
        std::vector<uint8_t> qs(ab), qv(ab);
        quantize_act_row(f, x.data(), qs.data(), cols);
        quantize_act_row(*tables[v].table, f, x.data(), qv.data(), cols);
        ASSERT_EQ(0, std::memcmp(qs.data(), qv.data(), ab)) << tables[v].name << " " << act_format_name(f) << " rep " << rep;
      }
      std::vector<float> bad = gauss((size_t)cols, 7, 1.f);
      bad[700] = std::nanf("");
      std::vector<uint8_t> q(ab);
      EXPECT_THROW(quantize_act_row(*tables[v].table, f, bad.data(), q.data(), cols), Error) << tables[v].name;
    }
  }
}

TEST(KernelsDot, BatchedMatmulMatchesScalarOddShapes) {
  const int64_t cols = 512;
  for (DType t : block_weight_types()) {
    std::vector<uint8_t> W = quant_matrix(t, 77, cols, 31);
    for (int64_t ntok : {2, 3, 11, 65}) {
      std::vector<float> X = gauss((size_t)(ntok * cols), 32 + (uint32_t)ntok);
      for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, 1}, {0, 17}, {3, 36}, {5, 37}, {0, 77}, {9, 58}}) {
        const int64_t nr = r1 - r0;
        std::vector<float> Ys(ntok * nr), Yv(ntok * nr);
        matmul_rows(t, W.data(), r0, r1, cols, X.data(), ntok, Ys.data(), Kernel::Scalar);
        matmul_rows(t, W.data(), r0, r1, cols, X.data(), ntok, Yv.data(), Kernel::Simd);
        for (int64_t i = 0; i < ntok * nr; i++)
          ASSERT_TRUE(bit_equal(Ys[i], Yv[i])) << dtype_name(t) << " ntok " << ntok << " rows [" << r0 << ","
                                               << r1 << ") at " << i << ": " << Yv[i] << " vs " << Ys[i];
      }
    }
  }
}

TEST(KernelsDot, BenchHelpersReturnPositiveRates) {
  EXPECT_GT(kernel_bench_matvec(DType::Q4_K, 64, 1024, Kernel::Simd, 0.01), 0.0);
  EXPECT_GT(kernel_bench_dequant_dot(DType::Q6_K, 64, 1024, 0.01), 0.0);
}

// Every SIMD variant this CPU can run (AVX-512 VNNI, AVX-VNNI, AVX2 here; usable_simd_tables),
// not only the one dot_kernels() picks: each forced in turn must pass the selftest and
// give the scalar kernels' outputs bit for bit on every block type (the type-traits
// table), for decode (1 token, the AVX-512 16-row kernels) and prefill token counts,
// row slices starting anywhere and tails of fewer than 16 rows.
TEST(KernelsDot, EveryUsableSimdVariantMatchesScalar) {
  NamedKernels tables[4];
  const int n = usable_simd_tables(tables);
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512vnni")) {
    ASSERT_GE(n, 2);
    EXPECT_STREQ(tables[0].name, "avx512vnni");
    EXPECT_STREQ(simd_kernels_name(), "avx512vnni");  // the best one is the default
  }
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (simd_compiled() && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4))) {  // AVX-VNNI
    bool listed = false;
    for (int v = 0; v < n; v++) listed = listed || std::strcmp(tables[v].name, "avxvnni") == 0;
    EXPECT_TRUE(listed) << "AVX-VNNI CPU but no avxvnni table";
  }
#endif
  const int64_t cols = 1024;
  for (int v = 0; v < n; v++) {
    set_simd_kernels_for_test(tables[v].table);
    std::string report;
    EXPECT_EQ(kernel_selftest(7, &report), 0) << tables[v].name << "\n" << report;
    for (DType t : block_weight_types()) {
      std::vector<uint8_t> W = quant_matrix(t, 41, cols, 77);
      for (int64_t ntok : {1, 2, 5, 64}) {
        std::vector<float> X = gauss((size_t)(ntok * cols), 90 + (uint32_t)ntok, 1.5f);
        for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, 41}, {0, 1}, {3, 20}, {7, 40}}) {
          const int64_t nr = r1 - r0;
          std::vector<float> Ys(ntok * nr), Yv(ntok * nr);
          matmul_rows(t, W.data(), r0, r1, cols, X.data(), ntok, Ys.data(), Kernel::Scalar);
          matmul_rows(t, W.data(), r0, r1, cols, X.data(), ntok, Yv.data(), Kernel::Simd);
          for (int64_t i = 0; i < ntok * nr; i++)
            ASSERT_TRUE(bit_equal(Ys[i], Yv[i])) << tables[v].name << " " << dtype_name(t) << " ntok " << ntok
                                                 << " rows [" << r0 << "," << r1 << ") at " << i << ": " << Yv[i]
                                                 << " vs " << Ys[i];
        }
      }
    }
    set_simd_kernels_for_test(nullptr);
  }
}

namespace {

// quant_matrix's rows rpad bytes apart (the gaps filled with 0xA5: a kernel that reads
// them changes its result).
std::vector<uint8_t> padded_quant_matrix(DType t, int64_t rows, int64_t cols, uint32_t seed, size_t rpad) {
  const size_t rb = row_bytes(t, cols);
  const std::vector<uint8_t> Wq = quant_matrix(t, rows, cols, seed);
  std::vector<uint8_t> W(rpad * (size_t)rows, 0xA5);
  for (int64_t r = 0; r < rows; r++) std::memcpy(W.data() + r * rpad, Wq.data() + r * rb, rb);
  return W;
}

// A SIMD table's batched kernel (mm) and, for one token, its decode mat-vec (mv) on the
// first nrows rows of W (rows rpad bytes apart) and nt activation rows of A (apad apart),
// for every nrows x nt given: each output equals
// the scalar dot's bit for bit, and the cells of a wider output row (ldy = nrows + 5) past
// nrows stay untouched. Returns the outputs checked (0 if the table has neither kernel).
int expect_tiles_match_scalar(const NamedKernels& tab, DType t, dot_fn scalar, int64_t cols, const std::vector<uint8_t>& W,
                              size_t rpad, const std::vector<uint8_t>& A, size_t apad, std::initializer_list<int64_t> row_counts,
                              std::initializer_list<int64_t> token_counts) {
  const mm_fn mm = pick_mm_batch(*tab.table, t), mv = pick_mv(*tab.table, t);
  if (!mm && !mv) return 0;
  int checked = 0;
  for (int64_t nrows : row_counts)
    for (int64_t nt : token_counts)
      for (const mm_fn f : {mm, mv}) {
        if (!f || (f == mm && nt < tab.table->mm_min_tokens) || (f == mv && nt != 1)) continue;
        const char* slot = f == mm ? "mm" : "mv";
        const int64_t ldy = nrows + 5;
        std::vector<float> Y((size_t)(ldy * nt), -7.f);
        f(cols, W.data(), rpad, nrows, A.data(), apad, nt, Y.data(), ldy);
        for (int64_t k = 0; k < nt; k++)
          for (int64_t r = 0; r < ldy; r++) {
            const float got = Y[(size_t)(k * ldy + r)];
            if (r >= nrows) {
              EXPECT_EQ(got, -7.f) << tab.name << " " << slot << " wrote past row " << nrows;
              if (got != -7.f) return checked;
              continue;
            }
            const void* a[1] = {A.data() + k * apad};
            float want = 0.f;
            scalar(cols, W.data() + r * rpad, a, 1, &want);
            EXPECT_TRUE(bit_equal(got, want)) << tab.name << " " << slot << " " << dtype_name(t) << " rows " << nrows << " tokens " << nt
                                              << " at (" << k << "," << r << "): " << got << " vs " << want;
            if (!bit_equal(got, want)) return checked;
            checked++;
          }
      }
  return checked;
}

}  // namespace

// Each usable table's Q4_0/Q8_0 batched kernel (mm[], the 8-row x QT-token tiles on AVX2 /
// AVX-VNNI, 16-row on AVX-512) called directly on Q16_0 activation rows equals the scalar
// Q16_0 dot of each (row, token) bit for bit: every token tail of the tile (1..9 tokens,
// 17), row counts off the 8/16-row panel (1, 7, 9, 23), rows and activation rows with
// padding between them, outputs into a wider ldy whose other cells stay untouched, and
// weight blocks with large scales and extreme quants (-128/127 in Q8_0, full int16 range
// activations).
TEST(KernelsDot, Q0PrefillTilesMatchScalarDotOnRaggedShapes) {
  NamedKernels tables[4];
  const int nv = usable_simd_tables(tables);
  const int64_t cols = 768;  // 24 blocks of 32, 3 of 256
  for (DType t : {DType::Q8_0, DType::Q4_0}) {
    const dot_fn scalar = pick_mm_dot(kDotGeneric, t);
    ASSERT_NE(scalar, nullptr);
    const int64_t max_rows = 23;
    const size_t rpad = row_bytes(t, cols) + 36;  // rows not packed back to back
    std::vector<uint8_t> W = padded_quant_matrix(t, max_rows, cols, 11, rpad);
    if (t == DType::Q8_0) {  // extreme quants in row 2: -128 and 127 alternate
      block_q8_0* b = (block_q8_0*)(W.data() + 2 * rpad);
      for (int j = 0; j < QK8_0; j++) b[1].qs[j] = (int8_t)(j % 2 ? 127 : -128);
    }
    const int64_t max_tok = 17;
    const size_t ab = act_row_bytes(ActFormat::Q16_0, cols), apad = ab + 12;
    std::vector<uint8_t> A(apad * max_tok);
    for (int64_t k = 0; k < max_tok; k++) {
      std::vector<float> x = gauss((size_t)cols, 500 + (uint32_t)k, k == 3 ? 50.f : 1.f);
      if (k == 4)
        for (int64_t i = 0; i < 32; i++) x[(size_t)i] = i % 2 ? 1.f : -1.f;  // +-32767 quants
      quantize_act_row(ActFormat::Q16_0, x.data(), A.data() + k * apad, cols);
    }
    for (int v = 0; v < nv; v++)
      expect_tiles_match_scalar(tables[v], t, scalar, cols, W, rpad, A, apad, {1, 7, 9, 23}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 17});
  }
}

// Each usable table's Q4_K/Q6_K batched kernel (mm[]: on AVX-512 the 16-row decode
// mat-vec for one token, 16-row x 8-token tiles for more; AVX2 / AVX-VNNI 8-row tiles, and
// for one token the 8-row decode mat-vec) and decode slot (mv[], AVX2's 8-row mat-vec)
// called directly on Q8_K activation rows equals the scalar dot of each (row, token) bit
// for bit: row counts off the 8- and 16-row panels (1, 7, 8, 9, 15, 16, 17, 33: tails repeat the last
// row and must not be stored), token tails, rows and activation rows with padding between
// them, a wider ldy whose other cells stay untouched, and extreme blocks: Q4_K with every
// scale and min 63 and every quant 15, Q6_K with scales -128 / 127 and quants 0 / 63,
// activations at +-127.
TEST(KernelsDot, KQuantTilesMatchScalarDotOnRaggedShapes) {
  NamedKernels tables[4];
  const int nv = usable_simd_tables(tables);
  const int64_t cols = 768;  // 3 blocks of 256
  for (DType t : {DType::Q4_K, DType::Q6_K}) {
    const dot_fn scalar = pick_mm_dot(kDotGeneric, t);
    ASSERT_NE(scalar, nullptr);
    const int64_t max_rows = 33;
    const size_t rpad = row_bytes(t, cols) + 20;  // rows not packed back to back
    std::vector<uint8_t> W = padded_quant_matrix(t, max_rows, cols, 13, rpad);
    if (t == DType::Q4_K) {  // row 2, block 1: all scales / mins 63, all quants 15
      block_q4_K* b = (block_q4_K*)(W.data() + 2 * rpad) + 1;
      std::memset(b->scales, 0xFF, sizeof b->scales);
      std::memset(b->qs, 0xFF, sizeof b->qs);
      block_q4_K* c = (block_q4_K*)(W.data() + 17 * rpad);  // row 17, block 0: distinct mins, zero scales
      for (int j = 0; j < 12; j++) c->scales[j] = (uint8_t)(j < 4 ? 0xC0 | j : (j < 8 ? 0x40 + 5 * j : 0xF0 | j));
    } else {  // row 2, block 1: scales -128 / 127 alternating, quants 63 then 0
      block_q6_K* b = (block_q6_K*)(W.data() + 2 * rpad) + 1;
      for (int j = 0; j < 16; j++) b->scales[j] = (int8_t)(j % 2 ? 127 : -128);
      std::memset(b->ql, 0xFF, 64);
      std::memset(b->ql + 64, 0x00, 64);
      std::memset(b->qh, 0xFF, 32);
      std::memset(b->qh + 32, 0x00, 32);
    }
    const int64_t max_tok = 17;
    const size_t ab = act_row_bytes(ActFormat::Q8_K, cols), apad = ab + 12;
    std::vector<uint8_t> A(apad * max_tok);
    for (int64_t k = 0; k < max_tok; k++) {
      std::vector<float> x = gauss((size_t)cols, 700 + (uint32_t)k, k == 3 ? 50.f : 1.f);
      if (k == 0 || k == 4)
        for (int64_t i = 256; i < 512; i++) x[(size_t)i] = i % 3 ? 1.f : -1.f;  // +-127 quants in block 1
      quantize_act_row(ActFormat::Q8_K, x.data(), A.data() + k * apad, cols);
    }
    int checked = 0;
    for (int v = 0; v < nv; v++)
      checked += expect_tiles_match_scalar(tables[v], t, scalar, cols, W, rpad, A, apad, {1, 7, 8, 9, 15, 16, 17, 33}, {1, 2, 3, 8, 9, 17});
    if (nv > 0) {
      EXPECT_GT(checked, 0) << dtype_name(t);
    }
  }
}
