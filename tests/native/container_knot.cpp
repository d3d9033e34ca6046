// container_knot.cpp — the .knot layout, header parse (pure and via a range source),
// verified tensor/row reads, and every bad-input path (stale, truncated, corrupt).
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "container_util.h"
#include "container/hash.h"
#include "container/knot.h"
#include "container/loader.h"

using namespace knot;
using ctest::contains;
using ctest::error_of;
using json = nlohmann::json;

namespace {

// Counts fetches, like an HTTP/R2 range source would.
struct CountingSource : MemorySource {
  using MemorySource::MemorySource;
  int fetches = 0;
  uint64_t bytes = 0;
  void read(uint64_t off, uint64_t len, uint8_t* dst) override {
    fetches++;
    bytes += len;
    MemorySource::read(off, len, dst);
  }
};

const Model& model() {
  static Model m = ctest::small_model("qwen2", "Q4_K_M");
  return m;
}
const std::vector<uint8_t>& good() {
  static std::vector<uint8_t> b = knot_to_bytes(model());
  return b;
}

std::string load_error(const std::vector<uint8_t>& b) {
  return error_of([&] {
    MemorySource src(b.data(), b.size(), "bad.knot");
    load_knot(src);
  });
}

// Re-lays out the good file with an edited JSON.
std::vector<uint8_t> with_json(const std::function<void(json&)>& edit) {
  auto s = ctest::split_knot(good());
  json j = json::parse(s.json);
  edit(j);
  return ctest::layout_knot(j.dump(), s.payload);
}

// The historical encoder: JSON space-padded inside metaLen to a 4-byte boundary.
std::vector<uint8_t> stale_layout(const std::string& json_text, const std::vector<uint8_t>& payload, bool with_marker) {
  std::string js = json_text;
  while ((10 + js.size()) % 4) js += ' ';
  std::vector<uint8_t> out = {'K', 'N', 'O', 'T', 1, 0};
  uint32_t n = (uint32_t)js.size();
  for (int i = 0; i < 4; i++) out.push_back((uint8_t)(n >> (8 * i)));
  out.insert(out.end(), js.begin(), js.end());
  if (with_marker) out.push_back(0x40);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

}  // namespace

TEST(Knot, CanonicalLayoutForEveryPaddingLength) {
  for (int k = 0; k < 4; k++) {
    std::vector<KnotTensorDesc> d = {{"token_embd_weight", DType::F32, {4, 300}}};
    ModelConfig c = synth_config([] {
      SynthOptions o;
      o.hidden = 4, o.heads = 2, o.kv_heads = 1, o.ffn = 8, o.vocab = 300, o.layers = 1;
      return o;
    }());
    std::vector<uint8_t> out;
    KnotWriter w(&out, c, synth_tokenizer(300), d, {{"pad", std::string((size_t)k, 'x')}});
    std::vector<float> data(4 * 300, 0.5f);
    w.write_tensor(data.data(), data.size() * 4);
    w.finish();
    ASSERT_EQ(std::string(out.begin(), out.begin() + 4), "KNOT");
    uint16_t ver;
    uint32_t meta_len;
    std::memcpy(&ver, out.data() + 4, 2);
    std::memcpy(&meta_len, out.data() + 6, 4);
    EXPECT_EQ(ver, KNOT_FORMAT_VERSION);
    EXPECT_EQ(out[10 + meta_len - 1], '}') << "metaLen must be the unpadded JSON length";
    const size_t align = (10 + meta_len + 3) & ~3u;
    for (size_t p = 10 + meta_len; p < align; p++) EXPECT_EQ(out[p], 0) << "NUL padding";
    EXPECT_EQ(out[align], 0x40);
    MemorySource src(out);
    KnotHeader h = read_knot_header(src);
    EXPECT_EQ(h.align, align);
    EXPECT_EQ(h.payload_offset, align + 1);
    EXPECT_EQ(h.payload_offset + h.payload_bytes(), out.size());
    json j = json::parse(h.meta_json);
    EXPECT_EQ(j["tensors"][0]["type"], "F32");
    EXPECT_FALSE(j["tensors"][0].contains("tensor_type"));
    EXPECT_EQ(j["schema"], KNOT_SCHEMA_VERSION);
    EXPECT_EQ(j["info"]["pad"], std::string((size_t)k, 'x'));
  }
}

TEST(Knot, WriteReadIsIdentical) {
  const Model& m = model();
  MemorySource src(good());
  Model r = load_knot(src);
  EXPECT_EQ(config_to_json(r.config), config_to_json(m.config));
  EXPECT_EQ(tokenizer_to_json(r.tokenizer), tokenizer_to_json(m.tokenizer));
  ASSERT_EQ(r.tensors.size(), m.tensors.size());
  for (auto& [name, t] : m.tensors) {
    const Tensor& u = r.tensors.at(name);
    EXPECT_EQ(u.type, t.type) << name;
    EXPECT_EQ(u.shape, t.shape) << name;
    ASSERT_EQ(u.size, t.size) << name;
    EXPECT_EQ(std::memcmp(u.data(), t.data(), t.size), 0) << name;
    EXPECT_EQ(u.hash, hash64(t.data(), t.size)) << name;
    EXPECT_EQ((uintptr_t)u.data() % 64, 0u) << name;
  }
  // the same through a file
  std::string p = ctest::tmp_path("rt.knot");
  write_knot_file(p, m);
  EXPECT_EQ(ctest::read_all(p), good());
  Model f = load_model_file(p);
  EXPECT_EQ(f.tensors.size(), m.tensors.size());
  EXPECT_TRUE(verify_knot(src).empty());
}

TEST(Knot, PureHeaderParseReportsBytesNeeded) {
  const auto& b = good();
  HeaderParse r = parse_knot_header(b.data(), 4, b.size());
  EXPECT_FALSE(r.complete);
  EXPECT_EQ(r.need, 10u);
  r = parse_knot_header(b.data(), 10, b.size());
  EXPECT_FALSE(r.complete);
  uint32_t meta_len;
  std::memcpy(&meta_len, b.data() + 6, 4);
  EXPECT_EQ(r.need, ((10 + meta_len + 3) & ~3u) + 1);
  r = parse_knot_header(b.data(), (size_t)r.need, b.size());
  ASSERT_TRUE(r.complete);
  EXPECT_EQ(r.header.tensors.size(), model().tensors.size());
}

TEST(Knot, RangeSourceProbesOnceOrTwice) {
  const auto& b = good();
  CountingSource one(b.data(), b.size());
  read_knot_header(one);  // default 64 KiB probe holds this header
  EXPECT_EQ(one.fetches, 1);
  CountingSource two(b.data(), b.size());
  KnotHeader h = read_knot_header(two, 256);  // metaLen says the JSON is longer
  EXPECT_EQ(two.fetches, 2);
  EXPECT_EQ(two.bytes, h.payload_offset) << "the second fetch reads only the missing bytes";
  CountingSource tiny(b.data(), b.size());
  read_knot_header(tiny, 4);
  EXPECT_EQ(tiny.fetches, 2);  // the 10-byte preamble, then the rest
}

TEST(Knot, RowReadsMatchTheWholeTensorAndVerifyChunks) {
  MemorySource src(good());
  KnotHeader h = read_knot_header(src);
  for (const char* name : {"token_embd_weight", "output_weight", "blk_1_ffn_up_weight"}) {
    const KnotTensor& kt = h.get(name);
    Tensor whole = read_knot_tensor(src, h, kt);
    const uint64_t rs = kt.row_size();
    const int64_t n = kt.nrows();
    for (auto [r0, r1] : std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {0, n}, {255, 257}, {300, 301}, {n - 3, n}, {17, 17}}) {
      if (r1 > n) continue;
      std::vector<uint8_t> buf((size_t)((r1 - r0) * (int64_t)rs) + 1);
      read_knot_rows(src, h, kt, r0, r1, buf.data());
      EXPECT_EQ(std::memcmp(buf.data(), whole.data() + r0 * (int64_t)rs, (size_t)((r1 - r0) * (int64_t)rs)), 0) << name << " " << r0;
    }
    EXPECT_TRUE(contains(error_of([&] { read_knot_rows(src, h, kt, 0, n + 1, nullptr); }), "outside"));
  }
  EXPECT_EQ(h.get("token_embd_weight").chunk_rows, KNOT_CHUNK_ROWS);
  EXPECT_EQ(h.get("token_embd_weight").chunk_hashes.size(), 3u);  // 600 rows / 256
}

TEST(Knot, FlippedPayloadByteIsAHashMismatch) {
  MemorySource gsrc(good());
  KnotHeader h = read_knot_header(gsrc);
  const KnotTensor& emb = h.get("token_embd_weight");
  const uint64_t rs = emb.row_size();
  auto b = good();
  // a byte in row 300 = chunk 1 of token_embd
  b[h.payload_offset + emb.offset + 300 * rs + 5] ^= 0x01;
  std::string e = load_error(b);
  EXPECT_TRUE(contains(e, "hash mismatch") && contains(e, "token_embd_weight")) << e;
  MemorySource src(b);
  std::vector<uint8_t> buf(rs * 10);
  read_knot_rows(src, h, emb, 0, 10, buf.data());  // chunk 0 still verifies
  e = error_of([&] { read_knot_rows(src, h, emb, 299, 302, buf.data()); });
  EXPECT_TRUE(contains(e, "hash mismatch") && contains(e, "rows [256, 512)")) << e;
  auto problems = verify_knot(src);
  // the whole tensor's hash and its chunk 1 (chunk 0 still verifies)
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_TRUE(contains(problems[0], "hash mismatch in tensor token_embd_weight")) << problems[0];
  EXPECT_TRUE(contains(problems[1], "token_embd_weight chunk 1 (rows [256, 512)) hash mismatch")) << problems[1];
  // the tokenizer blob is verified too
  auto c = good();
  c[h.payload_offset + 3] ^= 0x20;
  e = load_error(c);
  EXPECT_TRUE(contains(e, "tokenizer blob")) << e;
}

TEST(Knot, StaleFilesAreRefused) {
  auto s = ctest::split_knot(good());
  json j = json::parse(s.json);
  // every padding length: with and without the marker byte
  for (int k = 0; k < 4; k++) {
    j["info"]["pad"] = std::string((size_t)k, 'x');
    for (bool marker : {false, true}) {
      auto b = stale_layout(j.dump(), s.payload, marker);
      if (marker && (10 + j.dump().size()) % 4 == 0) {
        // no padding was needed: old and new layouts coincide and the file is valid
        EXPECT_EQ(load_error(b), "");
        continue;
      }
      std::string e = load_error(b);
      EXPECT_TRUE(contains(e, "stale") && contains(e, "Re-encode")) << "k=" << k << " marker=" << marker << ": " << e;
      e = error_of([&] {
        MemorySource src(b);
        read_knot_header(src);
      });
      EXPECT_TRUE(contains(e, "stale")) << e;
    }
  }
  // header intact but a K-quant super-scale is NaN at the start of a tensor
  MemorySource gsrc(good());
  KnotHeader h = read_knot_header(gsrc);
  const KnotTensor& q = h.get("blk_0_attn_q_weight");
  ASSERT_EQ(q.type, DType::Q4_K);
  auto b = good();
  b[h.payload_offset + q.offset] = 0x00;
  b[h.payload_offset + q.offset + 1] = 0x7E;  // fp16 NaN in d
  std::string e = load_error(b);
  EXPECT_TRUE(contains(e, "stale") && contains(e, "blk_0_attn_q_weight")) << e;
  std::string p = ctest::tmp_path("stale.knot");
  ctest::write_all(p, stale_layout(s.json, s.payload, false));
  e = error_of([&] { load_model_file(p); });
  EXPECT_TRUE(contains(e, "stale") && contains(e, "stale.knot")) << e;
}

TEST(Knot, TruncatedAtEverySectionBoundary) {
  const auto& b = good();
  MemorySource gsrc(b);
  KnotHeader h = read_knot_header(gsrc);
  std::vector<uint64_t> cuts = {0, 3, 4, 6, 9, 10, 11, 10 + h.meta_len / 2, 10 + (uint64_t)h.meta_len - 1, 10 + (uint64_t)h.meta_len,
                                h.align, h.payload_offset, h.payload_offset + h.tokenizer.size / 2,
                                h.payload_offset + h.tokenizer.size};
  for (auto& t : h.tensors) cuts.push_back(h.payload_offset + t.offset), cuts.push_back(h.payload_offset + t.offset + t.size / 2);
  cuts.push_back(b.size() - 1);
  for (uint64_t n : cuts) {
    std::vector<uint8_t> c(b.begin(), b.begin() + (long)n);
    std::string e = load_error(c);
    EXPECT_TRUE(contains(e, "truncated") || contains(e, "metaLen")) << "cut at " << n << ": " << e;
    EXPECT_TRUE(contains(e, "bad.knot")) << e;
  }
}

TEST(Knot, BadMagicVersionMetaLen) {
  auto b = good();
  b[1] = 'X';
  EXPECT_TRUE(contains(load_error(b), "bad magic"));
  b = good();
  b[4] = 7;
  EXPECT_TRUE(contains(load_error(b), "unknown knot version 7"));
  b = good();
  uint32_t big = (uint32_t)b.size();
  std::memcpy(b.data() + 6, &big, 4);
  std::string e = load_error(b);
  EXPECT_TRUE(contains(e, "metaLen") && contains(e, "past the end")) << e;
  b = good();
  b[10] = '#';  // JSON syntax error
  EXPECT_TRUE(contains(load_error(b), "does not parse"));
  auto j = with_json([](json& j) { j["schema"] = 99; });
  EXPECT_TRUE(contains(load_error(j), "schema 99"));
}

TEST(Knot, TensorTypeFieldIsToleratedOnRead) {
  auto b = with_json([](json& j) {
    for (auto& t : j["tensors"]) {
      t["tensor_type"] = t["type"];
      t.erase("type");
    }
  });
  MemorySource src(b);
  Model r = load_knot(src);
  EXPECT_EQ(r.tensors.at("blk_0_attn_q_weight").type, DType::Q4_K);
  EXPECT_EQ(r.tensors.size(), model().tensors.size());
}

TEST(Knot, UnknownTypeOutOfRangeOverlapMisalignedRows) {
  std::string e = load_error(with_json([](json& j) { j["tensors"][1]["type"] = "Q9_Z"; }));
  EXPECT_TRUE(contains(e, "unknown tensor type 'Q9_Z'")) << e;
  e = load_error(with_json([](json& j) { j["tensors"].back()["offset"] = 1ull << 40; }));
  EXPECT_TRUE(contains(e, "past the end")) << e;
  e = load_error(with_json([](json& j) { j["tensors"][2]["offset"] = j["tensors"][1]["offset"]; }));
  EXPECT_TRUE(contains(e, "overlap")) << e;
  // same element count, but a Q4_K row of 128 elements is not whole blocks
  e = load_error(with_json([](json& j) {
    for (auto& t : j["tensors"])
      if (t["name"] == "blk_1_ffn_gate_weight") t["shape"] = {128, 1024};
  }));
  EXPECT_TRUE(contains(e, "blk_1_ffn_gate_weight") && contains(e, "128")) << e;
  e = load_error(with_json([](json& j) { j["tensors"][0]["size"] = j["tensors"][0]["size"].get<uint64_t>() + 1; }));
  EXPECT_TRUE(contains(e, "does not match")) << e;
  e = load_error(with_json([](json& j) { j["tensors"][0]["hash"] = "zz"; }));
  EXPECT_TRUE(contains(e, "bad hash")) << e;
  e = load_error(with_json([](json& j) { j["config"]["n_head_kv"] = 3; }));
  EXPECT_TRUE(contains(e, "n_head_kv")) << e;
  e = load_error(with_json([](json& j) { j["config"]["rope_style"] = 5; }));
  EXPECT_TRUE(contains(e, "rope_style")) << e;
  e = load_error(with_json([](json& j) { j["config"]["rms_eps"] = "tiny"; }));
  EXPECT_TRUE(contains(e, "rms_eps")) << e;
  e = load_error(with_json([](json& j) { j["tensors"][0]["shape"] = "big"; }));
  EXPECT_TRUE(contains(e, "shape")) << e;
  e = load_error(with_json([](json& j) { j["tensors"] = 3; }));
  EXPECT_TRUE(contains(e, "tensors")) << e;
  e = load_error(with_json([](json& j) {
    for (auto& t : j["tensors"])
      if (t["name"] == "token_embd_weight") t["chunk_hashes"] = {1, 2, 3};
  }));
  EXPECT_TRUE(contains(e, "chunk hash")) << e;
  e = load_error(with_json([](json& j) {
    for (auto& t : j["tensors"])
      if (t["name"] == "output_weight") t["chunk_hashes"].erase(0);
  }));
  EXPECT_TRUE(contains(e, "chunk hashes, expected 3")) << e;
  e = load_error(with_json([](json& j) { j["tensors"].erase(0); }));  // bytes unaccounted for
  EXPECT_TRUE(contains(e, "bytes unaccounted for") && contains(e, "belong to no entry (missing tensor entry?)")) << e;
}

TEST(Knot, NonFiniteScaleScan) {
  std::vector<block_q8_0> q(4);
  for (auto& b : q) b.d = fp32_to_fp16(0.5f);
  EXPECT_EQ(first_nonfinite_block(DType::Q8_0, (const uint8_t*)q.data(), sizeof(block_q8_0) * 4), -1);
  q[2].d = 0x7C00;  // +Inf
  EXPECT_EQ(first_nonfinite_block(DType::Q8_0, (const uint8_t*)q.data(), sizeof(block_q8_0) * 4), 2);
  std::vector<float> f = {1.f, NAN};
  EXPECT_EQ(first_nonfinite_block(DType::F32, (const uint8_t*)f.data(), 8), 1);
  std::vector<block_q6_K> k(2);
  for (auto& b : k) b.d = fp32_to_fp16(1.f);
  k[1].d = 0xFE00;
  EXPECT_EQ(first_nonfinite_block(DType::Q6_K, (const uint8_t*)k.data(), sizeof(block_q6_K) * 2), 1);
}

// Type confusion in the metadata: every JSON value (each position after a ':') replaced
// by tokens of other types; then random bit flips anywhere. A load either succeeds (a
// harmless change) or throws knot::Error — never a crash or a foreign exception.
TEST(Knot, CorruptMetadataAndPayloadNeverCrash) {
  static const char* tokens[] = {"0", "-1", "1e309", "\"x\"", "null", "[]", "{}", "true", "99999999999999999999", "\"Q4_K\""};
  auto s = ctest::split_knot(good());
  int errors = 0, n = 0;
  for (size_t pos = s.json.find(':'); pos != std::string::npos; pos = s.json.find(':', pos + 1), n++) {
    size_t end = pos + 1;
    if (s.json[end] == '"') end = s.json.find('"', end + 1) + 1;  // a string value
    else end = s.json.find_first_of(",}]", end);
    for (int k : {0, 3, 7}) {
      std::string js = s.json.substr(0, pos + 1) + tokens[(n + k) % 10] + s.json.substr(end);
      if (!load_error(ctest::layout_knot(js, s.payload)).empty()) errors++;
    }
  }
  EXPECT_GT(errors, n);
  uint64_t st = 777;
  auto rnd = [&] {
    st = st * 6364136223846793005ull + 1442695040888963407ull;
    return st >> 33;
  };
  for (int it = 0; it < 300; it++) {
    auto c = good();
    c[rnd() % c.size()] ^= (uint8_t)(1u << (rnd() % 8));
    load_error(c);
  }
}

namespace {

// The good file with the bytes of tensor `name` edited and its hashes recomputed, so only
// the edit (not a hash mismatch) can be what a reader objects to.
std::vector<uint8_t> rehashed_edit(const std::string& name, const std::function<void(uint8_t*, const KnotTensor&)>& edit) {
  auto s = ctest::split_knot(good());
  MemorySource src(good());
  KnotHeader h = read_knot_header(src);
  const KnotTensor& t = h.get(name);
  uint8_t* p = s.payload.data() + t.offset;
  edit(p, t);
  json j = json::parse(s.json);
  for (auto& jt : j["tensors"])
    if (jt["name"] == name) {
      jt["hash"] = hash_hex(hash64(p, (size_t)t.size));
      for (size_t c = 0; c < t.chunk_hashes.size(); c++) {
        const uint64_t rs = t.row_size(), r0 = c * (uint64_t)t.chunk_rows;
        const uint64_t r1 = std::min<uint64_t>((uint64_t)t.nrows(), r0 + (uint64_t)t.chunk_rows);
        jt["chunk_hashes"][c] = hash_hex(hash64(p + r0 * rs, (size_t)((r1 - r0) * rs)));
      }
    }
  return ctest::layout_knot(j.dump(), s.payload);
}

std::vector<std::string> verify_bytes(const std::vector<uint8_t>& b) {
  MemorySource src(b.data(), b.size(), "bad.knot");
  return verify_knot(src);
}

std::string joined(const std::vector<std::string>& v) {
  std::string o;
  for (auto& s : v) o += s + "\n";
  return o;
}

}  // namespace

// A size mismatch the old layout does not explain is corruption, not a stale file: the
// message says which bytes belong to no entry instead of advising a re-encode.
TEST(Knot, SizeMismatchIsCorruptUnlessTheOldLayoutExplainsIt) {
  MemorySource gsrc(good());
  KnotHeader h = read_knot_header(gsrc);
  // a tensor entry dropped from the table: its bytes are a gap in the payload
  const KnotTensor& gone = h.tensors[3];
  auto dropped = with_json([&](json& j) {
    for (size_t i = 0; i < j["tensors"].size(); i++)
      if (j["tensors"][i]["name"] == gone.name) j["tensors"].erase(i);
  });
  std::string e = load_error(dropped);
  const uint64_t gap0 = ctest::split_knot(dropped).payload_offset + gone.offset;  // the shorter header moved the payload
  EXPECT_TRUE(contains(e, "corrupt") && !contains(e, "stale") && !contains(e, "Re-encode")) << e;
  EXPECT_TRUE(contains(e, "missing tensor entry") && contains(e, "[" + std::to_string(gap0) + ", " + std::to_string(gap0 + gone.size) + ")") &&
              contains(e, std::to_string(gone.size) + " bytes unaccounted")) << e;
  // trailing garbage: named as bytes after the last range
  auto b = good();
  b.insert(b.end(), 17, 0xAB);
  e = load_error(b);
  EXPECT_TRUE(contains(e, "corrupt") && !contains(e, "stale") && contains(e, "17 bytes unaccounted") &&
              contains(e, "[" + std::to_string(good().size()) + ", " + std::to_string(b.size()) + ")")) << e;
  // cut short inside the last tensor: truncated, with where the ranges end
  b = good();
  b.resize(b.size() - 5);
  e = load_error(b);
  EXPECT_TRUE(contains(e, "truncated") && !contains(e, "stale")) << e;
  // the genuine stale layout (marker present, sizes explained by the old rule) stays stale
  auto s = ctest::split_knot(good());
  json j = json::parse(s.json);
  for (int k = 0; k < 4; k++) {
    j["info"]["pad"] = std::string((size_t)k, 'x');
    if ((10 + j.dump().size()) % 4 == 0) continue;
    e = load_error(stale_layout(j.dump(), s.payload, true));
    EXPECT_TRUE(contains(e, "stale") && contains(e, "Re-encode")) << e;
  }
}

TEST(Knot, RowLengthErrorHasNoNestedQuoting) {
  std::string e = load_error(with_json([](json& j) {
    for (auto& t : j["tensors"])
      if (t["name"] == "blk_1_attn_q_weight") t["shape"][0] = 250;
  }));
  EXPECT_EQ(e, "bad.knot: tensor blk_1_attn_q_weight: row length 250 is not a multiple of the Q4_K block size 256");
}

// verify checks the tensor set the config needs, naming layer and tensor.
TEST(Knot, VerifyChecksTheRequiredTensorSetAndShapes) {
  EXPECT_TRUE(verify_bytes(good()).empty()) << joined(verify_bytes(good()));
  Model m = model();  // shares tensor bytes; only the table is edited
  m.tensors.erase("blk_1_ffn_up_weight");
  auto p = joined(verify_bytes(knot_to_bytes(m)));
  EXPECT_TRUE(contains(p, "bad.knot: layer 1: missing tensor blk_1_ffn_up_weight")) << p;
  // tied: no output_weight is fine; untied without it is missing
  Model t = model();
  t.tensors.erase("output_weight");
  p = joined(verify_bytes(knot_to_bytes(t)));
  EXPECT_TRUE(contains(p, "missing tensor output_weight")) << p;
  t.config.tied_embeddings = true;
  EXPECT_TRUE(verify_bytes(knot_to_bytes(t)).empty()) << joined(verify_bytes(knot_to_bytes(t)));
  // a same-sized tensor with the wrong shape (k declared with rows twice as long)
  Model w = model();
  Tensor& k = w.tensors.at("blk_0_attn_k_weight");
  Tensor& n = w.tensors.at("blk_0_attn_norm_weight");
  k.shape = {k.shape[0] * 2, k.shape[1] / 2};
  n.shape = {n.shape[0] / 2, 2};
  p = joined(verify_bytes(knot_to_bytes(w)));
  EXPECT_TRUE(contains(p, "layer 0: tensor blk_0_attn_k_weight has shape 512 x 64, the config wants 256 x 128")) << p;
  EXPECT_TRUE(contains(p, "layer 0: tensor blk_0_attn_norm_weight has shape 128 x 2, the config wants 256")) << p;
  // a layer the config does not have
  Model x = model();
  Tensor extra = x.tensors.at("blk_1_attn_norm_weight");
  extra.name = "blk_9_attn_norm_weight";
  x.tensors.emplace(extra.name, extra);
  p = joined(verify_bytes(knot_to_bytes(x)));
  EXPECT_TRUE(contains(p, "blk_9_attn_norm_weight belongs to layer 9 but the config has 2 layers")) << p;
}

// A corrupt tensor reports both its hash mismatch and its NaN block scale.
TEST(Knot, VerifyReportsHashMismatchAndNaNScaleTogether) {
  MemorySource gsrc(good());
  KnotHeader h = read_knot_header(gsrc);
  const KnotTensor& q = h.get("blk_1_ffn_up_weight");
  ASSERT_EQ(q.type, DType::Q4_K);
  auto b = good();
  const size_t blk5 = h.payload_offset + q.offset + 5 * sizeof(block_q4_K);
  b[blk5] = 0x00, b[blk5 + 1] = 0x7E;  // fp16 NaN in d of block 5
  auto p = joined(verify_bytes(b));
  EXPECT_TRUE(contains(p, "hash mismatch in tensor blk_1_ffn_up_weight")) << p;
  EXPECT_TRUE(contains(p, "tensor blk_1_ffn_up_weight: non-finite block scale at block 5")) << p;
}

// Loading refuses a NaN block scale even when the hashes agree (rewritten file), naming
// tensor and block, instead of generating from it.
TEST(Knot, LoadRefusesNonFiniteScaleNamingTensorAndBlock) {
  auto b = rehashed_edit("blk_1_ffn_down_weight", [](uint8_t* p, const KnotTensor& t) {
    const size_t bb = type_traits(t.type).block_bytes;
    const size_t d = t.type == DType::Q6_K ? offsetof(block_q6_K, d) : 0;
    p[7 * bb + d] = 0x00, p[7 * bb + d + 1] = 0x7C;  // +Inf scale in block 7
  });
  std::string e = load_error(b);
  EXPECT_TRUE(contains(e, "bad.knot: tensor blk_1_ffn_down_weight") && contains(e, "block 7 has a non-finite scale")) << e;
  b = rehashed_edit("output_norm_weight", [](uint8_t* p, const KnotTensor&) {
    const float nan = std::nanf("");
    std::memcpy(p + 4 * 9, &nan, 4);
  });
  e = load_error(b);
  EXPECT_TRUE(contains(e, "tensor output_norm_weight") && contains(e, "non-finite value at row 0, column 9")) << e;
  // and through the file loader
  const std::string path = ctest::tmp_path("nan-scale.knot");
  ctest::write_all(path, b);
  e = error_of([&] { load_model_file(path); });
  EXPECT_TRUE(contains(e, "nan-scale.knot: tensor output_norm_weight")) << e;
}

TEST(Knot, DirectoryIsNamedAsSuch) {
  const std::string dir = ctest::tmp_path("a-directory.knot");
  std::filesystem::create_directories(dir);
  std::string e = error_of([&] { load_model_file(dir); });
  EXPECT_TRUE(contains(e, "a-directory.knot: is a directory")) << e;
  EXPECT_FALSE(contains(e, "bad magic")) << e;
}
