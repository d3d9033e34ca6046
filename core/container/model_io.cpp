// model_io.cpp — GGUF metadata <-> config/tokenizer; JSON forms of config and tokenizer
// used by the .knot container; the tensor-set and finiteness checks both loaders share.
#include "container/model_io.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "container/arch.h"
#include "container/hash.h"
#include "container/json_limits.h"

namespace knot {

using json = nlohmann::json;

// ---- GGUF -> config ------------------------------------------------------------------

static const gguf::Value& need_key(const gguf::File& f, const std::string& key, const std::string& what) {
  const gguf::Value* v = f.find(key);
  if (!v) fail(what + ": missing required gguf key " + key);
  return *v;
}

static int need_int(const gguf::File& f, const std::string& key, const std::string& what) {
  int64_t v = need_key(f, key, what).as_int(key);
  if (v < 0 || v > INT32_MAX) fail(what + ": gguf key " + key + " = " + std::to_string(v) + " out of range");
  return (int)v;
}

static int opt_int(const gguf::File& f, const std::string& key, int dflt) {
  const gguf::Value* v = f.find(key);
  if (!v) return dflt;
  int64_t x = v->as_int(key);
  if (x < 0 || x > INT32_MAX) fail("gguf key " + key + " = " + std::to_string(x) + " out of range");
  return (int)x;
}

void validate_config(const ModelConfig& c, const std::string& what) {
  auto pos = [&](int v, const char* name) {
    if (v <= 0) fail(what + ": config " + name + " = " + std::to_string(v) + " (must be > 0)");
  };
  pos(c.n_embd, "n_embd");
  pos(c.n_layer, "n_layer");
  pos(c.n_head, "n_head");
  pos(c.n_head_kv, "n_head_kv");
  pos(c.head_dim, "head_dim");
  pos(c.n_ff, "n_ff");
  pos(c.n_vocab, "n_vocab");
  pos(c.n_vocab_tensor, "n_vocab_tensor");
  arch_info(c.arch, what);  // throws naming the supported ones
  if (c.n_head % c.n_head_kv != 0)
    fail(what + ": n_head " + std::to_string(c.n_head) + " is not a multiple of n_head_kv " + std::to_string(c.n_head_kv));
  if (c.rope_dims <= 0 || c.rope_dims > c.head_dim || c.rope_dims % 2)
    fail(what + ": rope dims " + std::to_string(c.rope_dims) + " invalid for head_dim " + std::to_string(c.head_dim));
  if (c.n_vocab_tensor < c.n_vocab)
    fail(what + ": token_embd has " + std::to_string(c.n_vocab_tensor) + " rows, fewer than the tokenizer's " + std::to_string(c.n_vocab) + " tokens");
  if (!(c.rms_eps > 0) || !std::isfinite(c.rms_eps)) fail(what + ": rms eps must be positive and finite");
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta)) fail(what + ": rope theta must be positive and finite");
}

ModelConfig config_from_gguf(const gguf::File& f, const std::string& what) {
  ModelConfig c;
  c.arch = need_key(f, "general.architecture", what).as_string("general.architecture");
  const std::string a = c.arch + ".";
  c.n_embd = need_int(f, a + "embedding_length", what);
  c.n_layer = need_int(f, a + "block_count", what);
  c.n_head = need_int(f, a + "attention.head_count", what);
  c.n_head_kv = opt_int(f, a + "attention.head_count_kv", c.n_head);
  c.n_ff = need_int(f, a + "feed_forward_length", what);
  if (c.n_head <= 0) fail(what + ": " + a + "attention.head_count must be > 0");
  c.head_dim = opt_int(f, a + "attention.key_length", c.n_embd / c.n_head);
  if (!f.find(a + "attention.key_length") && c.n_embd % c.n_head)
    fail(what + ": embedding_length " + std::to_string(c.n_embd) + " not divisible by head_count " + std::to_string(c.n_head));
  c.rope_dims = opt_int(f, a + "rope.dimension_count", c.head_dim);
  if (const ArchInfo* ai = find_arch(c.arch)) {  // the table's style and defaults
    c.rope_style = ai->rope_style;
    c.rope_theta = ai->rope_theta;
    c.rms_eps = ai->rms_eps;
  }
  if (auto* v = f.find(a + "rope.freq_base")) c.rope_theta = (float)v->as_float(a + "rope.freq_base");
  if (auto* v = f.find(a + "attention.layer_norm_rms_epsilon")) c.rms_eps = (float)v->as_float(a + "attention.layer_norm_rms_epsilon");
  c.n_ctx_train = opt_int(f, a + "context_length", 0);

  const gguf::Value& toks = need_key(f, "tokenizer.ggml.tokens", what);
  if (toks.type != gguf::VType::ARRAY) fail(what + ": tokenizer.ggml.tokens is not an array");
  c.n_vocab = (int)toks.size();
  const gguf::TensorInfo* emb = f.find_tensor("token_embd.weight");
  if (!emb) fail(what + ": missing tensor token_embd.weight");
  if (emb->shape.size() != 2 || emb->shape[0] != c.n_embd)
    fail(what + ": token_embd.weight shape does not match embedding_length " + std::to_string(c.n_embd));
  c.n_vocab_tensor = (int)emb->shape[1];
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  validate_config(c, what);
  return c;
}

TokenizerData tokenizer_from_gguf(const gguf::File& f, const std::string& what) {
  TokenizerData t;
  t.model = need_key(f, "tokenizer.ggml.model", what).as_string("tokenizer.ggml.model");
  if (auto* v = f.find("tokenizer.ggml.pre")) t.pre = v->as_string("tokenizer.ggml.pre");
  const gguf::Value& toks = need_key(f, "tokenizer.ggml.tokens", what);
  if (toks.type != gguf::VType::ARRAY || toks.elem != gguf::VType::STRING)
    fail(what + ": tokenizer.ggml.tokens must be an array of strings");
  t.tokens = toks.strs;
  const size_t n = t.tokens.size();
  if (auto* v = f.find("tokenizer.ggml.scores")) {
    if (v->type != gguf::VType::ARRAY || v->size() != n || v->elem == gguf::VType::STRING || v->elem == gguf::VType::ARRAY)
      fail(what + ": tokenizer.ggml.scores must be an array of " + std::to_string(n) + " numbers");
    t.scores.reserve(n);
    for (double x : v->floats) t.scores.push_back((float)x);
    for (int64_t x : v->ints) t.scores.push_back((float)x);
  }
  if (auto* v = f.find("tokenizer.ggml.token_type")) {
    if (v->type != gguf::VType::ARRAY || v->size() != n || v->ints.size() != n)
      fail(what + ": tokenizer.ggml.token_type must be an array of " + std::to_string(n) + " integers");
    t.token_types.assign(v->ints.begin(), v->ints.end());
  }
  if (auto* v = f.find("tokenizer.ggml.merges")) {
    if (v->type != gguf::VType::ARRAY || (v->elem != gguf::VType::STRING && v->size() != 0))
      fail(what + ": tokenizer.ggml.merges must be an array of strings");
    t.merges = v->strs;
  }
  auto id = [&](const char* key, int32_t& dst) {
    if (auto* v = f.find(key)) {
      int64_t x = v->as_int(key);
      if (x == -1 || x == (int64_t)UINT32_MAX) return;  // llama.cpp's "no such token"
      if (x < 0 || x >= (int64_t)n) fail(what + ": " + key + " = " + std::to_string(x) + " is outside the vocab of " + std::to_string(n));
      dst = (int32_t)x;
    }
  };
  id("tokenizer.ggml.bos_token_id", t.bos_id);
  id("tokenizer.ggml.eos_token_id", t.eos_id);
  id("tokenizer.ggml.unknown_token_id", t.unk_id);
  id("tokenizer.ggml.padding_token_id", t.pad_id);
  id("tokenizer.ggml.eot_token_id", t.eot_id);
  // llama.cpp defaults: SPM adds BOS and a space prefix, byte-level BPE does neither
  const bool spm = t.model == "llama";
  t.add_bos = spm;
  t.add_space_prefix = spm;
  if (auto* v = f.find("tokenizer.ggml.add_bos_token")) t.add_bos = v->as_bool("tokenizer.ggml.add_bos_token");
  if (auto* v = f.find("tokenizer.ggml.add_eos_token")) t.add_eos = v->as_bool("tokenizer.ggml.add_eos_token");
  if (auto* v = f.find("tokenizer.ggml.add_space_prefix")) t.add_space_prefix = v->as_bool("tokenizer.ggml.add_space_prefix");
  if (auto* v = f.find("tokenizer.chat_template")) t.chat_template = v->as_string("tokenizer.chat_template");
  return t;
}

void config_to_gguf(const ModelConfig& c, gguf::Writer& w) {
  using gguf::Value;
  const std::string a = c.arch + ".";
  w.set("general.architecture", Value::make_str(c.arch));
  w.set(a + "context_length", Value::make_u32((uint32_t)c.n_ctx_train));
  w.set(a + "embedding_length", Value::make_u32((uint32_t)c.n_embd));
  w.set(a + "block_count", Value::make_u32((uint32_t)c.n_layer));
  w.set(a + "feed_forward_length", Value::make_u32((uint32_t)c.n_ff));
  w.set(a + "attention.head_count", Value::make_u32((uint32_t)c.n_head));
  w.set(a + "attention.head_count_kv", Value::make_u32((uint32_t)c.n_head_kv));
  if (c.head_dim * c.n_head != c.n_embd) w.set(a + "attention.key_length", Value::make_u32((uint32_t)c.head_dim));
  w.set(a + "rope.dimension_count", Value::make_u32((uint32_t)c.rope_dims));
  w.set(a + "rope.freq_base", Value::make_f32(c.rope_theta));
  w.set(a + "attention.layer_norm_rms_epsilon", Value::make_f32(c.rms_eps));
}

void tokenizer_to_gguf(const TokenizerData& t, gguf::Writer& w) {
  using gguf::Value;
  using gguf::VType;
  w.set("tokenizer.ggml.model", Value::make_str(t.model));
  if (!t.pre.empty()) w.set("tokenizer.ggml.pre", Value::make_str(t.pre));
  std::vector<Value> v;
  v.reserve(t.tokens.size());
  for (auto& s : t.tokens) v.push_back(Value::make_str(s));
  w.set("tokenizer.ggml.tokens", Value::make_arr(VType::STRING, std::move(v)));
  if (!t.scores.empty()) {
    std::vector<Value> s;
    for (float x : t.scores) s.push_back(Value::make_f32(x));
    w.set("tokenizer.ggml.scores", Value::make_arr(VType::F32, std::move(s)));
  }
  if (!t.token_types.empty()) {
    std::vector<Value> s;
    for (int32_t x : t.token_types) s.push_back(Value::make_i32(x));
    w.set("tokenizer.ggml.token_type", Value::make_arr(VType::I32, std::move(s)));
  }
  if (!t.merges.empty()) {
    std::vector<Value> s;
    for (auto& x : t.merges) s.push_back(Value::make_str(x));
    w.set("tokenizer.ggml.merges", Value::make_arr(VType::STRING, std::move(s)));
  }
  auto id = [&](const char* key, int32_t x) {
    if (x >= 0) w.set(key, Value::make_u32((uint32_t)x));
  };
  id("tokenizer.ggml.bos_token_id", t.bos_id);
  id("tokenizer.ggml.eos_token_id", t.eos_id);
  id("tokenizer.ggml.unknown_token_id", t.unk_id);
  id("tokenizer.ggml.padding_token_id", t.pad_id);
  id("tokenizer.ggml.eot_token_id", t.eot_id);
  w.set("tokenizer.ggml.add_bos_token", Value::make_bool(t.add_bos));
  w.set("tokenizer.ggml.add_eos_token", Value::make_bool(t.add_eos));
  w.set("tokenizer.ggml.add_space_prefix", Value::make_bool(t.add_space_prefix));
  if (!t.chat_template.empty()) w.set("tokenizer.chat_template", Value::make_str(t.chat_template));
}

// ---- JSON ----------------------------------------------------------------------------

static bool valid_utf8(const std::string& s) {
  size_t i = 0, n = s.size();
  while (i < n) {
    unsigned char c = s[i];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len || i + len > n) return false;
    uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (int k = 1; k < len; k++) {
      unsigned char d = s[i + k];
      if ((d >> 6) != 2) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += len;
  }
  return true;
}

static json str_or_hex(const std::string& s) {
  if (valid_utf8(s)) return s;
  static const char* hx = "0123456789abcdef";
  std::string h;
  for (unsigned char c : s) h += hx[c >> 4], h += hx[c & 15];
  return json{{"hex", h}};
}

std::string config_to_json(const ModelConfig& c) {
  json j = {{"arch", c.arch},
            {"n_embd", c.n_embd},
            {"n_layer", c.n_layer},
            {"n_head", c.n_head},
            {"n_head_kv", c.n_head_kv},
            {"head_dim", c.head_dim},
            {"n_ff", c.n_ff},
            {"n_vocab", c.n_vocab},
            {"n_vocab_tensor", c.n_vocab_tensor},
            {"rope_dims", c.rope_dims},
            {"rope_style", c.rope_style == RopeStyle::Neox ? "neox" : "norm"},
            {"rope_theta", c.rope_theta},
            {"rms_eps", c.rms_eps},
            {"n_ctx_train", c.n_ctx_train},
            {"tied_embeddings", c.tied_embeddings}};
  return j.dump();
}

static ModelConfig config_from_j(const json& j, const std::string& what) {
  if (!j.is_object()) fail(what + ": config is not a JSON object");
  auto get_int = [&](const char* k) -> int {
    if (!j.contains(k) || !j[k].is_number_integer()) fail(what + ": config." + k + " missing or not an integer");
    int64_t v = j[k].get<int64_t>();
    if (v < 0 || v > INT32_MAX) fail(what + ": config." + k + " out of range");
    return (int)v;
  };
  auto get_num = [&](const char* k) -> float {
    if (!j.contains(k) || !j[k].is_number()) fail(what + ": config." + k + " missing or not a number");
    return j[k].get<float>();
  };
  ModelConfig c;
  if (!j.contains("arch") || !j["arch"].is_string()) fail(what + ": config.arch missing");
  c.arch = j["arch"];
  c.n_embd = get_int("n_embd");
  c.n_layer = get_int("n_layer");
  c.n_head = get_int("n_head");
  c.n_head_kv = get_int("n_head_kv");
  c.head_dim = get_int("head_dim");
  c.n_ff = get_int("n_ff");
  c.n_vocab = get_int("n_vocab");
  c.n_vocab_tensor = get_int("n_vocab_tensor");
  c.rope_dims = get_int("rope_dims");
  std::string rs = "norm";
  if (j.contains("rope_style")) {
    if (!j["rope_style"].is_string()) fail(what + ": config.rope_style is not a string");
    rs = j["rope_style"].get<std::string>();
  }
  if (rs != "norm" && rs != "neox") fail(what + ": config.rope_style '" + rs + "' (expected norm|neox)");
  c.rope_style = rs == "neox" ? RopeStyle::Neox : RopeStyle::Norm;
  c.rope_theta = get_num("rope_theta");
  c.rms_eps = get_num("rms_eps");
  c.n_ctx_train = get_int("n_ctx_train");
  if (!j.contains("tied_embeddings") || !j["tied_embeddings"].is_boolean()) fail(what + ": config.tied_embeddings missing");
  c.tied_embeddings = j["tied_embeddings"];
  validate_config(c, what);
  return c;
}

ModelConfig config_from_json(std::string_view s, const std::string& what) {
  check_json_depth(s, what + ": config");
  json j = json::parse(s, nullptr, false);
  if (j.is_discarded()) fail(what + ": config is not valid JSON");
  return config_from_j(j, what);
}

std::string tokenizer_to_json(const TokenizerData& t) {
  json toks = json::array();
  for (auto& s : t.tokens) toks.push_back(str_or_hex(s));
  json merges = json::array();
  for (auto& s : t.merges) merges.push_back(str_or_hex(s));
  json j = {{"model", t.model},
            {"pre", t.pre},
            {"tokens", std::move(toks)},
            {"scores", t.scores},
            {"token_types", t.token_types},
            {"merges", std::move(merges)},
            {"bos_id", t.bos_id},
            {"eos_id", t.eos_id},
            {"unk_id", t.unk_id},
            {"pad_id", t.pad_id},
            {"eot_id", t.eot_id},
            {"add_bos", t.add_bos},
            {"add_eos", t.add_eos},
            {"add_space_prefix", t.add_space_prefix},
            {"chat_template", str_or_hex(t.chat_template)}};
  return j.dump();
}

namespace {
// SAX reader for the tokenizer blob: builds TokenizerData directly, without a JSON DOM
// (a 152k-token vocab as a DOM costs ~30 MB, too much for a 128 MB wasm isolate).
struct TokenizerSax : nlohmann::json_sax<json> {
  TokenizerData& t;
  std::string err;
  int depth = 0;          // object/array nesting
  std::string key1;       // current top-level key
  bool in_hex = false;    // inside {"hex": "..."}
  std::string hex_key;
  bool seen_model = false, seen_tokens = false;

  explicit TokenizerSax(TokenizerData& t_) : t(t_) {}

  bool bad(const std::string& m) {
    err = m;
    return false;
  }
  bool put_string(std::string&& v) {
    if (depth == 1) {
      if (key1 == "model") t.model = std::move(v), seen_model = true;
      else if (key1 == "pre") t.pre = std::move(v);
      else if (key1 == "chat_template") t.chat_template = std::move(v);
      return true;
    }
    if (depth == 2 && key1 == "tokens") return t.tokens.push_back(std::move(v)), true;
    if (depth == 2 && key1 == "merges") return t.merges.push_back(std::move(v)), true;
    return bad("unexpected string in '" + key1 + "'");
  }
  bool put_int(int64_t v) {
    if (depth == 1) {
      if (v < INT32_MIN || v > INT32_MAX) return bad("'" + key1 + "' out of range");
      int32_t x = (int32_t)v;
      if (key1 == "bos_id") t.bos_id = x;
      else if (key1 == "eos_id") t.eos_id = x;
      else if (key1 == "unk_id") t.unk_id = x;
      else if (key1 == "pad_id") t.pad_id = x;
      else if (key1 == "eot_id") t.eot_id = x;
      return true;
    }
    if (depth == 2 && key1 == "token_types") return t.token_types.push_back((int32_t)v), true;
    if (depth == 2 && key1 == "scores") return t.scores.push_back((float)v), true;
    return bad("unexpected number in '" + key1 + "'");
  }
  bool null() override { return depth == 1 ? true : bad("unexpected null in '" + key1 + "'"); }
  bool boolean(bool v) override {
    if (depth != 1) return bad("unexpected bool in '" + key1 + "'");
    if (key1 == "add_bos") t.add_bos = v;
    else if (key1 == "add_eos") t.add_eos = v;
    else if (key1 == "add_space_prefix") t.add_space_prefix = v;
    return true;
  }
  bool number_integer(int64_t v) override { return put_int(v); }
  bool number_unsigned(uint64_t v) override { return v > (uint64_t)INT64_MAX ? bad("number out of range") : put_int((int64_t)v); }
  bool number_float(double v, const std::string&) override {
    if (depth == 2 && key1 == "scores") return t.scores.push_back((float)v), true;
    return bad("unexpected float in '" + key1 + "'");
  }
  bool string(std::string& v) override {
    if (in_hex) {
      if (hex_key != "hex" || v.size() % 2) return bad("bad hex string in '" + key1 + "'");
      std::string out;
      out.reserve(v.size() / 2);
      for (size_t i = 0; i < v.size(); i += 2) {
        int hi = hexval(v[i]), lo = hexval(v[i + 1]);
        if (hi < 0 || lo < 0) return bad("bad hex string in '" + key1 + "'");
        out += (char)(hi * 16 + lo);
      }
      return put_string(std::move(out));
    }
    return put_string(std::move(v));
  }
  static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  }
  bool binary(json::binary_t&) override { return bad("unexpected binary"); }
  bool start_object(std::size_t) override {
    if (depth == 0) return ++depth, true;
    // {"hex": ...} stands for a string at depth 1 (chat_template) or 2 (tokens/merges)
    bool ok = (depth == 1 && key1 == "chat_template") || (depth == 2 && (key1 == "tokens" || key1 == "merges"));
    if (!ok || in_hex) return bad("unexpected object in '" + key1 + "'");
    in_hex = true;  // not counted as nesting: its string lands where the object stands
    return true;
  }
  bool key(std::string& k) override {
    if (in_hex) hex_key = k;
    else if (depth == 1) key1 = k;
    return true;
  }
  bool end_object() override {
    if (in_hex) return in_hex = false, true;
    depth--;
    return true;
  }
  bool start_array(std::size_t) override {
    if (depth != 1) return bad("unexpected array in '" + key1 + "'");
    if (key1 == "tokens") seen_tokens = true;
    depth++;
    return true;
  }
  bool end_array() override {
    depth--;
    return true;
  }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& e) override {
    return bad("JSON syntax error at byte " + std::to_string(pos) + ": " + e.what());
  }
};
}  // namespace

TokenizerData tokenizer_from_json(std::string_view s, const std::string& what) {
  TokenizerData t;
  TokenizerSax sax(t);
  bool ok = json::sax_parse(s.begin(), s.end(), &sax, nlohmann::detail::input_format_t::json, true, false);
  if (!ok || !sax.err.empty()) fail(what + ": bad tokenizer blob: " + (sax.err.empty() ? std::string("parse failed") : sax.err));
  if (!sax.seen_model || !sax.seen_tokens) fail(what + ": bad tokenizer blob: 'model' or 'tokens' missing");
  const size_t n = t.tokens.size();
  if ((!t.scores.empty() && t.scores.size() != n) || (!t.token_types.empty() && t.token_types.size() != n))
    fail(what + ": tokenizer scores/token_types length does not match " + std::to_string(n) + " tokens");
  for (int32_t id : {t.bos_id, t.eos_id, t.unk_id, t.pad_id, t.eot_id})
    if (id < -1 || id >= (int64_t)n) fail(what + ": tokenizer special id " + std::to_string(id) + " outside the vocab");
  return t;
}

// ---- tensor set ----------------------------------------------------------------------

static std::string shape_text(const std::vector<int64_t>& s) {
  std::string o;
  for (size_t i = 0; i < s.size(); i++) o += (i ? " x " : "") + std::to_string(s[i]);
  return o;
}

std::vector<std::string> check_tensor_set(const ModelConfig& c, const std::vector<TensorRef>& tensors, bool gguf_names,
                                          const std::string& what) {
  std::map<std::string, const TensorRef*> by;
  for (auto& t : tensors) by[t.knot_name] = &t;
  std::vector<std::string> problems;
  const ArchInfo& arch = arch_info(c.arch, what);
  // A crafted config may claim 2^31-1 layers: count the layers the file holds first, and
  // stop after the first few missing tensors rather than building millions of messages.
  constexpr int kMaxMissing = 8;
  int missing = 0;
  int64_t layers_present = 0;
  for (auto& t : tensors)
    if (t.knot_name.rfind("blk_", 0) == 0)
      layers_present = std::max<int64_t>(layers_present, std::strtol(t.knot_name.c_str() + 4, nullptr, 10) + 1);
  // each tensor of the architecture's table, at layer `layer` (-1: model-level)
  auto check = [&](int layer, const ArchTensor& at) {
    if (missing >= kMaxMissing) return;
    const std::string kn = tensor_knot_name(at.id, layer);
    const std::string lay = layer < 0 ? "" : "layer " + std::to_string(layer) + ": ";
    const bool required = at.need == Need::Required || (at.need == Need::UnlessTied && !c.tied_embeddings);
    auto it = by.find(kn);
    if (it == by.end()) {
      if (required) {
        problems.push_back(what + ": " + lay + "missing tensor " + (gguf_names ? tensor_gguf_name(at.id, layer) : kn));
        if (++missing == kMaxMissing)
          problems.push_back(what + ": stopped after " + std::to_string(kMaxMissing) + " missing tensors (config n_layer = " +
                             std::to_string(c.n_layer) + ", the file has tensors for " + std::to_string(layers_present) +
                             " layers)");
      }
      return;
    }
    const std::vector<int64_t> want = tensor_shape(at.id, c);
    if (it->second->shape != want)
      problems.push_back(what + ": " + lay + "tensor " + it->second->shown + " has shape " + shape_text(it->second->shape) +
                         ", the config wants " + shape_text(want) + " (" + tensor_dims_text(at.id) + ")");
  };
  for (const ArchTensor& at : arch.tensors)
    if (!tensor_info(at.id).per_layer) check(-1, at);
  for (int l = 0; l < c.n_layer && missing < kMaxMissing; l++)
    for (const ArchTensor& at : arch.tensors)
      if (tensor_info(at.id).per_layer) check(l, at);
  for (auto& t : tensors) {
    if (t.knot_name.rfind("blk_", 0) != 0) continue;
    const long layer = std::strtol(t.knot_name.c_str() + 4, nullptr, 10);
    if (layer >= c.n_layer)
      problems.push_back(what + ": tensor " + t.shown + " belongs to layer " + std::to_string(layer) + " but the config has " +
                         std::to_string(c.n_layer) + " layers");
  }
  return problems;
}

// ---- loading -------------------------------------------------------------------------

static bool is_float_dtype(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

void check_tensor_finite(const Tensor& t, const std::string& what, const std::string& where, const std::string& shown) {
  if (!t.bytes) return;
  const TypeTraits& tt = type_traits(t.type);
  const int64_t nb = (int64_t)(t.size / (size_t)tt.block_bytes);
  const int64_t e = first_nonfinite(t.type, t.data(), nb * tt.block_elems);
  const int64_t bad = e < 0 ? -1 : e / tt.block_elems;
  if (bad < 0) return;
  const std::string at = where.empty() ? "" : " " + where;
  const std::string& name = shown.empty() ? t.name : shown;
  if (is_float_dtype(t.type)) {
    const int64_t ne0 = t.shape.empty() ? 1 : t.shape[0];
    fail(what + ": tensor " + name + at + ": non-finite value at row " + std::to_string(bad / ne0) + ", column " +
         std::to_string(bad % ne0) + " (stale or corrupt file)");
  }
  fail(what + ": tensor " + name + at + ": block " + std::to_string(bad) + " has a non-finite scale (stale or corrupt file)");
}


}  // namespace knot
