// selftest.cpp — see selftest.h. Deterministic (splitmix64), no stdio, no exceptions
// escape kernel_selftest (a throw counts as a failure with its message).
#include "kernels/selftest.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/kernels_internal.h"

namespace knot {

namespace {

struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float uniform() { return (float)((next() >> 40) * (1.0 / 16777216.0)); }  // [0,1)
  float sym() { return 2.f * uniform() - 1.f; }                             // [-1,1)
  float gauss() {  // sum of uniforms: cheap, bounded, bell-shaped
    float s = 0;
    for (int i = 0; i < 4; i++) s += sym();
    return s * 0.866f;
  }
  int range(int n) { return (int)(next() % (uint64_t)n); }
};

// Float types (F32/F16/BF16): elementwise, no block scales.
bool is_float_type(DType t) { return type_traits(t).scale_size == 0; }

// Sets every block scale (d, dmin: the traits' scale offsets) of a row of block type t.
template <typename F>
void set_block_scales(DType t, int64_t n, uint8_t* dst, F scale) {
  const TypeTraits& tt = type_traits(t);
  for (int64_t i = 0; i < n / tt.block_elems; i++)
    for (int off : tt.scale_off)
      if (off >= 0) {
        uint8_t* p = dst + (size_t)i * tt.block_bytes + off;
        if (tt.scale_size == 2) {
          const fp16_t h = scale();
          std::memcpy(p, &h, 2);
        } else {
          const float f = half_to_float(scale());
          std::memcpy(p, &f, 4);
        }
      }
}

struct Ctx {
  int failures = 0;
  int fail_lines = 0;
  std::string* report;
  void fail(const std::string& what) {
    failures++;
    if (report && fail_lines++ < 40) *report += "FAIL " + what + "\n";
  }
  void ok(const std::string& what) {
    if (report) *report += "ok   " + what + "\n";
  }
};

// No stdio in this file (it runs in the wasm module): scientific notation by hand,
// 7 significant digits.
std::string fmt(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return "0";
  std::string s = v < 0 ? "-" : "";
  v = std::fabs(v);
  int e = (int)std::floor(std::log10(v));
  v /= std::pow(10.0, e);
  if (v >= 10) { v /= 10; e++; }
  if (v < 1) { v *= 10; e--; }
  long long m = std::llround(v * 1e6);
  if (m >= 10000000) { m /= 10; e++; }
  std::string digits = std::to_string(m);
  s += digits.substr(0, 1) + "." + digits.substr(1) + "e" + std::to_string(e);
  return s;
}

// Weight-row generators ------------------------------------------------------------------

// Realistic: quantize Gaussian values of magnitude `scale`.
void gen_quantized(DType t, Rng& r, int64_t n, float scale, uint8_t* dst) {
  std::vector<float> x((size_t)n);
  for (auto& v : x) v = r.gauss() * scale;
  quantize_row(t, x.data(), dst, n);
}

fp16_t rand_fp16_finite(Rng& r) {
  for (;;) {
    const fp16_t h = (fp16_t)r.next();
    if ((h & 0x7C00) != 0x7C00) return h;
  }
}

// Raw random bit patterns for every quant field; fp16 scales finite (any magnitude).
void gen_raw(DType t, Rng& r, int64_t n, uint8_t* dst) {
  const size_t bytes = row_bytes(t, n);
  for (size_t i = 0; i < bytes; i++) dst[i] = (uint8_t)r.next();
  switch (t) {
    case DType::F32: {  // finite floats spanning many exponents
      float* f = (float*)dst;
      for (int64_t i = 0; i < n; i++) f[i] = r.sym() * std::ldexp(1.f, r.range(40) - 20);
      break;
    }
    case DType::F16: {
      uint16_t* h = (uint16_t*)dst;
      for (int64_t i = 0; i < n; i++) h[i] = rand_fp16_finite(r);
      break;
    }
    case DType::BF16: {
      uint16_t* h = (uint16_t*)dst;
      for (int64_t i = 0; i < n; i++) h[i] = fp32_to_bf16(r.sym() * std::ldexp(1.f, r.range(40) - 20));
      break;
    }
    default: set_block_scales(t, n, dst, [&] { return rand_fp16_finite(r); }); break;
  }
}

// Adversarial: every quant byte = pattern (0x00 min, 0xFF max, 0xF0/0x0F/0xAA/0x55 mixes),
// scales d = dval (extreme fp16 incl. 65504, subnormal 0x0001, zero, negative).
void gen_pattern(DType t, int64_t n, uint8_t pattern, fp16_t dval, uint8_t* dst) {
  const size_t bytes = row_bytes(t, n);
  std::memset(dst, pattern, bytes);
  switch (t) {
    case DType::F32: {
      float* f = (float*)dst;
      for (int64_t i = 0; i < n; i++) f[i] = half_to_float(dval) * ((i & 1) ? -1.f : 1.f);
      break;
    }
    case DType::F16:
    case DType::BF16: {
      uint16_t* h = (uint16_t*)dst;
      for (int64_t i = 0; i < n; i++)
        h[i] = t == DType::F16 ? (uint16_t)(dval ^ ((i & 1) << 15)) : fp32_to_bf16(half_to_float(dval));
      break;
    }
    default: set_block_scales(t, n, dst, [&] { return dval; }); break;
  }
}

// Activation rows in format f: raw extreme blocks (mode 0: max quants, big scale; 1: min
// quants, tiny scale; 2: random bits).
void gen_act_raw(ActFormat f, int64_t n, int mode, Rng& r, uint8_t* dst) {
  if (f == ActFormat::Q8_K) {
    block_q8_K* b = (block_q8_K*)dst;
    for (int64_t i = 0; i < n / QK_K; i++) {
      b[i].d = mode == 0 ? 1e-3f : (mode == 1 ? 1e3f : r.sym());
      for (int j = 0; j < QK_K; j++)
        b[i].qs[j] = (int8_t)(mode == 0 ? 127 : (mode == 1 ? -128 : (int8_t)r.next()));
      for (int g = 0; g < QK_K / 16; g++) {
        int s = 0;
        for (int l = 0; l < 16; l++) s += b[i].qs[16 * g + l];
        b[i].bsums[g] = (int16_t)s;
      }
    }
  } else if (f == ActFormat::Q8_0) {
    block_q8_0* b = (block_q8_0*)dst;
    for (int64_t i = 0; i < n / QK8_0; i++) {
      b[i].d = mode == 0 ? (fp16_t)0x7BFF : (mode == 1 ? (fp16_t)0x0001 : rand_fp16_finite(r));
      for (int j = 0; j < QK8_0; j++)
        b[i].qs[j] = (int8_t)(mode == 0 ? 127 : (mode == 1 ? -128 : (int8_t)r.next()));
    }
  } else if (f == ActFormat::Q16_0) {
    block_q16_0* b = (block_q16_0*)dst;
    for (int64_t i = 0; i < n / QK8_0; i++) {
      b[i].d = mode == 0 ? 3e4f : (mode == 1 ? 1e-30f : r.sym() * std::ldexp(1.f, r.range(40) - 20));
      for (int j = 0; j < QK8_0; j++)
        b[i].qs[j] = (int16_t)(mode == 0 ? 32767 : (mode == 1 ? -32768 : (int16_t)r.next()));
    }
  } else {
    float* f32 = (float*)dst;
    for (int64_t i = 0; i < n; i++)
      f32[i] = mode == 0 ? 1e4f : (mode == 1 ? -1e-4f : r.sym() * std::ldexp(1.f, r.range(20) - 10));
  }
}

ActFormat vec_dot_format(DType t) {  // the ActFormat of vec_dot_type(t)
  switch (vec_dot_type(t)) {
    case DType::F32: return ActFormat::F32;
    case DType::Q8_0: return ActFormat::Q8_0;
    default: return ActFormat::Q8_K;
  }
}

bool same_float(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return false;
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y || (a == 0.f && b == 0.f);
}

// Float-weight kernels sum in a different order: tolerance relative to sum |w*a|.
double float_abs_dot(DType t, int64_t n, const uint8_t* w, const uint8_t* act) {
  std::vector<float> wf((size_t)n);
  dequantize_row(t, w, wf.data(), n);
  const float* a = (const float*)act;
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += std::fabs((double)wf[i] * a[i]);
  return s;
}

std::string case_name(DType t, const char* what, int64_t n) {
  return std::string(dtype_name(t)) + " " + what + " n=" + std::to_string(n);
}

// Simd vs Scalar on one (w, act) pair; every multi-token width (1..4) of both tables
// must reproduce its own single-token result exactly.
void check_pair(Ctx& c, DType t, int64_t n, const uint8_t* w, const uint8_t* const* acts,
                const char* what, dot_fn fs, dot_fn fv) {
  float s1[KMAX_TOK], v1[KMAX_TOK];
  for (int j = 0; j < KMAX_TOK; j++) {
    const void* one[1] = {acts[j]};
    fs(n, w, one, 1, &s1[j]);
    fv(n, w, one, 1, &v1[j]);
  }
  for (int nt = 2; nt <= KMAX_TOK; nt++) {
    float sN[KMAX_TOK], vN[KMAX_TOK];
    fs(n, w, (const void* const*)acts, nt, sN);
    fv(n, w, (const void* const*)acts, nt, vN);
    for (int j = 0; j < nt; j++) {
      if (!same_float(s1[j], sN[j]))
        c.fail(case_name(t, what, n) + ": scalar 1-token " + fmt(s1[j]) + " != " +
               std::to_string(nt) + "-token " + fmt(sN[j]));
      if (!same_float(v1[j], vN[j]))
        c.fail(case_name(t, what, n) + ": simd 1-token " + fmt(v1[j]) + " != " +
               std::to_string(nt) + "-token " + fmt(vN[j]));
    }
  }
  for (int j = 0; j < KMAX_TOK; j++) {
    if (is_float_type(t)) {
      // both sides carry at most ~n*u*sum|w*a| rounding error (u = 2^-24)
      const double tol = (double)(n + 2) * 1.2e-7 * float_abs_dot(t, n, w, acts[j]) + 1e-30;
      if (!(std::fabs((double)v1[j] - s1[j]) <= tol))
        c.fail(case_name(t, what, n) + ": simd " + fmt(v1[j]) + " vs scalar " + fmt(s1[j]) +
               " (tol " + fmt(tol) + ")");
    } else if (!same_float(v1[j], s1[j])) {
      c.fail(case_name(t, what, n) + ": simd " + fmt(v1[j]) + " != scalar " + fmt(s1[j]));
    }
  }
}

// Simd vs Scalar dot kernels for weights t against activation format f: vec_dot's
// format, and for Q4_0/Q8_0 also the Q16_0 format matvec/matmul use.
void check_vec_dot(Ctx& c, DType t, ActFormat f, uint64_t seed) {
  Rng r{seed ^ (uint64_t)t * 0x1234567ull ^ (uint64_t)f * 0x9E37ull};
  const bool q16 = f == ActFormat::Q16_0;
  const dot_fn fs = q16 ? pick_mm_dot(kDotGeneric, t) : pick_dot(kDotGeneric, t);
  const DotKernels& kv = dot_kernels(Kernel::Simd);
  const dot_fn fv = q16 ? pick_mm_dot(kv, t) : pick_dot(kv, t);
  const std::string fname = q16 ? " x Q16_0" : "";
  const char* what_random = q16 ? "random x Q16_0" : "random";
  const char* what_raw = q16 ? "raw-bits x Q16_0" : "raw-bits";
  const char* what_adv = q16 ? "adversarial x Q16_0" : "adversarial";
  const int be = std::max<int>(type_traits(t).block_elems, f == ActFormat::F32 ? 1 : (f == ActFormat::Q8_K ? QK_K : QK8_0));
  std::vector<int64_t> lens;
  if (be == 1) lens = {1, 3, 7, 8, 15, 16, 17, 31, 33, 100, 256, 1000};
  else lens = {be, 2 * be, 3 * be, 5 * be, 7 * be, 16 * be};
  int cases = 0;
  const int before = c.failures;
  for (int64_t n : lens) {
    std::vector<uint8_t> w(row_bytes(t, n));
    std::vector<std::vector<uint8_t>> a(KMAX_TOK, std::vector<uint8_t>(act_row_bytes(f, n)));
    const uint8_t* ap[KMAX_TOK];
    for (int j = 0; j < KMAX_TOK; j++) ap[j] = a[j].data();
    auto quant_acts = [&](float scale) {
      for (int j = 0; j < KMAX_TOK; j++) {
        std::vector<float> x((size_t)n);
        for (auto& v : x) v = r.gauss() * scale;
        quantize_act_row(f, x.data(), a[j].data(), n);
      }
    };
    // random realistic weights and activations
    for (int rep = 0; rep < 3; rep++) {
      gen_quantized(t, r, n, rep == 0 ? 0.02f : (rep == 1 ? 1.f : 300.f), w.data());
      quant_acts(rep == 2 ? 1e-3f : 3.f);
      check_pair(c, t, n, w.data(), ap, what_random, fs, fv);
      cases++;
    }
    // raw random bits in every field
    for (int rep = 0; rep < 3; rep++) {
      gen_raw(t, r, n, w.data());
      for (int j = 0; j < KMAX_TOK; j++) gen_act_raw(f, n, 2, r, a[j].data());
      check_pair(c, t, n, w.data(), ap, what_raw, fs, fv);
      cases++;
    }
    // adversarial patterns x extreme scales x extreme activations
    const uint8_t pats[] = {0x00, 0xFF, 0xF0, 0x0F, 0xAA, 0x55, 0x80, 0x7F};
    const fp16_t ds[] = {0x7BFF, 0xFBFF, 0x0001, 0x0000, 0x3C00, 0x0400};
    for (uint8_t p : pats)
      for (fp16_t dv : ds) {
        if (is_float_type(t) && p != 0x00) continue;  // float rows ignore the pattern
        gen_pattern(t, n, p, dv, w.data());
        for (int j = 0; j < KMAX_TOK; j++) gen_act_raw(f, n, j % 3, r, a[j].data());
        check_pair(c, t, n, w.data(), ap, what_adv, fs, fv);
        cases++;
      }
  }
  if (c.failures == before)
    c.ok(std::string(dtype_name(t)) + fname + " vec_dot simd==scalar, " + std::to_string(cases) + " cases");
}

// Known-answer: every weight = 1 and every activation = 1 (exactly representable in all
// formats) -> dot = n. Catches lane-sum / splat bugs that Simd==Scalar alone would not
// if both paths shared them.
void check_known_answer(Ctx& c, DType t) {
  const DType vt = vec_dot_type(t);
  const int be = std::max(type_traits(t).block_elems, type_traits(vt).block_elems);
  const int64_t n = be == 1 ? 40 : 3 * be;
  std::vector<uint8_t> w(row_bytes(t, n)), a(row_bytes(vt, n));
  std::vector<float> ones((size_t)n, 1.f);
  const int64_t nb = n / type_traits(t).block_elems;
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16: quantize_row(t, ones.data(), w.data(), n); break;
    case DType::Q4_0:
      for (int64_t i = 0; i < nb; i++) {
        block_q4_0& b = ((block_q4_0*)w.data())[i];
        b.d = 0x3C00;
        std::memset(b.qs, 0x99, sizeof b.qs);  // 9 - 8 = 1
      }
      break;
    case DType::Q8_0:
      for (int64_t i = 0; i < nb; i++) {
        block_q8_0& b = ((block_q8_0*)w.data())[i];
        b.d = 0x3C00;
        std::memset(b.qs, 1, sizeof b.qs);
      }
      break;
    case DType::Q4_K:
    case DType::Q5_K:
      for (int64_t i = 0; i < nb; i++) {
        // sc = 2, m = 1, d = 1, dmin = 1, q = 1 (Q5_K: nibble 1, high bit 0): 2*1 - 1 = 1
        uint8_t* blk = w.data() + (size_t)i * type_traits(t).block_bytes;
        const fp16_t one = 0x3C00;
        std::memcpy(blk, &one, 2);
        std::memcpy(blk + 2, &one, 2);
        uint8_t* s = blk + 4;
        for (int j = 0; j < 4; j++) { s[j] = 2; s[j + 4] = 1; s[j + 8] = 0x12; }
        if (t == DType::Q5_K) {
          std::memset(blk + 16, 0, 32);
          std::memset(blk + 48, 0x11, 128);
        } else {
          std::memset(blk + 16, 0x11, 128);
        }
      }
      break;
    case DType::Q6_K:
      for (int64_t i = 0; i < nb; i++) {
        block_q6_K& b = ((block_q6_K*)w.data())[i];
        b.d = 0x3C00;
        std::memset(b.ql, 0x11, sizeof b.ql);  // low nibbles 1
        std::memset(b.qh, 0xAA, sizeof b.qh);  // every 2-bit field 2 -> q = 33 -> 1
        std::memset(b.scales, 1, sizeof b.scales);
      }
      break;
    default:  // a type without a hand-built block: its reference quantizer's all-ones row
      quantize_row(t, ones.data(), w.data(), n);
      break;
  }
  std::vector<float> wf((size_t)n);
  dequantize_row(t, w.data(), wf.data(), n);
  bool deq_ok = true;
  for (float v : wf) deq_ok = deq_ok && v == 1.f;
  if (!deq_ok) c.fail(case_name(t, "known-answer weights", n) + ": dequantized weights are not all 1");
  bool all_ok = deq_ok;
  // activations: all ones (expect n), then one-hot at several positions (expect 1)
  for (int64_t hot = -1; hot < n; hot += (hot < 0 ? 1 : n / 5 + 1)) {
    for (int64_t i = 0; i < n; i++) {
      const int v = hot < 0 || i == hot ? 1 : 0;
      if (vt == DType::F32) {
        ((float*)a.data())[i] = (float)v;
      } else if (vt == DType::Q8_0) {
        block_q8_0& b = ((block_q8_0*)a.data())[i / QK8_0];
        b.d = 0x3C00;
        b.qs[i % QK8_0] = (int8_t)v;
      } else {
        block_q8_K& b = ((block_q8_K*)a.data())[i / QK_K];
        b.d = 1.f;
        b.qs[i % QK_K] = (int8_t)v;
      }
    }
    if (vt == DType::Q8_K)
      for (int64_t i = 0; i < n / QK_K; i++) {
        block_q8_K& b = ((block_q8_K*)a.data())[i];
        for (int g = 0; g < QK_K / 16; g++) {
          int s = 0;
          for (int l = 0; l < 16; l++) s += b.qs[16 * g + l];
          b.bsums[g] = (int16_t)s;
        }
      }
    const float want = hot < 0 ? (float)n : 1.f;
    for (Kernel k : {Kernel::Reference, Kernel::Scalar, Kernel::Simd}) {
      const float got = vec_dot(t, n, w.data(), a.data(), k);
      if (got != want) {
        c.fail(case_name(t, "known-answer", n) + " " + kernel_name(k) + " hot=" +
               std::to_string(hot) + ": " + fmt(got) + " != " + fmt(want));
        all_ok = false;
      }
    }
    if (act_format(t) == ActFormat::Q16_0) {  // the matvec/matmul kernels of Q4_0/Q8_0
      std::vector<block_q16_0> a16((size_t)(n / QK8_0));
      for (int64_t i = 0; i < n; i++) {
        a16[(size_t)(i / QK8_0)].d = 1.f;
        a16[(size_t)(i / QK8_0)].qs[i % QK8_0] = (int16_t)(hot < 0 || i == hot ? 1 : 0);
      }
      const void* ap[1] = {a16.data()};
      for (Kernel k : {Kernel::Scalar, Kernel::Simd}) {
        float got = NAN;
        pick_mm_dot(dot_kernels(k), t)(n, w.data(), ap, 1, &got);
        if (got != want) {
          c.fail(case_name(t, "known-answer x Q16_0", n) + " " + kernel_name(k) + " hot=" +
                 std::to_string(hot) + ": " + fmt(got) + " != " + fmt(want));
          all_ok = false;
        }
      }
    }
  }
  if (all_ok) c.ok(std::string(dtype_name(t)) + " known-answer dots (all-ones, one-hot) on all kernels");
}

// matvec/matmul/matmul_rows consistency, Reference vs Scalar bound, Simd vs Scalar.
void check_matmul(Ctx& c, DType t, uint64_t seed) {
  Rng r{seed * 31 + (uint64_t)t};
  const DType vt = vec_dot_type(t);
  const int be = std::max(type_traits(t).block_elems, type_traits(vt).block_elems);
  const int before = c.failures;
  const int64_t shapes[][3] = {{5, 3, 1}, {17, 2, 7}, {33, 1, 5}, {4, 5, 4}, {1, 2, 9}};  // rows, blocks, ntok
  for (const auto& sh : shapes) {
    const int64_t rows = sh[0], cols = (be == 1 ? 37 : be) * sh[1], ntok = sh[2];
    const size_t rb = row_bytes(t, cols);
    std::vector<uint8_t> W(rb * rows);
    for (int64_t i = 0; i < rows; i++) gen_quantized(t, r, cols, 0.5f, W.data() + rb * i);
    std::vector<float> X((size_t)(ntok * cols));
    for (auto& v : X) v = r.gauss();
    X[0] = 9.f;  // an outlier: coarse activation scale in its block
    const std::string nm = case_name(t, "matmul", cols) + " rows=" + std::to_string(rows) +
                           " ntok=" + std::to_string(ntok);
    std::vector<float> Y[3];
    const Kernel ks[3] = {Kernel::Reference, Kernel::Scalar, Kernel::Simd};
    for (int ki = 0; ki < 3; ki++) {
      const Kernel k = ks[ki];
      Y[ki].assign((size_t)(ntok * rows), NAN);
      matmul(t, W.data(), rows, cols, X.data(), ntok, Y[ki].data(), k);
      // matmul == loop of matvec
      std::vector<float> y((size_t)rows);
      for (int64_t tk = 0; tk < ntok; tk++) {
        matvec(t, W.data(), rows, cols, X.data() + tk * cols, y.data(), k);
        for (int64_t i = 0; i < rows; i++)
          if (!same_float(y[i], Y[ki][tk * rows + i])) {
            c.fail(nm + " " + kernel_name(k) + ": matmul[" + std::to_string(tk) + "," +
                   std::to_string(i) + "] " + fmt(Y[ki][tk * rows + i]) + " != matvec " + fmt(y[i]));
            break;
          }
      }
      // matmul_rows == slice
      const int64_t r0 = rows / 3, r1 = rows - rows / 4;
      std::vector<float> Ys((size_t)(ntok * (r1 - r0)));
      matmul_rows(t, W.data(), r0, r1, cols, X.data(), ntok, Ys.data(), k);
      for (int64_t tk = 0; tk < ntok; tk++)
        for (int64_t i = r0; i < r1; i++)
          if (!same_float(Ys[tk * (r1 - r0) + i - r0], Y[ki][tk * rows + i])) {
            c.fail(nm + " " + kernel_name(k) + ": matmul_rows slice differs at row " + std::to_string(i));
            tk = ntok;
            break;
          }
    }
    // Scalar vs Reference: bounded by activation quantization error (half a step per
    // element) times |w|, plus float rounding slack.
    const ActFormat af = act_format(t);
    std::vector<float> wf((size_t)cols), xq((size_t)cols);
    std::vector<uint8_t> qa(act_row_bytes(af, cols));
    for (int64_t tk = 0; tk < ntok; tk++) {
      const float* x = X.data() + tk * cols;
      quantize_act_row(af, x, qa.data(), cols);
      dequantize_act_row(af, qa.data(), xq.data(), cols);
      for (int64_t i = 0; i < rows; i++) {
        dequantize_row(t, W.data() + rb * i, wf.data(), cols);
        double bound = 0, mag = 0;
        for (int64_t k = 0; k < cols; k++) {
          bound += std::fabs((double)wf[k]) * std::fabs((double)x[k] - xq[k]);
          mag += std::fabs((double)wf[k] * x[k]);
        }
        bound = bound * 1.001 + 1e-5 * mag + 1e-30;
        const double ref = Y[0][tk * rows + i], sc = Y[1][tk * rows + i], sd = Y[2][tk * rows + i];
        if (!(std::fabs(ref - sc) <= bound))
          c.fail(nm + ": reference " + fmt(ref) + " vs scalar " + fmt(sc) + " beyond bound " + fmt(bound));
        const bool simd_ok = is_float_type(t) ? std::fabs(sd - sc) <= (double)(cols + 2) * 1.2e-7 * mag + 1e-30 : same_float((float)sd, (float)sc);
        if (!simd_ok) c.fail(nm + ": simd " + fmt(sd) + " vs scalar " + fmt(sc));
      }
    }
  }
  if (c.failures == before)
    c.ok(std::string(dtype_name(t)) + " matmul==matvec loop, rows slice, simd==scalar, |ref-scalar|<=bound");
}

// Batched prefill kernels (mm_fn, where the Simd table has one) vs the scalar dot
// kernel on every (row, token): random, raw-bit and adversarial weights and activations,
// row counts that are not multiples of the 4-row / 16-row tiles, odd token counts, and an
// output stride wider than the row count (the gaps must stay untouched).
void check_batched(Ctx& c, DType t, uint64_t seed) {
  const mm_fn mm = pick_mm_batch(dot_kernels(Kernel::Simd), t);
  if (!mm) return;
  Rng r{seed * 77 + (uint64_t)t};
  const ActFormat af = act_format(t);
  const dot_fn ref = pick_mm_dot(kDotGeneric, t);
  const int64_t shapes[][2] = {{1, 2}, {5, 3}, {16, 2}, {17, 5}, {35, 8}, {4, 7}};  // rows, ntok
  const uint8_t pats[] = {0x00, 0xFF, 0xAA, 0x55, 0x80, 0x7F};
  const fp16_t ds[] = {0x7BFF, 0xFBFF, 0x0001, 0x3C00};
  const int before = c.failures;
  int cases = 0;
  for (int64_t n : {256, 768}) {
    const size_t rb = row_bytes(t, n), ab = act_row_bytes(af, n);
    for (int kind = 0; kind < 3; kind++)
      for (const auto& sh : shapes) {
        const int64_t rows = sh[0], nt = sh[1], ldy = rows + 3;
        std::vector<uint8_t> W(rb * (size_t)rows), A(ab * (size_t)nt);
        for (int64_t i = 0; i < rows; i++) {
          uint8_t* w = W.data() + rb * (size_t)i;
          if (kind == 0) gen_quantized(t, r, n, 0.05f, w);
          else if (kind == 1) gen_raw(t, r, n, w);
          else gen_pattern(t, n, pats[(size_t)(i + cases) % 6], ds[(size_t)i % 4], w);
        }
        for (int64_t j = 0; j < nt; j++) {
          uint8_t* a = A.data() + ab * (size_t)j;
          if (kind == 0) {
            std::vector<float> x((size_t)n);
            for (auto& v : x) v = r.gauss() * 2.f;
            quantize_act_row(af, x.data(), a, n);
          } else {
            gen_act_raw(af, n, kind == 1 ? 2 : (int)(j % 3), r, a);
          }
        }
        const float sentinel = 12345.f;
        std::vector<float> Y((size_t)(nt * ldy), sentinel);
        mm(n, W.data(), rb, rows, A.data(), ab, nt, Y.data(), ldy);
        const std::string nm = case_name(t, kind == 0 ? "batched random" : (kind == 1 ? "batched raw-bits" : "batched adversarial"), n) +
                               " rows=" + std::to_string(rows) + " ntok=" + std::to_string(nt);
        bool bad = false;
        for (int64_t j = 0; j < nt && !bad; j++)
          for (int64_t i = 0; i < ldy; i++) {
            float want = sentinel;
            if (i < rows) {
              const void* one[1] = {A.data() + ab * (size_t)j};
              ref(n, W.data() + rb * (size_t)i, one, 1, &want);
            }
            const float got = Y[(size_t)(j * ldy + i)];
            if (!same_float(got, want) && !(std::isnan(got) && std::isnan(want) && i < rows)) {
              c.fail(nm + ": [tok " + std::to_string(j) + ", row " + std::to_string(i) + "] simd " + fmt(got) +
                     " != scalar " + fmt(want));
              bad = true;
              break;
            }
          }
        cases++;
      }
  }
  if (c.failures == before)
    c.ok(std::string(dtype_name(t)) + " batched matmul kernel == scalar dot, " + std::to_string(cases) + " cases");
}

// Multi-row mat-vec kernels (mv_fn, where the Simd table has one) vs the scalar dot on
// every row: random, raw-bit and adversarial weights and activations, row counts around
// the 4-row pass, and an output buffer longer than the row count (the rest untouched).
void check_mv(Ctx& c, DType t, uint64_t seed) {
  const mm_fn mv = pick_mv(dot_kernels(Kernel::Simd), t);
  if (!mv) return;
  Rng r{seed * 91 + (uint64_t)t};
  const ActFormat af = act_format(t);
  const dot_fn ref = pick_mm_dot(kDotGeneric, t);
  const uint8_t pats[] = {0x00, 0xFF, 0xAA, 0x55, 0x80, 0x7F};
  const fp16_t ds[] = {0x7BFF, 0xFBFF, 0x0001, 0x3C00, 0x7C00, 0x0000};
  const int before = c.failures;
  int cases = 0;
  for (int64_t n : {256, 768}) {
    const size_t rb = row_bytes(t, n), ab = act_row_bytes(af, n);
    for (int kind = 0; kind < 3; kind++)
      for (int64_t rows : {1, 3, 4, 5, 8, 13, 36}) {
        std::vector<uint8_t> W(rb * (size_t)rows), A(ab);
        for (int64_t i = 0; i < rows; i++) {
          uint8_t* w = W.data() + rb * (size_t)i;
          if (kind == 0) gen_quantized(t, r, n, 0.05f, w);
          else if (kind == 1) gen_raw(t, r, n, w);
          else gen_pattern(t, n, pats[(size_t)(i + cases) % 6], ds[(size_t)(i + cases) % 6], w);
        }
        if (kind == 0) {
          std::vector<float> x((size_t)n);
          for (auto& v : x) v = r.gauss() * 2.f;
          quantize_act_row(af, x.data(), A.data(), n);
        } else {
          gen_act_raw(af, n, kind == 1 ? 2 : cases % 3, r, A.data());
        }
        const float sentinel = 12345.f;
        std::vector<float> Y((size_t)rows + 3, sentinel);
        mv(n, W.data(), rb, rows, A.data(), ab, 1, Y.data(), rows);
        const std::string nm = case_name(t, kind == 0 ? "mat-vec random" : (kind == 1 ? "mat-vec raw-bits" : "mat-vec adversarial"), n) +
                               " rows=" + std::to_string(rows);
        for (int64_t i = 0; i < rows + 3; i++) {
          float want = sentinel;
          if (i < rows) {
            const void* one[1] = {A.data()};
            ref(n, W.data() + rb * (size_t)i, one, 1, &want);
          }
          const float got = Y[(size_t)i];
          if (!same_float(got, want) && !(std::isnan(got) && std::isnan(want) && i < rows)) {
            c.fail(nm + ": [row " + std::to_string(i) + "] simd " + fmt(got) + " != scalar " + fmt(want));
            break;
          }
        }
        cases++;
      }
  }
  if (c.failures == before)
    c.ok(std::string(dtype_name(t)) + " multi-row mat-vec kernel == scalar dot, " + std::to_string(cases) + " cases");
}

// SIMD activation quantizers (where the Simd table has them) vs the scalar ones, byte
// for byte: random rows, exact .5 ties, a repeated largest magnitude of both signs (the
// first one sets the scale), zero, tiny, inf and nan blocks.
void check_act_quant(Ctx& c, uint64_t seed) {
  const DotKernels& kv = dot_kernels(Kernel::Simd);
  Rng r{seed + 5};
  for (int fi = 0; fi < kActFormats; fi++) {
    const ActFormat f = (ActFormat)fi;
    const act_q_fn q = kv.quant_act[fi];
    if (!q) continue;
    const char* nm = act_format_name(f);
    const int before = c.failures;
    const int64_t n = 1024;  // 4 Q8_K blocks, 32 Q16_0 blocks
    int cases = 0;
    for (int kind = 0; kind < 10; kind++) {
      std::vector<float> x((size_t)n);
      for (int64_t i = 0; i < n; i++) {
        switch (kind) {
          case 0: x[i] = r.gauss(); break;
          case 1: x[i] = r.gauss() * 1e-3f; break;
          case 2: x[i] = r.gauss() * 3e4f; break;
          case 3: x[i] = (float)(r.range(254) - 127) + 0.5f; break;  // halves (scale 1)
          case 4: x[i] = (float)(r.range(65535) - 32767) + 0.5f; break;
          case 5: x[i] = r.sym(); break;
          case 6: x[i] = 0.f; break;
          case 7: x[i] = r.sym() * 1e-38f; break;
          default: x[i] = r.gauss(); break;
        }
      }
      if (kind == 3) for (int64_t b = 0; b < n; b += 256) x[(size_t)b + 7] = -127.f;   // Q8_K iscale = 1
      if (kind == 4) for (int64_t b = 0; b < n; b += 32) x[(size_t)b + 3] = 32767.f;   // Q16_0 id = 1
      if (kind == 5) for (int64_t b = 0; b < n; b += 32) { x[(size_t)b + 5] = 2.f; x[(size_t)b + 9] = -2.f; }
      if (kind == 8) { x[3] = NAN; x[300] = INFINITY; x[600] = -INFINITY; x[40] = NAN; }
      if (kind == 9) x[777] = NAN;  // a lone nan mid-block, finite values after it
      const size_t ab = act_row_bytes(f, n);
      std::vector<uint8_t> a(ab, 0xCD), b(ab, 0xCD);
      bool threw_a = false, threw_b = false;
      std::string msg_a, msg_b;
      try { quantize_act_row(f, x.data(), a.data(), n); } catch (const Error& e) { threw_a = true; msg_a = e.what(); }
      try { q(x.data(), b.data(), n); } catch (const Error& e) { threw_b = true; msg_b = e.what(); }
      if (msg_a != msg_b) {
        c.fail(std::string(nm) + " activation quantizer: error messages differ: scalar '" + msg_a + "' simd '" + msg_b + "'");
      } else if (threw_a != threw_b || (kind >= 8) != threw_a) {
        c.fail(std::string(nm) + " activation quantizer: non-finite input must throw on both paths (kind " +
               std::to_string(kind) + ": scalar " + (threw_a ? "threw" : "did not throw") + ", simd " +
               (threw_b ? "threw" : "did not throw") + ")");
      } else if (!threw_a && std::memcmp(a.data(), b.data(), ab) != 0) {
        size_t k = 0;
        while (a[k] == b[k]) k++;
        c.fail(std::string(nm) + " simd activation quantizer differs from scalar (input kind " +
               std::to_string(kind) + ") at byte " + std::to_string(k));
      }
      cases++;
    }
    if (c.failures == before)
      c.ok(std::string(nm) + " simd activation quantizer == scalar bytes, " + std::to_string(cases) + " rows");
  }
}

// fp32_to_fp16_row (fp16.h, vector code) == fp32_to_fp16 for bits: every sign, exponent
// and top-6 mantissa bits, with the low mantissa bits at the rounding edges (0, 1, just
// below / at / above the half-way point, all ones) and random; and a row tail of 3.
void check_fp16_row(Ctx& c, uint64_t seed) {
  Rng r{seed + 17};
  const uint32_t lows[] = {0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x3000, 0x1FFFF, 0x20000};
  std::vector<float> x;
  for (uint32_t hi = 0; hi < (1u << 15); hi++)  // bits 31..17
    for (uint32_t lo : lows) {
      const uint32_t b = (hi << 17) | (lo & 0x1FFFF);
      const uint32_t br = (hi << 17) | (uint32_t)(r.next() & 0x1FFFF);
      float f;
      std::memcpy(&f, &b, 4), x.push_back(f);
      std::memcpy(&f, &br, 4), x.push_back(f);
    }
  for (int k = 0; k <= 1024; k++)  // subnormal halves' ties and neighbours, both signs
    for (float f : {std::ldexp(k + 0.5f, -24), std::nextafter(std::ldexp(k + 0.5f, -24), 0.f), std::ldexp((float)k, -24)})
      x.push_back(f), x.push_back(-f);
  x.resize(x.size() / 4 * 4 + 3);  // scalar tail
  std::vector<uint16_t> h(x.size());
  fp32_to_fp16_row(x.data(), h.data(), x.size());
  for (size_t i = 0; i < x.size(); i++)
    if (h[i] != fp32_to_fp16(x[i])) {
      uint32_t b;
      std::memcpy(&b, &x[i], 4);
      char buf[96];
      std::snprintf(buf, sizeof buf, "fp32_to_fp16_row(0x%08x) = 0x%04x, fp32_to_fp16 = 0x%04x", b, h[i], fp32_to_fp16(x[i]));
      c.fail(buf);
      return;
    }
  c.ok("fp32_to_fp16_row == fp32_to_fp16, " + std::to_string(x.size()) + " bit patterns");
}

void check_roundtrip(Ctx& c, uint64_t seed) {
  Rng r{seed + 99};
  const int64_t n = 2048;
  const int before = c.failures;
  std::string summary;
  for (float scale : {0.01f, 1.f, 500.f}) {
    std::vector<float> x((size_t)n), y((size_t)n);
    for (auto& v : x) v = r.gauss() * scale;
    double s2 = 0;
    for (float v : x) s2 += (double)v * v;
    for (const TypeTraits& b : all_types()) {  // bounds: the table's max_rel_rms
      std::vector<uint8_t> q(row_bytes(b.type, n));
      quantize_row(b.type, x.data(), q.data(), n);
      dequantize_row(b.type, q.data(), y.data(), n);
      double e2 = 0;
      for (int64_t i = 0; i < n; i++) e2 += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
      const double rel = std::sqrt(e2 / s2);
      if (!(rel <= b.max_rel_rms))
        c.fail(std::string(dtype_name(b.type)) + " quantize->dequantize rel rms " + fmt(rel) + " > " + fmt(b.max_rel_rms));
      if (scale == 1.f) summary += std::string(" ") + dtype_name(b.type) + "=" + fmt(rel);
    }
  }
  if (c.failures == before) c.ok("quantize->dequantize rel rms within bounds:" + summary);
}

}  // namespace

int kernel_selftest(uint64_t seed, std::string* report) {
  Ctx c;
  c.report = report;
  if (report) {
    *report += std::string("kernel selftest: simd path ") +
               (simd_compiled() ? "active" : "absent (simd == scalar fallback)") + "\n";
  }
  auto guarded = [&](const std::string& what, auto fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      c.fail(what + ": threw " + e.what());
    }
  };
  for (const TypeTraits& tt : all_types()) {  // every weight type of the table
    if (!tt.storage) continue;
    const DType t = tt.type;
    guarded(std::string(dtype_name(t)) + " known-answer", [&] { check_known_answer(c, t); });
    guarded(std::string(dtype_name(t)) + " vec_dot", [&] { check_vec_dot(c, t, vec_dot_format(t), seed); });
    if (act_format(t) == ActFormat::Q16_0)
      guarded(std::string(dtype_name(t)) + " vec_dot x Q16_0",
              [&] { check_vec_dot(c, t, ActFormat::Q16_0, seed); });
    guarded(std::string(dtype_name(t)) + " matmul", [&] { check_matmul(c, t, seed); });
    guarded(std::string(dtype_name(t)) + " batched", [&] { check_batched(c, t, seed); });
    guarded(std::string(dtype_name(t)) + " mat-vec", [&] { check_mv(c, t, seed); });
  }
  guarded("roundtrip", [&] { check_roundtrip(c, seed); });
  guarded("activation quantizers", [&] { check_act_quant(c, seed); });
  guarded("fp16 row", [&] { check_fp16_row(c, seed); });
  if (report) *report += std::to_string(c.failures) + " failure(s)\n";
  return c.failures;
}

// Benchmarks -------------------------------------------------------------------------------

namespace {

// 16 distinct quantized rows tiled over the matrix: realistic blocks, and fast to build
// even in wasm (the K-quant scale search over 16M values would take seconds). Speed does
// not depend on the values; memory traffic is that of the full matrix.
std::vector<uint8_t> bench_weights(DType t, int64_t rows, int64_t cols) {
  const size_t rb = row_bytes(t, cols);
  std::vector<uint8_t> W(rb * (size_t)rows);
  Rng r{42};
  std::vector<float> x((size_t)cols);
  for (int64_t i = 0; i < rows; i++) {
    if (i < 16) {
      for (auto& v : x) v = r.gauss() * 0.02f;
      quantize_row(t, x.data(), W.data() + rb * (size_t)i, cols);
    } else {
      std::memcpy(W.data() + rb * (size_t)i, W.data() + rb * (size_t)(i % 16), rb);
    }
  }
  return W;
}

template <typename F>
double time_gws(int64_t rows, int64_t cols, double min_seconds, F run) {
  using clk = std::chrono::steady_clock;
  run();  // warm-up
  int iters = 0;
  const auto t0 = clk::now();
  double el = 0;
  do {
    run();
    iters++;
    el = std::chrono::duration<double>(clk::now() - t0).count();
  } while (el < min_seconds);
  return (double)rows * (double)cols * iters / el * 1e-9;
}

volatile float g_sink;

}  // namespace

double kernel_bench_matvec(DType t, int64_t rows, int64_t cols, Kernel k, double min_seconds) {
  std::vector<uint8_t> W = bench_weights(t, rows, cols);
  std::vector<float> x((size_t)cols), y((size_t)rows);
  Rng r{7};
  for (auto& v : x) v = r.gauss();
  const double g = time_gws(rows, cols, min_seconds, [&] {
    matvec(t, W.data(), rows, cols, x.data(), y.data(), k);
  });
  g_sink = y[0];
  return g;
}

double kernel_bench_matmul(DType t, int64_t rows, int64_t cols, int64_t ntok, Kernel k,
                           double min_seconds) {
  std::vector<uint8_t> W = bench_weights(t, rows, cols);
  std::vector<float> X((size_t)(cols * ntok)), Y((size_t)(rows * ntok));
  Rng r{8};
  for (auto& v : X) v = r.gauss();
  const double g = time_gws(rows, cols * ntok, min_seconds, [&] {
    matmul(t, W.data(), rows, cols, X.data(), ntok, Y.data(), k);
  });
  g_sink = Y[0];
  return g;
}

double kernel_bench_dequant_dot(DType t, int64_t rows, int64_t cols, double min_seconds) {
  std::vector<uint8_t> W = bench_weights(t, rows, cols);
  const size_t rb = row_bytes(t, cols);
  std::vector<float> x((size_t)cols), y((size_t)rows), wf((size_t)cols);
  Rng r{7};
  for (auto& v : x) v = r.gauss();
  const double g = time_gws(rows, cols, min_seconds, [&] {
    for (int64_t i = 0; i < rows; i++) {
      dequantize_row(t, W.data() + rb * (size_t)i, wf.data(), cols);
      float s = 0;
      for (int64_t c = 0; c < cols; c++) s += wf[c] * x[c];
      y[i] = s;
    }
  });
  g_sink = y[0];
  return g;
}

}  // namespace knot
