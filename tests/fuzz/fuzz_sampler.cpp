// fuzz_sampler.cpp — sampler parameters (any float, including NaN/Inf/negative; any
// top-k, repeat window, seed) over arbitrary logits (full vocab and candidate lists),
// accepted-token history, and stop-string matching. A sampled id must be a valid one.
#include <cmath>

#include "fuzz_util.h"
#include "text/sampler.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzReader r(data, size);
  knot::SamplerParams p;
  p.temperature = r.f32();
  p.top_k = (int32_t)r.u32();
  p.top_p = r.f32();
  p.min_p = r.f32();
  p.repeat_penalty = r.f32();
  p.repeat_last_n = (int32_t)r.u32();
  p.seed = (uint64_t)r.u32() << 32 | r.u32();
  const int n_vocab = 1 + r.u8() % 300;
  const int n_hist = r.u8();
  std::vector<int32_t> hist;
  for (int i = 0; i < n_hist; i++) hist.push_back((int32_t)(r.u8() % (n_vocab + 8)) - 4);
  std::vector<float> logits;
  while (r.n >= 4 && (int)logits.size() < n_vocab + 16) logits.push_back(r.f32());
  refuse_ok([&] {
    knot::Sampler s(p, n_vocab);
    for (int32_t id : hist) s.accept(id);
    for (int step = 0; step < 3; step++) {
      refuse_ok([&] {
        int32_t id = s.sample(logits.data(), (int)logits.size());
        if (id < 0 || id >= n_vocab) __builtin_trap();  // sampled an id outside the vocab
        s.accept(id);
      });
      std::vector<int32_t> ids;
      for (size_t i = 0; i < logits.size(); i++) ids.push_back((int32_t)((i * 7919) % (n_vocab + 3)));
      refuse_ok([&] {
        int32_t id = s.sample_candidates(ids.data(), logits.data(), (int)logits.size());
        if (id < 0 || id >= n_vocab) __builtin_trap();
      });
    }
  });
  // stop strings over the logit bytes as text
  std::string_view text((const char*)data, size);
  std::vector<std::string> stops;
  for (size_t i = 0; i + 3 <= std::min<size_t>(size, 24); i += 6) stops.emplace_back(text.substr(i, 1 + data[i] % 3));
  knot::StopMatcher m(stops);
  for (size_t i = 0; i < text.size() && !m.stopped(); i += 5) (void)m.push(text.substr(i, 5));
  (void)m.flush();
  return 0;
}
