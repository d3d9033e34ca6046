// model.h — the in-memory model: config, tokenizer data, and named tensors.
// A Model is produced by a loader (GGUF or .knot, see model_io.h) and consumed by the
// forward pass, tokenizer and CLI. Tensor names use the knot convention (GGUF name with
// '.' -> '_', e.g. "blk_3_attn_q_weight"). Tensor bytes are owned, 64-byte aligned.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/quant.h"

namespace knot {

enum class RopeStyle { Norm, Neox };  // Norm: adjacent pairs (llama); Neox: halves (qwen2)

struct ModelConfig {
  std::string arch;        // "llama" | "qwen2"
  int n_embd = 0;          // hidden size
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;        // n_embd / n_head unless the file says otherwise
  int n_ff = 0;
  int n_vocab = 0;         // as the tokenizer reports it
  int n_vocab_tensor = 0;  // rows of token_embd (may be padded past n_vocab)
  int rope_dims = 0;       // rotated dims per head (== head_dim usually)
  RopeStyle rope_style = RopeStyle::Norm;
  float rope_theta = 10000.f;
  float rms_eps = 1e-5f;
  int n_ctx_train = 0;
  bool tied_embeddings = false;  // no output_weight: lm_head is token_embd
};

struct TokenizerData {
  std::string model;  // "llama" (SentencePiece BPE) | "gpt2" (byte-level BPE)
  std::string pre;    // pre-tokenizer name from GGUF (tokenizer.ggml.pre), may be empty
  std::vector<std::string> tokens;
  std::vector<float> scores;          // llama
  std::vector<int32_t> token_types;   // 1 normal, 2 unknown, 3 control, 4 user, 5 unused, 6 byte
  std::vector<std::string> merges;    // gpt2: "a b"
  int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1, eot_id = -1;
  bool add_bos = true, add_eos = false;
  bool add_space_prefix = true;  // SPM: prepend U+2581 to the text
  std::string chat_template;     // Jinja text from tokenizer.chat_template, may be empty
};

struct Tensor {
  std::string name;
  DType type = DType::F32;
  std::vector<int64_t> shape;  // ggml order: shape[0] = row length (ne0), shape[1] = rows
  std::shared_ptr<uint8_t> bytes;  // owned, 64-byte aligned
  size_t size = 0;                 // bytes
  uint64_t hash = 0;               // content hash (see hash.h), 0 if unknown
  int64_t row0 = 0;                // first row of the file's tensor held (a row range: shape[1] counts only those)
  int64_t ne0() const { return shape.empty() ? 1 : shape[0]; }
  int64_t nrows() const {
    int64_t r = 1;
    for (size_t i = 1; i < shape.size(); i++) r *= shape[i];
    return r;
  }
  const uint8_t* data() const { return bytes.get(); }
};

// Allocates an owned, 64-byte aligned, zero-initialised buffer.
std::shared_ptr<uint8_t> alloc_aligned(size_t size);

struct Model {
  ModelConfig config;
  TokenizerData tokenizer;
  std::map<std::string, Tensor> tensors;

  // nullptr when absent.
  const Tensor* find(const std::string& name) const;
  // Throws knot::Error "missing tensor <name> (layer L, phase P)" when absent.
  const Tensor& get(const std::string& name, int layer = -1, const char* phase = nullptr) const;
};

// "blk.3.attn_q.weight" -> "blk_3_attn_q_weight"
std::string knot_tensor_name(const std::string& gguf_name);
// "blk_3_attn_q_weight" for (3, "attn_q_weight")
std::string layer_tensor_name(int layer, const char* suffix);

}  // namespace knot
