// row_window.h — a row range of one tensor (a vocab shard's rows of token_embd / output,
// a slice station's rows of q/k/v or gate/up) from bytes the host fetched itself.
//
// The host (a Worker reading R2 by range) asks rows_file_range() which file range to
// fetch, fetches it, and rows_from_window() copies rows [r0, r1) out of those bytes,
// verified: whole covering chunks when the .knot tensor has chunk hashes, the whole
// tensor when it has only a tensor hash, exactly the rows for GGUF (nothing to verify).
#pragma once
#include <cstdint>
#include <string>
#include <utility>

#include "container/knot.h"

namespace knot {

// The tensor as the file describes it (absolute offset; shape of the whole tensor).
struct FileTensor {
  std::string name;
  DType type = DType::F32;
  std::vector<int64_t> shape;  // ne0 first
  uint64_t offset = 0;         // absolute in the file
  uint64_t size = 0;
  int64_t nrows() const;
};

// {offset, size} of the file bytes to fetch for rows [r0, r1). kh: the .knot header, or
// nullptr for GGUF. Throws for rows outside the tensor (naming file, tensor and range).
std::pair<uint64_t, uint64_t> rows_file_range(const std::string& what, const KnotHeader* kh, const FileTensor& t,
                                              int64_t r0, int64_t r1);

// Rows [r0, r1) into dst ((r1-r0) x row bytes) from file bytes [off, off+len) at p, which
// must cover rows_file_range(); .knot chunk / tensor hashes are checked.
void rows_from_window(const std::string& what, const KnotHeader* kh, const FileTensor& t, int64_t r0, int64_t r1,
                      const uint8_t* p, uint64_t off, uint64_t len, uint8_t* dst);

// File bytes [base, base+len) held in memory, as a ByteSource: reads outside them throw
// naming the range asked for and the range held.
class WindowSource : public ByteSource {
 public:
  WindowSource(std::string name, uint64_t file_size, uint64_t base, const uint8_t* p, uint64_t len)
      : name_(std::move(name)), file_size_(file_size), base_(base), p_(p), len_(len) {}
  uint64_t size() override { return file_size_; }
  void read(uint64_t off, uint64_t len, uint8_t* dst) override;
  std::string name() const override { return name_; }

 private:
  std::string name_;
  uint64_t file_size_, base_;
  const uint8_t* p_;
  uint64_t len_;
};

}  // namespace knot
