// text_sampler.cpp — sampler: greedy, filters, penalty, determinism; stop strings.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <algorithm>

#include "kernels/common.h"
#include "text/sampler.h"

using knot::Sampler;
using knot::SamplerParams;

namespace {

SamplerParams plain(float temp, uint64_t seed = 1) {
  SamplerParams p;
  p.temperature = temp;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repeat_penalty = 1.0f;
  p.seed = seed;
  return p;
}

std::vector<float> log_probs(std::vector<double> p) {
  std::vector<float> l;
  for (double x : p) l.push_back((float)std::log(x));
  return l;
}

std::map<int32_t, int> histogram(Sampler& s, const std::vector<float>& logits, int draws) {
  std::map<int32_t, int> h;
  for (int i = 0; i < draws; i++) h[s.sample(logits.data(), (int)logits.size())]++;
  return h;
}

}  // namespace

// splitmix64's published reference outputs for state 1234567.
TEST(TextSampler, Splitmix64ReferenceVector) {
  uint64_t state = 1234567;
  EXPECT_EQ(knot::splitmix64_next(state), 6457827717110365317ull);
  EXPECT_EQ(knot::splitmix64_next(state), 3203168211198807973ull);
  EXPECT_EQ(knot::splitmix64_next(state), 9817491932198370423ull);
}

TEST(TextSampler, DeterministicExpIsAccurate) {
  EXPECT_EQ(knot::det_exp(0.0), 1.0);
  EXPECT_EQ(knot::det_exp(-800.0), 0.0);
  EXPECT_EQ(knot::det_exp(-std::numeric_limits<double>::infinity()), 0.0);
  EXPECT_TRUE(std::isinf(knot::det_exp(710.0)));
  EXPECT_TRUE(std::isnan(knot::det_exp(std::nan(""))));
  for (double x = -700.0; x < 700.0; x += 0.731) {  // normal range: ~1 ulp
    const double want = std::exp(x);
    EXPECT_NEAR(knot::det_exp(x) / want, 1.0, 4e-16) << x;
  }
  EXPECT_NEAR(knot::det_exp(-740.0) / std::exp(-740.0), 1.0, 1e-6);  // subnormal result
}

TEST(TextSampler, GreedyLowestIdWinsTie) {
  Sampler s(plain(0.0f), 4);
  const float l[] = {1.0f, 3.0f, 3.0f, 2.0f};
  EXPECT_EQ(s.sample(l, 4), 1);
  const float neg[] = {-5.0f, -1.0f, -1.0f, -1.0f};
  EXPECT_EQ(s.sample(neg, 4), 1);
}

TEST(TextSampler, PaddedIdsNeverSampled) {
  // Tensor rows 4 and 5 are padding past the tokenizer vocab of 4.
  const float l[] = {0.0f, 0.1f, 0.2f, 0.3f, 100.0f, 100.0f};
  Sampler g(plain(0.0f), 4);
  EXPECT_EQ(g.sample(l, 6), 3);
  Sampler s(plain(5.0f, 7), 4);
  for (int i = 0; i < 500; i++) EXPECT_LT(s.sample(l, 6), 4);
  EXPECT_THROW(s.sample(l, 3), knot::Error);  // fewer logits than the vocab
  const int32_t ids[] = {5, 2, 4};
  const float cl[] = {100.0f, 0.0f, 90.0f};
  EXPECT_EQ(g.sample_candidates(ids, cl, 3), 2);
}

// A shard-merged top-5 list samples exactly like the full logits under top-k 3.
TEST(TextSampler, CandidateListMatchesFullLogitsUnderTopK) {
  std::vector<float> l(300);
  for (int i = 0; i < 300; i++) l[i] = (float)std::cos(i * 1.3) * 2.0f;
  std::vector<int32_t> ids(300);
  for (int i = 0; i < 300; i++) ids[i] = i;
  std::sort(ids.begin(), ids.end(), [&](int a, int b) { return l[a] > l[b]; });
  ids.resize(5);
  std::vector<float> cl;
  for (int32_t id : ids) cl.push_back(l[id]);
  std::reverse(ids.begin(), ids.end());  // list order must not matter
  std::reverse(cl.begin(), cl.end());
  SamplerParams p = plain(1.2f, 77);
  p.top_k = 3;
  Sampler full(p, 300), part(p, 300);
  for (int i = 0; i < 200; i++)
    ASSERT_EQ(full.sample(l.data(), 300), part.sample_candidates(ids.data(), cl.data(), 5)) << i;
}

TEST(TextSampler, DoesNotModifyLogits) {
  std::vector<float> l = {0.5f, 2.0f, -1.0f, 1.5f};
  const std::vector<float> copy = l;
  SamplerParams p = plain(0.9f);
  p.top_k = 2;
  p.repeat_penalty = 1.3f;
  Sampler s(p, 4);
  s.accept(1);
  s.sample(l.data(), 4);
  EXPECT_EQ(l, copy);
}

TEST(TextSampler, SeededDeterminism) {
  std::vector<float> l;
  for (int i = 0; i < 1000; i++) l.push_back((float)std::sin(i * 0.37) * 3.0f);
  SamplerParams p;  // defaults: temp 0.8, top-k 40, top-p 0.95, min-p 0.05
  p.seed = 42;
  Sampler a(p, 1000), b(p, 1000);
  p.seed = 43;
  Sampler c(p, 1000);
  std::vector<int32_t> sa, sb, sc;
  for (int i = 0; i < 300; i++) {
    sa.push_back(a.sample(l.data(), 1000));
    sb.push_back(b.sample(l.data(), 1000));
    sc.push_back(c.sample(l.data(), 1000));
  }
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
  a.reset();  // reset re-seeds: the same sequence again
  std::vector<int32_t> again;
  for (int i = 0; i < 300; i++) again.push_back(a.sample(l.data(), 1000));
  EXPECT_EQ(again, sa);
}

TEST(TextSampler, TopK1IsGreedy) {
  SamplerParams p = plain(1.5f, 3);
  p.top_k = 1;
  Sampler s(p, 64), g(plain(0.0f), 64);
  uint64_t x = 12345;
  for (int t = 0; t < 50; t++) {
    std::vector<float> l(64);
    for (auto& v : l) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      v = (float)((x >> 40) % 1000) / 100.0f;  // many exact ties
    }
    EXPECT_EQ(s.sample(l.data(), 64), g.sample(l.data(), 64));
  }
}

TEST(TextSampler, TemperatureOneMatchesSoftmax) {
  const std::vector<double> probs = {0.5, 0.3, 0.15, 0.05};
  Sampler s(plain(1.0f, 11), 4);
  const int n = 20000;
  auto h = histogram(s, log_probs(probs), n);
  for (int i = 0; i < 4; i++) EXPECT_NEAR(h[i] / (double)n, probs[i], 0.015) << i;
}

TEST(TextSampler, TemperatureSharpensAndFlattens) {
  const auto l = log_probs({0.5, 0.3, 0.15, 0.05});
  Sampler cold(plain(0.05f, 5), 4), hot(plain(3.0f, 5), 4);
  auto hc = histogram(cold, l, 2000), hh = histogram(hot, l, 2000);
  EXPECT_GT(hc[0], 1990);             // p0 ~ 1 - 1e-4
  // T=3: p_i = p_i^(1/3) / sum (p0 ~ 0.34, p3 ~ 0.16), within ~3.5 sigma of 2000 draws
  double z = 0;
  for (double q : {0.5, 0.3, 0.15, 0.05}) z += std::pow(q, 1.0 / 3);
  EXPECT_NEAR(hh[0] / 2000.0, std::pow(0.5, 1.0 / 3) / z, 0.037);
  EXPECT_NEAR(hh[3] / 2000.0, std::pow(0.05, 1.0 / 3) / z, 0.028);
}

TEST(TextSampler, TopPRestricts) {
  const auto l = log_probs({0.5, 0.3, 0.15, 0.05});
  SamplerParams p = plain(1.0f, 9);
  p.top_p = 0.7f;  // 0.5 < 0.7 <= 0.8: keeps {0, 1}
  Sampler s(p, 4);
  auto h = histogram(s, l, 4000);
  EXPECT_EQ(h.count(2) + h.count(3), 0u);
  EXPECT_NEAR(h[0] / 4000.0, 0.5 / 0.8, 0.03);
  p.top_p = 0.85f;  // keeps {0, 1, 2}
  Sampler s2(p, 4);
  auto h2 = histogram(s2, l, 4000);
  EXPECT_EQ(h2.count(3), 0u);
  EXPECT_NEAR(h2[2] / 4000.0, 0.15 / 0.95, 0.03);  // kept in proportion, not merely present
}

// Large shuffled vocab: the (unsorted, bucketed) top-p path keeps exactly the set a
// full sort would keep, and with top-k it agrees too.
TEST(TextSampler, TopPLargeVocabMatchesBruteForce) {
  const int n = 5000;
  std::vector<float> l(n, -1000.0f);
  for (int r = 0; r < n; r++) l[(r * 7919) % n] = -0.35f * (float)r + (float)((r * 7) % 3) * 1e-3f;
  // Brute force: sort, cumulative softmax, smallest prefix reaching 0.9.
  std::vector<std::pair<float, int>> order;
  for (int i = 0; i < n; i++) order.push_back({l[i], i});
  std::sort(order.begin(), order.end(), [](auto a, auto b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  double sum = 0;
  for (auto& o : order) sum += std::exp((double)o.first - order[0].first);
  std::set<int> want;
  double cum = 0;
  for (auto& o : order) {
    want.insert(o.second);
    cum += std::exp((double)o.first - order[0].first);
    if (cum >= 0.9 * sum) break;
  }
  ASSERT_EQ(want.size(), 7u);  // geometric ratio e^-0.35: 1 - 0.705^7 >= 0.9
  for (int top_k : {0, 100}) {
    SamplerParams p = plain(1.0f, 21);
    p.top_p = 0.9f;
    p.top_k = top_k;
    Sampler s(p, n);
    std::set<int> got;
    for (int i = 0; i < 2000; i++) got.insert(s.sample(l.data(), n));
    EXPECT_EQ(got, want) << "top_k " << top_k;
  }
}

// top_p <= 0 keeps only the most likely bucket; when every logit is equal the max went to
// the last bucket and nothing was kept (cand_.back() on an empty list; found by fuzz_sampler,
// input tests/fuzz/corpus/sampler/34a9f59c...). Under build-asan this is a heap overflow.
TEST(TextSampler, TopPZeroOverEqualLogitsKeepsTheMax) {
  for (int n : {8, 5000})
    for (float top_p : {0.0f, -1.0f, 1e-30f}) {
      SamplerParams p = plain(1.0f, 5);
      p.top_p = top_p;
      Sampler s(p, n);
      const std::vector<float> l(n, 0.25f);
      for (int i = 0; i < 50; i++) {
        const int32_t id = s.sample(l.data(), n);
        ASSERT_TRUE(id >= 0 && id < n) << "n " << n << " top_p " << top_p << ": id " << id;
      }
    }
}

TEST(TextSampler, MinPRestricts) {
  const auto l = log_probs({0.5, 0.3, 0.15, 0.05});
  SamplerParams p = plain(1.0f, 13);
  p.min_p = 0.2f;  // keep p >= 0.1: {0, 1, 2}
  Sampler s(p, 4);
  auto h = histogram(s, l, 4000);
  EXPECT_EQ(h.count(3), 0u);
  EXPECT_NEAR(h[2] / 4000.0, 0.15 / 0.95, 0.03);  // kept in proportion, not merely present
  p.min_p = 0.5f;  // keep p >= 0.25: {0, 1}
  Sampler s2(p, 4);
  auto h2 = histogram(s2, l, 4000);
  EXPECT_EQ(h2.count(2) + h2.count(3), 0u);
  EXPECT_NEAR(h2[0] / 4000.0, 0.5 / 0.8, 0.03);
}

TEST(TextSampler, TopKRestricts) {
  const auto l = log_probs({0.1, 0.4, 0.2, 0.3});
  SamplerParams p = plain(1.0f, 17);
  p.top_k = 2;  // ids 1 and 3
  Sampler s(p, 4);
  auto h = histogram(s, l, 3000);
  EXPECT_EQ(h.count(0) + h.count(2), 0u);
  EXPECT_NEAR(h[1] / 3000.0, 0.4 / 0.7, 0.03);
}

TEST(TextSampler, RepetitionPenalty) {
  SamplerParams p = plain(0.0f);
  p.repeat_penalty = 1.5f;
  p.repeat_last_n = 2;
  Sampler s(p, 4);
  const float pos[] = {2.0f, 1.9f, -1.0f, -1.1f};
  EXPECT_EQ(s.sample(pos, 4), 0);
  s.accept(0);  // 2.0 / 1.5 = 1.33 < 1.9
  EXPECT_EQ(s.sample(pos, 4), 1);
  const float neg[] = {-3.0f, -3.0f, -1.0f, -1.2f};
  s.accept(2);  // window {0, 2}: -1.0 * 1.5 = -1.5 < -1.2
  EXPECT_EQ(s.sample(neg, 4), 3);
  s.accept(3);
  s.accept(3);  // window {3, 3}: 0 and 2 are no longer penalised
  EXPECT_EQ(s.sample(pos, 4), 0);
  EXPECT_EQ(s.sample(neg, 4), 2);
  s.reset();
  s.accept(0);
  p.repeat_penalty = 1.0f;  // off: the history does not matter
  Sampler off(p, 4);
  off.accept(0);
  EXPECT_EQ(off.sample(pos, 4), 0);
}

// OpenAI-style additive penalties: logit -= count * frequency + (count > 0) * presence,
// over the repeat_last_n window; the full-vocab and candidate-list paths agree.
TEST(TextSampler, PresenceAndFrequencyPenalties) {
  const float l[] = {3.0f, 2.5f, 2.2f, 0.0f};
  const int32_t ids[] = {0, 1, 2, 3};
  SamplerParams p = plain(0.0f);
  p.repeat_last_n = 8;
  p.frequency_penalty = 0.3f;
  Sampler f(p, 4), fc(p, 4);
  for (Sampler* s : {&f, &fc}) { s->accept(0); s->accept(0); }  // 3.0 - 2 * 0.3 = 2.4 < 2.5
  EXPECT_EQ(f.sample(l, 4), 1);
  EXPECT_EQ(fc.sample_candidates(ids, l, 4), 1);
  for (Sampler* s : {&f, &fc}) s->accept(1);  // id 0: 2.4, id 1: 2.5 - 0.3 = 2.2, id 2: 2.2
  EXPECT_EQ(f.sample(l, 4), 0);
  EXPECT_EQ(fc.sample_candidates(ids, l, 4), 0);
  p.frequency_penalty = 0.0f;
  p.presence_penalty = 0.7f;  // once per distinct token, however often it was seen
  Sampler pr(p, 4);
  pr.accept(0);
  pr.accept(0);
  pr.accept(0);  // 3.0 - 0.7 = 2.3 < 2.5
  EXPECT_EQ(pr.sample(l, 4), 1);
  pr.accept(1);  // 2.5 - 0.7 = 1.8; 2.3 (id 0) > 2.2 (id 2)
  EXPECT_EQ(pr.sample(l, 4), 0);
  p.presence_penalty = -1.0f;  // negative: favours what was seen
  Sampler neg(p, 4);
  neg.accept(3);  // 0.0 + 1.0 = 1.0, still below 3.0
  EXPECT_EQ(neg.sample(l, 4), 0);
  SamplerParams bad = plain(1.0f);
  bad.frequency_penalty = std::numeric_limits<float>::infinity();
  EXPECT_THROW(Sampler(bad, 4), knot::Error);
}

TEST(TextSampler, BadInputThrows) {
  Sampler s(plain(1.0f), 3);
  const float nan[] = {0.0f, std::numeric_limits<float>::quiet_NaN(), 1.0f};
  EXPECT_THROW(s.sample(nan, 3), knot::Error);
  const float inf = -std::numeric_limits<float>::infinity();
  const float all_neg_inf[] = {inf, inf, inf};
  EXPECT_THROW(s.sample(all_neg_inf, 3), knot::Error);
  Sampler g(plain(0.0f), 3);
  EXPECT_THROW(g.sample(all_neg_inf, 3), knot::Error);
  EXPECT_THROW(Sampler(plain(1.0f), 0), knot::Error);
  SamplerParams bad = plain(1.0f);
  bad.repeat_penalty = 0.0f;
  EXPECT_THROW(Sampler(bad, 3), knot::Error);
  // -inf entries are simply never drawn.
  const float some[] = {inf, 0.0f, inf};
  for (int i = 0; i < 100; i++) EXPECT_EQ(s.sample(some, 3), 1);
}

TEST(TextSampler, StopMatcherHoldsBackPrefixes) {
  knot::StopMatcher m({"</s>", "STOP"});
  EXPECT_EQ(m.push("Hello </"), "Hello ");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.push("s> more"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "</s>");
  EXPECT_EQ(m.push("x"), "");
  EXPECT_EQ(m.flush(), "");

  knot::StopMatcher n({"STOP"});
  EXPECT_EQ(n.push("Hel"), "Hel");
  EXPECT_EQ(n.push("lo S"), "lo ");
  EXPECT_EQ(n.push("omething"), "Something");  // false start released
  EXPECT_EQ(n.push(" ST"), " ");
  EXPECT_EQ(n.flush(), "ST");  // end of generation: held text is released
  EXPECT_FALSE(n.stopped());

  knot::StopMatcher o({"ab", "b"});  // earliest completed stop wins
  EXPECT_EQ(o.push("xab"), "x");
  EXPECT_EQ(o.matched(), "ab");
  knot::StopMatcher none({});
  EXPECT_EQ(none.push("anything"), "anything");
}
