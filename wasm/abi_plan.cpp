// abi_plan.cpp — the planner (core/infer/planner.h) at the C ABI, so the workers and
// bindings/planner.mjs produce the same plan JSON as native `knot plan`.
#include "abi.h"
#include "abi_internal.h"
#include "infer/deployment.h"
#include "infer/planner.h"

using namespace kw;

// Header prefix protocol of kw_parse_header: result {"need": N} (fetch the first N bytes,
// call again) or the plan JSON (planner.h). opts: JSON object (plan_options_from_json).
KW_EXPORT(kw_plan)
int kw_plan(const uint8_t* prefix, uint32_t len, double file_size, const char* name, uint32_t name_len, const char* opts,
            uint32_t opts_len) {
  return guard([&] {
    const std::string what = name_len ? std::string(str_arg(name, name_len)) : std::string("model");
    const uint64_t size = (uint64_t)file_size;
    if (len > size) knot::fail(what + ": prefix of " + std::to_string(len) + " bytes is longer than the file (" + std::to_string(size) + ")");
    const knot::PlanOptions o = knot::plan_options_from_json(opts_len ? std::string(str_arg(opts, opts_len)) : std::string("{}"));
    uint64_t need = 0;
    knot::PlanModel m = knot::plan_model_from_header(prefix, len, size, what, &need);
    if (need) {
      set_result("{\"need\":" + std::to_string(need) + "}");
      return;
    }
    set_result(knot::plan_json(m, o));
  });
}

// The deployment description and its wrangler.jsonc files (core/infer/deployment.h):
// request {topology | plan + knot?, options?, main_prefix} -> {topology, description, files}.
KW_EXPORT(kw_deploy)
int kw_deploy(const char* req, uint32_t req_len) {
  return guard([&] { set_result(knot::deploy_request(std::string(str_arg(req, req_len)))); });
}
