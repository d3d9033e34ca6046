// The architecture table (arch.h) and what reads it: the tensor-set check, layer binding,
// synth, and Qwen3's forward pass (per-head q/k RMSNorm before RoPE, head_dim from
// attention.key_length != hidden / heads) against a naive float64 reference.
#include <cmath>
#include <cstdio>
#include <set>

#include "container/arch.h"
#include "container/model_io.h"
#include "infer_util.h"

using namespace infer_test;
using namespace knot;

namespace {

std::vector<TensorRef> refs_of(const Model& m) {
  std::vector<TensorRef> v;
  for (const auto& [name, t] : m.tensors) v.push_back({name, name, t.shape});
  return v;
}

}  // namespace

TEST(ArchTable, EveryArchitectureIsConsistent) {
  EXPECT_EQ(supported_archs(), "llama, qwen2, qwen3");
  for (const ArchInfo& a : all_archs()) {
    std::set<int> ids;
    for (const ArchTensor& at : a.tensors) EXPECT_TRUE(ids.insert((int)at.id).second) << a.name << ": tensor listed twice";
    // every architecture has the embedding, the lm_head and the four phases' matmuls
    for (TensorId must : {TensorId::TOKEN_EMBD, TensorId::OUTPUT_NORM, TensorId::ATTN_Q, TensorId::ATTN_OUT,
                          TensorId::FFN_GATE, TensorId::FFN_UP, TensorId::FFN_DOWN})
      EXPECT_TRUE(ids.count((int)must)) << a.name << " lacks " << tensor_knot_name(must, 0);
    EXPECT_EQ(arch_info(a.name, "t").name, std::string(a.name));
  }
  EXPECT_EQ(tensor_knot_name(TensorId::ATTN_Q_NORM, 3), "blk_3_attn_q_norm_weight");
  EXPECT_EQ(tensor_gguf_name(TensorId::ATTN_K_BIAS, 0), "blk.0.attn_k.bias");
  EXPECT_EQ(tensor_gguf_name(TensorId::OUTPUT, 5), "output.weight");
  EXPECT_EQ(tensor_dims_text(TensorId::ATTN_OUT), "n_head*head_dim x n_embd");
  const ArchInfo& q3 = arch_info("qwen3", "t");
  EXPECT_EQ(phase_tensor_names(q3, PHASE_ATTN, 2),
            (std::vector<std::string>{"blk_2_attn_norm_weight", "blk_2_attn_q_weight", "blk_2_attn_k_weight",
                                      "blk_2_attn_v_weight", "blk_2_attn_q_norm_weight", "blk_2_attn_k_norm_weight",
                                      "blk_2_attn_output_weight"}));
  EXPECT_EQ(phase_tensor_names(q3, PHASE_FFN_UP, 0),
            (std::vector<std::string>{"blk_0_ffn_norm_weight", "blk_0_ffn_up_weight"}));
  std::string e;
  try {
    arch_info("mamba", "m.gguf");
  } catch (const Error& x) {
    e = x.what();
  }
  EXPECT_EQ(e, "m.gguf: unsupported architecture 'mamba' (supported: llama, qwen2, qwen3)");
}

TEST(Qwen3, SynthModelHasTheTableTensorsAndKeyLengthHeadDim) {
  const Model& m = synth(qwen3_wide("Q8_0"));
  const ModelConfig& c = m.config;
  EXPECT_EQ(c.arch, "qwen3");
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_NE(c.head_dim * c.n_head, c.n_embd);
  EXPECT_EQ(c.rope_style, RopeStyle::Neox);
  EXPECT_EQ(m.get("blk_1_attn_q_weight").shape, (std::vector<int64_t>{256, 512}));
  EXPECT_EQ(m.get("blk_1_attn_k_norm_weight").shape, (std::vector<int64_t>{128}));
  EXPECT_EQ(m.find("blk_0_attn_q_bias"), nullptr);
  EXPECT_TRUE(check_tensor_set(c, refs_of(m), false, "q3").empty());
  const LayerWeights w = layer_weights(m, 1);
  ASSERT_NE(w.attn_q_norm, nullptr);
  ASSERT_NE(w.attn_k_norm, nullptr);
  EXPECT_EQ(w.attn_q_bias, nullptr);

  // a missing q-norm and a wrong k-norm shape are named, with the layer
  std::vector<TensorRef> refs;
  for (TensorRef r : refs_of(m)) {
    if (r.knot_name == "blk_1_attn_q_norm_weight") continue;
    if (r.knot_name == "blk_0_attn_k_norm_weight") r.shape = {64};
    refs.push_back(r);
  }
  const auto problems = check_tensor_set(c, refs, false, "q3");
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0], "q3: layer 0: tensor blk_0_attn_k_norm_weight has shape 64, the config wants 128 (head_dim)");
  EXPECT_EQ(problems[1], "q3: layer 1: missing tensor blk_1_attn_q_norm_weight");
  // and the forward pass refuses the layer, naming tensor, layer and phase
  Model bad = m;
  bad.tensors.erase("blk_1_attn_k_norm_weight");
  std::string e;
  try {
    check_layer_tensors(bad, 1);
  } catch (const Error& x) {
    e = x.what();
  }
  EXPECT_EQ(e, "missing tensor blk_1_attn_k_norm_weight (layer 1, phase attn)");
}

// attn() of a Qwen3 layer vs a naive float64 implementation of the architecture:
// RMSNorm, q/k/v projections, per-head RMSNorm of q and k with their own weights, Neox
// RoPE, causal softmax attention, output projection. F32 weights; the q/k norm weights
// are made non-uniform so a wrong index or a skipped norm shows.
TEST(Qwen3, AttentionMatchesNaiveReference) {
  Model m = synth(qwen3_wide("F32"));  // a copy: the norm weights are changed below
  const ModelConfig& c = m.config;
  const int E = c.n_embd, hd = c.head_dim, H = c.n_head, KVH = c.n_head_kv, g = H / KVH, L = 1;
  for (const char* nm : {"blk_1_attn_q_norm_weight", "blk_1_attn_k_norm_weight"}) {
    Tensor& t = m.tensors.at(nm);
    auto fresh = alloc_aligned(t.size);
    float* f = (float*)fresh.get();
    for (int i = 0; i < hd; i++) f[i] = 0.5f + (float)((i * 37 + (nm[11] == 'q' ? 11 : 5)) % 17) / 8.f;
    t.bytes = fresh;
  }
  const int T = 5;
  std::vector<float> x((size_t)T * E);
  for (int t = 0; t < T; t++)
    for (int i = 0; i < E; i++) x[(size_t)t * E + i] = std::sin(0.37f * (float)(i + 1) * (float)(t + 2)) * (1.f + (i % 5));

  const float* Wn = (const float*)m.get("blk_1_attn_norm_weight").data();
  const float* Wq = (const float*)m.get("blk_1_attn_q_weight").data();
  const float* Wk = (const float*)m.get("blk_1_attn_k_weight").data();
  const float* Wv = (const float*)m.get("blk_1_attn_v_weight").data();
  const float* Wo = (const float*)m.get("blk_1_attn_output_weight").data();
  const float* Qn = (const float*)m.get("blk_1_attn_q_norm_weight").data();
  const float* Kn = (const float*)m.get("blk_1_attn_k_norm_weight").data();
  auto rms = [&](std::vector<double>& v, size_t off, int n, const float* w) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += v[off + i] * v[off + i];
    const double s = 1.0 / std::sqrt(ss / n + (double)c.rms_eps);
    for (int i = 0; i < n; i++) v[off + i] = v[off + i] * s * w[i];
  };
  auto proj = [&](const float* W, int rows, int cols, const std::vector<double>& in, size_t ioff, std::vector<double>& out, size_t ooff) {
    for (int r = 0; r < rows; r++) {
      double s = 0;
      for (int k = 0; k < cols; k++) s += (double)W[(size_t)r * cols + k] * in[ioff + k];
      out[ooff + r] = s;
    }
  };
  auto rope_neox = [&](std::vector<double>& v, size_t off, int pos) {
    for (int i = 0; i < hd / 2; i++) {
      const double th = pos * std::pow((double)c.rope_theta, -2.0 * i / hd);
      const double a = v[off + i], b = v[off + i + hd / 2];
      v[off + i] = a * std::cos(th) - b * std::sin(th);
      v[off + i + hd / 2] = a * std::sin(th) + b * std::cos(th);
    }
  };
  std::vector<double> xn((size_t)T * E), q((size_t)T * H * hd), k((size_t)T * KVH * hd), v((size_t)T * KVH * hd);
  for (int t = 0; t < T; t++) {
    for (int i = 0; i < E; i++) xn[(size_t)t * E + i] = x[(size_t)t * E + i];
    rms(xn, (size_t)t * E, E, Wn);
    proj(Wq, H * hd, E, xn, (size_t)t * E, q, (size_t)t * H * hd);
    proj(Wk, KVH * hd, E, xn, (size_t)t * E, k, (size_t)t * KVH * hd);
    proj(Wv, KVH * hd, E, xn, (size_t)t * E, v, (size_t)t * KVH * hd);
    for (int h = 0; h < H; h++) rms(q, ((size_t)t * H + h) * hd, hd, Qn), rope_neox(q, ((size_t)t * H + h) * hd, t);
    for (int h = 0; h < KVH; h++) rms(k, ((size_t)t * KVH + h) * hd, hd, Kn), rope_neox(k, ((size_t)t * KVH + h) * hd, t);
  }
  std::vector<double> att((size_t)T * H * hd, 0.0), want((size_t)T * E);
  for (int t = 0; t < T; t++)
    for (int h = 0; h < H; h++) {
      const int kvh = h / g;
      std::vector<double> s(t + 1);
      double mx = -1e300, sum = 0;
      for (int j = 0; j <= t; j++) {
        double d = 0;
        for (int i = 0; i < hd; i++) d += q[((size_t)t * H + h) * hd + i] * k[((size_t)j * KVH + kvh) * hd + i];
        s[j] = d / std::sqrt((double)hd);
        mx = std::max(mx, s[j]);
      }
      for (int j = 0; j <= t; j++) sum += (s[j] = std::exp(s[j] - mx));
      for (int j = 0; j <= t; j++)
        for (int i = 0; i < hd; i++) att[((size_t)t * H + h) * hd + i] += s[j] / sum * v[((size_t)j * KVH + kvh) * hd + i];
    }
  for (int t = 0; t < T; t++) proj(Wo, E, H * hd, att, (size_t)t * H * hd, want, (size_t)t * E);

  for (Kernel kern : {Kernel::Reference, Kernel::Simd}) {
    KvCache kv(c, L, L + 1, 16, kern == Kernel::Reference ? KvType::F32 : KvType::F16);
    Workspace ws;
    std::vector<float> got((size_t)T * E);
    ForwardOptions fo{kern, kern == Kernel::Reference ? KvType::F32 : KvType::F16};
    attn(c, layer_weights(m, L), kv, 0, x.data(), 3, got.data(), fo, ws);            // prefill 3
    attn(c, layer_weights(m, L), kv, 3, x.data() + 3 * E, 2, got.data() + 3 * E, fo, ws);  // then 2
    double worst = 0, mag = 0;
    for (size_t i = 0; i < want.size(); i++) {
      ASSERT_TRUE(std::isfinite(got[i])) << i;
      worst = std::max(worst, std::fabs(got[i] - want[i]));
      mag = std::max(mag, std::fabs(want[i]));
    }
    report(std::string("qwen3 attn vs naive float64, ") + kernel_name(kern) + " rel err", worst / mag);
    EXPECT_GT(mag, 0.1);
    EXPECT_LE(worst / mag, kern == Kernel::Reference ? 1e-5 : 2e-3) << kernel_name(kern);
  }
  // without the q/k norms the result is far off: the check above really sees them
  LayerWeights w = layer_weights(m, L);
  w.attn_q_norm = w.attn_k_norm = nullptr;
  KvCache kv(c, L, L + 1, 16, KvType::F32);
  Workspace ws;
  std::vector<float> got((size_t)T * E);
  attn(c, w, kv, 0, x.data(), T, got.data(), ForwardOptions{Kernel::Reference, KvType::F32}, ws);
  double worst = 0, mag = 0;
  for (size_t i = 0; i < want.size(); i++) worst = std::max(worst, std::fabs(got[i] - want[i])), mag = std::max(mag, std::fabs(want[i]));
  EXPECT_GT(worst / mag, 1e-2);
}
