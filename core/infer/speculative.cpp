// speculative.cpp — see speculative.h.
#include "infer/speculative.h"

#include <algorithm>

#include "kernels/common.h"

namespace knot {

std::vector<int32_t> draft_lookup(const std::vector<int32_t>& hist, int k, int ngram_max) {
  const int len = (int)hist.size();
  if (k <= 0) return {};
  for (int n = std::min(ngram_max, len - 1); n >= 1; n--) {
    const int32_t* pat = hist.data() + len - n;
    // latest earlier occurrence: start j < len - n, followed by at least one token
    for (int j = len - n - 1; j >= 0; j--) {
      if (!std::equal(pat, pat + n, hist.data() + j)) continue;
      const int from = j + n, to = std::min(len, from + k);
      return std::vector<int32_t>(hist.begin() + from, hist.begin() + to);
    }
  }
  return {};
}

void LookupBudget::update(int drafted, int accepted) {
  if (rest_ > 0) {
    rest_--;
    return;
  }
  if (drafted <= 0) return;
  if (accepted >= drafted) {
    cur_ = std::min(k_, 2 * cur_);
  } else if (accepted == 0) {
    if (cur_ <= 1) rest_ = kRest;
    else cur_ = std::max(1, cur_ / 2);
  }
}

DecodeLoop::DecodeLoop(Engine& e, Generator& g, int lookup, DraftModel* draft)
    : e_(e), g_(g), lookup_(draft ? draft->k() : lookup), draft_(draft), budget_(lookup_) {
  if (lookup < 0) fail("lookup must be >= 0, got " + std::to_string(lookup));
}

void DecodeLoop::begin(const std::vector<int32_t>& prompt, const float* logits) {
  hist_ = prompt;
  lg_ = logits;
  budget_ = LookupBudget(lookup_);
  pending_ = -1;
  rows_ = nullptr;
  batch_.clear();
  q_.clear();
}

DecodeLoop::Next DecodeLoop::next() {
  const int V = e_.n_logits();
  if (g_.done()) fail("decode: generation already finished (" + g_.reason() + ")");
  if (!rows_ && pending_ >= 0) {
    // Feed the pending token, with drafts when the lookup finds some that fit the context,
    // the batch and the tokens still to generate.
    std::vector<int32_t> drafts;
    if (lookup_ > 0) {
      const int room = std::min({e_.n_ctx() - e_.n_pos() - 1, e_.chunk() - 1, g_.params().n_predict - g_.n_generated(),
                                 draft_ ? lookup_ : budget_.size()});
      q_.clear();
      if (room > 0) drafts = draft_ ? draft_->propose(hist_, room, &g_, &q_) : draft_lookup(hist_, room);
    }
    passes_++;
    if (drafts.empty()) {
      budget_.update(0, 0);
      lg_ = e_.eval(&pending_, 1);
      pending_ = -1;
    } else {
      batch_.assign(1, pending_);
      batch_.insert(batch_.end(), drafts.begin(), drafts.end());
      base_ = e_.n_pos();
      rows_ = e_.eval_rows(batch_.data(), (int)batch_.size());
      vi_ = 0;
      drafted_ += (int)drafts.size();
      pending_ = -1;
    }
  }
  Next r{};
  if (rows_) {
    const size_t i = vi_++;
    r.logits = rows_ + i * (size_t)V;
    if (i + 1 < batch_.size()) {  // verify draft i + 1
      bool kept = false;
      r.step = g_.step_draft(r.logits, V, batch_[i + 1], &kept, q_.empty() ? nullptr : &q_[i]);
      if (kept) {
        accepted_++;
        hist_.push_back(r.step.id);
        return r;
      }
      e_.truncate(base_ + (int)i + 1);  // the rejected draft and those after it
      budget_.update((int)batch_.size() - 1, (int)i);
    } else {                            // every draft kept: the last row's token
      r.step = g_.step(r.logits, V);
      budget_.update((int)batch_.size() - 1, (int)batch_.size() - 1);
    }
    rows_ = nullptr;
  } else {
    r.logits = lg_;
    r.step = g_.step(lg_, V);
  }
  hist_.push_back(r.step.id);
  if (!r.step.done) pending_ = r.step.id;
  return r;
}

}  // namespace knot
