// Session behaviour: chunked prefill == single shot, KV truncate + re-decode, the
// fluid-mode phase sequence == the Engine, and errors for bad input.
#include <cmath>
#include <cstring>

#include "infer_util.h"
#include "quant.h"

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
// 4 greedy decode steps == the Engine's greedy run.
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
  GreedyRun ref = greedy(e, prompt, 5);

  SliceTopK t = step(prompt, 0);
  for (int i = 0; i < 5; i++) {
    ASSERT_EQ(t.ids[0], ref.ids[i]) << "step " << i;
    EXPECT_NEAR(t.logits[0], ref.logits[i][ref.ids[i]], 1e-4) << "step " << i;
    // lse of the merge == lse of the Engine's full logits
    SliceTopK full = topk_lse(ref.logits[i].data(), 0, V, 1);
    EXPECT_NEAR(t.lse, full.lse, 1e-3) << "step " << i;
    if (i + 1 < 5) t = step({t.ids[0]}, (int)prompt.size() + i);
  }
  EXPECT_EQ(kv[0].n_pos(), (int)prompt.size() + 4);
  EXPECT_EQ(kv[1].n_pos(), (int)prompt.size() + 4);
}

}  // namespace
