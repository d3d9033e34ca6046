// fuzz_util.h — shared by the libFuzzer harnesses (tests/fuzz/fuzz_*.cpp).
// Contract of every harness: any input may be refused with knot::Error (the engine's
// named error); anything else — another exception type, a sanitizer report, a leak, an
// allocation past -malloc_limit_mb, a timeout — is a finding.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/common.h"

// Reads little pieces off the front of the input (ints, strings up to a separator).
struct FuzzReader {
  const uint8_t* p;
  size_t n;
  FuzzReader(const uint8_t* data, size_t size) : p(data), n(size) {}
  uint8_t u8() {
    if (!n) return 0;
    n--;
    return *p++;
  }
  uint32_t u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)u8() << (8 * i);
    return v;
  }
  float f32() {
    uint32_t b = u32();
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  }
  // Bytes up to the next 0xFF (consumed) or the end.
  std::string_view piece() {
    size_t k = 0;
    while (k < n && p[k] != 0xFF) k++;
    std::string_view s((const char*)p, k);
    p += k, n -= k;
    if (n) p++, n--;
    return s;
  }
  std::string_view rest() {
    std::string_view s((const char*)p, n);
    p += n, n = 0;
    return s;
  }
};

// Runs f; a knot::Error is an accepted refusal.
template <class F>
void refuse_ok(F&& f) {
  try {
    f();
  } catch (const knot::Error&) {
  }
}
