// model_io.h — map GGUF metadata to ModelConfig / TokenizerData and back, their JSON forms
// for the .knot container, and the checks both loaders share. Loading a file from disk
// (format by magic) is loader.h, above this and knot.h.
// Contract: errors name the file and what is wrong; a missing required config key,
// a tensor whose bytes run past the file, an unknown tensor type all throw knot::Error.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "container/gguf.h"
#include "container/model.h"

namespace knot {

struct LoadOptions {
  bool load_tensors = true;   // false: config + tokenizer + tensor table only (no bytes)
  bool verify_hashes = true;  // .knot: check every tensor's content hash on read
};

// GGUF metadata -> config / tokenizer (keys as in llama.cpp). `what` names the file.
// Config needs the tensor table too (n_vocab_tensor from token_embd rows, tied = no
// output.weight) and the tokenizer (n_vocab).
ModelConfig config_from_gguf(const gguf::File& f, const std::string& what);
TokenizerData tokenizer_from_gguf(const gguf::File& f, const std::string& what);
// Writes the keys config_from_gguf/tokenizer_from_gguf read (used by synth).
void config_to_gguf(const ModelConfig& c, gguf::Writer& w);
void tokenizer_to_gguf(const TokenizerData& t, gguf::Writer& w);

// JSON forms used inside .knot metadata (config) and the tokenizer payload blob.
// Tokens that are not valid UTF-8 are stored as {"hex": "..."} so bytes round-trip.
std::string config_to_json(const ModelConfig& c);
ModelConfig config_from_json(std::string_view json, const std::string& what);
std::string tokenizer_to_json(const TokenizerData& t);
TokenizerData tokenizer_from_json(std::string_view json, const std::string& what);

// Throws naming file, tensor (and `where`, e.g. its offset) and block when a block scale
// or float value of the loaded tensor is NaN/Inf: a stale or corrupt file would otherwise
// surface only as a non-finite logit. Both loaders call it on every tensor they read.
// `shown`: the tensor's name as the file spells it (GGUF: dotted); default t.name.
void check_tensor_finite(const Tensor& t, const std::string& what, const std::string& where = "",
                         const std::string& shown = "");

// The tensors the config's architecture requires (arch.h's table: required ones, output
// unless tied, optional ones only when present) checked against a file's tensor table: returns one problem per missing tensor, wrong
// shape or layer past n_layer, naming layer and tensor (GGUF names when gguf_names).
struct TensorRef {
  std::string knot_name;  // blk_0_attn_q_weight
  std::string shown;      // name used in messages (the file's own spelling)
  std::vector<int64_t> shape;
};
std::vector<std::string> check_tensor_set(const ModelConfig& c, const std::vector<TensorRef>& tensors, bool gguf_names,
                                          const std::string& what);

// Sanity checks shared by both loaders (positive dims, heads divide, ...).
void validate_config(const ModelConfig& c, const std::string& what);

}  // namespace knot
