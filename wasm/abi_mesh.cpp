// abi_mesh.cpp — the per-phase forward pass for mesh stations and vocab shards
// (docs/architecture.md, docs/memory.md), over a model whose tensors JS loads and evicts one phase at a time.
//
// Tensors: after kw_model_open (no kw_model_finish needed), JS loads any subset with
// kw_model_tensor_buffer/_loaded, drops them with kw_model_tensor_evict, and loads a
// vocab row range of token_embd/output with kw_model_rows_plan + kw_model_rows_load
// (.knot chunk hashes verified by the core). A phase whose tensor is not loaded throws
// "missing tensor blk_3_ffn_up_weight (layer 3, phase ffn_up)".
//
// Stations: kw_station_new(model, l0, l1, n_ctx, h0, h1, reference) is a core
// knot::Station (infer/station.h: KV cache of layers [l0,l1) and heads [h0,h1), the GQA,
// budget, layer and slice-row checks); this file only converts arguments and errors.
// Row ranges: container/row_window.h plans the fetch and verifies the fetched bytes.
// Activations are f32 row-major buffers in wasm memory that the caller allocates:
//   x, out: [ntok, n_embd]   h: [ntok, c1-c0]   logits: [ntok, v1-v0]
// Phases write partial residuals (the caller adds them, the merge rule of docs/architecture.md).
#include <algorithm>
#include <nlohmann/json.hpp>

#include "abi_model.h"
#include "container/row_window.h"
#include "infer/forward.h"
#include "infer/station.h"

using json = nlohmann::json;
using namespace kw;

namespace kw {
namespace {

Table<Bound<knot::Station>> g_stations;

ModelEntry& model_of(int h, const char* fn) { return g_models.get(h, fn); }

const knot::Tensor& loaded(const knot::Tensor* t, const char* phase) {
  if (!t || !t->bytes) knot::fail("missing tensor " + (t ? t->name : std::string("?")) + " (phase " + phase + "): not loaded");
  return *t;
}

void need_ptr(const void* p, const char* fn, const char* what) {
  if (!p) knot::fail(std::string(fn) + ": null " + what + " buffer");
}

knot::FileTensor file_tensor(const ModelEntry& m, const TableEntry& te) {
  return {te.name, m.model.tensors.at(te.name).type, te.shape, te.offset, te.size};
}

}  // namespace
}  // namespace kw

// ---- tensor residency ------------------------------------------------------------------

KW_EXPORT(kw_model_tensor_evict)
int kw_model_tensor_evict(int32_t h, uint32_t i) {
  return guard([&] {
    ModelEntry& m = model_of(h, "kw_model_tensor_evict");
    TableEntry& te = m.table[table_index(m, i, "kw_model_tensor_evict")];
    if (te.tokenizer) knot::fail("kw_model_tensor_evict: entry " + std::to_string(i) + " is the tokenizer blob");
    refuse_if_sessions(h, m, "kw_model_tensor_evict", "tensor " + te.name);
    knot::Tensor& t = m.model.tensors.at(te.name);
    t.bytes.reset();
    t.shape = te.shape;
    t.size = fit_size(te.size);
    t.row0 = 0;
    te.loaded = false;
  });
}

// result {"offset", "size"}: the file range JS must fetch for kw_model_rows_load.
KW_EXPORT(kw_model_rows_plan)
int kw_model_rows_plan(int32_t h, uint32_t i, double r0, double r1) {
  return guard([&] {
    ModelEntry& m = model_of(h, "kw_model_rows_plan");
    const TableEntry& te = m.table[table_index(m, i, "kw_model_rows_plan")];
    const int64_t a = (int64_t)u64_arg(r0, "kw_model_rows_plan", "r0"), b = (int64_t)u64_arg(r1, "kw_model_rows_plan", "r1");
    auto [off, len] = knot::rows_file_range(m.what, m.knot_header.get(), file_tensor(m, te), a, b);
    // refused before JS fetches it (a tensor without chunk hashes is verified whole)
    if (len > kLinearCap)
      knot::fail(m.what + ": tensor " + te.name + " rows [" + std::to_string(a) + ", " + std::to_string(b) + ") need a read of " +
                 std::to_string(len) + " bytes (whole chunks, or the whole tensor when it has no chunk hashes), more than " +
                 "this module's linear memory (capped at " + std::to_string(kLinearCap >> 20) + " MiB)");
    set_result(json{{"offset", off}, {"size", len}}.dump());
  });
}

// Keeps rows [r0, r1) of tensor i from fetched bytes (file range [off, off+len) at p),
// verified against the .knot chunk hashes (or tensor hash). The tensor then holds only
// those rows; phases take its first vocab id from here.
KW_EXPORT(kw_model_rows_load)
int kw_model_rows_load(int32_t h, uint32_t i, double r0d, double r1d, const uint8_t* p, double offd, double lend) {
  return guard([&] {
    ModelEntry& m = model_of(h, "kw_model_rows_load");
    TableEntry& te = m.table[table_index(m, i, "kw_model_rows_load")];
    refuse_if_sessions(h, m, "kw_model_rows_load", "tensor " + te.name);
    need_ptr(p, "kw_model_rows_load", "fetched bytes");
    const int64_t r0 = (int64_t)u64_arg(r0d, "kw_model_rows_load", "r0"), r1 = (int64_t)u64_arg(r1d, "kw_model_rows_load", "r1");
    const knot::FileTensor ft = file_tensor(m, te);
    knot::rows_file_range(m.what, m.knot_header.get(), ft, r0, r1);  // validates [r0, r1) before allocating
    const uint64_t off = u64_arg(offd, "kw_model_rows_load", "offset"), len = u64_arg(lend, "kw_model_rows_load", "len");
    mem_bytes(len, m.what + ": tensor " + te.name + " rows [" + std::to_string(r0) + ", " + std::to_string(r1) + ")");
    knot::Tensor& t = m.model.tensors.at(te.name);
    const uint64_t rs = knot::row_bytes(t.type, te.shape[0], te.name);
    auto buf = knot::alloc_aligned((size_t)((r1 - r0) * (int64_t)rs));
    knot::rows_from_window(m.what, m.knot_header.get(), ft, r0, r1, p, off, len, buf.get());
    t.bytes = buf;
    t.shape = te.shape;
    t.shape[1] = r1 - r0;
    t.size = (size_t)((r1 - r0) * (int64_t)rs);
    t.row0 = r0;
    te.loaded = true;
  });
}

// ---- stations --------------------------------------------------------------------------

// Checks (GQA group, KV budget, layer range, slice rows) are the core Station's; the
// budget here is what is left of the 128 MB linear memory.
KW_EXPORT(kw_station_new)
int kw_station_new(int32_t model, int32_t l0, int32_t l1, int32_t n_ctx, int32_t h0, int32_t h1, int32_t reference,
                   int32_t* out_handle) {
  return guard([&] {
    *out_handle = 0;
    ModelEntry& m = model_of(model, "kw_station_new");
    knot::StationSpec sp;
    sp.l0 = l0, sp.l1 = l1, sp.h0 = h0, sp.h1 = h1, sp.n_ctx = n_ctx;
    sp.fo.kernel = reference ? knot::Kernel::Reference : knot::Kernel::Simd;
    sp.fo.kv_type = reference ? knot::KvType::F32 : knot::KvType::F16;
    sp.kv_limit = kLinearCap - std::min<uint64_t>(kLinearCap, heap_in_use());
    sp.kv_limit_where = " (what is left under the 128 MB wasm memory cap)";
    auto e = std::make_unique<Bound<knot::Station>>();
    e->model = model;
    e->obj = std::make_unique<knot::Station>(m.model.config, sp);
    *out_handle = g_stations.add(std::move(e));
  });
}

KW_EXPORT(kw_station_free)
int kw_station_free(int32_t st) {
  return guard([&] {
    if (!g_stations.remove(st)) throw HandleError("kw_station_free: unknown or freed handle " + std::to_string(st));
  });
}

// Forget positions >= n_pos (0: a new sequence).
KW_EXPORT(kw_station_truncate)
int kw_station_truncate(int32_t st, int32_t n_pos) {
  return guard([&] { g_stations.get(st, "kw_station_truncate").obj->truncate(n_pos); });
}

// KV snapshots: kw_station_kv_export(st, pos0, n) -> result bytes, positions [pos0, pos0+n)
// (kv_bytes_per_token each, core/infer/kv_cache.h's layout); kw_station_kv_import(st, pos0,
// n, bytes, len) appends them at pos0 == n_pos (len must be n * kv_bytes_per_token).
KW_EXPORT(kw_station_kv_export)
int kw_station_kv_export(int32_t st, int32_t pos0, int32_t n) {
  return guard([&] {
    const knot::Station& s = *g_stations.get(st, "kw_station_kv_export").obj;
    if (pos0 < 0 || n < 0 || (int64_t)pos0 + n > s.n_pos())
      knot::fail("kw_station_kv_export: positions [" + std::to_string(pos0) + "," + std::to_string((int64_t)pos0 + n) +
                 ") but the station holds " + std::to_string(s.n_pos()));
    std::vector<uint8_t> buf((size_t)n * s.kv().bytes_per_token());
    s.export_kv(pos0, n, buf.data());
    set_result_bytes(buf.data(), buf.size());
  });
}

KW_EXPORT(kw_station_kv_import)
int kw_station_kv_import(int32_t st, int32_t pos0, int32_t n, const uint8_t* bytes, uint32_t len) {
  return guard([&] {
    knot::Station& s = *g_stations.get(st, "kw_station_kv_import").obj;
    const uint64_t want = (uint64_t)(n < 0 ? 0 : n) * s.kv().bytes_per_token();
    if (n < 0 || len != want || (!bytes && len))
      knot::fail("kw_station_kv_import: " + std::to_string(len) + " bytes for " + std::to_string(n) + " positions of " +
                 std::to_string(s.kv().bytes_per_token()) + " bytes each");
    s.import_kv(pos0, n, bytes);
  });
}

// result {"n_pos", "n_ctx", "kv_bytes", "kv_bytes_per_token", "workspace_bytes", "workspace_peak"}
KW_EXPORT(kw_station_info)
int kw_station_info(int32_t st) {
  return guard([&] {
    const knot::Station& s = *g_stations.get(st, "kw_station_info").obj;
    set_result(json{{"n_pos", s.n_pos()}, {"n_ctx", s.n_ctx()}, {"kv_bytes", s.kv().bytes()},
                    {"kv_bytes_per_token", s.kv().bytes_per_token()},
                    {"workspace_bytes", s.workspace().bytes()}, {"workspace_peak", s.workspace().peak}}.dump());
  });
}

// attention phase of `layer` for positions [pos0, pos0+ntok): out = partial residual.
KW_EXPORT(kw_station_attn)
int kw_station_attn(int32_t st, int32_t layer, int32_t pos0, const float* x, int32_t ntok, float* out) {
  return guard([&] {
    auto& e = g_stations.get(st, "kw_station_attn");
    e.obj->attn(model_of(e.model, "kw_station_attn").model, layer, pos0, x, ntok, out);
  });
}

// phase: 0 ffn_gate (x -> h), 1 ffn_up (x, h -> h), 2 ffn_down (h -> out), 3 ffn_gate_up (x -> h)
// over FFN columns [c0, c1) (c1 = -1: n_ff).
KW_EXPORT(kw_station_ffn)
int kw_station_ffn(int32_t st, int32_t phase, int32_t layer, const float* x, int32_t ntok, float* h, float* out,
                   int32_t c0, int32_t c1) {
  return guard([&] {
    auto& e = g_stations.get(st, "kw_station_ffn");
    if (phase < 0 || phase > 3) knot::fail("kw_station_ffn: phase must be 0 (gate), 1 (up), 2 (down) or 3 (gate_up)");
    e.obj->ffn(model_of(e.model, "kw_station_ffn").model, (knot::FfnPhase)phase, layer, x, ntok, h, out, c0, c1);
  });
}

// ---- vocab shards ----------------------------------------------------------------------

// out[t] = token_embd row of ids[t] when v0 <= ids[t] < v1, else zeros.  out: [ntok, n_embd]
KW_EXPORT(kw_embed)
int kw_embed(int32_t model, const int32_t* ids, int32_t ntok, int32_t v0, int32_t v1, float* out) {
  return guard([&] {
    ModelEntry& m = model_of(model, "kw_embed");
    need_ptr(ids, "kw_embed", "ids");
    need_ptr(out, "kw_embed", "out");
    const knot::Tensor& te = loaded(m.model.find("token_embd_weight"), "embed");
    knot::embed_rows(te, ids, ntok, v0, v1, m.model.config.n_vocab, out, te.row0);
  });
}

// out = output_norm(x)    x, out: [ntok, n_embd]
KW_EXPORT(kw_output_norm)
int kw_output_norm(int32_t model, const float* x, int32_t ntok, float* out) {
  return guard([&] {
    ModelEntry& m = model_of(model, "kw_output_norm");
    need_ptr(x, "kw_output_norm", "x");
    need_ptr(out, "kw_output_norm", "out");
    const knot::Tensor& n = loaded(m.model.find("output_norm_weight"), "output");
    knot::Workspace ws;
    knot::output_norm(m.model.config, n, x, ntok, out, ws);
  });
}

// logits[t, v-v0] = xn[t] . lm_head[v] for v in [v0, v1); softcap c > 0 applies tanh(x/c)*c.
KW_EXPORT(kw_lm_head)
int kw_lm_head(int32_t model, const float* xn, int32_t ntok, int32_t v0, int32_t v1, float* logits, float softcap,
               int32_t reference) {
  return guard([&] {
    ModelEntry& m = model_of(model, "kw_lm_head");
    need_ptr(xn, "kw_lm_head", "xn");
    need_ptr(logits, "kw_lm_head", "logits");
    const knot::Tensor& W = knot::lm_head_tensor(m.model);
    loaded(&W, "lm_head");
    // Tensor rows past the tokenizer vocab are padding (qwen2.5: 151,936 tokens, 152,064
    // rows): not tokens, so no shard may own or sample them (docs/architecture.md).
    const int64_t nv = m.model.config.n_vocab;
    if (nv > 0 && v1 > nv)
      knot::fail("kw_lm_head: vocab slice [" + std::to_string(v0) + "," + std::to_string(v1) +
                 ") reaches past the tokenizer vocabulary of " + std::to_string(nv) + " tokens (rows >= " +
                 std::to_string(nv) + " of " + W.name + " are padding)");
    knot::lm_head_logits(W, xn, ntok, v0, v1, logits, reference ? knot::Kernel::Reference : knot::Kernel::Simd,
                         softcap, W.row0);
  });
}
