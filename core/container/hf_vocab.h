// hf_vocab.h — a Hugging Face tokenizer.json (+ tokenizer_config.json) as TokenizerData,
// mapped the way llama.cpp's convert_hf_to_gguf.py writes a GGUF vocabulary, so a model
// synthesized from it tokenizes as the real GGUF of that model does.
// Contract (byte-level BPE only: Qwen2/2.5/3, Llama-3, GPT-2 style; anything else is an
// error naming the model type or pre-tokenizer):
//  * tokens by id from model.vocab and added_tokens; ids missing below the vocab size
//    (and up to pad_to) become "[PAD<id>]" tokens of type unused, as convert does;
//  * types: normal; added tokens control when "special" or when they look special
//    ("<|...|>"), else user-defined (matched as text even without special parsing);
//  * merges as "left right" (either JSON form); pre-tokenizer name from the Split regex
//    ("qwen2", "llama-bpe") or "gpt2" for ByteLevel's own regex;
//  * bos/eos/pad/unk ids from tokenizer_config.json token texts; add_bos from its
//    add_bos_token, else true for the Llama-3 pre-tokenizer (llama.cpp's default);
//  * chat_template from tokenizer_config.json ("default" entry of a list form).
// Not applied, as in llama.cpp: the normalizer (Qwen's NFC) and added-token lstrip/rstrip.
#pragma once
#include <string>
#include <string_view>

#include "container/model.h"

namespace knot {

// config_json may be empty (no tokenizer_config.json). pad_to: total token count wanted
// (0 = as many as the file has); smaller than the file's count is an error.
TokenizerData tokenizer_from_hf(std::string_view tokenizer_json, std::string_view config_json,
                                const std::string& what, int pad_to = 0);

// Reads the files and calls tokenizer_from_hf; config_path may be empty.
TokenizerData tokenizer_from_hf_files(const std::string& tokenizer_path, const std::string& config_path,
                                      int pad_to = 0);

}  // namespace knot
