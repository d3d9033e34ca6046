// abi_model.cpp — model open from a byte source, tokenizer, header parse.
//
// Opening a model is driven from JS, which owns the byte source (file, HTTP range,
// R2):
//   1. kw_model_open(prefix, file_size, name, &h): parses the header from the first
//      bytes of the file. When the header is longer than the prefix, h = 0 and the
//      result is {"need": N}: JS fetches N bytes and calls again (two-fetch protocol).
//      Otherwise the result is the tensor table [{i, name, offset, size}] with absolute
//      file offsets.
//   2. Per tensor: kw_model_tensor_buffer(h, i, &ptr) allocates its 64-byte aligned
//      buffer; JS copies the range [offset, offset+size) into it; kw_model_tensor_loaded
//      verifies it (content hash for .knot) — a mismatch is an error naming the tensor.
//   3. kw_model_finish(h): every tensor present, tokenizer built; result = info JSON.
#include <nlohmann/json.hpp>

#include "abi_internal.h"
#include "abi_model.h"
#include "text/chat.h"
#include "container/gguf.h"
#include "container/hash.h"
#include "container/arch.h"
#include "container/json_limits.h"
#include "container/knot.h"
#include "container/model.h"
#include "container/model_io.h"
#include "text/vocab.h"

using json = nlohmann::json;
using namespace kw;

namespace kw {

Table<ModelEntry> g_models;

ModelEntry& ready_model(int h, const char* fn) {
  ModelEntry& m = g_models.get(h, fn);
  if (!m.ready) knot::fail(std::string(fn) + ": model " + m.what + " is still loading (call kw_model_finish)");
  return m;
}

size_t table_index(const ModelEntry& m, uint32_t i, const char* fn) {
  if (i >= m.table.size())
    knot::fail(std::string(fn) + ": " + m.what + ": tensor index " + std::to_string(i) + " out of range (" +
               std::to_string(m.table.size()) + " entries)");
  return i;
}

// One serialisation of the config for files and the ABI alike (model_io.cpp).
json config_json(const knot::ModelConfig& c) { return json::parse(knot::config_to_json(c)); }

// The architecture's table (arch.h) for the JS: per phase, the per-layer tensor names
// without their "blk_N_" prefix (and the model-level ones), required or not, and how a
// slice cuts them (cut rows/cols/elems over heads, KV heads or FFN columns; whole).
json arch_json(const knot::ModelConfig& c) {
  const knot::ArchInfo& a = knot::arch_info(c.arch, "model");
  json phases = json::object();
  for (unsigned p : {knot::PHASE_EMBED, knot::PHASE_ATTN, knot::PHASE_FFN_GATE, knot::PHASE_FFN_UP,
                     knot::PHASE_FFN_DOWN, knot::PHASE_OUTPUT}) {
    json names = json::array();
    for (const knot::ArchTensor& at : a.tensors) {
      const knot::TensorInfo& ti = knot::tensor_info(at.id);
      if (!(ti.phases & p)) continue;
      static const char* const kCut[] = {"whole", "rows", "cols", "elems"};
      static const char* const kOver[] = {"none", "heads", "kv_heads", "ffn"};
      names.push_back({{"name", knot::tensor_knot_name(at.id, 0).substr(ti.per_layer ? 6 : 0)},
                       {"per_layer", ti.per_layer},
                       {"required", at.need == knot::Need::Required || (at.need == knot::Need::UnlessTied && !c.tied_embeddings)},
                       {"cut", kCut[(int)ti.cut]},     // how a head / FFN slice takes it (arch.h SliceCut)
                       {"over", kOver[(int)ti.over]}});
    }
    phases[knot::phase_name(p)] = names;
  }
  return json{{"name", a.name}, {"rope_style", a.rope_style == knot::RopeStyle::Neox ? "neox" : "norm"}, {"phases", phases}};
}

json tensor_json(const knot::Tensor& t) {
  return json{{"name", t.name}, {"type", knot::dtype_name(t.type)}, {"shape", t.shape}, {"size", t.size}};
}

json model_info_json(const ModelEntry& m) {
  uint64_t bytes = 0;
  json tensors = json::array();
  for (const auto& [name, t] : m.model.tensors) {
    bytes += t.size;
    tensors.push_back(tensor_json(t));
  }
  const auto& td = m.model.tokenizer;
  return json{{"name", m.what},
              {"format", m.format},
              {"config", config_json(m.model.config)},
              {"arch", arch_json(m.model.config)},
              {"tokenizer", {{"model", td.model}, {"pre", td.pre}, {"n_tokens", td.tokens.size()},
                             {"bos_id", td.bos_id}, {"eos_id", td.eos_id}, {"eot_id", td.eot_id},
                             {"add_bos", td.add_bos}, {"has_chat_template", !td.chat_template.empty()}}},
              {"tensor_bytes", bytes},
              {"tensors", tensors}};
}

namespace {

bool is_gguf(const uint8_t* p, size_t n) { return n >= 4 && std::memcmp(p, "GGUF", 4) == 0; }
bool is_knot(const uint8_t* p, size_t n) { return n >= 4 && std::memcmp(p, "KNOT", 4) == 0; }

// Parses a GGUF header into e (config, tokenizer, tensor table without bytes).
// Returns false and sets *need when the prefix is too short.
bool open_gguf(ModelEntry& e, const uint8_t* p, size_t n, uint64_t file_size, uint64_t* need) {
  knot::gguf::File f;
  try {
    f = knot::gguf::parse(p, n, file_size, e.what);
  } catch (const knot::gguf::Truncated& t) {
    // t.need is what the failed read wanted from the start; grow geometrically so a
    // long vocab does not cost one fetch per string.
    *need = std::min<uint64_t>(file_size, std::max<uint64_t>(t.need, (uint64_t)n * 2));
    return false;
  }
  e.model.config = knot::config_from_gguf(f, e.what);
  e.model.tokenizer = knot::tokenizer_from_gguf(f, e.what);
  for (const auto& ti : f.tensors) {
    knot::Tensor t;
    t.name = knot::knot_tensor_name(ti.name);
    t.type = ti.type;
    t.shape = ti.shape;
    t.size = fit_size(ti.size);
    e.table.push_back({t.name, f.data_offset + ti.offset, ti.size, 0, false, false, ti.shape});
    e.model.tensors.emplace(t.name, std::move(t));
  }
  return true;
}

// .knot: the header is parsed by the core's pure parser (it refuses stale files whose
// metaLen was space-padded, by size / marker / padding checks); tensors arrive later.
bool open_knot(ModelEntry& e, const uint8_t* p, size_t n, uint64_t file_size, uint64_t* need) {
  knot::HeaderParse hp = knot::parse_knot_header(p, n, file_size, e.what);
  if (!hp.complete) {
    *need = hp.need;
    return false;
  }
  const knot::KnotHeader& h = hp.header;
  e.model.config = h.config;
  TableEntry tokb{"tokenizer", h.payload_offset + h.tokenizer.offset, h.tokenizer.size, h.tokenizer.hash,
                  false, true, {}};
  e.table.push_back(tokb);
  for (const auto& kt : h.tensors) {
    knot::Tensor t;
    t.name = kt.name;
    t.type = kt.type;
    t.shape = kt.shape;
    t.size = fit_size(kt.size);
    t.hash = kt.hash;
    e.table.push_back({kt.name, h.payload_offset + kt.offset, kt.size, kt.hash, false, false, kt.shape});
    e.model.tensors.emplace(kt.name, std::move(t));
  }
  e.knot_header = std::make_unique<knot::KnotHeader>(h);
  return true;
}

}  // namespace
}  // namespace kw

KW_EXPORT(kw_model_open)
int kw_model_open(const uint8_t* prefix, uint32_t len, double file_size, const char* name,
                  uint32_t name_len, int32_t* out_handle) {
  return guard([&] {
    *out_handle = 0;
    auto e = std::make_unique<ModelEntry>();
    e->what = name_len ? std::string(str_arg(name, name_len)) : std::string("model");
    uint64_t size = u64_arg(file_size, "kw_model_open", "file_size");
    if (len > size) knot::fail(e->what + ": prefix of " + std::to_string(len) + " bytes is longer than the file (" + std::to_string(size) + ")");
    uint64_t need = 0;
    bool done;
    if (is_gguf(prefix, len)) {
      e->format = "gguf";
      done = open_gguf(*e, prefix, len, size, &need);
    } else if (is_knot(prefix, len)) {
      e->format = "knot";
      done = open_knot(*e, prefix, len, size, &need);
    } else {
      knot::fail(e->what + ": not a model file (magic is neither GGUF nor KNOT)");
    }
    if (!done) {
      set_result(json{{"need", need}}.dump());
      return;
    }
    json tab = json::array();
    for (size_t i = 0; i < e->table.size(); i++)
      tab.push_back({{"i", i}, {"name", e->table[i].name}, {"offset", e->table[i].offset}, {"size", e->table[i].size}});
    set_result(json{{"format", e->format}, {"arch", arch_json(e->model.config)}, {"tensors", tab}}.dump());
    *out_handle = g_models.add(std::move(e));
  });
}

KW_EXPORT(kw_model_tensor_buffer)
int kw_model_tensor_buffer(int32_t h, uint32_t i, uint8_t** out_ptr) {
  return guard([&] {
    ModelEntry& m = g_models.get(h, "kw_model_tensor_buffer");
    if (i >= m.table.size()) knot::fail(m.what + ": tensor index " + std::to_string(i) + " out of range");
    if (m.table[i].tokenizer) {
      m.tok_blob.assign(mem_bytes(m.table[i].size, m.what + ": tokenizer blob"), 0);
      *out_ptr = m.tok_blob.data();
      return;
    }
    TableEntry& te = m.table[i];
    refuse_if_sessions(h, m, "kw_model_tensor_buffer", "tensor " + te.name);
    // refused before any byte is read: JS copies te.size bytes into what this returns
    mem_bytes(te.size, m.what + ": tensor " + te.name);
    knot::Tensor& t = m.model.tensors.at(te.name);
    if (t.row0 != 0 || t.size != te.size) {  // held a row range before: back to whole
      t.bytes.reset();
      t.shape = te.shape;
      t.size = (size_t)te.size;
      t.row0 = 0;
    }
    te.loaded = false;
    if (!t.bytes) {
      try {
        t.bytes = knot::alloc_aligned(t.size);
      } catch (const knot::Error&) {
        // Say why, with the numbers: the usual cause is a whole model past the 128 MB cap.
        double total = 0;
        for (const TableEntry& e : m.table) total += (double)e.size;
        knot::fail(m.what + ": tensor " + te.name + ": out of memory allocating " + std::to_string(t.size) +
                   " bytes; the whole model holds " + std::to_string((long long)(total / 1048576)) +
                   " MiB of tensors and this module's linear memory is capped at 128 MB. Open a layer range "
                   "or vocab slice instead (bindings/mesh.mjs), as the mesh does");
      }
    }
    *out_ptr = t.bytes.get();
  });
}

KW_EXPORT(kw_model_tensor_loaded)
int kw_model_tensor_loaded(int32_t h, uint32_t i) {
  return guard([&] {
    ModelEntry& m = g_models.get(h, "kw_model_tensor_loaded");
    if (i >= m.table.size()) knot::fail(m.what + ": tensor index " + std::to_string(i) + " out of range");
    TableEntry& te = m.table[i];
    if (te.tokenizer) {
      if (m.tok_blob.size() != te.size) knot::fail(m.what + ": tokenizer blob has no buffer");
      uint64_t got = knot::hash64(m.tok_blob.data(), m.tok_blob.size());
      if (got != te.hash)
        knot::fail(m.what + ": tokenizer blob at offset " + std::to_string(te.offset) + ": content hash " +
                   knot::hash_hex(got) + " != expected " + knot::hash_hex(te.hash));
      m.model.tokenizer = knot::tokenizer_from_json(
          std::string_view((const char*)m.tok_blob.data(), m.tok_blob.size()), m.what);
      std::vector<uint8_t>().swap(m.tok_blob);
      te.loaded = true;
      return;
    }
    knot::Tensor& t = m.model.tensors.at(te.name);
    if (!t.bytes) knot::fail(m.what + ": tensor " + te.name + " has no buffer (call kw_model_tensor_buffer first)");
    if (te.hash) {
      uint64_t got = knot::hash64(t.bytes.get(), t.size);
      if (got != te.hash)
        knot::fail(m.what + ": tensor " + te.name + " at offset " + std::to_string(te.offset) +
                   ": content hash " + knot::hash_hex(got) + " != expected " + knot::hash_hex(te.hash));
      t.hash = te.hash;
    }
    // A stale or corrupt file decodes to non-finite block scales: refuse, naming the block.
    int64_t bad = knot::first_nonfinite_block(t.type, t.bytes.get(), t.size);
    if (bad >= 0)
      knot::fail(m.what + ": tensor " + te.name + " at offset " + std::to_string(te.offset) + ": block " +
                 std::to_string(bad) + " has a non-finite scale (stale or corrupt file)");
    te.loaded = true;
  });
}

// The config checks both finishes share, then the tokenizer; the model is usable after.
static void make_ready(ModelEntry& m) {
  knot::validate_config(m.model.config, m.what);
  if ((int64_t)m.model.tokenizer.tokens.size() != m.model.config.n_vocab)
    knot::fail(m.what + ": tokenizer has " + std::to_string(m.model.tokenizer.tokens.size()) +
               " tokens but config.n_vocab is " + std::to_string(m.model.config.n_vocab));
  m.tok = std::make_unique<knot::Tokenizer>(m.model.tokenizer);
  m.ready = true;
}

KW_EXPORT(kw_model_finish)
int kw_model_finish(int32_t h) {
  return guard([&] {
    ModelEntry& m = g_models.get(h, "kw_model_finish");
    for (const auto& te : m.table)
      if (!te.loaded) knot::fail(m.what + ": tensor " + te.name + " was not loaded");
    make_ready(m);
    set_result(model_info_json(m).dump());
  });
}

// A mesh coordinator's model: config and tokenizer only (.knot: entry 0, the tokenizer
// blob, loaded; no tensors). Tokenize / detokenize / chat and Generators (kw_generator_*,
// fed the shards' merged top-k) work on it; a session (it needs weights) is refused.
KW_EXPORT(kw_model_text_finish)
int kw_model_text_finish(int32_t h) {
  return guard([&] {
    ModelEntry& m = g_models.get(h, "kw_model_text_finish");
    for (const auto& te : m.table)
      if (te.tokenizer && !te.loaded) knot::fail(m.what + ": the tokenizer blob was not loaded");
    make_ready(m);
    m.text_only = true;
    set_result(json{{"config", config_json(m.model.config)}, {"format", m.format}}.dump());
  });
}

KW_EXPORT(kw_model_free)
int kw_model_free(int32_t h) {
  return guard([&] {
    g_models.get(h, "kw_model_free");
    free_sessions_of(h);
    free_drafters_of(h);
    if (!g_models.remove(h)) throw HandleError("kw_model_free: unknown or freed handle " + std::to_string(h));
  });
}

KW_EXPORT(kw_model_info)
int kw_model_info(int32_t h) {
  return guard([&] { set_result(model_info_json(ready_model(h, "kw_model_info")).dump()); });
}

// result: int32 ids
KW_EXPORT(kw_tokenize)
int kw_tokenize(int32_t h, const char* text, uint32_t len, int32_t add_bos, int32_t parse_special) {
  return guard([&] {
    ModelEntry& m = ready_model(h, "kw_tokenize");
    auto ids = m.tok->encode(str_arg(text, len), add_bos != 0, parse_special != 0);
    set_result_bytes(ids.data(), ids.size() * sizeof(int32_t));
  });
}

// result: UTF-8 text (may hold invalid sequences when ids split a character)
KW_EXPORT(kw_detokenize)
int kw_detokenize(int32_t h, const int32_t* ids, uint32_t n) {
  return guard([&] {
    ModelEntry& m = ready_model(h, "kw_detokenize");
    std::vector<int32_t> v(ids, ids + n);
    set_result(m.tok->decode(v));
  });
}

// result: raw bytes of one token's text (render_special: control tokens as their text)
KW_EXPORT(kw_token_piece)
int kw_token_piece(int32_t h, int32_t id, int32_t render_special) {
  return guard([&] {
    ModelEntry& m = ready_model(h, "kw_token_piece");
    set_result(m.tok->token_to_piece(id, render_special != 0));
  });
}

// Header only (no model): result {"need": N} when the prefix is too short, else
// {"format", "config", "tensors": [{name, type, shape, offset (absolute), size}], ...}.
KW_EXPORT(kw_parse_header)
int kw_parse_header(const uint8_t* prefix, uint32_t len, double file_size, const char* name, uint32_t name_len) {
  return guard([&] {
    std::string what = name_len ? std::string(str_arg(name, name_len)) : std::string("model");
    uint64_t size = u64_arg(file_size, "kw_parse_header", "file_size");
    if (len > size) knot::fail(what + ": prefix of " + std::to_string(len) + " bytes is longer than the file (" + std::to_string(size) + ")");
    json out;
    if (is_knot(prefix, len)) {
      knot::HeaderParse hp = knot::parse_knot_header(prefix, len, size, what);
      if (!hp.complete) {
        set_result(json{{"need", hp.need}}.dump());
        return;
      }
      const knot::KnotHeader& h = hp.header;
      json tensors = json::array();
      for (const auto& t : h.tensors)
        tensors.push_back({{"name", t.name}, {"type", knot::dtype_name(t.type)}, {"shape", t.shape},
                           {"offset", h.payload_offset + t.offset}, {"size", t.size},
                           {"hash", knot::hash_hex(t.hash)}, {"chunk_rows", t.chunk_rows}});
      out = {{"format", "knot"}, {"version", h.version}, {"meta_len", h.meta_len},
             {"payload_offset", h.payload_offset}, {"schema", h.schema}, {"file_size", h.file_size},
             {"config", config_json(h.config)},
             {"tokenizer_blob", {{"offset", h.payload_offset + h.tokenizer.offset}, {"size", h.tokenizer.size}}},
             {"tensors", tensors}};
    } else if (is_gguf(prefix, len)) {
      knot::gguf::File f;
      try {
        f = knot::gguf::parse(prefix, len, size, what);
      } catch (const knot::gguf::Truncated& t) {
        set_result(json{{"need", std::min<uint64_t>(size, std::max<uint64_t>(t.need, (uint64_t)len * 2))}}.dump());
        return;
      }
      json tensors = json::array();
      for (const auto& t : f.tensors)
        tensors.push_back({{"name", knot::knot_tensor_name(t.name)}, {"type", knot::dtype_name(t.type)},
                           {"shape", t.shape}, {"offset", f.data_offset + t.offset}, {"size", t.size}});
      out = {{"format", "gguf"}, {"version", f.version}, {"data_offset", f.data_offset},
             {"file_size", f.file_size}, {"config", config_json(knot::config_from_gguf(f, what))},
             {"tensors", tensors}};
    } else {
      knot::fail(what + ": not a model file (magic is neither GGUF nor KNOT)");
    }
    set_result(out.dump());
  });
}

// The loaded model re-encoded as a .knot file (result bytes): `knot convert` without
// re-quantization, for hosts that only have the GGUF (and for tests).
KW_EXPORT(kw_model_to_knot)
int kw_model_to_knot(int32_t h) {
  return guard([&] {
    ModelEntry& m = ready_model(h, "kw_model_to_knot");
    std::vector<uint8_t> bytes = knot::knot_to_bytes(m.model);
    set_result_bytes(bytes.data(), bytes.size());
  });
}

// result: JSON {"name": the template applyChatTemplate uses by default (chatml, llama3,
// ..., jinja), "text": the file's tokenizer.chat_template ("" when it has none)}
KW_EXPORT(kw_chat_template)
int kw_chat_template(int32_t h) {
  return guard([&] {
    ModelEntry& m = ready_model(h, "kw_chat_template");
    set_result(json{{"name", knot::default_chat_template(m.model.tokenizer)},
                    {"text", m.model.tokenizer.chat_template}}.dump());
  });
}

// messages: JSON [{"role", "content"}]; result: the prompt text (encode it with BOS
// added and special tokens parsed). template_name: "" = detect from the file.
KW_EXPORT(kw_chat_apply)
int kw_chat_apply(int32_t h, const char* msgs, uint32_t msgs_len, int32_t add_generation_prompt,
                  const char* tmpl, uint32_t tmpl_len) {
  return guard([&] {
    ModelEntry& m = ready_model(h, "kw_chat_apply");
    knot::check_json_depth(str_arg(msgs, msgs_len), "kw_chat_apply: messages");
    std::string name(str_arg(tmpl, tmpl_len));
    if (name.empty()) name = knot::default_chat_template(m.model.tokenizer);
    if (name == "jinja") {  // the file's own template: messages passed whole (tool_calls, reasoning_content, ...)
      set_result(knot::jinja_chat_prompt(m.model.tokenizer, std::string(str_arg(msgs, msgs_len)), add_generation_prompt != 0));
      return;
    }
    json j = json::parse(str_arg(msgs, msgs_len), nullptr, false);
    if (j.is_discarded() || !j.is_array()) knot::fail("kw_chat_apply: messages are not a JSON array");
    std::vector<knot::ChatMessage> v;
    for (const auto& e : j) {
      if (!e.is_object() || !e.contains("role") || !e["role"].is_string() || !e.contains("content") ||
          !e["content"].is_string())
        knot::fail("kw_chat_apply: each message needs string \"role\" and \"content\": " + e.dump());
      v.push_back({e["role"].get<std::string>(), e["content"].get<std::string>()});
    }
    set_result(knot::apply_chat_template(m.model.tokenizer, v, add_generation_prompt != 0, name));
  });
}

// kw_chat_apply with template variables besides messages: vars JSON object (e.g. {"tools":
// [...]}, {"enable_thinking": false}); the file's own Jinja template only (a built-in
// format takes no variables: an error naming the template).
KW_EXPORT(kw_chat_apply_vars)
int kw_chat_apply_vars(int32_t h, const char* msgs, uint32_t msgs_len, int32_t add_generation_prompt,
                       const char* tmpl, uint32_t tmpl_len, const char* vars, uint32_t vars_len) {
  return guard([&] {
    ModelEntry& m = ready_model(h, "kw_chat_apply_vars");
    knot::check_json_depth(str_arg(msgs, msgs_len), "kw_chat_apply_vars: messages");
    knot::check_json_depth(str_arg(vars, vars_len), "kw_chat_apply_vars: vars");
    std::string name(str_arg(tmpl, tmpl_len));
    if (name.empty()) name = knot::default_chat_template(m.model.tokenizer);
    if (name != "jinja") knot::fail("kw_chat_apply_vars: template variables need the file's own Jinja template, not '" + name + "'");
    set_result(knot::jinja_chat_prompt(m.model.tokenizer, std::string(str_arg(msgs, msgs_len)), add_generation_prompt != 0,
                                       std::string(str_arg(vars, vars_len))));
  });
}
