// text_real_vocab.cpp — the real Qwen3 and Llama-3 byte-level BPE vocabularies, carried by
// models that `knot synth --vocab-from` wrote (GGUF and .knot), against @lenml/tokenizers.
// The ctest fixture text_real_vocab_fixture (tests/wasm/tokenizer-ref.mjs --write) writes
// the models and the reference ids of tests/data/tokenizer-corpus.json into KNOT_TOKREF.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "container/loader.h"
#include "text/chat.h"
#include "text/unicode.h"
#include "text/vocab.h"
#include "test_paths.h"

namespace {

using json = nlohmann::ordered_json;  // the chats' dicts keep their key order

std::string tokref_dir() { return knot_test::bin_dir() + "/../tokref"; }

struct Ref {
  json doc;
  bool ok = false;
};

const Ref& reference(const std::string& vocab) {
  static std::map<std::string, Ref> cache;
  auto [it, fresh] = cache.try_emplace(vocab);
  if (fresh) {
    std::ifstream f(tokref_dir() + "/" + vocab + ".json");
    if (f) {
      std::stringstream ss;
      ss << f.rdbuf();
      it->second.doc = json::parse(ss.str());
      it->second.ok = true;
    }
  }
  return it->second;
}

std::string unhex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out += (char)std::stoi(h.substr(i, 2), nullptr, 16);
  return out;
}

std::string ids_str(const std::vector<int32_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); i++) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

#define REQUIRE_REF(r)                                                                      \
  do {                                                                                      \
    if (!(r).ok) {                                                                          \
      if (std::getenv("CI")) FAIL() << "reference ids missing in " << tokref_dir();         \
      GTEST_SKIP() << "reference ids missing in " << tokref_dir() << " (npm ci, then ctest)"; \
    }                                                                                       \
  } while (0)

class RealVocab : public ::testing::TestWithParam<std::tuple<const char*, const char*>> {};

TEST_P(RealVocab, IdsEqualReferenceAndRoundTrip) {
  const std::string vocab = std::get<0>(GetParam()), ext = std::get<1>(GetParam());
  const Ref& r = reference(vocab);
  REQUIRE_REF(r);
  knot::LoadOptions lo;
  lo.load_tensors = false;
  const knot::Model m = knot::load_model_file(tokref_dir() + "/" + vocab + "." + ext, lo);
  // padded like the real models
  EXPECT_EQ((int)m.tokenizer.tokens.size(), r.doc["n_vocab"].get<int>());
  EXPECT_EQ(m.config.n_vocab_tensor, r.doc["n_rows"].get<int>());
  const knot::Tokenizer tok(m.tokenizer);

  size_t n_checked = 0, n_invalid = 0, n_nfc = 0;
  for (const json& e : r.doc["entries"]) {
    const std::string bytes = unhex(e["hex"].get<std::string>());
    const std::string label = e["hex"].get<std::string>().substr(0, 80);
    const auto special = tok.encode(bytes, false, true);
    const auto plain = tok.encode(bytes, false, false);
    // decode(encode(x)) == x: exact bytes, valid UTF-8 or not (byte-level BPE is lossless)
    EXPECT_EQ(tok.decode(plain), bytes) << label;
    if (!e.contains("special")) {  // invalid UTF-8: no reference can take these bytes
      n_invalid++;
      continue;
    }
    EXPECT_EQ(ids_str(special), ids_str(e["special"].get<std::vector<int32_t>>())) << vocab << " special " << label;
    EXPECT_EQ(ids_str(plain), ids_str(e["plain"].get<std::vector<int32_t>>())) << vocab << " plain " << label;
    if (e["nfc_stable"].get<bool>()) {
      // where NFC changes nothing, the unmodified tokenizer.json agrees too
      EXPECT_EQ(ids_str(special), ids_str(e["original"].get<std::vector<int32_t>>())) << vocab << " original " << label;
    } else if (vocab == "qwen3" && special != e["original"].get<std::vector<int32_t>>()) {
      n_nfc++;  // our documented choice: no NFC (llama.cpp's), so decode(encode(x)) == x
    }
    n_checked++;
  }
  EXPECT_GE(n_checked, 300u);
  EXPECT_GE(n_invalid, 10u);
  if (vocab == "qwen3") {
    EXPECT_GE(n_nfc, 3u) << "the corpus must show the NFC difference";
  }
}

TEST_P(RealVocab, TypesBosAndSpecials) {
  const std::string vocab = std::get<0>(GetParam()), ext = std::get<1>(GetParam());
  const Ref& r = reference(vocab);
  REQUIRE_REF(r);
  knot::LoadOptions lo;
  lo.load_tensors = false;
  const knot::Model m = knot::load_model_file(tokref_dir() + "/" + vocab + "." + ext, lo);
  const knot::Tokenizer tok(m.tokenizer);
  if (vocab == "qwen3") {
    EXPECT_EQ(tok.bos(), -1);
    EXPECT_EQ(tok.eos(), tok.find_token("<|im_end|>"));
    EXPECT_TRUE(tok.is_eog(tok.find_token("<|im_end|>")));
    EXPECT_TRUE(tok.is_eog(tok.find_token("<|endoftext|>")));
    EXPECT_EQ(tok.token_type(tok.find_token("<|im_start|>")), 3);
    EXPECT_EQ(tok.token_type(tok.find_token("<|fim_prefix|>")), 3);  // not "special" in the file, looks special
    EXPECT_EQ(tok.token_type(tok.find_token("<think>")), 4);          // user-defined: matched as text
    EXPECT_EQ(tok.token_type(151669), 5);
    // "</s>" is an ordinary BPE token of this vocab (128247). We keep the file's type, as
    // HF does (llama.cpp would retype it control and match it in text): not end of
    // generation, never produced from the text "</s>" (the corpus compares the ids).
    const int32_t eos_text = tok.find_token("</s>");
    ASSERT_GE(eos_text, 0);
    EXPECT_EQ(tok.token_type(eos_text), 1);
    EXPECT_FALSE(tok.is_eog(eos_text));
    EXPECT_GT(tok.encode("</s>", false, true).size(), 1u);
    EXPECT_EQ(tok.data().tokens[151935], "[PAD151935]");
    // add_bos_token false: no BOS even when asked
    EXPECT_EQ(tok.encode("hi", true, true), tok.encode("hi", false, true));
    // the example: a rendered ChatML conversation is 40 tokens with special parsing
    const std::string chat =
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is the capital of "
        "France?<|im_end|>\n<|im_start|>assistant\n";
    EXPECT_LT(tok.encode(chat, true, true).size(), tok.encode(chat, true, false).size());
    EXPECT_EQ(tok.decode(tok.encode(chat, true, false)), chat);
  } else {
    EXPECT_EQ(tok.bos(), 128000);
    EXPECT_EQ(tok.eos(), 128001);
    EXPECT_TRUE(tok.is_eog(tok.find_token("<|eot_id|>")));
    const auto ids = tok.encode("Hello", true, true);
    ASSERT_EQ(ids.size(), 2u);
    EXPECT_EQ(ids[0], 128000);
    EXPECT_EQ(tok.token_type(128255), 3);
    EXPECT_EQ(tok.token_to_piece(128000, true), "<|begin_of_text|>");
    EXPECT_EQ(tok.token_to_piece(128000, false), "");
  }
}

// The real tokenizer_config.json chat template, rendered by our Jinja subset, equals
// @huggingface/jinja's rendering (the fixture's "expected") for every conversation.
TEST_P(RealVocab, ChatTemplateEqualsReference) {
  const std::string vocab = std::get<0>(GetParam()), ext = std::get<1>(GetParam());
  const Ref& r = reference(vocab);
  REQUIRE_REF(r);
  knot::LoadOptions lo;
  lo.load_tensors = false;
  const knot::Model m = knot::load_model_file(tokref_dir() + "/" + vocab + "." + ext, lo);
  ASSERT_FALSE(m.tokenizer.chat_template.empty());
  size_t n = 0;
  for (const json& c : r.doc["chats"]) {
    const std::string got = knot::render_jinja_chat(m.tokenizer, c["messages"].dump(), c["add_generation_prompt"].get<bool>(),
                                                    c["extra"].dump());
    EXPECT_EQ(got, c["expected"].get<std::string>()) << c["messages"].dump();
    n++;
  }
  EXPECT_EQ(knot::default_chat_template(m.tokenizer), "jinja");  // what every chat path renders by default
  EXPECT_GE(n, 8u);
}

INSTANTIATE_TEST_SUITE_P(Files, RealVocab,
                         ::testing::Combine(::testing::Values("qwen3", "llama3"), ::testing::Values("gguf", "knot")),
                         [](const auto& info) { return std::string(std::get<0>(info.param)) + "_" + std::get<1>(info.param); });

}  // namespace
