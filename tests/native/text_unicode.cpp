// text_unicode.cpp — UTF-8 helpers, character classes, GPT-2 byte map, pre-tokenizers.
#include <gtest/gtest.h>

#include <set>

#include "text/unicode.h"

using namespace knot::unicode;

static std::vector<std::string> split(const std::string& s, PreTok d) {
  std::vector<std::string> out;
  for (auto v : pretokenize(s, d)) out.emplace_back(v);
  return out;
}

TEST(TextUnicode, Utf8ValidLen) {
  EXPECT_EQ(utf8_valid_len("a", 0), 1u);
  EXPECT_EQ(utf8_valid_len("\xC3\xA9", 0), 2u);          // é
  EXPECT_EQ(utf8_valid_len("\xE2\x96\x81", 0), 3u);      // ▁
  EXPECT_EQ(utf8_valid_len("\xF0\x9F\xA6\x99", 0), 4u);  // 🦙
  EXPECT_EQ(utf8_valid_len("\xF0\x9F\xA6", 0), 0u);      // truncated
  EXPECT_EQ(utf8_valid_len("\x80", 0), 0u);              // lone continuation
  EXPECT_EQ(utf8_valid_len("\xC0\x80", 0), 0u);          // overlong NUL
  EXPECT_EQ(utf8_valid_len("\xED\xA0\x80", 0), 0u);      // surrogate D800
  EXPECT_EQ(utf8_valid_len("\xF4\x90\x80\x80", 0), 0u);  // > U+10FFFF
  EXPECT_EQ(utf8_valid_len("\xC3(", 0), 0u);             // bad continuation
}

TEST(TextUnicode, EncodeDecodeRoundTrip) {
  for (uint32_t cp : {0x41u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xFFFFu, 0x10000u, 0x1F999u, 0x10FFFFu}) {
    const std::string s = utf8_encode(cp);
    size_t i = 0;
    EXPECT_EQ(utf8_next(s, i), cp);
    EXPECT_EQ(i, s.size());
  }
  size_t i = 0;
  EXPECT_EQ(utf8_next("\xFF", i), kInvalid);
  EXPECT_EQ(i, 1u);
}

TEST(TextUnicode, CompletePrefix) {
  EXPECT_EQ(utf8_complete_prefix("abc"), 3u);
  EXPECT_EQ(utf8_complete_prefix("ab\xF0\x9F"), 2u);      // 🦙 cut after 2 bytes
  EXPECT_EQ(utf8_complete_prefix("ab\xF0\x9F\xA6"), 2u);  // cut after 3 bytes
  EXPECT_EQ(utf8_complete_prefix("ab\xF0\x9F\xA6\x99"), 6u);
  EXPECT_EQ(utf8_complete_prefix("ab\xC3"), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab\x80"), 3u);  // stray continuation: never completes
  EXPECT_EQ(utf8_complete_prefix("ab\xFF"), 3u);
  EXPECT_EQ(utf8_complete_prefix("ab\xED\xA0"), 4u);  // would be a surrogate: invalid now
}

TEST(TextUnicode, Sanitize) {
  EXPECT_EQ(utf8_sanitize("ok é"), "ok é");
  EXPECT_EQ(utf8_sanitize("a\xFF" "b"), "a\uFFFD" "b");
  EXPECT_EQ(utf8_sanitize("a\xE2\x82" "b"), "a\uFFFD" "b");  // truncated 3-byte: one U+FFFD
  EXPECT_EQ(utf8_sanitize("\xC0\x80"), "\uFFFD\uFFFD");        // overlong: two
}

TEST(TextUnicode, Classes) {
  for (uint32_t cp : {(uint32_t)'a', (uint32_t)'Z', 0xE9u /*é*/, 0x3B1u /*α*/, 0x416u /*Ж*/,
                      0x4E2Du /*中*/, 0x3042u /*あ*/, 0x30A2u /*ア*/, 0xAC00u /*가*/, 0x1F00u})
    EXPECT_TRUE(is_letter(cp)) << std::hex << cp;
  for (uint32_t cp : {(uint32_t)'1', (uint32_t)' ', (uint32_t)',', 0x300u /*combining grave*/,
                      0x2014u /*—*/, 0x1F999u /*🦙*/, 0x3002u /*。*/, kInvalid})
    EXPECT_FALSE(is_letter(cp)) << std::hex << cp;
  for (uint32_t cp : {(uint32_t)'0', (uint32_t)'9', 0xB2u /*²*/, 0x663u /*Arabic 3*/, 0xFF15u /*５*/, 0x2164u /*Ⅴ*/})
    EXPECT_TRUE(is_number(cp)) << std::hex << cp;
  EXPECT_FALSE(is_number('a'));
  for (uint32_t cp : {0x20u, 0x09u, 0x0Au, 0x0Du, 0xA0u, 0x3000u, 0x2003u}) EXPECT_TRUE(is_space(cp));
  EXPECT_FALSE(is_space('x'));
  EXPECT_FALSE(is_space(0x200Bu));  // zero-width space is not White_Space
}

TEST(TextUnicode, ByteMapIsBijection) {
  std::set<uint32_t> seen;
  for (int b = 0; b < 256; b++) {
    const uint32_t cp = byte_to_cp((uint8_t)b);
    EXPECT_TRUE(seen.insert(cp).second);
    EXPECT_EQ(cp_to_byte(cp), b);
    EXPECT_FALSE(is_space(cp)) << b;  // mapped text never contains whitespace
  }
  EXPECT_EQ(byte_to_cp(' '), 0x120u);   // Ġ
  EXPECT_EQ(byte_to_cp('\n'), 0x10Au);  // Ċ
  EXPECT_EQ(byte_to_cp('A'), (uint32_t)'A');
  EXPECT_EQ(cp_to_byte(0x4E2D), -1);
  EXPECT_EQ(bytes_to_mapped("a b"), "a\xC4\xA0" "b");
}

TEST(TextUnicode, Qwen2PreTokenizer) {
  // Derived by hand from the regex, alternative by alternative (see unicode.h).
  const std::vector<std::string> want = {"Hello", ",", " world", "!", " ", "1", "2", "3", " DON",
                                         "'T", " ", " stop", "\n\n", " ", " x"};
  EXPECT_EQ(split("Hello, world! 123 DON'T  stop\n\n  x", PreTok::Qwen2), want);
  EXPECT_EQ(split("Привет мир 你好 Γειά", PreTok::Qwen2),
            (std::vector<std::string>{"Привет", " мир", " 你好", " Γειά"}));
  // A non-space, non-letter character glues to the following word.
  EXPECT_EQ(split("¿Qué?", PreTok::Qwen2), (std::vector<std::string>{"¿Qué", "?"}));
  EXPECT_EQ(split("x = y;\r\n", PreTok::Qwen2), (std::vector<std::string>{"x", " =", " y", ";\r\n"}));
  EXPECT_EQ(split("a   ", PreTok::Qwen2), (std::vector<std::string>{"a", "   "}));  // trailing run
  EXPECT_EQ(split("", PreTok::Qwen2), std::vector<std::string>{});
}

TEST(TextUnicode, Gpt2PreTokenizer) {
  const std::vector<std::string> want = {"Hello", ",", " world", "!", " 123", " DON", "'", "T",
                                         " ", " stop", "\n\n ", " x"};
  EXPECT_EQ(split("Hello, world! 123 DON'T  stop\n\n  x", PreTok::Gpt2), want);
  EXPECT_EQ(split("it's", PreTok::Gpt2), (std::vector<std::string>{"it", "'s"}));
}

TEST(TextUnicode, Llama3DigitsInThrees) {
  EXPECT_EQ(split("12345", PreTok::Llama3), (std::vector<std::string>{"123", "45"}));
  EXPECT_EQ(split("12345", PreTok::Qwen2), (std::vector<std::string>{"1", "2", "3", "4", "5"}));
}

TEST(TextUnicode, PreTokenizersAreLossless) {
  const std::string inputs[] = {"plain", "  \t\n mixed \r\n\r\n  ", "bad \xFF\xC3( bytes \x80",
                                "日本語、テスト。", "emoji 🦙🚀!!", "'re 'VE 'll"};
  for (const auto& s : inputs) {
    for (PreTok d : {PreTok::Gpt2, PreTok::Qwen2, PreTok::Llama3}) {
      std::string joined;
      for (auto v : pretokenize(s, d)) {
        EXPECT_FALSE(v.empty());
        joined += v;
      }
      EXPECT_EQ(joined, s);
    }
  }
}
