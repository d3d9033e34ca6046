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

// A refused command line or option value (the caller's usage, not the data): exit status
// 2 in both CLIs, KW_ERR_USAGE at the wasm ABI.
struct UsageError : Error {
  using Error::Error;
};

[[noreturn]] inline void usage_fail(const std::string& msg) { throw UsageError(msg); }

}  // namespace knot
