// kernels.h — dot products, mat-vec and mat-mat over quantized weights.
// Three kernel paths with one contract:
//   Kernel::Reference — dequantize each weight row to f32 and dot with f32 activations
//                        (no activation quantization; double accumulation, one final
//                        rounding to f32). The "exact" reference mode.
//   Kernel::Scalar    — matvec/matmul quantize activations once per token: Q8_K for
//                        K-quants, int16-per-32-block "Q16_0" for Q4_0/Q8_0 (int8 Q8_0
//                        activations moved Q8_0-model logits by up to 0.17), F32 for
//                        F32/F16/BF16; scalar _generic integer dots. vec_dot() takes
//                        vec_dot_type(w) activations (Q8_0 for Q4_0/Q8_0, as llama.cpp).
//   Kernel::Simd      — same math as Scalar, AVX2 natively / simd128 in wasm; falls back
//                        to Scalar where no SIMD path exists. Prefill (matmul, >= 2 tokens)
//                        uses batched kernels where present: weight rows decoded once per
//                        chunk (int16 for Q4_0/Q8_0, u8 panels of 16 rows for Q4_K/Q6_K on
//                        AVX-512 VNNI, of 8 rows on AVX-VNNI and AVX2) and dotted
//                        against every token; decode (one token) uses multi-row mat-vec
//                        kernels where present (wasm Q8_0 / Q4_K: 4 rows share the
//                        activations; AVX-512 VNNI Q4_0/Q8_0/Q4_K/Q6_K and AVX2 Q4_0/Q8_0:
//                        16 or 8 rows per pass, block sums in lanes). Tested against
//                        Scalar: bit-identical for quantized weights, within float
//                        rounding of a different summation order for F32/F16/BF16.
// Weights: `rows` rows of `cols` elements, each row row_bytes(wtype, cols) bytes, contiguous.
// All entry points throw knot::Error on an unsupported type or a misaligned cols.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/quant.h"

namespace knot {

enum class Kernel { Reference, Scalar, Simd };

const char* kernel_name(Kernel k);
bool simd_compiled();  // true when a SIMD path is built in (AVX2 natively, simd128 in wasm)
// The back end Kernel::Simd runs here: "avx512vnni", "avx2", "wasm-simd128",
// "wasm-relaxed-simd"; "scalar" when it falls back.
const char* simd_kernels_name();

// Format the activations must be in for vec_dot with weights of type wtype.
DType vec_dot_type(DType wtype);

// Dot of one weight row with one activation row already in vec_dot_type(wtype) format.
float vec_dot(DType wtype, int64_t n, const void* w_row, const void* act, Kernel k);

// y[r] = sum_c W[r,c] * x[c]        x: [cols]   y: [rows]
void matvec(DType wtype, const void* W, int64_t rows, int64_t cols, const float* x, float* y,
            Kernel k);

// Y[t,r] = sum_c W[r,c] * X[t,c]    X: [ntok, cols] row-major   Y: [ntok, rows] row-major
// Batched: activations are quantized once per token and each weight row is read once
// per tile of tokens (not a loop of matvecs).
void matmul(DType wtype, const void* W, int64_t rows, int64_t cols, const float* X, int64_t ntok,
            float* Y, Kernel k);

// Same as matmul but computes only output rows [row_begin, row_end) of W (for sliced
// FFN/vocab shards); Y is [ntok, row_end-row_begin].
void matmul_rows(DType wtype, const void* W, int64_t row_begin, int64_t row_end, int64_t cols,
                 const float* X, int64_t ntok, float* Y, Kernel k);

// n IEEE halves -> f32, the same bits as half_to_float_row (fp16.h) for every input; F16C
// natively where the CPU has it (the F16 KV cache read of every decode step).
void f16_to_f32_row(const uint16_t* src, float* dst, size_t n);

}  // namespace knot
