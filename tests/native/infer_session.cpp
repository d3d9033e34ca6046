// Session behaviour: chunked prefill == single shot, KV truncate + re-decode, the
// fluid-mode phase sequence == the Engine, and errors for bad input.
#include <cmath>
#include <cstring>
#include <optional>
#include <set>

#include "local_mesh.h"
#include "infer_util.h"
#include "kernels/quant.h"

using namespace infer_test;
using namespace knot;

namespace {

const char* kQ8 = "stories260K-pad256-llama-q8_0.gguf";
const char* kQwen = "stories260K-pad256-qwen2-q4_k_m.gguf";

std::vector<int32_t> long_prompt(int n) {
  // the reference continuation makes a natural sequence; repeat it to length n
  std::vector<int32_t> ids = json_ids(reference()["models"]["stories260K.gguf"]["promptTokenIds"]);
  const auto cont = json_ids(reference()["models"]["stories260K.gguf"]["exactFloat64"]["tokenIds"]);
  while ((int)ids.size() < n) ids.push_back(cont[ids.size() % cont.size()]);
  return ids;
}

void expect_logits_close(const float* a, const float* b, int n, double tol, const std::string& what) {
  double worst = 0;
  for (int i = 0; i < n; i++) worst = std::max(worst, (double)std::fabs(a[i] - b[i]));
  EXPECT_LE(worst, tol) << what;
}

class Chunked : public ::testing::TestWithParam<std::tuple<const char*, Mode>> {};

TEST_P(Chunked, ChunkSizeDoesNotChangeResult) {
  const std::string path = model_path(std::get<0>(GetParam()));
  REQUIRE_SHARED_MODEL(path);
  Model m = load_model_file(path);
  const auto prompt = long_prompt(40);
  std::vector<float> base;
  std::vector<int32_t> base_ids;
  for (int chunk : {64, 1, 7, 16}) {
    EngineOptions eo;
    eo.mode = std::get<1>(GetParam());
    eo.n_ctx = 64;
    eo.chunk = chunk;
    Engine e(m, eo);
    GreedyRun r = greedy(e, prompt, 8);
    if (base.empty()) {
      base = r.logits[0];
      base_ids = r.ids;
      continue;
    }
    expect_logits_close(r.logits[0].data(), base.data(), e.n_logits(), 1e-4,
                        "chunk " + std::to_string(chunk) + " vs single shot");
    EXPECT_EQ(r.ids, base_ids) << "chunk " << chunk;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, Chunked,
                         ::testing::Combine(::testing::Values("stories260K.gguf", kQ8, kQwen),
                                            ::testing::Values(Mode::Reference, Mode::Fast)));

TEST(KvCache, TruncateThenRedecodeReproduces) {
  const std::string path = model_path(kQ8);
  REQUIRE_SHARED_MODEL(path);
  Model m = load_model_file(path);
  EngineOptions eo;
  eo.n_ctx = 64;
  Engine e(m, eo);
  const auto prompt = long_prompt(5);
  GreedyRun r = greedy(e, prompt, 12);
  ASSERT_EQ(e.n_pos(), 5 + 11);
  // back to prompt + 4 generated tokens, then feed the same continuation again
  e.truncate(5 + 4);
  EXPECT_EQ(e.n_pos(), 9);
  for (int i = 4; i < 11; i++) {
    const float* lg = e.eval(&r.ids[i], 1);
    expect_logits_close(lg, r.logits[i + 1].data(), e.n_logits(), 0,
                        "re-decode step " + std::to_string(i + 1));
  }
  // a different token after truncation changes the continuation (the cache really moved)
  e.truncate(9);
  int32_t other = r.ids[4] == 300 ? 301 : 300;
  const float* lg = e.eval(&other, 1);
  double diff = 0;
  for (int i = 0; i < e.n_logits(); i++) diff += std::fabs(lg[i] - r.logits[5][i]);
  EXPECT_GT(diff, 1.0);
}

TEST(KvCache, MemoryFigureAndErrors) {
  ModelConfig c;
  c.n_layer = 4;
  c.n_head = 8;
  c.n_head_kv = 2;
  c.head_dim = 16;
  c.n_embd = 128;
  EXPECT_EQ(kv_bytes_per_token(16, 4, 2, KvType::F16), 2u * 4 * 2 * 16 * 2);
  KvCache kv(c, 1, 3, 10, KvType::F16);
  EXPECT_EQ(kv.bytes(), 10 * kv_bytes_per_token(16, 2, 2, KvType::F16));
  std::vector<float> k(3 * 32), v(3 * 32);
  for (size_t i = 0; i < k.size(); i++) k[i] = 0.25f * (float)i, v[i] = -0.5f * (float)i;
  kv.append(1, 0, 3, k.data(), v.data());
  EXPECT_EQ(kv.n_pos(1), 3);
  EXPECT_EQ(kv.n_pos(), 0);  // layer 2 holds nothing yet
  std::vector<float> out(3 * 16);
  kv.read_k(1, 1, 3, out.data());  // head 1: elements 16..31 of each row
  for (int t = 0; t < 3; t++)
    for (int d = 0; d < 16; d++) EXPECT_EQ(out[t * 16 + d], k[t * 32 + 16 + d]);  // exact in F16
  kv.read_v(1, 0, 3, out.data());
  for (int t = 0; t < 3; t++)
    for (int d = 0; d < 16; d++) EXPECT_EQ(out[t * 16 + d], v[t * 32 + d]);

  // F16 storage round trip == quant.h's fp16 conversion, incl. subnormals, -0, max, Inf
  {
    KvCache h(c, 0, 1, 2, KvType::F16);
    std::vector<float> kk(32), vv(32, 0.f);
    const float vals[] = {1e-6f, -3e-7f, 6.0e-8f, -0.f, 65504.f, -65504.f, 1e6f, 0.1f, -2.5f,
                          3.14159f, 1e-4f, -6.1e-5f, 1.f / 3, 100.25f, -1e-8f, 7.f};
    for (int i = 0; i < 32; i++) kk[i] = vals[i % 16] * (i < 16 ? 1.f : -1.f);
    h.append(0, 0, 1, kk.data(), vv.data());
    std::vector<float> back(16);
    for (int head = 0; head < 2; head++) {
      h.read_k(0, head, 1, back.data());
      for (int d = 0; d < 16; d++) {
        const float want = fp16_to_fp32(fp32_to_fp16(kk[head * 16 + d]));
        EXPECT_EQ(std::signbit(back[d]), std::signbit(want)) << kk[head * 16 + d];
        EXPECT_EQ(back[d], want) << kk[head * 16 + d];  // Inf == Inf for 1e6
      }
    }
  }

  auto expect_error = [](auto fn, const char* needle) {
    try {
      fn();
      ADD_FAILURE() << "expected an error containing '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error([&] { kv.append(1, 5, 1, k.data(), v.data()); }, "holds 3 positions");
  expect_error([&] { kv.append(0, 0, 1, k.data(), v.data()); }, "layers [1,3)");
  expect_error([&] { kv.append(2, 0, 11, k.data(), v.data()); }, "context of 10");
  expect_error([&] { kv.read_k(1, 0, 4, out.data()); }, "holds 3");
  expect_error([&] { KvCache(c, 0, 4, 1000, KvType::F16, 100000); },
               "needs 512000 bytes (1000 positions x 512 bytes/token, F16");
  expect_error([&] { KvCache(c, 0, 4, 1000, KvType::F16, 100000); }, "budget is 100000 bytes");
  kv.truncate(1);
  EXPECT_EQ(kv.n_pos(1), 1);
  kv.free();
  EXPECT_EQ(kv.bytes(), 0u);
  expect_error([&] { kv.append(1, 1, 1, k.data(), v.data()); }, "freed");
}

// Fluid mode: a station loads one phase's tensors, runs it, and drops them. Running the
// model phase by phase from LayerWeights holding only that phase's tensors equals the
// Engine's logits.
TEST(FluidPhases, MatchEngine) {
  const std::string path = model_path(kQwen);
  REQUIRE_SHARED_MODEL(path);
  Model m = load_model_file(path);
  const ModelConfig& c = m.config;
  const auto prompt = long_prompt(6);
  const int T = (int)prompt.size(), E = c.n_embd;
  ForwardOptions fo = forward_options_for(Mode::Fast);

  KvCache kv(c, 0, c.n_layer, 16, fo.kv_type);
  Workspace ws;
  std::vector<float> x(T * E), d(T * E), h(T * c.n_ff);
  embed_rows(m.get("token_embd_weight"), prompt.data(), T, 0, c.n_vocab, c.n_vocab, x.data());
  for (int l = 0; l < c.n_layer; l++) {
    const LayerWeights all = layer_weights(m, l);
    LayerWeights p;  // only what the phase needs
    p.layer = l;
    p.attn_norm = all.attn_norm, p.attn_q = all.attn_q, p.attn_k = all.attn_k, p.attn_v = all.attn_v;
    p.attn_output = all.attn_output, p.attn_q_bias = all.attn_q_bias;
    p.attn_k_bias = all.attn_k_bias, p.attn_v_bias = all.attn_v_bias;
    attn(c, p, kv, 0, x.data(), T, d.data(), fo, ws);
    for (int i = 0; i < T * E; i++) x[i] += d[i];
    p = LayerWeights{};
    p.layer = l, p.ffn_norm = all.ffn_norm, p.ffn_gate = all.ffn_gate;
    ffn_gate(c, p, x.data(), T, h.data(), fo, ws);
    p = LayerWeights{};
    p.layer = l, p.ffn_norm = all.ffn_norm, p.ffn_up = all.ffn_up;
    ffn_up(c, p, x.data(), T, h.data(), fo, ws);
    p = LayerWeights{};
    p.layer = l, p.ffn_down = all.ffn_down;
    ffn_down(c, p, h.data(), T, d.data(), fo, ws);
    for (int i = 0; i < T * E; i++) x[i] += d[i];
  }
  std::vector<float> xn(E), logits(c.n_vocab);
  output_norm(c, m.get("output_norm_weight"), x.data() + (T - 1) * E, 1, xn.data(), ws);
  lm_head_logits(lm_head_tensor(m), xn.data(), 1, 0, c.n_vocab, logits.data(), fo.kernel);

  EngineOptions eo;
  eo.n_ctx = 16;
  Engine e(m, eo);
  const float* lg = e.eval(prompt.data(), T);
  expect_logits_close(logits.data(), lg, c.n_vocab, 1e-5, "phase-by-phase vs Engine");
}

// ---- bad input ---------------------------------------------------------------------

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(BadInput, PromptLongerThanContext) {
  const std::string path = model_path("stories260K.gguf");
  REQUIRE_SHARED_MODEL(path);
  Model m = load_model_file(path);
  Tokenizer tok(m.tokenizer);
  EngineOptions eo;
  eo.n_ctx = 8;
  Engine e(m, eo);
  GenerateParams gp;
  const std::string msg = error_of([&] { e.generate(tok, long_prompt(9), gp); });
  EXPECT_NE(msg.find("prompt has 9 tokens but the context holds 8"), std::string::npos) << msg;
  // eval past the context: nothing is appended
  const auto p = long_prompt(6);
  e.eval(p.data(), 6);
  const std::string m2 = error_of([&] { e.eval(p.data(), 3); });
  EXPECT_NE(m2.find("exceed the context of 8"), std::string::npos) << m2;
  EXPECT_EQ(e.n_pos(), 6);
}

TEST(BadInput, TokenIdOutsideVocab) {
  const std::string path = model_path("stories260K.gguf");
  REQUIRE_SHARED_MODEL(path);
  Model m = load_model_file(path);
  Engine e(m, EngineOptions{});
  std::vector<int32_t> ids = {1, 403, 512};
  std::string msg = error_of([&] { e.eval(ids.data(), 3); });
  EXPECT_NE(msg.find("token 2 has id 512, outside the vocabulary [0,512)"), std::string::npos) << msg;
  ids[2] = -1;
  msg = error_of([&] { e.eval(ids.data(), 3); });
  EXPECT_NE(msg.find("id -1"), std::string::npos) << msg;
  EXPECT_EQ(e.n_pos(), 0);
}

TEST(BadInput, KvBudgetExceeded) {
  const std::string path = model_path("stories260K.gguf");
  REQUIRE_SHARED_MODEL(path);
  Model m = load_model_file(path);
  EngineOptions eo;
  eo.n_ctx = 2048;
  eo.kv_budget = 1 << 20;
  // 2 * 5 layers * 4 KV heads * 8 dims * 2 bytes = 640 B/token; 2048 tokens = 1310720 B
  const std::string msg = error_of([&] { Engine e(m, eo); });
  EXPECT_NE(msg.find("needs 1310720 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("budget is 1048576 bytes"), std::string::npos) << msg;
  eo.n_ctx = 1024;
  Engine ok(m, eo);
  EXPECT_EQ(ok.kv().bytes(), 655360u);
}

TEST(BadInput, MissingTensorNamesLayerPhaseTensor) {
  const std::string path = model_path("stories260K.gguf");
  REQUIRE_SHARED_MODEL(path);
  Model m = load_model_file(path);
  Model broken = m;
  broken.tensors.erase("blk_2_ffn_up_weight");
  std::string msg = error_of([&] { Engine e(broken, EngineOptions{}); });
  EXPECT_NE(msg.find("missing tensor blk_2_ffn_up_weight (layer 2, phase ffn_up)"), std::string::npos)
      << msg;
  broken = m;
  broken.tensors.erase("blk_4_attn_k_weight");
  msg = error_of([&] { Engine e(broken, EngineOptions{}); });
  EXPECT_NE(msg.find("missing tensor blk_4_attn_k_weight (layer 4, phase attn)"), std::string::npos)
      << msg;
  // the phase functions check too (fluid callers fill LayerWeights themselves)
  LayerWeights w = layer_weights(m, 3);
  w.ffn_down = nullptr;
  Workspace ws;
  std::vector<float> h(m.config.n_ff), out(m.config.n_embd);
  msg = error_of([&] { ffn_down(m.config, w, h.data(), 1, out.data(), ForwardOptions{}, ws); });
  EXPECT_NE(msg.find("missing tensor blk_3_ffn_down_weight (layer 3, phase ffn_down)"),
            std::string::npos)
      << msg;
  // wrong shape: attn_q of another size
  Model bad = m;
  bad.tensors["blk_0_attn_q_weight"] = m.get("blk_0_ffn_gate_weight");
  msg = error_of([&] {
    Engine e(bad, EngineOptions{});
    int32_t bos = 1;
    e.eval(&bos, 1);
  });
  EXPECT_NE(msg.find("blk_0_ffn_gate_weight has"), std::string::npos) << msg;
  EXPECT_NE(msg.find("phase attn"), std::string::npos) << msg;
}

}  // namespace

namespace {

// Corrupt weights (a NaN in the lm_head) are reported, never sampled from.
TEST(BadInput, NonFiniteLogitsAreAnError) {
  const std::string path = model_path("stories260K.gguf");
  REQUIRE_SHARED_MODEL(path);
  Model m = load_model_file(path);
  Tensor t = m.get("output_weight");
  t.bytes = alloc_aligned(t.size);
  std::memcpy(t.bytes.get(), m.get("output_weight").data(), t.size);
  const float nan = std::nanf("");
  std::memcpy(t.bytes.get() + 7 * 64 * sizeof(float), &nan, sizeof nan);  // row 7
  m.tensors["output_weight"] = t;
  Engine e(m, EngineOptions{});
  int32_t bos = 1;
  const std::string msg = error_of([&] { e.eval(&bos, 1); });
  EXPECT_NE(msg.find("non-finite logit for token 7 at position 0"), std::string::npos) << msg;
}

}  // namespace

namespace {

// The mesh shape in miniature: entry station [0,2), exit station [2,5), each with its own
// KV cache, and 3 vocab shards for embed + lm_head (top-k/lse merge), over a prefill and
// 15 greedy decode steps == the Engine's greedy run. (No head/FFN slices here: the padded
// heads of the shared pad256 models are zero; see SlicedMesh below for those.)
TEST(Mesh, StationsAndVocabShardsEqualEngine) {
  const std::string path = model_path(kQwen);
  REQUIRE_SHARED_MODEL(path);
  Model m = load_model_file(path);
  const ModelConfig& c = m.config;
  const int E = c.n_embd, V = c.n_vocab;
  const ForwardOptions fo = forward_options_for(Mode::Fast);
  const std::vector<int> cut = {0, 2, c.n_layer};
  const std::vector<int> vb = {0, 170, 300, V};

  std::vector<std::vector<LayerWeights>> lw(2);
  std::vector<KvCache> kv;
  std::vector<Workspace> ws(2);
  for (int s = 0; s < 2; s++) {
    for (int l = cut[s]; l < cut[s + 1]; l++) lw[s].push_back(layer_weights(m, l));
    kv.emplace_back(c, cut[s], cut[s + 1], 32, fo.kv_type);
  }
  Workspace wsv;
  const Tensor& te = m.get("token_embd_weight");
  const Tensor& lm = lm_head_tensor(m);

  auto step = [&](const std::vector<int32_t>& ids, int pos0) {
    const int T = (int)ids.size();
    std::vector<float> x(T * E, 0.f), part(T * E);
    for (size_t s = 0; s + 1 < vb.size(); s++) {  // embed: sum of shard partials
      embed_rows(te, ids.data(), T, vb[s], vb[s + 1], V, part.data());
      for (int i = 0; i < T * E; i++) x[i] += part[i];
    }
    for (int s = 0; s < 2; s++) forward_layers(c, lw[s].data(), kv[s], pos0, x.data(), T, fo, ws[s]);
    std::vector<float> xn(E);
    output_norm(c, m.get("output_norm_weight"), x.data() + (T - 1) * E, 1, xn.data(), wsv);
    std::vector<SliceTopK> parts;
    for (size_t s = 0; s + 1 < vb.size(); s++) {
      std::vector<float> lg(vb[s + 1] - vb[s]);
      lm_head_logits(lm, xn.data(), 1, vb[s], vb[s + 1], lg.data(), fo.kernel);
      parts.push_back(topk_lse(lg.data(), vb[s], vb[s + 1], 4));
    }
    return merge_topk(parts, 4);
  };

  EngineOptions eo;
  eo.n_ctx = 32;
  Engine e(m, eo);
  const auto prompt = long_prompt(5);
  const int steps = 16;
  GreedyRun ref = greedy(e, prompt, steps);

  SliceTopK t = step(prompt, 0);
  for (int i = 0; i < steps; i++) {
    ASSERT_EQ(t.ids[0], ref.ids[i]) << "step " << i;
    EXPECT_NEAR(t.logits[0], ref.logits[i][ref.ids[i]], 1e-4) << "step " << i;
    // lse of the merge == lse of the Engine's full logits
    SliceTopK full = topk_lse(ref.logits[i].data(), 0, V, 1);
    EXPECT_NEAR(t.lse, full.lse, 1e-3) << "step " << i;
    if (i + 1 < steps) t = step({t.ids[0]}, (int)prompt.size() + i);
  }
  EXPECT_EQ(kv[0].n_pos(), (int)prompt.size() + steps - 1);
  EXPECT_EQ(kv[1].n_pos(), (int)prompt.size() + steps - 1);
}

}  // namespace

namespace {

// ---- the mesh on synthetic models (every head, FFN column and vocab row non-zero) --------

// Layer stations, head/FFN slices inside each station, vocab shards: knot::LocalMesh
// (tests/native/local_mesh.h), each (station, head slice) a knot::Station with its own KV cache of the
// station's layers and the slice's KV heads; partials of head slices, FFN slices and vocab
// shards are summed (embeddings) or concatenated and merged (logits, top-k + lse). FFN
// slices alternate between the separate gate/up phases and the combined call.
LocalMesh sliced_mesh(const Model& m, const MeshPlan& p, ForwardOptions fo, int n_ctx) {
  MeshOptions o;
  o.fo = fo;
  o.n_ctx = n_ctx;
  o.k = 8;
  o.ffn_combined = [](int, int i) { return i % 2 == 1; };
  return LocalMesh(m, p, o);
}

constexpr double kCalibrated = -1;  // rel_tol: 1.5 x the Engine's own Fast-vs-Reference gap

// Prefill 8 tokens (mesh: chunks of 5 + 3; Engine: one call), then 16 decode steps; both
// are fed the Engine's greedy token (or forced[i]: a tied model's greedy run just repeats
// its last token). At every step:
//  * the shards' merged top-8 and lse == top-8 and lse of the mesh's assembled logits;
//  * max |mesh - Engine| / max |logit| <= rel_tol; with rel_tol == kCalibrated (unaligned
//    cuts in Fast mode: f32 vs quantized activations) the bound is 1.5 x the same figure
//    for an Engine in Reference mode fed the same tokens, capped at 5e-2;
//  * exact (rel_tol given): merged top-8 ids == the Engine's, greedy token == the Engine's;
//    calibrated: greedy token == the Engine's wherever the Engine's top-2 gap exceeds
//    twice the step's logit difference (then the argmax cannot move; at least 8 of
//    16 steps must be that decisive).
// Returns the Engine's greedy ids.
std::vector<int32_t> check_mesh(const Model& m, const MeshPlan& plan, Mode mode, double rel_tol,
                                const std::string& what, const std::vector<int32_t>& forced = {}) {
  const ModelConfig& c = m.config;
  const int V = c.n_vocab, steps = 16;
  const bool exact = rel_tol != kCalibrated;
  const std::vector<int32_t> prompt = {1, 17, 250, 99, 3, 288, 42, 160};
  const int P = (int)prompt.size();
  EngineOptions eo;
  eo.mode = mode;
  eo.n_ctx = 32;
  Engine e(m, eo);
  EXPECT_EQ(e.n_logits(), V);
  eo.mode = Mode::Reference;
  std::optional<Engine> eref;
  if (!exact) eref.emplace(m, eo);
  LocalMesh mesh = sliced_mesh(m, plan, forward_options_for(mode), 32);

  const float* want = e.eval(prompt.data(), P);
  const float* wref = exact ? nullptr : eref->eval(prompt.data(), P);
  mesh.step(prompt.data(), 5, 0);
  MeshStep o = mesh.step(prompt.data() + 5, P - 5, 5);
  double worst = 0, noise = 0;
  int decisive = 0;
  std::vector<int32_t> greedy_ids;
  for (int i = 0; i < steps; i++) {
    const std::string at = what + " step " + std::to_string(i);
    const double mx = max_abs(want, V);
    const double diff = max_diff(o.logits.data(), want, V, at);
    worst = std::max(worst, diff / mx);
    if (!exact) noise = std::max(noise, max_diff(wref, want, V, at + " reference") / mx);
    // the merge is exact whatever the kernels: shards' top-k + lse == the assembled slice
    const SliceTopK own = topk_lse(o.logits.data(), 0, V, 8);
    EXPECT_EQ(o.top.ids, own.ids) << at;
    EXPECT_NEAR(o.top.lse, own.lse, 1e-9 * std::fabs(own.lse) + 1e-9) << at;
    const SliceTopK full = topk_lse(want, 0, V, 2);
    const int32_t g = full.ids[0];
    greedy_ids.push_back(g);
    if (exact) {
      EXPECT_EQ(o.top.ids, topk_lse(want, 0, V, 8).ids) << at;
      EXPECT_NEAR(o.top.lse, full.lse, rel_tol * mx + 1e-6) << at;
      EXPECT_EQ(o.top.ids[0], g) << at << ": greedy token";
    } else if (full.logits[0] - full.logits[1] > 2 * diff) {
      decisive++;
      EXPECT_EQ(o.top.ids[0], g) << at << ": greedy token (top-2 gap "
                                 << full.logits[0] - full.logits[1] << ", diff " << diff << ")";
    }
    if (i + 1 < steps) {
      const int32_t next = forced.empty() ? g : forced[i];
      want = e.eval(&next, 1);
      if (!exact) wref = eref->eval(&next, 1);
      o = mesh.step(&next, 1, P + i);
    }
  }
  report(what + " max |mesh - engine| / max |logit|", worst);
  if (!exact) {
    report(what + " engine fast-vs-reference", noise);
    EXPECT_GT(noise, 0.0) << what;
    rel_tol = std::min(5e-2, 1.5 * noise);
    EXPECT_GE(decisive, 8) << what << ": too few decisive steps to compare tokens";
  }
  EXPECT_LE(worst, rel_tol) << what;
  if (forced.empty()) {
    std::set<int32_t> distinct(greedy_ids.begin(), greedy_ids.end());
    EXPECT_GE(distinct.size(), 3u) << what << ": degenerate continuation, the check would be weak";
  }
  for (const auto& range : mesh.stations())
    for (const Station& st : range) EXPECT_EQ(st.n_pos(), P + steps - 1) << what;
  return greedy_ids;
}

// Q4_K_M (Q4_K, Q6_K attn_v/ffn_down/output), qwen2 biases + Neox RoPE, 4 layers on 2
// stations; cuts on K-quant blocks (8 heads = 256 columns, 256 FFN columns): Fast mode
// reproduces the Engine up to float summation order (which may flip the rounding of a
// quantized activation: bound 1e-4 of max |logit|).
TEST(SlicedMesh, AlignedQ4KMFastEqualsEngine) {
  const Model& m = synth(qwen_wide("Q4_K_M", 4));
  ASSERT_EQ(m.get("blk_3_attn_v_weight").type, DType::Q6_K);
  ASSERT_EQ(m.get("blk_1_attn_q_weight").type, DType::Q4_K);
  MeshPlan p;
  p.layers = {0, 2, 4};
  p.heads = {{0, 16}, {0, 8, 16}};
  p.ffn = {{0, 256, 512}, {0, 256, 512}};
  p.vocab = {0, 97, 211, 300};
  check_mesh(m, p, Mode::Fast, 1e-4, "qwen2 Q4_K_M fast aligned");
}

// Qwen3 (per-head q/k norms, head_dim 128 != hidden / heads, no biases): layer ranges x
// head slices x FFN slices x vocab shards == the Engine. Fast: cuts on K-quant blocks
// (2 heads = 256 columns); Reference: unaligned FFN cuts too.
TEST(SlicedMesh, Qwen3LayerHeadFfnVocabSlicesEqualEngine) {
  const Model& m = synth(qwen3_wide("Q4_K_M", 4));
  ASSERT_EQ(m.config.head_dim, 128);
  MeshPlan p;
  p.layers = {0, 2, 4};
  p.heads = {{0, 4}, {0, 2, 4}};
  p.ffn = {{0, 256, 512}, {0, 256, 512}};
  p.vocab = {0, 97, 211, 300};
  check_mesh(m, p, Mode::Fast, 1e-4, "qwen3 Q4_K_M fast aligned");
  p.layers = {0, 1, 4};
  p.ffn = {{0, 100, 512}, {0, 300, 301, 512}};
  check_mesh(m, p, Mode::Reference, 1e-5, "qwen3 Q4_K_M reference unaligned");
}

// Unaligned cuts (4-head = 128-column slices inside K-quant blocks, odd FFN columns)
// take the dequantized gather; with the Reference kernels (f32 activations everywhere)
// the mesh still equals the Engine up to float summation order.
// The coordinator's loop natively: a Generator sampling from the mesh's merged top-k
// (k = 8 >= top-k 8) gives the Engine's ids, text and stop reason; bad plans are refused.
TEST(SlicedMesh, GeneratorOverMergedTopKEqualsEngineGenerate) {
  const Model& m = synth(qwen_wide("Q4_K_M", 4));
  MeshPlan p;
  p.layers = {0, 2, 4};
  p.heads = {{0, 16}, {0, 8, 16}};
  p.ffn = {{0, 256, 512}, {0, 256, 512}};
  p.vocab = {0, 97, 211, 300};
  Tokenizer tok(m.tokenizer);
  GenerateParams gp;
  gp.n_predict = 20;
  gp.ignore_eos = true;
  gp.sampling.temperature = 0.9f;
  gp.sampling.top_k = 8;
  gp.sampling.seed = 21;
  EngineOptions eo;
  eo.mode = Mode::Reference;
  eo.n_ctx = 32;
  Engine e(m, eo);
  const std::vector<int32_t> prompt = {1, 17, 250, 99, 3};
  const GenerateResult want = e.generate(tok, prompt, gp);
  LocalMesh mesh = sliced_mesh(m, p, forward_options_for(Mode::Reference), 32);
  Generator gen(tok, gp, m.config.n_vocab, 32);
  gen.start(prompt.data(), (int)prompt.size());
  MeshStep o = mesh.step(prompt.data(), (int)prompt.size(), 0);
  for (int pos = (int)prompt.size(); !gen.done(); pos++) {
    const GenStep s = gen.step(o.top);
    if (!s.done) o = mesh.step(&s.id, 1, pos);
  }
  EXPECT_EQ(gen.ids(), want.ids);
  EXPECT_EQ(gen.text(), want.text);
  EXPECT_EQ(gen.reason(), want.stop_reason);
  EXPECT_GE(std::set<int32_t>(want.ids.begin(), want.ids.end()).size(), 3u);

  MeshPlan bad = p;
  bad.heads[1] = {0, 3, 16};
  EXPECT_THROW(check_plan(m.config, bad), Error);
  bad = p;
  bad.vocab = {0, 97, 320};
  try {
    check_plan(m.config, bad);
    ADD_FAILURE() << "padding rows accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("vocab must run from 0 to 300"), std::string::npos) << err.what();
  }
}

TEST(SlicedMesh, UnalignedQ4KMReferenceEqualsEngine) {
  const Model& m = synth(qwen_wide("Q4_K_M", 4));
  MeshPlan p;
  p.layers = {0, 1, 4};
  p.heads = {{0, 4, 16}, {0, 4, 8, 12, 16}};
  p.ffn = {{0, 100, 512}, {0, 300, 301, 512}};
  p.vocab = {0, 1, 150, 300};
  check_mesh(m, p, Mode::Reference, 1e-5, "qwen2 Q4_K_M reference unaligned");
}

// The same unaligned cuts in Fast mode: within the activation-quantization noise.
TEST(SlicedMesh, UnalignedFastWithinQuantizationNoise) {
  MeshPlan p;
  p.layers = {0, 1, 4};
  p.heads = {{0, 4, 16}, {0, 4, 8, 12, 16}};
  p.ffn = {{0, 100, 512}, {0, 300, 301, 512}};
  p.vocab = {0, 1, 150, 300};
  check_mesh(synth(qwen_wide("Q4_K_M", 4)), p, Mode::Fast, kCalibrated, "qwen2 Q4_K_M fast unaligned");
  p.layers = {0, 2, 4};
  p.heads = {{0, 4, 8}, {0, 4, 8}};  // 128 columns: inside a Q6_K block
  check_mesh(synth(llama_gqa("Q6_K", 4)), p, Mode::Fast, kCalibrated, "llama Q6_K fast unaligned");
}

// Tied embeddings (lm_head = token_embd) with a tensor vocab padded to 320 rows whose
// padding rows are scaled up so they WOULD win the argmax if anything read them: shards
// [0,97) [97,211) [211,300) meet end to end, own no padding row, and the greedy tokens
// are the Engine's (all < 300). Decode feeds a fixed varied sequence: with tied random
// embeddings the greedy token is the last input token again.
TEST(SlicedMesh, TiedPaddedVocabQ8_0NeverSamplesPadding) {
  Model m = synth(llama_tied_padded("Q8_0", 4));
  const ModelConfig& c = m.config;
  const int E = c.n_embd, V = c.n_vocab;
  ASSERT_EQ(m.find("output_weight"), nullptr);
  Tensor te = m.get("token_embd_weight");
  ASSERT_EQ(te.nrows(), 320);
  {  // arm the padding rows: x40
    const size_t rb = row_bytes(te.type, E);
    auto bytes = alloc_aligned(te.size);
    std::memcpy(bytes.get(), te.data(), te.size);
    std::vector<float> row(E);
    for (int64_t r = V; r < te.nrows(); r++) {
      dequantize_row(te.type, bytes.get() + r * rb, row.data(), E);
      for (float& f : row) f *= 40.f;
      quantize_row(te.type, row.data(), bytes.get() + r * rb, E);
    }
    te.bytes = bytes;
    m.tensors["token_embd_weight"] = te;
  }
  MeshPlan p;
  p.layers = {0, 3, 4};
  p.heads = {{0, 4, 8}, {0, 8}};
  p.ffn = {{0, 64, 512}, {0, 96, 160, 512}};
  p.vocab = {0, 97, 211, V};
  std::vector<int32_t> forced;
  for (int i = 0; i < 16; i++) forced.push_back((37 * i + 11) % V);
  const auto ids = check_mesh(m, p, Mode::Fast, 1e-4, "llama tied padded Q8_0 fast", forced);
  for (int32_t id : ids) EXPECT_LT(id, V);

  // the trap is armed: over all 320 tensor rows the argmax would be a padding row
  EngineOptions eo;
  eo.n_ctx = 32;
  Engine e(m, eo);
  const std::vector<int32_t> prompt = {1, 17, 250, 99, 3, 288, 42, 160};
  e.eval(prompt.data(), (int)prompt.size());
  // recompute the last hidden state's logits over every tensor row
  KvCache kv(c, 0, c.n_layer, 16, KvType::F16);
  Workspace ws;
  std::vector<LayerWeights> lw;
  for (int l = 0; l < c.n_layer; l++) lw.push_back(layer_weights(m, l));
  std::vector<float> x(prompt.size() * E), xn(E), all(te.nrows());
  embed_rows(te, prompt.data(), (int)prompt.size(), 0, V, V, x.data());
  forward_layers(c, lw.data(), kv, 0, x.data(), (int)prompt.size(), forward_options_for(Mode::Fast), ws);
  output_norm(c, m.get("output_norm_weight"), x.data() + (prompt.size() - 1) * E, 1, xn.data(), ws);
  lm_head_logits(te, xn.data(), 1, 0, te.nrows(), all.data(), Kernel::Simd);
  EXPECT_GE(argmax(all.data(), (int)all.size()), V) << "padding rows would not win: the test is not armed";
  EXPECT_EQ(argmax(all.data(), V), argmax(e.logits(), V));
}

}  // namespace
