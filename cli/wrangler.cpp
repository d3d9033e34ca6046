// wrangler.cpp — `knot plan --wrangler DIR`: the Worker configurations of a plan, written
// natively by the one deployment description (core/infer/deployment.h; the node CLI and the
// tests reach the same code through kw_deploy): DIR/wrangler.jsonc (the coordinator) and one
// DIR/knot-<name>.jsonc per station member, vocab shard and the warden, plus plan.json and
// topology.json. Each `main` is an absolute path to the Worker sources of the checkout
// KNOTWORK_ROOT (default: the source dir this binary was built from).
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "infer/deployment.h"
#include "kernels/common.h"

#ifndef KNOT_SOURCE_DIR
#define KNOT_SOURCE_DIR "."
#endif

namespace {

void write_file(const std::filesystem::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  if (!f || !(f << text) || !f.flush()) knot::fail(p.string() + ": cannot write");
}

}  // namespace

size_t write_wrangler_configs(const std::string& plan_text, const std::string& dir_s, const std::string& model_key) {
  namespace fs = std::filesystem;
  using ojson = nlohmann::ordered_json;
  const ojson plan = ojson::parse(plan_text);
  const ojson t = knot::topology_from_plan(plan, model_key.empty() ? knot::knot_key_of(plan["model"]["name"]) : model_key);
  knot::DeployOptions o;
  o.warden = true;  // deployments bind the warden
  const char* env = std::getenv("KNOTWORK_ROOT");
  std::string root = fs::absolute(env && *env ? env : KNOT_SOURCE_DIR).lexically_normal().string();
  if (root.size() > 1 && root.back() == '/') root.pop_back();
  if (!fs::exists(fs::path(root) / "workers")) knot::fail(root + ": no workers/ here (set KNOTWORK_ROOT to a knotwork checkout)");
  const auto files = knot::wrangler_files(knot::describe_deployment(t, o), root + "/");
  const fs::path dir(dir_s);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) knot::fail(dir_s + ": cannot create directory: " + ec.message());
  for (const auto& [name, text] : files) write_file(dir / name, text);
  write_file(dir / "plan.json", plan_text);
  write_file(dir / "topology.json", t.dump(2) + "\n");
  return files.size();
}
