// draft_model.cpp — see draft_model.h.
#include "infer/draft_model.h"

#include <algorithm>

#include "kernels/common.h"

namespace knot {

void check_same_vocab(const TokenizerData& t, const TokenizerData& d, const std::string& tn, const std::string& dn) {
  const std::string both = "draft model " + dn + " and target model " + tn;
  if (t.tokens.size() != d.tokens.size())
    fail(both + " have different vocabularies: " + std::to_string(d.tokens.size()) + " vs " +
         std::to_string(t.tokens.size()) + " tokens");
  for (size_t i = 0; i < t.tokens.size(); i++)
    if (t.tokens[i] != d.tokens[i])
      fail(both + " have different vocabularies: token " + std::to_string(i) + " is \"" + d.tokens[i] + "\" vs \"" +
           t.tokens[i] + "\"");
  if (t.bos_id != d.bos_id || t.eos_id != d.eos_id || t.eot_id != d.eot_id)
    fail(both + " have different special tokens (bos/eos/eot)");
}

DraftModel::DraftModel(Engine& e, int k, bool one_hot) : e_(e), k_(k), one_hot_(one_hot) {
  if (k < 1 || k > 64) fail("draft_n must be in 1..64, got " + std::to_string(k));
}

void DraftModel::reset() {
  fed_.clear();
  e_.reset();
}

size_t DraftModel::keep(const std::vector<int32_t>& hist) {
  size_t c = 0;
  const size_t lim = std::min(fed_.size(), (size_t)e_.n_pos());
  while (c < lim && c < hist.size() && fed_[c] == hist[c]) c++;
  if (c == hist.size() && c > 0) c--;  // the last token is re-fed for its logits
  e_.truncate((int)c);
  fed_.resize(c);
  return c;
}

void DraftModel::prime(const std::vector<int32_t>& hist) {
  if (hist.size() < 2 || (int)hist.size() > e_.n_ctx()) return;
  const size_t c = keep(hist), n = hist.size() - 1;
  if (c >= n) return;
  e_.eval(hist.data() + c, (int)(n - c));
  fed_.insert(fed_.end(), hist.begin() + c, hist.begin() + n);
}

std::vector<int32_t> DraftModel::propose(const std::vector<int32_t>& hist, int room, Generator* g,
                                         std::vector<Sampler::Dist>* q) {
  if (q) q->clear();
  const int k = std::min(k_, room);
  if (k <= 0 || hist.empty()) return {};
  const bool sample = g && q && g->samples() && !one_hot_;
  const size_t c = keep(hist);  // the KV positions that still match hist
  // hist[c..], then each proposal but the last; stop where the draft's context ends
  if ((int)hist.size() + k - 1 > e_.n_ctx()) return {};
  const float* lg = e_.eval(hist.data() + c, (int)(hist.size() - c));
  passes_++;
  fed_.insert(fed_.end(), hist.begin() + c, hist.end());
  const int V = e_.n_logits();
  std::vector<int32_t> out;
  out.reserve(k);
  if (!sample) {
    for (int i = 0; i < k; i++) {
      const int32_t id = (int32_t)(std::max_element(lg, lg + V) - lg);
      out.push_back(id);
      if (i + 1 < k) {
        lg = e_.eval(&id, 1);
        passes_++;
        fed_.push_back(id);
      }
    }
    return out;
  }
  // Sampling drafts: the request's chain and RNG; its penalty window and grammar are put
  // back afterwards, also when a pass throws.
  struct Drafting {
    Generator& g;
    ~Drafting() { g.draft_end(); }
  } drafting{*g};
  g->draft_begin();
  for (int i = 0; i < k; i++) {
    q->emplace_back();
    const int32_t id = g->draft_sample(lg, V, q->back());
    if (id < 0) {
      q->pop_back();
      break;
    }
    out.push_back(id);
    if (i + 1 < k) {
      lg = e_.eval(&id, 1);
      passes_++;
      fed_.push_back(id);
    }
  }
  return out;
}

}  // namespace knot
