// quant.h — tensor element types with ggml's block layouts, row sizing, dequantize,
// and reference quantizers (quantize_row_*_ref in the ggml sense).
// Contract:
//  * DType values are ggml's type ids, so GGUF type fields map 1:1.
//  * row_bytes() throws when n is not a multiple of the type's block size, naming the
//    tensor and the row length — never a silent slice.
//  * dequantize_row()/quantize_row() throw on an unknown/unsupported type — never zeros.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "kernels/common.h"

namespace knot {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q8_0 = 8,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,  // activation format for K-quant dot products (not a storage type)
  BF16 = 30,
};

constexpr int QK4_0 = 32;
constexpr int QK8_0 = 32;
constexpr int QK_K = 256;
constexpr int K_SCALE_SIZE = 12;

typedef uint16_t fp16_t;  // IEEE half, raw bits
typedef uint16_t bf16_t;  // bfloat16, raw bits

struct block_q4_0 {
  fp16_t d;
  uint8_t qs[QK4_0 / 2];
};
static_assert(sizeof(block_q4_0) == 18, "block_q4_0 size");

struct block_q8_0 {
  fp16_t d;
  int8_t qs[QK8_0];
};
static_assert(sizeof(block_q8_0) == 34, "block_q8_0 size");

struct block_q4_K {
  fp16_t d;                      // super-block scale for the quantized scales
  fp16_t dmin;                   // super-block scale for the quantized mins
  uint8_t scales[K_SCALE_SIZE];  // 8 x (6-bit scale, 6-bit min)
  uint8_t qs[QK_K / 2];          // 4-bit quants
};
static_assert(sizeof(block_q4_K) == 144, "block_q4_K size");

struct block_q5_K {
  fp16_t d;
  fp16_t dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qh[QK_K / 8];  // high bit
  uint8_t qs[QK_K / 2];  // low 4 bits
};
static_assert(sizeof(block_q5_K) == 176, "block_q5_K size");

struct block_q6_K {
  uint8_t ql[QK_K / 2];      // low 4 bits
  uint8_t qh[QK_K / 4];      // high 2 bits
  int8_t scales[QK_K / 16];  // 8-bit scales
  fp16_t d;
};
static_assert(sizeof(block_q6_K) == 210, "block_q6_K size");

struct block_q8_K {
  float d;
  int8_t qs[QK_K];
  int16_t bsums[QK_K / 16];  // sums of groups of 16 quants
};
static_assert(sizeof(block_q8_K) == 292, "block_q8_K size");

struct TypeTraits {
  DType type;
  const char* name;  // "F32", "Q4_K", ...
  int block_elems;
  int block_bytes;
  bool storage;  // valid as a tensor type in a model file
};

// nullptr when the id is not a type we support.
const TypeTraits* type_traits(uint32_t id);
const TypeTraits& type_traits(DType t);  // throws for unknown
const char* dtype_name(DType t);
DType dtype_from_id(uint32_t id, std::string_view what = "");  // throws, naming `what`
DType dtype_from_name(std::string_view name);                  // "q4_k" / "Q4_K"; throws

// Bytes of a row of n elements; throws naming tensor `what` when n % block_elems != 0.
size_t row_bytes(DType t, int64_t n, std::string_view what = "");

// Dequantize one row of n elements (n a multiple of the block size).
void dequantize_row(DType t, const void* src, float* dst, int64_t n);
// Reference quantizers: F32, F16, BF16, Q4_0, Q8_0, Q4_K, Q5_K, Q6_K, Q8_K.
void quantize_row(DType t, const float* src, void* dst, int64_t n);

// Validation of raw tensor bytes (e.g. a stale or misaligned file): index of the first
// element whose block scale (d, dmin) is inf/nan — or, for F32/F16/BF16, the first
// inf/nan element — or -1 when all are finite. Throws like row_bytes on a misaligned n.
int64_t first_nonfinite(DType t, const void* src, int64_t n);

float fp16_to_fp32(fp16_t h);
fp16_t fp32_to_fp16(float f);
float bf16_to_fp32(bf16_t h);
bf16_t fp32_to_bf16(float f);

}  // namespace knot
