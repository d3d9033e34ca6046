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
//
// Grammar (GenerateParams::grammar, GBNF text: text/grammar.h; json_schema.h compiles a
// JSON Schema to one): only tokens whose bytes continue the grammar are sampled
// (Sampler::sample(..., allowed): the others count as logit -inf), an end-of-generation
// token only where the grammar can end (and it then ends generation, ignore_eos or not;
// a token with no text, e.g. a control token, never). Once the output is complete and
// nothing can follow, generation ends with reason "grammar". From the full logits a
// position where no token of the vocabulary can continue is an error; from a merged top-k
// holding no allowed token the step returns need_wider: nothing is sampled or consumed,
// and the caller steps again for the same position with a wider top-k or the full logits.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "text/grammar.h"
#include "text/sampler.h"
#include "text/vocab.h"

namespace knot {

struct GenerateParams {
  int n_predict = 128;
  SamplerParams sampling;
  std::vector<std::string> stop;  // stop strings (not emitted)
  bool ignore_eos = false;        // keep going past end-of-generation tokens
  int lookup = 0;                 // speculative decoding: draft up to this many tokens by prompt lookup (0: off)
  std::string grammar;            // GBNF text constraining the output; empty: none
};

struct GenStep {
  int32_t id = -1;       // the sampled token
  std::string text;      // complete UTF-8 released by this step (may be empty)
  bool done = false;
  std::string reason;    // "" while running, else the stop reason
  // Top-k step with a grammar: no listed token is allowed; nothing happened (id -1).
  bool need_wider = false;
};

class Generator {
 public:
  // n_vocab: sampleable ids [0, n_vocab) (tensor padding rows excluded); n_ctx: positions
  // the caller's KV cache holds (0: no limit). tok must outlive the Generator. A grammar
  // that does not parse throws knot::UsageError (grammar.h).
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
  // q: the distribution the draft was drawn from (draft_sample), null: one-hot at draft.
  GenStep step_draft(const float* logits, int n, int32_t draft, bool* accepted, const Sampler::Dist* q = nullptr);
  // ... or over a merged shard top-k (Sampler::sample_draft_topk).
  GenStep step_draft(const SliceTopK& merged, int32_t draft, bool* accepted, const Sampler::Dist* q = nullptr);
  // Sampling drafts (DraftModel::propose): between draft_begin() and draft_end(),
  // draft_sample() turns a draft model's logits into the distribution q this request would
  // sample from at the position after the drafts before it — the same chain (penalties over
  // the history and those drafts, the grammar advanced over them, top-k, top-p, min-p,
  // temperature) — and draws a token from q with the request's RNG (one uniform). It
  // returns -1, drawing nothing, when nothing more should be drafted: the grammar allows no
  // token, or the previous draft ended generation (an end-of-generation token, a complete
  // grammar). draft_end() puts the penalty window and the grammar back as they were at
  // draft_begin() (the RNG keeps its draws: a seed still reproduces the whole run).
  // samples(): the request samples (temperature > 0); greedy requests draft greedily.
  bool samples() const { return p_.sampling.temperature > 0.f; }
  void draft_begin();
  int32_t draft_sample(const float* logits, int n, Sampler::Dist& q);
  void draft_end();
  // End early with `reason` (held-back text is dropped, as for a stop string).
  void stop(const std::string& reason);

  bool done() const { return done_; }
  const std::string& reason() const { return reason_; }
  const std::vector<int32_t>& ids() const { return ids_; }   // generated (an EOG token included)
  std::string text() const { return text_.substr(0, emitted_); }  // all text released so far
  int n_generated() const { return (int)ids_.size(); }
  const GenerateParams& params() const { return p_; }
  // The grammar's matcher (nullptr without one): what it has matched so far.
  const GrammarMatcher* grammar() const { return matcher_ ? &*matcher_ : nullptr; }
  // Would the grammar take token id next? (true without a grammar)
  bool allowed(int32_t id) const;
  // allowed() for every id < n_vocab at once: mask[id] = 0/1 (a walk over the vocabulary
  // sorted by bytes, so shared prefixes are matched once and a refused prefix skips every
  // token that starts with it).
  void allowed_mask(std::vector<uint8_t>& mask) const;

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
  // grammar
  std::optional<GrammarMatcher> matcher_;
  std::vector<std::string> pieces_;  // [n_vocab] token bytes, as the decoder emits them
  std::vector<uint8_t> eog_;         // [n_vocab]
  std::vector<int32_t> by_bytes_;    // ids of non-empty, non-EOG pieces sorted by bytes
  std::vector<uint32_t> lcp_;        // [i]: bytes piece(by_bytes_[i]) shares with the one before
  mutable std::vector<GrammarMatcher::State> walk_;  // allowed_mask(): state after d bytes
  TokenFilter filter_;
  // first_ok_[b]: a piece starting with byte b may be allowed (for the matcher's state
  // when first_fresh_ is set; a quick refusal for most of a 152k vocabulary)
  mutable bool first_ok_[256] = {};
  mutable bool first_fresh_ = false;
  // drafting (draft_begin .. draft_end): the state to restore
  bool drafting_ = false, draft_stop_ = false;
  std::deque<int32_t> draft_window_;
  std::optional<GrammarMatcher> draft_matcher_;
};

}  // namespace knot
