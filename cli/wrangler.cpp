// wrangler.cpp — `knot plan --wrangler DIR`: the Worker configurations of a plan (docs/architecture.md,
// §8). One writer exists, workers/lib/wrangler.mjs (the names, bindings and vars the
// workers read live beside the workers); this writes the plan to DIR/plan.json and runs
// `node bin/knotwork.mjs wrangler DIR/plan.json DIR`, so both CLIs emit the same files.
// The checkout is KNOTWORK_ROOT (default: the source dir this binary was built from), the
// Node binary KNOTWORK_NODE (default: node on PATH).
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "commands.h"
#include "kernels/common.h"

#ifndef KNOT_SOURCE_DIR
#define KNOT_SOURCE_DIR "."
#endif

extern char** environ;

int write_wrangler_configs(const std::string& plan_text, const std::string& dir_s, const std::string& model_key) {
  namespace fs = std::filesystem;
  const fs::path dir(dir_s);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) knot::fail(dir_s + ": cannot create directory: " + ec.message());
  const fs::path plan = dir / "plan.json";
  {
    std::ofstream f(plan, std::ios::binary | std::ios::trunc);
    if (!f || !(f << plan_text) || !f.flush()) knot::fail(plan.string() + ": cannot write");
  }
  const char* root = std::getenv("KNOTWORK_ROOT");
  const char* node = std::getenv("KNOTWORK_NODE");
  const std::string script = (fs::path(root && *root ? root : KNOT_SOURCE_DIR) / "bin" / "knotwork.mjs").string();
  if (!fs::exists(script)) knot::fail(script + ": not found (set KNOTWORK_ROOT to a knotwork checkout; the Worker configs are written by its bin/knotwork.mjs)");
  std::vector<std::string> argv_s = {node && *node ? node : "node", script, "wrangler", plan.string(), dir_s};
  if (!model_key.empty()) argv_s.insert(argv_s.end(), {"--knot", model_key});
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  const int e = posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
  if (e != 0) knot::fail(std::string(argv[0]) + ": cannot run (" + std::strerror(e) + "); Node.js writes the Worker configs (set KNOTWORK_NODE)");
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) knot::fail("writing the Worker configurations failed (" + script + " wrangler)");
  return 0;
}
