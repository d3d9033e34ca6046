// abi_internal.h — helpers shared by the wasm/abi*.cpp translation units.
#pragma once
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>

#include "abi.h"
#include "kernels/common.h"

#define KW_EXPORT(name) extern "C" __attribute__((export_name(#name)))

namespace kw {

extern std::string g_error;   // last error message
extern std::string g_result;  // module-owned result buffer

void sample_memory();
uint32_t heap_in_use();   // malloc'd bytes now (abi_heap.cpp: counted, O(1))
uint32_t heap_peak();     // their high-water mark since the last reset
void heap_reset_peak();
constexpr uint64_t kLinearCap = 128ull << 20;  // -sMAXIMUM_MEMORY

// Raised for a bad handle; guard() maps it to KW_ERR_HANDLE.
struct HandleError : knot::Error {
  using knot::Error::Error;
};

// Runs f, turning every exception into a status code + g_error. Never lets one escape.
template <class F>
int guard(F&& f) {
  sample_memory();
  int status = KW_OK;
  try {
    f();
  } catch (const HandleError& e) {
    g_error = e.what();
    status = KW_ERR_HANDLE;
  } catch (const knot::UsageError& e) {
    g_error = e.what();
    status = KW_ERR_USAGE;
  } catch (const knot::Error& e) {
    g_error = e.what();
    status = KW_ERR_KNOT;
  } catch (const std::bad_alloc&) {
    g_error = "out of memory: wasm linear memory is capped at 128 MB";
    status = KW_ERR_OOM;
  } catch (const std::length_error& e) {  // a container asked for more than size_t holds
    g_error = std::string("out of memory: a buffer larger than wasm32 can address was requested (") + e.what() + ")";
    status = KW_ERR_OOM;
  } catch (const std::exception& e) {
    g_error = e.what();
    status = KW_ERR_STD;
  } catch (...) {
    g_error = "unknown exception";
    status = KW_ERR_UNKNOWN;
  }
  sample_memory();
  return status;
}

// Integer-handle table: handles are never reused, so a stale handle is always an error.
template <class T>
class Table {
 public:
  int add(std::unique_ptr<T> v) {
    int h = next_++;
    items_[h] = std::move(v);
    return h;
  }
  T& get(int h, const char* what) {
    auto it = items_.find(h);
    if (it == items_.end()) throw HandleError(std::string(what) + ": unknown or freed handle " + std::to_string(h));
    return *it->second;
  }
  bool remove(int h) { return items_.erase(h) > 0; }
  template <class Pred>
  size_t count_if(Pred pred) const {
    size_t n = 0;
    for (const auto& [h, v] : items_) n += pred(*v) ? 1 : 0;
    return n;
  }
  template <class Pred>
  void remove_if(Pred pred) {
    for (auto it = items_.begin(); it != items_.end();) it = pred(*it->second) ? items_.erase(it) : std::next(it);
  }

 private:
  std::map<int, std::unique_ptr<T>> items_;
  int next_ = 1;
};

inline std::string_view str_arg(const char* p, uint32_t n) {
  return p ? std::string_view(p, n) : std::string_view();
}

// JS numbers crossing into the module (file sizes, offsets, lengths, row indices): a
// non-negative integer exact in a double (<= 2^53), else refused naming the argument —
// casting NaN, a negative or 1e300 to an integer is undefined behaviour.
inline uint64_t u64_arg(double v, const char* fn, const char* arg) {
  if (!(v >= 0) || v > 9007199254740992.0 || v != (double)(uint64_t)v)
    knot::fail(std::string(fn) + ": " + arg + " = " + std::to_string(v) + " is not an integer in [0, 2^53]");
  return (uint64_t)v;
}

// A byte count headed for a buffer in linear memory: size_t is 32 bits here and the
// memory is capped, so anything past the cap is refused, naming `what` and the value,
// before it is narrowed or allocated.
inline size_t mem_bytes(uint64_t n, const std::string& what) {
  if (n > kLinearCap)
    knot::fail(what + ": " + std::to_string(n) + " bytes do not fit this module's linear memory (capped at " +
               std::to_string(kLinearCap >> 20) + " MiB)");
  return (size_t)n;
}

// size_t is 32 bits in wasm: a tensor of 4 GiB or more cannot be held here, and
// narrowing its size would later size a small buffer and copy the full tensor into it.
// Its Tensor::size stays 0 until loaded; a whole load is refused by mem_bytes() on the
// table's uint64 size (naming tensor and value) before any byte is read.
inline size_t fit_size(uint64_t size) { return size <= SIZE_MAX ? (size_t)size : 0; }

inline void set_result(std::string s) { g_result = std::move(s); }
inline void set_result_bytes(const void* p, size_t n) { g_result.assign((const char*)p, n); }

}  // namespace kw
