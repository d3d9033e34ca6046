// speculative.h — the decode loop over an Engine: one forward pass per token, or, with
// drafting, up to K drafted tokens verified in one pass. Two draft sources: prompt lookup
// (llama.cpp's lookup decoding, below) and a small draft model with the same vocabulary
// (infer/draft_model.h, run in its own Engine, kept in step with the accepted tokens;
// greedy, or sampling its drafts from its own distribution q when the request samples).
//
// Drafting: draft_lookup finds the most recent earlier occurrence of the history's last n
// tokens (n = ngram_max .. 1, kLookupNgramMax = 12 by default) and proposes the tokens that
// followed it — no draft model; it pays off where the reply repeats its context (code edits,
// quoting, lists). The longest suffix wins: on real code edits (bench/lookup-acceptance.mjs,
// Qwen tokenizer, K = 6) n <= 12 accepts 92% of drafts against 72% with n <= 3.
// How many: LookupBudget adapts the drafts per pass (at most K) to the passes before, so
// prose, where lookup drafts are rarely kept, stops paying K useless rows a pass.
// bindings/generator.mjs (draftLookup, LookupBudget) is the same rule for the mesh
// coordinator; tests/wasm/lookup-rule.test.mjs compares the two through the wasm ABI.
// Verification: the token just sampled and the K drafts run as one batch (Engine::eval_rows,
// KV appended for all K + 1 positions); the logits of position i verify draft i + 1
// (Generator::step_draft: greedy keeps it when it is the argmax; sampling keeps it with
// probability min(1, p(draft)/q(draft)), else draws from norm(max(0, p - q)) — q one-hot
// for lookup and greedy drafts: keep with p(draft), else draw from p without it — the
// standard acceptance rule, so the output distribution is the plain one). The first rejected draft ends the pass: the
// KV cache is truncated to the positions that stay valid and the replacement token is fed
// next. When every draft is kept, the last row's logits give one more token for free.
// Greedy output is identical to plain decoding; seeded sampling is distributed the same
// but is not the same draw.
//
// The loop is lazy: next() runs the forward pass the previous token needs only when the
// next token is asked for, so a caller that stops (a stop string, a closed stream) never
// pays for a pass it does not use. Engine::generate and the wasm session (kw_session_step)
// both run it.
#pragma once
#include <cstdint>
#include <vector>

#include "infer/draft_model.h"
#include "infer/generate.h"
#include "text/generator.h"

namespace knot {

constexpr int kLookupNgramMax = 12;

// Up to k tokens that followed the latest earlier occurrence of hist's last n tokens,
// trying n = ngram_max down to 1; empty when nothing matches.
std::vector<int32_t> draft_lookup(const std::vector<int32_t>& hist, int k, int ngram_max = kLookupNgramMax);

// The number of lookup drafts the next pass asks for (before the room bounds it), from the
// passes so far. Starts at k. update(drafted, accepted) after every pass:
//  - every draft kept (drafted > 0): double, at most k;
//  - none kept (drafted > 0): halve, at least 1; already at 1: rest — the next kRest passes
//    draft nothing, then a probe pass drafts 1 again (and the rule goes on from 1);
//  - some kept, or nothing drafted: unchanged (a pass during the rest counts it down).
// Drafting never changes greedy output; this only decides how many rows a pass carries.
class LookupBudget {
 public:
  static constexpr int kRest = 4;
  explicit LookupBudget(int k) : k_(k), cur_(k) {}
  int size() const { return rest_ > 0 ? 0 : cur_; }
  void update(int drafted, int accepted);

 private:
  int k_, cur_, rest_ = 0;
};

class DecodeLoop {
 public:
  // lookup: draft up to this many tokens per pass (0: plain decoding; LookupBudget decides
  // how many of them each pass asks for). draft: a draft
  // model instead of the lookup (its k() tokens per pass; lookup is then ignored). e, g
  // and draft must outlive the loop; g has been started with the prompt.
  DecodeLoop(Engine& e, Generator& g, int lookup, DraftModel* draft = nullptr);

  // After the prefill: the prompt (the lookup's history) and its last position's logits.
  void begin(const std::vector<int32_t>& prompt, const float* logits);

  struct Next {
    GenStep step;
    const float* logits;  // what the step sampled from ([n_logits]; valid until the next call)
  };
  // The next token. Call while !g.done().
  Next next();

  int drafted() const { return drafted_; }
  int accepted() const { return accepted_; }
  int passes() const { return passes_; }  // forward passes after the prefill

 private:
  Engine& e_;
  Generator& g_;
  int lookup_;
  DraftModel* draft_;
  LookupBudget budget_;          // lookup only (a draft model drafts its k() every pass)
  std::vector<int32_t> hist_;    // prompt + generated ids
  const float* lg_ = nullptr;    // logits for the next plain step
  int32_t pending_ = -1;         // sampled, not yet fed
  std::vector<int32_t> batch_;   // the verify pass: [pending, drafts...]
  std::vector<Sampler::Dist> q_; // a sampling draft model's q of each draft (empty: one-hot)
  const float* rows_ = nullptr;  // its logits [batch_.size(), n_logits]
  size_t vi_ = 0;                // next row to consume
  int base_ = 0;                 // KV position of batch_[0]
  int drafted_ = 0, accepted_ = 0, passes_ = 0;
};

}  // namespace knot
