// infer_util.h — shared helpers for the infer_* tests: locating the shared models,
// reading reference-outputs.json, greedy decoding with per-step top-5 logits, seeded
// synthetic models (every head / FFN column / vocab row non-zero, unlike the shared
// pad256 models whose padded heads are all zero), error figures.
#pragma once
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "infer/generate.h"
#include "container/loader.h"
#include "container/synth.h"
#include "test_paths.h"

namespace infer_test {

inline std::string model_path(const std::string& file) {
  return knot_test::shared_models() + "/" + file;
}

inline bool have_file(const std::string& path) {
  std::ifstream f(path);
  return f.good();
}

// Skip locally, fail under CI, when the shared models are absent.
#define REQUIRE_SHARED_MODEL(path)                                              \
  do {                                                                          \
    if (!infer_test::have_file(path)) {                                         \
      if (std::getenv("CI")) FAIL() << "shared model missing under CI: " << (path); \
      GTEST_SKIP() << "shared model missing: " << (path);                       \
    }                                                                           \
  } while (0)

inline const nlohmann::json& reference() {
  static nlohmann::json j = [] {
    std::ifstream f(model_path("reference-outputs.json"));
    if (!f.good()) return nlohmann::json();
    return nlohmann::json::parse(f);
  }();
  return j;
}

inline std::vector<int32_t> json_ids(const nlohmann::json& a) {
  std::vector<int32_t> v;
  for (const auto& x : a) v.push_back(x.get<int32_t>());
  return v;
}

// Lowest id wins a tie.
inline int32_t argmax(const float* x, int n) {
  int32_t best = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[best]) best = i;
  return best;
}

inline std::vector<std::pair<int32_t, float>> top5(const float* x, int n) {
  std::vector<int32_t> idx(n);
  for (int i = 0; i < n; i++) idx[i] = i;
  std::partial_sort(idx.begin(), idx.begin() + 5, idx.end(),
                    [&](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
  std::vector<std::pair<int32_t, float>> r;
  for (int i = 0; i < 5; i++) r.push_back({idx[i], x[idx[i]]});
  return r;
}

struct GreedyRun {
  std::vector<int32_t> ids;
  std::vector<std::vector<float>> logits;  // per step, full [n_logits]
};

// Prefill prompt, then n greedy steps (argmax, no EOS stop).
inline GreedyRun greedy(knot::Engine& e, const std::vector<int32_t>& prompt, int n) {
  GreedyRun r;
  e.reset();
  const float* lg = e.eval(prompt.data(), (int)prompt.size());
  for (int i = 0; i < n; i++) {
    r.logits.emplace_back(lg, lg + e.n_logits());
    int32_t id = argmax(lg, e.n_logits());
    r.ids.push_back(id);
    if (i + 1 < n) lg = e.eval(&id, 1);
  }
  return r;
}

// ---- synthetic models --------------------------------------------------------------

inline std::string synth_key(const knot::SynthOptions& o) {
  return o.arch + "-e" + std::to_string(o.hidden) + "-l" + std::to_string(o.layers) + "-h" +
         std::to_string(o.heads) + "-kv" + std::to_string(o.kv_heads) + "-f" + std::to_string(o.ffn) +
         "-v" + std::to_string(o.vocab) + "-vt" + std::to_string(o.vocab_tensor) + "-" + o.type +
         "-s" + std::to_string(o.seed) + (o.tied ? "-tied" : "") +
         (o.head_dim ? "-hd" + std::to_string(o.head_dim) : "");
}

// The model synth_model writes for o, loaded (written to a temp .knot once per process,
// then removed; the Model owns its bytes).
inline const knot::Model& synth(const knot::SynthOptions& o) {
  static std::map<std::string, std::unique_ptr<knot::Model>> cache;
  const std::string key = synth_key(o);
  auto& slot = cache[key];
  if (!slot) {
    const std::string path =
        ::testing::TempDir() + "knot-infer-" + std::to_string(::getpid()) + "-" + key + ".knot";
    knot::synth_model(o, path);
    slot = std::make_unique<knot::Model>(knot::load_model_file(path));
    std::remove(path.c_str());
  }
  return *slot;
}

inline knot::SynthOptions synth_opts(const char* arch, int hidden, int layers, int heads, int kv_heads,
                                     int ffn, int vocab, const char* type, uint64_t seed = 7) {
  knot::SynthOptions o;
  o.arch = arch;
  o.hidden = hidden, o.layers = layers, o.heads = heads, o.kv_heads = kv_heads;
  o.ffn = ffn, o.vocab = vocab, o.type = type, o.seed = seed, o.ctx = 256;
  return o;
}

// The synthetic shapes shared by the infer_* tests (vocab 300: ids 0..299).
// llama GQA: 8 heads / 2 KV heads (group 4), head_dim 32: a KV group is 128 columns of
// attn_output = 4 Q8_0 blocks (aligned) = half a K-quant block (unaligned).
inline knot::SynthOptions llama_gqa(const char* type, int layers = 2) {
  return synth_opts("llama", 256, layers, 8, 2, 512, 300, type);
}
// qwen2 (Neox RoPE, q/k/v biases): 16 heads / 4 KV heads (group 4), head_dim 32, FFN 512:
// cuts at multiples of 8 heads / 256 FFN columns are on K-quant 256-blocks; cuts at 4
// heads (128 columns) or odd FFN columns are not.
inline knot::SynthOptions qwen_wide(const char* type, int layers = 2) {
  return synth_opts("qwen2", 512, layers, 16, 4, 512, 300, type);
}
// qwen3 (per-head q/k RMSNorm before Neox RoPE, no biases): head_dim 128 from
// attention.key_length, not hidden / heads = 64; 4 heads / 2 KV heads (group 2), so a
// KV group is 256 columns of attn_output = one K-quant block.
inline knot::SynthOptions qwen3_wide(const char* type, int layers = 2) {
  knot::SynthOptions o = synth_opts("qwen3", 256, layers, 4, 2, 512, 300, type);
  o.head_dim = 128;
  return o;
}
// Tied embeddings (no output.weight) and a tensor vocab padded past the tokenizer's (as
// qwen2.5: 151,936 tokens, 152,064 rows).
inline knot::SynthOptions llama_tied_padded(const char* type, int layers = 2) {
  knot::SynthOptions o = synth_opts("llama", 256, layers, 8, 2, 512, 300, type);
  o.vocab_tensor = 320;
  o.tied = true;
  return o;
}

// ---- error figures ---------------------------------------------------------------------

inline double l2(const float* x, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
  return std::sqrt(s);
}
inline double l2(const std::vector<float>& v) { return l2(v.data(), v.size()); }

inline double max_abs(const float* x, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) m = std::max(m, (double)std::fabs(x[i]));
  return m;
}
inline double max_abs(const std::vector<float>& v) { return max_abs(v.data(), v.size()); }

// max |a - b|; fails the test on a non-finite element (a NaN would compare as "close").
inline double max_diff(const float* a, const float* b, size_t n, const std::string& what) {
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) {
      ADD_FAILURE() << what << ": non-finite element " << i << " (" << a[i] << " vs " << b[i] << ")";
      return INFINITY;
    }
    worst = std::max(worst, (double)std::fabs((double)a[i] - b[i]));
  }
  return worst;
}

// Prints a figure so the error levels are visible in the test log (and greppable).
inline void report(const std::string& what, double value) {
  std::printf("[  figure  ] %s = %.3g\n", what.c_str(), value);
}

}  // namespace infer_test
