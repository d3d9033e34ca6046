// abi_slice.cpp — load only a slice of a tensor, streamed: rows [a,b) (q/k/v/gate/up of a
// head or FFN slice, token_embd/output rows of a vocab shard) or columns [a,b) of every
// row (attn_output/ffn_down of a slice). The host streams the file range in chunks of
// any size, so neither JS nor wasm ever holds more than the slice plus one chunk (the
// whole-tensor row loads of abi_mesh.cpp hold the fetched range and the slice together).
//
//   kw_model_slice_begin(h, i, axis, a, b)   axis 0 rows, 1 columns; result {offset, size}:
//                                            the file range to stream
//   kw_model_slice_feed(h, i, p, n)          the next n bytes of that range, in order
//   kw_model_slice_end(h, i)                 verify and install
//
// Verification as for whole tensors: a .knot tensor with per-chunk hashes streams only the
// covering chunks and checks each; one with only a tensor hash streams the whole tensor
// and checks it; GGUF streams exactly the rows (nothing to verify). Block scales of the
// kept bytes must be finite. Columns must be whole blocks of the tensor's type. The
// installed tensor has the slice's shape (rows: shape[1] = b-a and row0 = a, as
// kw_model_rows_load; columns: shape[0] = b-a, the "already cut" form of forward.h).
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "abi_model.h"
#include "container/hash.h"

using json = nlohmann::json;
using namespace kw;

namespace {

struct SliceLoad {
  int axis = 0;
  int64_t a = 0, b = 0;
  uint64_t off = 0, size = 0, fed = 0;  // stream range (absolute file offsets) and progress
  uint64_t row_bytes = 0;               // full row
  int64_t first_row = 0;                // row at stream offset 0
  uint64_t keep0 = 0, keep1 = 0;        // columns: byte range kept within every row
  int64_t chunk_rows = 0;               // > 0: per-chunk hashes from first_row
  const std::vector<uint64_t>* chunk_hashes = nullptr;
  uint64_t tensor_hash = 0;             // whole-tensor stream with a hash
  knot::Hasher hasher;
  std::shared_ptr<uint8_t> dst;
  uint64_t dst_size = 0;
};
std::map<std::pair<int, uint32_t>, SliceLoad> g_loads;

SliceLoad& load_of(int h, uint32_t i, const char* fn) {
  auto it = g_loads.find({h, i});
  if (it == g_loads.end()) knot::fail(std::string(fn) + ": no slice load in progress for tensor " + std::to_string(i));
  return it->second;
}

// The chunk hash check of chunk c (rows from first_row) once all its bytes went through.
void check_chunk(const ModelEntry& m, const TableEntry& te, SliceLoad& s, int64_t c) {
  const uint64_t got = s.hasher.digest();
  const uint64_t want = (*s.chunk_hashes)[(size_t)c];
  if (got != want)
    knot::fail(m.what + ": tensor " + te.name + ": rows chunk " + std::to_string(c) + " content hash " + knot::hash_hex(got) +
               " != expected " + knot::hash_hex(want));
  s.hasher.reset();
}
}  // namespace

KW_EXPORT(kw_model_slice_begin)
int kw_model_slice_begin(int32_t h, uint32_t i, int32_t axis, double ad, double bd) {
  return guard([&] {
    ModelEntry& m = g_models.get(h, "kw_model_slice_begin");
    TableEntry& te = m.table[table_index(m, i, "kw_model_slice_begin")];
    if (te.tokenizer) knot::fail("kw_model_slice_begin: entry " + std::to_string(i) + " is the tokenizer blob");
    knot::Tensor& t = m.model.tensors.at(te.name);
    if (te.shape.size() != 2) knot::fail(m.what + ": tensor " + te.name + " is not a matrix; load it whole");
    const int64_t ne0 = te.shape[0], nrows = te.shape[1];
    const int64_t a = (int64_t)ad, b = (int64_t)bd, n = axis == 0 ? nrows : ne0;
    if (axis != 0 && axis != 1) knot::fail("kw_model_slice_begin: axis must be 0 (rows) or 1 (columns), got " + std::to_string(axis));
    if (!(ad == (double)a && bd == (double)b) || a < 0 || b <= a || b > n)
      knot::fail(m.what + ": tensor " + te.name + ": " + (axis ? "columns" : "rows") + " [" + std::to_string(a) + ", " +
                 std::to_string(b) + ") outside [0, " + std::to_string(n) + ")");
    SliceLoad s;
    s.axis = axis, s.a = a, s.b = b;
    s.row_bytes = knot::row_bytes(t.type, ne0, te.name);
    const knot::KnotTensor* kt = m.knot_header ? &m.knot_header->get(te.name) : nullptr;
    if (axis == 0) {
      if (kt && kt->chunk_rows > 0) {
        const int64_t r0 = a / kt->chunk_rows * kt->chunk_rows, r1 = std::min(nrows, (b + kt->chunk_rows - 1) / kt->chunk_rows * kt->chunk_rows);
        s.first_row = r0, s.chunk_rows = kt->chunk_rows, s.chunk_hashes = &kt->chunk_hashes;
        s.off = te.offset + (uint64_t)r0 * s.row_bytes, s.size = (uint64_t)(r1 - r0) * s.row_bytes;
      } else if (te.hash) {
        s.off = te.offset, s.size = te.size, s.tensor_hash = te.hash;
      } else {
        s.first_row = a, s.off = te.offset + (uint64_t)a * s.row_bytes, s.size = (uint64_t)(b - a) * s.row_bytes;
      }
      s.keep0 = 0, s.keep1 = s.row_bytes;
      s.dst_size = (uint64_t)(b - a) * s.row_bytes;
    } else {
      const int be = knot::type_traits(t.type).block_elems;
      if (a % be || b % be)
        knot::fail(m.what + ": tensor " + te.name + ": columns [" + std::to_string(a) + ", " + std::to_string(b) +
                   ") are not whole " + knot::dtype_name(t.type) + " blocks of " + std::to_string(be) + "; load it whole");
      s.off = te.offset, s.size = te.size, s.tensor_hash = te.hash;
      s.keep0 = knot::row_bytes(t.type, a, te.name), s.keep1 = knot::row_bytes(t.type, b, te.name);
      s.dst_size = (uint64_t)nrows * (s.keep1 - s.keep0);
    }
    s.dst = knot::alloc_aligned((size_t)s.dst_size);
    g_loads[{h, i}] = std::move(s);
    set_result(json{{"offset", g_loads[{h, i}].off}, {"size", g_loads[{h, i}].size}}.dump());
  });
}

KW_EXPORT(kw_model_slice_feed)
int kw_model_slice_feed(int32_t h, uint32_t i, const uint8_t* p, uint32_t n) {
  return guard([&] {
    ModelEntry& m = g_models.get(h, "kw_model_slice_feed");
    const TableEntry& te = m.table[table_index(m, i, "kw_model_slice_feed")];
    SliceLoad& s = load_of(h, i, "kw_model_slice_feed");
    if (!p && n) knot::fail("kw_model_slice_feed: null buffer");
    if (s.fed + n > s.size)
      knot::fail(m.what + ": tensor " + te.name + ": fed " + std::to_string(s.fed + n) + " bytes of a " + std::to_string(s.size) + "-byte range");
    const uint64_t chunk_bytes = s.chunk_rows > 0 ? (uint64_t)s.chunk_rows * s.row_bytes : 0;
    uint64_t pos = s.fed;  // stream offset of p[0]
    const uint64_t end = s.fed + n;
    while (pos < end) {
      // one piece: up to the end of this row, and of this hash chunk
      const uint64_t row = pos / s.row_bytes, in_row = pos % s.row_bytes;
      uint64_t stop = std::min(end, (row + 1) * s.row_bytes);
      if (chunk_bytes) stop = std::min(stop, (pos / chunk_bytes + 1) * chunk_bytes);
      const uint8_t* q = p + (pos - s.fed);
      if (chunk_bytes || s.tensor_hash) s.hasher.update(q, (size_t)(stop - pos));
      const int64_t abs_row = s.first_row + (int64_t)row;
      const bool row_kept = s.axis == 1 || (abs_row >= s.a && abs_row < s.b);
      if (row_kept) {
        const uint64_t k0 = std::max(in_row, s.keep0), k1 = std::min(in_row + (stop - pos), s.keep1);
        if (k1 > k0) {
          const uint64_t out_row = s.axis == 1 ? row : (uint64_t)(abs_row - s.a);
          const uint64_t w = s.keep1 - s.keep0;
          std::memcpy(s.dst.get() + out_row * w + (k0 - s.keep0), q + (k0 - in_row), (size_t)(k1 - k0));
        }
      }
      pos = stop;
      if (chunk_bytes && (pos % chunk_bytes == 0 || pos == s.size)) check_chunk(m, te, s, (int64_t)(s.first_row / s.chunk_rows) + (int64_t)((pos - 1) / chunk_bytes));
    }
    s.fed = end;
  });
}

KW_EXPORT(kw_model_slice_end)
int kw_model_slice_end(int32_t h, uint32_t i) {
  return guard([&] {
    ModelEntry& m = g_models.get(h, "kw_model_slice_end");
    TableEntry& te = m.table[table_index(m, i, "kw_model_slice_end")];
    auto it = g_loads.find({h, i});
    if (it == g_loads.end()) knot::fail("kw_model_slice_end: no slice load in progress for tensor " + std::to_string(i));
    SliceLoad s = std::move(it->second);
    g_loads.erase(it);
    if (s.fed != s.size)
      knot::fail(m.what + ": tensor " + te.name + ": slice stream ended after " + std::to_string(s.fed) + " of " + std::to_string(s.size) + " bytes");
    if (s.tensor_hash) {
      const uint64_t got = s.hasher.digest();
      if (got != s.tensor_hash)
        knot::fail(m.what + ": tensor " + te.name + " at offset " + std::to_string(te.offset) + ": content hash " +
                   knot::hash_hex(got) + " != expected " + knot::hash_hex(s.tensor_hash));
    }
    knot::Tensor& t = m.model.tensors.at(te.name);
    const int64_t bad = knot::first_nonfinite_block(t.type, s.dst.get(), s.dst_size);
    if (bad >= 0) knot::fail(m.what + ": tensor " + te.name + ": slice block " + std::to_string(bad) + " has a non-finite scale");
    t.bytes = s.dst;
    t.shape = te.shape;
    if (s.axis == 0) t.shape[1] = s.b - s.a;
    else t.shape[0] = s.b - s.a;
    t.size = (size_t)s.dst_size;
    t.row0 = s.axis == 0 ? s.a : 0;
    te.loaded = true;
  });
}
