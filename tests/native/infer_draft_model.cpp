// infer_draft_model.cpp — speculative decoding with a draft model (infer/draft_model.h):
// greedy output identical to plain decoding (a q4_k_m draft for the q8_0 target of the same
// model; synth drafts of another weight type and seed, small chunks, stops, the context
// limit), the draft's KV kept in step, a vocabulary mismatch named, and sampled generations
// distributed as plain ones over many seeds — with one-hot (greedy) drafts and with drafts
// sampled from the draft model's own distribution, which are kept more often; a seed
// reproduces; a grammar constrains the drafts too.
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>

#include "infer/draft_model.h"
#include "infer/speculative.h"
#include "infer_util.h"
#include "text/json_schema.h"
#include "text/vocab.h"
#include <nlohmann/json.hpp>

using namespace infer_test;
using namespace knot;

namespace {

GenerateParams greedy_params(int n) {
  GenerateParams p;
  p.n_predict = n;
  p.sampling.temperature = 0;
  p.ignore_eos = true;
  return p;
}

// Two-sample chi-square of the token counts at one position (cells of fewer than 10 in
// both runs together pooled) against the 1e-4 upper tail (Wilson–Hilferty); "" when it passes.
std::string chi2_two_sample(const std::map<int32_t, int>& a, const std::map<int32_t, int>& b) {
  std::map<int32_t, std::pair<int, int>> both;
  for (auto [id, n] : a) both[id].first += n;
  for (auto [id, n] : b) both[id].second += n;
  double x2 = 0;
  int dof = -1, ra = 0, rb = 0;
  auto cell = [&](int x, int y) {
    const double e1 = (x + y) / 2.0;  // equal sample sizes
    x2 += (x - e1) * (x - e1) / e1 + (y - e1) * (y - e1) / e1;
    dof++;
  };
  for (auto [id, n] : both) {
    if (n.first + n.second < 10) ra += n.first, rb += n.second;
    else cell(n.first, n.second);
  }
  if (ra + rb >= 10) cell(ra, rb);
  if (dof < 1) return "fewer than 2 cells";
  const double zq = 3.719, d = dof;
  const double crit = d * std::pow(1 - 2 / (9 * d) + zq * std::sqrt(2 / (9 * d)), 3);
  if (x2 < crit) return "";
  return "chi-square " + std::to_string(x2) + " >= " + std::to_string(crit) + " (" + std::to_string(dof) + " dof)";
}

struct SharedPair {
  Model tm, dm;
};
const SharedPair* shared_pair() {
  static std::unique_ptr<SharedPair> p = [] {
    const std::string tpath = model_path("stories260K-pad256-llama-q8_0.gguf");
    const std::string dpath = model_path("stories260K-pad256-llama-q4_k_m.gguf");
    std::unique_ptr<SharedPair> r;
    if (!std::filesystem::exists(tpath) || !std::filesystem::exists(dpath)) return r;
    r.reset(new SharedPair{load_model_file(tpath), load_model_file(dpath)});
    return r;
  }();
  return p.get();
}
#define REQUIRE_SHARED_PAIR(pp)                                                                   \
  REQUIRE_SHARED_MODEL(model_path("stories260K-pad256-llama-q8_0.gguf"));                       \
  REQUIRE_SHARED_MODEL(model_path("stories260K-pad256-llama-q4_k_m.gguf"));                     \
  const SharedPair* pp = shared_pair();

GenerateParams sampled_params(int n, float temperature, uint64_t seed) {
  GenerateParams p;
  p.n_predict = n;
  p.ignore_eos = true;
  p.sampling.temperature = temperature, p.sampling.top_k = 0, p.sampling.top_p = 1.0f, p.sampling.min_p = 0.0f;
  p.sampling.seed = seed;
  return p;
}

}  // namespace

TEST(DraftModel, GreedyIdsEqualPlainDecodingWithAQ4DraftForAQ8Target) {
  const std::string tpath = model_path("stories260K-pad256-llama-q8_0.gguf");
  const std::string dpath = model_path("stories260K-pad256-llama-q4_k_m.gguf");
  REQUIRE_SHARED_MODEL(tpath);
  REQUIRE_SHARED_MODEL(dpath);
  Model tm = load_model_file(tpath), dm = load_model_file(dpath);
  check_same_vocab(tm.tokenizer, dm.tokenizer, tpath, dpath);
  Tokenizer tok(tm.tokenizer);
  EngineOptions eo;
  eo.n_ctx = 256;
  Engine e(tm, eo), de(dm, eo);
  const std::vector<int32_t> prompt = tok.encode("Once upon a time, there was a little girl named Lily. She", true, false);
  const GenerateResult plain = e.generate(tok, prompt, greedy_params(120));
  for (int k : {1, 2, 4, 8}) {
    DraftModel d(de, k);
    const GenerateResult r = e.generate(tok, prompt, greedy_params(120), {}, &d);
    EXPECT_EQ(r.ids, plain.ids) << "draft_n " << k;
    EXPECT_EQ(r.text, plain.text) << "draft_n " << k;
    const Telemetry& t = e.telemetry();
    EXPECT_GT(t.n_accepted, 0) << "draft_n " << k;
    if (k > 1) EXPECT_LT(t.n_accepted, t.n_drafted) << "draft_n " << k << ": some drafts must be rejected";
    EXPECT_LT(t.n_decoded, 119) << "draft_n " << k << ": fewer target passes than tokens";
    EXPECT_EQ(t.n_generated, 120);
    EXPECT_LE(t.n_generated - 1, t.n_decoded + t.n_accepted);
    EXPECT_GE(t.n_generated - 1, t.n_decoded + t.n_accepted - 1);
    // the draft's KV holds the prompt + generated tokens it was fed, no more than the target's + k
    EXPECT_LE(de.n_pos(), e.n_pos() + k);
  }
}

TEST(DraftModel, GreedyIdsEqualPlainOnSynthModelsWithSmallChunksStopsAndTheContextLimit) {
  // target Q4_K / Q8_0; draft: another weight type and another seed (a weaker guess), or
  // the target's own weights (its guesses are nearly always right)
  for (const char* type : {"Q8_0", "Q4_K"}) {
    const Model& m = synth(llama_gqa(type));
    Tokenizer tok(m.tokenizer);
    SynthOptions other = llama_gqa("F32");
    other.seed = 11;
    for (const Model* dmp : {&synth(llama_gqa("F32")), &synth(other), &m}) {
      check_same_vocab(m.tokenizer, dmp->tokenizer, "target", "draft");
      for (int chunk : {3, 64}) {
        EngineOptions eo;
        eo.n_ctx = 80;
        eo.chunk = chunk;
        Engine e(m, eo), de(*dmp, eo);
        DraftModel d(de, 5);
        const std::vector<int32_t> prompt = {1, 5, 9, 5, 9, 5, 9, 17};
        const GenerateResult plain = e.generate(tok, prompt, greedy_params(100));  // runs into the context
        EXPECT_EQ(plain.stop_reason, "context");
        const GenerateResult spec = e.generate(tok, prompt, greedy_params(100), {}, &d);
        EXPECT_EQ(spec.ids, plain.ids) << type << " chunk " << chunk;
        EXPECT_EQ(spec.stop_reason, "context");
        if (dmp == &m) EXPECT_GT(e.telemetry().n_accepted, e.telemetry().n_drafted / 2) << type;
        if (plain.text.size() > 20) {
          GenerateParams p = greedy_params(100);
          p.stop = {plain.text.substr(12, 3)};
          const GenerateResult a = e.generate(tok, prompt, p), b = e.generate(tok, prompt, p, {}, &d);
          EXPECT_EQ(a.text, b.text) << type;
          EXPECT_EQ(a.stop_reason, b.stop_reason);
        }
      }
    }
  }
}

TEST(DraftModel, AVocabularyMismatchNamesBothModels) {
  const Model& a = synth(llama_gqa("F32"));
  SynthOptions o = llama_gqa("F32");
  o.vocab = 320;
  const Model& b = synth(o);
  try {
    check_same_vocab(a.tokenizer, b.tokenizer, "target.gguf", "small.gguf");
    FAIL() << "no error";
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("small.gguf"), std::string::npos) << msg;
    EXPECT_NE(msg.find("target.gguf"), std::string::npos) << msg;
    EXPECT_NE(msg.find("320 vs 300"), std::string::npos) << msg;
  }
  TokenizerData t = a.tokenizer;
  t.tokens[42] = "different";
  EXPECT_THROW(check_same_vocab(a.tokenizer, t, "a", "b"), std::exception);
  EngineOptions eo;
  eo.n_ctx = 16;
  Engine e(a, eo);
  EXPECT_THROW(DraftModel(e, 0), std::exception);
}

TEST(DraftModel, SampledGenerationsAreDistributedAsPlainOnes) {
  // Many seeds at temperature 0.8: the token at each of the first 6 generated positions with
  // a q4_k_m draft (n 4) against plain q8_0 decoding (two-sample chi-square over the tokens
  // seen at least 10 times in the two runs together; 1e-4 tail). One-hot drafts (the draft's
  // argmax, DraftModel one_hot): q is one-hot, so the acceptance rule keeps p; drafts are both
  // kept and rejected. (Sampled drafts: WithSampledDraftsSampledGenerations... below.)
  const std::string tpath = model_path("stories260K-pad256-llama-q8_0.gguf");
  const std::string dpath = model_path("stories260K-pad256-llama-q4_k_m.gguf");
  REQUIRE_SHARED_MODEL(tpath);
  REQUIRE_SHARED_MODEL(dpath);
  Model tm = load_model_file(tpath), dm = load_model_file(dpath);
  Tokenizer tok(tm.tokenizer);
  EngineOptions eo;
  eo.n_ctx = 96;
  Engine e(tm, eo), de(dm, eo);
  DraftModel d(de, 4, true);
  const std::vector<int32_t> prompt = tok.encode("Lily saw a big red ball. She", true, false);
  const int seeds = 1500, positions = 6;
  std::vector<std::map<int32_t, int>> a(positions), b(positions);
  int drafted = 0, accepted = 0;
  for (int s = 0; s < seeds; s++) {
    GenerateParams p;
    p.n_predict = positions;
    p.ignore_eos = true;
    p.sampling.temperature = 0.8f, p.sampling.top_k = 0, p.sampling.top_p = 1.0f, p.sampling.min_p = 0.0f;
    p.sampling.seed = 77 + s;
    const GenerateResult x = e.generate(tok, prompt, p);
    p.sampling.seed = 900001 + s;
    const GenerateResult y = e.generate(tok, prompt, p, {}, &d);
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
      const double e1 = (n.first + n.second) / 2.0;
      x2 += (n.first - e1) * (n.first - e1) / e1 + (n.second - e1) * (n.second - e1) / e1;
      dof++;
    }
    if (ra + rb >= 10) {
      const double e1 = (ra + rb) / 2.0;
      x2 += (ra - e1) * (ra - e1) / e1 + (rb - e1) * (rb - e1) / e1;
      dof++;
    }
    ASSERT_GE(dof, 1) << "position " << i;
    const double zq = 3.719, dd = dof;
    const double crit = dd * std::pow(1 - 2 / (9 * dd) + zq * std::sqrt(2 / (9 * dd)), 3);
    EXPECT_LT(x2, crit) << "position " << i << " (" << dof << " dof)";
  }
}

TEST(DraftModel, WithSampledDraftsSampledGenerationsAreDistributedAsPlainOnes) {
  // The drafts are drawn from the q4_k_m draft's own distribution q (after the request's
  // chain) and verified by min(1, p/q) / norm(max(0, p - q)): the token at each of the
  // first 6 generated positions over 1,200 seeds against plain q8_0 decoding (two-sample
  // chi-square, 1e-4 tail), at temperature 1 with no filters and at 0.8 with top-k 40,
  // top-p 0.95, min-p 0.05 and a repetition penalty (the transforms the draft mirrors).
  REQUIRE_SHARED_PAIR(pp);
  Tokenizer tok(pp->tm.tokenizer);
  EngineOptions eo;
  eo.n_ctx = 96;
  Engine e(pp->tm, eo), de(pp->dm, eo);
  DraftModel d(de, 4);
  const std::vector<int32_t> prompt = tok.encode("Lily saw a big red ball. She", true, false);
  const int seeds = 1200, positions = 6;
  for (int chain = 0; chain < 2; chain++) {
    std::vector<std::map<int32_t, int>> a(positions), b(positions);
    int drafted = 0, accepted = 0;
    for (int s = 0; s < seeds; s++) {
      GenerateParams p = sampled_params(positions, chain ? 0.8f : 1.0f, 77 + s);
      if (chain) p.sampling.top_k = 40, p.sampling.top_p = 0.95f, p.sampling.min_p = 0.05f, p.sampling.repeat_penalty = 1.3f;
      const GenerateResult x = e.generate(tok, prompt, p);
      p.sampling.seed = 900001 + s;
      const GenerateResult y = e.generate(tok, prompt, p, {}, &d);
      drafted += e.telemetry().n_drafted, accepted += e.telemetry().n_accepted;
      for (int i = 0; i < positions; i++) a[i][x.ids[i]]++, b[i][y.ids[i]]++;
    }
    EXPECT_GT(accepted, 100) << "chain " << chain;
    EXPECT_GT(drafted - accepted, 100) << "chain " << chain;
    for (int i = 0; i < positions; i++) EXPECT_EQ(chi2_two_sample(a[i], b[i]), "") << "chain " << chain << ", position " << i;
  }
}

TEST(DraftModel, SampledDraftsAreKeptMoreOftenThanOneHotDraftsAtTemperatureOne) {
  // Temperature 1, no filters, the same 60 seeds x 32 tokens: a one-hot draft (the draft's
  // argmax) is kept with probability p(argmax), a sampled one with sum(min(p, q)), which is
  // larger when the draft's distribution is close to the target's (its own q4_k_m twin).
  // Observed, not assumed: the counts are printed, and the difference must exceed 5 standard
  // errors of the two rates.
  REQUIRE_SHARED_PAIR(pp);
  Tokenizer tok(pp->tm.tokenizer);
  EngineOptions eo;
  eo.n_ctx = 96;
  Engine e(pp->tm, eo), de(pp->dm, eo);
  DraftModel sampled(de, 4), one_hot(de, 4, true);
  const std::vector<int32_t> prompt = tok.encode("Once upon a time, there was a little girl named Lily. She", true, false);
  int dr[2] = {0, 0}, ac[2] = {0, 0};
  for (int s = 0; s < 60; s++)
    for (int k = 0; k < 2; k++) {
      const GenerateResult r = e.generate(tok, prompt, sampled_params(32, 1.0f, 4242 + s), {}, k ? &one_hot : &sampled);
      EXPECT_EQ(r.ids.size(), 32u);
      dr[k] += e.telemetry().n_drafted, ac[k] += e.telemetry().n_accepted;
    }
  const double rs = (double)ac[0] / dr[0], ro = (double)ac[1] / dr[1];
  std::printf("acceptance at temperature 1: sampled drafts %d/%d = %.3f, one-hot drafts %d/%d = %.3f\n", ac[0], dr[0], rs,
              ac[1], dr[1], ro);
  const double se = std::sqrt(rs * (1 - rs) / dr[0] + ro * (1 - ro) / dr[1]);
  EXPECT_GT(rs - ro, 5 * se) << "sampled " << rs << ", one-hot " << ro;
}

TEST(DraftModel, ASeedReproducesASampledDraftRun) {
  // All randomness comes from the request's seeded RNG in a fixed order (the draft's draws,
  // then the verifier's): the same seed gives the same ids, whatever the draft's KV held
  // before (a fresh draft engine, or one left from another run); another seed differs.
  REQUIRE_SHARED_PAIR(pp);
  Tokenizer tok(pp->tm.tokenizer);
  EngineOptions eo;
  eo.n_ctx = 128;
  Engine e(pp->tm, eo), de(pp->dm, eo), de2(pp->dm, eo);
  DraftModel d(de, 4), d2(de2, 4);
  const std::vector<int32_t> prompt = tok.encode("Tom had a little dog.", true, false);
  GenerateParams p = sampled_params(60, 0.9f, 31337);
  p.sampling.top_k = 40, p.sampling.top_p = 0.95f, p.sampling.min_p = 0.05f;
  const GenerateResult a = e.generate(tok, prompt, p, {}, &d);
  EXPECT_GT(e.telemetry().n_accepted, 0);
  EXPECT_LT(e.telemetry().n_accepted, e.telemetry().n_drafted);
  GenerateParams other = p;
  other.sampling.seed = 1;
  const GenerateResult c = e.generate(tok, prompt, other, {}, &d);  // leaves d's KV elsewhere
  const GenerateResult b = e.generate(tok, prompt, p, {}, &d);
  const GenerateResult f = e.generate(tok, prompt, p, {}, &d2);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.ids, f.ids);
  EXPECT_NE(a.ids, c.ids);
}

TEST(DraftModel, AGrammarConstrainsSampledDrafts) {
  // A JSON Schema on the shared stories pair: sampled drafts are drawn from the grammar's
  // allowed tokens (a refused draft would throw in Generator::draft_sample), so they are
  // kept about as often as without one; every output is valid JSON of the schema's shape;
  // greedy with a draft gives the plain greedy ids.
  REQUIRE_SHARED_PAIR(pp);
  Tokenizer tok(pp->tm.tokenizer);
  EngineOptions eo;
  eo.n_ctx = 256;
  Engine e(pp->tm, eo), de(pp->dm, eo);
  DraftModel d(de, 4);
  const std::vector<int32_t> prompt = tok.encode("Lily said:", true, false);
  const std::string schema = R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
    "age": {"type": "integer"}}, "required": ["name", "age"], "additionalProperties": false})";
  int drafted = 0, accepted = 0;
  for (uint64_t seed = 1; seed <= 20; seed++) {
    GenerateParams p;
    p.n_predict = 200;
    p.sampling.temperature = 1.0f, p.sampling.seed = seed;
    p.grammar = json_schema_to_gbnf(std::string_view(schema));
    const GenerateResult r = e.generate(tok, prompt, p, {}, &d);
    drafted += e.telemetry().n_drafted, accepted += e.telemetry().n_accepted;
    EXPECT_TRUE(r.stop_reason == "grammar" || r.stop_reason == "eog") << seed << ": " << r.stop_reason << ": " << r.text;
    const nlohmann::json v = nlohmann::json::parse(r.text, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << "seed " << seed << ": " << r.text;
    EXPECT_TRUE(v.is_object() && v.contains("name") && v["name"].is_string() && v.contains("age") && v["age"].is_number_integer())
        << r.text;
  }
  EXPECT_GT(drafted, 50);
  EXPECT_GT(accepted, drafted / 4) << accepted << " of " << drafted;
  GenerateParams g = greedy_params(200);
  g.ignore_eos = false;
  g.grammar = json_schema_to_gbnf(std::string_view(schema));
  const GenerateResult plain = e.generate(tok, prompt, g), spec = e.generate(tok, prompt, g, {}, &d);
  EXPECT_EQ(spec.ids, plain.ids);
  EXPECT_EQ(spec.text, plain.text);
}
