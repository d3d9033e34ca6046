// planner.h — derive a mesh topology (docs/architecture.md, memory.md, limits.md) from a model header and a
// per-isolate memory budget.
//
// Input: the model config and its tensor table (name, type, shape, bytes) — no tensor
// data. Output: a plan as JSON (plan_json), the same bytes natively (`knot plan`) and in
// wasm (kw_plan, bindings/planner.mjs):
//   stations  contiguous layer ranges [l0,l1); a layer whose weights do not fit one
//             isolate is cut into s slices, slice i owning attention heads [h0,h1) (whole
//             GQA groups) and FFN columns [c0,c1) (block-aligned when the types allow);
//             each station resident (weights held) or fluid (per-phase load/run/evict).
//   shards    vocab ranges [v0,v1) meeting end to end over the tokenizer's vocabulary;
//             rows [n_vocab, n_vocab_tensor) are padding owned by none. A shard holds its
//             token_embd and lm_head rows resident.
//   context   the largest context whose KV fits every station (or --context, checked);
//   chunk     the prefill chunk the memory holds (or --chunk, checked);
//   prefill_chunk  the chunk the estimate prefills with: chunk (objective memory) or, for
//             latency, the chunk <= chunk of the earliest pipelined first token (plan_cost.h's
//             fastest_prefill_chunk: small chunks fill the pipeline sooner, large ones run at
//             a higher measured rate and pay fewer round trips);
//   memory    per isolate, itemised: resident weights, largest phase, KV at the context,
//             activations (workspace + ABI buffers for one chunk), module, JS heap.
//   per_token hops, subrequests and simultaneous connections per generated token, and
//             what a 4096-token generation costs against the platform caps (§8).
//   estimate  decode tok/s and time to first token of the plan (plan_cost.h's model, its
//             constants in cost_model): ttft_s sequential, ttft_pipelined_s and its parts
//             ttft_pipeline {chunks, fill_s, steady_s, bottleneck_chunk_ms}, ttft_cold_extra_s
//             (a fresh mesh's cold first chunks, when measured), at prefill_chunk; and
//             alternatives (with their chunk and prefill_chunk): the same figures for the plans
//             the objective rejected (resident: every layer cut into at least s slices,
//             s = 1 .. n_head_kv — more parallel compute per token, more isolates).
// Fat stations (PlanOptions::fat, `--fat 8GiB,8GiB`; resident mode): native `knot station`
// processes of the given memory each. From layer 0, fat station i takes as many whole layers
// as fit its memory (weights + KV at the target context + activations; no wasm module or JS
// heap), the Worker isolates the rest as usual. Their plan entries say "fat": true and
// "fat_memory"; the time model runs their compute native_speedup times faster (plan_cost.h);
// "isolates" counts the Worker isolates only. A fat station that holds no layer (the ones
// before it took them all, or its memory holds not one layer) is an error naming it.
// Objective: "memory" (default) takes the fewest isolates (ties: the faster), "latency"
// the highest decode tok/s (ties: the fewer isolates), each plan weighed at its fastest
// prefill chunk (alternatives too: their prefill_chunk and estimate).
// A budget that cannot be met throws knot::Error with the reason (which isolate, which
// item, how many bytes against how many).
//
// Memory model (what each item counts, per isolate):
//   resident weights  bytes of the tensors held across requests: all of the station's
//                     (resident) or the residency rule's small ones — names with "norm",
//                     biases, anything < 1 MiB — (fluid); a slice counts only its rows /
//                     columns (norms whole: every slice re-norms the full x).
//   largest phase     fluid only: the largest of attn / ffn_gate / ffn_up / ffn_down of
//                     one layer (docs/memory.md: never two phases held).
//   kv                2 × layers × KV heads (of the slice) × head_dim × 2 B (F16) × context.
//   activations       forward.h's Workspace for (chunk, context) of the slice's dims, the
//                     ABI in/out buffers and the activation quantization of one call.
//   module, js_heap   PlanOptions constants: static data + stack + compiled code, and the
//                     JS heap of the loader with one tensor-read chunk in flight.
// No stdio (compiled into the wasm module).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "container/model.h"
#include "infer/plan_cost.h"

namespace knot {

struct PlanTensor {
  std::string name;            // knot name, "blk_3_ffn_down_weight"
  DType type = DType::F32;
  std::vector<int64_t> shape;  // ggml order: shape[0] = row length
  uint64_t size = 0;           // bytes
};

struct PlanModel {
  std::string name;  // file name, for messages
  ModelConfig config;
  std::vector<PlanTensor> tensors;
};

struct PlanOptions {
  uint64_t budget = 128ull << 20;       // bytes per isolate (wasm linear memory + JS heap)
  int context = 0;                      // 0: the largest that fits (<= n_ctx_train)
  int chunk = 0;                        // 0: the largest power of two <= 512 that fits best
  int shards = 0;                       // 0: as few as fit
  int stations = 0;                     // fluid: 0 = as few as fit the target context
  std::string mode = "resident";        // resident | fluid
  uint64_t module_bytes = 6ull << 20;   // see bindings/planner.mjs / README: measured
  uint64_t js_heap_bytes = 16ull << 20; // loader, read chunks in flight, activation copies (measured: bench/mesh-memory.mjs)
  std::string objective = "memory";     // memory | latency
  int replicas = 1;                     // copies of every station member and shard (routes to fail over to)
  CostModel cost;                       // the time model's measured rates (bench/cost-model.json)
  std::vector<uint64_t> fat;            // memory of each native fat station (`knot station`), in order
};

// Header bytes -> PlanModel. GGUF or .knot; *need > 0 (and an empty model) when the
// prefix is too short (read that many bytes and call again).
PlanModel plan_model_from_header(const uint8_t* prefix, size_t len, uint64_t file_size,
                                 const std::string& name, uint64_t* need);

// Parses "128MB", "128MiB", "1.5GB", "134217728" (MB/GB are binary, like the wasm cap).
uint64_t parse_bytes(const std::string& s, const std::string& what);

// "8GiB,8GiB" -> sizes (each as parse_bytes), what names the option in errors.
std::vector<uint64_t> parse_byte_list(const std::string& s, const std::string& what);

// The plan as pretty JSON (2-space indent, trailing newline). Throws knot::Error when the
// budget cannot be met.
std::string plan_json(const PlanModel& m, const PlanOptions& o);

// PlanOptions from a JSON object {"budget": "128MB"|N, "context", "chunk", "shards",
// "stations", "mode", "module_bytes", "js_heap_bytes", "objective", "replicas", "cost": {cost model},
// "fat": "8GiB,8GiB" | ["8GiB", N, ...]}
// (unknown keys are errors).
PlanOptions plan_options_from_json(const std::string& json);

}  // namespace knot
