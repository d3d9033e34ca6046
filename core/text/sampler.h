// sampler.h — token sampling: greedy, temperature, top-k, top-p, min-p, repetition
// penalty (multiplicative, and OpenAI's presence/frequency), seeded RNG (same seed + same logits -> same tokens on every platform).
#pragma once
#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace knot {

// A vocab slice's best k logits (ids absolute, best first: logit desc, lower id on ties),
// log(sum(exp(logit))) and the lowest finite logit over the whole slice: what a vocab
// shard sends so a coordinator can sample exactly without the full logits (docs/protocol.md).
struct SliceTopK {
  std::vector<int32_t> ids;
  std::vector<float> logits;
  double lse = -INFINITY;  // -inf: empty slice
  float min = INFINITY;    // +inf: no finite logit
};
SliceTopK topk_lse(const float* logits, int64_t v0, int64_t v1, int k);  // logits: [v1-v0]
// The best k of the parts' lists, their combined lse and min. Parts must cover disjoint
// slices; each part's ids/logits must have the same length (else an error).
SliceTopK merge_topk(const std::vector<SliceTopK>& parts, int k);

struct SamplerParams {
  float temperature = 0.8f;  // <= 0: greedy (argmax; lowest id wins a tie)
  int top_k = 40;            // <= 0: off
  float top_p = 0.95f;       // >= 1: off
  float min_p = 0.05f;       // <= 0: off
  float repeat_penalty = 1.0f;  // 1: off (llama.cpp semantics: divide positive, multiply negative)
  int repeat_last_n = 64;
  // OpenAI-style additive penalties over the same window (llama.cpp semantics):
  // logit -= count * frequency_penalty + (count > 0) * presence_penalty. 0: off.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;
};

// Which tokens may be sampled (e.g. a grammar's). allowed: one token (empty: every
// token). mask (optional): every token at once, mask[id] = allowed, for ids < n_vocab —
// when it is cheaper than asking each (a grammar walks its vocabulary as a trie).
struct TokenFilter {
  std::function<bool(int32_t id)> allowed;
  std::function<void(std::vector<uint8_t>& mask)> mask;
  explicit operator bool() const { return (bool)allowed; }
};

class Sampler {
 public:
  Sampler(const SamplerParams& p, int n_vocab);
  // logits: n values (only ids < n_vocab are candidates). Does not modify logits.
  int32_t sample(const float* logits, int n);
  void accept(int32_t id);  // record a token (prompt or generated) for the penalty
  void reset();
  // Same pipeline over an explicit candidate list (e.g. merged per-shard top-k):
  // ids[i] has logit logits[i]; ids >= n_vocab are ignored. Same result as sample() on
  // the full logits for greedy, and for top-k / min-p when the list holds every token
  // those filters keep; top-p and the final softmax use the list's own mass, so they
  // match only when the list carries (nearly) all of the probability.
  int32_t sample_candidates(const int32_t* ids, const float* logits, int n);
  // From a merged shard top-k (SliceTopK over the whole vocab): the same id as sample()
  // on the full logits — same seed, same draw — for greedy, and for top-k / top-p / min-p
  // whenever the list holds every token those filters keep. It rebuilds what the full
  // pass would see: candidates in id order, top-p's total mass from lse and its bucket
  // range from min. Repetition / presence / frequency penalties apply to the listed tokens
  // only, so they are exact when no unlisted penalised token matters (they lower logits;
  // but top-p alone then uses the unpenalised lse).
  int32_t sample_topk(const SliceTopK& t);
  // A sampling distribution: the candidates the chain keeps (penalties, the token filter,
  // top-k, top-p, min-p, temperature softmax), in draw order, with probabilities p (summing
  // to 1 up to rounding). Greedy: the argmax alone, p 1.
  struct Dist {
    std::vector<int32_t> ids;
    std::vector<double> p;
    double at(int32_t id) const;  // p of id (0 when it is not a candidate)
  };
  // The distribution sample() draws from on these logits (the same chain; nothing is drawn).
  // False (d empty) when the filter allows no token.
  bool dist(const float* logits, int n, Dist& d, const TokenFilter* allowed = nullptr);
  // One token from d with this sampler's RNG (one uniform).
  int32_t draw(const Dist& d);
  // The penalty window (the last repeat_last_n accepted tokens), to save and restore around
  // tokens accepted only tentatively (a draft model's proposals).
  const std::deque<int32_t>& window() const { return recent_; }
  void set_window(const std::deque<int32_t>& w) { recent_ = w; }
  // Speculative decoding: verify a drafted token against these logits (the position the
  // draft was fed for). Greedy: the argmax, accepted when it is the draft. Sampling, q null:
  // the standard acceptance rule for a deterministic draft (prompt lookup, a greedy draft
  // model: q one-hot): the draft is kept with probability p(draft), else a token is drawn
  // from p without the draft. Sampling, q given (the distribution the draft was drawn from,
  // a sampling draft model): kept with probability min(1, p(draft) / q(draft)), else a
  // token is drawn from norm(max(0, p - q)). Either way the token is distributed exactly as
  // sample() would draw it (not the same draw: it takes one or two uniforms, acceptance
  // first). A q that gives the draft probability 0 is an error (it was not drawn from q).
  struct Draft {
    int32_t id;
    bool accepted;
  };
  // With a token filter (a grammar's): the draft and the draw from the allowed tokens only
  // (a draft the filter refuses is never kept).
  Draft sample_draft(const float* logits, int n, int32_t draft, const TokenFilter* allowed = nullptr,
                     const Dist* q = nullptr);
  // The same, over the tokens `allowed` accepts only: the others are as if their logit
  // were -inf (penalties apply first, then the filter, then top-k / top-p / min-p /
  // temperature over what is left). Returns -1, drawing nothing, when no candidate is
  // allowed. The filter is asked lazily, in candidate order (logit desc, id asc), as far
  // as the chain needs: greedy stops at the first allowed token, top-k at the k-th,
  // min-p (with top-p off) at the first allowed token below its cut; after 1024 asked
  // without getting there, the filter's mask (when it has one) answers for the rest.
  // Only top-k off with top-p on (or min-p off) needs every candidate (the mask, else
  // each asked). The allowed candidates are then in that order for the draw (in list
  // order when every candidate was needed).
  // For a top-k list the filtered list's own mass is used (lse/min are not: they include
  // tokens the filter refuses), so it equals sample(logits, n, allowed) when the list
  // holds every allowed token that the full pass keeps (e.g. at least top_k allowed
  // ones, or the one allowed argmax when greedy).
  int32_t sample(const float* logits, int n, const TokenFilter& allowed);
  int32_t sample_topk(const SliceTopK& t, const TokenFilter& allowed);
  // The draft rule over a merged shard top-k (as sample_topk: exact within k).
  Draft sample_draft_topk(const SliceTopK& t, int32_t draft, const Dist* q = nullptr);
  const SamplerParams& params() const { return p_; }

 private:
  SamplerParams p_;
  int n_vocab_;
  uint64_t rng_state_;
  std::deque<int32_t> recent_;
  std::vector<std::pair<float, int32_t>> cand_;
  // Filters cand_ and draws. full_vocab: cand_[id].second == id. whole: cand_ is a shard
  // top-k (in id order) standing for the whole vocab of that lse / min.
  int32_t sample_cand(bool full_vocab, const SliceTopK* whole = nullptr, const TokenFilter* allowed = nullptr);
  void topk_cand(const SliceTopK& t);  // cand_ = t's listed ids below n_vocab, in id order
  Draft draft_cand(bool full_vocab, const SliceTopK* whole, int32_t draft, const TokenFilter* allowed,
                   const Dist* q);  // sample_draft on cand_
  // The pipeline up to the draw: penalties, argmax (*best), top-k, top-p, min-p, then
  // w_ / w_sum_ = the temperature softmax weights of cand_. False when the result is the
  // argmax without a draw (greedy, or an infinite max logit), or *best = -1 when the
  // token filter allows no candidate.
  bool filter(bool full_vocab, const SliceTopK* whole, int32_t* best, const TokenFilter* allowed = nullptr);
  // Keeps the allowed candidates (see sample(..., allowed)); false when none is. Sets
  // *sorted when cand_ is left in `better` order and already cut to top_k.
  bool filter_cand(const TokenFilter& allowed, bool* sorted);
  std::vector<uint8_t> mask_;
  std::vector<double> qat_;  // draft_cand: q, then max(0, p - q), at each candidate
  std::vector<double> w_;
  double w_sum_ = 0;
  void top_p_unsorted(double target, float max_logit, float min_logit, const std::vector<double>& w);
};

// The sampler's platform-independent building blocks (exposed for tests and for
// callers that need the same draws elsewhere): the splitmix64 step, and exp() built
// from basic IEEE operations only (bit-identical on x86, ARM and wasm).
uint64_t splitmix64_next(uint64_t& state);
double det_exp(double x);

// Stop strings for streamed text. push() returns the text that is safe to show now:
// text that could still be the start of a stop string is held back. When a stop
// string completes, stopped() turns true, the text before it is returned and the stop
// string and everything after it are dropped. flush() releases held-back text at the
// end of generation. Feed it complete UTF-8 (e.g. from StreamDecoder).
struct StopMatcher {
  explicit StopMatcher(std::vector<std::string> stops);
  std::string push(std::string_view piece);
  std::string flush();
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }  // the stop string hit

 private:
  std::vector<std::string> stops_;
  std::string held_;
  std::string matched_;
  bool stopped_ = false;
};

}  // namespace knot
