// container_hf_vocab.cpp — tokenizer.json -> TokenizerData on small hand-written files:
// the convert_hf_to_gguf mapping (ids, types, padding, merges in both forms, specials,
// chat template forms) and a clear error for each unsupported or malformed input.
// The real Qwen3 / Llama-3 files are covered by text_real_vocab.cpp.
#include <gtest/gtest.h>

#include "container/hf_vocab.h"
#include "kernels/common.h"

namespace {

const std::string kQwenRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+)";

std::string tokenizer_json(const std::string& model_extra = "", const std::string& pre = "") {
  const std::string pretok = pre.empty()
      ? R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": ")" + kQwenRegex +
            R"("}, "behavior": "Isolated"}, {"type": "ByteLevel", "use_regex": false}]})"
      : pre;
  return R"({"normalizer": {"type": "NFC"}, "pre_tokenizer": )" + pretok +
         R"(, "added_tokens": [{"id": 5, "content": "<|im_start|>", "special": true},
             {"id": 6, "content": "<|fim_prefix|>", "special": false},
             {"id": 7, "content": "<think>", "special": false}],
           "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "\u0120": 3}, "merges": )" +
         (model_extra.empty() ? std::string(R"(["a b"])") : model_extra) + "}}";
}

std::string error_of(const std::string& tj, const std::string& cfg = "", int pad = 0) {
  try {
    knot::tokenizer_from_hf(tj, cfg, "t.json", pad);
  } catch (const knot::Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ContainerHfVocab, MapsLikeConvertHfToGguf) {
  const auto t = knot::tokenizer_from_hf(tokenizer_json(), R"({"eos_token": "<|im_start|>", "bos_token": null,
      "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})", "t.json", 10);
  EXPECT_EQ(t.model, "gpt2");
  EXPECT_EQ(t.pre, "qwen2");
  ASSERT_EQ(t.tokens.size(), 10u);
  EXPECT_EQ(t.tokens[4], "[PAD4]");  // a hole in the ids
  EXPECT_EQ(t.tokens[9], "[PAD9]");  // padding past the file
  EXPECT_EQ(t.token_types[0], 1);
  EXPECT_EQ(t.token_types[4], 5);
  EXPECT_EQ(t.token_types[5], 3);  // special
  EXPECT_EQ(t.token_types[6], 3);  // not special but looks like <|...|>
  EXPECT_EQ(t.token_types[7], 4);  // user-defined
  EXPECT_EQ(t.merges, std::vector<std::string>{"a b"});
  EXPECT_EQ(t.eos_id, 5);
  EXPECT_EQ(t.bos_id, -1);
  EXPECT_FALSE(t.add_bos);
  EXPECT_EQ(t.chat_template, "D");
  // merges as pairs (newer tokenizer.json), Llama-3 regex -> llama-bpe with add_bos default
  std::string l3 = tokenizer_json(R"([["a", "b"]])");
  l3.replace(l3.find("\\\\p{N}|"), 7, "\\\\p{N}{1,3}|");
  const auto u = knot::tokenizer_from_hf(l3, R"({"bos_token": {"content": "a"}})", "t.json");
  EXPECT_EQ(u.pre, "llama-bpe");
  EXPECT_EQ(u.merges, std::vector<std::string>{"a b"});
  EXPECT_EQ(u.tokens.size(), 8u);
  EXPECT_EQ(u.bos_id, 0);
  EXPECT_TRUE(u.add_bos);
}

TEST(ContainerHfVocab, ErrorsNameTheProblem) {
  EXPECT_NE(error_of("{not json").find("t.json: not valid JSON"), std::string::npos);
  EXPECT_NE(error_of(R"({"model": {"type": "Unigram"}})").find("model type 'Unigram' is not supported"), std::string::npos);
  EXPECT_NE(error_of(R"({"model": {"type": "BPE", "byte_fallback": true}})").find("byte_fallback"), std::string::npos);
  EXPECT_NE(error_of(tokenizer_json("", R"({"type": "Metaspace"})")).find("'Metaspace' is not supported"), std::string::npos);
  EXPECT_NE(error_of(tokenizer_json("", R"({"type": "Split", "pattern": {"Regex": "x"}})")).find("no ByteLevel"), std::string::npos);
  EXPECT_NE(error_of(tokenizer_json("", R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "\\d+"}}, {"type": "ByteLevel"}]})"))
                .find("regex not supported"),
            std::string::npos);
  EXPECT_NE(error_of(tokenizer_json("[1]")).find("merges[0]"), std::string::npos);
  EXPECT_NE(error_of(tokenizer_json(), "", 3).find("--vocab 3 is smaller than the tokenizer's 8 tokens"), std::string::npos);
  EXPECT_NE(error_of(tokenizer_json(), R"({"eos_token": "</s>"})").find("special token '</s>'"), std::string::npos);
  EXPECT_NE(error_of(tokenizer_json(), R"({"chat_template": 5})").find("chat_template"), std::string::npos);
  EXPECT_NE(knot::tokenizer_from_hf(tokenizer_json(), "", "t.json").pre, "");
  EXPECT_THROW(knot::tokenizer_from_hf_files("/nonexistent/tokenizer.json", ""), knot::Error);
}

}  // namespace
