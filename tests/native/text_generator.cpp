// text_generator.cpp — sampling from vocab shards' merged top-k + lse (what a mesh
// coordinator holds) gives the same ids as sampling from the full logits, seed for seed,
// for greedy and for top-k / top-p / min-p whenever k covers the tokens the filters keep;
// the Generator (core/text/generator.h) gives the same ids and text either way.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/common.h"
#include "text/generator.h"
#include "text/sampler.h"
#include "text_util.h"

using knot::SamplerParams;
using knot::SliceTopK;

namespace {

constexpr int V = 512;
const std::vector<int> kCuts = {0, 100, 250, 400, V};  // 4 shards, end to end

// Step i's logits: a smooth random-looking landscape with a few strong tokens, so that
// top-p 0.9 / min-p 0.05 keep tens of tokens (platform-independent: no <random>).
std::vector<float> logits_at(int i) {
  std::vector<float> l(V);
  uint64_t st = 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1);
  for (int v = 0; v < V; v++) {
    const double u = (double)(knot::splitmix64_next(st) >> 11) * 0x1.0p-53;
    l[v] = (float)(4.0 * u * u * u - 1.0 + 0.5 * std::sin(0.05 * v * (i % 7 + 1)));
  }
  return l;
}

SliceTopK merged(const std::vector<float>& l, int k) {
  std::vector<SliceTopK> parts;
  for (size_t s = 0; s + 1 < kCuts.size(); s++)
    parts.push_back(knot::topk_lse(l.data() + kCuts[s], kCuts[s], kCuts[s + 1], k));
  return knot::merge_topk(parts, k);
}

// How many tokens top-k, top-p and min-p keep on the full logits (the set k must cover).
size_t kept(const std::vector<float>& l, const SamplerParams& p) {
  std::vector<float> s(l);
  std::sort(s.begin(), s.end(), std::greater<float>());
  size_t n = p.top_k > 0 ? std::min<size_t>(p.top_k, s.size()) : s.size();
  if (p.top_p < 1.f) {
    double tot = 0, cum = 0;
    for (size_t i = 0; i < n; i++) tot += std::exp((double)s[i] - s[0]);
    for (size_t i = 0; i < n; i++) {
      cum += std::exp((double)s[i] - s[0]);
      if (cum >= p.top_p * tot) { n = i + 1; break; }
    }
  }
  if (p.min_p > 0.f) {
    size_t m = 0;
    while (m < n && std::exp((double)s[m] - s[0]) >= p.min_p) m++;
    n = std::max<size_t>(m, 1);
  }
  return n;
}

SamplerParams params(float temp, int top_k, float top_p, float min_p, uint64_t seed) {
  SamplerParams p;
  p.temperature = temp;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.seed = seed;
  return p;
}

struct Case {
  const char* what;
  SamplerParams p;
};
const Case kCases[] = {
    {"greedy", params(0.f, 40, 0.95f, 0.05f, 1)},
    {"top-k 8", params(1.0f, 8, 1.f, 0.f, 11)},
    {"top-k 30 + top-p 0.8", params(0.9f, 30, 0.8f, 0.f, 12)},
    {"top-p 0.6 alone", params(1.0f, 0, 0.6f, 0.f, 13)},
    {"min-p 0.3 alone", params(1.3f, 0, 1.f, 0.3f, 14)},
    {"defaults (top-k 40, top-p 0.95, min-p 0.05)", params(0.8f, 40, 0.95f, 0.05f, 15)},
    {"top-p 0.5 + min-p 0.2", params(0.7f, 0, 0.5f, 0.2f, 16)},
};

TEST(TextGenerator, MergedTopKSamplesTheSameIdsAsFullLogits) {
  constexpr int k = 64, steps = 300;
  for (const Case& c : kCases) {
    knot::Sampler full(c.p, V), part(c.p, V);
    int covered = 0;
    for (int i = 0; i < steps; i++) {
      const std::vector<float> l = logits_at(i);
      const SliceTopK m = merged(l, k);
      ASSERT_EQ((int)m.ids.size(), k);
      const int32_t a = full.sample(l.data(), V), b = part.sample_topk(m);
      if (c.p.temperature <= 0 || kept(l, c.p) < (size_t)k) {
        covered++;
        ASSERT_EQ(a, b) << c.what << ", step " << i;
      }
    }
    EXPECT_GE(covered, steps * 8 / 10) << c.what << ": too few steps where k covers the kept set";
  }
}

// Shard top-k that does not cover the kept set still samples sensibly (ids from the
// list), and a tiny k under top-p differs from the full draw somewhere — the equality
// above is not trivially true.
TEST(TextGenerator, UncoveredSetIsApproximateNotExact) {
  const SamplerParams p = params(1.0f, 0, 0.9f, 0.f, 5);
  knot::Sampler full(p, V), part(p, V);
  int differ = 0;
  for (int i = 0; i < 200; i++) {
    const std::vector<float> l = logits_at(i);
    const SliceTopK m = merged(l, 2);
    const int32_t b = part.sample_topk(m);
    EXPECT_TRUE(b == m.ids[0] || b == m.ids[1]);
    differ += full.sample(l.data(), V) != b;
  }
  EXPECT_GT(differ, 0);
}

TEST(TextGenerator, MergeKeepsLseAndMin) {
  const std::vector<float> l = logits_at(3);
  const SliceTopK whole = knot::topk_lse(l.data(), 0, V, 10), m = merged(l, 10);
  EXPECT_EQ(m.ids, whole.ids);
  EXPECT_EQ(m.logits, whole.logits);
  EXPECT_NEAR(m.lse, whole.lse, 1e-12 * std::fabs(whole.lse) + 1e-12);
  EXPECT_EQ(m.min, *std::min_element(l.begin(), l.end()));
  SliceTopK bad = m;
  bad.logits.pop_back();
  EXPECT_THROW(knot::merge_topk({bad}, 4), knot::Error);
  knot::Sampler s(params(1.f, 0, 1.f, 0.f, 1), V);
  EXPECT_THROW(s.sample_topk(bad), knot::Error);
}

// The Generator over merged top-k == the Generator over full logits: ids, text, reason.
TEST(TextGenerator, GeneratorFromTopKMatchesFullLogits) {
  const std::string model = knot_test::shared_model("stories260K.gguf");
  KNOT_REQUIRE_FILE(model);
  const knot::Tokenizer& tok = knot_test::shared_tokenizer("stories260K.gguf");
  int compared = 0;
  for (const Case& c : kCases) {
    knot::GenerateParams gp;
    gp.sampling = c.p;
    gp.n_predict = 40;
    gp.ignore_eos = true;
    gp.stop = {"zzq"};  // exercises the hold-back path
    knot::Generator a(tok, gp, V, 0), b(tok, gp, V, 0);
    const int32_t prompt[] = {1, 403, 407};
    a.start(prompt, 3);
    b.start(prompt, 3);
    for (int i = 0; !a.done(); i++) {
      const std::vector<float> l = logits_at(100 + i);
      if (c.p.temperature > 0 && kept(l, c.p) >= 64) {  // not covered: feed both the same token stream
        a.stop("skip");
        break;
      }
      const knot::GenStep sa = a.step(l.data(), V), sb = b.step(merged(l, 64));
      ASSERT_EQ(sa.id, sb.id) << c.what << " step " << i;
      ASSERT_EQ(sa.text, sb.text) << c.what << " step " << i;
      ASSERT_EQ(sa.done, sb.done);
    }
    if (a.reason() == "skip") continue;
    EXPECT_EQ(a.reason(), "length") << c.what;
    EXPECT_EQ(a.ids(), b.ids());
    EXPECT_EQ(a.text(), b.text());
    EXPECT_EQ(a.n_generated(), 40);
    compared++;
  }
  EXPECT_GE(compared, 4);
}

// Reasons: context (the next position would not fit), n_predict 0, stop(), misuse.
TEST(TextGenerator, StopReasons) {
  const std::string model = knot_test::shared_model("stories260K.gguf");
  KNOT_REQUIRE_FILE(model);
  const knot::Tokenizer& tok = knot_test::shared_tokenizer("stories260K.gguf");
  knot::GenerateParams gp;
  gp.sampling = params(0.f, 0, 1.f, 0.f, 1);
  gp.ignore_eos = true;
  const int32_t prompt[] = {1, 403, 407};
  knot::Generator g(tok, gp, V, 6);  // 3 prompt positions + 3 more
  EXPECT_THROW(g.step(logits_at(0).data(), V), knot::Error);  // before start()
  g.start(prompt, 3);
  int n = 0;
  while (!g.done()) g.step(logits_at(n++).data(), V);
  EXPECT_EQ(g.reason(), "context");
  EXPECT_EQ(n, 4);  // the 4th token is sampled from position 5's logits, then no room
  EXPECT_THROW(g.step(logits_at(0).data(), V), knot::Error);  // already finished
  g.start(prompt, 3);  // a new sequence
  EXPECT_FALSE(g.done());
  g.stop("callback");
  EXPECT_EQ(g.reason(), "callback");
  gp.n_predict = 0;
  knot::Generator z(tok, gp, V, 0);
  z.start(prompt, 3);
  EXPECT_TRUE(z.done());
  EXPECT_EQ(z.reason(), "length");
  EXPECT_THROW(z.start(prompt, 0), knot::Error);
}

}  // namespace
