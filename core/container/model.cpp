#include "container/model.h"

#include <cstdlib>
#include <cstring>

namespace knot {

std::shared_ptr<uint8_t> alloc_aligned(size_t size) {
  size_t padded = (size + 63) & ~size_t(63);
  if (padded == 0) padded = 64;
  void* p = std::aligned_alloc(64, padded);
  if (!p) fail("out of memory allocating " + std::to_string(size) + " bytes");
  std::memset(p, 0, padded);
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}

const Tensor* Model::find(const std::string& name) const {
  auto it = tensors.find(name);
  return it == tensors.end() ? nullptr : &it->second;
}

const Tensor& Model::get(const std::string& name, int layer, const char* phase) const {
  auto it = tensors.find(name);
  if (it != tensors.end()) return it->second;
  std::string msg = "missing tensor " + name;
  if (layer >= 0 || phase) {
    msg += " (";
    if (layer >= 0) msg += "layer " + std::to_string(layer);
    if (phase) msg += std::string(layer >= 0 ? ", " : "") + "phase " + phase;
    msg += ")";
  }
  fail(msg);
}

std::string knot_tensor_name(const std::string& gguf_name) {
  std::string s = gguf_name;
  for (char& c : s)
    if (c == '.') c = '_';
  return s;
}

std::string layer_tensor_name(int layer, const char* suffix) {
  return "blk_" + std::to_string(layer) + "_" + suffix;
}

}  // namespace knot
