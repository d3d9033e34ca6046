// sampler.h — token sampling: greedy, temperature, top-k, top-p, min-p, repetition
// penalty, seeded RNG (same seed + same logits -> same tokens on every platform).
#pragma once
#include <cstdint>
#include <deque>
#include <vector>

namespace knot {

struct SamplerParams {
  float temperature = 0.8f;  // <= 0: greedy (argmax; lowest id wins a tie)
  int top_k = 40;            // <= 0: off
  float top_p = 0.95f;       // >= 1: off
  float min_p = 0.05f;       // <= 0: off
  float repeat_penalty = 1.0f;  // 1: off (llama.cpp semantics: divide positive, multiply negative)
  int repeat_last_n = 64;
  uint64_t seed = 0;
};

class Sampler {
 public:
  Sampler(const SamplerParams& p, int n_vocab);
  // logits: n values (only ids < n_vocab are candidates). Does not modify logits.
  int32_t sample(const float* logits, int n);
  void accept(int32_t id);  // record a token (prompt or generated) for the penalty
  void reset();

 private:
  SamplerParams p_;
  int n_vocab_;
  uint64_t rng_state_;
  std::deque<int32_t> recent_;
  std::vector<std::pair<float, int32_t>> cand_;
};

}  // namespace knot
