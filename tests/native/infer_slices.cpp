// Mesh slices: the sum of the partials of head slices, FFN column slices and vocab
// slices equals the unsliced result (Frobenius merge), for aligned (quantized gather) and
// unaligned (dequantized gather) column boundaries.
//
// The models are seeded synthetic ones (infer_util.h) in which every head, KV head, FFN
// column and vocab row is random: the shared pad256 models have all-zero padded heads,
// where a slice test mostly sums zeros. Every check also requires each slice's partial to
// carry its share of the output (non-trivial norm), so a slice that silently returns
// zeros fails.
//
// Tolerances, relative to max |unsliced|:
//  * aligned cuts (and any cut with Kernel::Reference, and F32): kExactBound = 2e-5 —
//    the same products, only the float summation order differs (observed <= 3e-7);
//  * unaligned cuts with Kernel::Simd: the slice multiplies f32 activations with
//    dequantized weights, the unsliced call quantizes the activations (Q8_K for K-quants,
//    Q8_0/Q16_0 otherwise), so the sum differs from it by that quantization noise. Bound:
//    1.5 x the unsliced call's own Simd-vs-Reference difference (the same noise, measured),
//    and never above kUnalignedCap = 5e-2. Observed: heads ~6e-3, FFN <= 2.5e-2 (K-quants),
//    ~6e-5 (Q8_0).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "infer_util.h"
#include "kernels/quant.h"

using namespace infer_test;
using namespace knot;

namespace {

constexpr double kExactBound = 2e-5;
constexpr double kUnalignedCap = 5e-2;
constexpr double kUnaligned = -1;  // rel_tol marker: calibrate against Simd-vs-Reference

const std::vector<int32_t> kIds = {1, 17, 250, 99, 3, 288, 42, 160};

// x: the embeddings of kIds plus a smooth offset, so rows are not just embedding rows.
std::vector<float> input_rows(const Model& m, const std::vector<int32_t>& ids) {
  const int E = m.config.n_embd;
  std::vector<float> x(ids.size() * E);  // [ntok, E]
  embed_rows(m.get("token_embd_weight"), ids.data(), (int)ids.size(), 0, m.config.n_vocab,
             m.config.n_vocab, x.data());
  for (size_t t = 0; t < ids.size(); t++)
    for (int i = 0; i < E; i++) x[t * E + i] += 0.3f * std::sin(0.37f * i + 1.3f * t);
  return x;
}

std::string cuts_str(const std::vector<int>& b) {
  std::string s = "{";
  for (size_t i = 0; i < b.size(); i++) s += (i ? "," : "") + std::to_string(b[i]);
  return s + "}";
}

// Sums the slices' partials and compares with the unsliced output; every partial must
// hold a non-trivial share: ||part|| >= 0.1 * sqrt(width / total) * ||full||.
// rel_tol == kUnaligned: 1.5 x max|full - full_ref| / max|full|, capped by kUnalignedCap,
// where full_ref is the unsliced output with Kernel::Reference.
void check_sum(const std::vector<float>& full, const std::vector<std::vector<float>>& parts,
               const std::vector<int>& bounds, double rel_tol, const std::string& what,
               const std::vector<float>* full_ref = nullptr) {
  const int total = bounds.back() - bounds.front();
  const double nf = l2(full), mf = max_abs(full);
  ASSERT_GT(nf, 0.0) << what << ": unsliced output is zero";
  std::vector<float> sum(full.size(), 0.f);
  double min_share = INFINITY;
  for (size_t s = 0; s < parts.size(); s++) {
    ASSERT_EQ(parts[s].size(), full.size());
    for (size_t j = 0; j < sum.size(); j++) sum[j] += parts[s][j];
    const double frac = (double)(bounds[s + 1] - bounds[s]) / total;
    const double share = l2(parts[s]) / (nf * std::sqrt(frac));
    min_share = std::min(min_share, share);
    EXPECT_GE(share, 0.1) << what << ": slice [" << bounds[s] << "," << bounds[s + 1]
                          << ") has a partial of norm " << l2(parts[s]) << " vs " << nf;
  }
  if (rel_tol == kUnaligned) {
    ASSERT_NE(full_ref, nullptr);
    const double noise = max_diff(full_ref->data(), full.data(), full.size(), what) / mf;
    report(what + " unsliced simd-vs-reference", noise);
    EXPECT_GT(noise, 0.0) << what << ": Simd and Reference agree exactly, calibration is void";
    rel_tol = std::min(kUnalignedCap, std::max(kExactBound, 1.5 * noise));
  }
  const double rel = max_diff(sum.data(), full.data(), full.size(), what) / mf;
  report(what + " rel err", rel);
  report(what + " min share", min_share);
  EXPECT_LE(rel, rel_tol) << what << ": max |sum of slices - unsliced| / max |unsliced|";
}

ForwardOptions options(Kernel k) {
  return ForwardOptions{k, k == Kernel::Reference ? KvType::F32 : KvType::F16};
}

// Attention of the last layer over 8 positions (prefill chunks 4 + 2, then 2 decode
// steps), all heads vs the sum of the head slices, each slice with its own KV cache of
// its KV heads only.
void check_head_slices(const SynthOptions& so, Kernel kernel, const std::vector<int>& bounds,
                       double rel_tol) {
  const Model& m = synth(so);
  const ModelConfig& c = m.config;
  const int E = c.n_embd, g = c.n_head / c.n_head_kv, layer = c.n_layer - 1;
  ForwardOptions fo = options(kernel);
  const LayerWeights w = layer_weights(m, layer);
  const auto x = input_rows(m, kIds);
  const int T = (int)kIds.size(), chunks[] = {4, 2, 1, 1};

  auto run = [&](int h0, int h1) {
    KvCache kv(c, layer, layer + 1, 16, fo.kv_type, SIZE_MAX, h0 / g, h1 / g);
    Workspace ws;
    std::vector<float> out((size_t)T * E);  // [T, E]
    int pos = 0;
    for (int n : chunks) {
      attn(c, w, kv, pos, x.data() + (size_t)pos * E, n, out.data() + (size_t)pos * E, fo, ws, h0, h1);
      pos += n;
    }
    EXPECT_EQ(kv.n_pos(layer), T);
    EXPECT_EQ(kv.n_kv_heads(), (h1 - h0) / g);
    return out;
  };
  const auto full = run(0, c.n_head);
  std::vector<std::vector<float>> parts;
  for (size_t i = 0; i + 1 < bounds.size(); i++) parts.push_back(run(bounds[i], bounds[i + 1]));
  std::vector<float> full_ref;
  if (rel_tol == kUnaligned) {
    fo = options(Kernel::Reference);
    full_ref = run(0, c.n_head);
  }
  check_sum(full, parts, bounds, rel_tol,
            synth_key(so) + " " + kernel_name(kernel) + " heads " + cuts_str(bounds), &full_ref);
}

// FFN (gate, up, down) over column slices vs unsliced, for a 5-token batch (matmul) and
// one token (matvec); separate gate/up phases or the combined call.
void check_ffn_slices(const SynthOptions& so, Kernel kernel, const std::vector<int>& bounds,
                      double rel_tol, bool separate_phases) {
  const Model& m = synth(so);
  const ModelConfig& c = m.config;
  const int E = c.n_embd;
  ForwardOptions fo = options(kernel);
  const LayerWeights w = layer_weights(m, 0);
  const auto x = input_rows(m, kIds);
  for (int T : {5, 1}) {
    auto run = [&](int c0, int c1) {
      Workspace ws;
      std::vector<float> h((size_t)T * (c1 - c0)), out((size_t)T * E);  // [T, nc], [T, E]
      if (separate_phases) {
        ffn_gate(c, w, x.data(), T, h.data(), fo, ws, c0, c1);
        ffn_up(c, w, x.data(), T, h.data(), fo, ws, c0, c1);
      } else {
        ffn_gate_up(c, w, x.data(), T, h.data(), fo, ws, c0, c1);
      }
      ffn_down(c, w, h.data(), T, out.data(), fo, ws, c0, c1);
      return out;
    };
    fo = options(kernel);
    const auto full = run(0, c.n_ff);
    std::vector<std::vector<float>> parts;
    for (size_t i = 0; i + 1 < bounds.size(); i++) parts.push_back(run(bounds[i], bounds[i + 1]));
    std::vector<float> full_ref;
    if (rel_tol == kUnaligned) {
      fo = options(Kernel::Reference);
      full_ref = run(0, c.n_ff);
    }
    check_sum(full, parts, bounds, rel_tol,
              synth_key(so) + " " + kernel_name(kernel) + " ffn " + cuts_str(bounds) +
                  (separate_phases ? " phases" : " gate_up") + " ntok " + std::to_string(T),
              &full_ref);
  }
}

// ---- the synthetic models really have no zero head / column ---------------------------

std::vector<float> dequant(const Tensor& t) {
  std::vector<float> f((size_t)t.ne0() * t.nrows());  // [rows, ne0]
  const size_t rb = row_bytes(t.type, t.ne0());
  for (int64_t r = 0; r < t.nrows(); r++) dequantize_row(t.type, t.data() + r * rb, f.data() + r * t.ne0(), t.ne0());
  return f;
}

// Smallest L2 norm over groups of `width` consecutive rows (by_cols: over groups of
// `width` consecutive columns, across all rows).
double min_group_norm(const Tensor& t, int64_t width, bool by_cols) {
  const auto f = dequant(t);
  const int64_t n0 = t.ne0(), nr = t.nrows();
  std::vector<double> ss((size_t)((by_cols ? n0 : nr) / width), 0.0);
  for (int64_t r = 0; r < nr; r++)
    for (int64_t i = 0; i < n0; i++) ss[(size_t)((by_cols ? i : r) / width)] += (double)f[r * n0 + i] * f[r * n0 + i];
  return std::sqrt(*std::min_element(ss.begin(), ss.end()));
}

TEST(SynthModels, EveryHeadFfnColumnAndVocabRowIsNonZero) {
  for (const SynthOptions& so : {llama_gqa("Q8_0"), qwen_wide("Q4_K"), qwen_wide("Q6_K"),
                                 llama_tied_padded("Q8_0"), qwen3_wide("Q4_K")}) {
    const Model& m = synth(so);
    const ModelConfig& c = m.config;
    SCOPED_TRACE(synth_key(so));
    const DType want = dtype_from_name(so.type);
    for (int l = 0; l < c.n_layer; l++) {
      const LayerWeights w = layer_weights(m, l);
      for (const Tensor* t : {w.attn_q, w.attn_k, w.attn_v, w.attn_output, w.ffn_gate, w.ffn_up, w.ffn_down})
        EXPECT_EQ(t->type, want) << t->name << " is " << dtype_name(t->type);
      const int hd = c.head_dim;
      EXPECT_GT(min_group_norm(*w.attn_q, hd, false), 0.1) << "a query head of layer " << l;
      EXPECT_GT(min_group_norm(*w.attn_k, hd, false), 0.1) << "a KV head of layer " << l;
      EXPECT_GT(min_group_norm(*w.attn_v, hd, false), 0.1) << "a KV head of layer " << l;
      EXPECT_GT(min_group_norm(*w.attn_output, hd, true), 0.1) << "a head's attn_output columns, layer " << l;
      EXPECT_GT(min_group_norm(*w.ffn_gate, 1, false), 0.1) << "an ffn_gate row of layer " << l;
      EXPECT_GT(min_group_norm(*w.ffn_up, 1, false), 0.1) << "an ffn_up row of layer " << l;
      EXPECT_GT(min_group_norm(*w.ffn_down, 1, true), 0.01) << "an ffn_down column of layer " << l;
      if (c.arch == "qwen2") {
        EXPECT_NE(w.attn_q_bias, nullptr);
      }
    }
    EXPECT_GT(min_group_norm(m.get("token_embd_weight"), 1, false), 0.1);
    EXPECT_GT(min_group_norm(lm_head_tensor(m), 1, false), 0.1);
  }
}

// ---- attention head slices ------------------------------------------------------------

TEST(HeadSlices, F32AnyKvGroupCut) {
  for (Kernel k : {Kernel::Simd, Kernel::Reference})
    check_head_slices(llama_gqa("F32"), k, {0, 4, 8}, kExactBound);
}

TEST(HeadSlices, Q8_0AlignedOnKvGroups) {
  // every KV-group cut is a multiple of 128 columns = 4 Q8_0 blocks: quantized gather
  for (Kernel k : {Kernel::Simd, Kernel::Reference}) {
    check_head_slices(llama_gqa("Q8_0"), k, {0, 4, 8}, kExactBound);
    check_head_slices(qwen_wide("Q8_0"), k, {0, 4, 12, 16}, kExactBound);
    check_head_slices(qwen_wide("Q8_0"), k, {0, 4, 8, 12, 16}, kExactBound);
  }
}

TEST(HeadSlices, KQuantAlignedOn256Blocks) {
  for (const char* type : {"Q4_K", "Q6_K"})
    for (Kernel k : {Kernel::Simd, Kernel::Reference})
      check_head_slices(qwen_wide(type), k, {0, 8, 16}, kExactBound);
}

TEST(HeadSlices, KQuantUnalignedDequantizedGather) {
  // 4-head cuts = 128 columns, inside a 256-element K-quant block: f32 gather path
  for (const char* type : {"Q4_K", "Q6_K"}) {
    check_head_slices(qwen_wide(type), Kernel::Reference, {0, 4, 12, 16}, kExactBound);
    check_head_slices(qwen_wide(type), Kernel::Simd, {0, 4, 12, 16}, kUnaligned);
    check_head_slices(qwen_wide(type), Kernel::Simd, {0, 4, 8, 12, 16}, kUnaligned);
  }
  check_head_slices(llama_gqa("Q4_K"), Kernel::Simd, {0, 4, 8}, kUnaligned);
}

TEST(HeadSlices, MhaSingleHeadCutsQ8_0) {
  // no GQA (group 1), head_dim 16: a 1-head cut is 16 columns, inside a Q8_0 block
  const SynthOptions mha = synth_opts("llama", 128, 2, 8, 8, 256, 300, "Q8_0");
  check_head_slices(mha, Kernel::Simd, {0, 2, 4, 6, 8}, kExactBound);  // 32-column cuts
  check_head_slices(mha, Kernel::Reference, {0, 1, 5, 8}, kExactBound);
  check_head_slices(mha, Kernel::Simd, {0, 1, 5, 8}, kUnaligned);
  // group 8: 16 heads on 2 KV heads, each slice one KV head = 256 columns
  check_head_slices(synth_opts("qwen2", 512, 2, 16, 2, 512, 300, "Q4_K"), Kernel::Simd, {0, 8, 16}, kExactBound);
}

TEST(HeadSlices, Qwen3HeadDimFromKeyLength) {
  // head_dim 128 (hidden 256 / 4 heads would be 64), group 2: a KV group is 256 columns
  // of attn_output, one K-quant block; the per-head q/k norms travel with every slice
  for (Kernel k : {Kernel::Simd, Kernel::Reference}) {
    check_head_slices(qwen3_wide("F32"), k, {0, 2, 4}, kExactBound);
    check_head_slices(qwen3_wide("Q4_K"), k, {0, 2, 4}, kExactBound);
    check_head_slices(qwen3_wide("Q8_0"), k, {0, 2, 4}, kExactBound);
  }
}

TEST(HeadSlices, RejectsSliceAcrossKvGroupOrWrongCache) {
  const Model& m = synth(llama_gqa("Q8_0"));
  const ModelConfig& c = m.config;
  Workspace ws;
  const auto x = input_rows(m, {1});
  std::vector<float> out(c.n_embd);
  auto error_of = [&](int kvh0, int kvh1, int h0, int h1) -> std::string {
    KvCache kv(c, 0, 1, 8, KvType::F32, SIZE_MAX, kvh0, kvh1);
    try {
      attn(c, layer_weights(m, 0), kv, 0, x.data(), 1, out.data(), ForwardOptions{}, ws, h0, h1);
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  std::string e = error_of(0, 1, 0, 2);
  EXPECT_NE(e.find("GQA group size 4"), std::string::npos) << e;
  e = error_of(0, 1, 4, 8);  // the cache holds KV head 0, the slice needs KV head 1
  EXPECT_NE(e.find("KV cache holds KV heads [0,1) but the head slice [4,8) needs [1,2)"),
            std::string::npos) << e;
}

// ---- FFN column slices ----------------------------------------------------------------

TEST(FfnSlices, F32AnyCut) {
  check_ffn_slices(llama_gqa("F32"), Kernel::Simd, {0, 100, 301, 512}, kExactBound, true);
  check_ffn_slices(llama_gqa("F32"), Kernel::Simd, {0, 1, 511, 512}, kExactBound, false);
}

TEST(FfnSlices, Q8_0AlignedAndUnaligned) {
  for (bool sep : {true, false}) {
    check_ffn_slices(llama_gqa("Q8_0"), Kernel::Simd, {0, 64, 96, 512}, kExactBound, sep);
    check_ffn_slices(llama_gqa("Q8_0"), Kernel::Reference, {0, 100, 512}, kExactBound, sep);
    check_ffn_slices(llama_gqa("Q8_0"), Kernel::Simd, {0, 100, 300, 512}, kUnaligned, sep);
  }
}

TEST(FfnSlices, KQuantAlignedAndUnaligned) {
  for (const char* type : {"Q4_K", "Q6_K"}) {
    check_ffn_slices(qwen_wide(type), Kernel::Simd, {0, 256, 512}, kExactBound, true);
    check_ffn_slices(qwen_wide(type), Kernel::Reference, {0, 256, 512}, kExactBound, false);
    check_ffn_slices(qwen_wide(type), Kernel::Reference, {0, 100, 300, 512}, kExactBound, true);
    check_ffn_slices(qwen_wide(type), Kernel::Simd, {0, 100, 300, 512}, kUnaligned, false);
  }
}

TEST(FfnSlices, Qwen3AlignedAndUnaligned) {
  check_ffn_slices(qwen3_wide("Q4_K"), Kernel::Simd, {0, 256, 512}, kExactBound, true);
  check_ffn_slices(qwen3_wide("Q4_K"), Kernel::Reference, {0, 100, 300, 512}, kExactBound, false);
  check_ffn_slices(qwen3_wide("Q4_K"), Kernel::Simd, {0, 100, 300, 512}, kUnaligned, true);
}

TEST(FfnSlices, PhasesEqualCombined) {
  // separate gate/up phases (fluid mode) == the combined call, bit for bit
  const Model& m = synth(qwen_wide("Q4_K"));
  const ModelConfig& c = m.config;
  const auto x = input_rows(m, kIds);
  const LayerWeights w = layer_weights(m, 1);
  const int T = 5, c0 = 100, c1 = 356;
  const ForwardOptions fo = options(Kernel::Simd);
  Workspace ws;
  std::vector<float> a((size_t)T * (c1 - c0)), b(a.size()), da((size_t)T * c.n_embd), db(da.size());
  ffn_gate(c, w, x.data(), T, a.data(), fo, ws, c0, c1);
  ffn_up(c, w, x.data(), T, a.data(), fo, ws, c0, c1);
  ffn_gate_up(c, w, x.data(), T, b.data(), fo, ws, c0, c1);
  EXPECT_EQ(a, b);
  ffn_down(c, w, a.data(), T, da.data(), fo, ws, c0, c1);
  ffn_down(c, w, b.data(), T, db.data(), fo, ws, c0, c1);
  EXPECT_EQ(da, db);
  EXPECT_GT(l2(da), 0.0);
}

// ---- pre-cut tensors ------------------------------------------------------------------

// A shard that stores only its slice: tensors cut to rows [r0,r1) (q/k/v, gate/up,
// biases) or to columns [c0,c1) (attn_output, ffn_down) give the same partial as the
// full tensors.
Tensor cut_rows(const Tensor& t, int64_t r0, int64_t r1) {
  Tensor c = t;
  const size_t rb = row_bytes(t.type, t.ne0());
  c.shape = {t.ne0(), r1 - r0};
  c.size = (size_t)(r1 - r0) * rb;
  c.bytes = alloc_aligned(c.size);
  std::memcpy(c.bytes.get(), t.data() + r0 * rb, c.size);
  return c;
}
Tensor cut_vec(const Tensor& t, int64_t i0, int64_t i1) {  // 1-D F32 (bias)
  Tensor c = t;
  EXPECT_EQ(t.type, DType::F32);
  c.shape = {i1 - i0};
  c.size = (size_t)(i1 - i0) * sizeof(float);
  c.bytes = alloc_aligned(c.size);
  std::memcpy(c.bytes.get(), t.data() + i0 * sizeof(float), c.size);
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

void check_precut(const SynthOptions& so, int h0, int h1, int c0, int c1) {
  const Model& m = synth(so);
  const ModelConfig& c = m.config;
  const int E = c.n_embd, hd = c.head_dim, g = c.n_head / c.n_head_kv, T = 3, L = 1;
  const ForwardOptions fo = options(Kernel::Simd);
  const auto x = input_rows(m, {1, 250, 17});
  const LayerWeights full = layer_weights(m, L);

  std::vector<Tensor> keep;  // owns the cut tensors
  keep.reserve(12);
  LayerWeights cut = full;
  cut.attn_q = &keep.emplace_back(cut_rows(*full.attn_q, h0 * hd, h1 * hd));
  cut.attn_k = &keep.emplace_back(cut_rows(*full.attn_k, h0 / g * hd, h1 / g * hd));
  cut.attn_v = &keep.emplace_back(cut_rows(*full.attn_v, h0 / g * hd, h1 / g * hd));
  cut.attn_output = &keep.emplace_back(cut_cols(*full.attn_output, h0 * hd, h1 * hd));
  if (full.attn_q_bias) {
    cut.attn_q_bias = &keep.emplace_back(cut_vec(*full.attn_q_bias, h0 * hd, h1 * hd));
    cut.attn_k_bias = &keep.emplace_back(cut_vec(*full.attn_k_bias, h0 / g * hd, h1 / g * hd));
    cut.attn_v_bias = &keep.emplace_back(cut_vec(*full.attn_v_bias, h0 / g * hd, h1 / g * hd));
  }
  cut.ffn_gate = &keep.emplace_back(cut_rows(*full.ffn_gate, c0, c1));
  cut.ffn_up = &keep.emplace_back(cut_rows(*full.ffn_up, c0, c1));
  cut.ffn_down = &keep.emplace_back(cut_cols(*full.ffn_down, c0, c1));

  auto run = [&](const LayerWeights& w) {
    KvCache kv(c, L, L + 1, 8, fo.kv_type, SIZE_MAX, h0 / g, h1 / g);
    Workspace ws;
    std::vector<float> a((size_t)T * E), h((size_t)T * (c1 - c0)), f((size_t)T * E);
    attn(c, w, kv, 0, x.data(), T, a.data(), fo, ws, h0, h1);
    ffn_gate_up(c, w, x.data(), T, h.data(), fo, ws, c0, c1);
    ffn_down(c, w, h.data(), T, f.data(), fo, ws, c0, c1);
    a.insert(a.end(), f.begin(), f.end());
    return a;
  };
  const auto a = run(full), b = run(cut);
  ASSERT_GT(l2(a.data(), (size_t)T * E), 0.0);
  ASSERT_GT(l2(a.data() + (size_t)T * E, (size_t)T * E), 0.0);
  const double rel = max_diff(b.data(), a.data(), a.size(), "pre-cut") / max_abs(a);
  report(synth_key(so) + " pre-cut vs full rel err", rel);
  EXPECT_LE(rel, 1e-6) << synth_key(so) << ": pre-cut tensors vs full tensors";
}

TEST(PreCutTensors, HeadAndFfnSlices) {
  check_precut(llama_gqa("Q8_0"), 4, 8, 64, 192);   // 128 / 128 columns: Q8_0 aligned
  check_precut(qwen_wide("Q4_K"), 8, 16, 256, 512);  // with biases, K-quant aligned
  check_precut(qwen_wide("Q6_K"), 0, 8, 0, 256);
}

// ---- vocab slices -----------------------------------------------------------------------

// Shards [0,97) [97,211) [211,300) meet end to end and cover the tokenizer vocab exactly;
// the tensor has 320 rows (20 padding rows no shard owns). Tied: the lm_head is token_embd.
TEST(VocabSlices, EmbedAndLogitsMergeWithPaddedTiedVocab) {
  const Model& m = synth(llama_tied_padded("Q8_0"));
  const ModelConfig& c = m.config;
  const int E = c.n_embd, V = c.n_vocab;
  ASSERT_EQ(V, 300);
  ASSERT_EQ(c.n_vocab_tensor, 320);
  ASSERT_EQ(m.find("output_weight"), nullptr);
  const Tensor& te = m.get("token_embd_weight");
  ASSERT_EQ(&lm_head_tensor(m), &te);
  ASSERT_EQ(te.nrows(), 320);
  const std::vector<int> bounds = {0, 97, 211, V};

  // every id of the vocab is owned by exactly one shard, whose row equals the full lookup
  std::vector<int32_t> all(V);
  for (int i = 0; i < V; i++) all[i] = i;
  std::vector<float> full((size_t)V * E), sum((size_t)V * E, 0.f), part((size_t)V * E);
  embed_rows(te, all.data(), V, 0, V, V, full.data());
  std::vector<int> owners(V, 0);
  for (size_t s = 0; s + 1 < bounds.size(); s++) {
    embed_rows(te, all.data(), V, bounds[s], bounds[s + 1], V, part.data());
    for (int t = 0; t < V; t++) {
      const double n = l2(part.data() + (size_t)t * E, E);
      if (n > 0) owners[t]++;
      if (t >= bounds[s] && t < bounds[s + 1]) {
        ASSERT_GT(n, 0.0) << "shard " << s << " id " << t;
      } else {
        ASSERT_EQ(n, 0.0) << "foreign row not zero: shard " << s << " id " << t;
      }
    }
    for (size_t i = 0; i < sum.size(); i++) sum[i] += part[i];
  }
  for (int t = 0; t < V; t++) ASSERT_EQ(owners[t], 1) << "id " << t;
  EXPECT_EQ(sum, full);

  // padding ids are not tokens: refused by every shard, naming the id
  for (size_t s = 0; s + 1 < bounds.size(); s++) {
    const int32_t pad = 305;
    try {
      embed_rows(te, &pad, 1, bounds[s], bounds[s + 1], V, part.data());
      ADD_FAILURE() << "padding id accepted by shard " << s;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("id 305, outside the vocabulary [0,300)"), std::string::npos)
          << e.what();
    }
  }

  // a shard holding only its rows [97,211) of the tensor: tensor_row0 = 97
  Tensor cut = te;
  const size_t rb = row_bytes(te.type, E);
  cut.shape = {E, 114};
  cut.size = 114 * rb;
  cut.bytes = alloc_aligned(cut.size);
  std::memcpy(cut.bytes.get(), te.data() + 97 * rb, cut.size);
  std::vector<float> cutp((size_t)V * E);
  embed_rows(cut, all.data(), V, 97, 211, V, cutp.data(), 97);
  embed_rows(te, all.data(), V, 97, 211, V, part.data());
  EXPECT_EQ(cutp, part);

  // logits of 3 tokens: per-shard slices == the full logits; top-k + lse merge == full
  const int T = 3;
  const std::vector<float> x = input_rows(m, {1, 160, 299});
  Workspace ws;
  std::vector<float> xn((size_t)T * E);
  output_norm(c, m.get("output_norm_weight"), x.data(), T, xn.data(), ws);
  for (Kernel k : {Kernel::Reference, Kernel::Simd}) {
    std::vector<float> lf((size_t)T * V);
    lm_head_logits(te, xn.data(), T, 0, V, lf.data(), k);
    std::vector<std::vector<SliceTopK>> parts(T);
    for (size_t s = 0; s + 1 < bounds.size(); s++) {
      const int v0 = bounds[s], v1 = bounds[s + 1];
      std::vector<float> ls((size_t)T * (v1 - v0)), lc(ls.size());
      lm_head_logits(te, xn.data(), T, v0, v1, ls.data(), k);
      lm_head_logits(cut.nrows() == v1 - v0 ? cut : te, xn.data(), T, v0, v1, lc.data(), k,
                     0.f, cut.nrows() == v1 - v0 ? v0 : 0);  // shard 1 from its own rows
      EXPECT_EQ(ls, lc);
      for (int t = 0; t < T; t++) {
        for (int v = v0; v < v1; v++)
          ASSERT_NEAR(ls[(size_t)t * (v1 - v0) + (v - v0)], lf[(size_t)t * V + v], 1e-5)
              << "token " << t << " id " << v;
        parts[t].push_back(topk_lse(ls.data() + (size_t)t * (v1 - v0), v0, v1, 8));
      }
    }
    for (int t = 0; t < T; t++) {
      const SliceTopK whole = topk_lse(lf.data() + (size_t)t * V, 0, V, 8);
      const SliceTopK merged = merge_topk(parts[t], 8);
      EXPECT_EQ(merged.ids, whole.ids);
      EXPECT_EQ(merged.logits, whole.logits);
      EXPECT_NEAR(merged.lse, whole.lse, 1e-9 * std::fabs(whole.lse) + 1e-9);
      for (int32_t id : merged.ids) EXPECT_LT(id, V);
      double p = 0;  // exact probabilities from the merge
      for (float l : merged.logits) p += std::exp(l - merged.lse);
      EXPECT_GT(p, 0.0);
      EXPECT_LE(p, 1.0 + 1e-9);
    }
  }
  // a slice reaching into the padding rows is only possible through the tensor's rows;
  // shards never ask for it, and a slice past the tensor is refused
  std::vector<float> junk(400);
  EXPECT_THROW(lm_head_logits(te, xn.data(), 1, 300, 321, junk.data(), Kernel::Simd), Error);

  // softcap: tanh(x/c)*c bounds every logit by c
  std::vector<float> capped(V);
  lm_head_logits(te, xn.data(), 1, 0, V, capped.data(), Kernel::Reference, 0.5f);
  for (float f : capped) EXPECT_LE(std::fabs(f), 0.5f);
}

TEST(VocabSlices, TiedEmbeddingFallback) {
  // Tie: drop output_weight, make token_embd the lm_head: same logits as when output_weight
  // is replaced by a copy of token_embd.
  const Model& m = synth(llama_gqa("Q8_0"));
  ASSERT_NE(m.find("output_weight"), nullptr);
  Model tied = m;
  tied.tensors.erase("output_weight");
  EXPECT_EQ(&lm_head_tensor(tied), tied.find("token_embd_weight"));
  Model copy = m;
  Tensor t = m.get("token_embd_weight");
  t.name = "output_weight";
  copy.tensors["output_weight"] = t;
  const std::vector<int32_t> prompt = {1, 17, 250, 99, 3};
  EngineOptions eo;
  eo.n_ctx = 16;
  Engine a(tied, eo), b(copy, eo), u(m, eo);
  const float* la = a.eval(prompt.data(), 5);
  const float* lb = b.eval(prompt.data(), 5);
  for (int i = 0; i < a.n_logits(); i++) ASSERT_EQ(la[i], lb[i]);
  const float* lu = u.eval(prompt.data(), 5);  // and the untied model's differ (a real tie)
  EXPECT_GT(max_diff(la, lu, a.n_logits(), "tied vs untied"), 0.1);
}

}  // namespace
