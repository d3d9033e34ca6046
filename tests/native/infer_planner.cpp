// infer_planner.cpp — the mesh planner on a qwen2.5-coder-7b-shaped tensor table
// (Q4_K_M type mix, no tensor data): every isolate within budget with its items summing
// to the total, every layer covered exactly once (whole or by slices that partition the
// heads and FFN columns), vocab ranges meeting end to end with the padding owned by none,
// fluid phases as large as the largest phase of the table, per-token counts, refusals
// that give the reason.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "container/convert.h"
#include "container/synth.h"
#include "container/loader.h"
#include "infer/planner.h"
#include "test_paths.h"

using namespace knot;
using json = nlohmann::json;

namespace {
SynthOptions qwen7b(int layers = 28) {
  SynthOptions o;
  o.arch = "qwen2";
  o.hidden = 3584, o.layers = layers, o.heads = 28, o.kv_heads = 4, o.ffn = 18944;
  o.vocab = 151936, o.vocab_tensor = 152064, o.type = "Q4_K_M", o.ctx = 32768;
  return o;
}
PlanModel table_of(const SynthOptions& o) {
  PlanModel m;
  m.name = "qwen7b-shaped";
  m.config = synth_config(o);
  for (const auto& d : synth_tensors(o)) {
    uint64_t rows = 1;
    for (size_t i = 1; i < d.shape.size(); i++) rows *= (uint64_t)d.shape[i];
    m.tensors.push_back({d.name, d.type, d.shape, row_bytes(d.type, d.shape[0], d.name) * rows});
  }
  return m;
}
json plan(const PlanModel& m, PlanOptions o = {}) { return json::parse(plan_json(m, o)); }
std::string error_of(const PlanModel& m, const PlanOptions& o) {
  try {
    plan_json(m, o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
uint64_t sum_items(const json& mem) {
  return mem["resident_weights"].get<uint64_t>() + mem["largest_phase"].get<uint64_t>() + mem["kv"].get<uint64_t>() +
         mem["activations"].get<uint64_t>() + mem["module"].get<uint64_t>() + mem["js_heap"].get<uint64_t>();
}
void check_common(const json& p, const ModelConfig& c, uint64_t budget) {
  // every isolate fits, items add up
  for (const char* k : {"stations", "shards"})
    for (const auto& s : p[k]) {
      EXPECT_EQ(sum_items(s["memory"]), s["memory"]["total"].get<uint64_t>()) << s["id"];
      EXPECT_LE(s["memory"]["total"].get<uint64_t>(), budget) << s["id"];
    }
  // every layer exactly once: whole, or slices partitioning heads and FFN columns
  std::vector<int> whole(c.n_layer, 0), heads(c.n_layer, 0), cols(c.n_layer, 0);
  for (const auto& s : p["stations"]) {
    const int l0 = s["layers"][0], l1 = s["layers"][1];
    ASSERT_LT(l0, l1);
    if (s.contains("slice")) {
      ASSERT_EQ(l1, l0 + 1);
      heads[l0] += s["heads"][1].get<int>() - s["heads"][0].get<int>();
      cols[l0] += s["ffn_cols"][1].get<int>() - s["ffn_cols"][0].get<int>();
      EXPECT_EQ(s["heads"][0].get<int>() % (c.n_head / c.n_head_kv), 0) << "head cut inside a GQA group";
    } else {
      for (int l = l0; l < l1; l++) whole[l]++;
    }
  }
  for (int l = 0; l < c.n_layer; l++) {
    if (whole[l]) {
      EXPECT_EQ(whole[l], 1) << "layer " << l;
      EXPECT_EQ(heads[l] + cols[l], 0) << "layer " << l;
    } else {
      EXPECT_EQ(heads[l], c.n_head) << "layer " << l;
      EXPECT_EQ(cols[l], c.n_ff) << "layer " << l;
    }
  }
  // vocab shards meet end to end over the tokenizer's vocabulary
  int64_t v = 0;
  for (const auto& s : p["shards"]) {
    EXPECT_EQ(s["vocab"][0].get<int64_t>(), v);
    v = s["vocab"][1].get<int64_t>();
    EXPECT_GT(v, s["vocab"][0].get<int64_t>());
  }
  EXPECT_EQ(v, c.n_vocab);
  EXPECT_EQ(p["padding_rows"], json::array({c.n_vocab, c.n_vocab_tensor}));
  EXPECT_EQ(p["isolates"].get<size_t>(), p["stations"].size() + p["shards"].size());
  EXPECT_GT(p["context"].get<int>(), 0);
  EXPECT_GT(p["chunk"].get<int>(), 0);
}
}  // namespace

TEST(Planner, Qwen7bResidentSplitsEveryLayerIntoAlignedHalves) {
  const SynthOptions so = qwen7b();
  const PlanModel m = table_of(so);
  const json p = plan(m);
  check_common(p, m.config, 128ull << 20);
  EXPECT_EQ(p["mode"], "resident");
  // A Q4_K_M qwen7b layer is ~150-170 MB: two slices of 14 heads (1792 = 7 x 256 columns)
  // and 9472 FFN columns (37 x 256) each.
  ASSERT_EQ(p["stations"].size(), 56u);
  for (const auto& s : p["stations"]) {
    EXPECT_EQ(s["slice"][1], 2);
    EXPECT_TRUE(s["aligned"].get<bool>());
    EXPECT_EQ(s["mode"], "resident");
    EXPECT_EQ(s["memory"]["largest_phase"], 0);
    EXPECT_EQ(s["heads"][1].get<int>() - s["heads"][0].get<int>(), 14);
    EXPECT_EQ(s["ffn_cols"][1].get<int>() - s["ffn_cols"][0].get<int>(), 9472);
  }
  EXPECT_EQ(p["stations"][0]["role"], "entry");
  EXPECT_EQ(p["stations"][55]["role"], "exit");
  EXPECT_GE(p["context"].get<int>(), 4096);
  // per token: embed (1) + two rounds of 2 slices per layer + lm_head at every shard
  const int shards = (int)p["shards"].size();
  EXPECT_EQ(p["per_token"]["subrequests"], 1 + 28 * 4 + shards);
  EXPECT_EQ(p["per_token"]["hops"], 1 + 28 * 2 + 1);
  EXPECT_EQ(p["per_token"]["simultaneous_connections"], std::max(2, shards));
  EXPECT_FALSE(p["per_token"]["generation_4096"]["within_subrequest_cap"].get<bool>());
}

TEST(Planner, Qwen7bFluidTwoStationsHoldOnePhaseAndTheLargestContext) {
  const SynthOptions so = qwen7b();
  const PlanModel m = table_of(so);
  PlanOptions o;
  o.mode = "fluid";
  o.stations = 2;
  const json p = plan(m, o);
  check_common(p, m.config, o.budget);
  ASSERT_EQ(p["stations"].size(), 2u);
  EXPECT_EQ(p["stations"][0]["layers"], json::array({0, 14}));
  EXPECT_EQ(p["stations"][1]["layers"], json::array({14, 28}));
  // the largest phase is the largest non-resident tensor group of one layer in the table
  uint64_t largest = 0;
  for (const auto& t : m.tensors)
    if (t.name.find("ffn_down") != std::string::npos) largest = std::max(largest, t.size);
  for (const auto& s : p["stations"]) {
    EXPECT_EQ(s["mode"], "fluid");
    EXPECT_EQ(s["memory"]["largest_phase"].get<uint64_t>(), largest);
    // the residency rule (docs/memory.md): norms, biases, anything under 1 MiB (here attn_k)
    uint64_t floor = 0;
    const int l0 = s["layers"][0], l1 = s["layers"][1];
    for (const auto& t : m.tensors) {
      const bool small = t.name.find("norm") != std::string::npos || t.name.find("bias") != std::string::npos || t.size < (1u << 20);
      int layer = -1;
      if (std::sscanf(t.name.c_str(), "blk_%d_", &layer) == 1 ? layer >= l0 && layer < l1 : (t.name == "output_norm_weight" && l1 == 28))
        if (small) floor += t.size;
    }
    EXPECT_EQ(s["memory"]["resident_weights"].get<uint64_t>(), floor);
    EXPECT_LT(floor, 32ull << 20);
    // KV at the plan's context: 2 x 14 layers x 4 KV heads x 128 x 2 B per position
    EXPECT_EQ(s["memory"]["kv"].get<uint64_t>(), 28672ull * p["context"].get<uint64_t>());
  }
  // largest context: one more position would not fit the fuller station
  const int ctx = p["context"];
  EXPECT_GT(ctx, 256);
  o.context = ctx + 1;
  o.chunk = p["chunk"];
  EXPECT_NE(error_of(m, o).find("cannot be met"), std::string::npos) << error_of(m, o);
  o.context = ctx;
  EXPECT_EQ(error_of(m, o), "");
}

TEST(Planner, FluidWithoutAStationCountTakesAsFewAsHoldTheContext) {
  const PlanModel m = table_of(qwen7b());
  PlanOptions o;
  o.mode = "fluid";
  o.context = 4096;
  const json p = plan(m, o);
  check_common(p, m.config, o.budget);
  EXPECT_EQ(p["context"], 4096);
  const size_t n = p["stations"].size();
  EXPECT_GT(n, 2u);
  o.stations = (int)n - 1;
  EXPECT_NE(error_of(m, o).find("KV at context 4096"), std::string::npos) << error_of(m, o);
}

TEST(Planner, SmallModelIsOneResidentStationAndOneShard) {
  SynthOptions so;
  so.hidden = 256, so.layers = 4, so.heads = 8, so.kv_heads = 2, so.ffn = 512, so.vocab = 1000, so.type = "Q8_0";
  const PlanModel m = table_of(so);
  const json p = plan(m);
  check_common(p, m.config, 128ull << 20);
  ASSERT_EQ(p["stations"].size(), 1u);
  EXPECT_EQ(p["stations"][0]["role"], "entry-exit");
  EXPECT_EQ(p["shards"].size(), 1u);
  EXPECT_EQ(p["context"], so.ctx);  // capped by the training context
}

TEST(Planner, ShardCountAndBudgetAreHonoured) {
  const PlanModel m = table_of(qwen7b(2));
  PlanOptions o;
  o.shards = 8;
  const json p = plan(m, o);
  ASSERT_EQ(p["shards"].size(), 8u);
  EXPECT_EQ(p["shards"][0]["vocab"], json::array({0, 18992}));  // the reference cluster of docs/architecture.md
  EXPECT_EQ(p["shards"][7]["vocab"], json::array({132944, 151936}));
  o.shards = 2;
  EXPECT_NE(error_of(m, o).find("vocab shard of 75968 rows"), std::string::npos) << error_of(m, o);
}

TEST(Planner, ImpossibleBudgetsAreRefusedWithTheReason) {
  const PlanModel m = table_of(qwen7b(2));
  PlanOptions o;
  o.budget = 16ull << 20;
  EXPECT_NE(error_of(m, o).find("does not even hold the module"), std::string::npos) << error_of(m, o);
  o.budget = 40ull << 20;
  const std::string e = error_of(m, o);
  EXPECT_NE(e.find("cannot be met"), std::string::npos) << e;
  EXPECT_NE(e.find("layer 0"), std::string::npos) << e;
  o = {};
  o.context = 40000;
  EXPECT_NE(error_of(m, o).find("training context 32768"), std::string::npos) << error_of(m, o);
  o = {};
  o.mode = "sideways";
  EXPECT_NE(error_of(m, o).find("resident or fluid"), std::string::npos);
  PlanModel broken = m;
  broken.tensors.erase(std::remove_if(broken.tensors.begin(), broken.tensors.end(),
                                      [](const PlanTensor& t) { return t.name == "blk_1_ffn_up_weight"; }),
                       broken.tensors.end());
  EXPECT_NE(error_of(broken, {}).find("missing tensor blk_1_ffn_up_weight (layer 1, phase ffn_up)"), std::string::npos);
}

TEST(Planner, SizesAndOptionsParse) {
  EXPECT_EQ(parse_bytes("128MB", "b"), 128ull << 20);
  EXPECT_EQ(parse_bytes("1.5GiB", "b"), 3ull << 29);
  EXPECT_EQ(parse_bytes("4096", "b"), 4096u);
  EXPECT_THROW(parse_bytes("12XB", "b"), Error);
  EXPECT_THROW(parse_bytes("MB", "b"), Error);
  const PlanOptions o = plan_options_from_json(R"({"budget":"64MB","mode":"fluid","stations":3,"context":100})");
  EXPECT_EQ(o.budget, 64ull << 20);
  EXPECT_EQ(o.stations, 3);
  EXPECT_THROW(plan_options_from_json(R"({"budjet":1})"), Error);
  EXPECT_THROW(plan_options_from_json(R"({"context":-1})"), Error);
}

// ---- the time model (plan_cost.h) and the objective ----

TEST(PlanCost, EstimateFollowsTheModelOnAHandBuiltShape) {
  // two ranges: range 0 one member, range 1 two slices (the slower counts); two shards
  PlanShape s;
  s.members = {{0, 1000, 10, 0}, {1, 4000, 20, 0}, {1, 2000, 20, 0}};
  s.shard_lm_head_bytes = {500, 900};
  s.hops = 5;            // embed, range 0's one, range 1's two (attention, FFN), lm-head
  s.range_hops = {1, 2};
  s.chunk = 2;
  CostModel c;
  c.decode_bytes_per_ms = 100, c.prefill_token_bytes_per_ms = 1000, c.hop_ms = 0.5, c.fetch_bytes_per_ms = 1;
  c.prefill_by_chunk.clear();  // one rate at every chunk
  c.prompt_tokens = 4;
  const PlanEstimate e = estimate_plan(s, c);
  // decode at position 4: (1000 + 10*4*... ) member_ms = compute + t*kv*(pos + t/2)/rate, t = 1
  const double m0 = 1000.0 / 100 + 10 * 4.5 / 100, m1 = 4000.0 / 100 + 20 * 4.5 / 100;
  EXPECT_DOUBLE_EQ(e.station_ms, m0 + m1);
  EXPECT_DOUBLE_EQ(e.shard_ms, 9.0);
  EXPECT_DOUBLE_EQ(e.hop_ms, 2.5);
  EXPECT_DOUBLE_EQ(e.decode_ms, m0 + m1 + 9 + 2.5);
  EXPECT_DOUBLE_EQ(e.decode_tok_s, 1000.0 / (m0 + m1 + 11.5));
  // prefill: chunks at pos 0 and 2, 2 tokens each
  auto chunk = [](double bytes, double kv, double pos) { return bytes * 2 / 1000 + 2 * kv * (pos + 1) / 100; };
  const double a0 = chunk(1000, 10, 0), b0 = chunk(4000, 20, 0), a1 = chunk(1000, 10, 2), b1 = chunk(4000, 20, 2);
  // stages: range 0 + one round trip, range 1 + two; per chunk the embed's round trip; once
  // at the end the lm-head's round trip and the slowest shard
  const double s00 = a0 + 0.5, s10 = b0 + 1.0, s01 = a1 + 0.5, s11 = b1 + 1.0;
  EXPECT_DOUBLE_EQ(e.ttft_s * 1000, (0.5 + s00 + s10) + (0.5 + s01 + s11) + 0.5 + 9);
  EXPECT_DOUBLE_EQ(e.fill_ms, 0.5 + s00 + s10);
  EXPECT_DOUBLE_EQ(e.steady_ms, std::max(s01, s11));
  EXPECT_DOUBLE_EQ(e.bottleneck_chunk_ms, std::max(s01, s11));
  EXPECT_EQ(e.prefill_chunks, 2);
  EXPECT_DOUBLE_EQ(e.ttft_pipelined_s * 1000, e.fill_ms + e.steady_ms + 0.5 + 9);
  EXPECT_EQ(e.ttft_cold_extra_s, 0);  // no cold rate measured
  // without range hop counts every range is one round trip
  PlanShape one = s;
  one.range_hops.clear();
  EXPECT_DOUBLE_EQ(estimate_plan(one, c).fill_ms, 0.5 + s00 + (s10 - 0.5));
  one.range_hops = {1};
  EXPECT_THROW(estimate_plan(one, c), Error);
  // a fresh mesh: every range's first 2-token chunk at the cold rate (500 vs 1000 warm), the
  // slower slice of range 1 counting
  c.prefill_cold_token_bytes_per_ms = 500, c.prefill_cold_tokens = 2;
  EXPECT_DOUBLE_EQ(estimate_plan(s, c).ttft_cold_extra_s * 1000, 1000.0 * 2 * (1 / 500.0 - 1 / 1000.0) + 4000.0 * 2 * (1 / 500.0 - 1 / 1000.0));
  c.prefill_cold_token_bytes_per_ms = 0;
  // a fluid member adds its streamed bytes at the fetch rate, per token and per chunk
  s.members[0].streamed_bytes = 7;
  EXPECT_DOUBLE_EQ(estimate_plan(s, c).station_ms, m0 + 7 + m1);
}

TEST(PlanCost, PrefillRateInterpolatesTheMeasuredChunksInLog2AndClamps) {
  CostModel c;
  c.prefill_token_bytes_per_ms = 7;
  c.prefill_by_chunk = {{4, 100}, {16, 300}, {64, 400}};
  EXPECT_DOUBLE_EQ(prefill_rate(c, 1), 100);   // below the table: its first rate
  EXPECT_DOUBLE_EQ(prefill_rate(c, 4), 100);
  EXPECT_DOUBLE_EQ(prefill_rate(c, 8), 200);   // log2 8 is half way from 4 to 16
  EXPECT_DOUBLE_EQ(prefill_rate(c, 16), 300);
  EXPECT_DOUBLE_EQ(prefill_rate(c, 32), 350);
  EXPECT_DOUBLE_EQ(prefill_rate(c, 24), 300 + 100 * (std::log2(24.0) - 4) / 2);
  EXPECT_DOUBLE_EQ(prefill_rate(c, 64), 400);
  EXPECT_DOUBLE_EQ(prefill_rate(c, 512), 400);  // above: its last rate
  c.prefill_by_chunk.clear();
  EXPECT_DOUBLE_EQ(prefill_rate(c, 8), 7);      // no table: the one rate
  // the estimate prefills at the rate of its chunk
  PlanShape s;
  s.members = {{0, 1000, 0, 0}};
  s.hops = 3, s.chunk = 8;
  c.prefill_by_chunk = {{4, 100}, {16, 300}};
  c.prompt_tokens = 8, c.hop_ms = 0;
  EXPECT_DOUBLE_EQ(estimate_plan(s, c).fill_ms, 1000.0 * 8 / 200);
}

TEST(PlanCost, FastestPrefillChunkFollowsTheTable) {
  // 8 ranges of equal compute, 1 ms round trips, 512 tokens
  PlanShape s;
  for (int r = 0; r < 8; r++) s.members.push_back({r, 1000000, 0, 0});
  s.hops = 10;
  CostModel c;
  c.hop_ms = 1, c.prompt_tokens = 512, c.decode_bytes_per_ms = 1e5;
  // one rate at every chunk: the smallest chunk that still hides the round trips wins over 256
  c.prefill_by_chunk = {{2, 1e6}, {256, 1e6}};
  const int flat = fastest_prefill_chunk(s, c, 256);
  EXPECT_LT(flat, 256);
  // chunks up to 128 slow (the mat-vec rate), 256 100x faster: the largest chunk wins
  c.prefill_by_chunk = {{2, 1e5}, {128, 1e5}, {256, 1e7}};
  EXPECT_EQ(fastest_prefill_chunk(s, c, 256), 256);
  // every candidate is no faster than the one chosen
  for (const auto& table : {std::vector<std::pair<int, double>>{{2, 1e6}, {256, 1e6}}, {{2, 1e5}, {4, 1e5}, {256, 1e7}},
                            {{2, 3e6}, {16, 1e6}, {64, 2e6}}}) {
    c.prefill_by_chunk = table;
    PlanShape b = s;
    b.chunk = fastest_prefill_chunk(s, c, 256);
    const double best = estimate_plan(b, c).ttft_pipelined_s;
    for (int k = 1; k <= 256; k *= 2) {
      PlanShape o = s;
      o.chunk = k;
      EXPECT_LE(best, estimate_plan(o, c).ttft_pipelined_s) << "chunk " << k;
    }
  }
  // max_chunk itself is a candidate, not only the powers of two
  c.prefill_by_chunk = {{2, 1e5}, {64, 1e5}, {100, 1e7}};
  EXPECT_EQ(fastest_prefill_chunk(s, c, 100), 100);
}

// The message cost_model_from_json throws for json ("" when it accepts it).
static std::string cost_model_error(const char* json) {
  try {
    cost_model_from_json(json);
  } catch (const Error& e) {
    return std::string(e.what());
  }
  return std::string();
}

TEST(PlanCost, CostModelJsonReadsTheChunkTableAndNamesItsBadEntries) {
  const CostModel c = cost_model_from_json(
      R"({"prefill_token_bytes_per_ms_by_chunk": {"64": 3e6, "2": 1e6, "16": 2.5e6}, "prefill_cold_first_chunk_token_bytes_per_ms": 9e5,
          "prefill_cold_first_chunk_tokens": 16})");
  ASSERT_EQ(c.prefill_by_chunk.size(), 3u);
  EXPECT_EQ(c.prefill_by_chunk[0], (std::pair<int, double>{2, 1e6}));  // sorted by chunk
  EXPECT_EQ(c.prefill_by_chunk[1], (std::pair<int, double>{16, 2.5e6}));
  EXPECT_EQ(c.prefill_by_chunk[2], (std::pair<int, double>{64, 3e6}));
  EXPECT_EQ(c.prefill_cold_token_bytes_per_ms, 9e5);
  EXPECT_EQ(c.prefill_cold_tokens, 16);
  // an older file (one rate, no table) prefills at that rate; a file without either keeps the defaults
  const CostModel old = cost_model_from_json(R"({"prefill_token_bytes_per_ms": 5e6})");
  EXPECT_TRUE(old.prefill_by_chunk.empty());
  EXPECT_EQ(prefill_rate(old, 2), 5e6);
  EXPECT_EQ(prefill_rate(old, 512), 5e6);
  EXPECT_EQ(old.prefill_cold_token_bytes_per_ms, 0);  // the compiled cold rate is not the file's
  EXPECT_EQ(cost_model_from_json(R"({"hop_ms": 1})").prefill_by_chunk, CostModel{}.prefill_by_chunk);
  const std::string field = "prefill_token_bytes_per_ms_by_chunk";
  for (const char* bad : {R"({"prefill_token_bytes_per_ms_by_chunk": {"x": 1}})", R"({"prefill_token_bytes_per_ms_by_chunk": {"0": 1}})",
                          R"({"prefill_token_bytes_per_ms_by_chunk": {"1.5": 1}})", R"({"prefill_token_bytes_per_ms_by_chunk": {"08": 1}})",
                          R"({"prefill_token_bytes_per_ms_by_chunk": {"-4": 1}})", R"({"prefill_token_bytes_per_ms_by_chunk": {"99999": 1}})"}) {
    const std::string e = cost_model_error(bad);
    EXPECT_NE(e.find(field + ": key"), std::string::npos) << bad << ": " << e;
    EXPECT_NE(e.find("is not a chunk size"), std::string::npos) << bad << ": " << e;
  }
  EXPECT_NE(cost_model_error(R"({"prefill_token_bytes_per_ms_by_chunk": {"8": -1}})").find(field + "[\"8\"] must be a positive number, got -1"),
            std::string::npos);
  EXPECT_NE(cost_model_error(R"({"prefill_token_bytes_per_ms_by_chunk": {"8": "fast"}})").find(field + "[\"8\"] must be a positive number"),
            std::string::npos);
  EXPECT_NE(cost_model_error(R"({"prefill_token_bytes_per_ms_by_chunk": {}})").find(field + " must be an object"), std::string::npos);
  EXPECT_NE(cost_model_error(R"({"prefill_token_bytes_per_ms_by_chunk": [1, 2]})").find(field + " must be an object"), std::string::npos);
  EXPECT_NE(cost_model_error(R"({"prefill_cold_first_chunk_token_bytes_per_ms": 0})").find("prefill_cold_first_chunk_token_bytes_per_ms must be a positive"),
            std::string::npos);
  EXPECT_NE(cost_model_error(R"({"prefill_cold_first_chunk_tokens": 2.5})").find("prefill_cold_first_chunk_tokens must be an integer"), std::string::npos);
}

TEST(PlanCost, CostModelJsonNamesTheBadField) {
  const CostModel c = cost_model_from_json(R"({"decode_bytes_per_ms": 5, "hop_ms": 2.5, "provenance": "x"})");
  EXPECT_EQ(c.decode_bytes_per_ms, 5);
  EXPECT_EQ(c.hop_ms, 2.5);
  EXPECT_EQ(c.prefill_token_bytes_per_ms, CostModel{}.prefill_token_bytes_per_ms);
  EXPECT_NE(cost_model_error(R"({"hop_ms": -1})").find("hop_ms must be a positive number"), std::string::npos);
  EXPECT_NE(cost_model_error(R"({"decode_bytes_per_ms": "fast"})").find("decode_bytes_per_ms"), std::string::npos);
  EXPECT_NE(cost_model_error(R"({"prompt_tokens": 0})").find("prompt_tokens"), std::string::npos);
  EXPECT_NE(cost_model_error("[1]").find("not a JSON object"), std::string::npos);
}

TEST(PlanCost, CompiledDefaultsAreTheMeasuredFile) {
  // bench/cost-model.json is what bench/estimate-7b.mjs --write-cost measured; the planner's
  // defaults must be its figures (re-measure: run the bench, then copy them into plan_cost.h).
  const std::string path = knot_test::source_dir() + "/bench/cost-model.json";
  const CostModel f = cost_model_from_json(read_file(path)), d;
  EXPECT_EQ(f.decode_bytes_per_ms, d.decode_bytes_per_ms) << path;
  EXPECT_EQ(f.prefill_token_bytes_per_ms, d.prefill_token_bytes_per_ms) << path;
  EXPECT_EQ(f.prefill_by_chunk, d.prefill_by_chunk) << path;
  EXPECT_FALSE(d.prefill_by_chunk.empty()) << "the measured file has a prefill rate per chunk size";
  EXPECT_EQ(f.prefill_cold_token_bytes_per_ms, d.prefill_cold_token_bytes_per_ms) << path;
  EXPECT_EQ(f.prefill_cold_tokens, d.prefill_cold_tokens) << path;
  EXPECT_EQ(f.hop_ms, d.hop_ms) << path;
  EXPECT_EQ(f.fetch_bytes_per_ms, d.fetch_bytes_per_ms) << path;
  EXPECT_EQ(f.prompt_tokens, d.prompt_tokens) << path;
}

TEST(Planner, Qwen7bLatencyObjectiveCutsFinerAndListsTheRejected) {
  const PlanModel m = table_of(qwen7b());
  const json mem = plan(m);
  PlanOptions o;
  o.objective = "latency";
  const json lat = plan(m, o);
  check_common(lat, m.config, 128ull << 20);
  EXPECT_EQ(mem["objective"], "memory");
  EXPECT_EQ(lat["objective"], "latency");
  // the memory plan is the fewest isolates; the latency plan is at least as fast
  EXPECT_LE(mem["isolates"].get<int>(), lat["isolates"].get<int>());
  EXPECT_GE(lat["estimate"]["decode_tok_s"].get<double>(), mem["estimate"]["decode_tok_s"].get<double>());
  // with 0.3 ms hops, 4 slices per layer (one per KV head) halve the per-layer compute of 2
  EXPECT_EQ(lat["min_slices"], 4);
  for (const auto& s : lat["stations"]) EXPECT_EQ(s["slice"][1], 4) << s["id"];
  EXPECT_GT(lat["estimate"]["decode_tok_s"].get<double>(), mem["estimate"]["decode_tok_s"].get<double>());
  // every plan weighed appears once: chosen or among the alternatives, with its figures
  ASSERT_EQ(mem["alternatives"].size(), lat["alternatives"].size());
  bool mem_in_lat = false;
  for (const auto& a : lat["alternatives"]) {
    EXPECT_GT(a["estimate"]["decode_tok_s"].get<double>(), 0);
    EXPECT_GT(a["estimate"]["ttft_s"].get<double>(), 0);
    if (a["isolates"] == mem["isolates"] && a["min_slices"] == mem["min_slices"]) {
      mem_in_lat = true;
      EXPECT_EQ(a["estimate"]["decode_tok_s"], mem["estimate"]["decode_tok_s"]);  // its prefill chunk may differ
    }
  }
  EXPECT_TRUE(mem_in_lat);
  // pipelined prefill is never slower than sequential
  EXPECT_LE(lat["estimate"]["ttft_pipelined_s"].get<double>(), lat["estimate"]["ttft_s"].get<double>());
  // the pipeline's parts add up (with the last round trip and the lm-head)
  for (const json* p : {&mem, &lat}) {
    const json& e = (*p)["estimate"];
    const json& tp = e["ttft_pipeline"];
    EXPECT_EQ(tp["chunks"], (2000 + (*p)["prefill_chunk"].get<int>() - 1) / (*p)["prefill_chunk"].get<int>());
    EXPECT_NEAR(tp["fill_s"].get<double>() + tp["steady_s"].get<double>(), e["ttft_pipelined_s"].get<double>(), 0.05);
    EXPECT_GT(tp["bottleneck_chunk_ms"].get<double>(), 0);
    EXPECT_GT(e["ttft_cold_extra_s"].get<double>(), 0);  // the defaults carry the measured cold first chunk
  }
  // the memory plan prefills at its chunk; the latency plan (and its alternatives) at the
  // chunk of the earliest first token, never later than at the memory's chunk
  EXPECT_EQ(mem["prefill_chunk"], mem["chunk"]);
  EXPECT_LE(lat["prefill_chunk"].get<int>(), lat["chunk"].get<int>());
  for (const auto& a : mem["alternatives"]) EXPECT_EQ(a["prefill_chunk"], a["chunk"]);
  for (const auto& a : lat["alternatives"]) {
    EXPECT_LE(a["prefill_chunk"].get<int>(), a["chunk"].get<int>());
    if (a["min_slices"] == mem["min_slices"]) {
      EXPECT_LE(a["estimate"]["ttft_pipelined_s"].get<double>(), mem["estimate"]["ttft_pipelined_s"].get<double>());
    }
  }
  EXPECT_EQ(lat["estimate"]["prompt_tokens"], 2000);
}

TEST(Planner, ExpensiveHopsMakeTheLatencyObjectiveKeepTheFewestHops) {
  const PlanModel m = table_of(qwen7b());
  PlanOptions o;
  o.objective = "latency";
  o.cost.hop_ms = 1e4;  // a hop costs more than any compute: the plan with the fewest hops wins
  const json p = plan(m, o);
  ASSERT_FALSE(p["alternatives"].empty());
  for (const auto& a : p["alternatives"]) {
    EXPECT_LE(p["estimate"]["hop_ms"].get<double>(), a["estimate"]["hop_ms"].get<double>()) << a.dump();
    EXPECT_LE(p["estimate"]["decode_ms"].get<double>(), a["estimate"]["decode_ms"].get<double>()) << a.dump();
  }
  // the estimate's round trips: the per-token hops, plus one through the hubs when some
  // shards sit behind them (the session links to the first station of a chain, or to every member)
  const int nsh = (int)p["shards"].size(), members = (int)p["stations"].size();
  const int groups = std::min(nsh, 6 - (p["per_token"]["links"]["chain"].get<bool>() ? 1 : members));
  EXPECT_EQ(p["estimate"]["hop_ms"].get<double>(), 1e4 * (p["per_token"]["hops"].get<int>() + (groups < nsh ? 1 : 0)));
}

TEST(Planner, ObjectiveAndCostOptionsAreChecked) {
  const PlanModel m = table_of(qwen7b(4));
  PlanOptions o;
  o.objective = "speed";
  EXPECT_NE(error_of(m, o).find("objective must be memory or latency, got 'speed'"), std::string::npos);
  const PlanOptions j = plan_options_from_json(R"({"objective":"latency","cost":{"hop_ms":7}})");
  EXPECT_EQ(j.objective, "latency");
  EXPECT_EQ(j.cost.hop_ms, 7);
  try {
    plan_options_from_json(R"({"cost":{"hop_ms":0}})");
    ADD_FAILURE() << "hop_ms 0 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hop_ms"), std::string::npos);
  }
}

TEST(Planner, FatStationsTakeTheLayersThatFitTheirMemoryAndWorkersTheRest) {
  const SynthOptions so = qwen7b();
  const PlanModel m = table_of(so);
  const json none = plan(m);
  PlanOptions o;
  o.fat = {2ull << 30};
  const json p = plan(m, o);
  EXPECT_EQ(p["fat_stations"], 1);
  const json& f = p["stations"][0];
  ASSERT_TRUE(f.value("fat", false));
  EXPECT_EQ(f["fat_memory"], 2ull << 30);
  EXPECT_EQ(f["layers"][0], 0);
  const int n = f["layers"][1];
  // a qwen7b Q4_K_M layer is ~130-170 MB with its KV: 2 GiB holds a dozen or so of the 28
  EXPECT_GT(n, 8);
  EXPECT_LT(n, 28);
  EXPECT_EQ(f["memory"]["module"], 0) << "a native process: no wasm module";
  EXPECT_EQ(f["memory"]["js_heap"], 0);
  const uint64_t total = f["memory"]["total"], per_layer = (f["memory"]["resident_weights"].get<uint64_t>() + f["memory"]["kv"].get<uint64_t>()) / n;
  EXPECT_LE(total, 2ull << 30);
  EXPECT_GT(total + per_layer, 2ull << 30) << "as many layers as fit: one more (all layers alike) would not";
  // the Worker isolates take the rest, each within the budget; every layer once
  std::vector<int> seen(28, 0);
  size_t workers = 0;
  for (const auto& s : p["stations"]) {
    if (s.value("fat", false)) {
      for (int l = s["layers"][0]; l < s["layers"][1]; l++) seen[l] += 2;
      continue;
    }
    workers++;
    EXPECT_LE(s["memory"]["total"].get<uint64_t>(), 128ull << 20) << s["id"];
    EXPECT_GE(s["layers"][0].get<int>(), n);
    for (int l = s["layers"][0]; l < s["layers"][1]; l++) seen[l] += s.contains("slice") ? 1 : 2;
  }
  for (int l = 0; l < 28; l++) EXPECT_EQ(seen[l], 2) << "layer " << l << " once: whole (2) or two halves (1 + 1)";
  EXPECT_EQ(p["isolates"].get<size_t>(), workers + p["shards"].size()) << "isolates: the Worker ones";
  EXPECT_LT(p["isolates"].get<size_t>(), none["isolates"].get<size_t>());
  EXPECT_GT(p["estimate"]["decode_tok_s"].get<double>(), none["estimate"]["decode_tok_s"].get<double>());
  EXPECT_EQ(p["cost_model"]["native_speedup"], 2.75);
  // a native speedup of 1 still counts fewer hops, but less compute saved
  o.cost.native_speedup = 1;
  EXPECT_LT(plan(m, o)["estimate"]["decode_tok_s"].get<double>(), p["estimate"]["decode_tok_s"].get<double>());
}

TEST(Planner, FatStationsThatHoldEverythingOrNothingAreRefused) {
  const PlanModel m = table_of(qwen7b());
  PlanOptions o;
  o.fat = {8ull << 30, 8ull << 30};  // the first holds all 28 layers
  EXPECT_NE(error_of(m, o).find("fat station 1 (8192.0 MiB) gets no layer: the fat stations before it hold all 28"), std::string::npos)
      << error_of(m, o);
  o.fat = {8ull << 30};
  const json all = plan(m, o);
  ASSERT_EQ(all["stations"].size(), 1u);
  EXPECT_EQ(all["stations"][0]["role"], "entry-exit");
  EXPECT_EQ(all["isolates"].get<size_t>(), all["shards"].size());
  o.fat = {64ull << 20};  // not one layer
  EXPECT_NE(error_of(m, o).find("fat station 0 does not hold layer 0: fat station 0: layers [0,1) needs"), std::string::npos) << error_of(m, o);
  o.fat = {8ull << 30};
  o.mode = "fluid";
  EXPECT_NE(error_of(m, o).find("--fat needs resident mode"), std::string::npos);
  // options: a list as text or as an array
  EXPECT_EQ(plan_options_from_json(R"({"fat": "8GiB,512MB"})").fat, (std::vector<uint64_t>{8ull << 30, 512ull << 20}));
  EXPECT_EQ(plan_options_from_json(R"({"fat": ["1GB", 1024]})").fat, (std::vector<uint64_t>{1ull << 30, 1024}));
  for (const char* bad : {R"({"fat": "8GiB,"})", R"({"fat": [true]})", R"({"fat": 3})", R"({"fat": "8XB"})"}) {
    std::string e;
    try {
      plan_options_from_json(bad);
    } catch (const Error& x) {
      e = x.what();
    }
    EXPECT_NE(e.find("fat"), std::string::npos) << bad << ": " << e;
  }
}

TEST(Planner, Qwen7bLatencyObjectivePicksThePrefillChunkTheTableMakesFastest) {
  const PlanModel m = table_of(qwen7b());
  PlanOptions o;
  o.objective = "latency";
  // small chunks fast (a flat-out 100x at 2 tokens): the smallest chunks fill the 28 ranges soonest
  o.cost.prefill_by_chunk = {{2, 1e8}, {512, 1e6}};
  const json small = plan(m, o);
  EXPECT_LE(small["prefill_chunk"].get<int>(), 4);
  EXPECT_EQ(small["cost_model"]["prefill_token_bytes_per_ms_by_chunk"]["2"], 1e8);
  // chunks up to 128 slow (a tenth of the decode rate), 256 25x decode: the largest chunk
  o.cost.prefill_by_chunk = {{2, 2e5}, {128, 2e5}, {256, 5e7}};
  const json large = plan(m, o);
  EXPECT_EQ(large["prefill_chunk"], large["chunk"]);
  EXPECT_LT(large["estimate"]["ttft_pipeline"]["chunks"].get<int>(), small["estimate"]["ttft_pipeline"]["chunks"].get<int>());
  // the same topology either way: the chunk changes the time, not the isolates
  EXPECT_EQ(small["isolates"], large["isolates"]);
  EXPECT_EQ(small["chunk"], large["chunk"]);
  // memory objective: the memory's chunk whatever the table
  o.objective = "memory";
  EXPECT_EQ(plan(m, o)["prefill_chunk"], plan(m, o)["chunk"]);
}

TEST(PlanCost, NativeMembersComputeAtTheNativeSpeedup) {
  PlanShape s;
  s.members = {{0, 1000, 10, 0}, {1, 4000, 20, 0}};
  s.hops = 3;
  CostModel c;
  c.decode_bytes_per_ms = 100, c.prompt_tokens = 4, c.native_speedup = 4;
  const double m0 = 1000.0 / 100 + 10 * 4.5 / 100, m1 = 4000.0 / 100 + 20 * 4.5 / 100;
  EXPECT_DOUBLE_EQ(estimate_plan(s, c).station_ms, m0 + m1);
  s.members[1].native = true;
  EXPECT_DOUBLE_EQ(estimate_plan(s, c).station_ms, m0 + m1 / 4);
  EXPECT_DOUBLE_EQ(cost_model_from_json(R"({"native_speedup": 3.5})").native_speedup, 3.5);
}
