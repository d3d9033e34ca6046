// text_util.h — helpers shared by the text_* tests: locating the shared models
// (skip when absent, FAIL when CI is set) and loading only their tokenizer.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "container/loader.h"
#include "text/vocab.h"
#include "test_paths.h"

namespace knot_test {

inline std::string shared_model(const std::string& name) {
  return knot_test::shared_models() + "/" + name;
}

// Usage: KNOT_REQUIRE_FILE(path); — skips locally, fails under CI.
#define KNOT_REQUIRE_FILE(path)                                                   \
  do {                                                                            \
    if (!std::filesystem::exists(path)) {                                         \
      if (std::getenv("CI")) FAIL() << "shared test file missing: " << (path);    \
      GTEST_SKIP() << "shared test file missing: " << (path);                     \
    }                                                                             \
  } while (0)

// Tokenizer of a shared model, loaded once per process (no tensor bytes).
inline const knot::Tokenizer& shared_tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<knot::Tokenizer>> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    knot::LoadOptions opts;
    opts.load_tensors = false;
    knot::Model m = knot::load_model_file(shared_model(name), opts);
    it = cache.emplace(name, std::make_unique<knot::Tokenizer>(m.tokenizer)).first;
  }
  return *it->second;
}

}  // namespace knot_test
