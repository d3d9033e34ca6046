// draft_model.h — the second draft source of speculative decoding (infer/speculative.h): a
// small model with the target's vocabulary, run greedily in its own Engine (its own KV
// cache), proposes the next K tokens; the target verifies them in one pass.
//
// Contract:
//   - check_same_vocab(target, draft, names) throws, naming both models, unless the two
//     tokenizers have the same token list (ids mean the same text) and the same special ids.
//   - DraftModel::propose(hist, k) returns k greedy tokens of the draft model after hist.
//     The draft's KV is kept in step with hist lazily: it holds the tokens it was last fed
//     (hist then plus its own proposals); each call truncates it to the longest common
//     prefix with the new hist (the rejected drafts go) and feeds only the new tokens.
//   - The draft is greedy, so its proposal distribution q is one-hot: the acceptance rule of
//     Sampler::sample_draft (keep with p(draft), else draw from p without the draft) is the
//     standard min(1, p/q) / norm(max(0, p - q)) rule, and the output is distributed as
//     plain decoding (greedy: identical).
//   - Argmax over the draft's sampleable ids [0, n_logits) — padding rows excluded; ties go
//     to the lowest id.
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
  // e must outlive the DraftModel; k: tokens proposed per pass (>= 1).
  DraftModel(Engine& e, int k);
  int k() const { return k_; }
  // Up to min(k, room) greedy tokens after hist (hist: prompt + generated ids, non-empty);
  // fewer when the draft's context runs out.
  std::vector<int32_t> propose(const std::vector<int32_t>& hist, int room);
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
  std::vector<int32_t> fed_;  // the tokens in the draft's KV, positions 0 .. n-1
  int passes_ = 0;
};

}  // namespace knot
