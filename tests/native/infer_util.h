// infer_util.h — shared helpers for the infer_* tests: locating the shared models,
// reading reference-outputs.json, greedy decoding with per-step top-5 logits.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "generate.h"
#include "model_io.h"

namespace infer_test {

inline std::string model_path(const std::string& file) {
  return std::string(KNOT_SHARED_MODELS) + "/" + file;
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

}  // namespace infer_test
