// abi_draft.cpp — a draft model on its own, for a mesh coordinator (workers/coordinator/mesh.mjs):
// the coordinator holds no target weights, only the target's tokenizer (a text model), and
// runs the draft model (core/infer/draft_model.h) in its own Engine (own KV cache) to propose
// the tokens the stations verify in one pass. Marshalling only.
//
//   kw_drafter_new(draft_model, target_model, opts_json, out_handle)
//       opts {"n_ctx", "draft_n" (1..64, default 4), "mode"}: the draft Engine's context (the
//       target's), tokens per proposal. Refused, naming both models, unless the two
//       vocabularies are the same (check_same_vocab); refused, naming the draft, when its KV
//       cache for n_ctx, its activation buffers and its proposals' distributions do not fit
//       what is left of the 128 MB linear memory.
//       The fast mode's draft keeps its KV as F16InF32 (F16's values held as f32: read in
//       place by attention, no per-step f16 conversion, the same drafts) when that engine
//       fits with 16 MB to spare, else as F16.
//       result {"n_ctx", "draft_n", "kv_bytes", "engine_bytes", "kv_type" ("F16" | "F16InF32")}
//   kw_drafter_prime(d, hist, n)           feed hist but its last token (during the prefill)
//   kw_drafter_propose(d, hist, n, room)   up to min(draft_n, room) greedy tokens after hist:
//       result = i32 ids (the draft is greedy: its distribution q is one-hot at each id)
//   kw_drafter_propose_with(d, g, hist, n, room)  the same drawn as generator g samples
//       (sampling drafts): result = ids + the distribution q each was drawn from (wasm/abi.h)
//   kw_drafter_telemetry(d)                {"passes", "n_pos", "n_ctx", "engine_bytes", "kv_bytes"}
//   kw_drafter_free(d)
// A drafter is bound to its draft model's handle: freeing that model frees the drafter.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>

#include "abi_model.h"
#include "container/json_limits.h"
#include "infer/draft_model.h"
#include "infer/generate.h"
#include "infer/options.h"

using json = nlohmann::json;
using namespace kw;

namespace kw {
namespace {

struct Drafter {
  int model = 0;  // the draft model's handle
  std::unique_ptr<knot::Engine> engine;
  std::optional<knot::DraftModel> draft;
};

Table<Drafter> g_drafters;

// What an F16InF32 draft KV must leave free of the linear memory (the coordinator's temporaries,
// draftFits' margin twice over); below it the draft falls back to F16.
constexpr uint64_t kDraftF16InF32Spare = 16ull << 20;

Drafter& drafter(int h, const char* fn) { return g_drafters.get(h, fn); }

std::vector<int32_t> ids_arg(const int32_t* ids, uint32_t n, const char* fn) {
  if (n && !ids) knot::fail(std::string(fn) + ": null ids");
  return std::vector<int32_t>(ids, ids + n);
}

}  // namespace

void free_drafters_of(int model_handle) {
  g_drafters.remove_if([&](const Drafter& d) { return d.model == model_handle; });
}

}  // namespace kw

KW_EXPORT(kw_drafter_new)
int kw_drafter_new(int32_t draft_model, int32_t target_model, const char* opts, uint32_t opts_len, int32_t* out_handle) {
  return guard([&] {
    *out_handle = 0;
    ModelEntry& dm = ready_model(draft_model, "kw_drafter_new");
    ModelEntry& tm = ready_model(target_model, "kw_drafter_new");
    if (dm.text_only) knot::fail("kw_drafter_new: draft model " + dm.what + " holds no tensors (load it with its weights)");
    knot::check_same_vocab(tm.model.tokenizer, dm.model.tokenizer, tm.what, dm.what);
    if (opts_len) knot::check_json_depth(str_arg(opts, opts_len), "kw_drafter_new: options");
    json j = opts_len ? json::parse(str_arg(opts, opts_len), nullptr, false) : json::object();
    if (j.is_discarded() || !j.is_object()) knot::fail("kw_drafter_new: options are not a JSON object");
    int draft_n = 4;
    if (j.contains("draft_n")) {
      if (!j["draft_n"].is_number_integer()) knot::fail("kw_drafter_new: draft_n must be an integer in 1..64");
      draft_n = j["draft_n"].get<int>();
      j.erase("draft_n");
    }
    if (draft_n < 1 || draft_n > 64) knot::fail("draft_n must be in 1..64, got " + std::to_string(draft_n));
    for (auto it = j.begin(); it != j.end(); ++it)
      if (it.key() != "n_ctx" && it.key() != "mode") knot::fail("kw_drafter_new: unknown option " + it.key() + " (n_ctx, draft_n, mode)");
    knot::RunOptions run;
    knot::apply_options(j, run);
    knot::EngineOptions eo = run.engine;
    // the draft's engine must fit in what is left of the 128 MB linear memory: its KV cache,
    // its activation buffers (knot::engine_bytes) and its proposals' distributions (draft_n x
    // the vocabulary at most, 12 bytes an entry: sampling drafts), as kw_session_new counts
    // a session's draft (64-bit arithmetic: size_t is 32 bits in wasm32)
    const auto& c = dm.model.config;
    const int n_ctx = knot::context_of(c, eo.n_ctx);
    const uint64_t room = kLinearCap - std::min<uint64_t>(kLinearCap, heap_in_use());
    const uint64_t dists = (uint64_t)draft_n * std::max(0, c.n_vocab) * 12;
    // The fast mode's draft keeps its KV as F16InF32 (the F16 values held as f32: the same
    // drafts as on F16) when that fits with kDraftF16InF32Spare bytes to spare: attention then
    // reads its rows in place, where an F16 cache is converted whole per KV head and step
    // (most of a small draft's step at a few hundred positions). Otherwise the mode's F16
    // (what the check below and draftFits count at least).
    if (eo.mode == knot::Mode::Fast && !eo.forward) {
      knot::EngineOptions e32 = eo;
      e32.forward = knot::ForwardOptions{knot::forward_options_for(eo.mode).kernel, knot::KvType::F16InF32};
      if (knot::engine_bytes(c, e32) + dists + kDraftF16InF32Spare <= room) eo = e32;
    }
    const knot::KvType kvt = eo.forward ? eo.forward->kv_type : knot::forward_options_for(eo.mode).kv_type;
    const uint64_t kv = 2ull * c.n_layer * c.n_head_kv * c.head_dim * knot::kv_elem_bytes(kvt) * (uint64_t)n_ctx;
    const uint64_t all = knot::engine_bytes(c, eo) + dists;
    if (all > room)
      knot::fail("kw_drafter_new: draft model " + dm.what + " does not fit: a context of " + std::to_string(n_ctx) +
                 " tokens needs " + std::to_string(kv) + " bytes of " + knot::kv_type_name(kvt) + " KV cache + " +
                 std::to_string(all - kv) + " bytes of buffers and proposal distributions but only " +
                 std::to_string(room) + " bytes are left of the 128 MB wasm memory");
    auto d = std::make_unique<Drafter>();
    d->model = draft_model;
    eo.kv_budget = SIZE_MAX;
    d->engine = std::make_unique<knot::Engine>(dm.model, eo);
    d->draft.emplace(*d->engine, draft_n);
    const knot::Engine& e = *d->engine;
    *out_handle = g_drafters.add(std::move(d));
    set_result(json{{"n_ctx", e.n_ctx()}, {"draft_n", draft_n}, {"kv_bytes", e.kv().bytes()}, {"engine_bytes", e.bytes()},
                    {"kv_type", knot::kv_type_name(e.kv().type())}}.dump());
  });
}

KW_EXPORT(kw_drafter_prime)
int kw_drafter_prime(int32_t h, const int32_t* ids, uint32_t n) {
  return guard([&] { drafter(h, "kw_drafter_prime").draft->prime(ids_arg(ids, n, "kw_drafter_prime")); });
}

KW_EXPORT(kw_drafter_propose)
int kw_drafter_propose(int32_t h, const int32_t* ids, uint32_t n, int32_t room) {
  return guard([&] {
    Drafter& d = drafter(h, "kw_drafter_propose");
    if (n == 0) knot::fail("kw_drafter_propose: empty history (at least the last token is needed)");
    const std::vector<int32_t> out = d.draft->propose(ids_arg(ids, n, "kw_drafter_propose"), room);
    set_result_bytes(out.data(), 4 * out.size());
  });
}

// Sampling drafts: as kw_drafter_propose, drawn as generator g samples (its chain, grammar and
// seeded RNG; a greedy g: the argmax); g must sample for the target this drafter was made for.
// Result: the proposal layout of kw_session_propose (all f64: n, then per token id, q(id), m,
// m pairs (id, p); m 0: one-hot).
KW_EXPORT(kw_drafter_propose_with)
int kw_drafter_propose_with(int32_t h, int32_t g, const int32_t* ids, uint32_t n, int32_t room) {
  return guard([&] {
    Drafter& d = drafter(h, "kw_drafter_propose_with");
    if (n == 0) knot::fail("kw_drafter_propose_with: empty history (at least the last token is needed)");
    knot::Generator* gen = generator_arg(g, "kw_drafter_propose_with");
    std::vector<knot::Sampler::Dist> q;
    const std::vector<int32_t> out = d.draft->propose(ids_arg(ids, n, "kw_drafter_propose_with"), room, gen, &q);
    set_proposal_result(out, q);
  });
}

KW_EXPORT(kw_drafter_telemetry)
int kw_drafter_telemetry(int32_t h) {
  return guard([&] {
    Drafter& d = drafter(h, "kw_drafter_telemetry");
    const knot::Engine& e = *d.engine;
    set_result(json{{"passes", d.draft->passes()}, {"n_pos", e.n_pos()}, {"n_ctx", e.n_ctx()},
                    {"engine_bytes", e.bytes()}, {"kv_bytes", e.kv().bytes()}}.dump());
  });
}

KW_EXPORT(kw_drafter_free)
int kw_drafter_free(int32_t h) {
  return guard([&] {
    if (!g_drafters.remove(h)) throw HandleError("kw_drafter_free: unknown or freed handle " + std::to_string(h));
  });
}
