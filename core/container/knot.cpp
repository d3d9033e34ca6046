// knot.cpp — .knot container: sources, header parse, verified reads, streaming writer.
#include "container/knot.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "container/json_limits.h"

namespace knot {

using json = nlohmann::json;

// ---- byte sources --------------------------------------------------------------------

FileSource::FileSource(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY);
  if (fd_ < 0) fail(path + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd_, &st) != 0) {
    ::close(fd_);
    fail(path + ": cannot stat: " + std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd_);
    fail(path + ": is a directory");
  }
  size_ = (uint64_t)st.st_size;
}

FileSource::~FileSource() {
  if (fd_ >= 0) ::close(fd_);
}

void FileSource::read(uint64_t off, uint64_t len, uint8_t* dst) {
  if (off > size_ || len > size_ - off)
    fail(path_ + ": read of " + std::to_string(len) + " bytes at offset " + std::to_string(off) +
         " runs past the end of the file (" + std::to_string(size_) + " bytes)");
  while (len > 0) {
    ssize_t n = ::pread(fd_, dst, (size_t)std::min<uint64_t>(len, 1u << 30), (off_t)off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(path_ + ": read error at offset " + std::to_string(off) + (n < 0 ? std::string(": ") + std::strerror(errno) : ""));
    dst += n, off += (uint64_t)n, len -= (uint64_t)n;
  }
}

void MemorySource::read(uint64_t off, uint64_t len, uint8_t* dst) {
  if (off > size_ || len > size_ - off)
    fail(name_ + ": read of " + std::to_string(len) + " bytes at offset " + std::to_string(off) +
         " runs past the end (" + std::to_string(size_) + " bytes)");
  if (len) std::memcpy(dst, data_ + off, (size_t)len);
}

// ---- header --------------------------------------------------------------------------

int64_t KnotTensor::nrows() const {
  int64_t r = 1;
  for (size_t i = 1; i < shape.size(); i++) r *= shape[i];
  return r;
}

uint64_t KnotTensor::row_size() const { return row_bytes(type, ne0(), name); }

const KnotTensor* KnotHeader::find(const std::string& name) const {
  for (auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const KnotTensor& KnotHeader::get(const std::string& name) const {
  const KnotTensor* t = find(name);
  if (!t) fail(what + ": missing tensor " + name);
  return *t;
}

uint64_t KnotHeader::payload_bytes() const {
  uint64_t s = tokenizer.size;
  for (auto& t : tensors) s += t.size;
  return s;
}

bool knot_tensor_is_chunked(const std::string& name) {
  return name == "token_embd_weight" || name == "output_weight";
}

static std::string stale_msg(const std::string& what, const std::string& why) {
  return what + ": stale .knot file (" + why +
         "); it was written by the old encoder that padded the JSON inside metaLen. "
         "Re-encode it from the GGUF with `knot convert`.";
}

static uint64_t j_u64(const json& j, const char* k, const std::string& ctx) {
  if (!j.contains(k) || !j[k].is_number_unsigned()) fail(ctx + ": field '" + k + "' missing or not a non-negative integer");
  return j[k].get<uint64_t>();
}

static uint64_t j_hash(const json& j, const char* k, const std::string& ctx) {
  if (!j.contains(k) || !j[k].is_string()) fail(ctx + ": field '" + k + "' missing or not a hex string");
  return hash_from_hex(j[k].get<std::string>(), ctx + " " + k);
}

static void parse_meta(const json& j, KnotHeader& h, const std::string& what);

HeaderParse parse_knot_header(const uint8_t* buf, size_t len, uint64_t file_size, const std::string& what) {
  HeaderParse r;
  if (len > file_size) len = (size_t)file_size;
  if (file_size < KNOT_PREAMBLE)
    fail(what + ": truncated: " + std::to_string(file_size) + " bytes, smaller than the 10-byte knot preamble");
  if (len < KNOT_PREAMBLE) {
    r.need = KNOT_PREAMBLE;
    return r;
  }
  if (std::memcmp(buf, "KNOT", 4) != 0) {
    char m[5] = {0};
    std::memcpy(m, buf, 4);
    for (char& c : m) if (c && (c < 32 || c > 126)) c = '?';
    fail(what + ": bad magic '" + m + "' (expected 'KNOT')");
  }
  KnotHeader& h = r.header;
  h.what = what;
  h.file_size = file_size;
  std::memcpy(&h.version, buf + 4, 2);
  std::memcpy(&h.meta_len, buf + 6, 4);
  if (h.version != KNOT_FORMAT_VERSION)
    fail(what + ": unknown knot version " + std::to_string(h.version) + " (this reader supports " + std::to_string(KNOT_FORMAT_VERSION) + ")");
  if (KNOT_PREAMBLE + (uint64_t)h.meta_len > file_size)
    fail(what + ": metaLen " + std::to_string(h.meta_len) + " runs past the end of the file (" + std::to_string(file_size) +
         " bytes; JSON would end at " + std::to_string(KNOT_PREAMBLE + (uint64_t)h.meta_len) + ")");
  h.align = (KNOT_PREAMBLE + (uint64_t)h.meta_len + 3) & ~(uint64_t)3;
  h.payload_offset = h.align + 1;
  if (h.payload_offset > file_size)
    fail(what + ": truncated: the codec marker at offset " + std::to_string(h.align) + " is past the end of the file (" +
         std::to_string(file_size) + " bytes)");
  if (len < h.payload_offset) {
    r.need = h.payload_offset;
    return r;
  }
  const char* js = (const char*)buf + KNOT_PREAMBLE;
  // The historical encoder padded the JSON with spaces inside metaLen; ours never emits
  // trailing whitespace, so any is the stale signature.
  if (h.meta_len > 0 && std::isspace((unsigned char)js[h.meta_len - 1]))
    fail(stale_msg(what, "metadata JSON ends in whitespace padding inside metaLen"));
  for (uint64_t p = KNOT_PREAMBLE + h.meta_len; p < h.align; p++)
    if (buf[p] != 0) fail(stale_msg(what, "non-NUL byte in the header padding at offset " + std::to_string(p)));
  if (buf[h.align] != KNOT_CODEC_MARKER) {
    char b[8];
    std::snprintf(b, sizeof b, "0x%02x", buf[h.align]);
    fail(stale_msg(what, std::string("codec marker at offset ") + std::to_string(h.align) + " is " + b + ", expected 0x40"));
  }

  check_json_depth(std::string_view(js, h.meta_len), what + ": metadata");
  json j = json::parse(js, js + h.meta_len, nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail(what + ": metadata JSON at offset 10 (" + std::to_string(h.meta_len) + " bytes) does not parse");
  h.meta_json.assign(js, h.meta_len);
  try {
    parse_meta(j, h, what);
  } catch (const json::exception& e) {  // a field of the wrong JSON type we did not check
    fail(what + ": bad metadata: " + e.what());
  }
  r.complete = true;
  r.need = h.payload_offset;
  return r;
}

// Metadata JSON -> header fields, with the layout checks that need the tensor table.
static void parse_meta(const json& j, KnotHeader& h, const std::string& what) {
  const uint64_t file_size = h.file_size;
  if (!j.contains("schema") || !j["schema"].is_number_integer()) fail(what + ": metadata has no schema version");
  h.schema = (int)std::clamp<int64_t>(j["schema"].get<int64_t>(), -1, INT32_MAX);
  if (h.schema < 1 || h.schema > KNOT_SCHEMA_VERSION)
    fail(what + ": metadata schema " + std::to_string(h.schema) + " not supported (this reader knows 1.." + std::to_string(KNOT_SCHEMA_VERSION) + ")");
  if (!j.contains("config")) fail(what + ": metadata has no config");
  h.config = config_from_json(j["config"].dump(), what);
  if (!j.contains("tokenizer") || !j["tokenizer"].is_object()) fail(what + ": metadata has no tokenizer blob reference");
  h.tokenizer.offset = j_u64(j["tokenizer"], "offset", what + ": tokenizer");
  h.tokenizer.size = j_u64(j["tokenizer"], "size", what + ": tokenizer");
  h.tokenizer.hash = j_hash(j["tokenizer"], "hash", what + ": tokenizer");
  if (!j.contains("tensors") || !j["tensors"].is_array()) fail(what + ": metadata has no tensors array");

  const uint64_t payload = file_size - h.payload_offset;
  for (auto& jt : j.at("tensors")) {
    KnotTensor t;
    if (!jt.is_object() || !jt.contains("name") || !jt["name"].is_string()) fail(what + ": tensor entry without a name");
    t.name = jt["name"];
    const std::string ctx = what + ": tensor " + t.name;
    // `type` is canonical; `tensor_type` is what an older writer used (docs/traps.md, trap 3)
    const char* tk = jt.contains("type") ? "type" : jt.contains("tensor_type") ? "tensor_type" : nullptr;
    if (!tk || !jt[tk].is_string()) fail(ctx + ": no 'type' field");
    const TypeTraits* tt = nullptr;
    try {
      tt = &type_traits(dtype_from_name(jt[tk].get<std::string>()));
    } catch (const Error&) {
      fail(ctx + ": unknown tensor type '" + jt[tk].get<std::string>() + "'");
    }
    if (!tt->storage) fail(ctx + ": type " + tt->name + " is not a storage type");
    t.type = tt->type;
    if (!jt.contains("shape") || !jt["shape"].is_array() || jt["shape"].empty() || jt["shape"].size() > 4)
      fail(ctx + ": shape missing or not 1..4 dims");
    for (auto& d : jt["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() <= 0 || d.get<int64_t>() > ((int64_t)1 << 40)) fail(ctx + ": bad dimension in shape");
      t.shape.push_back(d.get<int64_t>());
    }
    int64_t ne = 1;
    for (int64_t d : t.shape) {
      if (ne > ((int64_t)1 << 48) / d) fail(ctx + ": shape has more than 2^48 elements");
      ne *= d;
    }
    t.offset = j_u64(jt, "offset", ctx);
    t.size = j_u64(jt, "size", ctx);
    t.hash = j_hash(jt, "hash", ctx);
    if (t.ne0() % tt->block_elems != 0)
      fail(ctx + ": row length " + std::to_string(t.ne0()) + " is not a multiple of the " + tt->name + " block size " +
           std::to_string(tt->block_elems));
    uint64_t expect = row_bytes(t.type, t.ne0(), ctx) * (uint64_t)t.nrows();
    if (t.size != expect)
      fail(ctx + ": size " + std::to_string(t.size) + " does not match " + tt->name + " shape (" + std::to_string(expect) + " bytes)");
    if (t.offset > payload || t.size > payload - t.offset)
      fail(what + ": truncated or corrupt: tensor " + t.name + " bytes [" + std::to_string(h.payload_offset + t.offset) + ", " + std::to_string(h.payload_offset + t.offset + t.size) +
           ") run past the end of the file (" + std::to_string(file_size) + " bytes)");
    if (jt.contains("chunk_rows")) {
      t.chunk_rows = (int64_t)j_u64(jt, "chunk_rows", ctx);
      if (t.chunk_rows <= 0) fail(ctx + ": chunk_rows must be > 0");
      if (!jt.contains("chunk_hashes") || !jt["chunk_hashes"].is_array()) fail(ctx + ": chunk_rows without chunk_hashes");
      // ceil(nrows / chunk_rows) without the signed sum that overflows for chunk_rows = INT64_MAX
      const uint64_t want = (uint64_t)(t.nrows() / t.chunk_rows + (t.nrows() % t.chunk_rows != 0));
      if ((uint64_t)jt["chunk_hashes"].size() != want)
        fail(ctx + ": " + std::to_string(jt["chunk_hashes"].size()) + " chunk hashes, expected " + std::to_string(want));
      for (auto& c : jt["chunk_hashes"]) {
        if (!c.is_string()) fail(ctx + ": chunk hash is not a string");
        t.chunk_hashes.push_back(hash_from_hex(c.get<std::string>(), ctx + " chunk hash"));
      }
    }
    if (h.find(t.name)) fail(ctx + ": duplicate tensor name");
    h.tensors.push_back(std::move(t));
  }
  if (h.tokenizer.offset > payload || h.tokenizer.size > payload - h.tokenizer.offset)
    fail(what + ": truncated or corrupt: the tokenizer blob runs past the end of the file");

  // No two ranges overlap; together they must cover the payload exactly.
  std::vector<std::pair<uint64_t, const KnotTensor*>> ranges;
  for (auto& t : h.tensors) ranges.emplace_back(t.offset, &t);
  ranges.emplace_back(h.tokenizer.offset, nullptr);
  std::sort(ranges.begin(), ranges.end(), [](auto& a, auto& b) { return a.first < b.first; });
  auto rsize = [&](const KnotTensor* t) { return t ? t->size : h.tokenizer.size; };
  auto rname = [&](const KnotTensor* t) { return t ? t->name : std::string("tokenizer blob"); };
  for (size_t k = 1; k < ranges.size(); k++)
    if (ranges[k - 1].first + rsize(ranges[k - 1].second) > ranges[k].first)
      fail(what + ": " + rname(ranges[k - 1].second) + " and " + rname(ranges[k].second) + " overlap in the payload (offsets " +
           std::to_string(ranges[k - 1].first) + "+" + std::to_string(rsize(ranges[k - 1].second)) + " and " + std::to_string(ranges[k].first) + ")");
  uint64_t sum = h.payload_bytes();
  if (h.payload_offset + sum != file_size) {
    // Stale only when the old layout explains the size: the historical encoder put the
    // payload right after its (space-padded) metaLen, with or without a marker byte.
    const uint64_t old0 = KNOT_PREAMBLE + (uint64_t)h.meta_len;
    const std::string detail = "payloadOffset " + std::to_string(h.payload_offset) + " + payload " + std::to_string(sum) + " = " +
                               std::to_string(h.payload_offset + sum) + " bytes, but the file has " + std::to_string(file_size);
    if (old0 + sum == file_size || old0 + 1 + sum == file_size) fail(stale_msg(what, "layout mismatch: " + detail));
    // Otherwise corrupt: say where the declared ranges end and what is unaccounted for.
    const auto& last = ranges.back();
    const uint64_t end = h.payload_offset + last.first + rsize(last.second);
    std::string where = "the last payload range (" + rname(last.second) + ") ends at byte " + std::to_string(end);
    if (h.payload_offset + sum > file_size) fail(what + ": truncated or corrupt: " + detail + "; " + where);
    // no overlaps and everything in bounds, so the missing bytes are a gap or a tail
    uint64_t at = 0;
    std::string gap, prev = "the payload start";
    for (auto& [off, t] : ranges) {
      if (off > at) {
        gap = "bytes [" + std::to_string(h.payload_offset + at) + ", " + std::to_string(h.payload_offset + off) + ") between " + prev +
              " and " + rname(t) + " belong to no entry (missing tensor entry?)";
        break;
      }
      at = off + rsize(t);
      prev = rname(t);
    }
    if (gap.empty())
      gap = "bytes [" + std::to_string(end) + ", " + std::to_string(file_size) + ") after " + rname(last.second) +
            " belong to no entry (missing tensor entry or trailing garbage?)";
    fail(what + ": corrupt .knot file: " + detail + " (" + std::to_string(file_size - h.payload_offset - sum) +
         " bytes unaccounted for): " + gap);
  }
}

KnotHeader read_knot_header(ByteSource& src, size_t probe) {
  const uint64_t fsize = src.size();
  std::vector<uint8_t> buf((size_t)std::min<uint64_t>(fsize, std::max<size_t>(probe, KNOT_PREAMBLE)));
  src.read(0, buf.size(), buf.data());
  for (int attempt = 0; attempt < 3; attempt++) {
    HeaderParse r = parse_knot_header(buf.data(), buf.size(), fsize, src.name());
    if (r.complete) return std::move(r.header);
    // second fetch: only the bytes not already held
    size_t have = buf.size();
    buf.resize((size_t)r.need);
    src.read(have, r.need - have, buf.data() + have);
  }
  fail(src.name() + ": header parse did not converge");
}

// ---- scales --------------------------------------------------------------------------

// Whole blocks of `size` bytes; the type table says where each block's scales are.
int64_t first_nonfinite_block(DType t, const uint8_t* data, uint64_t size) {
  const TypeTraits& tt = type_traits(t);
  const int64_t nb = (int64_t)(size / (uint64_t)tt.block_bytes);
  const int64_t e = first_nonfinite(t, data, nb * tt.block_elems);
  return e < 0 ? -1 : e / tt.block_elems;
}

void check_knot_scales(ByteSource& src, const KnotHeader& h) {
  uint8_t blk[256];
  for (auto& t : h.tensors) {
    if (!type_traits(t.type).k_quant || t.size == 0) continue;
    const int bb = type_traits(t.type).block_bytes;
    src.read(h.payload_offset + t.offset, (uint64_t)bb, blk);
    if (first_nonfinite_block(t.type, blk, (uint64_t)bb) == 0)
      fail(stale_msg(h.what, "tensor " + t.name + ": first " + dtype_name(t.type) + " block has a non-finite super-scale"));
  }
}

// ---- reads ---------------------------------------------------------------------------

static void check_hash(const KnotHeader& h, const std::string& what, const uint8_t* p, uint64_t n, uint64_t want, uint64_t off) {
  uint64_t got = hash64(p, (size_t)n);
  if (got != want)
    fail(h.what + ": hash mismatch in " + what + " (bytes at offset " + std::to_string(off) + ", " + std::to_string(n) +
         " long): expected " + hash_hex(want) + ", got " + hash_hex(got) + " — corrupt or poisoned data");
}

Tensor read_knot_tensor(ByteSource& src, const KnotHeader& h, const KnotTensor& kt, bool verify) {
  Tensor t;
  t.name = kt.name;
  t.type = kt.type;
  t.shape = kt.shape;
  t.size = (size_t)kt.size;
  t.hash = kt.hash;
  t.bytes = alloc_aligned(t.size);
  src.read(h.payload_offset + kt.offset, kt.size, t.bytes.get());
  if (verify) check_hash(h, "tensor " + kt.name, t.bytes.get(), kt.size, kt.hash, h.payload_offset + kt.offset);
  return t;
}

void read_knot_rows(ByteSource& src, const KnotHeader& h, const KnotTensor& t, int64_t r0, int64_t r1, uint8_t* dst, bool verify) {
  const int64_t nrows = t.nrows();
  if (r0 < 0 || r1 < r0 || r1 > nrows)
    fail(h.what + ": tensor " + t.name + ": rows [" + std::to_string(r0) + ", " + std::to_string(r1) + ") outside [0, " + std::to_string(nrows) + ")");
  const uint64_t rs = t.row_size();  // throws on a misaligned row length
  const uint64_t base = h.payload_offset + t.offset;
  if (r0 == r1) return;
  if (!verify) {
    src.read(base + (uint64_t)r0 * rs, (uint64_t)(r1 - r0) * rs, dst);
    return;
  }
  if (t.chunk_rows > 0) {
    // read whole chunks covering [r0, r1), verify each, copy the wanted rows
    const int64_t c0 = r0 / t.chunk_rows, c1 = r1 / t.chunk_rows + (r1 % t.chunk_rows != 0);
    const int64_t a = c0 * t.chunk_rows, b = std::min(nrows, c1 * t.chunk_rows);
    std::vector<uint8_t> tmp((size_t)((b - a) * (int64_t)rs));
    src.read(base + (uint64_t)a * rs, tmp.size(), tmp.data());
    for (int64_t c = c0; c < c1; c++) {
      int64_t ra = c * t.chunk_rows, rb = std::min(nrows, ra + t.chunk_rows);
      check_hash(h, "tensor " + t.name + " rows [" + std::to_string(ra) + ", " + std::to_string(rb) + ")",
                 tmp.data() + (ra - a) * rs, (uint64_t)(rb - ra) * rs, t.chunk_hashes[(size_t)c], base + (uint64_t)ra * rs);
    }
    std::memcpy(dst, tmp.data() + (r0 - a) * rs, (size_t)((r1 - r0) * (int64_t)rs));
    return;
  }
  Tensor whole = read_knot_tensor(src, h, t, true);
  std::memcpy(dst, whole.data() + (uint64_t)r0 * rs, (size_t)((uint64_t)(r1 - r0) * rs));
}

TokenizerData read_knot_tokenizer(ByteSource& src, const KnotHeader& h, bool verify) {
  std::string s((size_t)h.tokenizer.size, '\0');
  src.read(h.payload_offset + h.tokenizer.offset, h.tokenizer.size, (uint8_t*)s.data());
  if (verify) check_hash(h, "tokenizer blob", (const uint8_t*)s.data(), s.size(), h.tokenizer.hash, h.payload_offset + h.tokenizer.offset);
  TokenizerData t = tokenizer_from_json(s, h.what);
  if ((int64_t)t.tokens.size() != h.config.n_vocab)
    fail(h.what + ": tokenizer has " + std::to_string(t.tokens.size()) + " tokens but config.n_vocab is " + std::to_string(h.config.n_vocab));
  return t;
}

Model load_knot(ByteSource& src, const LoadOptions& opts) {
  KnotHeader h = read_knot_header(src);
  check_knot_scales(src, h);
  Model m;
  m.config = h.config;
  m.tokenizer = read_knot_tokenizer(src, h, opts.verify_hashes);
  for (const KnotTensor& kt : h.tensors) {
    Tensor t;
    if (opts.load_tensors) {
      t = read_knot_tensor(src, h, kt, opts.verify_hashes);
      check_tensor_finite(t, h.what, "at offset " + std::to_string(h.payload_offset + kt.offset));
    } else {
      t.name = kt.name;
      t.type = kt.type;
      t.shape = kt.shape;
      t.size = (size_t)kt.size;
      t.hash = kt.hash;
    }
    m.tensors.emplace(kt.name, std::move(t));
  }
  const KnotTensor* emb = h.find("token_embd_weight");
  if (!emb) fail(h.what + ": missing tensor token_embd_weight");
  if (emb->nrows() != h.config.n_vocab_tensor || emb->ne0() != h.config.n_embd)
    fail(h.what + ": token_embd_weight shape does not match config (n_embd " + std::to_string(h.config.n_embd) + ", n_vocab_tensor " +
         std::to_string(h.config.n_vocab_tensor) + ")");
  return m;
}

std::vector<std::string> verify_knot(ByteSource& src, const std::function<void(size_t, size_t)>& progress) {
  std::vector<std::string> problems;
  KnotHeader h = read_knot_header(src);  // layout, marker, padding, sizes: throws
  // the tensors the config needs, with the shapes it implies
  std::vector<TensorRef> refs;
  for (auto& t : h.tensors) refs.push_back({t.name, t.name, t.shape});
  for (auto& p : check_tensor_set(h.config, refs, false, h.what)) problems.push_back(p);
  try {
    check_knot_scales(src, h);  // stale K-quant scales; the full scan below still runs
  } catch (const Error& e) {
    problems.push_back(e.what());
  }
  try {
    read_knot_tokenizer(src, h, true);
  } catch (const Error& e) {
    problems.push_back(e.what());
  }
  const size_t n = h.tensors.size();
  for (size_t i = 0; i < n; i++) {
    const KnotTensor& kt = h.tensors[i];
    if (progress) progress(i, n);
    try {
      // hash and scales checked separately: a corrupt tensor reports both
      Tensor t = read_knot_tensor(src, h, kt, false);
      const uint64_t got = hash64(t.data(), t.size);
      if (got != kt.hash)
        problems.push_back(h.what + ": hash mismatch in tensor " + kt.name + " (bytes at offset " + std::to_string(h.payload_offset + kt.offset) +
                           ", " + std::to_string(kt.size) + " long): expected " + hash_hex(kt.hash) + ", got " + hash_hex(got) +
                           " — corrupt or poisoned data");
      const int64_t cr = kt.chunk_rows;
      const uint64_t rs = kt.row_size();
      for (size_t c = 0; c < kt.chunk_hashes.size(); c++) {
        int64_t ra = (int64_t)c * cr, rb = std::min(kt.nrows(), ra + cr);
        uint64_t ch = hash64(t.data() + (uint64_t)ra * rs, (size_t)((uint64_t)(rb - ra) * rs));
        if (ch != kt.chunk_hashes[c])
          problems.push_back(h.what + ": tensor " + kt.name + " chunk " + std::to_string(c) + " (rows [" + std::to_string(ra) + ", " +
                             std::to_string(rb) + ")) hash mismatch");
      }
      const bool fl = kt.type == DType::F32 || kt.type == DType::F16 || kt.type == DType::BF16;
      int64_t bad = first_nonfinite_block(kt.type, t.data(), t.size);
      if (bad >= 0)
        problems.push_back(h.what + ": tensor " + kt.name + ": non-finite " + (fl ? "value" : "block scale") + " at block " + std::to_string(bad) +
                           ", row " + std::to_string(bad / std::max<int64_t>(1, (int64_t)(rs / type_traits(kt.type).block_bytes))));
    } catch (const Error& e) {
      problems.push_back(e.what());
    }
  }
  if (progress) progress(n, n);
  return problems;
}

// ---- writer --------------------------------------------------------------------------

KnotWriter::KnotWriter(std::FILE* out, const ModelConfig& cfg, const TokenizerData& tok, std::vector<KnotTensorDesc> tensors,
                       std::vector<std::pair<std::string, std::string>> info)
    : file_(out) {
  init(cfg, tok, std::move(tensors), std::move(info));
}

KnotWriter::KnotWriter(std::vector<uint8_t>* out, const ModelConfig& cfg, const TokenizerData& tok, std::vector<KnotTensorDesc> tensors,
                       std::vector<std::pair<std::string, std::string>> info)
    : vec_(out) {
  vec_->clear();
  init(cfg, tok, std::move(tensors), std::move(info));
}

void KnotWriter::emit(const void* p, size_t n) {
  if (!n) return;
  if (vec_) {
    vec_->insert(vec_->end(), (const uint8_t*)p, (const uint8_t*)p + n);
  } else if (std::fwrite(p, 1, n, file_) != n) {
    fail("knot writer: write failed (disk full?)");
  }
}

void KnotWriter::init(const ModelConfig& cfg, const TokenizerData& tok, std::vector<KnotTensorDesc> descs,
                      std::vector<std::pair<std::string, std::string>> info) {
  validate_config(cfg, "knot writer");
  cfg_ = cfg;
  info_ = std::move(info);
  tok_json_ = tokenizer_to_json(tok);
  tok_blob_.offset = 0;
  tok_blob_.size = tok_json_.size();
  tok_blob_.hash = hash64(tok_json_.data(), tok_json_.size());
  uint64_t off = tok_blob_.size;
  for (auto& d : descs) {
    KnotTensor t;
    t.name = d.name;
    t.type = d.type;
    t.shape = d.shape;
    t.offset = off;
    t.size = t.row_size() * (uint64_t)t.nrows();
    if (knot_tensor_is_chunked(t.name) && t.shape.size() >= 2) {
      t.chunk_rows = KNOT_CHUNK_ROWS;
      t.chunk_hashes.assign((size_t)((t.nrows() + t.chunk_rows - 1) / t.chunk_rows), 0);
    }
    off += t.size;
    tensors_.push_back(std::move(t));
  }
  std::string hdr = header_bytes();
  header_len_ = hdr.size();
  emit(hdr.data(), hdr.size());
  emit(tok_json_.data(), tok_json_.size());
  whole_.reset();
  chunk_.reset();
}

std::string KnotWriter::header_bytes() const {
  json j;
  j["schema"] = KNOT_SCHEMA_VERSION;
  j["format"] = "knot";
  j["config"] = json::parse(config_to_json(cfg_));
  j["tokenizer"] = {{"encoding", "json"}, {"offset", tok_blob_.offset}, {"size", tok_blob_.size}, {"hash", hash_hex(tok_blob_.hash)}};
  json ts = json::array();
  for (auto& t : tensors_) {
    json e = {{"name", t.name}, {"type", dtype_name(t.type)}, {"shape", t.shape}, {"offset", t.offset}, {"size", t.size}, {"hash", hash_hex(t.hash)}};
    if (t.chunk_rows) {
      e["chunk_rows"] = t.chunk_rows;
      json ch = json::array();
      for (uint64_t c : t.chunk_hashes) ch.push_back(hash_hex(c));
      e["chunk_hashes"] = std::move(ch);
    }
    ts.push_back(std::move(e));
  }
  j["tensors"] = std::move(ts);
  if (!info_.empty()) {
    json in = json::object();
    for (auto& [k, v] : info_) in[k] = v;
    j["info"] = std::move(in);
  }
  std::string meta = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (meta.size() > UINT32_MAX) fail("knot writer: metadata too large");
  const uint32_t meta_len = (uint32_t)meta.size();
  const uint16_t version = KNOT_FORMAT_VERSION;
  const size_t align = (KNOT_PREAMBLE + meta_len + 3) & ~(size_t)3;
  std::string out = "KNOT";
  out.append((const char*)&version, 2);
  out.append((const char*)&meta_len, 4);
  out += meta;
  out.append(align - out.size(), '\0');  // NUL pad after the JSON, outside metaLen
  out.push_back((char)KNOT_CODEC_MARKER);
  return out;
}

void KnotWriter::append(const void* p, size_t n) {
  if (finished_) fail("knot writer: append after finish");
  const uint8_t* b = (const uint8_t*)p;
  while (n > 0) {
    if (cur_ >= tensors_.size()) fail("knot writer: more tensor data than declared");
    KnotTensor& t = tensors_[cur_];
    if (cur_done_ + n > t.size) fail("knot writer: tensor " + t.name + " got more than its " + std::to_string(t.size) + " bytes");
    size_t take = n;
    uint64_t chunk_bytes = 0;
    if (t.chunk_rows) {
      chunk_bytes = (uint64_t)t.chunk_rows * t.row_size();
      take = (size_t)std::min<uint64_t>(n, chunk_bytes - chunk_done_);
    }
    emit(b, take);
    whole_.update(b, take);
    if (t.chunk_rows) {
      chunk_.update(b, take);
      chunk_done_ += take;
      if (chunk_done_ == chunk_bytes) {
        t.chunk_hashes[(size_t)(cur_done_ / chunk_bytes)] = chunk_.digest();
        chunk_.reset();
        chunk_done_ = 0;
      }
    }
    cur_done_ += take;
    b += take, n -= take;
  }
}

void KnotWriter::end_tensor() {
  if (cur_ >= tensors_.size()) fail("knot writer: end_tensor with no tensor pending");
  KnotTensor& t = tensors_[cur_];
  if (cur_done_ != t.size) fail("knot writer: tensor " + t.name + " got " + std::to_string(cur_done_) + " of " + std::to_string(t.size) + " bytes");
  t.hash = whole_.digest();
  if (t.chunk_rows && chunk_done_ > 0) t.chunk_hashes.back() = chunk_.digest();
  whole_.reset();
  chunk_.reset();
  chunk_done_ = 0;
  cur_++;
  cur_done_ = 0;
}

void KnotWriter::finish() {
  if (finished_) return;
  if (cur_ != tensors_.size())
    fail("knot writer: finish after " + std::to_string(cur_) + " of " + std::to_string(tensors_.size()) + " tensors");
  std::string hdr = header_bytes();  // same length: hashes are fixed-width hex
  if (hdr.size() != header_len_) fail("knot writer: header length changed while writing");
  if (vec_) {
    std::memcpy(vec_->data(), hdr.data(), hdr.size());
  } else {
    if (std::fflush(file_) != 0 || fseeko(file_, 0, SEEK_SET) != 0) fail("knot writer: cannot seek back to rewrite the header");
    emit(hdr.data(), hdr.size());
    if (fseeko(file_, 0, SEEK_END) != 0 || std::fflush(file_) != 0) fail("knot writer: flush failed");
  }
  finished_ = true;
}

std::vector<uint8_t> knot_to_bytes(const Model& m) {
  std::vector<KnotTensorDesc> descs;
  for (auto& [name, t] : m.tensors) descs.push_back({name, t.type, t.shape});
  std::vector<uint8_t> out;
  KnotWriter w(&out, m.config, m.tokenizer, descs);
  for (auto& [name, t] : m.tensors) {
    if (!t.bytes) fail("knot writer: tensor " + name + " has no bytes loaded");
    w.write_tensor(t.data(), t.size);
  }
  w.finish();
  return out;
}

void write_knot_file(const std::string& path, const Model& m) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> fp(std::fopen(path.c_str(), "wb"), std::fclose);
  if (!fp) fail(path + ": cannot create: " + std::strerror(errno));
  std::vector<KnotTensorDesc> descs;
  for (auto& [name, t] : m.tensors) descs.push_back({name, t.type, t.shape});
  KnotWriter w(fp.get(), m.config, m.tokenizer, descs);
  for (auto& [name, t] : m.tensors) {
    if (!t.bytes) fail("knot writer: tensor " + name + " has no bytes loaded");
    w.write_tensor(t.data(), t.size);
  }
  w.finish();
  if (std::fclose(fp.release()) != 0) fail(path + ": close failed");
}

}  // namespace knot
