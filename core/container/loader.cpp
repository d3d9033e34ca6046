// loader.cpp — see loader.h.
#include "container/loader.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "container/gguf.h"
#include "container/hash.h"
#include "container/knot.h"

namespace knot {

std::string read_file(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) fail(path + ": is a directory");
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!f) fail(path + ": cannot open: " + std::strerror(errno));
  std::string s;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f.get())) > 0) s.append(buf, n);
  if (std::ferror(f.get())) fail(path + ": read error: " + std::strerror(errno));
  return s;
}

FileFormat detect_format(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) fail(path + ": is a directory");
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> fp(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!fp) fail(path + ": cannot open: " + std::strerror(errno));
  char m[4] = {0};
  size_t n = std::fread(m, 1, 4, fp.get());
  if (n == 4 && std::memcmp(m, "GGUF", 4) == 0) return FileFormat::Gguf;
  if (n == 4 && std::memcmp(m, "KNOT", 4) == 0) return FileFormat::Knot;
  return FileFormat::Unknown;
}

static Model load_gguf(const std::string& path, const LoadOptions& opts) {
  gguf::File f = gguf::parse_file(path);
  Model m;
  m.config = config_from_gguf(f, path);
  m.tokenizer = tokenizer_from_gguf(f, path);
  FileSource src(path);
  for (const gguf::TensorInfo& ti : f.tensors) {
    Tensor t;
    t.name = knot_tensor_name(ti.name);
    t.type = ti.type;
    t.shape = ti.shape;
    t.size = ti.size;
    if (opts.load_tensors) {
      t.bytes = alloc_aligned(ti.size);
      src.read(f.data_offset + ti.offset, ti.size, t.bytes.get());
      t.hash = hash64(t.bytes.get(), t.size);
      check_tensor_finite(t, path, "at offset " + std::to_string(f.data_offset + ti.offset), ti.name);
    }
    if (m.tensors.count(t.name)) fail(path + ": two tensors map to the knot name " + t.name);
    m.tensors.emplace(t.name, std::move(t));
  }
  return m;
}

Model load_model_file(const std::string& path, const LoadOptions& opts) {
  switch (detect_format(path)) {
    case FileFormat::Gguf: return load_gguf(path, opts);
    case FileFormat::Knot: {
      FileSource src(path);
      return load_knot(src, opts);
    }
    default: fail(path + ": bad magic: neither a GGUF nor a .knot file");
  }
}

}  // namespace knot
