// text_bpe.cpp — byte-level BPE ("gpt2") on a small hand-built vocab whose expected
// tokenizations are derived by hand in the comments.
#include <gtest/gtest.h>

#include <algorithm>

#include "kernels/common.h"
#include "text/unicode.h"
#include "text/vocab.h"

using knot::Tokenizer;
using knot::TokenizerData;

namespace {

// Ids 0..255: the 256 byte characters in byte order (id == byte value).
// Ids 256..: the result of each merge, in merge (= rank) order. Then 3 control tokens.
// Note "l l" (rank 0) outranks "h e" (rank 4): "hello" must become one token only if
// merges are applied by rank, not left to right.
const char* kMerges[] = {
    "l l",      // 0 -> ll      256
    "e ll",     // 1 -> ell     257
    "h ell",    // 2 -> hell    258
    "hell o",   // 3 -> hello   259
    "h e",      // 4 -> he      260
    "Ġ t",      // 5 -> Ġt      261
    "he r",     // 6 -> her     262
    "Ġt he",    // 7 -> Ġthe    263
    "Ġ w",      // 8 -> Ġw      264
    "o r",      // 9 -> or      265
    "Ġw or",    // 10 -> Ġwor   266
    "l d",      // 11 -> ld     267
    "Ġwor ld",  // 12 -> Ġworld 268
    "1 2",      // 13 -> 12     269
    "' s",      // 14 -> 's     270
    "Ġ Ġ",      // 15 -> ĠĠ     271
    "Ċ Ċ",      // 16 -> ĊĊ     272
};
enum : int32_t { ll = 256, hello = 259, he = 260, the_ = 263, world = 268, n12 = 269, apos_s = 270,
                 spsp = 271, nlnl = 272, eot = 273, im_start = 274, im_end = 275 };

TokenizerData make_vocab(const std::string& pre) {
  TokenizerData d;
  d.model = "gpt2";
  d.pre = pre;
  for (int b = 0; b < 256; b++) d.tokens.push_back(knot::unicode::utf8_encode(knot::unicode::byte_to_cp((uint8_t)b)));
  for (const char* m : kMerges) {
    d.merges.push_back(m);
    std::string s = m;
    s.erase(s.find(' '), 1);
    d.tokens.push_back(s);
  }
  d.tokens.push_back("<|endoftext|>");
  d.tokens.push_back("<|im_start|>");
  d.tokens.push_back("<|im_end|>");
  d.token_types.assign(d.tokens.size(), 1);
  for (int i = eot; i <= im_end; i++) d.token_types[i] = 3;
  d.bos_id = eot;
  d.eos_id = im_end;
  d.add_bos = false;
  d.add_space_prefix = false;
  return d;
}

using V = std::vector<int32_t>;

}  // namespace

TEST(TextBpe, VocabLayout) {
  TokenizerData d = make_vocab("qwen2");
  EXPECT_EQ(d.tokens[hello], "hello");
  EXPECT_EQ(d.tokens[world], "Ġworld");
  EXPECT_EQ(d.tokens[nlnl], "ĊĊ");
}

TEST(TextBpe, MergesFollowRank) {
  Tokenizer tok(make_vocab("qwen2"));
  // h e l l o: "l l"(0) first -> h e ll o; "e ll"(1) -> h ell o; "h ell"(2); "hell o"(3).
  EXPECT_EQ(tok.encode("hello", false, false), V({hello}));
  // h e l p: only "h e"(4) applies.
  EXPECT_EQ(tok.encode("help", false, false), V({he, 'l', 'p'}));
  // Words "hello" " the" " world". " the": Ġ t h e -> "h e"(4) before "Ġ t"(5) -> Ġ t he
  // -> Ġt he -> "Ġt he"(7). " world": Ġw, or, Ġwor, ld, Ġworld.
  EXPECT_EQ(tok.encode("hello the world", false, false), V({hello, the_, world}));
  // é is bytes C3 A9, both map to themselves (Ã ©); "l l" merges, nothing else does.
  EXPECT_EQ(tok.encode("h\xC3\xA9llo", false, false), V({'h', 0xC3, 0xA9, ll, 'o'}));
}

TEST(TextBpe, Qwen2PreTokenization) {
  Tokenizer tok(make_vocab("qwen2"));
  EXPECT_EQ(tok.encode("123", false, false), V({'1', '2', '3'}));       // \p{N}: one digit per word
  EXPECT_EQ(tok.encode("it's", false, false), V({'i', 't', apos_s}));    // contraction 's
  EXPECT_EQ(tok.encode("IT'S", false, false), V({'I', 'T', '\'', 'S'})); // (?i:'s), no "' S" merge
  // "a  b": "a", " " (\s+(?!\S) leaves one space for " b"), " b".
  EXPECT_EQ(tok.encode("a  b", false, false), V({'a', ' ', ' ', 'b'}));
  // "a   b": "a", "  " -> ĠĠ, " b".
  EXPECT_EQ(tok.encode("a   b", false, false), V({'a', spsp, ' ', 'b'}));
  // \s*[\r\n]+ keeps "\n\n" as one word -> ĊĊ.
  EXPECT_EQ(tok.encode("x\n\ny", false, false), V({'x', nlnl, 'y'}));
}

TEST(TextBpe, Gpt2PreTokenization) {
  Tokenizer tok(make_vocab("gpt2"));
  EXPECT_EQ(tok.encode("123", false, false), V({n12, '3'}));  // " ?\p{N}+": one word
  // "\n\n" before y: \s+(?!\S) takes one "\n", then \s+ the other -> no ĊĊ merge.
  EXPECT_EQ(tok.encode("x\n\ny", false, false), V({'x', '\n', '\n', 'y'}));
  EXPECT_EQ(tok.encode("hello the world", false, false), V({hello, the_, world}));
}

TEST(TextBpe, SpecialTokens) {
  Tokenizer tok(make_vocab("qwen2"));
  const std::string s = "<|im_start|>user\nhi<|im_end|>";
  // "user" "\n" "hi": no merge among u s e r ("he r" needs "he").
  EXPECT_EQ(tok.encode(s, false, true), V({im_start, 'u', 's', 'e', 'r', '\n', 'h', 'i', im_end}));
  const V plain = tok.encode(s, false, false);
  for (int32_t id : plain) EXPECT_LT(id, eot) << "special token produced with parse_special=false";
  EXPECT_EQ(tok.decode(plain), s);
  // Control tokens decode to nothing unless asked for.
  EXPECT_EQ(tok.decode(tok.encode(s, false, true)), "user\nhi");
  EXPECT_EQ(tok.token_to_piece(im_start, true), "<|im_start|>");
  EXPECT_TRUE(tok.is_eog(im_end));
  EXPECT_TRUE(tok.is_eog(eot));
  EXPECT_FALSE(tok.is_eog(hello));
  // add_bos is false for this vocab (as for Qwen2): no BOS even when asked.
  EXPECT_EQ(tok.encode("hello", true, false), V({hello}));
}

TEST(TextBpe, DecodeRoundTrip) {
  Tokenizer tok(make_vocab("qwen2"));
  const std::string inputs[] = {"hello the world", "héllo wörld", "日本語のテキスト", "emoji 🦙🚀 mix",
                                "tabs\tand\nnewlines\n\n", "  leading", "trailing  ", "Привет, мир!",
                                "bytes \x01\x7F\xFF\xC3(", "x", ""};
  for (const auto& s : inputs) EXPECT_EQ(tok.decode(tok.encode(s, false, false)), s) << s;
  EXPECT_EQ(tok.token_to_piece(' '), " ");  // Ġ -> space
  EXPECT_EQ(tok.token_to_piece(0xC3), "\xC3");
  EXPECT_EQ(tok.token_to_piece(world), " world");
}

TEST(TextBpe, StreamDecoderJoinsSplitUtf8) {
  Tokenizer tok(make_vocab("qwen2"));
  const std::string s = "a🦙b é";
  const V ids = tok.encode(s, false, false);  // 🦙 and é are single-byte tokens here
  knot::StreamDecoder sd(tok);
  std::string out;
  for (int32_t id : ids) {
    const std::string piece = sd.push(id);
    EXPECT_EQ(knot::unicode::utf8_complete_prefix(piece), piece.size());
    EXPECT_EQ(knot::unicode::utf8_sanitize(piece), piece);
    out += piece;
  }
  out += sd.flush();
  EXPECT_EQ(out, s);
}

TEST(TextBpe, BadVocabThrows) {
  TokenizerData d = make_vocab("qwen2");
  d.merges.push_back("nospace");
  EXPECT_THROW(Tokenizer{d}, knot::Error);
  d = make_vocab("some-unknown-pre");
  EXPECT_THROW(Tokenizer{d}, knot::Error);
  d = make_vocab("qwen2");
  d.model = "wordpiece";
  EXPECT_THROW(Tokenizer{d}, knot::Error);
  d = make_vocab("qwen2");
  d.eos_id = 100000;
  EXPECT_THROW(Tokenizer{d}, knot::Error);
  Tokenizer tok(make_vocab("qwen2"));
  EXPECT_THROW(tok.token_to_piece(-1), knot::Error);
  EXPECT_THROW(tok.token_to_piece(tok.n_vocab()), knot::Error);
}

// Naive byte-level BPE: per pre-tokenized word, rescan all pairs and merge the
// lowest-rank one (leftmost on ties) until none applies.
static V naive_bpe(const TokenizerData& d, const std::string& text) {
  V out;
  for (auto word : knot::unicode::pretokenize(text, knot::unicode::PreTok::Qwen2)) {
    std::vector<std::string> sym;
    for (unsigned char c : word) sym.push_back(knot::unicode::utf8_encode(knot::unicode::byte_to_cp(c)));
    for (;;) {
      int best = -1, best_rank = 0;
      for (size_t i = 0; i + 1 < sym.size(); i++) {
        const auto it = std::find(d.merges.begin(), d.merges.end(), sym[i] + " " + sym[i + 1]);
        const int rank = (int)(it - d.merges.begin());
        if (it != d.merges.end() && (best < 0 || rank < best_rank)) { best = (int)i; best_rank = rank; }
      }
      if (best < 0) break;
      sym[best] += sym[best + 1];
      sym.erase(sym.begin() + best + 1);
    }
    for (const auto& s : sym) out.push_back((int32_t)(std::find(d.tokens.begin(), d.tokens.end(), s) - d.tokens.begin()));
  }
  return out;
}

TEST(TextBpe, MatchesNaiveReferenceOnRandomText) {
  const TokenizerData d = make_vocab("qwen2");
  Tokenizer tok(d);
  const char* alphabet[] = {"h", "e", "l", "o", "ll", "hello", "the", " ", "  ", "\n", "w", "or", "ld",
                            "1", "2", "'s", "'", "é", "🦙", "her", "world", "\t", "!"};
  uint64_t state = 7;
  for (int t = 0; t < 300; t++) {
    std::string s;
    for (int i = 0; i < 1 + t % 20; i++) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      s += alphabet[(state >> 33) % (sizeof alphabet / sizeof *alphabet)];
    }
    const V ids = tok.encode(s, false, false);
    ASSERT_EQ(ids, naive_bpe(d, s)) << "'" << s << "'";
    ASSERT_EQ(tok.decode(ids), s);
  }
}
