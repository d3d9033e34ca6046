// infer_kv_snapshot.cpp — KV snapshots (KvCache::export_rows / import_rows, Station::export_kv
// / import_kv): a station rebuilt from its exported rows — in pieces, as a station persists
// them per chunk — computes bit-identical attention to the original at the next positions;
// the layout is position-major (a prefix of positions is a prefix of bytes); misuse is
// refused naming positions and bytes.
#include <cmath>
#include <cstring>
#include <random>

#include "infer/generate.h"
#include "infer/station.h"
#include "infer_util.h"

using namespace infer_test;
using namespace knot;

namespace {

std::vector<float> noise(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(KvSnapshot, ARestoredStationComputesTheSameAttention) {
  for (Mode mode : {Mode::Fast, Mode::Reference}) {
    const Model& m = synth(llama_gqa(mode == Mode::Fast ? "Q8_0" : "F32", 2));
    const int E = m.config.n_embd;
    StationSpec sp;
    sp.l0 = 0, sp.l1 = 2, sp.n_ctx = 40, sp.fo = forward_options_for(mode);
    sp.h0 = 4, sp.h1 = 8;  // a head slice: KV heads [1, 2)
    Station a(m.config, sp), b(m.config, sp);
    const size_t per = a.kv().bytes_per_token();
    EXPECT_EQ(per, 2u * 2 * 1 * (size_t)m.config.head_dim * kv_elem_bytes(sp.fo.kv_type));
    // a prefill of 11 positions in chunks of 7 + 4, both layers
    std::vector<float> out((size_t)11 * E);
    const std::vector<float> x = noise((size_t)11 * E, 3);
    for (int l = 0; l < 2; l++) {
      a.attn(m, l, 0, x.data(), 7, out.data());
      a.attn(m, l, 7, x.data() + (size_t)7 * E, 4, out.data());
    }
    ASSERT_EQ(a.n_pos(), 11);
    // exported in the same pieces, imported in order
    std::vector<uint8_t> p0(7 * per), p1(4 * per), all(11 * per);
    a.export_kv(0, 7, p0.data());
    a.export_kv(7, 4, p1.data());
    a.export_kv(0, 11, all.data());
    EXPECT_TRUE(std::equal(p0.begin(), p0.end(), all.begin())) << "position-major: a prefix of positions is a prefix of bytes";
    EXPECT_TRUE(std::equal(p1.begin(), p1.end(), all.begin() + 7 * per));
    b.import_kv(0, 7, p0.data());
    b.import_kv(7, 4, p1.data());
    EXPECT_EQ(b.n_pos(), 11);
    // three decode positions on both: bit-identical partial residuals
    for (int t = 0; t < 3; t++) {
      const std::vector<float> xt = noise(E, 100 + t);
      std::vector<float> oa(E), ob(E);
      for (int l = 0; l < 2; l++) {
        a.attn(m, l, 11 + t, xt.data(), 1, oa.data());
        b.attn(m, l, 11 + t, xt.data(), 1, ob.data());
        ASSERT_EQ(oa, ob) << mode_name(mode) << " layer " << l << " position " << 11 + t;
      }
    }
    // and a station restored from a different prefix computes something else
    Station c(m.config, sp);
    std::vector<uint8_t> other = all;
    other[per * 3 + 5] ^= 0x40;
    c.import_kv(0, 11, other.data());
    const std::vector<float> xt = noise(E, 100);
    std::vector<float> oa(E), oc(E);
    Station a2(m.config, sp);
    a2.import_kv(0, 11, all.data());
    a2.attn(m, 0, 11, xt.data(), 1, oa.data());
    c.attn(m, 0, 11, xt.data(), 1, oc.data());
    EXPECT_NE(oa, oc);
  }
}

TEST(KvSnapshot, MisuseIsRefusedNamingPositions) {
  const Model& m = synth(llama_gqa("Q8_0", 2));
  StationSpec sp;
  sp.l0 = 0, sp.l1 = 2, sp.n_ctx = 8, sp.fo = forward_options_for(Mode::Fast);
  Station a(m.config, sp);
  const size_t per = a.kv().bytes_per_token();
  std::vector<uint8_t> buf(16 * per);
  EXPECT_NE(error_of([&] { a.export_kv(0, 1, buf.data()); }).find("export of positions [0,1) but the cache holds 0"),
            std::string::npos);
  a.import_kv(0, 3, buf.data());
  EXPECT_NE(error_of([&] { a.import_kv(5, 1, buf.data()); }).find("import at position 5 but layer 0 holds 3 positions"),
            std::string::npos);
  EXPECT_NE(error_of([&] { a.import_kv(3, 6, buf.data()); }).find("exceeds the context of 8"), std::string::npos);
  a.truncate(1);
  EXPECT_NO_THROW(a.import_kv(1, 2, buf.data()));
  EXPECT_EQ(a.n_pos(), 3);
}

// KvCache::k_rows_f32 / v_rows_f32: an F32 cache's rows in place are what read_k / read_v
// copy (attention reads f32 rows this way); an F16 cache refuses.
TEST(KvRows, F32RowsInPlaceAreWhatReadCopies) {
  const Model& m = synth(llama_gqa("Q8_0", 2));
  const ModelConfig& c = m.config;
  const int hd = c.head_dim, nkv = c.n_head_kv;
  ASSERT_GE(nkv, 2);
  KvCache kv(c, 0, 2, 16, KvType::F32, SIZE_MAX, 1, nkv);  // a head slice: heads [1, nkv)
  const int nh = nkv - 1;
  const std::vector<float> k = noise((size_t)5 * nh * hd, 7), v = noise((size_t)5 * nh * hd, 8);
  kv.append(1, 0, 3, k.data(), v.data());
  const float* kr = kv.k_rows_f32(1, nkv - 1);
  kv.append(1, 3, 2, k.data() + (size_t)3 * nh * hd, v.data() + (size_t)3 * nh * hd);  // later rows appear in place
  for (int h = 1; h < nkv; h++) {
    std::vector<float> kc((size_t)5 * hd), vc((size_t)5 * hd);
    kv.read_k(1, h, 5, kc.data());
    kv.read_v(1, h, 5, vc.data());
    EXPECT_EQ(std::memcmp(kv.k_rows_f32(1, h), kc.data(), kc.size() * 4), 0) << "K head " << h;
    EXPECT_EQ(std::memcmp(kv.v_rows_f32(1, h), vc.data(), vc.size() * 4), 0) << "V head " << h;
    for (int t = 0; t < 5; t++)  // the appended rows themselves: [t][head h][hd]
      EXPECT_EQ(std::memcmp(kc.data() + (size_t)t * hd, k.data() + ((size_t)t * nh + (h - 1)) * hd, hd * 4), 0);
  }
  EXPECT_EQ(kr, kv.k_rows_f32(1, nkv - 1));
  EXPECT_NE(error_of([&] { kv.k_rows_f32(1, 0); }).find("KV head 0 outside this cache's range [1,"), std::string::npos);
  EXPECT_NE(error_of([&] { kv.v_rows_f32(2, 1); }).find("layer 2"), std::string::npos);
  KvCache h16(c, 0, 2, 16, KvType::F16);
  EXPECT_NE(error_of([&] { h16.k_rows_f32(0, 0); }).find("in-place f32 rows need an F32 or F16InF32 cache, this one holds F16"),
            std::string::npos);
}

// F16InF32 holds what an F16 cache reads back (each element rounded to f16), bit for bit, in
// place; so attention over it is attention over F16 (a draft model's drafts do not change).
TEST(KvRows, F16InF32RowsAreWhatAnF16CacheReads) {
  const Model& m = synth(llama_gqa("Q8_0", 2));
  const ModelConfig& c = m.config;
  const int hd = c.head_dim, nkv = c.n_head_kv;
  KvCache h16(c, 0, 2, 16, KvType::F16), w(c, 0, 2, 16, KvType::F16InF32);
  EXPECT_EQ(w.bytes(), 2 * h16.bytes());
  std::vector<float> k = noise((size_t)7 * nkv * hd, 11), v = noise((size_t)7 * nkv * hd, 12);
  k[0] = 1e-6f, k[1] = 70000.f, k[2] = -0.f, v[0] = 3.0e-5f;  // f16 subnormal, overflow to inf, -0
  h16.append(0, 0, 7, k.data(), v.data());
  w.append(0, 0, 7, k.data(), v.data());
  for (int h = 0; h < nkv; h++) {
    std::vector<float> kc((size_t)7 * hd), vc((size_t)7 * hd), kw((size_t)7 * hd);
    h16.read_k(0, h, 7, kc.data());
    h16.read_v(0, h, 7, vc.data());
    w.read_k(0, h, 7, kw.data());
    EXPECT_EQ(std::memcmp(w.k_rows_f32(0, h), kc.data(), kc.size() * 4), 0) << "K head " << h;
    EXPECT_EQ(std::memcmp(w.v_rows_f32(0, h), vc.data(), vc.size() * 4), 0) << "V head " << h;
    EXPECT_EQ(std::memcmp(kw.data(), kc.data(), kc.size() * 4), 0) << "read_k of head " << h;
  }
  EXPECT_TRUE(std::isinf(w.k_rows_f32(0, 0)[1]));
  EXPECT_STREQ(kv_type_name(KvType::F16InF32), "F16InF32");
}

// The forward pass over an F16InF32 cache gives the logits it gives over F16, bit for bit.
TEST(KvRows, AttentionOverF16InF32IsAttentionOverF16) {
  const Model& m = synth(llama_gqa("Q8_0", 2));
  std::vector<int32_t> ids = {1, 5, 9, 2, 7, 3, 11, 4, 6};
  std::vector<std::vector<float>> logits;
  for (KvType t : {KvType::F16, KvType::F16InF32}) {
    EngineOptions eo;
    eo.n_ctx = 32;
    eo.chunk = 4;
    eo.forward = ForwardOptions{Kernel::Simd, t};
    Engine e(m, eo);
    EXPECT_EQ(e.kv().type(), t);
    std::vector<float> all;
    const float* lg = e.eval(ids.data(), 6);  // a chunked prefill
    all.insert(all.end(), lg, lg + e.n_logits());
    for (size_t i = 6; i < ids.size(); i++) {  // decode steps
      lg = e.eval(&ids[i], 1);
      all.insert(all.end(), lg, lg + e.n_logits());
    }
    lg = e.eval_rows(ids.data(), 3);  // a 3-row verify pass (rows paired, one alone)
    all.insert(all.end(), lg, lg + 3 * e.n_logits());
    logits.push_back(all);
  }
  ASSERT_EQ(logits[0].size(), logits[1].size());
  EXPECT_EQ(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * 4), 0);
}
