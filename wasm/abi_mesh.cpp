// abi_mesh.cpp — the per-phase forward pass for mesh stations and vocab shards
// (DESIGN §1-2), over a model whose tensors JS loads and evicts one phase at a time.
//
// Tensors: after kw_model_open (no kw_model_finish needed), JS loads any subset with
// kw_model_tensor_buffer/_loaded, drops them with kw_model_tensor_evict, and loads a
// vocab row range of token_embd/output with kw_model_rows_plan + kw_model_rows_load
// (.knot chunk hashes verified by the core). A phase whose tensor is not loaded throws
// "missing tensor blk_3_ffn_up_weight (layer 3, phase ffn_up)".
//
// Stations: kw_station_new(model, l0, l1, n_ctx, h0, h1, reference) owns the KV cache of
// layers [l0,l1) and attention heads [h0,h1) (KV heads [h0/g, h1/g)) plus scratch space.
// Activations are f32 row-major buffers in wasm memory that the caller allocates:
//   x, out: [ntok, n_embd]   h: [ntok, c1-c0]   logits: [ntok, v1-v0]
// Phases write partial residuals (the caller adds them, DESIGN's sum-of-partials merge).
#include <algorithm>
#include <nlohmann/json.hpp>

#include "abi_model.h"
#include "infer/forward.h"
#include "infer/kv_cache.h"

using json = nlohmann::json;
using namespace kw;

namespace kw {
namespace {

struct Station {
  int model = 0;
  int l0 = 0, l1 = 0, h0 = 0, h1 = 0;
  knot::ForwardOptions fo;
  knot::KvCache kv;
  knot::Workspace ws;
};
Table<Station> g_stations;

ModelEntry& model_of(int h, const char* fn) { return g_models.get(h, fn); }

// The layer's tensors, with tensors that are not loaded treated as absent (the phase
// then names the missing one).
knot::LayerWeights loaded_layer(const ModelEntry& m, int layer) {
  return knot::layer_weights(m.model, layer, /*loaded_only=*/true);
}

const TableEntry& entry(const ModelEntry& m, const std::string& name) {
  for (const auto& te : m.table)
    if (te.name == name) return te;
  knot::fail(m.what + ": no tensor " + name);
}

// A tensor loaded as a row range (kw_model_rows_load) must hold exactly the rows the
// slice needs: the core takes any tensor with the slice's row count as cut to that slice,
// so another slice's rows would give a wrong partial without an error.
void check_slice_rows(const ModelEntry& m, const knot::Tensor* t, int64_t r0, int64_t r1, const std::string& slice) {
  if (!t || !t->bytes) return;  // absent: the phase names it
  const TableEntry& te = entry(m, t->name);
  int64_t full = 1;
  for (size_t i = 1; i < te.shape.size(); i++) full *= te.shape[i];
  const int64_t a = te.row0, b = te.row0 + t->nrows();
  if ((a == 0 && b == full) || (a == r0 && b == r1)) return;
  knot::fail(m.what + ": tensor " + t->name + " holds rows [" + std::to_string(a) + "," + std::to_string(b) + ") but " +
             slice + " need rows [" + std::to_string(r0) + "," + std::to_string(r1) + ")");
}

const knot::Tensor& loaded(const ModelEntry& m, const knot::Tensor* t, const char* phase) {
  if (!t || !t->bytes) knot::fail("missing tensor " + (t ? t->name : std::string("?")) + " (phase " + phase + "): not loaded");
  return *t;
}

void need_ptr(const void* p, const char* fn, const char* what) {
  if (!p) knot::fail(std::string(fn) + ": null " + what + " buffer");
}

// File bytes [base, base+len) held in a wasm buffer, as a ByteSource for knot reads.
class WindowSource : public knot::ByteSource {
 public:
  WindowSource(std::string name, uint64_t file_size, uint64_t base, const uint8_t* p, uint64_t len)
      : name_(std::move(name)), file_size_(file_size), base_(base), p_(p), len_(len) {}
  uint64_t size() override { return file_size_; }
  void read(uint64_t off, uint64_t len, uint8_t* dst) override {
    if (off < base_ || off + len > base_ + len_)
      knot::fail(name_ + ": bytes [" + std::to_string(off) + ", " + std::to_string(off + len) +
                 ") were not fetched (have [" + std::to_string(base_) + ", " + std::to_string(base_ + len_) + "))");
    std::memcpy(dst, p_ + (off - base_), len);
  }
  std::string name() const override { return name_; }

 private:
  std::string name_;
  uint64_t file_size_, base_;
  const uint8_t* p_;
  uint64_t len_;
};

// File range to fetch for rows [r0, r1) of table entry te: whole covering chunks when
// the .knot has chunk hashes, the whole tensor when it has only a tensor hash (so it
// can be verified), exactly the rows for GGUF (nothing to verify).
std::pair<uint64_t, uint64_t> rows_range(const ModelEntry& m, const TableEntry& te, int64_t r0, int64_t r1) {
  const knot::Tensor& t = m.model.tensors.at(te.name);
  const int64_t nrows = te.shape.size() > 1 ? te.size / knot::row_bytes(t.type, te.shape[0], te.name) : 1;
  if (r0 < 0 || r1 <= r0 || r1 > nrows)
    knot::fail(m.what + ": tensor " + te.name + ": rows [" + std::to_string(r0) + ", " + std::to_string(r1) +
               ") outside [0, " + std::to_string(nrows) + ")");
  const uint64_t rs = knot::row_bytes(t.type, te.shape[0], te.name);
  if (m.knot_header) {
    const knot::KnotTensor& kt = m.knot_header->get(te.name);
    if (kt.chunk_rows > 0) {
      const int64_t a = r0 / kt.chunk_rows * kt.chunk_rows;
      const int64_t b = std::min(nrows, (r1 + kt.chunk_rows - 1) / kt.chunk_rows * kt.chunk_rows);
      return {te.offset + (uint64_t)a * rs, (uint64_t)(b - a) * rs};
    }
    return {te.offset, te.size};
  }
  return {te.offset + (uint64_t)r0 * rs, (uint64_t)(r1 - r0) * rs};
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
    knot::Tensor& t = m.model.tensors.at(te.name);
    t.bytes.reset();
    t.shape = te.shape;
    t.size = te.size;
    te.row0 = 0;
    te.loaded = false;
  });
}

// result {"offset", "size"}: the file range JS must fetch for kw_model_rows_load.
KW_EXPORT(kw_model_rows_plan)
int kw_model_rows_plan(int32_t h, uint32_t i, double r0, double r1) {
  return guard([&] {
    ModelEntry& m = model_of(h, "kw_model_rows_plan");
    const TableEntry& te = m.table[table_index(m, i, "kw_model_rows_plan")];
    auto [off, len] = rows_range(m, te, (int64_t)r0, (int64_t)r1);
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
    need_ptr(p, "kw_model_rows_load", "fetched bytes");
    const int64_t r0 = (int64_t)r0d, r1 = (int64_t)r1d;
    auto [want_off, want_len] = rows_range(m, te, r0, r1);
    const uint64_t off = (uint64_t)offd, len = (uint64_t)lend;
    if (off > want_off || off + len < want_off + want_len)
      knot::fail(m.what + ": tensor " + te.name + ": fetched bytes [" + std::to_string(off) + ", " + std::to_string(off + len) +
                 ") do not cover the planned range [" + std::to_string(want_off) + ", " + std::to_string(want_off + want_len) + ")");
    knot::Tensor& t = m.model.tensors.at(te.name);
    const uint64_t rs = knot::row_bytes(t.type, te.shape[0], te.name);
    auto buf = knot::alloc_aligned((size_t)((r1 - r0) * (int64_t)rs));
    if (m.knot_header) {
      WindowSource src(m.what, m.knot_header->file_size, off, p, len);
      knot::read_knot_rows(src, *m.knot_header, m.knot_header->get(te.name), r0, r1, buf.get(), true);
    } else {
      std::memcpy(buf.get(), p + (te.offset + (uint64_t)r0 * rs - off), (size_t)((r1 - r0) * (int64_t)rs));
    }
    t.bytes = buf;
    t.shape = te.shape;
    t.shape[1] = r1 - r0;
    t.size = (size_t)((r1 - r0) * (int64_t)rs);
    te.row0 = r0;
    te.loaded = true;
  });
}

// ---- stations --------------------------------------------------------------------------

KW_EXPORT(kw_station_new)
int kw_station_new(int32_t model, int32_t l0, int32_t l1, int32_t n_ctx, int32_t h0, int32_t h1, int32_t reference,
                   int32_t* out_handle) {
  return guard([&] {
    *out_handle = 0;
    ModelEntry& m = model_of(model, "kw_station_new");
    const auto& c = m.model.config;
    if (h1 < 0) h1 = c.n_head;
    const int g = c.n_head_kv > 0 ? c.n_head / c.n_head_kv : 0;
    if (g <= 0 || h0 < 0 || h1 > c.n_head || h0 >= h1 || h0 % g || h1 % g)
      knot::fail("kw_station_new: head slice [" + std::to_string(h0) + "," + std::to_string(h1) + ") must lie in [0," +
                 std::to_string(c.n_head) + ") on multiples of the GQA group size " + std::to_string(g));
    if (n_ctx <= 0) knot::fail("kw_station_new: n_ctx must be positive");
    auto s = std::make_unique<Station>();
    s->model = model;
    s->l0 = l0, s->l1 = l1, s->h0 = h0, s->h1 = h1;
    s->fo.kernel = reference ? knot::Kernel::Reference : knot::Kernel::Simd;
    s->fo.kv_type = reference ? knot::KvType::F32 : knot::KvType::F16;
    const uint64_t per_tok = 2ull * (uint64_t)std::max(0, l1 - l0) * (uint64_t)((h1 - h0) / g) * c.head_dim *
                             knot::kv_elem_bytes(s->fo.kv_type);
    const uint64_t room = kLinearCap - std::min<uint64_t>(kLinearCap, heap_in_use());
    if (per_tok * (uint64_t)n_ctx > room)
      knot::fail("kw_station_new: a context of " + std::to_string(n_ctx) + " tokens needs " +
                 std::to_string(per_tok * (uint64_t)n_ctx) + " bytes of KV cache but only " + std::to_string(room) +
                 " bytes are left under the 128 MB wasm memory cap");
    s->kv = knot::KvCache(c, l0, l1, n_ctx, s->fo.kv_type, SIZE_MAX, h0 / g, h1 / g);
    *out_handle = g_stations.add(std::move(s));
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
  return guard([&] {
    Station& s = g_stations.get(st, "kw_station_truncate");
    if (n_pos < 0) knot::fail("kw_station_truncate: n_pos must be >= 0");
    s.kv.truncate(n_pos);
  });
}

// result {"n_pos", "n_ctx", "kv_bytes", "workspace_bytes", "workspace_peak"}
KW_EXPORT(kw_station_info)
int kw_station_info(int32_t st) {
  return guard([&] {
    Station& s = g_stations.get(st, "kw_station_info");
    set_result(json{{"n_pos", s.kv.n_pos()}, {"n_ctx", s.kv.n_ctx()}, {"kv_bytes", s.kv.bytes()},
                    {"workspace_bytes", s.ws.bytes()}, {"workspace_peak", s.ws.peak}}.dump());
  });
}

// attention phase of `layer` for positions [pos0, pos0+ntok): out = partial residual.
KW_EXPORT(kw_station_attn)
int kw_station_attn(int32_t st, int32_t layer, int32_t pos0, const float* x, int32_t ntok, float* out) {
  return guard([&] {
    Station& s = g_stations.get(st, "kw_station_attn");
    ModelEntry& m = model_of(s.model, "kw_station_attn");
    need_ptr(x, "kw_station_attn", "x");
    need_ptr(out, "kw_station_attn", "out");
    if (ntok <= 0) knot::fail("kw_station_attn: ntok must be positive");
    const auto& c = m.model.config;
    const knot::LayerWeights w = loaded_layer(m, layer);
    const int64_t hd = c.head_dim, g = c.n_head / c.n_head_kv;
    const std::string slice = "station heads [" + std::to_string(s.h0) + "," + std::to_string(s.h1) + ")";
    check_slice_rows(m, w.attn_q, s.h0 * hd, s.h1 * hd, slice);
    check_slice_rows(m, w.attn_k, s.h0 / g * hd, s.h1 / g * hd, slice);
    check_slice_rows(m, w.attn_v, s.h0 / g * hd, s.h1 / g * hd, slice);
    knot::attn(c, w, s.kv, pos0, x, ntok, out, s.fo, s.ws, s.h0, s.h1);
  });
}

// phase: 0 ffn_gate (x -> h), 1 ffn_up (x, h -> h), 2 ffn_down (h -> out), 3 ffn_gate_up (x -> h)
// over FFN columns [c0, c1) (c1 = -1: n_ff).
KW_EXPORT(kw_station_ffn)
int kw_station_ffn(int32_t st, int32_t phase, int32_t layer, const float* x, int32_t ntok, float* h, float* out,
                   int32_t c0, int32_t c1) {
  return guard([&] {
    Station& s = g_stations.get(st, "kw_station_ffn");
    ModelEntry& m = model_of(s.model, "kw_station_ffn");
    if (layer < s.l0 || layer >= s.l1)
      knot::fail("kw_station_ffn: layer " + std::to_string(layer) + " is outside this station's layers [" +
                 std::to_string(s.l0) + "," + std::to_string(s.l1) + ")");
    if (ntok <= 0) knot::fail("kw_station_ffn: ntok must be positive");
    need_ptr(h, "kw_station_ffn", "h");
    const auto& cfg = m.model.config;
    const knot::LayerWeights w = loaded_layer(m, layer);
    {
      const int64_t a = c0, b = c1 < 0 ? cfg.n_ff : c1;
      const std::string slice = "FFN columns [" + std::to_string(a) + "," + std::to_string(b) + ")";
      if (phase == 0 || phase == 3) check_slice_rows(m, w.ffn_gate, a, b, slice);
      if (phase == 1 || phase == 3) check_slice_rows(m, w.ffn_up, a, b, slice);
    }
    switch (phase) {
      case 0: need_ptr(x, "ffn_gate", "x"); knot::ffn_gate(cfg, w, x, ntok, h, s.fo, s.ws, c0, c1); break;
      case 1: need_ptr(x, "ffn_up", "x"); knot::ffn_up(cfg, w, x, ntok, h, s.fo, s.ws, c0, c1); break;
      case 2: need_ptr(out, "ffn_down", "out"); knot::ffn_down(cfg, w, h, ntok, out, s.fo, s.ws, c0, c1); break;
      case 3: need_ptr(x, "ffn_gate_up", "x"); knot::ffn_gate_up(cfg, w, x, ntok, h, s.fo, s.ws, c0, c1); break;
      default: knot::fail("kw_station_ffn: phase must be 0 (gate), 1 (up), 2 (down) or 3 (gate_up)");
    }
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
    const knot::Tensor& te = loaded(m, m.model.find("token_embd_weight"), "embed");
    knot::embed_rows(te, ids, ntok, v0, v1, m.model.config.n_vocab, out, entry(m, "token_embd_weight").row0);
  });
}

// out = output_norm(x)    x, out: [ntok, n_embd]
KW_EXPORT(kw_output_norm)
int kw_output_norm(int32_t model, const float* x, int32_t ntok, float* out) {
  return guard([&] {
    ModelEntry& m = model_of(model, "kw_output_norm");
    need_ptr(x, "kw_output_norm", "x");
    need_ptr(out, "kw_output_norm", "out");
    const knot::Tensor& n = loaded(m, m.model.find("output_norm_weight"), "output");
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
    loaded(m, &W, "lm_head");
    // Tensor rows past the tokenizer vocab are padding (qwen2.5: 151,936 tokens, 152,064
    // rows): not tokens, so no shard may own or sample them (DESIGN §1).
    const int64_t nv = m.model.config.n_vocab;
    if (nv > 0 && v1 > nv)
      knot::fail("kw_lm_head: vocab slice [" + std::to_string(v0) + "," + std::to_string(v1) +
                 ") reaches past the tokenizer vocabulary of " + std::to_string(nv) + " tokens (rows >= " +
                 std::to_string(nv) + " of " + W.name + " are padding)");
    knot::lm_head_logits(W, xn, ntok, v0, v1, logits, reference ? knot::Kernel::Reference : knot::Kernel::Simd,
                         softcap, entry(m, W.name).row0);
  });
}

// A slice's top-k (absolute ids, descending) and log-sum-exp, for exact merged sampling.
// logits: [v1-v0]. result {"ids": [...], "logits": [...], "lse"}
KW_EXPORT(kw_topk_lse)
int kw_topk_lse(const float* logits, int32_t v0, int32_t v1, int32_t k) {
  return guard([&] {
    need_ptr(logits, "kw_topk_lse", "logits");
    knot::SliceTopK r = knot::topk_lse(logits, v0, v1, k);
    set_result(json{{"ids", r.ids}, {"logits", r.logits}, {"lse", r.lse}}.dump());
  });
}
