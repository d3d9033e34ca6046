// hf_vocab.cpp — tokenizer.json / tokenizer_config.json -> TokenizerData (see hf_vocab.h).
#include "container/hf_vocab.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "container/loader.h"
#include "kernels/common.h"

namespace knot {

namespace {

using json = nlohmann::json;

// The Split regexes of the byte-level BPE families llama.cpp knows, by its pre name.
struct PreRegex {
  const char* pre;
  const char* regex;
};
constexpr PreRegex kPreRegexes[] = {
  {"qwen2", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
  {"llama-bpe", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
};

json parse(std::string_view text, const std::string& what) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail(what + ": not valid JSON: " + e.what());
  }
}

// tokenizer_config's "bos_token": "<s>" | {"content": "<s>", ...} | null
std::string token_text(const json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
  return {};
}

// convert_hf_to_gguf.py's does_token_look_special
bool looks_special(const std::string& t) {
  auto wrapped = [&](const char* a, const char* b) {
    const size_t la = std::strlen(a), lb = std::strlen(b);
    return t.size() >= la + lb && t.compare(0, la, a) == 0 && t.compare(t.size() - lb, lb, b) == 0;
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wrapped("<|", "|>") ||
         wrapped("<\xEF\xBD\x9C", "\xEF\xBD\x9C>") || wrapped("<unused", ">");
}

// Walks a pre_tokenizer (possibly a Sequence) for its Split regex and ByteLevel step.
void scan_pretok(const json& p, std::string& regex, bool& byte_level, bool& byte_level_regex, const std::string& what) {
  if (!p.is_object()) return;
  const std::string type = p.value("type", "");
  if (type == "Sequence") {
    for (const json& q : p.value("pretokenizers", json::array())) scan_pretok(q, regex, byte_level, byte_level_regex, what);
  } else if (type == "Split") {
    const json& pat = p.value("pattern", json::object());
    if (!pat.is_object() || !pat.contains("Regex") || !pat["Regex"].is_string())
      fail(what + ": pre_tokenizer Split without a Regex pattern is not supported");
    if (!regex.empty()) fail(what + ": more than one Split pre-tokenizer is not supported");
    regex = pat["Regex"].get<std::string>();
  } else if (type == "ByteLevel") {
    byte_level = true;
    byte_level_regex = p.value("use_regex", true);
  } else {
    fail(what + ": pre_tokenizer type '" + type + "' is not supported (byte-level BPE: Split + ByteLevel)");
  }
}

}  // namespace

TokenizerData tokenizer_from_hf(std::string_view tokenizer_json, std::string_view config_json, const std::string& what,
                                int pad_to) {
  const json tj = parse(tokenizer_json, what);
  const json cfg = config_json.empty() ? json::object() : parse(config_json, what + " (tokenizer_config)");
  if (!tj.is_object() || !tj.contains("model") || !tj["model"].is_object()) fail(what + ": no \"model\" object (not a tokenizer.json?)");
  const json& model = tj["model"];
  const std::string mtype = model.value("type", "");
  if (mtype != "BPE") fail(what + ": model type '" + mtype + "' is not supported (only byte-level BPE)");
  if (model.value("byte_fallback", false)) fail(what + ": BPE with byte_fallback (SentencePiece-style) is not supported");

  std::string regex;
  bool byte_level = false, bl_regex = false;
  scan_pretok(tj.value("pre_tokenizer", json()), regex, byte_level, bl_regex, what);
  if (!byte_level) fail(what + ": pre_tokenizer has no ByteLevel step (only byte-level BPE is supported)");

  TokenizerData t;
  t.model = "gpt2";
  t.add_space_prefix = false;
  if (regex.empty()) {
    if (!bl_regex) fail(what + ": ByteLevel without use_regex and no Split regex: no pre-tokenizer to apply");
    t.pre = "gpt2";
  } else {
    for (const PreRegex& r : kPreRegexes)
      if (regex == r.regex) t.pre = r.pre;
    if (t.pre.empty()) fail(what + ": pre-tokenizer regex not supported: " + regex);
  }

  // id -> (text, type)
  std::map<int64_t, std::pair<std::string, int32_t>> byid;
  const json& vocab = model.value("vocab", json::object());
  if (!vocab.is_object() || vocab.empty()) fail(what + ": model.vocab is missing or empty");
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer()) fail(what + ": model.vocab['" + it.key() + "'] is not an integer id");
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id >= (1 << 24)) fail(what + ": model.vocab['" + it.key() + "'] id " + std::to_string(id) + " out of range");
    if (!byid.emplace(id, std::pair{it.key(), 1}).second) fail(what + ": id " + std::to_string(id) + " appears twice in model.vocab");
  }
  for (const json& a : tj.value("added_tokens", json::array())) {
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") || !a["content"].is_string())
      fail(what + ": added_tokens entry without integer id and string content: " + a.dump().substr(0, 200));
    const int64_t id = a["id"].get<int64_t>();
    if (id < 0 || id >= (1 << 24)) fail(what + ": added token id " + std::to_string(id) + " out of range");
    const std::string text = a["content"].get<std::string>();
    const int32_t type = a.value("special", false) || looks_special(text) ? 3 : 4;
    byid[id] = {text, type};  // an added token overrides a vocab entry of the same id
  }
  const int64_t n_file = byid.rbegin()->first + 1;
  if (pad_to > 0 && pad_to < n_file)
    fail(what + ": --vocab " + std::to_string(pad_to) + " is smaller than the tokenizer's " + std::to_string(n_file) + " tokens");
  const int64_t n = pad_to > 0 ? pad_to : n_file;
  t.tokens.resize((size_t)n);
  t.token_types.assign((size_t)n, 5);
  for (int64_t i = 0; i < n; i++) {
    auto it = byid.find(i);
    if (it == byid.end()) {
      t.tokens[(size_t)i] = "[PAD" + std::to_string(i) + "]";
    } else {
      t.tokens[(size_t)i] = it->second.first;
      t.token_types[(size_t)i] = it->second.second;
    }
  }

  const json& merges = model.value("merges", json::array());
  if (!merges.is_array()) fail(what + ": model.merges is not an array");
  t.merges.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); r++) {
    const json& m = merges[r];
    if (m.is_string()) t.merges.push_back(m.get<std::string>());
    else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
      t.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    else fail(what + ": model.merges[" + std::to_string(r) + "] is neither \"a b\" nor [\"a\", \"b\"]");
  }

  // Special ids by their text (tokenizer_config), as gguf-py's SpecialVocab does.
  auto find_id = [&](const std::string& text) -> int32_t {
    if (text.empty()) return -1;
    for (const auto& [id, e] : byid)
      if (e.first == text) return (int32_t)id;
    fail(what + ": special token '" + text + "' from tokenizer_config is not in the vocabulary");
  };
  t.bos_id = find_id(token_text(cfg, "bos_token"));
  t.eos_id = find_id(token_text(cfg, "eos_token"));
  t.pad_id = find_id(token_text(cfg, "pad_token"));
  t.unk_id = find_id(token_text(cfg, "unk_token"));
  if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean()) t.add_bos = cfg["add_bos_token"].get<bool>();
  else t.add_bos = t.pre == "llama-bpe";
  if (cfg.contains("add_eos_token") && cfg["add_eos_token"].is_boolean()) t.add_eos = cfg["add_eos_token"].get<bool>();
  else t.add_eos = false;
  if (t.add_bos && t.bos_id < 0) t.add_bos = false;  // nothing to add

  if (auto it = cfg.find("chat_template"); it != cfg.end()) {
    if (it->is_string()) {
      t.chat_template = it->get<std::string>();
    } else if (it->is_array()) {
      for (const json& e : *it)
        if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
          t.chat_template = e["template"].get<std::string>();
      if (t.chat_template.empty()) fail(what + ": chat_template list has no \"default\" entry");
    } else if (!it->is_null()) {
      fail(what + ": chat_template is neither a string nor a list");
    }
  }
  return t;
}

TokenizerData tokenizer_from_hf_files(const std::string& tokenizer_path, const std::string& config_path, int pad_to) {
  const std::string tj = read_file(tokenizer_path);
  const std::string cj = config_path.empty() ? std::string() : read_file(config_path);
  return tokenizer_from_hf(tj, cj, tokenizer_path, pad_to);
}

}  // namespace knot
