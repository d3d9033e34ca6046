// convert.h — GGUF -> .knot, keeping tensor types or re-quantizing float sources.
// Type policy (also used by synth): norms, biases and every 1-D tensor stay F32; a
// tensor whose row length is not a multiple of the target's block size falls back to a
// compatible type (Q8_0 when the row is a multiple of 32, else F16) and is noted.
// "Q4_K_M" / "Q5_K_M" follow llama.cpp's mix: Q6_K for output.weight and for attn_v /
// ffn_down on the layers use_more_bits() picks (first and last eighth, every third).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "container/model.h"

namespace knot {

struct ConvertOptions {
  std::string type;               // "" keeps source types; F32 F16 BF16 Q8_0 Q4_0 Q4_K Q5_K Q6_K Q4_K_M Q5_K_M
  bool allow_requantize = false;  // also re-quantize already-quantized sources (lossy twice)
  // Called before each tensor and once at the end: bytes done, bytes total, tensor name.
  std::function<void(uint64_t done, uint64_t total, const std::string& name)> progress;
};

struct ConvertResult {
  size_t n_tensors = 0;
  uint64_t bytes_in = 0, bytes_out = 0;
  std::vector<std::string> notes;  // fallbacks and kept types, one line each
};

// Throws on an unknown target type name.
void check_target_type(const std::string& target);

// Type for one tensor (knot name) under target; note explains any deviation.
DType choose_tensor_type(const std::string& target, const std::string& name, DType src,
                         const std::vector<int64_t>& shape, int n_layer, bool allow_requantize,
                         std::string* note);

// Converts one row of n elements from src type to dst type (via F32).
void convert_row(DType src_t, const void* src, DType dst_t, void* dst, int64_t n, float* scratch);

// Streams tensor by tensor; writes `out` via a temporary file renamed on success.
ConvertResult convert_gguf_to_knot(const std::string& in, const std::string& out,
                                   const ConvertOptions& opts = {});

}  // namespace knot
