// bench_kernels — single-thread matvec throughput on a 4096x4096 matrix per weight type,
// for each kernel path, against a plain "dequantize the row to f32, then f32 dot"
// baseline. Prints ONE JSON object (G weights/s; ratio_* = path / baseline).
// Also reports batched prefill (matmul, 16 and 64 tokens) in G weight-token products/s,
// and the same matvec on a matrix of distinct rows larger than the last-level cache
// (>= 256 MiB; "*_large"): decode of a real model streams its weights from memory. Its
// rows are the 4096x4096 matrix's blocks reshuffled per row (quantizing 256 MiB of random
// floats would take minutes; the kernels' speed does not depend on the values).
// "variants": every SIMD table this CPU can run (AVX-512 VNNI, AVX-VNNI, AVX2; the first is the
// default Simd path) forced in turn in the same process: matvec, matmul over 64 tokens
// and the large matvec per quantized type, in G weights per second of this thread's CPU
// time, best of 3 alternating rounds — each variant's ratio is against the AVX2 figure
// of the same run. "loadavg": /proc/loadavg at the start (the host is shared).
// usage: bench_kernels [min_seconds_per_measurement (default 0.4)]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"

using namespace knot;

namespace {

const int64_t ROWS = 4096, COLS = 4096;

uint64_t g_state = 0x1234567;
float rnd() {  // xorshift64*, approx N(0, 0.02^2) via sum of uniforms
  float s = 0;
  for (int i = 0; i < 4; i++) {
    g_state ^= g_state >> 12;
    g_state ^= g_state << 25;
    g_state ^= g_state >> 27;
    s += (float)((g_state * 0x2545F4914F6CDD1Dull) >> 40) / 16777216.f - 0.5f;
  }
  return s * 0.035f;
}

template <typename F>
double measure(double min_s, double work, F run) {
  using clk = std::chrono::steady_clock;
  run();  // warm-up
  int it = 0;
  const auto t0 = clk::now();
  double el;
  do {
    run();
    it++;
    el = std::chrono::duration<double>(clk::now() - t0).count();
  } while (el < min_s);
  return work * it / el * 1e-9;
}

// Same, on this thread's CPU time: on a shared, loaded host the wall clock mostly
// measures the other processes; CPU time measures the kernel (the variants' figures).
template <typename F>
double measure_cpu(double min_s, double work, F run) {
  auto now = [] {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
  };
  run();  // warm-up
  int it = 0;
  const double t0 = now();
  double el;
  do {
    run();
    it++;
    el = now() - t0;
  } while (el < min_s);
  return work * it / el * 1e-9;
}

volatile float sink;

}  // namespace

int main(int argc, char** argv) {
  const double min_s = argc > 1 ? std::atof(argv[1]) : 0.4;
  std::string json = "{\"shape\":[4096,4096],\"threads\":1,\"simd\":\"";
  json += simd_compiled() ? simd_kernels_name() : "none";
  json += "\",\"unit\":\"G weights/s\"";
  {
    char la[64] = {0};
    if (FILE* f = std::fopen("/proc/loadavg", "r")) {
      if (!std::fgets(la, sizeof la, f)) la[0] = 0;
      std::fclose(f);
    }
    double l1 = 0;
    std::sscanf(la, "%lf", &l1);
    char b[64];
    std::snprintf(b, sizeof b, ",\"loadavg\":%.2f", l1);
    json += b;
  }
  std::string variants;
  NamedKernels tables[4];
  const int ntables = usable_simd_tables(tables);
  std::vector<float> x(COLS), y(ROWS), wf(COLS);
  std::vector<float> X(64 * COLS), Y(64 * ROWS);
  for (auto& v : x) v = rnd() * 50;
  for (auto& v : X) v = rnd() * 50;
  for (DType t : {DType::Q4_K, DType::Q6_K, DType::Q8_0, DType::F32}) {
    const size_t rb = row_bytes(t, COLS);
    std::vector<uint8_t> W(rb * ROWS);
    for (int64_t r = 0; r < ROWS; r++) {
      for (auto& v : wf) v = rnd();
      quantize_row(t, wf.data(), W.data() + rb * r, COLS);
    }
    const double work = (double)ROWS * COLS;
    const double base = measure(min_s, work, [&] {
      for (int64_t r = 0; r < ROWS; r++) {
        dequantize_row(t, W.data() + rb * r, wf.data(), COLS);
        float s = 0;
        for (int64_t c = 0; c < COLS; c++) s += wf[c] * x[c];
        y[r] = s;
      }
    });
    double g[3];
    const Kernel ks[3] = {Kernel::Reference, Kernel::Scalar, Kernel::Simd};
    for (int i = 0; i < 3; i++)
      g[i] = measure(min_s, work, [&] { matvec(t, W.data(), ROWS, COLS, x.data(), y.data(), ks[i]); });
    const double mm = measure(min_s, work * 16, [&] {
      matmul(t, W.data(), ROWS, COLS, X.data(), 16, Y.data(), Kernel::Simd);
    });
    const double mm64 = measure(min_s, work * 64, [&] {
      matmul(t, W.data(), ROWS, COLS, X.data(), 64, Y.data(), Kernel::Simd);
    });
    // >= 256 MiB of distinct rows: block k of row r is block (r * 7919 + k * 104729) mod
    // (all blocks) of W.
    const int64_t nb = COLS / type_traits(t).block_elems;
    const size_t bb = (size_t)type_traits(t).block_bytes;
    const int64_t big_rows = (int64_t)(((256ull << 20) + rb - 1) / rb);
    std::vector<uint8_t> B(rb * (size_t)big_rows);
    for (int64_t r = 0; r < big_rows; r++)
      for (int64_t k = 0; k < nb; k++)
        std::memcpy(B.data() + rb * r + bb * k, W.data() + bb * (size_t)((r * 7919 + k * 104729) % (ROWS * nb)), bb);
    std::vector<float> yb((size_t)big_rows);
    const double work_big = (double)big_rows * COLS;
    const double big_simd = measure(min_s, work_big, [&] { matvec(t, B.data(), big_rows, COLS, x.data(), yb.data(), Kernel::Simd); });
    const double big_base = measure(min_s, work_big, [&] {
      for (int64_t r = 0; r < big_rows; r++) {
        dequantize_row(t, B.data() + rb * r, wf.data(), COLS);
        float s = 0;
        for (int64_t c = 0; c < COLS; c++) s += wf[c] * x[c];
        yb[r] = s;
      }
    });
    sink = y[0] + Y[0] + yb[0];
    char big[256];
    std::snprintf(big, sizeof big, ",\"large_bytes\":%zu,\"simd_large\":%.3f,\"dequant_dot_baseline_large\":%.3f,\"ratio_simd_large\":%.2f",
                  B.size(), big_simd, big_base, big_simd / big_base);
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  ",\"%s\":{\"dequant_dot_baseline\":%.3f,\"reference\":%.3f,\"scalar\":%.3f,"
                  "\"simd\":%.3f,\"simd_matmul16\":%.3f,\"simd_matmul64\":%.3f,\"ratio_reference\":%.2f,"
                  "\"ratio_scalar\":%.2f,\"ratio_simd\":%.2f}",
                  dtype_name(t), base, g[0], g[1], g[2], mm, mm64, g[0] / base, g[1] / base, g[2] / base);
    json += buf;
    json.insert(json.size() - 1, big);
    if (t != DType::F32) {
      double ref_mv = 0, ref_mm = 0, ref_big = 0;  // AVX2's, for the ratios
      std::string per;
      double mv[4] = {}, m64[4] = {}, lg[4] = {};
      for (int round = 0; round < 3; round++)
        for (int v = ntables - 1; v >= 0; v--) {
          set_simd_kernels_for_test(tables[v].table);
          mv[v] = std::max(mv[v], measure_cpu(min_s, work, [&] { matvec(t, W.data(), ROWS, COLS, x.data(), y.data(), Kernel::Simd); }));
          m64[v] = std::max(m64[v], measure_cpu(min_s, work * 64, [&] { matmul(t, W.data(), ROWS, COLS, X.data(), 64, Y.data(), Kernel::Simd); }));
          lg[v] = std::max(lg[v], measure_cpu(min_s, work_big, [&] { matvec(t, B.data(), big_rows, COLS, x.data(), yb.data(), Kernel::Simd); }));
          set_simd_kernels_for_test(nullptr);
        }
      for (int v = 0; v < ntables; v++)
        if (std::strcmp(tables[v].name, "avx2") == 0) ref_mv = mv[v], ref_mm = m64[v], ref_big = lg[v];
      for (int v = 0; v < ntables; v++) {
        char vb[320];
        std::snprintf(vb, sizeof vb,
                      "%s\"%s\":{\"matvec\":%.3f,\"matmul64\":%.3f,\"matvec_large\":%.3f,\"x_avx2_matvec\":%.2f,"
                      "\"x_avx2_matmul64\":%.2f,\"x_avx2_large\":%.2f}",
                      per.empty() ? "" : ",", tables[v].name, mv[v], m64[v], lg[v], ref_mv > 0 ? mv[v] / ref_mv : 0.,
                      ref_mm > 0 ? m64[v] / ref_mm : 0., ref_big > 0 ? lg[v] / ref_big : 0.);
        per += vb;
      }
      variants += std::string(variants.empty() ? "" : ",") + "\"" + dtype_name(t) + "\":{" + per + "}";
    }
  }
  json += ",\"variants_unit\":\"G weights per thread-CPU second\",\"variants\":{" + variants + "}}";
  std::printf("%s\n", json.c_str());
  return 0;
}
