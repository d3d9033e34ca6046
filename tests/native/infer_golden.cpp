// Outputs of `knot generate` recorded from the build before the generation loop moved
// into core/text/generator.h (tests/golden/record.mjs -> outputs.json): every shared model
// x sampler path (greedy, reference, top-k/top-p/min-p defaults, top-p alone, min-p alone,
// repetition penalty + stop strings, ignore-eos up to the context limit) must give the same
// ids and the same text bytes, streamed and returned. A regression guard only: the
// recording is our own build's output, not a correctness reference; correctness is checked
// against the float64 reference and llama.cpp (reference-outputs.json, infer_greedy.cpp).
#include <fstream>

#include "infer_util.h"

namespace {

using infer_test::model_path;

std::string hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string h;
  for (unsigned char c : s) h += {d[c >> 4], d[c & 15]};
  return h;
}

// The CLI flags the recorder used -> engine options and generation parameters.
void apply_args(const std::vector<std::string>& a, knot::EngineOptions& eo, knot::GenerateParams& p) {
  for (size_t i = 0; i < a.size(); i++) {
    const std::string& f = a[i];
    auto val = [&] { return a.at(++i); };
    if (f == "--temp") p.sampling.temperature = std::stof(val());
    else if (f == "--top-k") p.sampling.top_k = std::stoi(val());
    else if (f == "--top-p") p.sampling.top_p = std::stof(val());
    else if (f == "--min-p") p.sampling.min_p = std::stof(val());
    else if (f == "--repeat-penalty") p.sampling.repeat_penalty = std::stof(val());
    else if (f == "--seed") p.sampling.seed = std::stoull(val());
    else if (f == "--stop") p.stop.push_back(val());
    else if (f == "--ignore-eos") p.ignore_eos = true;
    else if (f == "--reference") eo.mode = knot::Mode::Reference;
    else if (f == "--ctx") eo.n_ctx = std::stoi(val());
    else if (f == "--chunk") eo.chunk = std::stoi(val());
    else FAIL() << "unknown recorded flag " << f;
  }
}

TEST(InferGolden, RegressionGuardRecordedOutputsUnchangedOnSharedModels) {
  std::ifstream f(knot_test::source_dir() + "/tests/golden/outputs.json");
  ASSERT_TRUE(f.good()) << "tests/golden/outputs.json missing";
  const nlohmann::json g = nlohmann::json::parse(f);
  REQUIRE_SHARED_MODEL(model_path(g["cases"][0]["model"].get<std::string>()));
  std::map<std::string, std::unique_ptr<knot::Model>> models;
  int n = 0;
  for (const auto& c : g["cases"]) {
    const std::string name = c["model"], what = name + " " + c["setting"].get<std::string>();
    auto& m = models[name];
    if (!m) m = std::make_unique<knot::Model>(knot::load_model_file(model_path(name)));
    knot::Tokenizer tok(m->tokenizer);
    knot::EngineOptions eo;
    knot::GenerateParams p;
    p.n_predict = g["n_predict"];
    apply_args(c["args"].get<std::vector<std::string>>(), eo, p);
    knot::Engine e(*m, eo);
    std::string streamed;
    const knot::GenerateResult r = e.generate(tok, tok.encode(g["prompt"].get<std::string>(), true, false), p,
                                              [&](const std::string& piece) { streamed += piece; return true; });
    EXPECT_EQ(r.ids, infer_test::json_ids(c["native"]["ids"])) << what;
    EXPECT_EQ(hex(r.text), c["native"]["text_hex"].get<std::string>()) << what;
    EXPECT_EQ(streamed, r.text) << what;
    n++;
  }
  EXPECT_GE(g["cases"].size(), 42u);
  EXPECT_EQ(n, static_cast<int>(g["cases"].size())) << "every recorded case checked";
}

}  // namespace
