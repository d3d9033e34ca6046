// plan_cost.h — the planner's time model: decode tokens/s and time to first token of a
// mesh plan, from measured rates (the cost model prima.cpp's Halda and exo use: per-device
// compute plus per-hop communication, not memory alone).
//
// A plan's shape: its station members grouped by layer range (the slices of a split range
// run in parallel, so a range costs its slowest member), its vocab shards (the lm-head
// runs on every shard in parallel: the slowest), and its sequential round trips per token.
//
// Per generated token at context position P:
//   station member  (compute_bytes + kv_bytes_per_token * P) / decode_bytes_per_ms
//                   + streamed_bytes / fetch_bytes_per_ms   (fluid: weights loaded per token)
//                   (a native fat station: its compute / native_speedup)
//   range           max over its members;  stations: sum over ranges
//   shards          max over shards of lm_head_bytes / decode_bytes_per_ms
//   hops            hops * hop_ms
// Time to first token of an N-token prompt in chunks of k (C = ceil(N / k) chunks):
//   chunk c at a member   t * compute_bytes / prefill_rate(t) (t tokens of the chunk; t = 1:
//                         the decode rate) + t * kv_bytes_per_token * (pos + t / 2) / decode_bytes_per_ms
//                         + streamed_bytes / fetch_bytes_per_ms
//   stage (range r)       its slowest member + range_hops[r] * hop_ms (the coordinator's round
//                         trips to the range: 1 for whole layers, 2 for a split layer — its
//                         attention round, then its FFN round; the range waits for them)
//   sequential            per chunk: the embed round trip, then every stage in turn
//   pipelined             fill: the first chunk's embed round trip and every stage in turn;
//                         steady: per further chunk, its bottleneck stage (chunk c+1 enters
//                         range r while chunk c is in range r+1)
// both followed by the remaining round trips of the last chunk (hops - embed - the ranges':
// lm-head, hubs) and the lm-head of the last position.
// prefill_rate(t): the warm rate of chunks of t tokens from prefill_by_chunk (measured per
// chunk size), piecewise linear in log2(t) between its sizes and clamped at its ends; an
// empty table: prefill_token_bytes_per_ms at every t.
// The cold first chunk (a fresh station's first prefill: first touch of its weights and
// code, measured once as prefill_cold_token_bytes_per_ms at prefill_cold_tokens) is not in
// ttft_*: ttft_cold_extra_s is what a fresh mesh pays on top, once per range (the fill runs
// the ranges one after another, so their cold extras add up).
//
// The rates are measured, not guessed: bench/estimate-7b.mjs --write-cost writes
// bench/cost-model.json (the rates of one station isolate on a 7B-shaped synth model and
// the per-hop cost bench/mesh.mjs measured under workerd); `knot plan --cost FILE` reads
// it, and the defaults below are that file's figures (a test keeps them equal).
// No stdio (compiled into the wasm module).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace knot {

struct CostModel {
  double decode_bytes_per_ms = 4.39e6;       // weight bytes a station's mat-vec streams per ms (one token)
  double prefill_token_bytes_per_ms = 2.61e7;// weight bytes x tokens per ms of a prefill chunk (mat-mat),
                                             // at the default chunk (64); used when prefill_by_chunk is empty
  // warm prefill rate per chunk size: (chunk, weight bytes x tokens per ms), chunks ascending
  std::vector<std::pair<int, double>> prefill_by_chunk = {{2, 9.1e6}, {4, 1.42e7}, {8, 1.94e7}, {16, 2.29e7}, {32, 2.56e7}, {64, 2.61e7}};
  double prefill_cold_token_bytes_per_ms = 9.45e6;// a fresh station's first chunk (0: not measured)
  int prefill_cold_tokens = 16;              // the tokens of that first chunk
  double hop_ms = 0.3;                       // one sequential round trip between isolates
  double fetch_bytes_per_ms = 2.0e5;         // fluid stations: weight bytes loaded per ms (warden / R2; assumed)
  int prompt_tokens = 2000;                  // the prompt of ttft_s; decode is estimated after it
  double native_speedup = 2.75;              // a native fat station's rates / a Worker station's on the same layers
                                             // (bench/fat-station-2026-12-01.jsonl "speedup")
};

// {"decode_bytes_per_ms", "prefill_token_bytes_per_ms", "prefill_token_bytes_per_ms_by_chunk":
//  {"2": rate, "4": rate, ...}, "prefill_cold_first_chunk_token_bytes_per_ms",
//  "prefill_cold_first_chunk_tokens", "hop_ms", "fetch_bytes_per_ms", "prompt_tokens",
//  "native_speedup"} (other keys — the file's provenance — are ignored); each present rate must
// be a positive number, each table key a chunk size (a decimal integer in [1, 65536]), the
// table not empty. A file with prefill_token_bytes_per_ms and no table (an older file) prefills
// at that one rate; a file with prefill rates and no cold rate has no cold first chunk. Throws
// knot::Error naming the field.
CostModel cost_model_from_json(const std::string& json);

// The warm prefill rate at chunks of t tokens (above).
double prefill_rate(const CostModel& c, int t);

struct CostMember {
  int range = 0;                   // index of the layer range (slices of one range share it)
  uint64_t compute_bytes = 0;      // weight bytes its matmuls read per token
  uint64_t kv_bytes_per_token = 0; // KV bytes per cached position (read by attention)
  uint64_t streamed_bytes = 0;     // fluid: weight bytes loaded per token (0: resident)
  bool native = false;             // a native fat station: compute at native_speedup x the rates
};

struct PlanShape {
  std::vector<CostMember> members;
  std::vector<uint64_t> shard_lm_head_bytes;  // per shard: lm_head rows' bytes
  int hops = 0;                                // sequential round trips per generated token
  std::vector<int> range_hops;                 // per range: its round trips per chunk (empty: 1 each);
                                               // hops - sum: the embed's one and the last chunk's rest
  int chunk = 1;                               // prefill chunk
};

struct PlanEstimate {
  double decode_ms = 0, decode_tok_s = 0;
  double station_ms = 0, shard_ms = 0, hop_ms = 0;  // the parts of decode_ms
  double ttft_s = 0;             // sequential prefill
  double ttft_pipelined_s = 0;   // chunks in flight across the ranges (= fill + steady + the last round trips and lm-head)
  int prefill_chunks = 0;        // C
  double fill_ms = 0;            // pipelined: the first chunk through every stage
  double steady_ms = 0;          // pipelined: the further chunks, one bottleneck stage each
  double bottleneck_chunk_ms = 0;// the slowest stage of any chunk
  double ttft_cold_extra_s = 0;  // a fresh mesh's cold first chunk, over every range (0: not measured)
};

PlanEstimate estimate_plan(const PlanShape& s, const CostModel& c);

// The prefill chunk <= max_chunk with the earliest pipelined first token: the powers of two
// below max_chunk and max_chunk itself (ties: the larger, fewer frames).
int fastest_prefill_chunk(PlanShape s, const CostModel& c, int max_chunk);

}  // namespace knot
