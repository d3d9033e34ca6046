// synth.h — deterministic random-weight models of any architecture in arch.h for tests and benchmarks.
// Same options and seed => byte-identical file. Weights are uniform with std
// 1/sqrt(fan_in) (residual projections further by 1/sqrt(2*layers)) so activations stay
// O(1) through the stack; norms are 1. The tokenizer is an SPM-style vocab (<unk> <s>
// </s>, 256 byte tokens, then pieces whose every prefix is also a piece, so BPE merges
// reach them). Tensors are generated and quantized row by row and streamed to disk, so a
// qwen2.5-7b-shaped layer never needs more than one row in memory (plus, with `fast`, a
// block pool of ~1M elements).
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "container/knot.h"
#include "container/model.h"

namespace knot {

struct SynthOptions {
  std::string arch = "llama";  // any architecture of arch.h's table (llama | qwen2 | qwen3)
  int hidden = 64, layers = 2, heads = 4, kv_heads = 2, ffn = 128, vocab = 512;
  int head_dim = 0;      // 0 = hidden / heads; else written as attention.key_length (qwen3)
  int vocab_tensor = 0;  // rows of token_embd/output; 0 = vocab (more = padding rows, as qwen2.5)
  std::string type = "F32";  // any convert target (Q4_K_M mixes too)
  uint64_t seed = 1;
  bool tied = false;  // no output.weight
  int ctx = 2048;
  // fast: rows of 2-D weights are assembled from a seeded pool of blocks quantized from
  // the same distribution (about 1M elements per tensor) instead of quantizing every row:
  // a qwen2.5-7b-shaped layer takes well under a second. Same statistics, different
  // bytes from the default, still deterministic per (seed, tensor, row).
  bool fast = false;
  // header_only (.gguf only): the header, then a sparse all-zero payload of the right
  // size — a multi-GB tensor table in no time, for `knot plan` / header tests.
  bool header_only = false;
  // A real byte-level BPE vocabulary (tokenizer.json, optional tokenizer_config.json; see
  // hf_vocab.h) instead of the synthetic SPM one. Then vocab = 0 takes the file's token
  // count, a larger vocab pads with unused "[PAD<id>]" tokens (Qwen: 151,936).
  std::string vocab_from, tokenizer_config;
  std::function<void(uint64_t done, uint64_t total, const std::string& name)> progress;
};

ModelConfig synth_config(const SynthOptions& o);  // throws on inconsistent dims
TokenizerData synth_tokenizer(int vocab);         // vocab >= 260

// The tensor table synth_model writes: knot names, types chosen for o.type, shapes.
std::vector<KnotTensorDesc> synth_tensors(const SynthOptions& o);

// The tokenizer synth_model writes: synth_tokenizer(o.vocab) or the imported vocabulary.
TokenizerData synth_model_tokenizer(const SynthOptions& o);

// Writes GGUF when path ends in .gguf, .knot otherwise; returns the config written.
ModelConfig synth_model(const SynthOptions& o, const std::string& path);

}  // namespace knot
