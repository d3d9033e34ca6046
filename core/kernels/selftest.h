// selftest.h — kernel self-check and micro-benchmark, callable natively and from wasm
// (no stdio/iostream: results come back as numbers and a text report).
#pragma once
#include <cstdint>
#include <string>

#include "kernels/kernels.h"

namespace knot {

// Runs, for every storage type: Simd vs Scalar vec_dot / matvec / matmul on random and
// adversarial blocks (extreme fp16 scales, every quant value at its min and max, zeros,
// odd lengths / row counts / token counts) — for Q4_0/Q8_0 also against int16 (Q16_0)
// activations — the batched prefill kernels vs the scalar dot on every (row, token), the
// SIMD activation quantizers vs the scalar ones byte for byte, known-answer dots that catch lane-sum bugs,
// Reference vs Scalar within the activation-quantization bound, matmul == loop of
// matvec, matmul_rows == slice of matmul, and quantize->dequantize error bounds.
// Returns the number of failures; *report (if given) gets one line per check group and
// one line per failure (capped).
int kernel_selftest(uint64_t seed, std::string* report);

// Single-thread matvec throughput in G weights/s on deterministic random weights of
// type t ([rows, cols]), repeating for at least min_seconds (steady_clock).
double kernel_bench_matvec(DType t, int64_t rows, int64_t cols, Kernel k, double min_seconds);

// Batched (prefill) throughput: matmul with ntok tokens, in G weight-token products/s.
double kernel_bench_matmul(DType t, int64_t rows, int64_t cols, int64_t ntok, Kernel k,
                           double min_seconds);

// Baseline for the same shape: plain C++ "dequantize the row to f32, then f32 dot" per
// row (what a kernel-less implementation would do). G weights/s.
double kernel_bench_dequant_dot(DType t, int64_t rows, int64_t cols, double min_seconds);

}  // namespace knot
