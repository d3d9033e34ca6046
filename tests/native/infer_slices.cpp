// Mesh slices: the sum of the partials of head slices, FFN column slices and vocab
// slices equals the unsliced result (Frobenius merge), for aligned (quantized gather) and
// unaligned (dequantized gather) column boundaries.
#include <cmath>
#include <cstring>

#include "infer_util.h"

using namespace infer_test;
using namespace knot;

namespace {

const char* kQ8 = "stories260K-pad256-llama-q8_0.gguf";   // 32 heads / 16 KV, ffn 256, Q8_0
const char* kQ4 = "stories260K-pad256-qwen2-q4_k_m.gguf"; // Q4_K/Q6_K, biases, Neox

// x: a realistic residual stream: the embeddings of the prompt plus a continuation.
std::vector<float> input_rows(const Model& m, std::vector<int32_t> ids) {
  std::vector<float> x(ids.size() * m.config.n_embd);
  embed_rows(m.get("token_embd_weight"), ids.data(), (int)ids.size(), 0, m.config.n_vocab,
             m.config.n_vocab, x.data());
  return x;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float f : v) m = std::max(m, (double)std::fabs(f));
  return m;
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b, double tol,
                  const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < a.size(); i++) {
    ASSERT_TRUE(std::isfinite(a[i]) && std::isfinite(b[i])) << what << " element " << i;
    double d = std::fabs((double)a[i] - b[i]);
    if (d > worst) worst = d, at = i;
  }
  EXPECT_LE(worst, tol) << what << ": worst difference at element " << at << " (" << a[at]
                        << " vs " << b[at] << ")";
}

// Full attention of `layer` over a 5-token prefill then one decode step, vs the sum of
// the head slices' partials (each slice with its own KV cache of its KV heads).
void check_head_slices(const char* file, Kernel kernel, const std::vector<int>& bounds,
                       double rel_tol) {
  const std::string path = model_path(file);
  REQUIRE_SHARED_MODEL(path);
  Model m = load_model_file(path);
  const ModelConfig& c = m.config;
  const int layer = 1, E = c.n_embd;
  ForwardOptions fo{kernel, KvType::F32};
  LayerWeights w = layer_weights(m, layer);
  auto x = input_rows(m, {1, 403, 407, 261, 378, 432});

  auto run = [&](int h0, int h1) {
    const int g = c.n_head / c.n_head_kv;
    KvCache kv(c, layer, layer + 1, 16, KvType::F32, SIZE_MAX, h0 / g, h1 / g);
    Workspace ws;
    std::vector<float> out(6 * E);
    attn(c, w, kv, 0, x.data(), 5, out.data(), fo, ws, h0, h1);                      // prefill
    attn(c, w, kv, 5, x.data() + 5 * E, 1, out.data() + 5 * E, fo, ws, h0, h1);    // decode
    return out;
  };
  auto full = run(0, c.n_head);
  std::vector<float> sum(full.size(), 0.f);
  for (size_t i = 0; i + 1 < bounds.size(); i++) {
    auto part = run(bounds[i], bounds[i + 1]);
    for (size_t j = 0; j < sum.size(); j++) sum[j] += part[j];
  }
  ASSERT_GT(max_abs(full), 0.0);
  expect_close(sum, full, rel_tol * max_abs(full), std::string(file) + " head slices");
}

TEST(HeadSlices, AlignedQ8Exact) {
  // head_dim 8: boundaries at multiples of 4 heads are multiples of the 32-element block
  check_head_slices(kQ8, Kernel::Simd, {0, 8, 20, 32}, 1e-5);
  check_head_slices(kQ8, Kernel::Reference, {0, 8, 20, 32}, 1e-5);
}

TEST(HeadSlices, UnalignedDequantizedGather) {
  // 2 heads = 16 columns: not a Q8_0 block boundary -> f32 gather path
  check_head_slices(kQ8, Kernel::Reference, {0, 2, 18, 32}, 1e-5);
  check_head_slices(kQ8, Kernel::Simd, {0, 2, 18, 32}, 2e-2);  // f32 vs Q8_0 activations
  check_head_slices(kQ4, Kernel::Reference, {0, 16, 32}, 1e-5);  // 128 cols inside a Q4_K block
}

TEST(HeadSlices, RejectsSliceAcrossKvGroup) {
  const std::string path = model_path(kQ8);
  REQUIRE_SHARED_MODEL(path);
  Model m = load_model_file(path);
  KvCache kv(m.config, 0, 1, 8, KvType::F32, SIZE_MAX, 0, 2);
  Workspace ws;
  auto x = input_rows(m, {1});
  std::vector<float> out(m.config.n_embd);
  try {
    attn(m.config, layer_weights(m, 0), kv, 0, x.data(), 1, out.data(), ForwardOptions{}, ws, 0, 3);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("GQA group size 2"), std::string::npos) << e.what();
  }
}

// FFN over column slices: gate/up rows and down columns [c0,c1); partials sum to the full.
void check_ffn_slices(const char* file, Kernel kernel, const std::vector<int>& bounds,
                      double rel_tol, bool separate_phases) {
  const std::string path = model_path(file);
  REQUIRE_SHARED_MODEL(path);
  Model m = load_model_file(path);
  const ModelConfig& c = m.config;
  const int E = c.n_embd, T = 4;
  ForwardOptions fo{kernel, KvType::F32};
  LayerWeights w = layer_weights(m, 3);
  auto x = input_rows(m, {1, 403, 407, 261});
  auto run = [&](int c0, int c1) {
    Workspace ws;
    std::vector<float> h(T * (c1 - c0)), out(T * E);
    if (separate_phases) {
      ffn_gate(c, w, x.data(), T, h.data(), fo, ws, c0, c1);
      ffn_up(c, w, x.data(), T, h.data(), fo, ws, c0, c1);
    } else {
      ffn_gate_up(c, w, x.data(), T, h.data(), fo, ws, c0, c1);
    }
    ffn_down(c, w, h.data(), T, out.data(), fo, ws, c0, c1);
    return out;
  };
  auto full = run(0, c.n_ff);
  std::vector<float> sum(full.size(), 0.f);
  for (size_t i = 0; i + 1 < bounds.size(); i++) {
    auto part = run(bounds[i], bounds[i + 1]);
    for (size_t j = 0; j < sum.size(); j++) sum[j] += part[j];
  }
  ASSERT_GT(max_abs(full), 0.0);
  expect_close(sum, full, rel_tol * max_abs(full), std::string(file) + " FFN slices");
}

TEST(FfnSlices, AlignedQ8) {
  check_ffn_slices(kQ8, Kernel::Simd, {0, 64, 96, 256}, 1e-5, true);
  check_ffn_slices(kQ8, Kernel::Reference, {0, 64, 96, 256}, 1e-5, false);
}

TEST(FfnSlices, UnalignedKQuant) {
  // Q4_K/Q6_K blocks are 256 wide = the whole row: any slice is unaligned
  check_ffn_slices(kQ4, Kernel::Reference, {0, 100, 256}, 1e-5, true);
  check_ffn_slices(kQ4, Kernel::Simd, {0, 100, 256}, 3e-2, false);
}

TEST(FfnSlices, PhasesEqualCombined) {
  check_ffn_slices(kQ8, Kernel::Simd, {0, 256}, 0, true);  // trivially one slice, but
  check_ffn_slices(kQ8, Kernel::Simd, {0, 256}, 0, false); // both paths must agree exactly
}

// A shard that stores only its slice: tensors cut to rows [r0,r1) (q/k/v/bias, gate/up)
// or to columns [c0,c1) (attn_output, ffn_down) give the same partial as the full tensors.
// (cut_rows is for 2-D weights; the test model has no biases)
Tensor cut_rows(const Tensor& t, int64_t r0, int64_t r1) {
  Tensor c = t;
  const size_t rb = row_bytes(t.type, t.ne0());
  c.shape = {t.ne0(), r1 - r0};
  c.size = (size_t)(r1 - r0) * rb;
  c.bytes = alloc_aligned(c.size);
  std::memcpy(c.bytes.get(), t.data() + r0 * rb, c.size);
  return c;
}
Tensor cut_cols(const Tensor& t, int64_t c0, int64_t c1) {
  Tensor c = t;
  const size_t rb = row_bytes(t.type, t.ne0()), rbc = row_bytes(t.type, c1 - c0),
               off = row_bytes(t.type, c0);
  c.shape = {c1 - c0, t.nrows()};
  c.size = (size_t)t.nrows() * rbc;
  c.bytes = alloc_aligned(c.size);
  for (int64_t r = 0; r < t.nrows(); r++)
    std::memcpy(c.bytes.get() + r * rbc, t.data() + r * rb + off, rbc);
  return c;
}

TEST(PreCutTensors, HeadAndFfnSlices) {
  const std::string path = model_path(kQ8);
  REQUIRE_SHARED_MODEL(path);
  Model m = load_model_file(path);
  const ModelConfig& c = m.config;
  const int E = c.n_embd, hd = c.head_dim, g = c.n_head / c.n_head_kv, T = 3;
  const int h0 = 4, h1 = 12, c0 = 32, c1 = 128;  // 32..96 and 32..128 columns: Q8_0 aligned
  ForwardOptions fo{Kernel::Simd, KvType::F16};
  auto x = input_rows(m, {1, 403, 407});
  const LayerWeights full = layer_weights(m, 2);

  std::vector<Tensor> keep;  // owns the cut tensors
  keep.reserve(8);
  LayerWeights cut = full;
  cut.attn_q = &keep.emplace_back(cut_rows(*full.attn_q, h0 * hd, h1 * hd));
  cut.attn_k = &keep.emplace_back(cut_rows(*full.attn_k, h0 / g * hd, h1 / g * hd));
  cut.attn_v = &keep.emplace_back(cut_rows(*full.attn_v, h0 / g * hd, h1 / g * hd));
  cut.attn_output = &keep.emplace_back(cut_cols(*full.attn_output, h0 * hd, h1 * hd));
  cut.ffn_gate = &keep.emplace_back(cut_rows(*full.ffn_gate, c0, c1));
  cut.ffn_up = &keep.emplace_back(cut_rows(*full.ffn_up, c0, c1));
  cut.ffn_down = &keep.emplace_back(cut_cols(*full.ffn_down, c0, c1));

  auto run = [&](const LayerWeights& w) {
    KvCache kv(c, 2, 3, 8, KvType::F16, SIZE_MAX, h0 / g, h1 / g);
    Workspace ws;
    std::vector<float> a(T * E), h(T * (c1 - c0)), f(T * E);
    attn(c, w, kv, 0, x.data(), T, a.data(), fo, ws, h0, h1);
    ffn_gate_up(c, w, x.data(), T, h.data(), fo, ws, c0, c1);
    ffn_down(c, w, h.data(), T, f.data(), fo, ws, c0, c1);
    a.insert(a.end(), f.begin(), f.end());
    return a;
  };
  auto a = run(full), b = run(cut);
  ASSERT_GT(max_abs(a), 0.0);
  expect_close(b, a, 1e-6 * max_abs(a), "pre-cut tensors vs full tensors");
}

// Vocab slices: embeddings (zero rows for foreign tokens) and logits, plus top-k + lse.
TEST(VocabSlices, EmbedAndLogitsMerge) {
  const std::string path = model_path(kQ8);
  REQUIRE_SHARED_MODEL(path);
  Model m = load_model_file(path);
  const ModelConfig& c = m.config;
  const int E = c.n_embd, V = c.n_vocab, T = 3;
  const std::vector<int32_t> ids = {1, 300, 511};
  const Tensor& te = m.get("token_embd_weight");
  const std::vector<int> bounds = {0, 100, 301, 512};

  std::vector<float> full(T * E), sum(T * E, 0.f), part(T * E);
  embed_rows(te, ids.data(), T, 0, V, V, full.data());
  for (size_t s = 0; s + 1 < bounds.size(); s++) {
    embed_rows(te, ids.data(), T, bounds[s], bounds[s + 1], V, part.data());
    for (int t = 0; t < T; t++) {
      bool owns = ids[t] >= bounds[s] && ids[t] < bounds[s + 1];
      for (int i = 0; i < E; i++) {
        if (!owns) ASSERT_EQ(part[t * E + i], 0.f) << "foreign row not zero";
        sum[t * E + i] += part[t * E + i];
      }
    }
  }
  EXPECT_EQ(sum, full);

  // a shard holding only rows [100,301) of the tensor: tensor_row0 = 100
  Tensor cut = te;
  const size_t rb = row_bytes(te.type, E);
  cut.shape = {E, 201};
  cut.bytes = alloc_aligned(201 * rb);
  std::memcpy(cut.bytes.get(), te.data() + 100 * rb, 201 * rb);
  std::vector<float> cutp(T * E), ref(T * E);
  embed_rows(cut, ids.data(), T, 100, 301, V, cutp.data(), 100);
  embed_rows(te, ids.data(), T, 100, 301, V, ref.data());
  EXPECT_EQ(cutp, ref);

  // logits
  Workspace ws;
  std::vector<float> xn(T * E);
  output_norm(c, m.get("output_norm_weight"), full.data(), T, xn.data(), ws);
  const Tensor& W = lm_head_tensor(m);
  for (Kernel k : {Kernel::Reference, Kernel::Simd}) {
    std::vector<float> lf(T * V);
    lm_head_logits(W, xn.data(), T, 0, V, lf.data(), k);
    std::vector<std::vector<SliceTopK>> parts(T);
    for (size_t s = 0; s + 1 < bounds.size(); s++) {
      const int v0 = bounds[s], v1 = bounds[s + 1];
      std::vector<float> ls(T * (v1 - v0));
      lm_head_logits(W, xn.data(), T, v0, v1, ls.data(), k);
      for (int t = 0; t < T; t++) {
        for (int v = v0; v < v1; v++)
          ASSERT_NEAR(ls[t * (v1 - v0) + (v - v0)], lf[t * V + v], 1e-5) << "token " << t << " id " << v;
        parts[t].push_back(topk_lse(ls.data() + t * (v1 - v0), v0, v1, 8));
      }
    }
    for (int t = 0; t < T; t++) {
      SliceTopK whole = topk_lse(lf.data() + t * V, 0, V, 8);
      SliceTopK merged = merge_topk(parts[t], 8);
      EXPECT_EQ(merged.ids, whole.ids);
      EXPECT_NEAR(merged.lse, whole.lse, 1e-6);
      // exact probabilities from the merge: p(top1) = exp(l - lse)
      double p = std::exp(merged.logits[0] - merged.lse);
      EXPECT_GT(p, 0.0);
      EXPECT_LE(p, 1.0);
    }
  }

  // softcap: tanh(x/c)*c bounds every logit by c
  std::vector<float> capped(V);
  lm_head_logits(W, xn.data(), 1, 0, V, capped.data(), Kernel::Reference, 5.f);
  for (float f : capped) EXPECT_LE(std::fabs(f), 5.f);
}

TEST(VocabSlices, TiedEmbeddingFallback) {
  const std::string path = model_path("stories260K.gguf");
  REQUIRE_SHARED_MODEL(path);
  Model m = load_model_file(path);
  ASSERT_NE(m.find("output_weight"), nullptr);
  // Tie: drop output_weight, make token_embd the lm_head: same logits as when output_weight
  // is replaced by a copy of token_embd.
  Model tied = m;
  tied.tensors.erase("output_weight");
  EXPECT_EQ(&lm_head_tensor(tied), tied.find("token_embd_weight"));
  Model copy = m;
  Tensor t = m.get("token_embd_weight");
  t.name = "output_weight";
  copy.tensors["output_weight"] = t;
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378};
  EngineOptions eo;
  eo.n_ctx = 16;
  Engine a(tied, eo), b(copy, eo);
  const float* la = a.eval(prompt.data(), 5);
  const float* lb = b.eval(prompt.data(), 5);
  for (int i = 0; i < a.n_logits(); i++) ASSERT_EQ(la[i], lb[i]);
}

}  // namespace
