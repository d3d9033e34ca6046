// gguf.h — GGUF v2/v3 reader (from an in-memory byte span) and writer.
// Contract: parse() validates everything it returns — magic, version, every metadata
// value, general.alignment, tensor types, that tensor data lies inside the file and
// that no two tensors overlap — and throws knot::Error naming the section and byte
// offset otherwise. A span shorter than the header throws gguf::Truncated carrying
// how many bytes would have been needed, so callers can fetch more and retry.
#pragma once
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/common.h"
#include "kernels/quant.h"

namespace knot::gguf {

enum class VType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
const char* vtype_name(VType t);

// One metadata value. Scalars set the matching field (integers in both i and u, floats
// in f). Arrays keep their element type in `elem` and the elements in ONE typed vector:
// strs (STRING), ints (integers and BOOL; u64 bit-cast), floats (F32/F64) or arr (nested
// ARRAY) — a 150k-token vocab then costs ~32 bytes a token instead of a Value each.
struct Value {
  VType type = VType::U8;
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  bool b = false;
  std::string s;
  VType elem = VType::U8;
  std::vector<std::string> strs;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<Value> arr;

  size_t size() const;         // array element count (0 for scalars)
  Value at(size_t k) const;    // element k as a Value (generic code, display)

  bool is_int() const;    // any integer type (not bool)
  bool is_float() const;  // F32/F64
  // Converting getters; throw naming `key` when the type does not fit.
  int64_t as_int(std::string_view key) const;
  double as_float(std::string_view key) const;
  bool as_bool(std::string_view key) const;
  const std::string& as_string(std::string_view key) const;
  std::string to_display(size_t max_items = 8) const;  // for inspect

  static Value make_u32(uint32_t v);
  static Value make_i32(int32_t v);
  static Value make_u64(uint64_t v);
  static Value make_f32(float v);
  static Value make_bool(bool v);
  static Value make_str(std::string v);
  static Value make_arr(VType elem, std::vector<Value> items);
};

struct TensorInfo {
  std::string name;            // GGUF name, e.g. "blk.0.attn_q.weight"
  std::vector<int64_t> shape;  // ne0 first
  uint32_t type_id = 0;        // raw ggml type id
  DType type = DType::F32;
  uint64_t offset = 0;  // relative to the data section
  uint64_t size = 0;    // bytes, from type and shape
  int64_t nelements() const;
};

struct File {
  uint32_t version = 3;
  uint64_t alignment = 32;
  std::vector<std::pair<std::string, Value>> kv;  // in file order
  std::vector<TensorInfo> tensors;                // in file order
  uint64_t data_offset = 0;                        // absolute offset of the data section
  uint64_t file_size = 0;

  const Value* find(std::string_view key) const;
  const TensorInfo* find_tensor(std::string_view name) const;
};

// Thrown when the span ends before the header does (not when the file itself is short).
struct Truncated : Error {
  uint64_t need;
  Truncated(const std::string& msg, uint64_t need_) : Error(msg), need(need_) {}
};

// Parses the header from data[0..avail). file_size is the whole file's size (tensor
// ranges are checked against it). `what` names the file in error messages.
File parse(const uint8_t* data, size_t avail, uint64_t file_size, const std::string& what);

// Reads just enough of a file on disk to parse its header.
File parse_file(const std::string& path);

// Writer: describe metadata and tensors, then emit. Tensor sizes come from type/shape
// unless size_override is set (tests use it to build broken files).
class Writer {
 public:
  uint32_t version = 3;
  uint64_t alignment = 32;

  void set(const std::string& key, Value v);
  // Returns the tensor's index; data offsets are assigned in call order.
  size_t add_tensor(const std::string& name, uint32_t type_id, std::vector<int64_t> shape,
                    uint64_t size_override = UINT64_MAX);
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // Header bytes, padded to the alignment (the data section starts right after).
  std::vector<uint8_t> header() const;
  // Whole file in memory; data[i] holds tensors()[i].size bytes.
  std::vector<uint8_t> to_bytes(const std::vector<const void*>& data) const;

  // Streaming to a FILE*: write_header(), then each tensor's bytes in order via
  // write_data() (any number of calls per tensor), end_tensor() after each.
  void write_header(std::FILE* f);
  void write_data(std::FILE* f, const void* p, size_t n);
  void end_tensor(std::FILE* f);

 private:
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<TensorInfo> tensors_;
  uint64_t next_offset_ = 0;
  size_t cur_ = 0;        // streaming: tensor being written
  uint64_t cur_done_ = 0;  // streaming: bytes written of it
};

}  // namespace knot::gguf
