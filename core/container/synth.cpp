// synth.cpp — seeded random-weight models, streamed row by row.
#include "container/synth.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <vector>

#include "container/convert.h"
#include "container/gguf.h"
#include "container/hash.h"
#include "container/arch.h"
#include "container/hf_vocab.h"
#include "container/knot.h"
#include "container/model_io.h"

namespace knot {

ModelConfig synth_config(const SynthOptions& o) {
  const ArchInfo* arch = find_arch(o.arch);
  if (!arch) fail("synth: --arch must be one of " + supported_archs() + ", got '" + o.arch + "'");
  auto pos = [](int v, const char* n) {
    if (v <= 0) fail(std::string("synth: --") + n + " must be > 0");
  };
  pos(o.hidden, "hidden");
  pos(o.layers, "layers");
  pos(o.heads, "heads");
  pos(o.kv_heads, "kv-heads");
  pos(o.ffn, "ffn");
  if (o.head_dim < 0) fail("synth: --head-dim must be >= 0 (0: hidden / heads)");
  if (!o.head_dim && o.hidden % o.heads) fail("synth: --hidden " + std::to_string(o.hidden) + " is not a multiple of --heads " + std::to_string(o.heads));
  if (o.heads % o.kv_heads) fail("synth: --heads is not a multiple of --kv-heads");
  const int head_dim = o.head_dim ? o.head_dim : o.hidden / o.heads;
  if (head_dim % 2) fail("synth: head_dim " + std::to_string(head_dim) + " must be even for RoPE");
  if (o.vocab < 260) fail("synth: --vocab must be >= 260 (3 specials + 256 byte tokens + pieces)");
  ModelConfig c;
  c.arch = o.arch;
  c.n_embd = o.hidden;
  c.n_layer = o.layers;
  c.n_head = o.heads;
  c.n_head_kv = o.kv_heads;
  c.head_dim = head_dim;
  c.n_ff = o.ffn;
  c.n_vocab = o.vocab;
  c.n_vocab_tensor = o.vocab_tensor ? o.vocab_tensor : o.vocab;
  if (c.n_vocab_tensor < o.vocab) fail("synth: --vocab-tensor must be >= --vocab");
  c.rope_dims = c.head_dim;
  c.rope_style = arch->rope_style;
  c.rope_theta = arch->rope_theta;
  c.rms_eps = arch->rms_eps;
  c.n_ctx_train = o.ctx;
  c.tied_embeddings = o.tied;
  validate_config(c, "synth");
  return c;
}

TokenizerData synth_tokenizer(int vocab) {
  if (vocab < 260) fail("synth: vocab must be >= 260");
  TokenizerData t;
  t.model = "llama";
  const std::string sp = "\xE2\x96\x81";  // U+2581, SPM's space
  std::set<std::string> seen;
  auto add = [&](const std::string& s, int type) {
    if ((int)t.tokens.size() >= vocab || !seen.insert(s).second) return;
    t.tokens.push_back(s);
    t.token_types.push_back(type);
    t.scores.push_back(type == 1 ? -(float)t.tokens.size() : 0.f);
  };
  add("<unk>", 2);
  add("<s>", 3);
  add("</s>", 3);
  char b[8];
  for (int i = 0; i < 256; i++) {
    std::snprintf(b, sizeof b, "<0x%02X>", i);
    add(b, 6);
  }
  add(sp, 1);
  for (int c = 33; c < 127; c++) add(std::string(1, (char)c), 1);
  // words of a small story: every prefix of "▁word" and "word" becomes a piece
  static const char* text =
      "once upon a time there was a little girl named lily she loved to play outside in the park "
      "one day she saw a big red ball and her mom said you can have it if you are kind to your friends "
      "the sun was warm and the birds sang happy songs they went home and had a nice dinner together";
  std::vector<std::string> words;
  for (const char* p = text; *p;) {
    const char* q = p;
    while (*q && *q != ' ') q++;
    words.emplace_back(p, q);
    p = *q ? q + 1 : q;
  }
  for (size_t len = 1; len <= 12; len++)
    for (auto& w : words)
      if (w.size() >= len) {
        add(sp + w.substr(0, len), 1);
        add(w.substr(0, len), 1);
      }
  // then all letter strings breadth-first, so prefixes always precede
  std::vector<std::string> level = {""};
  while ((int)t.tokens.size() < vocab) {
    std::vector<std::string> next;
    for (auto& s : level)
      for (char c = 'a'; c <= 'z' && (int)t.tokens.size() < vocab; c++) {
        next.push_back(s + c);
        add(sp + s + c, 1);
        add(s + c, 1);
      }
    level.swap(next);
  }
  t.unk_id = 0;
  t.bos_id = 1;
  t.eos_id = 2;
  t.add_bos = true;
  t.add_space_prefix = true;
  return t;
}

namespace {
struct Spec {
  std::string gguf_name;
  std::vector<int64_t> shape;  // ne0 = fan_in
  float scale;                 // uniform half-width; 0 -> constant 1 (norm weights)
};

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// One row of a tensor: depends only on (seed, tensor, row), so streaming order is free.
void gen_row(const Spec& s, uint64_t seed, int64_t row, float* out) {
  const int64_t n = s.shape[0];
  if (s.scale == 0) {
    for (int64_t i = 0; i < n; i++) out[i] = 1.f;
    return;
  }
  uint64_t st = seed ^ hash64(s.gguf_name.data(), s.gguf_name.size(), 0x5eed) ^ ((uint64_t)row * 0xD1B54A32D192ED03ull);
  for (int64_t i = 0; i < n; i++) {
    // 24 random bits -> uniform [-1, 1)
    float u = (float)(splitmix(st) >> 40) * (1.0f / 8388608.0f) - 1.0f;
    out[i] = u * s.scale;
  }
}

// `fast` mode: the first rows of a tensor (about 1M elements), quantized as usual, serve
// as a pool of encoded blocks; every row is then a seeded draw of blocks from the pool.
// The weights are iid, so a block is as good at any column: same distribution and
// scales as the default path, at memcpy speed.
struct BlockPool {
  std::vector<uint8_t> bytes;  // pool_rows encoded rows
  int64_t blocks = 0;          // blocks in the pool
  size_t block_bytes = 0;
  int64_t row_blocks = 0;      // blocks per row
};

BlockPool make_pool(const Spec& s, DType t, uint64_t seed, int64_t rows) {
  const int64_t n = s.shape[0];
  const TypeTraits& tt = type_traits(t);
  BlockPool p;
  p.row_blocks = n / tt.block_elems;
  p.block_bytes = (size_t)tt.block_bytes;
  const int64_t pool_rows = std::min<int64_t>(rows, std::max<int64_t>(1, (1 << 20) / n));
  const size_t rb = row_bytes(t, n);
  p.bytes.resize((size_t)pool_rows * rb);
  std::vector<float> row((size_t)n);
  for (int64_t r = 0; r < pool_rows; r++) {
    gen_row(s, seed, r, row.data());
    quantize_row(t, row.data(), p.bytes.data() + (size_t)r * rb, n);
  }
  p.blocks = pool_rows * p.row_blocks;
  return p;
}

void pool_row(const BlockPool& p, const Spec& s, uint64_t seed, int64_t row, uint8_t* out) {
  uint64_t st = seed ^ hash64(s.gguf_name.data(), s.gguf_name.size(), 0xb10c) ^ ((uint64_t)row * 0xD1B54A32D192ED03ull);
  for (int64_t b = 0; b < p.row_blocks; b++) {
    const uint64_t k = splitmix(st) % (uint64_t)p.blocks;
    std::memcpy(out + (size_t)b * p.block_bytes, p.bytes.data() + (size_t)k * p.block_bytes, p.block_bytes);
  }
}

// The architecture's tensors in table order: required ones, output unless tied, and the
// "expected" optional ones (qwen2's biases).
std::vector<Spec> synth_specs(const ModelConfig& c) {
  const float k3 = std::sqrt(3.f);  // uniform(-a, a) has std a/sqrt(3)
  auto w = [&](int64_t fan_in) { return k3 / std::sqrt((float)fan_in); };
  const float resid = 1.f / std::sqrt(2.f * (float)c.n_layer);
  const ArchInfo& arch = arch_info(c.arch, "synth");
  std::vector<Spec> v;
  auto add = [&](const ArchTensor& at, int layer) {
    if (at.need == Need::Optional || (at.need == Need::UnlessTied && c.tied_embeddings)) return;
    const TensorInfo& ti = tensor_info(at.id);
    const std::vector<int64_t> shape = tensor_shape(at.id, c);
    float scale = 0;  // 0: ones
    switch (ti.synth) {
      case SynthInit::Ones: scale = 0; break;
      case SynthInit::Embedding: scale = k3 * 0.5f; break;
      case SynthInit::FanIn: scale = w(shape[0]); break;
      case SynthInit::FanInResidual: scale = w(shape[0]) * resid; break;
      case SynthInit::Bias: scale = 0.02f; break;
    }
    v.push_back({tensor_gguf_name(at.id, layer), shape, scale});
  };
  for (const ArchTensor& at : arch.tensors)
    if (!tensor_info(at.id).per_layer) add(at, -1);
  for (int l = 0; l < c.n_layer; l++)
    for (const ArchTensor& at : arch.tensors)
      if (tensor_info(at.id).per_layer) add(at, l);
  return v;
}

bool ends_with(const std::string& s, const char* suf) {
  size_t n = std::strlen(suf);
  return s.size() >= n && s.compare(s.size() - n, n, suf) == 0;
}
}  // namespace

std::vector<KnotTensorDesc> synth_tensors(const SynthOptions& o) {
  check_target_type(o.type);
  const ModelConfig c = synth_config(o);
  std::vector<KnotTensorDesc> out;
  for (const auto& s : synth_specs(c))
    out.push_back({knot_tensor_name(s.gguf_name),
                   choose_tensor_type(o.type, knot_tensor_name(s.gguf_name), DType::F32, s.shape, c.n_layer, false, nullptr), s.shape});
  return out;
}

TokenizerData synth_model_tokenizer(const SynthOptions& o) {
  if (o.vocab_from.empty()) {
    if (!o.tokenizer_config.empty()) fail("synth: --tokenizer-config needs --vocab-from");
    return synth_tokenizer(o.vocab);
  }
  return tokenizer_from_hf_files(o.vocab_from, o.tokenizer_config, o.vocab);
}

ModelConfig synth_model(const SynthOptions& o_in, const std::string& path) {
  check_target_type(o_in.type);
  if (o_in.vocab_from.empty()) synth_config(o_in);  // dims and --vocab first, named as options
  TokenizerData tok = synth_model_tokenizer(o_in);
  SynthOptions o = o_in;
  o.vocab = (int)tok.tokens.size();
  ModelConfig c = synth_config(o);
  std::vector<Spec> specs = synth_specs(c);
  std::vector<DType> types;
  uint64_t total = 0;
  for (auto& s : specs) {
    DType t = choose_tensor_type(o.type, knot_tensor_name(s.gguf_name), DType::F32, s.shape, c.n_layer, false, nullptr);
    types.push_back(t);
    total += row_bytes(t, s.shape[0]) * (uint64_t)(s.shape.size() > 1 ? s.shape[1] : 1);
  }
  const bool as_gguf = ends_with(path, ".gguf");
  const std::string tmp = path + ".tmp";
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> fp(std::fopen(tmp.c_str(), "wb"), std::fclose);
  if (!fp) fail(tmp + ": cannot create: " + std::strerror(errno));
  try {
    gguf::Writer gw;
    std::unique_ptr<KnotWriter> kw;
    if (as_gguf) {
      config_to_gguf(c, gw);
      tokenizer_to_gguf(tok, gw);
      gw.set("general.name", gguf::Value::make_str("knot-synth-" + o.arch));
      gw.set("general.alignment", gguf::Value::make_u32(32));
      for (size_t i = 0; i < specs.size(); i++) gw.add_tensor(specs[i].gguf_name, (uint32_t)types[i], specs[i].shape);
      gw.write_header(fp.get());
    } else {
      std::vector<KnotTensorDesc> descs;
      for (size_t i = 0; i < specs.size(); i++) descs.push_back({knot_tensor_name(specs[i].gguf_name), types[i], specs[i].shape});
      kw = std::make_unique<KnotWriter>(fp.get(), c, tok, descs,
                                        std::vector<std::pair<std::string, std::string>>{{"source", "synth seed " + std::to_string(o.seed)}});
    }
    if (o.header_only) {
      if (!as_gguf) fail("synth: --header-only writes a .gguf (a .knot header carries content hashes)");
      const auto& ts = gw.tensors();
      const uint64_t end = gw.header().size() + (ts.empty() ? 0 : ts.back().offset + ts.back().size);
      // sparse: seek to the last byte and write it
      if (end > 0 && (fseeko(fp.get(), (off_t)(end - 1), SEEK_SET) != 0 || std::fputc(0, fp.get()) == EOF))
        fail(tmp + ": cannot extend to " + std::to_string(end) + " bytes: " + std::strerror(errno));
    }
    uint64_t done = 0;
    for (size_t i = 0; i < specs.size() && !o.header_only; i++) {
      const Spec& s = specs[i];
      if (o.progress) o.progress(done, total, s.gguf_name);
      const int64_t n = s.shape[0], rows = s.shape.size() > 1 ? s.shape[1] : 1;
      std::vector<float> row((size_t)n);                  // [ne0]
      std::vector<uint8_t> q(row_bytes(types[i], n));      // one encoded row
      BlockPool pool;
      if (o.fast && rows > 1 && s.scale != 0) pool = make_pool(s, types[i], o.seed, rows);
      for (int64_t r = 0; r < rows; r++) {
        if (!pool.bytes.empty()) {
          pool_row(pool, s, o.seed, r, q.data());
        } else {
          gen_row(s, o.seed, r, row.data());
          quantize_row(types[i], row.data(), q.data(), n);
        }
        if (as_gguf) gw.write_data(fp.get(), q.data(), q.size());
        else kw->append(q.data(), q.size());
      }
      if (as_gguf) gw.end_tensor(fp.get());
      else kw->end_tensor();
      done += q.size() * (uint64_t)rows;
    }
    if (kw) kw->finish();
    if (o.progress) o.progress(total, total, "");
    if (std::fclose(fp.release()) != 0) fail(tmp + ": close failed");
    if (std::rename(tmp.c_str(), path.c_str()) != 0) fail(path + ": cannot rename from " + tmp + ": " + std::strerror(errno));
    return c;
  } catch (...) {
    fp.reset();
    std::remove(tmp.c_str());
    throw;
  }
}

}  // namespace knot
