// gguf.cpp — GGUF v2/v3 parsing and writing.
#include "container/gguf.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstring>
#include <memory>

namespace knot::gguf {

static const uint32_t GGUF_MAGIC = 0x46554747;  // "GGUF" little-endian
static const int MAX_DIMS = 4;
static const int MAX_NESTING = 8;

const char* vtype_name(VType t) {
  switch (t) {
    case VType::U8: return "u8";
    case VType::I8: return "i8";
    case VType::U16: return "u16";
    case VType::I16: return "i16";
    case VType::U32: return "u32";
    case VType::I32: return "i32";
    case VType::F32: return "f32";
    case VType::BOOL: return "bool";
    case VType::STRING: return "string";
    case VType::ARRAY: return "array";
    case VType::U64: return "u64";
    case VType::I64: return "i64";
    case VType::F64: return "f64";
  }
  return "?";
}

static size_t scalar_size(VType t) {
  switch (t) {
    case VType::U8: case VType::I8: case VType::BOOL: return 1;
    case VType::U16: case VType::I16: return 2;
    case VType::U32: case VType::I32: case VType::F32: return 4;
    case VType::U64: case VType::I64: case VType::F64: return 8;
    default: return 0;
  }
}

static bool is_float_vt(VType t) { return t == VType::F32 || t == VType::F64; }

// ---- Value -------------------------------------------------------------------------

bool Value::is_int() const {
  switch (type) {
    case VType::U8: case VType::I8: case VType::U16: case VType::I16: case VType::U32:
    case VType::I32: case VType::U64: case VType::I64: return true;
    default: return false;
  }
}
bool Value::is_float() const { return type == VType::F32 || type == VType::F64; }

int64_t Value::as_int(std::string_view key) const {
  if (is_int()) {
    if (type == VType::U64 && u > (uint64_t)INT64_MAX)
      fail("gguf key " + std::string(key) + ": value " + std::to_string(u) + " out of range");
    return i;
  }
  fail("gguf key " + std::string(key) + ": expected an integer, found " + vtype_name(type));
}
double Value::as_float(std::string_view key) const {
  if (is_float()) return f;
  if (is_int()) return (double)i;
  fail("gguf key " + std::string(key) + ": expected a number, found " + vtype_name(type));
}
bool Value::as_bool(std::string_view key) const {
  if (type == VType::BOOL) return b;
  if (is_int()) return i != 0;
  fail("gguf key " + std::string(key) + ": expected a bool, found " + vtype_name(type));
}
const std::string& Value::as_string(std::string_view key) const {
  if (type == VType::STRING) return s;
  fail("gguf key " + std::string(key) + ": expected a string, found " + vtype_name(type));
}

std::string Value::to_display(size_t max_items) const {
  char buf[64];
  switch (type) {
    case VType::F32: case VType::F64:
      std::snprintf(buf, sizeof buf, "%g", f);
      return buf;
    case VType::BOOL: return b ? "true" : "false";
    case VType::STRING: {
      std::string out = "\"";
      for (size_t k = 0; k < s.size() && k < 120; k++) {
        char c = s[k];
        if (c == '\n') out += "\\n";
        else if (c == '"') out += "\\\"";
        else if ((unsigned char)c < 0x20) out += "?";
        else out += c;
      }
      if (s.size() > 120) out += "...";
      return out + "\"";
    }
    case VType::ARRAY: {
      std::string out = std::string("[") + vtype_name(elem) + " x " + std::to_string(size()) + "] ";
      for (size_t k = 0; k < size() && k < max_items; k++)
        out += (k ? ", " : "") + at(k).to_display(max_items);
      if (size() > max_items) out += ", ...";
      return out;
    }
    case VType::U64: return std::to_string(u);
    default: return std::to_string(i);
  }
}

Value Value::make_u32(uint32_t v) { Value x; x.type = VType::U32; x.u = v; x.i = v; return x; }
Value Value::make_i32(int32_t v) { Value x; x.type = VType::I32; x.i = v; x.u = (uint64_t)v; return x; }
Value Value::make_u64(uint64_t v) { Value x; x.type = VType::U64; x.u = v; x.i = (int64_t)v; return x; }
Value Value::make_f32(float v) { Value x; x.type = VType::F32; x.f = v; return x; }
Value Value::make_bool(bool v) { Value x; x.type = VType::BOOL; x.b = v; x.i = v; return x; }
Value Value::make_str(std::string v) { Value x; x.type = VType::STRING; x.s = std::move(v); return x; }
Value Value::make_arr(VType elem, std::vector<Value> items) {
  Value x;
  x.type = VType::ARRAY;
  x.elem = elem;
  if (elem == VType::ARRAY) {
    x.arr = std::move(items);
  } else {
    for (auto& v : items) {
      if (elem == VType::STRING) x.strs.push_back(std::move(v.s));
      else if (is_float_vt(elem)) x.floats.push_back(v.f);
      else x.ints.push_back(elem == VType::BOOL ? (int64_t)v.b : v.i);
    }
  }
  return x;
}

size_t Value::size() const {
  if (type != VType::ARRAY) return 0;
  if (elem == VType::ARRAY) return arr.size();
  if (elem == VType::STRING) return strs.size();
  return is_float_vt(elem) ? floats.size() : ints.size();
}

Value Value::at(size_t k) const {
  if (type != VType::ARRAY || k >= size()) fail("gguf value: element " + std::to_string(k) + " out of range");
  if (elem == VType::ARRAY) return arr[k];
  Value v;
  v.type = elem;
  if (elem == VType::STRING) v.s = strs[k];
  else if (is_float_vt(elem)) v.f = floats[k];
  else v.i = ints[k], v.u = (uint64_t)ints[k], v.b = ints[k] != 0;
  return v;
}

int64_t TensorInfo::nelements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const Value* File::find(std::string_view key) const {
  for (auto& [k, v] : kv)
    if (k == key) return &v;
  return nullptr;
}
const TensorInfo* File::find_tensor(std::string_view name) const {
  for (auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

// ggml's type names by id, so an unsupported-but-real type is named in the error.
static const char* ggml_type_name(uint32_t id) {
  static const char* names[] = {"F32", "F16", "Q4_0", "Q4_1", nullptr, nullptr, "Q5_0", "Q5_1", "Q8_0", "Q8_1",
                                "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
                                "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16"};
  return id < sizeof(names) / sizeof(names[0]) ? names[id] : nullptr;
}

// ---- reader ------------------------------------------------------------------------

namespace {
struct Cursor {
  const uint8_t* data;
  size_t avail;
  uint64_t file_size;
  const std::string& what;
  uint64_t pos = 0;
  std::string section = "header";

  void need(uint64_t n) {
    if (n <= avail && pos <= avail - n) return;
    if (avail < file_size && pos + n <= file_size)
      throw Truncated(what + ": gguf header longer than the " + std::to_string(avail) +
                          " bytes read",
                      pos + n);
    fail(what + ": gguf truncated in " + section + " at offset " + std::to_string(pos) +
         ": need " + std::to_string(n) + " bytes, file has " + std::to_string(file_size));
  }
  template <typename T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, data + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::string str() {
    uint64_t n = get<uint64_t>();
    // a string can never be longer than the file: reject before allocating
    if (n > file_size)
      fail(what + ": gguf truncated or corrupt " + section + " at offset " + std::to_string(pos - 8) +
           ": string length " + std::to_string(n) + " exceeds the file size");
    need(n);
    std::string s((const char*)data + pos, n);
    pos += n;
    return s;
  }
  [[noreturn]] void bad(const std::string& msg) {
    fail(what + ": gguf " + section + " at offset " + std::to_string(pos) + ": " + msg);
  }
};

Value read_value(Cursor& c, VType t, int depth) {
  Value v;
  v.type = t;
  switch (t) {
    case VType::U8: v.u = c.get<uint8_t>(); v.i = (int64_t)v.u; break;
    case VType::I8: v.i = c.get<int8_t>(); v.u = (uint64_t)v.i; break;
    case VType::U16: v.u = c.get<uint16_t>(); v.i = (int64_t)v.u; break;
    case VType::I16: v.i = c.get<int16_t>(); v.u = (uint64_t)v.i; break;
    case VType::U32: v.u = c.get<uint32_t>(); v.i = (int64_t)v.u; break;
    case VType::I32: v.i = c.get<int32_t>(); v.u = (uint64_t)v.i; break;
    case VType::U64: v.u = c.get<uint64_t>(); v.i = (int64_t)v.u; break;
    case VType::I64: v.i = c.get<int64_t>(); v.u = (uint64_t)v.i; break;
    case VType::F32: v.f = c.get<float>(); break;
    case VType::F64: v.f = c.get<double>(); break;
    case VType::BOOL: {
      uint8_t b = c.get<uint8_t>();
      if (b > 1) { c.pos--; c.bad("bool value " + std::to_string(b) + " is not 0 or 1"); }
      v.b = b;
      v.i = b;
      break;
    }
    case VType::STRING: v.s = c.str(); break;
    case VType::ARRAY: {
      if (depth >= MAX_NESTING) c.bad("arrays nested deeper than " + std::to_string(MAX_NESTING));
      uint32_t et = c.get<uint32_t>();
      if (et > (uint32_t)VType::F64) { c.pos -= 4; c.bad("unknown array element type " + std::to_string(et)); }
      v.elem = (VType)et;
      uint64_t n = c.get<uint64_t>();
      // every element takes at least one byte (strings/arrays 8): bound before reserving
      size_t min_elem = scalar_size(v.elem) ? scalar_size(v.elem) : (v.elem == VType::ARRAY ? 12 : 8);
      if (n > (c.file_size - std::min(c.pos, c.file_size)) / min_elem) {
        c.pos -= 8;
        c.bad("truncated or corrupt: array of " + std::to_string(n) + " " + vtype_name(v.elem) + " runs past the end of the file");
      }
      if (v.elem == VType::ARRAY) {
        v.arr.reserve(n);
        for (uint64_t k = 0; k < n; k++) v.arr.push_back(read_value(c, v.elem, depth + 1));
      } else if (v.elem == VType::STRING) {
        v.strs.reserve(n);
        for (uint64_t k = 0; k < n; k++) v.strs.push_back(c.str());
      } else if (is_float_vt(v.elem)) {
        v.floats.reserve(n);
        for (uint64_t k = 0; k < n; k++) v.floats.push_back(read_value(c, v.elem, depth + 1).f);
      } else {
        v.ints.reserve(n);
        for (uint64_t k = 0; k < n; k++) v.ints.push_back(read_value(c, v.elem, depth + 1).i);
      }
      break;
    }
    default: c.bad("unknown value type " + std::to_string((uint32_t)t));
  }
  return v;
}
}  // namespace

File parse(const uint8_t* data, size_t avail, uint64_t file_size, const std::string& what) {
  if (avail > file_size) avail = file_size;
  Cursor c{data, avail, file_size, what};
  File f;
  f.file_size = file_size;
  if (file_size < 4) fail(what + ": not a gguf file (" + std::to_string(file_size) + " bytes)");
  uint32_t magic = c.get<uint32_t>();
  if (magic != GGUF_MAGIC) {
    char m[5] = {0};
    std::memcpy(m, data, 4);
    for (char& ch : m) if (ch && (ch < 32 || ch > 126)) ch = '?';
    fail(what + ": bad magic '" + m + "' (expected 'GGUF')");
  }
  f.version = c.get<uint32_t>();
  if (f.version == 1) fail(what + ": gguf version 1 is not supported (only v2 and v3)");
  if (f.version != 2 && f.version != 3)
    fail(what + ": unknown gguf version " + std::to_string(f.version) + " (supported: 2, 3" +
         ((f.version > 0xFFFF && (f.version & 0xFFFF) == 0) ? "; this looks like a big-endian GGUF, which is not supported)" : ")"));
  uint64_t n_tensors = c.get<uint64_t>();
  uint64_t n_kv = c.get<uint64_t>();
  // a kv needs >= 12 bytes and a tensor info >= 24: bound counts before allocating
  if (n_kv > file_size / 12)
    fail(what + ": gguf truncated or corrupt header at offset 16: " + std::to_string(n_kv) + " metadata keys claimed, more than the " +
         std::to_string(file_size) + "-byte file can hold");
  if (n_tensors > file_size / 24)
    fail(what + ": gguf truncated or corrupt header at offset 8: " + std::to_string(n_tensors) + " tensors claimed, more than the " +
         std::to_string(file_size) + "-byte file can hold");

  f.kv.reserve(n_kv);
  for (uint64_t k = 0; k < n_kv; k++) {
    c.section = "metadata key #" + std::to_string(k);
    std::string key = c.str();
    c.section = "metadata value '" + key + "'";
    uint32_t t = c.get<uint32_t>();
    if (t > (uint32_t)VType::F64) { c.pos -= 4; c.bad("unknown value type " + std::to_string(t)); }
    for (auto& [k2, v2] : f.kv)
      if (k2 == key) c.bad("duplicate key");
    f.kv.emplace_back(key, read_value(c, (VType)t, 0));
  }

  if (const Value* al = f.find("general.alignment")) {
    if (!al->is_int() || al->i <= 0 || (al->i & (al->i - 1)) != 0)
      fail(what + ": general.alignment must be a positive power of two, found " + al->to_display());
    f.alignment = (uint64_t)al->i;
  }

  f.tensors.reserve(n_tensors);
  for (uint64_t k = 0; k < n_tensors; k++) {
    c.section = "tensor info #" + std::to_string(k);
    TensorInfo t;
    t.name = c.str();
    c.section = "tensor info #" + std::to_string(k) + " '" + t.name + "'";
    uint32_t nd = c.get<uint32_t>();
    if (nd == 0 || nd > (uint32_t)MAX_DIMS) { c.pos -= 4; c.bad(std::to_string(nd) + " dimensions (1.." + std::to_string(MAX_DIMS) + " allowed)"); }
    int64_t ne = 1;
    for (uint32_t d = 0; d < nd; d++) {
      int64_t v = c.get<int64_t>();
      if (v <= 0 || v > (int64_t)1 << 40) { c.pos -= 8; c.bad("dimension " + std::to_string(d) + " = " + std::to_string(v)); }
      if (ne > (INT64_MAX >> 2) / v) c.bad("element count overflows");
      ne *= v;
      t.shape.push_back(v);
    }
    t.type_id = c.get<uint32_t>();
    const TypeTraits* tt = type_traits(t.type_id);
    if (!tt || !tt->storage) {
      c.pos -= 4;
      if (const char* gn = ggml_type_name(t.type_id))
        c.bad("tensor " + t.name + " has type " + gn + " (ggml id " + std::to_string(t.type_id) +
              "), which knotwork does not support (F32 F16 BF16 Q4_0 Q8_0 Q4_K Q5_K Q6_K); re-quantize it");
      c.bad("unknown tensor type id " + std::to_string(t.type_id) + " for tensor " + t.name);
    }
    t.type = tt->type;
    t.offset = c.get<uint64_t>();
    if (t.shape[0] % tt->block_elems != 0)
      fail(what + ": tensor " + t.name + ": row length " + std::to_string(t.shape[0]) + " is not a multiple of the " + tt->name +
           " block size " + std::to_string(tt->block_elems));
    t.size = row_bytes(t.type, t.shape[0], t.name) * (uint64_t)(ne / t.shape[0]);
    for (auto& o : f.tensors)
      if (o.name == t.name) c.bad("duplicate tensor name");
    f.tensors.push_back(std::move(t));
  }

  f.data_offset = (c.pos + f.alignment - 1) / f.alignment * f.alignment;
  if (n_tensors > 0 && f.data_offset > file_size)
    fail(what + ": gguf truncated: data section at offset " + std::to_string(f.data_offset) + " is past the end of the file (" + std::to_string(file_size) + " bytes)");

  // Data ranges: aligned, inside the file, no overlaps.
  std::vector<const TensorInfo*> by_off;
  for (auto& t : f.tensors) {
    if (t.offset % f.alignment)
      fail(what + ": tensor " + t.name + " data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " + std::to_string(f.alignment));
    if (t.offset > file_size || t.size > file_size || f.data_offset + t.offset + t.size > file_size)
      fail(what + ": tensor " + t.name + " data [" + std::to_string(f.data_offset + t.offset) + ", " +
           std::to_string(f.data_offset + t.offset + t.size) + ") runs past the end of the file (" + std::to_string(file_size) + " bytes)");
    by_off.push_back(&t);
  }
  std::sort(by_off.begin(), by_off.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < by_off.size(); k++)
    if (by_off[k - 1]->offset + by_off[k - 1]->size > by_off[k]->offset)
      fail(what + ": tensors " + by_off[k - 1]->name + " and " + by_off[k]->name + " overlap in the data section (offsets " +
           std::to_string(by_off[k - 1]->offset) + "+" + std::to_string(by_off[k - 1]->size) + " and " + std::to_string(by_off[k]->offset) + ")");
  return f;
}

File parse_file(const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> fp(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!fp) fail(path + ": cannot open");
  if (fseeko(fp.get(), 0, SEEK_END) != 0) fail(path + ": cannot seek");
  uint64_t size = (uint64_t)ftello(fp.get());
  size_t want = (size_t)std::min<uint64_t>(size, 1 << 20);
  for (;;) {
    std::vector<uint8_t> buf(want);
    fseeko(fp.get(), 0, SEEK_SET);
    if (std::fread(buf.data(), 1, want, fp.get()) != want) fail(path + ": read error");
    try {
      return parse(buf.data(), want, size, path);
    } catch (const Truncated& t) {
      want = (size_t)std::min<uint64_t>(size, std::max<uint64_t>(t.need, (uint64_t)want * 2));
    }
  }
}

// ---- writer ------------------------------------------------------------------------

void Writer::set(const std::string& key, Value v) {
  for (auto& [k, old] : kv_)
    if (k == key) { old = std::move(v); return; }
  kv_.emplace_back(key, std::move(v));
}

size_t Writer::add_tensor(const std::string& name, uint32_t type_id, std::vector<int64_t> shape,
                          uint64_t size_override) {
  TensorInfo t;
  t.name = name;
  t.type_id = type_id;
  t.shape = std::move(shape);
  if (size_override != UINT64_MAX) {
    t.size = size_override;
  } else {
    t.type = dtype_from_id(type_id, name);
    int64_t rows = 1;
    for (size_t d = 1; d < t.shape.size(); d++) rows *= t.shape[d];
    t.size = row_bytes(t.type, t.shape.empty() ? 1 : t.shape[0], name) * (uint64_t)rows;
  }
  t.offset = next_offset_;
  next_offset_ = (next_offset_ + t.size + alignment - 1) / alignment * alignment;
  tensors_.push_back(std::move(t));
  return tensors_.size() - 1;
}

namespace {
struct Out {
  std::vector<uint8_t> b;
  template <typename T>
  void put(T v) {
    size_t o = b.size();
    b.resize(o + sizeof(T));
    std::memcpy(b.data() + o, &v, sizeof(T));
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
  void value(const Value& v, VType t) {
    switch (t) {
      case VType::U8: put<uint8_t>((uint8_t)v.u); break;
      case VType::I8: put<int8_t>((int8_t)v.i); break;
      case VType::U16: put<uint16_t>((uint16_t)v.u); break;
      case VType::I16: put<int16_t>((int16_t)v.i); break;
      case VType::U32: put<uint32_t>((uint32_t)v.u); break;
      case VType::I32: put<int32_t>((int32_t)v.i); break;
      case VType::U64: put<uint64_t>(v.u); break;
      case VType::I64: put<int64_t>(v.i); break;
      case VType::F32: put<float>((float)v.f); break;
      case VType::F64: put<double>(v.f); break;
      case VType::BOOL: put<uint8_t>(v.b ? 1 : 0); break;
      case VType::STRING: str(v.s); break;
      case VType::ARRAY:
        put<uint32_t>((uint32_t)v.elem);
        put<uint64_t>(v.size());
        for (size_t k = 0; k < v.size(); k++) value(v.at(k), v.elem);
        break;
    }
  }
};
}  // namespace

std::vector<uint8_t> Writer::header() const {
  Out o;
  o.put<uint32_t>(GGUF_MAGIC);
  o.put<uint32_t>(version);
  o.put<uint64_t>(tensors_.size());
  o.put<uint64_t>(kv_.size());
  for (auto& [k, v] : kv_) {
    o.str(k);
    o.put<uint32_t>((uint32_t)v.type);
    o.value(v, v.type);
  }
  for (auto& t : tensors_) {
    o.str(t.name);
    o.put<uint32_t>((uint32_t)t.shape.size());
    for (int64_t d : t.shape) o.put<int64_t>(d);
    o.put<uint32_t>(t.type_id);
    o.put<uint64_t>(t.offset);
  }
  o.b.resize((o.b.size() + alignment - 1) / alignment * alignment, 0);
  return std::move(o.b);
}

std::vector<uint8_t> Writer::to_bytes(const std::vector<const void*>& data) const {
  if (data.size() != tensors_.size()) fail("gguf writer: " + std::to_string(data.size()) + " data pointers for " + std::to_string(tensors_.size()) + " tensors");
  std::vector<uint8_t> out = header();
  size_t base = out.size();
  out.resize(base + next_offset_, 0);
  for (size_t k = 0; k < tensors_.size(); k++)
    if (tensors_[k].size) std::memcpy(out.data() + base + tensors_[k].offset, data[k], tensors_[k].size);
  return out;
}

static void fwrite_all(std::FILE* f, const void* p, size_t n) {
  if (n && std::fwrite(p, 1, n, f) != n) fail("gguf writer: write failed (disk full?)");
}

void Writer::write_header(std::FILE* f) {
  std::vector<uint8_t> h = header();
  fwrite_all(f, h.data(), h.size());
  cur_ = 0;
  cur_done_ = 0;
}

void Writer::write_data(std::FILE* f, const void* p, size_t n) {
  if (cur_ >= tensors_.size() || cur_done_ + n > tensors_[cur_].size)
    fail("gguf writer: more data than declared for tensor " + (cur_ < tensors_.size() ? tensors_[cur_].name : std::string("(none)")));
  fwrite_all(f, p, n);
  cur_done_ += n;
}

void Writer::end_tensor(std::FILE* f) {
  const TensorInfo& t = tensors_.at(cur_);
  if (cur_done_ != t.size)
    fail("gguf writer: tensor " + t.name + " got " + std::to_string(cur_done_) + " of " + std::to_string(t.size) + " bytes");
  uint64_t end = cur_ + 1 < tensors_.size() ? tensors_[cur_ + 1].offset : next_offset_;
  static const uint8_t zeros[64] = {0};
  for (uint64_t pad = end - t.offset - t.size; pad > 0;) {
    size_t n = (size_t)std::min<uint64_t>(pad, sizeof zeros);
    fwrite_all(f, zeros, n);
    pad -= n;
  }
  cur_++;
  cur_done_ = 0;
}

}  // namespace knot::gguf
