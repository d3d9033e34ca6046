#include "infer/station.h"

#include <algorithm>

#include "kernels/common.h"

namespace knot {

namespace {
std::string S(int64_t v) { return std::to_string(v); }
std::string range(int64_t a, int64_t b) { return "[" + S(a) + "," + S(b) + ")"; }
}  // namespace

uint64_t kv_bytes_needed(const ModelConfig& c, int l0, int l1, int kvh0, int kvh1, int n_ctx, KvType t) {
  return 2ull * (uint64_t)std::max(0, l1 - l0) * (uint64_t)std::max(0, kvh1 - kvh0) * (uint64_t)std::max(0, c.head_dim) *
         kv_elem_bytes(t) * (uint64_t)std::max(0, n_ctx);
}

void check_kv_fits(const std::string& who, uint64_t per_token, int n_ctx, KvType t, uint64_t limit,
                   const std::string& where) {
  const uint64_t need = per_token * (uint64_t)std::max(0, n_ctx);
  if (need > limit)
    fail(who + ": a context of " + S(n_ctx) + " tokens needs " + std::to_string(need) + " bytes of " +
         kv_type_name(t) + " KV cache (" + std::to_string(per_token) + " bytes/token) but only " +
         std::to_string(limit) + " bytes are available" + where);
}

void check_slice_rows(const Tensor* t, int64_t full, int64_t r0, int64_t r1, const std::string& slice) {
  if (!t || !t->bytes) return;  // absent: the phase names it
  const int64_t a = t->row0, b = t->row0 + t->nrows();
  if ((a == 0 && b == full) || (a == r0 && b == r1)) return;
  fail("tensor " + t->name + " holds rows " + range(a, b) + " but " + slice + " need rows " + range(r0, r1));
}

Station::Station(const ModelConfig& c, const StationSpec& s) : cfg_(c), s_(s) {
  if (s_.h1 < 0) s_.h1 = c.n_head;
  g_ = c.n_head_kv > 0 && c.n_head % c.n_head_kv == 0 ? c.n_head / c.n_head_kv : 0;
  const std::string who = "station layers " + range(s_.l0, s_.l1) + " heads " + range(s_.h0, s_.h1);
  if (g_ <= 0 || s_.h0 < 0 || s_.h1 > c.n_head || s_.h0 >= s_.h1 || s_.h0 % g_ || s_.h1 % g_)
    fail(who + ": head slice must lie in [0," + S(c.n_head) + ") on multiples of the GQA group size " + S(g_));
  if (s_.l0 < 0 || s_.l1 > c.n_layer || s_.l0 >= s_.l1)
    fail(who + ": layer range outside [0," + S(c.n_layer) + ")");
  if (s_.n_ctx <= 0) fail(who + ": n_ctx must be positive, got " + S(s_.n_ctx));
  const int kvh0 = s_.h0 / g_, kvh1 = s_.h1 / g_;
  check_kv_fits(who, kv_bytes_needed(c, s_.l0, s_.l1, kvh0, kvh1, 1, s_.fo.kv_type), s_.n_ctx, s_.fo.kv_type,
                s_.kv_limit, s_.kv_limit_where);
  kv_ = KvCache(c, s_.l0, s_.l1, s_.n_ctx, s_.fo.kv_type, SIZE_MAX, kvh0, kvh1);
}

void Station::check_layer(int layer, const char* what) const {
  if (layer < s_.l0 || layer >= s_.l1)
    fail(std::string(what) + ": layer " + S(layer) + " is outside this station's layers " + range(s_.l0, s_.l1));
}

void Station::attn(const Model& m, int layer, int pos0, const float* x, int ntok, float* out) {
  check_layer(layer, "attn");
  if (!x || !out) fail("attn: null x or out buffer");
  if (ntok <= 0) fail("attn: ntok must be positive, got " + S(ntok));
  const LayerWeights w = layer_weights(m, layer, /*loaded_only=*/true);
  const int64_t hd = cfg_.head_dim;
  const std::string slice = "station heads " + range(s_.h0, s_.h1);
  check_slice_rows(w.attn_q, (int64_t)cfg_.n_head * hd, s_.h0 * hd, s_.h1 * hd, slice);
  check_slice_rows(w.attn_k, (int64_t)cfg_.n_head_kv * hd, s_.h0 / g_ * hd, s_.h1 / g_ * hd, slice);
  check_slice_rows(w.attn_v, (int64_t)cfg_.n_head_kv * hd, s_.h0 / g_ * hd, s_.h1 / g_ * hd, slice);
  knot::attn(cfg_, w, kv_, pos0, x, ntok, out, s_.fo, ws_, s_.h0, s_.h1);
}

void Station::ffn(const Model& m, FfnPhase ph, int layer, const float* x, int ntok, float* h, float* out,
                  int c0, int c1) {
  static const char* names[] = {"ffn_gate", "ffn_up", "ffn_down", "ffn_gate_up"};
  const int pi = (int)ph;
  if (pi < 0 || pi > 3) fail("ffn: phase must be 0 (gate), 1 (up), 2 (down) or 3 (gate_up), got " + S(pi));
  const char* name = names[pi];
  check_layer(layer, name);
  if (ntok <= 0) fail(std::string(name) + ": ntok must be positive, got " + S(ntok));
  if (!h) fail(std::string(name) + ": null h buffer");
  if (ph == FfnPhase::Down ? !out : !x) fail(std::string(name) + (ph == FfnPhase::Down ? ": null out buffer" : ": null x buffer"));
  const LayerWeights w = layer_weights(m, layer, /*loaded_only=*/true);
  const int64_t a = c0, b = c1 < 0 ? cfg_.n_ff : c1;
  const std::string slice = "FFN columns " + range(a, b);
  if (ph == FfnPhase::Gate || ph == FfnPhase::GateUp) check_slice_rows(w.ffn_gate, cfg_.n_ff, a, b, slice);
  if (ph == FfnPhase::Up || ph == FfnPhase::GateUp) check_slice_rows(w.ffn_up, cfg_.n_ff, a, b, slice);
  switch (ph) {
    case FfnPhase::Gate: ffn_gate(cfg_, w, x, ntok, h, s_.fo, ws_, c0, c1); break;
    case FfnPhase::Up: ffn_up(cfg_, w, x, ntok, h, s_.fo, ws_, c0, c1); break;
    case FfnPhase::Down: ffn_down(cfg_, w, h, ntok, out, s_.fo, ws_, c0, c1); break;
    case FfnPhase::GateUp: ffn_gate_up(cfg_, w, x, ntok, h, s_.fo, ws_, c0, c1); break;
  }
}

void Station::truncate(int n_pos) {
  if (n_pos < 0) fail("station truncate: n_pos must be >= 0, got " + S(n_pos));
  kv_.truncate(n_pos);
}

}  // namespace knot
