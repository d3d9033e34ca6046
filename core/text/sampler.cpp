// sampler.cpp — llama.cpp-style sampling chain: repetition penalty -> top-k -> top-p
// -> min-p -> temperature -> draw. Bit-identical across platforms: the RNG is our own
// splitmix64, exp() is our own (basic IEEE ops only), candidate order is a total order
// (logit desc, id asc), and floating-point contraction into FMA is disabled here so
// x86, ARM and wasm round the same way.
#include "kernels/no_fp_contract.h"  // first: no FMA contraction in this file

#include "text/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/common.h"

namespace knot {

uint64_t splitmix64_next(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// exp(x) from +, *, floor and ldexp only, so every platform gets the same bits
// (libm expf/exp differ in the last ulp between glibc, musl and emscripten).
// Relative error ~1e-16, far below what sampling can notice.
double det_exp(double x) {
  if (std::isnan(x)) return x;
  if (x < -745.0) return 0.0;
  if (x > 709.0) return std::numeric_limits<double>::infinity();
  const double ln2_hi = 6.93147180369123816490e-01;  // ln2 split so k*ln2_hi is exact
  const double ln2_lo = 1.90821492927058770002e-10;
  const double inv_ln2 = 1.44269504088896338700e+00;
  const double kd = std::floor(x * inv_ln2 + 0.5);
  const double r = (x - kd * ln2_hi) - kd * ln2_lo;  // |r| <= 0.35
  // Taylor series to r^13 (remainder < 1e-17 for |r| <= 0.35), Horner form.
  double p = 1.0 / 6227020800.0;  // 1/13!
  const double inv_fact[] = {1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0,
                             1.0 / 40320.0,     1.0 / 5040.0,     1.0 / 720.0,     1.0 / 120.0,
                             1.0 / 24.0,        1.0 / 6.0,        1.0 / 2.0,       1.0,
                             1.0};
  for (double c : inv_fact) p = p * r + c;
  const int k = (int)kd;
  if (k < -1021) return std::ldexp(p, k);  // subnormal result: let ldexp round it
  // p * 2^k with 2^k built from its bit pattern: an exact scaling, cheaper than ldexp.
  const uint64_t bits = (uint64_t)(k + 1023) << 52;
  double scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

namespace {

// Uniform in [0, 1) with 53 random bits.
double uniform01(uint64_t& state) { return (double)(splitmix64_next(state) >> 11) * 0x1.0p-53; }

// Strict total order: higher logit first, lower id on ties. (A function object so
// the sort calls inline it.)
struct Better {
  bool operator()(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) const {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  }
};
constexpr Better better{};

}  // namespace

Sampler::Sampler(const SamplerParams& p, int n_vocab) : p_(p), n_vocab_(n_vocab), rng_state_(p.seed) {
  if (n_vocab <= 0) fail("sampler: n_vocab must be positive, got " + std::to_string(n_vocab));
  if (!std::isfinite(p.temperature)) fail("sampler: temperature is not finite");
  if (!std::isfinite(p.top_p) || !std::isfinite(p.min_p)) fail("sampler: top_p/min_p not finite");
  if (!(p.repeat_penalty > 0.f) || !std::isfinite(p.repeat_penalty))
    fail("sampler: repeat_penalty must be > 0, got " + std::to_string(p.repeat_penalty));
  if (!std::isfinite(p.presence_penalty) || !std::isfinite(p.frequency_penalty))
    fail("sampler: presence_penalty/frequency_penalty not finite");
}

void Sampler::accept(int32_t id) {
  if (p_.repeat_last_n == 0) return;
  recent_.push_back(id);
  if (p_.repeat_last_n > 0)
    while ((int)recent_.size() > p_.repeat_last_n) recent_.pop_front();
}

void Sampler::reset() {
  recent_.clear();
  rng_state_ = p_.seed;
}

int32_t Sampler::sample(const float* logits, int n) {
  if (logits == nullptr || n < n_vocab_)
    fail("sampler: got " + std::to_string(n) + " logits, vocab has " + std::to_string(n_vocab_));
  cand_.resize(n_vocab_);
  // Ids >= n_vocab are tensor padding: never candidates.
  for (int32_t i = 0; i < n_vocab_; i++) cand_[i] = {logits[i], i};
  return sample_cand(true);
}

int32_t Sampler::sample(const float* logits, int n, const TokenFilter& allowed) {
  if (!allowed) return sample(logits, n);
  if (logits == nullptr || n < n_vocab_)
    fail("sampler: got " + std::to_string(n) + " logits, vocab has " + std::to_string(n_vocab_));
  cand_.resize(n_vocab_);
  for (int32_t i = 0; i < n_vocab_; i++) cand_[i] = {logits[i], i};
  return sample_cand(true, nullptr, &allowed);
}

int32_t Sampler::sample_topk(const SliceTopK& t, const TokenFilter& allowed) {
  if (!allowed) return sample_topk(t);
  if (t.ids.size() != t.logits.size())
    fail("sampler: top-k list has " + std::to_string(t.ids.size()) + " ids but " + std::to_string(t.logits.size()) +
         " logits");
  cand_.clear();
  for (size_t i = 0; i < t.ids.size(); i++)
    if (t.ids[i] >= 0 && t.ids[i] < n_vocab_) cand_.push_back({t.logits[i], t.ids[i]});
  std::sort(cand_.begin(), cand_.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  for (size_t i = 1; i < cand_.size(); i++)
    if (cand_[i].second == cand_[i - 1].second) fail("sampler: top-k list holds id " + std::to_string(cand_[i].second) + " twice");
  if (cand_.empty()) return -1;
  return sample_cand(false, nullptr, &allowed);
}

bool Sampler::filter_cand(const TokenFilter& f, bool* sorted) {
  *sorted = false;
  const bool greedy = p_.temperature <= 0.f;
  const bool lazy = greedy || p_.top_k > 0 || (p_.top_p >= 1.0f && p_.min_p > 0.f);
  const bool full_vocab = cand_.size() == (size_t)n_vocab_;
  auto keep_allowed = [&](size_t from) {  // order-preserving compaction of cand_[from..]
    size_t keep = from;
    if (f.mask && full_vocab && cand_.size() - from > 1024) {
      mask_.clear();
      f.mask(mask_);
      if (mask_.size() < (size_t)n_vocab_) fail("sampler: token filter mask has " + std::to_string(mask_.size()) + " entries, vocab " + std::to_string(n_vocab_));
      for (size_t i = from; i < cand_.size(); i++)
        if (mask_[cand_[i].second]) cand_[keep++] = cand_[i];
    } else {
      for (size_t i = from; i < cand_.size(); i++)
        if (f.allowed(cand_[i].second)) cand_[keep++] = cand_[i];
    }
    cand_.resize(keep);
  };
  if (!lazy) {
    keep_allowed(0);
    return !cand_.empty();
  }
  // In `better` order: the best kAsk candidates asked one by one; if that does not settle
  // it, the rest filtered at once (mask), sorted, and taken in order.
  constexpr size_t kAsk = 1024;
  const size_t want = greedy ? 1 : p_.top_k > 0 ? (size_t)p_.top_k : SIZE_MAX;
  std::vector<std::pair<float, int32_t>> kept;
  bool settled = false;
  auto take = [&](const std::pair<float, int32_t>& c, bool ask) {  // false: stop
    if (c.first == -std::numeric_limits<float>::infinity()) return false;  // and all after it
    // min-p (top-k off, top-p off): once a token is below min_p of the best allowed one,
    // so is every one after it
    if (want == SIZE_MAX && !kept.empty() && det_exp((double)c.first - (double)kept[0].first) < (double)p_.min_p) return false;
    if (!ask || f.allowed(c.second)) kept.push_back(c);
    return kept.size() < want;
  };
  const size_t head = std::min(kAsk, cand_.size());
  if (head < cand_.size()) std::nth_element(cand_.begin(), cand_.begin() + (long)head, cand_.end(), better);
  std::sort(cand_.begin(), cand_.begin() + (long)head, better);
  size_t i = 0;
  for (; i < head; i++)
    if (!take(cand_[i], true)) { settled = true; break; }
  if (!settled && head < cand_.size()) {
    keep_allowed(head);
    std::sort(cand_.begin() + (long)head, cand_.end(), better);
    for (size_t j = head; j < cand_.size(); j++)
      if (!take(cand_[j], false)) break;
  }
  cand_.swap(kept);
  *sorted = true;
  return !cand_.empty();
}

int32_t Sampler::sample_candidates(const int32_t* ids, const float* logits, int n) {
  if (n < 0 || (n > 0 && (ids == nullptr || logits == nullptr)))
    fail("sampler: bad candidate list (n=" + std::to_string(n) + ")");
  cand_.clear();
  for (int i = 0; i < n; i++)
    if (ids[i] >= 0 && ids[i] < n_vocab_) cand_.push_back({logits[i], ids[i]});
  if (cand_.empty()) fail("sampler: no candidate id below n_vocab " + std::to_string(n_vocab_));
  return sample_cand(false);
}

void Sampler::topk_cand(const SliceTopK& t) {
  if (t.ids.size() != t.logits.size())
    fail("sampler: top-k list has " + std::to_string(t.ids.size()) + " ids but " + std::to_string(t.logits.size()) +
         " logits");
  cand_.clear();
  for (size_t i = 0; i < t.ids.size(); i++)
    if (t.ids[i] >= 0 && t.ids[i] < n_vocab_) cand_.push_back({t.logits[i], t.ids[i]});
  if (cand_.empty()) fail("sampler: top-k list has no id below n_vocab " + std::to_string(n_vocab_));
  // The full pass walks the vocabulary in id order; so must we, for the same draw.
  std::sort(cand_.begin(), cand_.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  for (size_t i = 1; i < cand_.size(); i++)
    if (cand_[i].second == cand_[i - 1].second) fail("sampler: top-k list holds id " + std::to_string(cand_[i].second) + " twice");
}

int32_t Sampler::sample_topk(const SliceTopK& t) {
  topk_cand(t);
  return sample_cand(false, &t);
}

// top-p over an unsorted list without sorting all of it: bucket the candidates by
// logit distance from the max, find the bucket where the cumulative mass (buckets in
// descending-logit order) reaches target, keep every earlier bucket whole and sort
// only the boundary bucket. Keeps the same set as a full sort up to summation order.
void Sampler::top_p_unsorted(double target, float max_logit, float min_logit, const std::vector<double>& w) {
  constexpr int B = 1024;
  constexpr double kMaxRange = 80.0;  // exp(-80) ~ 2e-35: beyond that mass is nil
  min_logit = std::min(min_logit, max_logit);
  for (const auto& c : cand_)
    if (c.first > -std::numeric_limits<float>::infinity()) min_logit = std::min(min_logit, c.first);
  const double range = std::min(kMaxRange, (double)max_logit - (double)min_logit);
  const double scale = range > 0 ? (B - 1) / range : 0.0;
  std::vector<uint16_t> bucket(cand_.size());  // [n_cand]
  std::vector<double> mass(B, 0.0);             // [B]
  for (size_t i = 0; i < cand_.size(); i++) {  // hot loop
    const double d = (double)max_logit - (double)cand_[i].first;
    // the max (d = 0) is always bucket 0, also when every logit is equal (range 0): it
    // went to the last bucket then, and top_p <= 0 kept nothing (found by fuzz_sampler)
    const int b = d <= 0 ? 0 : d < range ? std::min(B - 1, (int)(d * scale)) : B - 1;  // -inf -> last
    bucket[i] = (uint16_t)b;
    mass[b] += w[i];
  }
  int edge = B;  // first bucket whose mass makes the cumulative reach target
  double cum = 0;
  for (int b = 0; b < B; b++) {
    if (cum + mass[b] >= target) { edge = b; break; }
    cum += mass[b];
  }
  if (edge == B) return;  // rounding left the total just short: keep everything
  std::vector<std::pair<float, int32_t>> kept, boundary;
  std::vector<double> wb;
  for (size_t i = 0; i < cand_.size(); i++) {
    if (bucket[i] < edge) kept.push_back(cand_[i]);
    else if (bucket[i] == edge) boundary.push_back(cand_[i]);
  }
  std::sort(boundary.begin(), boundary.end(), better);
  for (const auto& c : boundary) {
    kept.push_back(c);
    cum += det_exp((double)c.first - (double)max_logit);
    if (cum >= target) break;
  }
  cand_.swap(kept);
}

int32_t Sampler::sample_cand(bool full_vocab, const SliceTopK* whole, const TokenFilter* allowed) {
  int32_t best_id = -1;
  if (!filter(full_vocab, whole, &best_id, allowed)) return best_id;
  // Draw (in the current order, which is deterministic).
  const double u = uniform01(rng_state_) * w_sum_;
  double cum = 0;
  for (size_t i = 0; i < cand_.size(); i++) {
    cum += w_[i];
    if (u < cum) return cand_[i].second;
  }
  return cand_.back().second;  // u rounded up to sum
}

double Sampler::Dist::at(int32_t id) const {
  for (size_t i = 0; i < ids.size(); i++)
    if (ids[i] == id) return p[i];
  return 0;
}

bool Sampler::dist(const float* logits, int n, Dist& d, const TokenFilter* allowed) {
  if (logits == nullptr || n < n_vocab_)
    fail("sampler: got " + std::to_string(n) + " logits, vocab has " + std::to_string(n_vocab_));
  cand_.resize(n_vocab_);
  for (int32_t i = 0; i < n_vocab_; i++) cand_[i] = {logits[i], i};
  d.ids.clear();
  d.p.clear();
  int32_t best_id = -1;
  if (!filter(true, nullptr, &best_id, allowed)) {
    if (best_id < 0) return false;
    d.ids.push_back(best_id);  // greedy (or an infinite logit): one-hot at the argmax
    d.p.push_back(1.0);
    return true;
  }
  d.ids.resize(cand_.size());
  d.p.resize(cand_.size());
  for (size_t i = 0; i < cand_.size(); i++) d.ids[i] = cand_[i].second, d.p[i] = w_[i] / w_sum_;
  return true;
}

int32_t Sampler::draw(const Dist& d) {
  if (d.ids.empty() || d.ids.size() != d.p.size()) fail("sampler: draw from an empty distribution");
  const double u = uniform01(rng_state_);
  double cum = 0;
  for (size_t i = 0; i < d.ids.size(); i++) {
    cum += d.p[i];
    if (u < cum) return d.ids[i];
  }
  return d.ids.back();  // u rounded up to the sum
}

Sampler::Draft Sampler::sample_draft(const float* logits, int n, int32_t draft, const TokenFilter* allowed,
                                     const Dist* q) {
  if (logits == nullptr || n < n_vocab_)
    fail("sampler: got " + std::to_string(n) + " logits, vocab has " + std::to_string(n_vocab_));
  cand_.resize(n_vocab_);
  for (int32_t i = 0; i < n_vocab_; i++) cand_[i] = {logits[i], i};
  return draft_cand(true, nullptr, draft, allowed, q);
}

Sampler::Draft Sampler::sample_draft_topk(const SliceTopK& t, int32_t draft, const Dist* q) {
  topk_cand(t);
  return draft_cand(false, &t, draft, nullptr, q);
}

Sampler::Draft Sampler::draft_cand(bool full_vocab, const SliceTopK* whole, int32_t draft, const TokenFilter* allowed,
                                   const Dist* q) {
  int32_t best_id = -1;
  if (!filter(full_vocab, whole, &best_id, allowed)) return {best_id, best_id == draft};  // greedy: the argmax, kept if it is the draft
  if (q) {
    // The draft was drawn from q: keep it with probability min(1, p/q), else draw from
    // max(0, p - q) normalised; the token is then distributed as p (the standard rule).
    if (q->ids.size() != q->p.size()) fail("sampler: draft distribution has " + std::to_string(q->ids.size()) + " ids but " + std::to_string(q->p.size()) + " probabilities");
    const double qd = q->at(draft);
    if (!(qd > 0))
      fail("sampler: drafted token " + std::to_string(draft) + " has probability " + std::to_string(qd) +
           " in its draft distribution (it was not drawn from it)");
    double pd = 0;
    for (size_t i = 0; i < cand_.size(); i++)
      if (cand_[i].second == draft) pd = w_[i] / w_sum_;
    if (uniform01(rng_state_) * qd < pd) return {draft, true};
    // q at p's candidates (tokens outside them have p = 0, so max(0, p - q) = 0 there)
    qat_.assign(cand_.size(), 0.0);
    {
      std::vector<std::pair<int32_t, double>> qs(q->ids.size());
      for (size_t i = 0; i < qs.size(); i++) qs[i] = {q->ids[i], q->p[i]};
      std::sort(qs.begin(), qs.end());
      for (size_t i = 0; i < cand_.size(); i++) {
        auto it = std::lower_bound(qs.begin(), qs.end(), std::make_pair(cand_[i].second, -(double)INFINITY));
        if (it != qs.end() && it->first == cand_[i].second) qat_[i] = it->second;
      }
    }
    double rest = 0;
    for (size_t i = 0; i < cand_.size(); i++) rest += qat_[i] = std::max(0.0, w_[i] / w_sum_ - qat_[i]);
    const double u = uniform01(rng_state_);
    if (!(rest > 0)) {  // p == q up to rounding (then the draft is kept but for rounding): draw from p
      double cum = 0;
      for (size_t i = 0; i < cand_.size(); i++) {
        cum += w_[i];
        if (u * w_sum_ < cum) return {cand_[i].second, cand_[i].second == draft};
      }
      return {cand_.back().second, cand_.back().second == draft};
    }
    double cum = 0;
    int32_t last = -1;
    for (size_t i = 0; i < cand_.size(); i++) {
      if (qat_[i] <= 0) continue;
      cum += qat_[i];
      last = cand_[i].second;
      if (u * rest < cum) return {last, last == draft};
    }
    return {last, last == draft};  // u rounded up to the rest
  }
  // The draft came from a deterministic proposal (q = 1 at the draft): keep it with
  // probability p(draft) = min(1, p/q), else draw from max(0, p - q) normalised, which is p
  // without the draft. Either way the token is distributed as p.
  double wd = 0;
  for (size_t i = 0; i < cand_.size(); i++)
    if (cand_[i].second == draft) wd = w_[i];
  if (uniform01(rng_state_) * w_sum_ < wd) return {draft, true};
  const double rest = w_sum_ - wd;
  const double u = uniform01(rng_state_) * rest;
  double cum = 0;
  int32_t last = -1;
  for (size_t i = 0; i < cand_.size(); i++) {
    if (cand_[i].second == draft) continue;
    cum += w_[i];
    last = cand_[i].second;
    if (u < cum) return {last, false};
  }
  return {last >= 0 ? last : draft, last < 0};  // u rounded up to the rest; or the draft was the only candidate
}

bool Sampler::filter(bool full_vocab, const SliceTopK* whole, int32_t* best_out, const TokenFilter* allowed) {
  for (const auto& c : cand_)
    if (std::isnan(c.first)) fail("sampler: logit of token " + std::to_string(c.second) + " is NaN");

  // Repetition penalties over the last repeat_last_n accepted tokens: the multiplicative
  // one once per distinct token, then the additive presence/frequency ones by count.
  const bool additive = p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f;
  if ((p_.repeat_penalty != 1.0f || additive) && !recent_.empty()) {
    std::vector<int32_t> pen(recent_.begin(), recent_.end());
    std::sort(pen.begin(), pen.end());
    std::vector<std::pair<int32_t, int>> counted;  // (id, count), ids ascending
    for (int32_t id : pen) {
      if (!counted.empty() && counted.back().first == id) counted.back().second++;
      else counted.push_back({id, 1});
    }
    auto apply = [&](std::pair<float, int32_t>& c, int count) {
      if (p_.repeat_penalty != 1.0f)
        c.first = c.first > 0.f ? c.first / p_.repeat_penalty : c.first * p_.repeat_penalty;
      if (additive) c.first -= (float)count * p_.frequency_penalty + p_.presence_penalty;
    };
    if (full_vocab) {
      // Full-vocab list from sample(): cand_[id] is token id.
      for (const auto& [id, count] : counted)
        if (id >= 0 && id < n_vocab_) apply(cand_[id], count);
    } else {
      auto less = [](const std::pair<int32_t, int>& a, int32_t id) { return a.first < id; };
      for (auto& c : cand_) {
        auto it = std::lower_bound(counted.begin(), counted.end(), c.second, less);
        if (it != counted.end() && it->first == c.second) apply(c, it->second);
      }
    }
  }

  bool sorted = false;  // cand_ in `better` order (else in input order)
  if (allowed && !filter_cand(*allowed, &sorted)) {
    *best_out = -1;  // no candidate is allowed
    return false;
  }

  // Argmax by a scan (lowest id on ties). The list may be the whole vocab (150k), so
  // the filters below sort only as much as they need.
  size_t best = 0;
  for (size_t i = 1; i < cand_.size(); i++)
    if (better(cand_[i], cand_[best])) best = i;
  const float max_logit = cand_[best].first;
  const int32_t best_id = cand_[best].second;
  if (max_logit == -std::numeric_limits<float>::infinity()) fail("sampler: every logit is -inf");
  *best_out = best_id;
  if (p_.temperature <= 0.f) return false;  // greedy
  if (max_logit == std::numeric_limits<float>::infinity()) return false;

  const size_t n_all = whole ? (size_t)n_vocab_ : cand_.size();  // tokens the list stands for
  if (!sorted && p_.top_k > 0 && (size_t)p_.top_k < n_all) {
    const size_t k = std::min((size_t)p_.top_k, cand_.size());
    std::partial_sort(cand_.begin(), cand_.begin() + k, cand_.end(), better);
    cand_.resize(k);
    sorted = true;
  }

  std::vector<double> w;  // [n_cand] unnormalised probabilities
  auto weigh = [&](float scale) {
    w.resize(cand_.size());
    double sum = 0;
    for (size_t i = 0; i < cand_.size(); i++) {
      w[i] = det_exp(((double)cand_[i].first - (double)max_logit) * scale);
      sum += w[i];
    }
    return sum;
  };

  // top-p: smallest prefix (in `better` order) whose probability reaches p.
  if (p_.top_p < 1.0f) {
    double total = weigh(1.0f);
    // A shard list stands for the whole vocab: its mass relative to the max is exp(lse - max).
    if (whole && !sorted && std::isfinite(whole->lse)) total = std::max(total, det_exp(whole->lse - (double)max_logit));
    const double target = (double)p_.top_p * total;
    if (sorted) {
      double cum = 0;
      for (size_t i = 0; i < cand_.size(); i++) {
        cum += w[i];
        if (cum >= target) { cand_.resize(i + 1); break; }
      }
    } else {
      top_p_unsorted(target, max_logit, whole ? whole->min : max_logit, w);
    }
  }

  // min-p: keep tokens with p >= min_p * p_max (the max token always survives).
  if (p_.min_p > 0.f) {
    weigh(1.0f);
    size_t keep = 0;
    for (size_t i = 0; i < cand_.size(); i++)  // order-preserving compaction
      if (w[i] >= (double)p_.min_p || cand_[i].second == best_id) cand_[keep++] = cand_[i];
    cand_.resize(keep);
  }

  // Temperature, softmax weights for the draw.
  w_sum_ = weigh(1.0f / p_.temperature);
  w_.swap(w);
  return true;
}

// ---- shard top-k -----------------------------------------------------------------------

SliceTopK topk_lse(const float* logits, int64_t v0, int64_t v1, int k) {
  SliceTopK r;
  const int64_t n = v1 - v0;
  if (n <= 0) return r;
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; i++) {
    mx = std::max(mx, logits[i]);
    if (std::isfinite(logits[i])) r.min = std::min(r.min, logits[i]);
  }
  double sum = 0;
  for (int64_t i = 0; i < n; i++) sum += std::exp((double)logits[i] - mx);
  r.lse = mx + std::log(sum);
  k = (int)std::min<int64_t>(std::max(k, 0), n);
  std::vector<int32_t> idx(n);
  for (int64_t i = 0; i < n; i++) idx[i] = (int32_t)i;
  auto better_idx = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), better_idx);
  for (int i = 0; i < k; i++) {
    r.ids.push_back((int32_t)(idx[i] + v0));
    r.logits.push_back(logits[idx[i]]);
  }
  return r;
}

SliceTopK merge_topk(const std::vector<SliceTopK>& parts, int k) {
  SliceTopK r;
  std::vector<std::pair<float, int32_t>> all;
  double mx = -INFINITY;
  for (const auto& p : parts) {
    if (p.ids.size() != p.logits.size())
      fail("merge_topk: a part has " + std::to_string(p.ids.size()) + " ids but " + std::to_string(p.logits.size()) +
           " logits");
    mx = std::max(mx, p.lse);
    r.min = std::min(r.min, p.min);
  }
  double sum = 0;
  for (const auto& p : parts) {
    if (std::isfinite(p.lse)) sum += std::exp(p.lse - mx);
    for (size_t i = 0; i < p.ids.size(); i++) all.push_back({p.logits[i], p.ids[i]});
  }
  r.lse = std::isfinite(mx) ? mx + std::log(sum) : -INFINITY;
  const size_t n = std::min(all.size(), (size_t)std::max(k, 0));
  std::partial_sort(all.begin(), all.begin() + n, all.end(), better);
  for (size_t i = 0; i < n; i++) {
    r.ids.push_back(all[i].second);
    r.logits.push_back(all[i].first);
  }
  return r;
}

// ---- stop strings --------------------------------------------------------------------

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopMatcher::push(std::string_view piece) {
  if (stopped_) return {};
  held_ += piece;
  // Earliest completed stop string wins.
  size_t best = std::string::npos;
  for (const auto& s : stops_) {
    const size_t pos = held_.find(s);
    if (pos < best) { best = pos; matched_ = s; }
  }
  if (best != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, best);
    held_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    for (size_t k = std::min(s.size() - 1, held_.size()); k > hold; k--) {
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) { hold = k; break; }
    }
  }
  std::string out = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  if (!stopped_) out.swap(held_);
  held_.clear();
  return out;
}

}  // namespace knot
