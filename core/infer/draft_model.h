// draft_model.h — the second draft source of speculative decoding (infer/speculative.h): a
// small model with the target's vocabulary, run in its own Engine (its own KV cache),
// proposes the next K tokens; the target verifies them in one pass.
//
// Contract:
//   - check_same_vocab(target, draft, names) throws, naming both models, unless the two
//     tokenizers have the same token list (ids mean the same text) and the same special ids.
//   - DraftModel::propose(hist, k, g, q) returns up to k tokens of the draft model after
//     hist. The draft's KV is kept in step with hist lazily: it holds the tokens it was last
//     fed (hist then plus its own proposals); each call truncates it to the longest common
//     prefix with the new hist (the rejected drafts go) and feeds only the new tokens.
//   - Greedy drafts (no generator, a greedy request, or one_hot): the argmax over the
//     draft's sampleable ids [0, n_logits) — padding rows excluded, ties to the lowest id —
//     so q is one-hot and q stays empty: Sampler::sample_draft's rule for a deterministic
//     draft (keep with p(draft), else draw from p without it) is the standard min(1, p/q) /
//     norm(max(0, p - q)) rule.
//   - Sampling drafts (a generator g whose request samples, one_hot false): each token is
//     drawn from the draft model's distribution after the request's own chain
//     (Generator::draft_sample: penalties, grammar, top-k, top-p, min-p, temperature, the
//     request's RNG), and q[i] is that distribution; the verifier keeps draft i with
//     probability min(1, p/q[i]), else draws from norm(max(0, p - q[i])). A grammar
//     constrains the drafts too (they are drawn from its allowed tokens); drafting stops
//     early where the grammar allows nothing or a draft ends generation.
//   - Either way the output is distributed as plain decoding (greedy: identical ids).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "container/model.h"
#include "infer/generate.h"

namespace knot {

void check_same_vocab(const TokenizerData& target, const TokenizerData& draft, const std::string& target_name,
                      const std::string& draft_name);

class DraftModel {
 public:
  // e must outlive the DraftModel; k: tokens proposed per pass (>= 1). one_hot: propose the
  // argmax even when the request samples (the rule before sampling drafts; comparisons).
  DraftModel(Engine& e, int k, bool one_hot = false);
  int k() const { return k_; }
  bool one_hot() const { return one_hot_; }
  // Up to min(k, room) tokens after hist (hist: prompt + generated ids, non-empty); fewer
  // when the draft's context runs out (or a sampling draft stops early). g: the request's
  // generator (sampling drafts when it samples; nullptr: greedy); q: cleared, then for a
  // sampling draft one distribution per returned token (left empty for greedy drafts).
  std::vector<int32_t> propose(const std::vector<int32_t>& hist, int room, Generator* g = nullptr,
                               std::vector<Sampler::Dist>* q = nullptr);
  // Feed hist but its last token (the prompt, during the target's prefill), so the first
  // propose() runs one position; optional — propose() feeds whatever is missing.
  void prime(const std::vector<int32_t>& hist);
  // Forget the fed tokens.
  void reset();
  int passes() const { return passes_; }  // draft forward passes, for telemetry

 private:
  size_t keep(const std::vector<int32_t>& hist);  // truncate to the common prefix with hist
  Engine& e_;
  int k_;
  bool one_hot_;
  std::vector<int32_t> fed_;  // the tokens in the draft's KV, positions 0 .. n-1
  int passes_ = 0;
};

}  // namespace knot
