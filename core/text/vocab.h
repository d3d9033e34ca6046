// vocab.h — tokenizers: SentencePiece-style BPE with byte fallback (tokenizer.ggml.model
// "llama") and byte-level BPE with the GPT-2/Qwen2 pre-tokenizer ("gpt2").
// Contract: special/control tokens behave as in llama.cpp; decode is the exact inverse
// for byte tokens; StreamDecoder never emits a split UTF-8 sequence.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "container/model.h"

namespace knot {

class Tokenizer {
 public:
  explicit Tokenizer(const TokenizerData& data);  // throws on unsupported model type
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;

  // add_bos: prepend BOS when the vocab wants it. parse_special: recognise special
  // token text such as "<|im_start|>" in `text` and emit its id.
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const;
  // Raw bytes of one token's text (byte tokens -> the byte; U+2581 -> ' ' for SPM).
  std::string token_to_piece(int32_t id) const;  // throws for id out of range
  // render_special: control/unknown tokens give their text ("<|im_end|>") instead of "".
  std::string token_to_piece(int32_t id, bool render_special) const;
  // llama.cpp detokenize (remove_special=false): concatenated pieces; for SPM with
  // add_space_prefix one leading space of the FIRST token is dropped (so a leading BOS,
  // whose piece is empty, keeps the space of the token after it, as llama.cpp does).
  std::string decode(const std::vector<int32_t>& ids) const;

  int n_vocab() const;
  int32_t bos() const;
  int32_t eos() const;
  bool is_eog(int32_t id) const;  // EOS, EOT, or other end-of-generation tokens
  int32_t find_token(std::string_view text) const;  // exact token text -> id, -1 if none
  int32_t token_type(int32_t id) const;             // 1 normal .. 6 byte (see TokenizerData)
  const TokenizerData& data() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Streaming detokenizer: push ids, get back only complete UTF-8.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok) : tok_(tok) {}
  std::string push(int32_t id);
  std::string flush();  // whatever remains (invalid bytes as U+FFFD)

 private:
  const Tokenizer& tok_;
  std::string pending_;
};

}  // namespace knot
