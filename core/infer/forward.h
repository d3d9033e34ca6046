// forward.h — the transformer forward pass as plain per-phase functions.
//
// Every phase takes the tensors it needs (LayerWeights holds const Tensor* only), so a
// caller may load a phase's tensors just before the call and free them right after
// (fluid mode) or keep them resident. Activations are row-major f32:
//   x: [ntok, n_embd]   residual stream of ntok consecutive positions pos0..pos0+ntok-1
// Phases never modify x; they write the residual CONTRIBUTION (caller does x += out).
// Batched prefill: every projection is one matmul over the ntok rows (activations are
// quantized once per token inside matmul for Kernel::Scalar/Simd).
//
// Slices for the mesh (sum of the slices' partials == the unsliced result):
//  * attention heads [h0,h1): h0 and h1 must be multiples of the GQA group size
//    n_head/n_head_kv, so the slice owns whole KV heads [h0/g, h1/g) and its KV cache holds
//    exactly those heads. The output projection uses columns [h0*head_dim, h1*head_dim)
//    of attn_output.
//  * FFN columns [c0,c1) of the n_ff intermediate dim: rows [c0,c1) of gate/up and
//    columns [c0,c1) of ffn_down.
// Column slices of a matrix (attn_output, ffn_down): W is stored as rows of the full input
// length, so a column slice is a sub-range of every row. When c0 and c1 are multiples of
// the weight type's block size (32 for Q8_0/Q4_0, 256 for K-quants, 1 for F32/F16) the
// sub-rows are copied (still quantized) into a tile of <= kColTileRows rows and multiplied —
// same quantization as the unsliced call, partials sum to it up to float rounding.
// Otherwise the tile rows are dequantized to f32 and the tile multiplies with f32
// activations (correct, slower, and differs from the unsliced quantized-activation result
// by activation-quantization noise). Example, qwen2.5-7b (g = 7, head_dim 128, Q4_K
// attn_output): 7-head slices are 896 columns (unaligned, f32 path); 14-head slices are
// 1792 = 7 x 256 (aligned). A planner should prefer aligned cuts.
// Tensors already cut to the slice are used as is: q/k/v/gate/up (and biases) with only
// the slice's rows, attn_output/ffn_down with rows of c1-c0 elements.
// Every slice recomputes the RMS norm of the full x (cheap; keeps phases independent).
//
// Errors: a missing required tensor throws "missing tensor blk_3_ffn_up_weight (layer 3,
// phase ffn_up)"; a tensor of the wrong shape names tensor, expected and actual shape.
// No stdio here (compiled into the standalone wasm module).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "infer/kv_cache.h"
#include "container/model.h"

namespace knot {

struct ForwardOptions {
  Kernel kernel = Kernel::Simd;
  KvType kv_type = KvType::F16;
};

// The tensors of one layer; nullptr where absent (biases are optional, everything else
// is required by the phase that uses it).
struct LayerWeights {
  int layer = -1;
  const Tensor* attn_norm = nullptr;    // [n_embd]
  const Tensor* attn_q = nullptr;       // rows n_head*head_dim    x cols n_embd
  const Tensor* attn_k = nullptr;       // rows n_head_kv*head_dim x cols n_embd
  const Tensor* attn_v = nullptr;       // rows n_head_kv*head_dim x cols n_embd
  const Tensor* attn_output = nullptr;  // rows n_embd x cols n_head*head_dim
  const Tensor* attn_q_bias = nullptr;  // [n_head*head_dim]    (qwen2)
  const Tensor* attn_k_bias = nullptr;  // [n_head_kv*head_dim] (qwen2)
  const Tensor* attn_v_bias = nullptr;  // [n_head_kv*head_dim] (qwen2)
  const Tensor* attn_q_norm = nullptr;  // [head_dim] per-head RMSNorm of q before RoPE (qwen3)
  const Tensor* attn_k_norm = nullptr;  // [head_dim] per-head RMSNorm of k before RoPE (qwen3)
  const Tensor* ffn_norm = nullptr;     // [n_embd]
  const Tensor* ffn_gate = nullptr;     // rows n_ff x cols n_embd
  const Tensor* ffn_up = nullptr;       // rows n_ff x cols n_embd
  const Tensor* ffn_down = nullptr;     // rows n_embd x cols n_ff
};

// Binds the layer's tensors of the model's architecture (arch.h's table) by knot name;
// absent -> nullptr, and with loaded_only also tensors whose bytes are not loaded.
LayerWeights layer_weights(const Model& m, int layer, bool loaded_only = false);
// Throws (Model::get message: tensor, layer, phase) for the first required tensor absent.
void check_layer_tensors(const Model& m, int layer);

// Scratch buffers reused across calls (no allocation in the hot path once sized).
// Sized lazily by the phases for (ntok, context); bytes() reports the current total.
struct Workspace {
  std::vector<float> xn;      // [ntok, n_embd]      normed input
  std::vector<float> q;       // [ntok, nh*head_dim]
  std::vector<float> k;       // [ntok, nkv*head_dim]
  std::vector<float> v;       // [ntok, nkv*head_dim]
  std::vector<float> att;     // [ntok, nh*head_dim]  attention output before projection
  std::vector<float> kf, vf;  // [n_ctx, head_dim]    one KV head as f32
  std::vector<float> scores;  // [n_ctx]
  std::vector<float> up;      // [ntok, n_ff slice]
  std::vector<float> tmp;     // small: dequantized norm/bias vectors
  std::vector<float> ytile;   // [ntok, kColTileRows]
  std::vector<float> rowf;    // [cols] one dequantized row (unaligned column slices)
  std::vector<uint8_t> wtile; // gathered weight tile
  std::vector<float> delta;   // [ntok, n_embd]  phase output (forward_layers)
  std::vector<float> hidden;  // [ntok, n_ff]    FFN hidden (forward_layers)
  // Pre-size for chunks of up to max_tok tokens and a context of n_ctx positions, so the
  // decode loop never allocates.
  void reserve(const ModelConfig& cfg, int max_tok, int n_ctx);
  size_t bytes() const;
  size_t peak = 0;            // largest bytes() seen after a phase
  void note_peak();
  void release();             // free all buffers (peak is kept)
};

constexpr int kColTileRows = 32;

// ---- elementwise building blocks -------------------------------------------------

// out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]        x, w, out: [n]
void rmsnorm(const float* x, const float* w, int n, float eps, float* out);
// Rotates ntok rows of n_heads heads in place. x: [ntok, row_stride], head h of token t at
// x + t*row_stride + h*head_dim. Norm: pairs (2i, 2i+1); Neox: pairs (i, i+rope_dims/2).
// Dims >= rope_dims are left alone. Position of token t is pos0 + t.
void rope(float* x, int ntok, int row_stride, int n_heads, int head_dim, int rope_dims,
          int pos0, float theta, RopeStyle style);
// h[i] = silu(g[i]) * u[i]
void swiglu(float* g, const float* u, size_t n);
// y[i] = tanh(y[i]/c)*c  (c > 0)
void softcap(float* y, size_t n, float c);

// Y[ntok, rows] = X[ntok, cols] @ W^T, rows [r0,r1) of W only (Y: [ntok, r1-r0]).
// Uses matvec for ntok == 1.
void project_rows(const Tensor& W, int64_t r0, int64_t r1, const float* X, int64_t ntok,
                  float* Y, Kernel k);
// Y[ntok, rows(W)] = X[ntok, c1-c0] @ W[:, c0:c1]^T — column slice, see header comment.
void project_cols(const Tensor& W, int64_t c0, int64_t c1, const float* X, int64_t ntok,
                  float* Y, Kernel k, Workspace& ws);

// ---- per-layer phases --------------------------------------------------------------

// attention phase for heads [h0,h1) (h1 = -1: all heads): attn_norm, q/k/v (+bias),
// per-head q/k RMSNorm when the layer has attn_q_norm/attn_k_norm (qwen3), RoPE, append k/v of positions [pos0, pos0+ntok) to kv, causal grouped-query attention
// over positions [0, pos0+t], output projection through the matching attn_output columns.
// kv must hold layer w.layer and exactly KV heads [h0/g, h1/g); kv.n_pos(layer) == pos0.
// x: [ntok, n_embd] -> out: [ntok, n_embd] (partial residual contribution)
void attn(const ModelConfig& cfg, const LayerWeights& w, KvCache& kv, int pos0,
          const float* x, int ntok, float* out, const ForwardOptions& o, Workspace& ws,
          int h0 = 0, int h1 = -1);

// FFN over intermediate columns [c0,c1) (c1 = -1: n_ff); nc = c1-c0.
// ffn_gate: h = ffn_norm(x) @ gate[c0:c1]^T              x: [ntok, n_embd] -> h: [ntok, nc]
// ffn_up:   h = silu(h) * (ffn_norm(x) @ up[c0:c1]^T)    (h holds ffn_gate's output)
// ffn_down: out = h @ down[:, c0:c1]^T                    h: [ntok, nc] -> out: [ntok, n_embd]
// ffn_gate_up: ffn_gate then ffn_up (both tensors resident).
void ffn_gate(const ModelConfig& cfg, const LayerWeights& w, const float* x, int ntok, float* h,
              const ForwardOptions& o, Workspace& ws, int c0 = 0, int c1 = -1);
void ffn_up(const ModelConfig& cfg, const LayerWeights& w, const float* x, int ntok, float* h,
            const ForwardOptions& o, Workspace& ws, int c0 = 0, int c1 = -1);
void ffn_gate_up(const ModelConfig& cfg, const LayerWeights& w, const float* x, int ntok,
                 float* h, const ForwardOptions& o, Workspace& ws, int c0 = 0, int c1 = -1);
void ffn_down(const ModelConfig& cfg, const LayerWeights& w, const float* h, int ntok,
              float* out, const ForwardOptions& o, Workspace& ws, int c0 = 0, int c1 = -1);

// A layer station: runs layers [kv.layer_begin(), kv.layer_end()) on x in place
// (attn, x += out, ffn_gate_up, ffn_down, x += out per layer), positions pos0.., with
// resident weights. layers[i] holds layer kv.layer_begin() + i.   x: [ntok, n_embd]
void forward_layers(const ModelConfig& cfg, const LayerWeights* layers, KvCache& kv, int pos0,
                    float* x, int ntok, const ForwardOptions& o, Workspace& ws);

// ---- embedding and lm_head (vocab slices) ------------------------------------------

// out[t] = row ids[t] of token_embd when v0 <= ids[t] < v1, else zeros.   out: [ntok, n_embd]
// tensor_row0: vocab id of the tensor's first row (a shard may hold only rows [v0,v1)).
// Throws for an id < 0 or >= n_vocab_limit (naming the index and id).
void embed_rows(const Tensor& token_embd, const int32_t* ids, int ntok, int64_t v0, int64_t v1,
                int64_t n_vocab_limit, float* out, int64_t tensor_row0 = 0);

// out = output_norm(x)     x, out: [ntok, n_embd]
void output_norm(const ModelConfig& cfg, const Tensor& norm, const float* x, int ntok, float* out,
                 Workspace& ws);

// The lm_head: output_weight, or token_embd when the model has none (tied embeddings).
const Tensor& lm_head_tensor(const Model& m);

// logits[t, v-v0] = xn[t] . W[v]  for v in [v0,v1); optional softcap (c > 0).
// xn: [ntok, n_embd] (already output-normed) -> logits: [ntok, v1-v0]
void lm_head_logits(const Tensor& W, const float* xn, int ntok, int64_t v0, int64_t v1,
                    float* logits, Kernel k, float softcap_c = 0.f, int64_t tensor_row0 = 0);

}  // namespace knot
