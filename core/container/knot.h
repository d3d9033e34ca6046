// knot.h — the .knot container (docs/knot-format.md): byte sources, header parse (pure, for the
// wasm ABI, and via a range-reading ByteSource), verified tensor and row reads, writer.
//
// Layout (little-endian):
//   0..3 "KNOT" | 4..5 u16 version | 6..9 u32 metaLen (unpadded) | JSON metadata
//   | NUL pad to 4 | byte `align` = 0x40 codec marker | payload from align+1
//   align = (10 + metaLen + 3) & ~3
// Payload: the tokenizer blob (JSON, see model_io.h) then the tensors, packed, in
// header order. Every tensor carries an XXH64 hash; token_embd/output also carry one
// hash per KNOT_CHUNK_ROWS rows so a vocab slice read verifies without the whole tensor.
// Contract: every parse/read error throws knot::Error naming file, tensor and offset; a
// file written by the historical encoder (space-padded metaLen) is refused as "stale".
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "container/model.h"
#include "container/hash.h"
#include "container/model_io.h"

namespace knot {

constexpr uint16_t KNOT_FORMAT_VERSION = 1;
constexpr int KNOT_SCHEMA_VERSION = 1;
constexpr uint8_t KNOT_CODEC_MARKER = 0x40;
constexpr int64_t KNOT_CHUNK_ROWS = 256;
constexpr size_t KNOT_DEFAULT_PROBE = 64 * 1024;
constexpr size_t KNOT_PREAMBLE = 10;  // magic + version + metaLen

// Random-access bytes: a file, memory, or (in JS) HTTP/R2 ranges.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual uint64_t size() = 0;
  // Reads exactly len bytes at off; throws naming the source when out of range.
  virtual void read(uint64_t off, uint64_t len, uint8_t* dst) = 0;
  virtual std::string name() const { return "knot"; }
};

class FileSource : public ByteSource {
 public:
  explicit FileSource(const std::string& path);
  ~FileSource() override;
  uint64_t size() override { return size_; }
  void read(uint64_t off, uint64_t len, uint8_t* dst) override;
  std::string name() const override { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Non-owning view (or owning, when constructed from a vector).
class MemorySource : public ByteSource {
 public:
  MemorySource(const uint8_t* data, size_t size, std::string name = "memory")
      : data_(data), size_(size), name_(std::move(name)) {}
  explicit MemorySource(std::vector<uint8_t> bytes, std::string name = "memory")
      : own_(std::move(bytes)), data_(own_.data()), size_(own_.size()), name_(std::move(name)) {}
  uint64_t size() override { return size_; }
  void read(uint64_t off, uint64_t len, uint8_t* dst) override;
  std::string name() const override { return name_; }

 private:
  std::vector<uint8_t> own_;
  const uint8_t* data_;
  size_t size_;
  std::string name_;
};

struct KnotTensor {
  std::string name;  // knot convention: blk_0_attn_q_weight
  DType type = DType::F32;
  std::vector<int64_t> shape;  // ne0 first
  uint64_t offset = 0;         // relative to the payload
  uint64_t size = 0;
  uint64_t hash = 0;
  int64_t chunk_rows = 0;             // 0: no per-chunk hashes
  std::vector<uint64_t> chunk_hashes; // ceil(nrows / chunk_rows)
  int64_t ne0() const { return shape.empty() ? 1 : shape[0]; }
  int64_t nrows() const;
  uint64_t row_size() const;  // bytes per row; throws on a misaligned row length
};

struct KnotBlob {
  uint64_t offset = 0, size = 0, hash = 0;  // offset relative to the payload
};

struct KnotHeader {
  std::string what;  // file name for messages
  uint16_t version = 0;
  uint32_t meta_len = 0;
  uint64_t align = 0;
  uint64_t payload_offset = 0;
  uint64_t file_size = 0;
  int schema = 0;
  ModelConfig config;
  KnotBlob tokenizer;
  std::vector<KnotTensor> tensors;  // payload order
  std::string meta_json;

  const KnotTensor* find(const std::string& name) const;
  const KnotTensor& get(const std::string& name) const;  // throws naming the tensor
  uint64_t payload_bytes() const;  // tokenizer + tensors
};

// Pure header parse for callers that fetch bytes themselves (wasm ABI): buf holds the
// first len bytes of a file of file_size bytes. Either complete (header filled) or
// need > len: fetch the first `need` bytes and call again. Throws on bad input.
struct HeaderParse {
  bool complete = false;
  uint64_t need = 0;
  KnotHeader header;
};
HeaderParse parse_knot_header(const uint8_t* buf, size_t len, uint64_t file_size,
                              const std::string& what = "knot");

// Probe the first `probe` bytes; fetch again when metaLen says the header is longer.
KnotHeader read_knot_header(ByteSource& src, size_t probe = KNOT_DEFAULT_PROBE);

// Stale check that needs payload bytes: reads the first block of every K-quant tensor
// and refuses non-finite d/dmin. read_knot_header does the size/marker/padding checks.
void check_knot_scales(ByteSource& src, const KnotHeader& h);

// Whole tensor into an owned 64-byte aligned buffer (hash checked when verify).
Tensor read_knot_tensor(ByteSource& src, const KnotHeader& h, const KnotTensor& t, bool verify = true);
// Rows [r0, r1) into dst ((r1-r0) * row_size bytes). Verifies the chunks covered when the
// tensor has chunk hashes, else the whole tensor (read once, then sliced).
void read_knot_rows(ByteSource& src, const KnotHeader& h, const KnotTensor& t, int64_t r0,
                    int64_t r1, uint8_t* dst, bool verify = true);
TokenizerData read_knot_tokenizer(ByteSource& src, const KnotHeader& h, bool verify = true);
Model load_knot(ByteSource& src, const LoadOptions& opts = {});

// Index of the first block whose scale (or, for float types, first value) is NaN/Inf;
// -1 when all are finite. data holds whole rows of type t.
int64_t first_nonfinite_block(DType t, const uint8_t* data, uint64_t size);

// Full check for `knot verify`: layout, stale scales, every hash, every scale finite.
// Returns human-readable problems (empty = clean); header errors throw.
std::vector<std::string> verify_knot(ByteSource& src,
                                     const std::function<void(size_t, size_t)>& progress = {});

// ---- writing -------------------------------------------------------------------------

struct KnotTensorDesc {
  std::string name;  // knot convention
  DType type;
  std::vector<int64_t> shape;
};

// Streaming writer. Sizes and offsets are known from the descriptors, hashes are written
// as fixed-width hex, so the header is written first with zero hashes and rewritten in
// place by finish() — tensors never need to be in memory together.
class KnotWriter {
 public:
  // Writes to `out` (seekable FILE*, not closed) or, with the second form, to a vector.
  KnotWriter(std::FILE* out, const ModelConfig& cfg, const TokenizerData& tok,
             std::vector<KnotTensorDesc> tensors,
             std::vector<std::pair<std::string, std::string>> info = {});
  KnotWriter(std::vector<uint8_t>* out, const ModelConfig& cfg, const TokenizerData& tok,
             std::vector<KnotTensorDesc> tensors,
             std::vector<std::pair<std::string, std::string>> info = {});
  // Bytes of the current tensor, in declared order (any split).
  void append(const void* p, size_t n);
  void end_tensor();
  void write_tensor(const void* p, size_t n) { append(p, n); end_tensor(); }
  size_t current() const { return cur_; }
  const std::vector<KnotTensor>& tensors() const { return tensors_; }
  void finish();

 private:
  void init(const ModelConfig& cfg, const TokenizerData& tok, std::vector<KnotTensorDesc> descs,
            std::vector<std::pair<std::string, std::string>> info);
  std::string header_bytes() const;
  void emit(const void* p, size_t n);

  std::FILE* file_ = nullptr;
  std::vector<uint8_t>* vec_ = nullptr;
  ModelConfig cfg_;
  std::string tok_json_;
  KnotBlob tok_blob_;
  std::vector<KnotTensor> tensors_;
  std::vector<std::pair<std::string, std::string>> info_;
  size_t header_len_ = 0;
  size_t cur_ = 0;
  uint64_t cur_done_ = 0;
  Hasher whole_, chunk_;
  uint64_t chunk_done_ = 0;  // bytes into the current chunk
  bool finished_ = false;
};

// Convenience: a whole in-memory Model.
std::vector<uint8_t> knot_to_bytes(const Model& m);
void write_knot_file(const std::string& path, const Model& m);

// Does this tensor get per-chunk hashes? (token_embd / output: read in vocab slices)
bool knot_tensor_is_chunked(const std::string& name);

}  // namespace knot
