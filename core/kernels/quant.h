// quant.h — tensor element types with ggml's block layouts, the type-traits table
// (ggml's type_traits[] is the model), row sizing, dequantize, and reference quantizers
// (quantize_row_*_ref in the ggml sense).
// Adding a quant type: a DType id (ggml's), its block struct, ONE row in kTypes
// (quant.cpp: sizes, flags, activation format, scale offsets, error bound, to_float /
// from_float_ref) and its kernels in each back end's DotKernels table (kernels_*.cpp,
// arrays indexed by type id). The selftest, the GoogleTest kernel tests and the JS
// (kw_type_traits) iterate the table, so the new type is tested without new test code.
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
#include "kernels/fp16.h"

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
constexpr int kDTypeSlots = 31;  // type ids are < this: tables indexed by type id

// Activation formats the kernels take: vec_dot_type's Q8_0 / Q8_K / F32, plus Q16_0
// (int16 per 32-block, kernels_internal.h) that matvec/matmul feed Q4_0/Q8_0 weights.
enum class ActFormat { F32, Q8_0, Q8_K, Q16_0 };
constexpr int kActFormats = 4;
const char* act_format_name(ActFormat f);  // "F32", "Q8_0", "Q8_K", "Q16_0"

constexpr int QK4_0 = 32;
constexpr int QK8_0 = 32;
constexpr int QK_K = 256;
constexpr int K_SCALE_SIZE = 12;

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

typedef void (*to_float_fn)(const void* src, float* dst, int64_t n);     // n % block_elems == 0
typedef void (*from_float_fn)(const float* src, void* dst, int64_t n);  // n % block_elems == 0

struct TypeTraits {
  DType type;
  const char* name;     // "F32", "Q4_K", ...
  int block_elems;
  int block_bytes;
  bool storage;         // valid as a tensor (weight) type in a model file
  bool k_quant;         // 256-element super-blocks (Q4_K, Q5_K, Q6_K, Q8_K)
  DType vec_dot_type;   // activation type of vec_dot (llama.cpp's); == type when not a weight type
  ActFormat act;        // activation format matvec/matmul feed the kernels (weights only)
  int scale_size;       // 2: fp16 block scales, 4: f32; 0: elementwise (float types)
  int scale_off[2];     // byte offsets of the block's scales (d, dmin) in the block; -1: none
  double max_rel_rms;   // bound on quantize->dequantize relative RMS error of Gaussian data
                        // (1.3-2x what the scheme achieves; selftest and tests check it)
  to_float_fn to_float;
  from_float_fn from_float_ref;  // checks finiteness itself where the format needs it
};

// Every supported type, in table order (ids ascending).
struct TypeTable {
  const TypeTraits* begin_;
  const TypeTraits* end_;
  const TypeTraits* begin() const { return begin_; }
  const TypeTraits* end() const { return end_; }
};
TypeTable all_types();
constexpr int type_index(DType t) { return (int)t; }  // index into kDTypeSlots-sized tables

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

}  // namespace knot
