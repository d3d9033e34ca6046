// plan_cost.cpp — see plan_cost.h for the model.
#include "infer/plan_cost.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "kernels/common.h"

namespace knot {

CostModel cost_model_from_json(const std::string& text) {
  CostModel c;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail("cost model: not a JSON object");
  auto rate = [&](const char* k, double& dst) {
    if (!j.contains(k)) return;
    const auto& v = j[k];
    if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>()))
      fail(std::string("cost model: ") + k + " must be a positive number, got " + v.dump());
    dst = v.get<double>();
  };
  rate("decode_bytes_per_ms", c.decode_bytes_per_ms);
  rate("prefill_token_bytes_per_ms", c.prefill_token_bytes_per_ms);
  rate("hop_ms", c.hop_ms);
  rate("fetch_bytes_per_ms", c.fetch_bytes_per_ms);
  rate("native_speedup", c.native_speedup);
  if (j.contains("prompt_tokens")) {
    const auto& v = j["prompt_tokens"];
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (1 << 24))
      fail("cost model: prompt_tokens must be an integer in [1, 16777216], got " + v.dump());
    c.prompt_tokens = (int)v.get<int64_t>();
  }
  return c;
}

namespace {

int n_ranges(const PlanShape& s) {
  int n = 0;
  for (const CostMember& m : s.members) n = std::max(n, m.range + 1);
  return n;
}

// ms of one member for t tokens at positions [pos, pos + t): prefill when t > 1.
double member_ms(const CostMember& m, const CostModel& c, int64_t pos, int64_t t) {
  const double compute = t == 1 ? (double)m.compute_bytes / c.decode_bytes_per_ms
                                : (double)m.compute_bytes * (double)t / c.prefill_token_bytes_per_ms;
  const double attn = (double)t * (double)m.kv_bytes_per_token * ((double)pos + (double)t / 2) / c.decode_bytes_per_ms;
  return (compute + attn) / (m.native ? c.native_speedup : 1.0) + (double)m.streamed_bytes / c.fetch_bytes_per_ms;
}

// Per range: its slowest member for t tokens at pos.
std::vector<double> range_ms(const PlanShape& s, const CostModel& c, int64_t pos, int64_t t) {
  std::vector<double> r((size_t)n_ranges(s), 0.0);
  for (const CostMember& m : s.members) r[(size_t)m.range] = std::max(r[(size_t)m.range], member_ms(m, c, pos, t));
  return r;
}

}  // namespace

PlanEstimate estimate_plan(const PlanShape& s, const CostModel& c) {
  PlanEstimate e;
  const int64_t P = c.prompt_tokens;
  for (double r : range_ms(s, c, P, 1)) e.station_ms += r;
  for (uint64_t b : s.shard_lm_head_bytes) e.shard_ms = std::max(e.shard_ms, (double)b / c.decode_bytes_per_ms);
  e.hop_ms = s.hops * c.hop_ms;
  e.decode_ms = e.station_ms + e.shard_ms + e.hop_ms;
  e.decode_tok_s = e.decode_ms > 0 ? 1000.0 / e.decode_ms : 0;

  const int64_t k = std::max(1, s.chunk);
  double seq = 0, pipe = 0;
  for (int64_t pos = 0; pos < P; pos += k) {
    const int64_t t = std::min(k, P - pos);
    const std::vector<double> r = range_ms(s, c, pos, t);
    double sum = 0, worst = 0;
    for (double x : r) sum += x, worst = std::max(worst, x);
    seq += sum + e.hop_ms;
    pipe += pos == 0 ? sum : worst;
  }
  seq += e.shard_ms;
  pipe += e.hop_ms + e.shard_ms;
  e.ttft_s = seq / 1000.0;
  e.ttft_pipelined_s = pipe / 1000.0;
  return e;
}

}  // namespace knot
