// container_synth.cpp — synthetic models: determinism, GGUF/knot agreement, tokenizer
// shape, weight scale, argument errors, and a qwen2.5-7b-shaped layer streamed in
// bounded memory.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cmath>
#include <set>

#include "container_util.h"
#include "container/convert.h"
#include "container/synth.h"

using namespace knot;
using ctest::contains;
using ctest::error_of;

namespace {
SynthOptions small(const std::string& arch, const std::string& type, uint64_t seed) {
  SynthOptions o;
  o.arch = arch;
  o.hidden = 128, o.layers = 3, o.heads = 4, o.kv_heads = 2, o.ffn = 256, o.vocab = 400;
  o.type = type;
  o.seed = seed;
  return o;
}
std::vector<uint8_t> synth_bytes(const SynthOptions& o, const std::string& ext) {
  std::string p = ctest::tmp_path("s-" + o.arch + o.type + std::to_string(o.seed) + ext);
  synth_model(o, p);
  return ctest::read_all(p);
}
}  // namespace

TEST(Synth, SameSeedSameBytesOtherSeedOtherBytes) {
  for (const char* ext : {".gguf", ".knot"})
    for (const char* arch : {"llama", "qwen2"}) {
      auto a = synth_bytes(small(arch, "Q4_K_M", 5), ext);
      auto b = synth_bytes(small(arch, "Q4_K_M", 5), ext);
      auto c = synth_bytes(small(arch, "Q4_K_M", 6), ext);
      EXPECT_GT(a.size(), 100000u);
      EXPECT_EQ(a, b) << arch << ext;
      EXPECT_EQ(a.size(), c.size());
      EXPECT_NE(a, c) << arch << ext;
    }
}

TEST(Synth, GgufAndKnotCarryTheSameModel) {
  SynthOptions o = small("qwen2", "Q8_0", 3);
  std::string g = ctest::tmp_path("same.gguf"), k = ctest::tmp_path("same.knot"), c = ctest::tmp_path("same-conv.knot");
  synth_model(o, g);
  synth_model(o, k);
  convert_gguf_to_knot(g, c);
  Model mg = load_model_file(g), mk = load_model_file(k);
  EXPECT_EQ(config_to_json(mg.config), config_to_json(mk.config));
  EXPECT_EQ(tokenizer_to_json(mg.tokenizer), tokenizer_to_json(mk.tokenizer));
  ASSERT_EQ(mg.tensors.size(), mk.tensors.size());
  for (auto& [name, t] : mg.tensors) {
    const Tensor& u = mk.tensors.at(name);
    ASSERT_EQ(t.size, u.size) << name;
    EXPECT_EQ(std::memcmp(t.data(), u.data(), t.size), 0) << name;
  }
  EXPECT_EQ(mg.config.arch, "qwen2");
  EXPECT_EQ(mg.config.rope_style, RopeStyle::Neox);
  EXPECT_NE(mg.find("blk_2_attn_q_bias"), nullptr);
  EXPECT_EQ(mk.get("blk_0_attn_k_weight").shape, (std::vector<int64_t>{128, 64}));
  EXPECT_FALSE(mk.config.tied_embeddings);
  o.vocab_tensor = 512;  // padded rows past the tokenizer's vocab
  synth_model(o, g);
  Model mp = load_model_file(g);
  EXPECT_EQ(mp.config.n_vocab, 400);
  EXPECT_EQ(mp.config.n_vocab_tensor, 512);
  EXPECT_EQ(mp.get("output_weight").shape[1], 512);
  o.vocab_tensor = 0;
  o.tied = true;
  synth_model(o, k);
  Model mt = load_model_file(k);
  EXPECT_TRUE(mt.config.tied_embeddings);
  EXPECT_EQ(mt.find("output_weight"), nullptr);
}

TEST(Synth, TokenizerIsAUsableSpmVocab) {
  for (int n : {260, 512, 5000}) {
    TokenizerData t = synth_tokenizer(n);
    ASSERT_EQ((int)t.tokens.size(), n);
    EXPECT_EQ(t.model, "llama");
    EXPECT_EQ(t.tokens[t.bos_id], "<s>");
    EXPECT_EQ(t.tokens[t.eos_id], "</s>");
    EXPECT_EQ(t.tokens[3], "<0x00>");
    EXPECT_EQ(t.tokens[258], "<0xFF>");
    EXPECT_EQ(t.token_types[3], 6);
    std::set<std::string> all(t.tokens.begin(), t.tokens.end());
    EXPECT_EQ(all.size(), t.tokens.size()) << "duplicate pieces";
    // BPE reaches a piece only through its prefixes: every normal piece's prefix
    // (dropping the last UTF-8 char) must be a piece too
    for (size_t i = 0; i < t.tokens.size(); i++) {
      if (t.token_types[i] != 1) continue;
      std::string s = t.tokens[i];
      size_t cut = s.size() - 1;
      while (cut > 0 && ((unsigned char)s[cut] & 0xC0) == 0x80) cut--;
      if (cut == 0) continue;
      EXPECT_TRUE(all.count(s.substr(0, cut))) << "piece '" << s << "' has no prefix piece";
    }
  }
  EXPECT_TRUE(contains(error_of([] { synth_tokenizer(100); }), "vocab"));
}

TEST(Synth, WeightsAreScaledForSaneActivations) {
  SynthOptions o = small("llama", "F32", 11);
  std::string p = ctest::tmp_path("scale.gguf");
  synth_model(o, p);
  Model m = load_model_file(p);
  auto stdev = [](const Tensor& t) {
    const float* f = (const float*)t.data();
    size_t n = t.size / 4;
    double s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) s += f[i], s2 += (double)f[i] * f[i];
    return std::sqrt(s2 / n - (s / n) * (s / n));
  };
  EXPECT_NEAR(stdev(m.get("blk_0_attn_q_weight")), 1.0 / std::sqrt(128.0), 0.1 / std::sqrt(128.0));
  EXPECT_NEAR(stdev(m.get("blk_0_ffn_gate_weight")), 1.0 / std::sqrt(128.0), 0.1 / std::sqrt(128.0));
  EXPECT_LT(stdev(m.get("blk_0_ffn_down_weight")), 1.0 / std::sqrt(256.0));  // residual branch scaled down
  EXPECT_EQ(((const float*)m.get("output_norm_weight").data())[7], 1.0f);
  // a token's logits through the lm_head stay O(1): row of token_embd, rms-normed, x output
  const Tensor& emb = m.get("token_embd_weight");
  const Tensor& out = m.get("output_weight");
  std::vector<float> x(128);
  std::memcpy(x.data(), emb.data() + 42 * 128 * 4, 128 * 4);
  double ss = 0;
  for (float v : x) ss += v * v;
  for (float& v : x) v /= (float)std::sqrt(ss / 128);
  double lmax = 0;
  for (int r = 0; r < 400; r++) {
    const float* w = (const float*)out.data() + r * 128;
    double d = 0;
    for (int i = 0; i < 128; i++) d += w[i] * x[i];
    lmax = std::max(lmax, std::fabs(d));
  }
  EXPECT_GT(lmax, 0.5);
  EXPECT_LT(lmax, 8.0);
}

TEST(Synth, BadArgumentsAreErrors) {
  auto err = [](std::function<void(SynthOptions&)> f) {
    SynthOptions o = small("llama", "F32", 1);
    f(o);
    return error_of([&] { synth_model(o, ctest::tmp_path("bad.knot")); });
  };
  EXPECT_TRUE(contains(err([](SynthOptions& o) { o.arch = "gpt"; }), "--arch"));
  EXPECT_TRUE(contains(err([](SynthOptions& o) { o.heads = 3; }), "--heads"));
  EXPECT_TRUE(contains(err([](SynthOptions& o) { o.kv_heads = 3; }), "--kv-heads"));
  EXPECT_TRUE(contains(err([](SynthOptions& o) { o.vocab = 10; }), "--vocab"));
  EXPECT_TRUE(contains(err([](SynthOptions& o) { o.type = "Q7"; }), "unknown target type"));
  EXPECT_TRUE(contains(err([](SynthOptions& o) { o.layers = 0; }), "--layers"));
  EXPECT_FALSE(std::filesystem::exists(ctest::tmp_path("bad.knot")));
  EXPECT_FALSE(std::filesystem::exists(ctest::tmp_path("bad.knot.tmp")));
}

// One qwen2.5-coder-7b layer (hidden 3584, ffn 18944, 28/4 heads): ~240 MB of Q8_0,
// generated and written row by row — peak RSS must stay far below the file size.
TEST(Synth, SevenBShapedLayerStreamsInBoundedMemory) {
  SynthOptions o;
  o.arch = "qwen2";
  o.hidden = 3584, o.layers = 1, o.heads = 28, o.kv_heads = 4, o.ffn = 18944, o.vocab = 300;
  o.type = "Q8_0";
  std::string p = ctest::tmp_path("7b-layer.knot");
  struct rusage before, after;
  getrusage(RUSAGE_SELF, &before);
  synth_model(o, p);
  getrusage(RUSAGE_SELF, &after);
  uint64_t size = std::filesystem::file_size(p);
  EXPECT_GT(size, 200ull << 20);
  EXPECT_LT((after.ru_maxrss - before.ru_maxrss) * 1024, 32l << 20) << "synth held tensors in memory";
  FileSource src(p);
  KnotHeader h = read_knot_header(src);
  EXPECT_EQ(h.get("blk_0_ffn_down_weight").shape, (std::vector<int64_t>{18944, 3584}));
  EXPECT_EQ(h.config.head_dim, 128);
  const KnotTensor& up = h.get("blk_0_ffn_up_weight");
  std::vector<uint8_t> rows(up.row_size() * 2);
  read_knot_rows(src, h, up, 1000, 1002, rows.data());  // no chunk hashes: whole-tensor verify
  std::filesystem::remove(p);
}

// --fast: rows drawn from a pool of quantized blocks. Deterministic, every block finite,
// the same weight statistics as the default path (dequantized std within 5%), distinct
// rows (no row is the pool repeated), and the default path's bytes are unchanged by it.
TEST(Synth, FastRowsKeepTheStatisticsAndDeterminism) {
  SynthOptions o = small("qwen2", "Q4_K_M", 9);
  o.hidden = 512, o.ffn = 4096, o.heads = 4, o.kv_heads = 2, o.layers = 1;  // 2M-element FFN tensors: pool < rows
  SynthOptions f = o;
  f.fast = true;
  auto a = synth_bytes(f, ".knot"), b = synth_bytes(f, ".knot"), slow = synth_bytes(o, ".knot");
  EXPECT_EQ(a, b);
  EXPECT_NE(a, slow);
  std::string pf = ctest::tmp_path("fast.knot"), ps = ctest::tmp_path("slow.knot");
  synth_model(f, pf);
  synth_model(o, ps);
  Model mf = load_model_file(pf), ms = load_model_file(ps);  // verifies hashes and scales
  for (const char* name : {"blk_0_ffn_gate_weight", "blk_0_ffn_down_weight", "token_embd_weight"}) {
    auto stats = [&](const Tensor& t, std::set<std::vector<float>>* rows) {
      std::vector<float> r((size_t)t.ne0());
      const size_t rb = row_bytes(t.type, t.ne0());
      double s2 = 0;
      int64_t bad = 0;
      for (int64_t i = 0; i < t.nrows(); i++) {
        dequantize_row(t.type, t.data() + i * rb, r.data(), t.ne0());
        for (float v : r) bad += !std::isfinite(v), s2 += (double)v * v;
        if (rows) rows->insert(r);
      }
      EXPECT_EQ(bad, 0) << t.name;
      return std::sqrt(s2 / ((double)t.nrows() * t.ne0()));
    };
    std::set<std::vector<float>> rows;
    const double sf = stats(mf.get(name), &rows), ss = stats(ms.get(name), nullptr);
    EXPECT_NEAR(sf, ss, 0.05 * ss) << name;
    if (std::string(name) == "blk_0_ffn_down_weight") {  // 16 blocks a row: no two rows alike
      EXPECT_EQ((int64_t)rows.size(), mf.get(name).nrows()) << name << ": repeated rows";
    }
  }
}

// --header-only: a .gguf whose header is complete and whose payload is a sparse hole.
TEST(Synth, HeaderOnlyIsASparseGguf) {
  SynthOptions o = small("qwen2", "Q4_K_M", 3);
  o.header_only = true;
  std::string p = ctest::tmp_path("hdr.gguf");
  synth_model(o, p);
  gguf::File g = gguf::parse_file(p);
  const auto& last = g.tensors.back();
  EXPECT_EQ(std::filesystem::file_size(p), g.data_offset + last.offset + last.size);
  EXPECT_TRUE(contains(error_of([&] { synth_model(o, ctest::tmp_path("hdr.knot")); }), "--header-only writes a .gguf"));
}
