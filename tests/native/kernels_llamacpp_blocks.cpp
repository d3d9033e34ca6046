// Quantizers and dot kernels against blocks written by llama.cpp itself.
// The shared "pad256" models are stories260K zero-padded from 64 to 256 columns and then
// quantized by llama.cpp (llama_model_quantize). token_embd is [512 rows x 256] whose
// first 64 columns are stories260K.gguf's F32 token_embd rows. So quantizing
// [original 64 values, 192 zeros] with our reference quantizer must reproduce llama.cpp's
// bytes, and our dequantize must read llama.cpp's blocks back close to the F32 source.
// (A tiny GGUF reader lives here so this test links only knot_kernels.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "test_paths.h"

using namespace knot;

namespace {

struct GgufTensor {
  uint32_t type = 0;
  std::vector<uint64_t> dims;
  uint64_t offset = 0;
};

struct Gguf {
  std::vector<uint8_t> bytes;
  size_t data_start = 0;
  std::map<std::string, GgufTensor> tensors;
  const uint8_t* data(const GgufTensor& t) const { return bytes.data() + data_start + t.offset; }
};

struct Reader {
  const std::vector<uint8_t>& b;
  size_t p = 0;
  template <typename T>
  T get() {
    if (p + sizeof(T) > b.size()) throw std::runtime_error("gguf: truncated");
    T v;
    std::memcpy(&v, b.data() + p, sizeof(T));
    p += sizeof(T);
    return v;
  }
  std::string str() {
    const uint64_t n = get<uint64_t>();
    if (p + n > b.size()) throw std::runtime_error("gguf: truncated string");
    std::string s((const char*)b.data() + p, n);
    p += n;
    return s;
  }
  void skip_value(uint32_t type) {
    static const int sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, -1, -1, 8, 8, 8};
    if (type == 8) {
      str();
    } else if (type == 9) {
      const uint32_t et = get<uint32_t>();
      const uint64_t n = get<uint64_t>();
      for (uint64_t i = 0; i < n; i++) skip_value(et);
    } else if (type < 13 && sizes[type] > 0) {
      p += sizes[type];
    } else {
      throw std::runtime_error("gguf: bad value type");
    }
  }
};

bool load_gguf(const std::string& path, Gguf& g) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  g.bytes.assign(std::istreambuf_iterator<char>(f), {});
  Reader r{g.bytes};
  if (r.get<uint32_t>() != 0x46554747u) throw std::runtime_error("not gguf");  // "GGUF"
  r.get<uint32_t>();  // version
  const uint64_t nt = r.get<uint64_t>(), nkv = r.get<uint64_t>();
  uint64_t align = 32;
  for (uint64_t i = 0; i < nkv; i++) {
    const std::string key = r.str();
    const uint32_t type = r.get<uint32_t>();
    if (key == "general.alignment" && type == 4) {
      align = r.get<uint32_t>();
    } else {
      r.skip_value(type);
    }
  }
  for (uint64_t i = 0; i < nt; i++) {
    const std::string name = r.str();
    GgufTensor t;
    const uint32_t nd = r.get<uint32_t>();
    for (uint32_t d = 0; d < nd; d++) t.dims.push_back(r.get<uint64_t>());
    t.type = r.get<uint32_t>();
    t.offset = r.get<uint64_t>();
    g.tensors[name] = t;
  }
  g.data_start = (r.p + align - 1) / align * align;
  return true;
}

const std::string kDir = knot_test::shared_models();

// F32 source rows of a stories260K matrix ([rows x cols]), zero-padded to 256 columns.
std::vector<float> padded_rows(const Gguf& src, const std::string& name, int64_t* rows_out) {
  const GgufTensor& t = src.tensors.at(name);
  EXPECT_EQ(t.type, 0u) << name;
  const int64_t cols = (int64_t)t.dims[0], rows = (int64_t)t.dims[1];
  EXPECT_LE(cols, 256);
  std::vector<float> out((size_t)rows * 256, 0.f);
  const float* p = (const float*)src.data(t);
  for (int64_t r = 0; r < rows; r++) std::memcpy(&out[r * 256], p + r * cols, cols * 4);
  *rows_out = rows;
  return out;
}

// Under CI the shared models exist: their absence is a failure, locally a skip.
#define MODELS_MISSING()                                                              \
  do {                                                                                \
    if (std::getenv("CI")) FAIL() << "shared models not found in " << kDir;           \
    GTEST_SKIP() << "shared models not found in " << kDir;                            \
  } while (0)

class LlamaCppBlocks : public ::testing::TestWithParam<std::pair<const char*, DType>> {};

}  // namespace

TEST_P(LlamaCppBlocks, OurQuantizerReproducesLlamaCppBytes) {
  const auto [file, type] = GetParam();
  Gguf src, q;
  if (!load_gguf(kDir + "/stories260K.gguf", src) || !load_gguf(kDir + "/" + file, q))
    MODELS_MISSING();
  // token_embd (64 real columns), ffn_down (172 real columns: 6 of 8 Q4_K sub-blocks),
  // ffn_gate (64 real columns). The original rows come first in the padded tensors.
  int checked = 0;
  for (const char* name : {"token_embd.weight", "blk.0.ffn_down.weight", "blk.1.ffn_down.weight",
                           "blk.3.ffn_gate.weight"}) {
    const GgufTensor& t = q.tensors.at(name);
    const DType wt = dtype_from_id(t.type, name);
    ASSERT_EQ(t.dims[0], 256u) << name;
    int64_t rows = 0;
    const std::vector<float> x = padded_rows(src, name, &rows);
    const int64_t cols = 256;
    const size_t rb = row_bytes(wt, cols, name);
    std::vector<uint8_t> mine(rb);
    std::vector<float> deq(cols);
    int64_t identical_rows = 0;
    double e2 = 0, s2 = 0;
    for (int64_t r = 0; r < rows; r++) {
      const uint8_t* theirs = q.data(t) + rb * r;
      quantize_row(wt, &x[r * cols], mine.data(), cols);
      identical_rows += std::memcmp(mine.data(), theirs, rb) == 0;
      dequantize_row(wt, theirs, deq.data(), cols);
      for (int64_t c = 0; c < cols; c++) {
        e2 += ((double)deq[c] - x[r * cols + c]) * ((double)deq[c] - x[r * cols + c]);
        s2 += (double)x[r * cols + c] * x[r * cols + c];
      }
    }
    // Our reference quantizer follows ggml's: llama.cpp's bytes, row for row.
    EXPECT_EQ(identical_rows, rows) << file << " " << name << " (" << dtype_name(wt)
                                    << "): rows whose quantized bytes differ from llama.cpp";
    // Reading llama.cpp's blocks gives back the F32 source within the format's error.
    const double rel = std::sqrt(e2 / s2);
    const double bound = wt == DType::Q8_0 ? 0.01 : wt == DType::Q6_K ? 0.03 : 0.10;
    EXPECT_LT(rel, bound) << file << " " << name;
    EXPECT_GT(rel, 0.0) << file << " " << name;
    checked += wt == type;
  }
  EXPECT_GE(checked, 3) << file << ": expected mostly " << dtype_name(type) << " tensors";
}

// matvec over llama.cpp's blocks: Simd == Scalar bit for bit, and both within the
// activation-quantization bound of Reference.
TEST_P(LlamaCppBlocks, MatvecOverLlamaCppBlocks) {
  const auto [file, type] = GetParam();
  Gguf q;
  if (!load_gguf(kDir + "/" + file, q)) MODELS_MISSING();
  for (const auto& [name, t] : q.tensors) {
    if (t.dims.size() != 2 || (DType)t.type == DType::F32) continue;
    const DType wt = dtype_from_id(t.type, name);
    const int64_t cols = (int64_t)t.dims[0], rows = (int64_t)t.dims[1];
    std::vector<float> x(cols), yr(rows), ys(rows), yv(rows);
    for (int64_t c = 0; c < cols; c++) x[c] = std::sin(0.37 * c + rows) * (1 + c % 7);
    matvec(wt, q.data(t), rows, cols, x.data(), yr.data(), Kernel::Reference);
    matvec(wt, q.data(t), rows, cols, x.data(), ys.data(), Kernel::Scalar);
    matvec(wt, q.data(t), rows, cols, x.data(), yv.data(), Kernel::Simd);
    double mag = 0;
    for (int64_t r = 0; r < rows; r++) mag = std::max(mag, (double)std::fabs(yr[r]));
    for (int64_t r = 0; r < rows; r++) {
      ASSERT_EQ(std::memcmp(&ys[r], &yv[r], 4), 0) << name << " row " << r << ": " << ys[r] << " vs " << yv[r];
      ASSERT_NEAR(ys[r], yr[r], 0.02 * mag + 1e-6) << name << " row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Files, LlamaCppBlocks,
                         ::testing::Values(std::make_pair("stories260K-pad256-llama-q8_0.gguf", DType::Q8_0),
                                           std::make_pair("stories260K-pad256-llama-q6_k.gguf", DType::Q6_K),
                                           std::make_pair("stories260K-pad256-llama-q4_k_m.gguf", DType::Q4_K)));
