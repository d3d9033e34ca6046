// json_limits.h — bound on untrusted JSON nesting, checked before any parse.
// nlohmann::json's dump() (and the DOM it builds) recurse once per nesting level, so a
// .knot whose config or info nests 100k arrays overflows the stack in `knot inspect`,
// `verify` and `generate`. Every JSON text that comes from a file or across the wasm
// ABI is first scanned here; no legitimate metadata nests more than a few levels.
#pragma once
#include <string>
#include <string_view>

#include "kernels/common.h"

namespace knot {

constexpr int KNOT_JSON_MAX_DEPTH = 64;

// Throws knot::Error "<what>: JSON nests deeper than 64 levels (at byte N)" when the
// [ / { nesting outside strings goes past max_depth. Linear, no allocation.
inline void check_json_depth(std::string_view s, const std::string& what, int max_depth = KNOT_JSON_MAX_DEPTH) {
  int depth = 0;
  bool in_str = false, esc = false;
  for (size_t i = 0; i < s.size(); i++) {
    const char c = s[i];
    if (in_str) {
      if (esc) esc = false;
      else if (c == '\\') esc = true;
      else if (c == '"') in_str = false;
    } else if (c == '"') {
      in_str = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        fail(what + ": JSON nests deeper than " + std::to_string(max_depth) + " levels (at byte " + std::to_string(i) + ")");
    } else if (c == ']' || c == '}') {
      depth--;
    }
  }
}

}  // namespace knot
