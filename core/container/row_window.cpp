#include "container/row_window.h"

#include <algorithm>
#include <cstring>

#include "kernels/common.h"

namespace knot {

namespace {
std::string S(uint64_t v) { return std::to_string(v); }
std::string range(int64_t a, int64_t b) { return "[" + std::to_string(a) + ", " + std::to_string(b) + ")"; }
}  // namespace

int64_t FileTensor::nrows() const {
  int64_t r = 1;
  for (size_t i = 1; i < shape.size(); i++) r *= shape[i];
  return r;
}

std::pair<uint64_t, uint64_t> rows_file_range(const std::string& what, const KnotHeader* kh, const FileTensor& t,
                                              int64_t r0, int64_t r1) {
  const uint64_t rs = row_bytes(t.type, t.shape.empty() ? 1 : t.shape[0], t.name);
  const int64_t nrows = t.shape.size() > 1 ? (int64_t)(t.size / rs) : 1;
  if (r0 < 0 || r1 <= r0 || r1 > nrows)
    fail(what + ": tensor " + t.name + ": rows " + range(r0, r1) + " outside " + range(0, nrows));
  if (kh) {
    const KnotTensor& kt = kh->get(t.name);
    if (kt.chunk_rows > 0) {
      const int64_t a = r0 / kt.chunk_rows * kt.chunk_rows;
      const int64_t c1 = r1 / kt.chunk_rows + (r1 % kt.chunk_rows != 0);  // no r1 + chunk_rows - 1: it overflows
      const int64_t b = std::min(nrows, c1 * kt.chunk_rows);
      return {t.offset + (uint64_t)a * rs, (uint64_t)(b - a) * rs};
    }
    return {t.offset, t.size};
  }
  return {t.offset + (uint64_t)r0 * rs, (uint64_t)(r1 - r0) * rs};
}

void rows_from_window(const std::string& what, const KnotHeader* kh, const FileTensor& t, int64_t r0, int64_t r1,
                      const uint8_t* p, uint64_t off, uint64_t len, uint8_t* dst) {
  if (!p) fail(what + ": tensor " + t.name + ": no fetched bytes");
  const auto [want_off, want_len] = rows_file_range(what, kh, t, r0, r1);
  if (off > want_off || off + len < want_off + want_len)
    fail(what + ": tensor " + t.name + ": fetched bytes [" + S(off) + ", " + S(off + len) +
         ") do not cover the planned range [" + S(want_off) + ", " + S(want_off + want_len) + ")");
  const uint64_t rs = row_bytes(t.type, t.shape[0], t.name);
  if (kh) {
    WindowSource src(what, kh->file_size, off, p, len);
    read_knot_rows(src, *kh, kh->get(t.name), r0, r1, dst, true);
  } else {
    std::memcpy(dst, p + (t.offset + (uint64_t)r0 * rs - off), (size_t)((uint64_t)(r1 - r0) * rs));
  }
}

void WindowSource::read(uint64_t off, uint64_t len, uint8_t* dst) {
  if (off < base_ || off + len > base_ + len_)
    fail(name_ + ": bytes [" + S(off) + ", " + S(off + len) + ") were not fetched (have [" + S(base_) + ", " +
         S(base_ + len_) + "))");
  std::memcpy(dst, p_ + (off - base_), len);
}

}  // namespace knot
