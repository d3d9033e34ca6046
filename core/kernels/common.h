// common.h — error type shared by the whole core.
// Contract: every failure the caller can cause (bad file, bad tensor, bad argument)
// throws knot::Error with a message naming what is wrong (file, tensor, layer, offset).
// The wasm C ABI catches it and returns a status code plus the message; nothing aborts.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

namespace knot {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void fail(const std::string& msg) { throw Error(msg); }

}  // namespace knot
