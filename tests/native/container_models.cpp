// container_models.cpp — every shared GGUF converts, inspects and verifies (API and the
// built CLI), knot tensors are byte-identical to the GGUF's, and re-quantization stays
// within error bounds. Dims are checked against /work/shared/models/README.md.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <fstream>
#include <regex>
#include <sstream>

#include "container_util.h"
#include "container/convert.h"
#include "container/gguf.h"
#include "container/knot.h"
#include "container/loader.h"

using namespace knot;
using ctest::contains;
using ctest::error_of;

namespace {

struct Expect {
  std::string file;
  int hidden, layers, heads, kv_heads, vocab, ffn, head_dim;
};

// The README table's last column: "hidden / layers / heads / kv heads / vocab (ffn F,
// head_dim D, ...)"; rows saying "(same...)" repeat the previous row's ffn/head_dim.
std::vector<Expect> readme_models() {
  std::ifstream f(knot_test::shared_models() + "/README.md");
  std::vector<Expect> out;
  std::string line;
  std::regex dims(R"((\d+) / (\d+) / (\d+) / (\d+) / (\d+))"), extra(R"(ffn (\d+), head_dim (\d+))");
  int ffn = 0, hd = 0;
  while (std::getline(f, line)) {
    if (line.rfind("| ", 0) != 0 || line.find(".gguf |") == std::string::npos) continue;
    std::string file = line.substr(2, line.find(" |", 2) - 2);
    std::string last = line.substr(line.rfind('|', line.size() - 2));
    std::smatch m, e;
    if (!std::regex_search(last, m, dims)) continue;
    if (std::regex_search(last, e, extra)) ffn = std::stoi(e[1]), hd = std::stoi(e[2]);
    out.push_back({file, std::stoi(m[1]), std::stoi(m[2]), std::stoi(m[3]), std::stoi(m[4]), std::stoi(m[5]), ffn, hd});
  }
  return out;
}

std::string model_path(const std::string& f) { return knot_test::shared_models() + "/" + f; }

bool have_models() { return std::filesystem::exists(model_path("README.md")); }

#define REQUIRE_MODELS()                                                                    \
  do {                                                                                      \
    if (!have_models()) {                                                                   \
      if (std::getenv("CI")) FAIL() << "shared models missing at " << knot_test::shared_models(); \
      GTEST_SKIP() << "shared models missing at " << knot_test::shared_models();            \
    }                                                                                       \
  } while (0)

std::string knot_bin() { return knot_test::bin_dir() + "/knot"; }

// The CLI is part of the build: under CI a missing binary is a failure, locally a skip.
bool have_cli() {
  if (std::filesystem::exists(knot_bin())) return true;
  if (std::getenv("CI")) ADD_FAILURE() << "knot CLI not built at " << knot_bin();
  return false;
}
#define REQUIRE_CLI() \
  do {                \
    if (!have_cli()) GTEST_SKIP() << "knot CLI not built at " << knot_bin(); \
  } while (0)

struct CliRun {
  int rc;
  std::string out;
};
CliRun run(const std::string& args) {
  std::string cmd = knot_bin() + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

int field(const std::string& out, const std::string& key) {
  std::smatch m;
  std::regex r("\\n  " + key + " +(\\d+)\\n");
  if (!std::regex_search(out, m, r)) return -1;
  return std::stoi(m[1]);
}

void expect_dims(const ModelConfig& c, const Expect& e) {
  EXPECT_EQ(c.n_embd, e.hidden) << e.file;
  EXPECT_EQ(c.n_layer, e.layers) << e.file;
  EXPECT_EQ(c.n_head, e.heads) << e.file;
  EXPECT_EQ(c.n_head_kv, e.kv_heads) << e.file;
  EXPECT_EQ(c.n_vocab, e.vocab) << e.file;
  EXPECT_EQ(c.n_ff, e.ffn) << e.file;
  EXPECT_EQ(c.head_dim, e.head_dim) << e.file;
}

double rel_rmse(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) num += (a[i] - b[i]) * (double)(a[i] - b[i]), den += (double)a[i] * a[i];
  return std::sqrt(num / std::max(den, 1e-30));
}

std::vector<float> dequant(const Tensor& t) {
  std::vector<float> out((size_t)(t.ne0() * t.nrows()));
  size_t rb = row_bytes(t.type, t.ne0());
  for (int64_t r = 0; r < t.nrows(); r++) dequantize_row(t.type, t.data() + r * rb, out.data() + r * t.ne0(), t.ne0());
  return out;
}

}  // namespace

TEST(SharedModels, ReadmeListsTheModels) {
  REQUIRE_MODELS();
  auto ms = readme_models();
  EXPECT_GE(ms.size(), 6u);
  for (auto& e : ms) EXPECT_TRUE(std::filesystem::exists(model_path(e.file))) << e.file;
}

TEST(SharedModels, ConvertInspectVerifyByteIdentical) {
  REQUIRE_MODELS();
  for (const Expect& e : readme_models()) {
    SCOPED_TRACE(e.file);
    const std::string in = model_path(e.file), out = ctest::tmp_path(e.file + ".knot");
    gguf::File g = gguf::parse_file(in);
    Model gm = load_model_file(in);
    expect_dims(gm.config, e);
    EXPECT_EQ(gm.config.n_vocab_tensor, (int)g.find_tensor("token_embd.weight")->shape[1]);
    EXPECT_EQ(gm.config.rope_style, gm.config.arch == "qwen2" ? RopeStyle::Neox : RopeStyle::Norm);

    ConvertResult r = convert_gguf_to_knot(in, out);
    EXPECT_EQ(r.n_tensors, g.tensors.size());
    EXPECT_TRUE(r.notes.empty());
    Model km = load_model_file(out);
    expect_dims(km.config, e);
    EXPECT_EQ(config_to_json(km.config), config_to_json(gm.config));
    EXPECT_EQ(tokenizer_to_json(km.tokenizer), tokenizer_to_json(gm.tokenizer));
    // compare against the raw GGUF bytes, not through our own loader
    auto raw = ctest::read_all(in);
    ASSERT_EQ(km.tensors.size(), g.tensors.size());
    for (auto& ti : g.tensors) {
      const Tensor& t = km.tensors.at(knot_tensor_name(ti.name));
      EXPECT_EQ(t.type, ti.type) << ti.name;
      EXPECT_EQ(t.shape, ti.shape) << ti.name;
      ASSERT_EQ(t.size, ti.size) << ti.name;
      EXPECT_EQ(std::memcmp(t.data(), raw.data() + g.data_offset + ti.offset, ti.size), 0) << ti.name;
      EXPECT_EQ(std::memcmp(gm.tensors.at(t.name).data(), t.data(), t.size), 0) << ti.name;
    }
    FileSource src(out);
    EXPECT_TRUE(verify_knot(src).empty());

    if (!have_cli()) continue;  // CLI not built: API part only
    CliRun ri = run("inspect " + in);
    EXPECT_EQ(ri.rc, 0) << ri.out;
    EXPECT_EQ(field(ri.out, "n_embd"), e.hidden);
    EXPECT_EQ(field(ri.out, "n_layer"), e.layers);
    EXPECT_EQ(field(ri.out, "n_head"), e.heads);
    EXPECT_EQ(field(ri.out, "n_head_kv"), e.kv_heads);
    EXPECT_EQ(field(ri.out, "n_vocab"), e.vocab);
    EXPECT_EQ(field(ri.out, "n_ff"), e.ffn);
    EXPECT_EQ(field(ri.out, "head_dim"), e.head_dim);
    EXPECT_TRUE(contains(ri.out, "totals: " + std::to_string(g.tensors.size()) + " tensors")) << ri.out;
    const std::string out2 = ctest::tmp_path(e.file + ".cli.knot");
    CliRun rc = run("convert " + in + " " + out2);
    EXPECT_EQ(rc.rc, 0) << rc.out;
    EXPECT_EQ(ctest::read_all(out2), ctest::read_all(out)) << "CLI and API conversions differ";
    CliRun rv = run("verify " + out2);
    EXPECT_EQ(rv.rc, 0) << rv.out;
    EXPECT_TRUE(contains(rv.out, "ok")) << rv.out;
    CliRun rg = run("verify " + in);
    EXPECT_EQ(rg.rc, 0) << rg.out;
    CliRun rk = run("inspect " + out2);
    EXPECT_EQ(rk.rc, 0) << rk.out;
    EXPECT_EQ(field(rk.out, "n_embd"), e.hidden);
    EXPECT_EQ(field(rk.out, "n_head_kv"), e.kv_heads);
    EXPECT_EQ(field(rk.out, "n_vocab"), e.vocab);
    // the same content hash per tensor in both tables
    auto hashes = [](const std::string& out) {
      std::map<std::string, std::string> m;
      std::regex r(R"(\n  \d+ +(\S+) +\S+ .*? ([0-9a-f]{16}))");
      for (std::sregex_iterator it(out.begin(), out.end(), r), end; it != end; ++it) m[(*it)[1]] = (*it)[2];
      return m;
    };
    // GGUF inspect shows the file's own (dotted) names, .knot inspect the knot names
    auto hg = hashes(ri.out), hk = hashes(rk.out);
    EXPECT_EQ(hg.size(), g.tensors.size());
    std::map<std::string, std::string> hg_knot;
    for (auto& ti : g.tensors) {
      EXPECT_TRUE(hg.count(ti.name)) << "inspect of the GGUF lists " << ti.name << " by its GGUF name";
      if (hg.count(ti.name)) hg_knot[knot_tensor_name(ti.name)] = hg[ti.name];
    }
    EXPECT_EQ(hg_knot, hk);
  }
}

TEST(SharedModels, TruncatedRealFilesAreClearErrors) {
  REQUIRE_MODELS();
  const std::string in = model_path("stories260K-pad256-qwen2-q4_k_m.gguf");
  auto b = ctest::read_all(in);
  gguf::File g = gguf::parse(b.data(), b.size(), b.size(), "x");
  std::vector<uint64_t> cuts = {0, 3, 4, 8, 16, 24, 100, g.data_offset / 2, g.data_offset - 1, g.data_offset};
  for (auto& t : g.tensors) cuts.push_back(g.data_offset + t.offset + t.size / 2);
  for (uint64_t n : cuts) {
    std::string e = error_of([&] { gguf::parse(b.data(), n, n, "cut.gguf"); });
    EXPECT_TRUE(contains(e, "cut.gguf") && (contains(e, "truncated") || contains(e, "past the end") || contains(e, "not a gguf"))) << n << ": " << e;
  }
  // the converted .knot, cut at its section boundaries, through a file
  const std::string k = ctest::tmp_path("cut-src.knot"), cut = ctest::tmp_path("cut.knot");
  convert_gguf_to_knot(in, k);
  auto kb = ctest::read_all(k);
  FileSource ks(k);
  KnotHeader h = read_knot_header(ks);
  for (uint64_t n : {(uint64_t)5, (uint64_t)10, 10 + (uint64_t)h.meta_len, h.align, h.payload_offset, h.payload_offset + h.tokenizer.size,
                     (uint64_t)kb.size() - 1}) {
    ctest::write_all(cut, std::vector<uint8_t>(kb.begin(), kb.begin() + (long)n));
    std::string e = error_of([&] { load_model_file(cut); });
    EXPECT_TRUE(contains(e, "cut.knot") && (contains(e, "truncated") || contains(e, "metaLen"))) << n << ": " << e;
  }
}

TEST(SharedModels, CliRefusesBadFilesWithExitOne) {
  REQUIRE_MODELS();
  REQUIRE_CLI();
  const std::string in = model_path("stories260K-pad256-llama-q4_k_m.gguf"), out = ctest::tmp_path("cli-bad.knot");
  convert_gguf_to_knot(in, out);
  auto b = ctest::read_all(out);
  // stale: old layout (JSON space-padded inside metaLen, no marker)
  auto s = ctest::split_knot(b);
  std::string js = s.json + " ";
  while ((10 + js.size()) % 4) js += ' ';
  std::vector<uint8_t> st = {'K', 'N', 'O', 'T', 1, 0};
  uint32_t n = (uint32_t)js.size();
  for (int i = 0; i < 4; i++) st.push_back((uint8_t)(n >> (8 * i)));
  st.insert(st.end(), js.begin(), js.end());
  st.insert(st.end(), s.payload.begin(), s.payload.end());
  ctest::write_all(ctest::tmp_path("stale.knot"), st);
  CliRun r = run("verify " + ctest::tmp_path("stale.knot"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.out, "knot: error:") && contains(r.out, "stale")) << r.out;
  // flipped payload byte: verify names the tensor
  b[b.size() - 100] ^= 0x40;
  ctest::write_all(ctest::tmp_path("flip.knot"), b);
  r = run("verify " + ctest::tmp_path("flip.knot"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.out, "hash mismatch")) << r.out;
  r = run("inspect " + ctest::tmp_path("nope.gguf"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.out, "knot: error:") && contains(r.out, "cannot open")) << r.out;
  r = run("convert " + in + " " + out + " --type Q3_Z");
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.out, "unknown target type")) << r.out;
  r = run("frobnicate");
  EXPECT_EQ(r.rc, 2);  // a usage error: status 2, as in node bin/knotwork.mjs (README)
  r = run("help");
  EXPECT_EQ(r.rc, 0);
  EXPECT_TRUE(contains(r.out, "synth")) << r.out;
}

TEST(Requantize, F32SourceWithinErrorBounds) {
  // a synthetic F32 llama with K-quant friendly rows, and stories260K (rows of 64/172)
  SynthOptions o;
  o.hidden = 256, o.layers = 2, o.heads = 8, o.kv_heads = 4, o.ffn = 512, o.vocab = 300, o.type = "F32";
  const std::string src = ctest::tmp_path("f32.gguf");
  synth_model(o, src);
  Model f = load_model_file(src);
  const std::map<std::string, double> bound = {{"Q8_0", 0.008}, {"Q6_K", 0.03}, {"Q5_K", 0.05}, {"Q4_K", 0.1}, {"Q4_0", 0.15}, {"F16", 1e-3}, {"BF16", 8e-3}};
  for (auto& [type, b] : bound) {
    const std::string out = ctest::tmp_path("rq-" + type + ".knot");
    ConvertOptions co;
    co.type = type;
    int calls = 0;
    co.progress = [&](uint64_t done, uint64_t total, const std::string&) {
      EXPECT_LE(done, total);
      calls++;
    };
    ConvertResult r = convert_gguf_to_knot(src, out, co);
    EXPECT_EQ(calls, (int)f.tensors.size() + 1);
    EXPECT_TRUE(r.notes.empty()) << r.notes[0];
    Model q = load_model_file(out);
    for (auto& [name, t] : f.tensors) {
      const Tensor& u = q.tensors.at(name);
      if (t.shape.size() == 1) {
        EXPECT_EQ(u.type, DType::F32) << name;  // norms stay F32
        continue;
      }
      EXPECT_EQ(std::string(dtype_name(u.type)), type) << name;
      auto a = dequant(t), c = dequant(u);
      double e = rel_rmse(a.data(), c.data(), a.size());
      EXPECT_LT(e, b) << type << " " << name;
      EXPECT_GT(e, 0.0) << type << " " << name;
    }
  }
}

TEST(Requantize, IncompatibleRowsFallBackWithANote) {
  REQUIRE_MODELS();
  const std::string out = ctest::tmp_path("s260-q4k.knot");
  ConvertOptions co;
  co.type = "Q4_K";
  ConvertResult r = convert_gguf_to_knot(model_path("stories260K.gguf"), out, co);
  Model q = load_model_file(out), f = load_model_file(model_path("stories260K.gguf"));
  // rows of 64 -> Q8_0, ffn_down rows of 172 -> F16, each noted
  EXPECT_EQ(q.tensors.at("blk_0_attn_q_weight").type, DType::Q8_0);
  EXPECT_EQ(q.tensors.at("blk_0_ffn_down_weight").type, DType::F16);
  EXPECT_EQ(r.notes.size(), 5u * 7 + 2u);  // 7 matrices per layer + token_embd + output
  bool noted = false;
  for (auto& n : r.notes) noted |= contains(n, "blk_0_ffn_down_weight") && contains(n, "172") && contains(n, "F16");
  EXPECT_TRUE(noted);
  auto a = dequant(f.tensors.at("blk_0_ffn_down_weight")), c = dequant(q.tensors.at("blk_0_ffn_down_weight"));
  EXPECT_LT(rel_rmse(a.data(), c.data(), a.size()), 1e-3);
}

TEST(Requantize, QuantizedSourcesKeptUnlessAllowed) {
  REQUIRE_MODELS();
  const std::string in = model_path("stories260K-pad256-llama-q8_0.gguf");
  ConvertOptions co;
  co.type = "Q4_K";
  ConvertResult r = convert_gguf_to_knot(in, ctest::tmp_path("keep.knot"), co);
  EXPECT_EQ(load_model_file(ctest::tmp_path("keep.knot")).tensors.at("blk_0_ffn_up_weight").type, DType::Q8_0);
  EXPECT_FALSE(r.notes.empty());
  co.allow_requantize = true;
  convert_gguf_to_knot(in, ctest::tmp_path("rq.knot"), co);
  Model q = load_model_file(ctest::tmp_path("rq.knot")), f = load_model_file(in);
  const Tensor& u = q.tensors.at("blk_0_ffn_up_weight");
  EXPECT_EQ(u.type, DType::Q4_K);
  auto a = dequant(f.tensors.at("blk_0_ffn_up_weight")), c = dequant(u);
  EXPECT_LT(rel_rmse(a.data(), c.data(), a.size()), 0.15);
}

TEST(Requantize, Q4KMMixMatchesLlamaCpp) {
  REQUIRE_MODELS();
  // llama.cpp chose these types for the shared Q4_K_M files; our policy must agree.
  for (const char* file : {"stories260K-pad256-llama-q4_k_m.gguf", "stories260K-pad256-qwen2-q4_k_m.gguf"}) {
    gguf::File g = gguf::parse_file(model_path(file));
    int n_layer = config_from_gguf(g, file).n_layer;
    for (auto& t : g.tensors) {
      std::string name = knot_tensor_name(t.name);
      DType want = choose_tensor_type("Q4_K_M", name, DType::F32, t.shape, n_layer, false, nullptr);
      EXPECT_EQ(want, t.type) << file << " " << t.name;
    }
  }
}

TEST(Requantize, UnknownTargetIsAnError) {
  EXPECT_TRUE(contains(error_of([] { check_target_type("Q3_Z"); }), "unknown target type"));
  EXPECT_TRUE(contains(error_of([] { check_target_type("Q8_K"); }), "not a storage type"));
}

namespace {

// A copy of a shared GGUF with one F32 value (or one block's scale) of a tensor set to NaN.
std::string gguf_with_nan(const std::string& file, const std::string& tensor, uint64_t byte_in_tensor, const std::string& out) {
  auto b = ctest::read_all(model_path(file));
  gguf::File g = gguf::parse(b.data(), b.size(), b.size(), file);
  const gguf::TensorInfo* t = g.find_tensor(tensor);
  EXPECT_NE(t, nullptr) << tensor;
  if (!t) return "";
  uint8_t* p = b.data() + g.data_offset + t->offset + byte_in_tensor;
  if (t->type == DType::F32) {
    const float nan = std::nanf("");
    std::memcpy(p, &nan, 4);
  } else {
    p[0] = 0x00, p[1] = 0x7E;  // fp16 NaN
  }
  const std::string path = ctest::tmp_path(out);
  ctest::write_all(path, b);
  return path;
}

}  // namespace

TEST(CliConvert, RefusesToOverwriteItsInputAndNonKnotOutputs) {
  REQUIRE_MODELS();
  REQUIRE_CLI();
  const std::string in = ctest::tmp_path("self.gguf");
  std::filesystem::copy_file(model_path("stories260K.gguf"), in, std::filesystem::copy_options::overwrite_existing);
  const auto before = ctest::read_all(in);
  CliRun r = run("convert " + in + " " + in);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_EQ(ctest::read_all(in), before) << "the source was overwritten";
  EXPECT_TRUE(contains(r.out, "self.gguf: the output name must end in .knot")) << r.out;
  // the same file under another name ending in .knot (a symlink) is refused by the API too
  const std::string link = ctest::tmp_path("self-link.knot");
  std::filesystem::remove(link);
  std::filesystem::create_symlink(in, link);
  r = run("convert " + in + " " + link);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_TRUE(contains(r.out, "is the input file")) << r.out;
  EXPECT_EQ(ctest::read_all(in), before) << "the source was overwritten through a link";
  EXPECT_TRUE(contains(error_of([&] { convert_gguf_to_knot(in, link); }), "refusing to overwrite the source"));
  // an output name not ending in .knot
  r = run("convert " + in + " " + ctest::tmp_path("out.gguf"));
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_TRUE(contains(r.out, "out.gguf: the output name must end in .knot")) << r.out;
  EXPECT_FALSE(std::filesystem::exists(ctest::tmp_path("out.gguf")));
  // a .knot input
  const std::string k = ctest::tmp_path("conv-in.knot");
  r = run("convert " + in + " " + k);
  ASSERT_EQ(r.rc, 0) << r.out;
  r = run("convert " + k + " " + ctest::tmp_path("conv-out.knot"));
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_TRUE(contains(r.out, "conv-in.knot: already a .knot file")) << r.out;
}

TEST(CliConvert, KeptQuantizedTensorsAreOneSummaryLine) {
  REQUIRE_MODELS();
  const std::string in = model_path("stories260K-pad256-llama-q4_k_m.gguf");
  ConvertOptions co;
  co.type = "Q8_0";
  ConvertResult r = convert_gguf_to_knot(in, ctest::tmp_path("kept.knot"), co);
  std::string all;
  for (auto& n : r.notes) all += n + "\n";
  ASSERT_EQ(r.notes.size(), 1u) << all;
  // 5 layers x 7 matrices + token_embd + output, all quantized in the source
  EXPECT_TRUE(contains(r.notes[0], "kept 37 quantized tensors as they are (")) << r.notes[0];
  EXPECT_TRUE(contains(r.notes[0], "pass --allow-requantize to re-quantize")) << r.notes[0];
  if (!have_cli()) return;
  CliRun c = run("convert " + in + " " + ctest::tmp_path("kept-cli.knot") + " --type Q8_0");
  EXPECT_EQ(c.rc, 0) << c.out;
  size_t notes = 0;
  for (size_t p = c.out.find("note:"); p != std::string::npos; p = c.out.find("note:", p + 1)) notes++;
  EXPECT_EQ(notes, 1u) << c.out;
}

// A NaN in the source is refused at convert time, naming tensor and row/block, instead of
// a .knot that verify rejects later.
TEST(CliConvert, NonFiniteSourceValuesAreRefused) {
  REQUIRE_MODELS();
  // F32 norm: value 3 of blk.2.ffn_norm.weight
  std::string in = gguf_with_nan("stories260K.gguf", "blk.2.ffn_norm.weight", 3 * 4, "nan-f32.gguf");
  const std::string out = ctest::tmp_path("nan-f32.knot");
  std::string e = error_of([&] { convert_gguf_to_knot(in, out); });
  EXPECT_TRUE(contains(e, "tensor blk.2.ffn_norm.weight: non-finite value at row 0, column 3")) << e;
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_FALSE(std::filesystem::exists(out + ".tmp"));
  // also when re-quantizing (the row path)
  ConvertOptions co;
  co.type = "Q8_0";
  in = gguf_with_nan("stories260K.gguf", "blk.1.ffn_up.weight", 4 * (64 * 2 + 5), "nan-f32b.gguf");
  e = error_of([&] { convert_gguf_to_knot(in, out, co); });
  EXPECT_TRUE(contains(e, "tensor blk.1.ffn_up.weight: non-finite value at row 2, column 5")) << e;
  // Q4_K block scale: block 3 of row 1 (rows of 256 = one block each)
  in = gguf_with_nan("stories260K-pad256-llama-q4_k_m.gguf", "blk.0.attn_q.weight", 4 * sizeof(block_q4_K), "nan-q4k.gguf");
  e = error_of([&] { convert_gguf_to_knot(in, out); });
  EXPECT_TRUE(contains(e, "tensor blk.0.attn_q.weight: non-finite block scale at row 4, block 0")) << e;
  // loading it to run names tensor and block too (not "non-finite logit" at generate time)
  e = error_of([&] { load_model_file(in); });
  EXPECT_TRUE(contains(e, "nan-q4k.gguf: tensor blk.0.attn_q.weight") && contains(e, "block 4 has a non-finite scale")) << e;
  if (!have_cli()) return;
  CliRun r = run("convert " + in + " " + out);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_TRUE(contains(r.out, "knot: error:") && contains(r.out, "blk.0.attn_q.weight")) << r.out;
}

TEST(CliVerify, MissingTensorAndDirectory) {
  REQUIRE_MODELS();
  REQUIRE_CLI();
  Model m = load_model_file(model_path("stories260K-pad256-llama-q8_0.gguf"));
  m.tensors.erase("blk_3_attn_v_weight");
  const std::string p = ctest::tmp_path("missing-v.knot");
  write_knot_file(p, m);
  CliRun r = run("verify " + p);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_TRUE(contains(r.out, "layer 3: missing tensor blk_3_attn_v_weight")) << r.out;
  // the GGUF side names the tensor the GGUF way; a wrong shape names layer and dims
  auto raw = ctest::read_all(model_path("stories260K.gguf"));
  gguf::File g = gguf::parse(raw.data(), raw.size(), raw.size(), "s");
  gguf::Writer w;
  w.version = g.version, w.alignment = g.alignment;
  for (auto& [k, v] : g.kv)
    if (k != "general.alignment") w.set(k, v);
  std::vector<const void*> data;
  for (auto& t : g.tensors) {
    if (t.name == "blk.2.ffn_gate.weight") continue;
    std::vector<int64_t> shape = t.shape;
    if (t.name == "blk.1.attn_k.weight") std::swap(shape[0], shape[1]);  // same bytes, wrong shape
    w.add_tensor(t.name, t.type_id, shape);
    data.push_back(raw.data() + g.data_offset + t.offset);
  }
  const std::string gp = ctest::tmp_path("missing-gate.gguf");
  ctest::write_all(gp, w.to_bytes(data));
  r = run("verify " + gp);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_TRUE(contains(r.out, "layer 2: missing tensor blk.2.ffn_gate.weight")) << r.out;
  EXPECT_TRUE(contains(r.out, "layer 1: tensor blk.1.attn_k.weight has shape")) << r.out;
  r = run("inspect " + ctest::tmp_path(""));
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_TRUE(contains(r.out, "is a directory") && !contains(r.out, "bad magic")) << r.out;
}

// Numeric options are range-checked, never wrapped (4294967299 as int is 3).
TEST(CliGenerate, NumericOptionsAreRangeChecked) {
  REQUIRE_MODELS();
  REQUIRE_CLI();
  const std::string m = model_path("stories260K.gguf") + " -p 'Once upon a time' ";
  const std::pair<std::string, std::string> cases[] = {
      {"-n 4294967299", "-n must be an integer in [0, 1048576], got 4294967299"},
      {"--n-predict -1", "--n-predict must be an integer in [0, 1048576], got -1"},
      {"--ctx 99999999999", "--ctx must be an integer in [1, 1048576], got 99999999999"},
      {"--ctx 0", "--ctx must be an integer in [1, 1048576], got 0"},
      {"--chunk 4097", "--chunk must be an integer in [1, 4096], got 4097"},
      {"--top-k -1", "--top-k must be an integer in [0, 2147483647], got -1"},
      {"--seed 9007199254740992", "--seed must be an integer in [0, 9007199254740991], got 9007199254740992"},
      {"--seed 1e3", "option --seed: '1e3' is not an integer"},
      {"--temp -0.5", "--temp must be a number >= 0, got -0.5"},
      {"--temp inf", "option --temp: 'inf' is not a number"},
      {"--top-p 0", "--top-p must be a number in (0, 1], got 0"},
      {"--top-p 1.5", "--top-p must be a number in (0, 1], got 1.5"},
      {"--min-p 2", "--min-p must be a number in [0, 1], got 2"},
      {"--repeat-penalty 0", "--repeat-penalty must be a number > 0, got 0"},
  };
  for (auto& [opt, msg] : cases) {
    CliRun r = run("generate " + m + opt);
    EXPECT_EQ(r.rc, 2) << opt << ": " << r.out;
    EXPECT_TRUE(contains(r.out, "knot: error: " + msg)) << opt << ": " << r.out;
  }
  CliRun r = run("generate " + m + "-n 3 --temp 0 --ctx 4096 --ids");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "knot: warning: --ctx 4096 is larger than the model's trained context (2048)")) << r.out;
}

// synth's integer options are range-checked too (4294967304 as int is 8).
TEST(CliSynth, IntegerOptionsDoNotWrap) {
  REQUIRE_CLI();
  const std::string out = ctest::tmp_path("wrap.gguf");
  CliRun r = run("synth --arch llama --hidden 4294967304 --layers 1 --heads 2 --kv-heads 1 --ffn 8 --vocab 300 " + out);
  EXPECT_EQ(r.rc, 2) << r.out;  // usage errors exit 2 (README)
  EXPECT_TRUE(contains(r.out, "--hidden must be an integer in [1, 2147483647], got 4294967304")) << r.out;
  EXPECT_FALSE(std::filesystem::exists(out));
  r = run("synth --arch llama --hidden 8 --layers 1 --heads 2 --kv-heads 1 --ffn 8 --vocab 300 --seed -1 " + out);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "--seed must be an integer in [0, 9223372036854775807], got -1")) << r.out;
}
