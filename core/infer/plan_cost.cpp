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
  auto positive = [](const nlohmann::json& v) {
    return v.is_number() && v.get<double>() > 0 && std::isfinite(v.get<double>());
  };
  auto rate = [&](const char* k, double& dst) {
    if (!j.contains(k)) return;
    const auto& v = j[k];
    if (!positive(v)) fail(std::string("cost model: ") + k + " must be a positive number, got " + v.dump());
    dst = v.get<double>();
  };
  auto integer = [&](const char* k, int lo, int hi, int& dst) {
    if (!j.contains(k)) return;
    const auto& v = j[k];
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
      fail(std::string("cost model: ") + k + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
           "], got " + v.dump());
    dst = (int)v.get<int64_t>();
  };
  rate("decode_bytes_per_ms", c.decode_bytes_per_ms);
  rate("prefill_token_bytes_per_ms", c.prefill_token_bytes_per_ms);
  rate("hop_ms", c.hop_ms);
  rate("fetch_bytes_per_ms", c.fetch_bytes_per_ms);
  rate("native_speedup", c.native_speedup);
  rate("prefill_cold_first_chunk_token_bytes_per_ms", c.prefill_cold_token_bytes_per_ms);
  integer("prefill_cold_first_chunk_tokens", 1, 65536, c.prefill_cold_tokens);
  integer("prompt_tokens", 1, 1 << 24, c.prompt_tokens);
  const char* kTable = "prefill_token_bytes_per_ms_by_chunk";
  if (j.contains(kTable)) {
    const auto& t = j[kTable];
    if (!t.is_object() || t.empty())
      fail(std::string("cost model: ") + kTable + " must be an object of chunk size -> rate, e.g. {\"16\": 1.2e7}, got " + t.dump());
    c.prefill_by_chunk.clear();
    for (auto it = t.begin(); it != t.end(); ++it) {
      const std::string& k = it.key();
      const bool digits = !k.empty() && k.size() <= 5 && k[0] != '0' &&
                          std::all_of(k.begin(), k.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
      if (!digits || std::stoi(k) > 65536)
        fail(std::string("cost model: ") + kTable + ": key '" + k + "' is not a chunk size (an integer in [1, 65536])");
      if (!positive(it.value()))
        fail(std::string("cost model: ") + kTable + "[\"" + k + "\"] must be a positive number, got " + it.value().dump());
      c.prefill_by_chunk.push_back({std::stoi(k), it.value().get<double>()});
    }
    std::sort(c.prefill_by_chunk.begin(), c.prefill_by_chunk.end());
  } else if (j.contains("prefill_token_bytes_per_ms")) {
    c.prefill_by_chunk.clear();  // an older file: its one rate at every chunk
  }
  // a file of its own prefill rates without a cold one: no cold first chunk (the compiled
  // one belongs to the compiled rates)
  if ((j.contains(kTable) || j.contains("prefill_token_bytes_per_ms")) && !j.contains("prefill_cold_first_chunk_token_bytes_per_ms"))
    c.prefill_cold_token_bytes_per_ms = 0;
  return c;
}

double prefill_rate(const CostModel& c, int t) {
  const auto& v = c.prefill_by_chunk;
  if (v.empty()) return c.prefill_token_bytes_per_ms;
  if (t <= v.front().first) return v.front().second;
  if (t >= v.back().first) return v.back().second;
  size_t i = 1;
  while (v[i].first < t) i++;
  const double x0 = std::log2((double)v[i - 1].first), x1 = std::log2((double)v[i].first), x = std::log2((double)t);
  return v[i - 1].second + (v[i].second - v[i - 1].second) * (x - x0) / (x1 - x0);
}

namespace {

int n_ranges(const PlanShape& s) {
  int n = 0;
  for (const CostMember& m : s.members) n = std::max(n, m.range + 1);
  return n;
}

// ms of one member for t tokens at positions [pos, pos + t): prefill when t > 1 (at the
// given compute rate).
double member_ms(const CostMember& m, const CostModel& c, int64_t pos, int64_t t, double rate) {
  const double compute = t == 1 ? (double)m.compute_bytes / c.decode_bytes_per_ms : (double)m.compute_bytes * (double)t / rate;
  const double attn = (double)t * (double)m.kv_bytes_per_token * ((double)pos + (double)t / 2) / c.decode_bytes_per_ms;
  return (compute + attn) / (m.native ? c.native_speedup : 1.0) + (double)m.streamed_bytes / c.fetch_bytes_per_ms;
}

// Per range: its slowest member for t tokens at pos.
std::vector<double> range_ms(const PlanShape& s, const CostModel& c, int64_t pos, int64_t t) {
  std::vector<double> r((size_t)n_ranges(s), 0.0);
  const double rate = prefill_rate(c, (int)t);
  for (const CostMember& m : s.members) r[(size_t)m.range] = std::max(r[(size_t)m.range], member_ms(m, c, pos, t, rate));
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

  // round trips per chunk: each range's, the embed's one; the rest once, after the last chunk
  const int R = n_ranges(s);
  std::vector<int> rh = s.range_hops;
  if (rh.empty()) rh.assign((size_t)R, 1);
  if ((int)rh.size() != R) fail("plan cost: " + std::to_string(rh.size()) + " range hop counts for " + std::to_string(R) + " ranges");
  int stage_hops = 0;
  for (int h : rh) stage_hops += h;
  const double embed_ms = c.hop_ms, last_ms = std::max(0, s.hops - stage_hops - 1) * c.hop_ms + e.shard_ms;

  const int64_t k = std::max(1, s.chunk);
  double seq = 0;
  for (int64_t pos = 0; pos < P; pos += k) {
    const int64_t t = std::min(k, P - pos);
    const std::vector<double> r = range_ms(s, c, pos, t);
    double sum = 0, worst = 0;
    for (size_t i = 0; i < r.size(); i++) {
      const double stage = r[i] + rh[i] * c.hop_ms;
      sum += stage, worst = std::max(worst, stage);
    }
    seq += embed_ms + sum;
    if (pos == 0) e.fill_ms = embed_ms + sum;
    else e.steady_ms += worst;
    e.bottleneck_chunk_ms = std::max(e.bottleneck_chunk_ms, worst);
    e.prefill_chunks++;
  }
  e.ttft_s = (seq + last_ms) / 1000.0;
  e.ttft_pipelined_s = (e.fill_ms + e.steady_ms + last_ms) / 1000.0;
  // a fresh mesh: every range's first chunk of prefill_cold_tokens runs at the cold rate
  if (c.prefill_cold_token_bytes_per_ms > 0) {
    const int64_t t0 = std::max(2, c.prefill_cold_tokens);
    const double warm = prefill_rate(c, (int)t0);
    std::vector<double> extra((size_t)R, 0.0);
    for (const CostMember& m : s.members) {
      const double x = std::max(0.0, (double)m.compute_bytes * (double)t0 * (1 / c.prefill_cold_token_bytes_per_ms - 1 / warm)) /
                       (m.native ? c.native_speedup : 1.0);
      extra[(size_t)m.range] = std::max(extra[(size_t)m.range], x);
    }
    for (double x : extra) e.ttft_cold_extra_s += x / 1000.0;
  }
  return e;
}

int fastest_prefill_chunk(PlanShape s, const CostModel& c, int max_chunk) {
  max_chunk = std::max(1, max_chunk);
  std::vector<int> ks;
  for (int k = 1; k < max_chunk; k *= 2) ks.push_back(k);
  ks.push_back(max_chunk);
  int best = max_chunk;
  double best_s = 0;
  for (auto it = ks.rbegin(); it != ks.rend(); ++it) {  // largest first: ties keep the larger
    s.chunk = *it;
    const double t = estimate_plan(s, c).ttft_pipelined_s;
    if (it == ks.rbegin() || t < best_s) best = *it, best_s = t;
  }
  return best;
}

}  // namespace knot
