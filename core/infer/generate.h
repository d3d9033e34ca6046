// generate.h — run a whole model locally: chunked prefill, one-position decode, and the
// token loop of text/generator.h (sampling, UTF-8 streaming, stop strings), telemetry.
//
// Modes:
//   Mode::Fast      — Kernel::Simd (activations quantized inside matmul), F16 KV cache.
//   Mode::Reference — Kernel::Reference (dequantized weights, f32 activations), F32 KV.
// Prefill runs in chunks of EngineOptions::chunk tokens; per token the math does not
// depend on the chunk (activations are quantized per token, attention is per token), so
// the chunk size changes the result by float rounding at most.
// Memory: all buffers (KV cache for n_ctx, activations for one chunk) are sized once at
// construction; the decode loop does not allocate. peak_bytes() reports KV + activation
// buffers (weights are the Model's and not counted).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "infer/forward.h"
#include "infer/kv_cache.h"
#include "container/model.h"
#include "text/generator.h"
#include "text/sampler.h"
#include "text/vocab.h"

namespace knot {

enum class Mode { Fast, Reference };
const char* mode_name(Mode m);
ForwardOptions forward_options_for(Mode m);

// The context of EngineOptions::n_ctx (0: min(n_ctx_train, 2048), 2048 when the file does
// not say). The JS bindings' defaultContext (bindings/options.mjs) is this rule.
int context_of(const ModelConfig& c, int n_ctx);

struct EngineOptions;
// What an Engine of this config and options allocates (KV cache for its context, the
// workspace for a chunk, the residual, logits) plus verify_rows rows of eval_rows()
// (speculative decoding), in 64-bit arithmetic (wasm32's size_t would wrap): the memory
// check a host runs before constructing one (kw_session_new).
uint64_t engine_bytes(const ModelConfig& c, const EngineOptions& o, int verify_rows = 0);

struct EngineOptions {
  Mode mode = Mode::Fast;
  int n_ctx = 0;     // 0: min(n_ctx_train, 2048) (2048 when the file does not say)
  int chunk = 64;    // prefill chunk (tokens per batched forward)
  size_t kv_budget = SIZE_MAX;
  // Overrides the mode's kernel / KV type when set (experiments, tests).
  std::optional<ForwardOptions> forward;
  // Monotonic clock in seconds for telemetry; nullptr: steady_clock natively, no timing
  // in wasm (the host measures there).
  double (*clock)() = nullptr;
};

struct Telemetry {
  int n_prompt = 0;    // tokens prefilled
  int n_decoded = 0;   // forward passes after the prefill (one per step; a verify pass counts once)
  int n_drafted = 0;   // speculative decoding: tokens drafted, and of those accepted
  int n_accepted = 0;
  int n_generated = 0; // tokens sampled
  double prefill_s = 0, decode_s = 0;
  size_t peak_bytes = 0;
  double prefill_tok_s() const { return prefill_s > 0 ? n_prompt / prefill_s : 0; }
  double decode_tok_s() const { return decode_s > 0 ? std::max(0, n_generated - 1) / decode_s : 0; }
};

struct GenerateResult {
  std::vector<int32_t> ids;  // generated ids (prompt excluded; an EOG token is included)
  std::string text;          // emitted text (stop string excluded)
  std::string stop_reason;   // "eog" | "stop" | "length" | "context" | "callback"
};

// Called with each piece of complete UTF-8 text; return false to stop.
using TextCallback = std::function<bool(const std::string& piece)>;

class DraftModel;  // infer/draft_model.h

class Engine {
 public:
  // Checks every layer's tensors up front (missing tensor -> error naming layer, phase,
  // tensor), allocates the KV cache (budget error names budget and requirement).
  // m is referenced, not copied: it must outlive the Engine.
  Engine(const Model& m, const EngineOptions& o = {});

  const ModelConfig& config() const { return m_.config; }
  const ForwardOptions& forward_options() const { return fo_; }
  int n_ctx() const { return n_ctx_; }
  int n_pos() const { return kv_.n_pos(); }
  int n_logits() const { return n_logits_; }  // tokenizer vocab (padding rows excluded)

  // Runs ids at positions n_pos() .. n_pos()+n-1 (chunked), returns the logits of the last
  // one: [n_logits()]. Throws when the positions exceed the context or an id is outside
  // the vocabulary (nothing is appended in that case).
  const float* eval(const int32_t* ids, int n);
  // Runs n <= chunk() ids as eval() does, returns the logits of every one of them:
  // [n, n_logits()] (speculative decoding: one pass verifies n - 1 drafted tokens). The
  // rows stay valid until the next eval_rows().
  const float* eval_rows(const int32_t* ids, int n);
  const float* logits() const { return logits_.data(); }
  // An embedding of ids (from position 0: the session is reset first and left holding
  // them): the mean over their positions of the final normed hidden state (output_norm of
  // the last layer's output), L2-normalised. [n_embd]; valid until the next embed().
  const float* embed(const int32_t* ids, int n);
  int chunk() const { return chunk_; }
  void truncate(int n_pos) { kv_.truncate(n_pos); }
  void reset() { kv_.truncate(0); }

  // Prefill prompt (from position 0), then sample up to n_predict tokens: a loop of
  // Generator steps over eval(). on_text returning false ends it with reason "callback".
  GenerateResult generate(const Tokenizer& tok, const std::vector<int32_t>& prompt,
                          const GenerateParams& p, const TextCallback& on_text = {},
                          DraftModel* draft = nullptr);  // speculative decoding with a draft model

  const Telemetry& telemetry() const { return tel_; }
  size_t bytes() const;  // KV + activation buffers now
  size_t peak_bytes() const;
  const KvCache& kv() const { return kv_; }

 private:
  void forward_chunk(const int32_t* ids, int n, bool want_logits, bool all_rows = false);
  void check_eval(const int32_t* ids, int n) const;
  double now() const;

  const Model& m_;
  EngineOptions opt_;
  ForwardOptions fo_;
  int n_ctx_ = 0, chunk_ = 0, n_logits_ = 0;
  std::vector<LayerWeights> layers_;
  const Tensor* tok_embd_ = nullptr;
  const Tensor* out_norm_ = nullptr;
  const Tensor* lm_head_ = nullptr;
  KvCache kv_;
  Workspace ws_;
  std::vector<float> x_;       // [chunk, n_embd] residual stream
  std::vector<float> xl_;      // [n_embd]        normed last row
  std::vector<float> logits_;  // [n_logits]
  std::vector<float> xn_rows_;     // [rows, n_embd]   eval_rows: every row normed (sized on first use)
  std::vector<float> logit_rows_;  // [rows, n_logits] eval_rows: every row's logits
  std::vector<float> pooled_;      // [n_embd]         embed: the pooled, normalised row
  Telemetry tel_;
};

}  // namespace knot
