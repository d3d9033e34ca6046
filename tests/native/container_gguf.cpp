// container_gguf.cpp — XXH64, the GGUF reader/writer, and GGUF -> Model mapping.
#include <gtest/gtest.h>

#include <cmath>

#include "container_util.h"
#include "container/gguf.h"
#include "container/hash.h"

using namespace knot;
using ctest::contains;
using ctest::error_of;

TEST(Hash, Xxh64PublishedVectors) {
  EXPECT_EQ(hash64("", 0), 0xEF46DB3751D8E999ull);
  EXPECT_EQ(hash64("a", 1), 0xD24EC4F1A98C6E5Bull);
  EXPECT_EQ(hash64("abc", 3), 0x44BC2CF5AD770999ull);
}

TEST(Hash, StreamingEqualsOneShotForEverySplit) {
  std::vector<uint8_t> v(300);
  for (size_t i = 0; i < v.size(); i++) v[i] = (uint8_t)(i * 131 + 7);
  for (size_t n : {0, 1, 7, 31, 32, 33, 63, 64, 65, 299, 300})
    for (size_t split : {1, 3, 8, 17, 32, 100}) {
      Hasher h;
      for (size_t o = 0; o < n; o += split) h.update(v.data() + o, std::min(split, n - o));
      EXPECT_EQ(h.digest(), hash64(v.data(), n)) << "n=" << n << " split=" << split;
    }
  // any single flipped bit changes the digest
  uint64_t h0 = hash64(v.data(), v.size());
  for (size_t i = 0; i < v.size(); i += 37) {
    v[i] ^= 0x10;
    EXPECT_NE(hash64(v.data(), v.size()), h0);
    v[i] ^= 0x10;
  }
  EXPECT_EQ(hash_from_hex(hash_hex(h0)), h0);
  EXPECT_EQ(hash_hex(1).size(), 16u);
  EXPECT_TRUE(contains(error_of([] { hash_from_hex("xyz"); }), "bad hash"));
}

// A small GGUF exercising every value type, nested arrays and a non-default alignment.
static gguf::Writer sample_writer(uint32_t version = 3) {
  using gguf::Value;
  using gguf::VType;
  gguf::Writer w;
  w.version = version;
  w.alignment = 64;
  auto scalar = [](VType t, int64_t i, double f) {
    Value v;
    v.type = t;
    v.i = i;
    v.u = (uint64_t)i;
    v.f = f;
    v.b = i != 0;
    return v;
  };
  w.set("general.alignment", Value::make_u32(64));
  w.set("t.u8", scalar(VType::U8, 200, 0));
  w.set("t.i8", scalar(VType::I8, -100, 0));
  w.set("t.u16", scalar(VType::U16, 60000, 0));
  w.set("t.i16", scalar(VType::I16, -30000, 0));
  w.set("t.u32", scalar(VType::U32, 4000000000ll, 0));
  w.set("t.i32", scalar(VType::I32, -2000000000ll, 0));
  w.set("t.u64", Value::make_u64(0xFFFFFFFFFFull));
  w.set("t.i64", scalar(VType::I64, -(1ll << 50), 0));
  w.set("t.f32", Value::make_f32(1.5f));
  w.set("t.f64", scalar(VType::F64, 0, 3.25e-300));
  w.set("t.bool", Value::make_bool(true));
  w.set("t.str", Value::make_str("h\xC3\xA9llo"));
  w.set("t.arr", Value::make_arr(VType::I32, {Value::make_i32(1), Value::make_i32(-2)}));
  w.set("t.nested", Value::make_arr(VType::ARRAY, {Value::make_arr(VType::STRING, {Value::make_str("a"), Value::make_str("")}),
                                                   Value::make_arr(VType::F32, {})}));
  w.add_tensor("a.weight", (uint32_t)DType::F32, {8, 2});
  w.add_tensor("b.weight", (uint32_t)DType::Q8_0, {64, 3});
  w.add_tensor("c.weight", (uint32_t)DType::Q4_K, {256, 1});
  return w;
}

static std::vector<uint8_t> sample_bytes(uint32_t version = 3) {
  gguf::Writer w = sample_writer(version);
  std::vector<std::vector<uint8_t>> data;
  std::vector<const void*> ptrs;
  for (auto& t : w.tensors()) data.emplace_back(t.size, (uint8_t)(t.size & 0x7F));
  for (auto& d : data) ptrs.push_back(d.data());
  return w.to_bytes(ptrs);
}

TEST(Gguf, RoundTripsEveryValueTypeV2AndV3) {
  for (uint32_t ver : {2u, 3u}) {
    auto b = sample_bytes(ver);
    gguf::File f = gguf::parse(b.data(), b.size(), b.size(), "sample");
    EXPECT_EQ(f.version, ver);
    EXPECT_EQ(f.alignment, 64u);
    EXPECT_EQ(f.data_offset % 64, 0u);
    EXPECT_EQ(f.find("t.u8")->i, 200);
    EXPECT_EQ(f.find("t.i8")->i, -100);
    EXPECT_EQ(f.find("t.u16")->i, 60000);
    EXPECT_EQ(f.find("t.i16")->i, -30000);
    EXPECT_EQ(f.find("t.u32")->u, 4000000000ull);
    EXPECT_EQ(f.find("t.i32")->i, -2000000000ll);
    EXPECT_EQ(f.find("t.u64")->u, 0xFFFFFFFFFFull);
    EXPECT_EQ(f.find("t.i64")->i, -(1ll << 50));
    EXPECT_EQ(f.find("t.f32")->f, 1.5);
    EXPECT_EQ(f.find("t.f64")->f, 3.25e-300);
    EXPECT_TRUE(f.find("t.bool")->b);
    EXPECT_EQ(f.find("t.str")->s, "h\xC3\xA9llo");
    ASSERT_EQ(f.find("t.arr")->size(), 2u);
    EXPECT_EQ(f.find("t.arr")->ints[1], -2);
    EXPECT_EQ(f.find("t.arr")->at(1).i, -2);
    const gguf::Value* n = f.find("t.nested");
    ASSERT_EQ(n->arr.size(), 2u);
    EXPECT_EQ(n->arr[0].elem, gguf::VType::STRING);
    EXPECT_EQ(n->arr[0].strs[0], "a");
    EXPECT_EQ(n->arr[0].strs[1], "");
    EXPECT_EQ(n->arr[1].elem, gguf::VType::F32);
    EXPECT_EQ(n->arr[1].size(), 0u);
    ASSERT_EQ(f.tensors.size(), 3u);
    EXPECT_EQ(f.tensors[1].type, DType::Q8_0);
    EXPECT_EQ(f.tensors[1].size, 3u * 2 * 34);
    EXPECT_EQ(f.tensors[2].size, 144u);
    for (auto& t : f.tensors) {
      EXPECT_EQ(t.offset % 64, 0u);
      EXPECT_EQ(b[f.data_offset + t.offset], (uint8_t)(t.size & 0x7F)) << t.name;
    }
    EXPECT_THROW(f.find("t.str")->as_int("t.str"), Error);
  }
}

TEST(Gguf, TruncatedAtEveryByteIsAClearError) {
  auto b = sample_bytes();
  gguf::File full = gguf::parse(b.data(), b.size(), b.size(), "x");
  uint64_t end = 0;  // bytes after the last tensor's data are padding, not content
  for (auto& t : full.tensors) end = std::max(end, full.data_offset + t.offset + t.size);
  for (size_t n = 0; n < end; n++) {
    std::string e = error_of([&] { gguf::parse(b.data(), n, n, "cut.gguf"); });
    ASSERT_FALSE(e.empty()) << "prefix " << n << " parsed";
    EXPECT_TRUE(contains(e, "cut.gguf")) << e;
    if (n >= 4 && n < full.data_offset - 64) {  // inside the header: names the section and offset
      EXPECT_TRUE(contains(e, "truncated") && contains(e, "offset")) << e;
    }
  }
  // the boundaries between sections name the section
  EXPECT_TRUE(contains(error_of([&] { gguf::parse(b.data(), 20, 20, "x"); }), "header")) << error_of([&] { gguf::parse(b.data(), 20, 20, "x"); });
  EXPECT_TRUE(contains(error_of([&] { gguf::parse(b.data(), 30, 30, "x"); }), "metadata"));
  EXPECT_TRUE(contains(error_of([&] { gguf::parse(b.data(), full.data_offset - 70, full.data_offset - 70, "x"); }), "tensor info"));
  EXPECT_TRUE(contains(error_of([&] { gguf::parse(b.data(), end - 1, end - 1, "x"); }), "runs past the end"));
}

TEST(Gguf, ShortSpanOfALongerFileAsksForMore) {
  auto b = sample_bytes();
  try {
    gguf::parse(b.data(), 40, b.size(), "x");
    FAIL() << "no throw";
  } catch (const gguf::Truncated& t) {
    EXPECT_GT(t.need, 40u);
    EXPECT_LE(t.need, b.size());
  }
  std::string p = ctest::tmp_path("sample.gguf");
  ctest::write_all(p, b);
  EXPECT_EQ(gguf::parse_file(p).tensors.size(), 3u);
}

TEST(Gguf, BadMagicAndVersions) {
  auto b = sample_bytes();
  auto m = b;
  m[0] = 'X';
  EXPECT_TRUE(contains(error_of([&] { gguf::parse(m.data(), m.size(), m.size(), "x"); }), "bad magic"));
  for (uint32_t v : {0u, 1u, 4u, 99u}) {
    auto c = b;
    std::memcpy(c.data() + 4, &v, 4);
    std::string e = error_of([&] { gguf::parse(c.data(), c.size(), c.size(), "x"); });
    EXPECT_TRUE(contains(e, "version " + std::to_string(v))) << e;
  }
}

TEST(Gguf, UnknownTensorTypeIsRefused) {
  gguf::Writer w;
  w.add_tensor("weird.weight", 99, {32, 2}, 64);
  std::vector<uint8_t> d(64);
  auto b = w.to_bytes({d.data()});
  std::string e = error_of([&] { gguf::parse(b.data(), b.size(), b.size(), "x"); });
  EXPECT_TRUE(contains(e, "unknown tensor type id 99") && contains(e, "weird.weight")) << e;
  // a real ggml type we do not implement is named
  gguf::Writer w3;
  w3.add_tensor("blk.0.ffn_up.weight", 6 /* Q5_0 */, {32, 2}, 44);
  std::vector<uint8_t> d3(44);
  auto b3 = w3.to_bytes({d3.data()});
  e = error_of([&] { gguf::parse(b3.data(), b3.size(), b3.size(), "x"); });
  EXPECT_TRUE(contains(e, "Q5_0") && contains(e, "does not support") && contains(e, "blk.0.ffn_up.weight")) << e;
  // Q8_K is an activation format, not a storage type
  gguf::Writer w2;
  w2.add_tensor("act", (uint32_t)DType::Q8_K, {256}, 292);
  std::vector<uint8_t> d2(292);
  auto b2 = w2.to_bytes({d2.data()});
  EXPECT_TRUE(contains(error_of([&] { gguf::parse(b2.data(), b2.size(), b2.size(), "x"); }), "Q8_K"));
}

// Patches tensor #k's data offset in a writer-built file.
static void set_offset(std::vector<uint8_t>& b, const gguf::File& f, size_t k, uint64_t off) {
  // the tensor info ends with the u64 offset; find it by searching the name
  const std::string& name = f.tensors[k].name;
  auto it = std::search(b.begin(), b.end(), name.begin(), name.end());
  size_t p = (size_t)(it - b.begin()) + name.size();
  uint32_t nd;
  std::memcpy(&nd, b.data() + p, 4);
  p += 4 + 8 * nd + 4;
  std::memcpy(b.data() + p, &off, 8);
}

TEST(Gguf, OutOfRangeOverlappingAndMisalignedTensors) {
  auto b = sample_bytes();
  gguf::File f = gguf::parse(b.data(), b.size(), b.size(), "x");
  auto c = b;
  set_offset(c, f, 2, 1ull << 40);
  std::string e = error_of([&] { gguf::parse(c.data(), c.size(), c.size(), "x"); });
  EXPECT_TRUE(contains(e, "c.weight") && contains(e, "past the end")) << e;
  c = b;
  set_offset(c, f, 1, f.tensors[0].offset);  // b over a
  e = error_of([&] { gguf::parse(c.data(), c.size(), c.size(), "x"); });
  EXPECT_TRUE(contains(e, "overlap") && contains(e, "a.weight") && contains(e, "b.weight")) << e;
  c = b;
  set_offset(c, f, 1, f.tensors[1].offset + 2);
  e = error_of([&] { gguf::parse(c.data(), c.size(), c.size(), "x"); });
  EXPECT_TRUE(contains(e, "alignment")) << e;
}

TEST(Gguf, MisalignedRowLengthNamesTensor) {
  gguf::Writer w;
  w.add_tensor("blk.0.ffn_down.weight", (uint32_t)DType::Q4_K, {100, 4}, 576);
  std::vector<uint8_t> d(576);
  auto b = w.to_bytes({d.data()});
  std::string e = error_of([&] { gguf::parse(b.data(), b.size(), b.size(), "x"); });
  EXPECT_TRUE(contains(e, "blk.0.ffn_down.weight") && contains(e, "100")) << e;
  // one plain "file: tensor name: what" message, no nested quoting
  EXPECT_EQ(e, "x: tensor blk.0.ffn_down.weight: row length 100 is not a multiple of the Q4_K block size 256");
}

TEST(Gguf, HugeCountsAndStringsDoNotAllocate) {
  auto b = sample_bytes();
  auto c = b;
  uint64_t huge = 1ull << 60;
  std::memcpy(c.data() + 16, &huge, 8);  // n_kv
  EXPECT_TRUE(contains(error_of([&] { gguf::parse(c.data(), c.size(), c.size(), "x"); }), "metadata keys"));
  c = b;
  std::memcpy(c.data() + 24, &huge, 8);  // first key's length
  EXPECT_TRUE(contains(error_of([&] { gguf::parse(c.data(), c.size(), c.size(), "x"); }), "string length"));
}

TEST(Gguf, ConfigAndTokenizerRoundTripThroughWriter) {
  ModelConfig c = synth_config([] {
    SynthOptions o;
    o.arch = "qwen2", o.hidden = 64, o.layers = 3, o.heads = 4, o.kv_heads = 2, o.ffn = 96, o.vocab = 300;
    return o;
  }());
  TokenizerData t = synth_tokenizer(300);
  t.chat_template = "{{ messages }}";
  t.merges = {"a b", "\xE2\x96\x81 t"};
  gguf::Writer w;
  config_to_gguf(c, w);
  tokenizer_to_gguf(t, w);
  w.add_tensor("token_embd.weight", (uint32_t)DType::F32, {64, 300});
  std::vector<uint8_t> d(64 * 300 * 4);
  auto b = w.to_bytes({d.data()});
  gguf::File f = gguf::parse(b.data(), b.size(), b.size(), "x");
  ModelConfig c2 = config_from_gguf(f, "x");
  EXPECT_EQ(c2.arch, "qwen2");
  EXPECT_EQ(c2.rope_style, RopeStyle::Neox);
  EXPECT_EQ(c2.n_embd, 64);
  EXPECT_EQ(c2.n_layer, 3);
  EXPECT_EQ(c2.n_head_kv, 2);
  EXPECT_EQ(c2.n_ff, 96);
  EXPECT_EQ(c2.n_vocab, 300);
  EXPECT_TRUE(c2.tied_embeddings);  // no output.weight
  EXPECT_EQ(c2.rope_theta, c.rope_theta);
  EXPECT_EQ(c2.rms_eps, c.rms_eps);
  TokenizerData t2 = tokenizer_from_gguf(f, "x");
  EXPECT_EQ(t2.tokens, t.tokens);
  EXPECT_EQ(t2.scores, t.scores);
  EXPECT_EQ(t2.token_types, t.token_types);
  EXPECT_EQ(t2.merges, t.merges);
  EXPECT_EQ(t2.chat_template, t.chat_template);
  EXPECT_EQ(t2.bos_id, 1);
  EXPECT_EQ(t2.eos_id, 2);

  // a missing required key is named
  gguf::Writer w2;
  tokenizer_to_gguf(t, w2);
  w2.set("general.architecture", gguf::Value::make_str("llama"));
  w2.add_tensor("token_embd.weight", (uint32_t)DType::F32, {64, 300});
  auto b2 = w2.to_bytes({d.data()});
  gguf::File f2 = gguf::parse(b2.data(), b2.size(), b2.size(), "nokeys.gguf");
  std::string e = error_of([&] { config_from_gguf(f2, "nokeys.gguf"); });
  EXPECT_TRUE(contains(e, "llama.embedding_length") && contains(e, "nokeys.gguf")) << e;
}

TEST(Gguf, TokenizerJsonKeepsNonUtf8Bytes) {
  TokenizerData t = synth_tokenizer(270);
  t.tokens[260] = std::string("\xFF\xFE", 2);
  t.tokens[261] = std::string("a\0b", 3);
  t.chat_template = std::string("{{ \xC0 }}");
  t.merges = {"a b", std::string("\xFF c")};
  t.eot_id = 5;
  t.add_bos = false;
  TokenizerData t2 = tokenizer_from_json(tokenizer_to_json(t), "x");
  EXPECT_EQ(t2.tokens, t.tokens);
  EXPECT_EQ(t2.merges, t.merges);
  EXPECT_EQ(t2.scores, t.scores);
  EXPECT_EQ(t2.token_types, t.token_types);
  EXPECT_EQ(t2.chat_template, t.chat_template);
  EXPECT_EQ(t2.eot_id, 5);
  EXPECT_FALSE(t2.add_bos);
}

TEST(Gguf, BadTokenizerBlobsAreErrors) {
  for (const char* bad : {"", "{", "[]", "{\"model\":\"llama\"}", "{\"model\":\"llama\",\"tokens\":[1]}",
                          "{\"model\":\"llama\",\"tokens\":[{\"hex\":\"zz\"}]}",
                          "{\"model\":\"llama\",\"tokens\":[\"a\"],\"scores\":[1,2]}",
                          "{\"model\":\"llama\",\"tokens\":[\"a\"],\"bos_id\":7}",
                          "{\"model\":\"llama\",\"tokens\":[[\"a\"]]}"}) {
    std::string e = error_of([&] { tokenizer_from_json(bad, "blob.knot"); });
    EXPECT_TRUE(contains(e, "blob.knot") && contains(e, "tokenizer")) << bad << " -> " << e;
  }
  // mutated blobs: parse or knot::Error, nothing else
  TokenizerData t = synth_tokenizer(300);
  t.tokens[270] = "\xFF";
  const std::string good = tokenizer_to_json(t);
  uint64_t st = 99;
  for (int it = 0; it < 2000; it++) {
    std::string b = good;
    st = st * 6364136223846793005ull + 1442695040888963407ull;
    size_t pos = (st >> 33) % b.size();
    b[pos] = "0[]{}\":,-e\\x"[(st >> 20) % 12];
    error_of([&] { tokenizer_from_json(b, "m"); });
  }
}

// Random byte corruption: every outcome is a parse or a knot::Error, never a crash or a
// foreign exception (run under ASan/UBSan to make "never a crash" meaningful).
TEST(Gguf, RandomCorruptionNeverCrashes) {
  auto b = sample_bytes();
  uint64_t st = 12345;
  auto rnd = [&] {
    st = st * 6364136223846793005ull + 1442695040888963407ull;
    return st >> 33;
  };
  int errors = 0;
  for (int it = 0; it < 3000; it++) {
    auto c = b;
    int flips = 1 + (int)(rnd() % 4);
    for (int k = 0; k < flips; k++) {
      size_t pos = rnd() % c.size();
      c[pos] = (it % 3 == 0) ? (uint8_t)rnd() : (uint8_t)(c[pos] ^ (1u << (rnd() % 8)));
    }
    size_t len = it % 5 == 0 ? rnd() % c.size() : c.size();
    if (!error_of([&] { gguf::parse(c.data(), len, len, "fuzz"); }).empty()) errors++;
  }
  EXPECT_GT(errors, 100);
}
