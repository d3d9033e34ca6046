#include "infer/generate.h"
#include "infer/speculative.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "container/arch.h"
#include "kernels/common.h"

#if !defined(__wasm__)
#include <chrono>
#endif

namespace knot {

namespace {

std::string S(int64_t v) { return std::to_string(v); }

double steady_seconds() {
#if defined(__wasm__)
  return 0;
#else
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
#endif
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string o;
  for (size_t i = 0; i < s.size(); i++) o += (i ? " x " : "") + S(s[i]);
  return o;
}

// A layer's tensor shapes against the config (the architecture table's shapes), named as
// the forward pass names them (tensor, layer, phase) with the config fields of the shape.
void check_layer_shapes(const Model& m, int l) {
  for (const ArchTensor& at : arch_info(m.config.arch, "model").tensors) {
    const TensorInfo& ti = tensor_info(at.id);
    if (!ti.per_layer) continue;
    const Tensor* t = m.find(tensor_knot_name(at.id, l));
    const std::vector<int64_t> want = tensor_shape(at.id, m.config);
    if (t && t->shape != want)
      fail("tensor " + t->name + " has shape " + shape_text(t->shape) + ", the config wants " + shape_text(want) + " (" +
           tensor_dims_text(at.id) + ") (layer " + S(l) + ", phase " + phase_name(ti.phases & (~ti.phases + 1)) + ")");
  }
}

}  // namespace

const char* mode_name(Mode m) { return m == Mode::Fast ? "fast" : "reference"; }

ForwardOptions forward_options_for(Mode m) {
  ForwardOptions f;
  f.kernel = m == Mode::Fast ? Kernel::Simd : Kernel::Reference;
  f.kv_type = m == Mode::Fast ? KvType::F16 : KvType::F32;
  return f;
}

int context_of(const ModelConfig& c, int n_ctx) {
  return n_ctx > 0 ? n_ctx : (c.n_ctx_train > 0 ? std::min(c.n_ctx_train, 2048) : 2048);
}

uint64_t engine_bytes(const ModelConfig& c, const EngineOptions& o, int verify_rows) {
  const uint64_t n_ctx = (uint64_t)context_of(c, o.n_ctx);
  const uint64_t T = (uint64_t)std::max(1, std::min<int>(o.chunk, (int)n_ctx));
  const KvType kvt = o.forward ? o.forward->kv_type : forward_options_for(o.mode).kv_type;
  const uint64_t hd = (uint64_t)std::max(0, c.head_dim), E = (uint64_t)std::max(0, c.n_embd), F = (uint64_t)std::max(0, c.n_ff);
  const uint64_t nh = (uint64_t)std::max(0, c.n_head), nkv = (uint64_t)std::max(0, c.n_head_kv), V = (uint64_t)std::max(0, c.n_vocab);
  const uint64_t kv = n_ctx * 2 * (uint64_t)std::max(0, c.n_layer) * nkv * hd * kv_elem_bytes(kvt);
  // Workspace::reserve's buffers (floats), then x_, xl_, logits_, and the verify rows
  const uint64_t ws = T * E + 2 * T * nh * hd + 2 * T * nkv * hd + 2 * n_ctx * hd + n_ctx + 2 * T * F +
                      std::max(E, nh * hd) + T * E;
  const uint64_t fixed = T * E + E + V;
  const uint64_t rows = (uint64_t)std::max(0, verify_rows) * (E + V);
  return kv + 4 * (ws + fixed + rows);
}

Engine::Engine(const Model& m, const EngineOptions& o) : m_(m), opt_(o) {
  const ModelConfig& c = m.config;
  fo_ = o.forward ? *o.forward : forward_options_for(o.mode);
  if (c.n_layer <= 0 || c.n_embd <= 0 || c.n_head <= 0 || c.n_head_kv <= 0 || c.head_dim <= 0 ||
      c.n_ff <= 0)
    fail("model config is incomplete (n_layer " + S(c.n_layer) + ", n_embd " + S(c.n_embd) +
         ", n_head " + S(c.n_head) + ", n_head_kv " + S(c.n_head_kv) + ", head_dim " +
         S(c.head_dim) + ", n_ff " + S(c.n_ff) + ")");
  n_ctx_ = context_of(c, o.n_ctx);
  chunk_ = std::max(1, std::min(o.chunk, n_ctx_));

  tok_embd_ = &m.get("token_embd_weight", -1, "embed");
  out_norm_ = &m.get("output_norm_weight", -1, "output");
  lm_head_ = &lm_head_tensor(m);
  if (tok_embd_->ne0() != c.n_embd)
    fail("tensor token_embd_weight has rows of " + S(tok_embd_->ne0()) + " elements, expected n_embd " +
         S(c.n_embd));
  if (lm_head_->ne0() != c.n_embd)
    fail("tensor " + lm_head_->name + " has rows of " + S(lm_head_->ne0()) +
         " elements, expected n_embd " + S(c.n_embd));
  n_logits_ = c.n_vocab > 0 ? c.n_vocab : (int)lm_head_->nrows();
  if (n_logits_ > lm_head_->nrows())
    fail("vocabulary of " + S(n_logits_) + " tokens but tensor " + lm_head_->name + " has only " +
         S(lm_head_->nrows()) + " rows");
  if (n_logits_ > tok_embd_->nrows())
    fail("vocabulary of " + S(n_logits_) + " tokens but tensor token_embd_weight has only " +
         S(tok_embd_->nrows()) + " rows");

  // Every buffer below is sized from the config, so the config is checked against the
  // tensors first: a crafted n_layer = 2^31-1 stops at the first missing layer, and a
  // crafted n_ff = 2^28 is a shape error naming the field, not a 1 TB allocation.
  for (int l = 0; l < c.n_layer; l++) {
    check_layer_tensors(m, l);
    check_layer_shapes(m, l);
  }
  try {
    layers_.resize(c.n_layer);
    for (int l = 0; l < c.n_layer; l++) layers_[l] = layer_weights(m, l);
    kv_ = KvCache(c, 0, c.n_layer, n_ctx_, fo_.kv_type, o.kv_budget);
    ws_.reserve(c, chunk_, n_ctx_);
    x_.resize((size_t)chunk_ * c.n_embd);
    xl_.resize(c.n_embd);
    logits_.resize(n_logits_);
  } catch (const std::bad_alloc&) {
    fail("out of memory sizing the session's buffers (n_ctx " + S(n_ctx_) + ", chunk " + S(chunk_) + ", n_embd " +
         S(c.n_embd) + ", n_ff " + S(c.n_ff) + ", n_layer " + S(c.n_layer) + ")");
  } catch (const std::length_error&) {
    fail("session buffers too large for this platform (n_ctx " + S(n_ctx_) + ", chunk " + S(chunk_) + ", n_embd " +
         S(c.n_embd) + ", n_ff " + S(c.n_ff) + ", n_layer " + S(c.n_layer) + ")");
  }
  tel_.peak_bytes = peak_bytes();
}

double Engine::now() const { return opt_.clock ? opt_.clock() : steady_seconds(); }

size_t Engine::bytes() const {
  return kv_.bytes() + ws_.bytes() +
         (x_.capacity() + xl_.capacity() + logits_.capacity()) *
             sizeof(float);
}

size_t Engine::peak_bytes() const {
  // ws_.peak covers the workspace's own high-water mark; everything else is fixed size.
  const size_t fixed = bytes() - ws_.bytes();
  return std::max(fixed + ws_.peak, bytes());
}

void Engine::forward_chunk(const int32_t* ids, int n, bool want_logits, bool all_rows) {
  const ModelConfig& c = m_.config;
  const int E = c.n_embd;
  const int pos0 = kv_.n_pos();
  float* x = x_.data();  // [n, E]
  embed_rows(*tok_embd_, ids, n, 0, tok_embd_->nrows(), n_logits_, x);
  forward_layers(c, layers_.data(), kv_, pos0, x, n, fo_, ws_);
  if (!want_logits) return;
  const int rows = all_rows ? n : 1;
  float* xn = all_rows ? xn_rows_.data() : xl_.data();
  float* lg = all_rows ? logit_rows_.data() : logits_.data();
  output_norm(c, *out_norm_, x + (size_t)(n - rows) * E, rows, xn, ws_);
  lm_head_logits(*lm_head_, xn, rows, 0, n_logits_, lg, fo_.kernel);
  // Never sample from garbage: a NaN/Inf here means broken weights or an overflow.
  for (int r = 0; r < rows; r++)
    for (int i = 0; i < n_logits_; i++)
      if (!std::isfinite(lg[(size_t)r * n_logits_ + i]))
        fail("non-finite logit for token " + S(i) + " at position " + S(pos0 + n - rows + r) +
             " (corrupt weights or activation overflow)");
}

void Engine::check_eval(const int32_t* ids, int n) const {
  if (n <= 0) fail("eval: no tokens");
  const int pos = kv_.n_pos();
  if (pos + n > n_ctx_)
    fail(S(n) + " tokens at position " + S(pos) + " exceed the context of " + S(n_ctx_) +
         " positions");
  for (int i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= n_logits_)
      fail("token " + S(i) + " has id " + S(ids[i]) + ", outside the vocabulary [0," +
           S(n_logits_) + ")");
}

const float* Engine::eval_rows(const int32_t* ids, int n) {
  check_eval(ids, n);
  if (n > chunk_) fail("eval_rows: " + S(n) + " tokens exceed the batch of " + S(chunk_));
  const size_t E = (size_t)m_.config.n_embd;
  if (xn_rows_.size() < (size_t)n * E) {
    xn_rows_.resize((size_t)n * E);
    logit_rows_.resize((size_t)n * n_logits_);
  }
  const int pos = kv_.n_pos();
  try {
    forward_chunk(ids, n, true, true);
  } catch (...) {
    kv_.truncate(pos);
    throw;
  }
  tel_.peak_bytes = std::max(tel_.peak_bytes, peak_bytes());
  return logit_rows_.data();
}

const float* Engine::eval(const int32_t* ids, int n) {
  check_eval(ids, n);
  const int pos = kv_.n_pos();
  try {
    for (int i = 0; i < n; i += chunk_) {
      const int nt = std::min(chunk_, n - i);
      forward_chunk(ids + i, nt, i + nt == n);
    }
  } catch (...) {
    kv_.truncate(pos);  // leave the session where it was
    throw;
  }
  tel_.peak_bytes = std::max(tel_.peak_bytes, peak_bytes());
  return logits_.data();
}

const float* Engine::embed(const int32_t* ids, int n) {
  reset();
  check_eval(ids, n);
  const ModelConfig& c = m_.config;
  const size_t E = (size_t)c.n_embd;
  if (xn_rows_.size() < (size_t)chunk_ * E) xn_rows_.resize((size_t)chunk_ * E);
  std::vector<double> sum(E, 0.0);
  try {
    for (int i = 0; i < n; i += chunk_) {
      const int nt = std::min(chunk_, n - i);
      embed_rows(*tok_embd_, ids + i, nt, 0, tok_embd_->nrows(), n_logits_, x_.data());
      forward_layers(c, layers_.data(), kv_, kv_.n_pos(), x_.data(), nt, fo_, ws_);
      output_norm(c, *out_norm_, x_.data(), nt, xn_rows_.data(), ws_);
      for (int t = 0; t < nt; t++)
        for (size_t e = 0; e < E; e++) sum[e] += xn_rows_[(size_t)t * E + e];
    }
  } catch (...) {
    reset();
    throw;
  }
  double norm = 0;
  for (size_t e = 0; e < E; e++) { sum[e] /= n; norm += sum[e] * sum[e]; }
  norm = std::sqrt(norm);
  if (!std::isfinite(norm)) fail("embed: non-finite hidden state (corrupt weights or activation overflow)");
  pooled_.resize(E);
  for (size_t e = 0; e < E; e++) pooled_[e] = norm > 0 ? (float)(sum[e] / norm) : 0.f;
  tel_.peak_bytes = std::max(tel_.peak_bytes, peak_bytes());
  return pooled_.data();
}

GenerateResult Engine::generate(const Tokenizer& tok, const std::vector<int32_t>& prompt,
                                const GenerateParams& p, const TextCallback& on_text, DraftModel* draft) {
  if (prompt.empty()) fail("generate: empty prompt (at least BOS is needed)");
  Generator gen(tok, p, n_logits_, n_ctx_);
  gen.start(prompt.data(), (int)prompt.size());
  reset();
  tel_ = Telemetry{};
  const double t0 = now();
  const float* lg = eval(prompt.data(), (int)prompt.size());
  if (draft) draft->prime(prompt);  // the draft model's prefill counts as prefill
  const double t1 = now();
  tel_.n_prompt = (int)prompt.size();
  tel_.prefill_s = t1 - t0;
  DecodeLoop loop(*this, gen, p.lookup, draft);
  loop.begin(prompt, lg);
  while (!gen.done()) {
    const GenStep s = loop.next().step;
    tel_.n_generated++;
    tel_.n_decoded = loop.passes();
    tel_.n_drafted = loop.drafted();
    tel_.n_accepted = loop.accepted();
    tel_.decode_s = now() - t1;  // sampling included
    if (!s.text.empty() && on_text && !on_text(s.text) && !s.done) gen.stop("callback");
  }
  tel_.peak_bytes = std::max(tel_.peak_bytes, peak_bytes());
  return GenerateResult{gen.ids(), gen.text(), gen.reason()};
}

}  // namespace knot
