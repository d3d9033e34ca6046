// test_paths.h — where a native test finds the CLI, the checkout and the shared models.
// Read at run time, not baked in as -D defines: an absolute path in a compile flag differs
// per checkout, so a clone at another path (CI) would miss ccache for every test object.
// ctest sets KNOT_SOURCE_DIR and knot_test::shared_models() (CMakeLists.txt); a test binary run by
// hand falls back to its own location, <checkout>/<build dir>/bin/<test>.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace knot_test {

// build/bin (or build-asan/bin): the test executables and the `knot` CLI live side by side.
inline std::string bin_dir() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("bin") : exe.parent_path().string();
}

inline std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

inline std::string source_dir() { return env_or("KNOT_SOURCE_DIR", bin_dir() + "/../.."); }

inline std::string shared_models() { return env_or("KNOT_SHARED_MODELS", source_dir() + "/../shared/models"); }

}  // namespace knot_test
