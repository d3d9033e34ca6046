// infer_speculative.cpp — speculative decoding by prompt lookup (infer/speculative.h):
// the draft source; greedy output identical to plain decoding with drafts accepted and
// rejected (KV truncation), on a shared model and on synth models; the acceptance rule
// keeps the sampling distribution (the sampler's own draws against the exact softmax,
// and whole generations over many seeds against plain decoding).
#include <cmath>
#include <map>

#include "infer/speculative.h"
#include "infer_util.h"
#include "text/vocab.h"

using namespace infer_test;
using namespace knot;

namespace {

GenerateResult run(Engine& e, const Tokenizer& tok, const std::vector<int32_t>& prompt, GenerateParams p, int lookup) {
  p.lookup = lookup;
  return e.generate(tok, prompt, p);
}

GenerateParams greedy_params(int n) {
  GenerateParams p;
  p.n_predict = n;
  p.sampling.temperature = 0;
  p.ignore_eos = true;
  return p;
}

// chi-square statistic of observed counts against expected probabilities
double chi2(const std::vector<int>& obs, const std::vector<double>& p, int n) {
  double x = 0;
  for (size_t i = 0; i < obs.size(); i++)
    if (p[i] > 0) x += (obs[i] - n * p[i]) * (obs[i] - n * p[i]) / (n * p[i]);
  return x;
}

}  // namespace

TEST(DraftLookup, ProposesWhatFollowedTheLatestLongestMatch) {
  // last 3 tokens (7 8 9) occurred at 1..3, followed by 4 5
  EXPECT_EQ(draft_lookup({1, 7, 8, 9, 4, 5, 6, 7, 8, 9}, 4), (std::vector<int32_t>{4, 5, 6, 7}));
  EXPECT_EQ(draft_lookup({1, 7, 8, 9, 4, 5, 6, 7, 8, 9}, 2), (std::vector<int32_t>{4, 5}));
  // the latest occurrence wins: 2 is followed by 3 at 1 and by 4 at 4
  EXPECT_EQ(draft_lookup({1, 2, 3, 0, 2, 4, 9, 2}, 2), (std::vector<int32_t>{4, 9}));
  // the longest n-gram first: (5 2) matches at 3 (followed by 6) though 2 alone is later at 6
  EXPECT_EQ(draft_lookup({0, 0, 0, 5, 2, 6, 2, 7, 5, 2}, 1), (std::vector<int32_t>{6}));
  // nothing matches, or nothing follows
  EXPECT_TRUE(draft_lookup({1, 2, 3, 4}, 3).empty());
  EXPECT_TRUE(draft_lookup({4}, 3).empty());
  EXPECT_TRUE(draft_lookup({1, 2, 1, 2}, 0).empty());
  // a match near the end is cut at the history's end
  EXPECT_EQ(draft_lookup({3, 4, 3}, 5), (std::vector<int32_t>{4, 3}));
}

TEST(DraftLookup, TheDefaultMatchesUpToTwelveTokens) {
  // (1..11) occurs at 1 (then 20); its last 10 tokens (2..11) also at 14 (then 30)
  const std::vector<int32_t> h{9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 20, 0, 2, 3, 4, 5, 6, 7, 8, 9,
                               10, 11, 30, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  EXPECT_EQ(kLookupNgramMax, 12);
  EXPECT_EQ(draft_lookup(h, 1), (std::vector<int32_t>{20}));
  EXPECT_EQ(draft_lookup(h, 1, 10), (std::vector<int32_t>{30}));
}

TEST(LookupBudget, ShrinksAfterRejectedPassesRestsProbesAndGrowsAfterKeptOnes) {
  // the vector of tests/wasm/lookup-rule.test.mjs (which checks the JS copy against this one)
  LookupBudget b(8);
  const int outcomes[][2] = {{8, 0}, {4, 0}, {2, 0}, {1, 0}, {0, 0}, {0, 0}, {0, 0}, {0, 0}, {1, 1}, {2, 2}, {4, 4}, {8, 8}, {8, 3}, {8, 0}};
  std::vector<int> sizes{b.size()};
  for (const auto& o : outcomes) {
    b.update(o[0], o[1]);
    sizes.push_back(b.size());
  }
  EXPECT_EQ(sizes, (std::vector<int>{8, 4, 2, 1, 0, 0, 0, 0, 1, 2, 4, 8, 8, 8, 4}));
  EXPECT_EQ(LookupBudget(0).size(), 0);
}

TEST(Speculative, GreedyIdsEqualPlainDecodingOnTheSharedModel) {
  const std::string path = model_path("stories260K.gguf");
  REQUIRE_SHARED_MODEL(path);
  Model m = load_model_file(path);
  Tokenizer tok(m.tokenizer);
  EngineOptions eo;
  eo.n_ctx = 256;
  Engine e(m, eo);
  const std::string text =
      "Once upon a time, there was a little girl named Lily. She loved to play outside. "
      "Once upon a time, there was a little girl named Lily. She loved to";
  const std::vector<int32_t> prompt = tok.encode(text, true, false);
  const GenerateResult plain = run(e, tok, prompt, greedy_params(96), 0);
  int drafted = 0, accepted = 0;
  for (int k : {1, 2, 4, 8}) {
    const GenerateResult r = run(e, tok, prompt, greedy_params(96), k);
    EXPECT_EQ(r.ids, plain.ids) << "lookup " << k;
    EXPECT_EQ(r.text, plain.text) << "lookup " << k;
    const Telemetry& t = e.telemetry();
    drafted += t.n_drafted, accepted += t.n_accepted;
    EXPECT_LT(t.n_accepted, t.n_drafted) << "lookup " << k << ": some drafts must be rejected for the test to mean anything";
    EXPECT_EQ(t.n_generated, 96);
    // every token after the first is an accepted draft or the one token a pass adds (the
    // replacement of a rejected draft, or the last row's); the last pass may end on a draft
    EXPECT_LE(t.n_generated - 1, t.n_decoded + t.n_accepted) << "lookup " << k;
    EXPECT_GE(t.n_generated - 1, t.n_decoded + t.n_accepted - 1) << "lookup " << k;
  }
  EXPECT_GT(accepted, 0) << "no draft accepted in " << drafted;
}

TEST(Speculative, GreedyIdsEqualPlainOnSynthModelsWithSmallChunksAndStops) {
  // a random-weight model loops quickly, so lookup drafts are often right; chunk 3 caps a
  // pass at 2 drafts; stop strings and the context limit end generation mid-pass
  for (const char* type : {"F32", "Q8_0", "Q4_K"}) {
    const Model& m = synth(llama_gqa(type));
    Tokenizer tok(m.tokenizer);
    for (int chunk : {3, 64}) {
      EngineOptions eo;
      eo.n_ctx = 80;
      eo.chunk = chunk;
      Engine e(m, eo);
      const std::vector<int32_t> prompt = {1, 5, 9, 5, 9, 5, 9, 17};
      const GenerateResult plain = run(e, tok, prompt, greedy_params(100), 0);  // runs into the context
      EXPECT_EQ(plain.stop_reason, "context");
      const GenerateResult spec = run(e, tok, prompt, greedy_params(100), 6);
      EXPECT_EQ(spec.ids, plain.ids) << type << " chunk " << chunk;
      EXPECT_EQ(spec.stop_reason, "context");
      EXPECT_GT(e.telemetry().n_accepted, 0) << type << " chunk " << chunk;
      // a stop string inside what a pass accepted
      if (plain.text.size() > 20) {
        GenerateParams p = greedy_params(100);
        p.stop = {plain.text.substr(12, 3)};
        const GenerateResult a = run(e, tok, prompt, p, 0), b = run(e, tok, prompt, p, 6);
        EXPECT_EQ(a.text, b.text) << type;
        EXPECT_EQ(a.stop_reason, b.stop_reason);
      }
    }
  }
}

TEST(Speculative, TheAcceptanceRuleDrawsFromTheSamplersDistribution) {
  // 6 tokens; temperature 1.3, no filters: p = softmax(logits / 1.3). For every choice of
  // draft, sample_draft over many seeds must be distributed as p (chi-square, 5 dof:
  // 25.7 is the 1e-4 tail), and accept exactly the draft's share of the time.
  const std::vector<float> logits = {1.0f, 2.5f, 0.2f, 2.4f, -1.0f, 0.7f};
  SamplerParams sp;
  sp.temperature = 1.3f, sp.top_k = 0, sp.top_p = 1.0f, sp.min_p = 0.0f;
  std::vector<double> p(6);
  double z = 0;
  for (int i = 0; i < 6; i++) z += p[i] = std::exp(logits[i] / 1.3);
  for (double& v : p) v /= z;
  const int N = 30000;
  for (int32_t draft = 0; draft < 6; draft++) {
    std::vector<int> obs(6, 0);
    int kept = 0;
    for (int s = 0; s < N; s++) {
      sp.seed = 1000003ull * s + draft;
      Sampler smp(sp, 6);
      const Sampler::Draft d = smp.sample_draft(logits.data(), 6, draft);
      obs[d.id]++;
      kept += d.accepted;
      EXPECT_EQ(d.accepted, d.id == draft);
    }
    EXPECT_LT(chi2(obs, p, N), 25.7) << "draft " << draft;
    // acceptance is Bernoulli(p(draft)): within 4.5 sigma
    EXPECT_NEAR((double)kept / N, p[draft], 4.5 * std::sqrt(p[draft] * (1 - p[draft]) / N)) << "draft " << draft;
  }
  // and a rule that always kept the draft would fail the same check
  std::vector<int> always(6, 0);
  always[1] = N;
  EXPECT_GT(chi2(always, p, N), 25.7);
}

TEST(Speculative, TheAcceptanceRuleWithADraftDistributionDrawsFromTheSamplersDistribution) {
  // A sampling draft: x drawn from a draft distribution q, verified against p (the same
  // 6 logits at temperature 1.3) by min(1, p/q) / norm(max(0, p - q)). Over many seeds the
  // token must be distributed as p (chi-square, 5 dof, 1e-4 tail 25.7) and kept with
  // probability sum(min(p, q)) — for a q close to p, one far from it, a one-hot q given
  // explicitly, and q = p (always kept).
  const std::vector<float> logits = {1.0f, 2.5f, 0.2f, 2.4f, -1.0f, 0.7f};
  SamplerParams sp;
  sp.temperature = 1.3f, sp.top_k = 0, sp.top_p = 1.0f, sp.min_p = 0.0f;
  std::vector<double> p(6);
  double z = 0;
  for (int i = 0; i < 6; i++) z += p[i] = std::exp(logits[i] / 1.3);
  for (double& v : p) v /= z;
  std::vector<std::vector<double>> qs = {{0.1, 0.3, 0.05, 0.35, 0.05, 0.15},
                                         {0.6, 0.05, 0.2, 0.05, 0.05, 0.05},
                                         {0.0, 0.0, 0.0, 0.0, 1.0, 0.0},
                                         p};
  const int N = 30000;
  for (size_t qi = 0; qi < qs.size(); qi++) {
    Sampler::Dist q;
    for (int32_t i = 0; i < 6; i++)
      if (qs[qi][i] > 0) q.ids.push_back(i), q.p.push_back(qs[qi][i]);
    std::vector<int> obs(6, 0);
    int kept = 0;
    double overlap = 0;
    for (int i = 0; i < 6; i++) overlap += std::min(p[i], qs[qi][i]);
    for (int s = 0; s < N; s++) {
      SamplerParams dp = sp;
      dp.seed = 7777777ull * s + qi;
      Sampler drafter(dp, 6);  // the draft's own draw from q
      const int32_t x = drafter.draw(q);
      sp.seed = 1000003ull * s + qi;
      Sampler smp(sp, 6);
      const Sampler::Draft d = smp.sample_draft(logits.data(), 6, x, nullptr, &q);
      obs[d.id]++;
      kept += d.accepted;
      if (d.accepted) EXPECT_EQ(d.id, x);
    }
    EXPECT_LT(chi2(obs, p, N), 25.7) << "q " << qi;
    EXPECT_NEAR((double)kept / N, overlap, 4.5 * std::sqrt(std::max(1e-9, overlap * (1 - overlap)) / N)) << "q " << qi;
  }
  // a draft its q gives probability 0 was not drawn from it: refused
  Sampler::Dist q;
  q.ids = {1}, q.p = {1.0};
  Sampler smp(sp, 6);
  EXPECT_THROW(smp.sample_draft(logits.data(), 6, 2, nullptr, &q), std::exception);
}

TEST(Speculative, SampledGenerationsAreDistributedAsPlainOnes) {
  // Many seeds at temperature 0.8: the distribution of the token at each of the first 6
  // generated positions with lookup 4 against plain decoding (two-sample chi-square over
  // the tokens seen at least 10 times in the two runs together; 1e-4 tail). The prompt
  // repeats, so drafts are made and both kept and rejected.
  const std::string path = model_path("stories260K.gguf");
  REQUIRE_SHARED_MODEL(path);
  Model m = load_model_file(path);
  Tokenizer tok(m.tokenizer);
  EngineOptions eo;
  eo.n_ctx = 96;
  Engine e(m, eo);
  const std::vector<int32_t> prompt =
      tok.encode("Lily saw a big red ball. Lily saw a big red ball. Lily saw a big red ball. Lily saw", true, false);
  const int seeds = 1500, positions = 6;
  std::vector<std::map<int32_t, int>> a(positions), b(positions);
  int drafted = 0, accepted = 0;
  for (int s = 0; s < seeds; s++) {
    GenerateParams p;
    p.n_predict = positions;
    p.ignore_eos = true;
    p.sampling.temperature = 0.8f, p.sampling.top_k = 0, p.sampling.top_p = 1.0f, p.sampling.min_p = 0.0f;
    p.sampling.seed = 77 + s;
    const GenerateResult x = run(e, tok, prompt, p, 0);
    p.sampling.seed = 900001 + s;  // independent draws for the other sample
    const GenerateResult y = run(e, tok, prompt, p, 4);
    drafted += e.telemetry().n_drafted, accepted += e.telemetry().n_accepted;
    for (int i = 0; i < positions; i++) a[i][x.ids[i]]++, b[i][y.ids[i]]++;
  }
  EXPECT_GT(accepted, 100);
  EXPECT_GT(drafted - accepted, 100);
  for (int i = 0; i < positions; i++) {
    std::map<int32_t, std::pair<int, int>> both;
    for (auto [id, n] : a[i]) both[id].first += n;
    for (auto [id, n] : b[i]) both[id].second += n;
    double x2 = 0;
    int dof = -1, ra = 0, rb = 0;
    for (auto [id, n] : both) {
      if (n.first + n.second < 10) {
        ra += n.first, rb += n.second;
        continue;
      }
      const double e1 = (n.first + n.second) / 2.0;  // equal sample sizes
      x2 += (n.first - e1) * (n.first - e1) / e1 + (n.second - e1) * (n.second - e1) / e1;
      dof++;
    }
    if (ra + rb >= 10) {  // the rare tokens pooled into one cell
      const double e1 = (ra + rb) / 2.0;
      x2 += (ra - e1) * (ra - e1) / e1 + (rb - e1) * (rb - e1) / e1;
      dof++;
    }
    ASSERT_GE(dof, 1) << "position " << i;
    // 1e-4 upper tail of chi-square(dof) by the Wilson–Hilferty approximation
    const double zq = 3.719, d = dof;
    const double crit = d * std::pow(1 - 2 / (9 * d) + zq * std::sqrt(2 / (9 * d)), 3);
    EXPECT_LT(x2, crit) << "position " << i << " (" << dof << " dof)";
  }
}
