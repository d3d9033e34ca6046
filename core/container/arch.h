// arch.h — the architecture table (llama.cpp's llama-arch.cpp is the model): per GGUF
// architecture, the tensors it has (in file order), whether each is required, and the
// RoPE style and defaults; per tensor, its name, the phases that read it and its shape
// in terms of the config. The tensor-set check (model_io), layer-weight binding and the
// phase checks (forward), `knot synth`, and the wasm ABI's model info (and through it
// the JS in bindings/) all read these tables; nothing else lists tensor names.
//
// Adding an architecture: one ArchInfo row in kArchs (arch.cpp) listing its tensors —
// add a TensorId + TensorInfo row only for a tensor no architecture had before — plus
// the forward code that is really new (e.g. Qwen3's per-head q/k RMSNorm in attn()),
// and a LayerWeights field when the new tensor is per layer (forward.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "container/model.h"

namespace knot {

// The per-layer phases of the forward pass (docs/memory.md), plus the model-level tensors.
enum Phase : unsigned {
  PHASE_EMBED = 1u << 0,     // token_embd rows (a vocab shard)
  PHASE_ATTN = 1u << 1,
  PHASE_FFN_GATE = 1u << 2,
  PHASE_FFN_UP = 1u << 3,
  PHASE_FFN_DOWN = 1u << 4,
  PHASE_OUTPUT = 1u << 5,    // output_norm and the lm_head
};
const char* phase_name(unsigned single_phase);  // "attn", "ffn_gate", ...

enum class TensorId : uint8_t {
  TOKEN_EMBD, OUTPUT_NORM, OUTPUT,
  ATTN_NORM, ATTN_Q, ATTN_K, ATTN_V, ATTN_OUT,
  ATTN_Q_BIAS, ATTN_K_BIAS, ATTN_V_BIAS,
  ATTN_Q_NORM, ATTN_K_NORM,  // qwen3: per-head RMSNorm of q and k before RoPE
  FFN_NORM, FFN_GATE, FFN_UP, FFN_DOWN,
  COUNT
};
constexpr int kTensorIds = (int)TensorId::COUNT;

// Config quantities a shape is written in.
enum class Dim : uint8_t { None, Embd, QDim, KvDim, Ff, VocabTensor, HeadDim };
const char* dim_name(Dim d);                          // "n_embd", "n_head*head_dim", ...
int64_t dim_value(Dim d, const ModelConfig& c);

// How a mesh slice cuts a per-layer tensor (forward.h's slice rules; the planner sizes
// slices with it): whole, its rows, its columns or its elements, over the slice's heads,
// KV heads or FFN columns.
enum class SliceCut : uint8_t { Whole, Rows, Cols, Elems };
enum class SliceOver : uint8_t { None, Heads, KvHeads, Ffn };

// How `knot synth` fills a tensor (uniform values, see synth.h).
enum class SynthInit : uint8_t { Ones, Embedding, FanIn, FanInResidual, Bias };

struct TensorInfo {
  TensorId id;
  const char* base;   // "attn_q": GGUF blk.N.attn_q.weight, knot blk_N_attn_q_weight
  const char* kind;   // "weight" | "bias"
  bool per_layer;
  unsigned phases;    // Phase bits of the phases that read it
  Dim shape[2];       // ggml order: shape[0] = row length; Dim::None = 1-D
  SliceCut cut;
  SliceOver over;
  SynthInit synth;
};
const TensorInfo& tensor_info(TensorId id);

enum class Need : uint8_t {
  Required,    // must be present
  UnlessTied,  // required unless the model ties the lm_head to token_embd (output)
  Expected,    // optional on load, written by synth (qwen2's q/k/v biases)
  Optional,    // optional on load, not written by synth
};
struct ArchTensor {
  TensorId id;
  Need need;
};

struct ArchInfo {
  const char* name;  // general.architecture
  RopeStyle rope_style;
  float rope_theta;  // defaults when the file does not say (and for synth)
  float rms_eps;
  std::vector<ArchTensor> tensors;  // file order (synth writes them in this order)
};

// nullptr when unknown.
const ArchInfo* find_arch(const std::string& name);
// Throws "<what>: unsupported architecture 'x' (supported: llama, qwen2, qwen3)".
const ArchInfo& arch_info(const std::string& name, const std::string& what);
const std::vector<ArchInfo>& all_archs();
std::string supported_archs();  // "llama, qwen2, qwen3"

// Names: knot "blk_3_attn_q_weight" / GGUF "blk.3.attn_q.weight" (layer ignored for
// model-level tensors).
std::string tensor_knot_name(TensorId id, int layer = -1);
std::string tensor_gguf_name(TensorId id, int layer = -1);
// Expected shape for config c (ggml order) and its text ("n_embd x n_head*head_dim").
std::vector<int64_t> tensor_shape(TensorId id, const ModelConfig& c);
std::string tensor_dims_text(TensorId id);

// The knot names of the tensors phase `phase` reads in `layer` for architecture arch
// (required and optional, in table order).
std::vector<std::string> phase_tensor_names(const ArchInfo& a, unsigned phase, int layer);

}  // namespace knot
