// container_crafted.cpp — small crafted files that used to crash or exhaust the machine
// (issue 7): JSON nesting bombs in .knot metadata, configs claiming 10^6 or 2^31-1
// layers, chunk_rows = INT64_MAX. Each must end in a named knot::Error (or a clean
// verify report) quickly and in little memory — through the library and the CLI.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "container_util.h"
#include "container/gguf.h"
#include "container/knot.h"

using namespace knot;
using ctest::contains;
using ctest::error_of;
using json = nlohmann::json;

namespace {

const Model& model() {
  static Model m = ctest::small_model("llama", "Q8_0", 11);
  return m;
}
const std::vector<uint8_t>& good() {
  static std::vector<uint8_t> b = knot_to_bytes(model());
  return b;
}

// The good file with one metadata field replaced by raw JSON text (which json cannot
// hold: the nesting bomb must reach the reader as bytes).
std::vector<uint8_t> with_raw(const std::function<void(json&)>& edit, const std::string& raw) {
  auto s = ctest::split_knot(good());
  json j = json::parse(s.json);
  edit(j);
  std::string text = j.dump();
  const size_t at = text.find("\"@RAW@\"");
  if (at != std::string::npos) text.replace(at, 7, raw);
  return ctest::layout_knot(text, s.payload);
}

std::string nest(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

struct CliRun {
  int rc;
  std::string out;
};
CliRun cli(const std::string& args) {
  const std::string bin = knot_test::bin_dir() + "/knot";
  FILE* p = popen((bin + " " + args + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -128 - (WIFSIGNALED(st) ? WTERMSIG(st) : 0), out};
}
bool have_cli() { return std::filesystem::exists(knot_test::bin_dir() + "/knot"); }

// A GGUF whose u32 key `key` holds `value` (patched in place in a synth file).
std::vector<uint8_t> gguf_with_u32(const std::string& key, uint32_t value) {
  SynthOptions o;
  o.arch = "llama";
  o.hidden = 64;
  o.layers = 2;
  o.heads = 4;
  o.kv_heads = 2;
  o.ffn = 128;
  o.vocab = 260;
  o.type = "F32";
  const std::string p = ctest::tmp_path("crafted-" + key + ".gguf");
  synth_model(o, p);
  std::vector<uint8_t> b = ctest::read_all(p);
  const std::string k = key;
  auto it = std::search(b.begin(), b.end(), k.begin(), k.end());
  EXPECT_NE(it, b.end()) << key;
  size_t at = (size_t)(it - b.begin()) + k.size();
  uint32_t type;
  std::memcpy(&type, &b[at], 4);
  EXPECT_EQ(type, (uint32_t)gguf::VType::U32) << key;
  std::memcpy(&b[at + 4], &value, 4);
  return b;
}

}  // namespace

// 100k nested arrays in config or info: a named error, never a stack overflow — in the
// parser, and in `knot inspect` / `verify` / `generate`, which print metadata.
TEST(Crafted, MetadataJsonNestingIsBounded) {
  for (const char* field : {"config", "info"}) {
    auto b = with_raw([&](json& j) { j[field] = "@RAW@"; }, nest(100000));
    std::string e = error_of([&] {
      MemorySource src(b, "deep.knot");
      read_knot_header(src);
    });
    EXPECT_TRUE(contains(e, "deep.knot: metadata: JSON nests deeper than 64 levels")) << field << ": " << e;
    const std::string path = ctest::tmp_path(std::string("deep-") + field + ".knot");
    ctest::write_all(path, b);
    if (!have_cli()) continue;
    for (const std::string cmd : {"inspect", "verify", "generate -n 1 -p hi"}) {
      CliRun r = cli(cmd + " " + path);
      EXPECT_EQ(r.rc, 1) << cmd << " " << field << ": " << r.out;
      EXPECT_TRUE(contains(r.out, "nests deeper than 64 levels")) << cmd << " " << field << ": " << r.out;
    }
  }
  // a config nested only a little is a plain "not an object" error, and 64 levels still parse
  auto b = with_raw([](json& j) { j["info"] = "@RAW@"; }, nest(60));
  MemorySource src(b, "ok.knot");
  EXPECT_EQ(error_of([&] { read_knot_header(src); }), "");
  EXPECT_TRUE(contains(error_of([] { config_from_json(nest(65), "cfg"); }), "cfg: config: JSON nests deeper"));
  // brackets inside strings do not count
  EXPECT_TRUE(contains(error_of([] { config_from_json("{\"arch\": \"" + std::string(500, '[') + "\"}", "cfg"); }), "config.n_embd"));
}

// A config claiming 10^6 or 2^31-1 layers over a file with 2: verify reports a handful of
// problems (stopping after the first missing tensors) instead of building millions of
// messages (12 s and 2.2 GB) or dying in bad_alloc.
TEST(Crafted, HugeLayerCountStopsAfterTheFirstMissingTensors) {
  for (uint32_t n : {1000000u, 2147483647u}) {
    // knot: config.n_layer edited
    auto b = with_raw([&](json& j) { j["config"]["n_layer"] = n; }, "");
    MemorySource src(b, "layers.knot");
    std::vector<std::string> problems;
    EXPECT_EQ(error_of([&] { problems = verify_knot(src); }), "");
    ASSERT_EQ(problems.size(), 9u) << n << ": the first 8 missing tensors and the stop";
    EXPECT_TRUE(contains(problems[0], "layer 2: missing tensor blk_2_attn_norm_weight")) << problems[0];
    EXPECT_TRUE(contains(problems.back(), "stopped after 8 missing tensors (config n_layer = " + std::to_string(n) +
                                              ", the file has tensors for 2 layers)"))
        << problems.back();
    // GGUF: llama.block_count patched, the same check through the CLI's path
    auto g = gguf_with_u32("llama.block_count", n);
    gguf::File f = gguf::parse(g.data(), g.size(), g.size(), "layers.gguf");
    ModelConfig c = config_from_gguf(f, "layers.gguf");
    EXPECT_EQ(c.n_layer, (int)n);
    std::vector<TensorRef> refs;
    for (auto& t : f.tensors) refs.push_back({knot_tensor_name(t.name), t.name, t.shape});
    problems = check_tensor_set(c, refs, true, "layers.gguf");
    EXPECT_EQ(problems.size(), 9u) << n << ": the first 8 missing tensors and the stop";
    EXPECT_TRUE(contains(problems[0], "layer 2: missing tensor blk.2.attn_norm.weight")) << problems[0];
    if (have_cli()) {
      const std::string path = ctest::tmp_path("layers-" + std::to_string(n) + ".gguf");
      ctest::write_all(path, g);
      CliRun r = cli("verify " + path);
      EXPECT_EQ(r.rc, 1) << r.out;
      EXPECT_TRUE(contains(r.out, "stopped after 8 missing tensors")) << r.out;
    }
  }
}

// chunk_rows = INT64_MAX: the chunk count ceil(nrows / chunk_rows) = 1 is computed
// without the signed sum nrows + chunk_rows - 1 that overflowed (UB); one chunk hash
// then covers the whole tensor and row reads verify against it.
TEST(Crafted, ChunkRowsInt64MaxIsOneChunk) {
  const KnotTensor* emb = nullptr;
  MemorySource gs(good(), "good.knot");
  KnotHeader gh = read_knot_header(gs);
  emb = gh.find("token_embd_weight");
  ASSERT_TRUE(emb && emb->chunk_rows > 0);
  const std::string whole = hash_hex(emb->hash);
  auto b = with_raw(
      [&](json& j) {
        for (auto& t : j["tensors"])
          if (t["name"] == "token_embd_weight") {
            t["chunk_rows"] = INT64_MAX;
            t["chunk_hashes"] = json::array({whole});
          }
      },
      "");
  MemorySource src(b, "chunks.knot");
  KnotHeader h;
  ASSERT_EQ(error_of([&] { h = read_knot_header(src); }), "");
  const KnotTensor& t = h.get("token_embd_weight");
  EXPECT_EQ(t.chunk_rows, INT64_MAX);
  ASSERT_EQ(t.chunk_hashes.size(), 1u);
  std::vector<uint8_t> rows((size_t)(5 * t.row_size()));
  EXPECT_EQ(error_of([&] { read_knot_rows(src, h, t, 10, 15, rows.data(), true); }), "");
  const Tensor& mt = model().tensors.at("token_embd_weight");
  EXPECT_EQ(std::memcmp(rows.data(), mt.data() + 10 * t.row_size(), rows.size()), 0);
  std::vector<std::string> problems;
  EXPECT_EQ(error_of([&] { problems = verify_knot(src); }), "");
  EXPECT_TRUE(problems.empty()) << problems[0];
  // a wrong count next to it is still refused, naming it
  auto bad = with_raw(
      [&](json& j) {
        for (auto& t : j["tensors"])
          if (t["name"] == "token_embd_weight") {
            t["chunk_rows"] = INT64_MAX;
            t["chunk_hashes"] = json::array({whole, whole});
          }
      },
      "");
  MemorySource bs(bad, "chunks.knot");
  EXPECT_TRUE(contains(error_of([&] { read_knot_header(bs); }), "2 chunk hashes, expected 1"));
}
