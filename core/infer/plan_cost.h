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
//   chunk c at a member   t * compute_bytes / prefill_token_bytes_per_ms (t tokens of the chunk)
//                         + t * kv_bytes_per_token * (pos + t / 2) / decode_bytes_per_ms
//                         + streamed_bytes / fetch_bytes_per_ms
//   sequential            every chunk through every range in turn, hops per chunk
//   pipelined             the first chunk through every range, then one bottleneck range
//                         time per further chunk (chunk c+1 enters range r while chunk c is
//                         in range r+1), hops of the last chunk
// followed by the lm-head of the last position.
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
  double decode_bytes_per_ms = 2.04e6;       // weight bytes a station's mat-vec streams per ms (one token)
  double prefill_token_bytes_per_ms = 5.98e6;// weight bytes x tokens per ms of a prefill chunk (mat-mat)
  double hop_ms = 0.3;                       // one sequential round trip between isolates
  double fetch_bytes_per_ms = 2.0e5;         // fluid stations: weight bytes loaded per ms (warden / R2; assumed)
  int prompt_tokens = 2000;                  // the prompt of ttft_s; decode is estimated after it
  double native_speedup = 2.75;              // a native fat station's rates / a Worker station's on the same layers
                                             // (bench/fat-station-2026-12-01.jsonl "speedup")
};

// {"decode_bytes_per_ms", "prefill_token_bytes_per_ms", "hop_ms", "fetch_bytes_per_ms",
//  "prompt_tokens", "native_speedup"} (other keys — the file's provenance — are ignored); each present rate
// must be a positive number. Throws knot::Error naming the field.
CostModel cost_model_from_json(const std::string& json);

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
  int chunk = 1;                               // prefill chunk
};

struct PlanEstimate {
  double decode_ms = 0, decode_tok_s = 0;
  double station_ms = 0, shard_ms = 0, hop_ms = 0;  // the parts of decode_ms
  double ttft_s = 0;             // sequential prefill (what the mesh runs today)
  double ttft_pipelined_s = 0;   // chunks in flight across the ranges
};

PlanEstimate estimate_plan(const PlanShape& s, const CostModel& c);

}  // namespace knot
