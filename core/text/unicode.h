// unicode.h — the small amount of Unicode the tokenizers need: UTF-8 walking,
// letter/number/whitespace classes for the BPE pre-tokenizer regexes, the GPT-2
// byte<->unicode mapping, and hand-written matchers for the pre-tokenizer regexes.
// Contract: never throws on malformed UTF-8; a byte that does not start a valid
// sequence is treated as one "other" character of length 1, so every input byte
// survives pre-tokenization (byte-level BPE stays lossless).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace knot::unicode {

constexpr uint32_t kInvalid = 0xFFFFFFFFu;  // marks a malformed byte in decode results

// Length of the valid UTF-8 sequence starting at s[i] (1..4), or 0 if s[i] does not
// start a complete, valid sequence (bad lead, bad continuation, overlong, surrogate,
// > U+10FFFF, or truncated by the end of s).
size_t utf8_valid_len(std::string_view s, size_t i);
// Decodes the character at s[i] and advances i. Malformed: returns kInvalid, i += 1.
uint32_t utf8_next(std::string_view s, size_t& i);
void utf8_append(std::string& out, uint32_t cp);
std::string utf8_encode(uint32_t cp);
// Length of the longest prefix of s that does not end in an incomplete (but so far
// valid) UTF-8 sequence: the bytes after it may still be completed by more input.
size_t utf8_complete_prefix(std::string_view s);
// Replaces malformed bytes with U+FFFD (one per maximal invalid subpart).
std::string utf8_sanitize(std::string_view s);

// Character classes: \p{L}, \p{N} (generated tables) and \s (Unicode White_Space).
bool is_letter(uint32_t cp);
bool is_number(uint32_t cp);
bool is_space(uint32_t cp);

// GPT-2 byte-level mapping: every byte maps to one printable code point.
uint32_t byte_to_cp(uint8_t b);
int cp_to_byte(uint32_t cp);  // -1 if cp is not in the mapping's image
// bytes -> mapped UTF-8 text ("hello world" -> "helloĠworld")
std::string bytes_to_mapped(std::string_view bytes);

// Pre-tokenizer regex dialects (matched by hand, no std::regex).
enum class PreTok {
  Gpt2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  Qwen2,   // (?i:'s|...|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  Llama3,  // as Qwen2 but \p{N}{1,3}
};
// Splits text into the byte ranges matched by the dialect's regex, left to right.
// The pieces concatenate back to `text` exactly.
std::vector<std::string_view> pretokenize(std::string_view text, PreTok dialect);

}  // namespace knot::unicode
