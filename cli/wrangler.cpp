// wrangler.cpp — `knot plan --wrangler DIR`: the plan for the Worker configurations. The one
// deployment description and its wrangler rendering are tooling in JS (deploy/description.mjs,
// deploy/wrangler.mjs: the names, bindings and vars the workers read); this CLI does not run
// Node. It writes the plan to DIR/plan.json and prints the command that turns it into the
// configs, `node bin/knotwork.mjs wrangler DIR/plan.json DIR [--knot KEY]` (the same files
// `knotwork plan --wrangler DIR` writes in one step).
#include <filesystem>
#include <fstream>

#include "commands.h"
#include "kernels/common.h"

std::string write_wrangler_plan(const std::string& plan_text, const std::string& dir_s, const std::string& model_key) {
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
  return "node bin/knotwork.mjs wrangler " + plan.string() + " " + dir_s + (model_key.empty() ? "" : " --knot " + model_key);
}
