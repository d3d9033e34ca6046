// container_util.h — helpers for the container_* tests: temp paths, file bytes, a small
// in-memory model, and re-laying out a .knot from (JSON, payload) to build bad files.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <typeinfo>
#include <vector>

#include <unistd.h>

#include "container/knot.h"
#include "container/loader.h"
#include "container/synth.h"
#include "test_paths.h"

namespace ctest {

inline std::string tmp_path(const std::string& name) {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("knot-container-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  struct Cleanup {  // remove this process's files at exit
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  };
  static Cleanup cleanup;
  return (dir / name).string();
}

inline std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

inline void write_all(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary);
  f.write((const char*)b.data(), (std::streamsize)b.size());
}

// Runs f and returns the knot::Error message ("" when nothing was thrown; any other
// exception type fails the test).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const knot::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "non-knot exception " << typeid(e).name() << ": " << e.what();
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// Small synthetic model loaded back into memory (written as .knot through synth).
inline knot::Model small_model(const std::string& arch = "llama", const std::string& type = "Q4_K_M", uint64_t seed = 7) {
  knot::SynthOptions o;
  o.arch = arch;
  o.hidden = 256;
  o.layers = 2;
  o.heads = 8;
  o.kv_heads = 4;
  o.ffn = 512;
  o.vocab = 600;  // > 2 chunks of token_embd rows
  o.type = type;
  o.seed = seed;
  std::string p = tmp_path("small-" + arch + "-" + type + "-" + std::to_string(seed) + ".knot");
  knot::synth_model(o, p);
  return knot::load_model_file(p);
}

// The canonical layout around a given JSON text and payload.
inline std::vector<uint8_t> layout_knot(const std::string& json, const std::vector<uint8_t>& payload, uint16_t version = 1) {
  std::vector<uint8_t> out = {'K', 'N', 'O', 'T'};
  out.push_back((uint8_t)(version & 0xFF));
  out.push_back((uint8_t)(version >> 8));
  uint32_t n = (uint32_t)json.size();
  for (int i = 0; i < 4; i++) out.push_back((uint8_t)(n >> (8 * i)));
  out.insert(out.end(), json.begin(), json.end());
  while (out.size() % 4) out.push_back(0);
  out.push_back(0x40);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

struct Split {
  std::string json;
  std::vector<uint8_t> payload;
  uint64_t payload_offset;
};
inline Split split_knot(const std::vector<uint8_t>& b) {
  uint32_t n;
  std::memcpy(&n, b.data() + 6, 4);
  Split s;
  s.json.assign((const char*)b.data() + 10, n);
  s.payload_offset = ((10 + (uint64_t)n + 3) & ~3ull) + 1;
  s.payload.assign(b.begin() + (long)s.payload_offset, b.end());
  return s;
}

}  // namespace ctest
