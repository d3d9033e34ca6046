// container_large.cpp — offsets past 4 GiB (a qwen2.5-coder-7b .knot is ~4.4 GB): a
// small model laid out behind a 2^32 + 64 KiB filler tensor, as a sparse file on disk
// and as a virtual range source that serves the same > 4 GiB file from a few KB. The
// header, whole-tensor loads (hash checked), row ranges with chunk hashes and the
// embedding rows must all land on the right bytes.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "container_util.h"
#include "container/knot.h"

using namespace knot;
using ctest::contains;
using ctest::error_of;
using json = nlohmann::json;

namespace {

constexpr uint64_t kFiller = (1ull << 32) + (64 << 10);  // F32 [16384 x 65537]

const Model& model() {
  static Model m = ctest::small_model("qwen2", "Q4_K_M", 5);
  return m;
}

// The file: header | tokenizer | filler (zeros, never written) | the model's tensors.
struct Large {
  std::vector<uint8_t> head;  // bytes [0, head.size()): header + tokenizer blob
  std::vector<uint8_t> tail;  // bytes [size - tail.size(), size)
  uint64_t size = 0;
};
const Large& large() {
  static Large L = [] {
    const std::vector<uint8_t> good = knot_to_bytes(model());
    auto s = ctest::split_knot(good);
    json j = json::parse(s.json);
    const uint64_t tok = j["tokenizer"]["size"].get<uint64_t>();
    for (auto& t : j["tensors"]) t["offset"] = t["offset"].get<uint64_t>() + kFiller;
    j["tensors"].push_back({{"name", "filler_weight"}, {"type", "F32"}, {"shape", {16384, 65537}}, {"offset", tok},
                            {"size", kFiller}, {"hash", "0000000000000000"}});
    std::vector<uint8_t> pay(s.payload.begin(), s.payload.begin() + (long)tok);
    Large r;
    r.head = ctest::layout_knot(j.dump(), pay);
    r.tail.assign(s.payload.begin() + (long)tok, s.payload.end());
    r.size = r.head.size() + kFiller + r.tail.size();
    return r;
  }();
  return L;
}

// Serves the virtual file from head + zeros + tail; records the largest offset read.
struct VirtualSource : ByteSource {
  uint64_t max_end = 0;
  uint64_t size() override { return large().size; }
  std::string name() const override { return "virtual.knot"; }
  void read(uint64_t off, uint64_t len, uint8_t* dst) override {
    const Large& L = large();
    if (off > L.size || len > L.size - off) fail("virtual.knot: read past the end");
    max_end = std::max(max_end, off + len);
    const uint64_t tail0 = L.size - L.tail.size();
    for (uint64_t i = 0; i < len; i++) {
      const uint64_t p = off + i;
      dst[i] = p < L.head.size() ? L.head[p] : p >= tail0 ? L.tail[p - tail0] : 0;
    }
  }
};

// The same bytes as a sparse file on disk (the filler is a hole).
std::string sparse_file() {
  static std::string path = [] {
    const Large& L = large();
    std::string p = ctest::tmp_path("large.knot");
    int fd = ::open(p.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::pwrite(fd, L.head.data(), L.head.size(), 0), (ssize_t)L.head.size());
    EXPECT_EQ(::pwrite(fd, L.tail.data(), L.tail.size(), (off_t)(L.size - L.tail.size())), (ssize_t)L.tail.size());
    ::close(fd);
    return p;
  }();
  return path;
}

void check_source(ByteSource& src) {
  KnotHeader h = read_knot_header(src);
  ASSERT_EQ(h.file_size, large().size);
  ASSERT_GT(h.file_size, 1ull << 32);
  const KnotTensor& emb = h.get("token_embd_weight");
  EXPECT_GT(h.payload_offset + emb.offset, 1ull << 32);
  // whole tensors past 4 GiB, hash checked, equal to the model's bytes
  for (const auto& [name, t] : model().tensors) {
    const KnotTensor& kt = h.get(name);
    ASSERT_GT(h.payload_offset + kt.offset, 1ull << 32) << name;
    Tensor r = read_knot_tensor(src, h, kt, true);
    ASSERT_EQ(r.size, t.size) << name;
    EXPECT_EQ(std::memcmp(r.data(), t.data(), t.size), 0) << name;
  }
  // row ranges verified by chunk hashes: embedding rows of a vocab slice across a chunk edge
  ASSERT_GT(emb.chunk_rows, 0);
  const uint64_t rs = emb.row_size();
  for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, 1}, {250, 262}, {300, 600}, {599, 600}}) {
    std::vector<uint8_t> rows((size_t)((uint64_t)(r1 - r0) * rs));
    read_knot_rows(src, h, emb, r0, r1, rows.data(), true);
    EXPECT_EQ(std::memcmp(rows.data(), model().tensors.at("token_embd_weight").data() + (uint64_t)r0 * rs, rows.size()), 0)
        << r0 << ".." << r1;
  }
  // a corrupt chunk past 4 GiB is still caught, naming rows and an offset past 2^32
  KnotHeader bad = h;
  for (auto& t : bad.tensors)
    if (t.name == "token_embd_weight") t.chunk_hashes[1] ^= 1;
  std::vector<uint8_t> rows((size_t)(10 * rs));
  std::string e = error_of([&] { read_knot_rows(src, bad, bad.get("token_embd_weight"), 260, 270, rows.data(), true); });
  EXPECT_TRUE(contains(e, "token_embd_weight rows [256, 512)")) << e;
  EXPECT_TRUE(contains(e, "offset " + std::to_string(h.payload_offset + emb.offset + 256 * rs))) << e;
}

}  // namespace

TEST(Large, VirtualRangeSourcePast4GiB) {
  VirtualSource src;
  check_source(src);
  EXPECT_EQ(src.max_end, large().size);  // the last tensor ends the file
}

TEST(Large, SparseFilePast4GiB) {
  FileSource src(sparse_file());
  ASSERT_EQ(src.size(), large().size);
  check_source(src);
  // the CLI reads the same header (and prints offsets past 4 GiB)
  const std::string bin = knot_test::bin_dir() + "/knot";
  if (!std::filesystem::exists(bin)) return;
  FILE* p = popen((bin + " inspect " + sparse_file() + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  EXPECT_EQ(pclose(p), 0) << out;
  EXPECT_TRUE(contains(out, std::to_string(large().size) + " bytes")) << out;
  EXPECT_TRUE(contains(out, "filler_weight")) << out;
}
