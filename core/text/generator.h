// generator.h — the token loop of generation, one step at a time: sample, decode to
// complete UTF-8, match stop strings, decide when and why to stop. It owns no model:
// each step takes the logits of the last position — either the full logits or a
// merged top-k + log-sum-exp from vocab shards (SliceTopK, sampler.h) — and the caller
// runs the forward pass for the returned id when the step is not done.
//
//   Generator g(tok, params, n_vocab, n_ctx);
//   g.start(prompt, n);  logits = eval(prompt);
//   while (!g.done()) { GenStep s = g.step(logits, n_vocab); show(s.text); if (!s.done) logits = eval(s.id); }
//
// Engine::generate, the wasm session (kw_session_step) and the mesh coordinator
// (kw_generator_*, bindings/generator.mjs) are thin loops over it, so the three give
// the same ids and bytes for the same logits.
//
// Stop reasons: "eog" (end-of-generation token, not decoded; unless ignore_eos),
// "stop" (a stop string completed: it and everything after it are dropped), "length"
// (n_predict tokens sampled), "context" (the next position would not fit n_ctx), or
// whatever the caller passes to stop() (e.g. "callback" when the reader went away).
// On eog/length/context the decoder's held-back bytes are flushed into the last text.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "text/sampler.h"
#include "text/vocab.h"

namespace knot {

struct GenerateParams {
  int n_predict = 128;
  SamplerParams sampling;
  std::vector<std::string> stop;  // stop strings (not emitted)
  bool ignore_eos = false;        // keep going past end-of-generation tokens
  int lookup = 0;                 // speculative decoding: draft up to this many tokens by prompt lookup (0: off)
};

struct GenStep {
  int32_t id = -1;       // the sampled token
  std::string text;      // complete UTF-8 released by this step (may be empty)
  bool done = false;
  std::string reason;    // "" while running, else the stop reason
};

class Generator {
 public:
  // n_vocab: sampleable ids [0, n_vocab) (tensor padding rows excluded); n_ctx: positions
  // the caller's KV cache holds (0: no limit). tok must outlive the Generator.
  Generator(const Tokenizer& tok, const GenerateParams& p, int n_vocab, int n_ctx = 0);

  // A new sequence: the prompt's ids feed the repetition penalty. Resets the sampler
  // (seed), decoder, stop matching and counters. Done at once when n_predict == 0.
  void start(const int32_t* prompt, int n);
  // More prompt ids (a prefill fed in pieces), before the first step.
  void extend_prompt(const int32_t* ids, int n);
  // One token from the logits of the last position: [n >= n_vocab] ...
  GenStep step(const float* logits, int n);
  // ... or from a merged shard top-k (Sampler::sample_topk: exact within k).
  GenStep step(const SliceTopK& merged);
  // Speculative decoding: the logits of the position a drafted token was fed for, and
  // that token (Sampler::sample_draft). *accepted: the step's id is the draft, so the
  // positions fed after it stay valid; else the caller drops them (KV truncation).
  GenStep step_draft(const float* logits, int n, int32_t draft, bool* accepted);
  // ... or over a merged shard top-k (Sampler::sample_draft_topk).
  GenStep step_draft(const SliceTopK& merged, int32_t draft, bool* accepted);
  // End early with `reason` (held-back text is dropped, as for a stop string).
  void stop(const std::string& reason);

  bool done() const { return done_; }
  const std::string& reason() const { return reason_; }
  const std::vector<int32_t>& ids() const { return ids_; }   // generated (an EOG token included)
  std::string text() const { return text_.substr(0, emitted_); }  // all text released so far
  int n_generated() const { return (int)ids_.size(); }
  const GenerateParams& params() const { return p_; }

 private:
  GenStep after_sample(int32_t id);
  void finish(GenStep& s, const char* why);
  void release(GenStep& s, size_t upto);

  const Tokenizer& tok_;
  GenerateParams p_;
  int n_ctx_;
  Sampler sampler_;
  std::optional<StreamDecoder> dec_;
  int n_prompt_ = 0;
  size_t max_stop_ = 0;
  std::string text_;    // all decoded text
  size_t emitted_ = 0;  // bytes of text_ released
  std::vector<int32_t> ids_;
  bool started_ = false, done_ = false;
  std::string reason_;
};

}  // namespace knot
