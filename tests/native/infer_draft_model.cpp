// infer_draft_model.cpp — speculative decoding with a draft model (infer/draft_model.h):
// greedy output identical to plain decoding (a q4_k_m draft for the q8_0 target of the same
// model; synth drafts of another weight type and seed, small chunks, stops, the context
// limit), the draft's KV kept in step, a vocabulary mismatch named, and sampled generations
// distributed as plain ones over many seeds.
#include <cmath>
#include <map>

#include "infer/draft_model.h"
#include "infer/speculative.h"
#include "infer_util.h"
#include "text/vocab.h"

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
  // seen at least 10 times in the two runs together; 1e-4 tail). The greedy draft is a
  // one-hot q, so the acceptance rule keeps p; drafts are both kept and rejected.
  const std::string tpath = model_path("stories260K-pad256-llama-q8_0.gguf");
  const std::string dpath = model_path("stories260K-pad256-llama-q4_k_m.gguf");
  REQUIRE_SHARED_MODEL(tpath);
  REQUIRE_SHARED_MODEL(dpath);
  Model tm = load_model_file(tpath), dm = load_model_file(dpath);
  Tokenizer tok(tm.tokenizer);
  EngineOptions eo;
  eo.n_ctx = 96;
  Engine e(tm, eo), de(dm, eo);
  DraftModel d(de, 4);
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
