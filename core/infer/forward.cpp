#include "infer/forward.h"

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <string>

#include "container/arch.h"
#include "infer/attn_simd.h"
#include "kernels/common.h"
#include "kernels/quant.h"

namespace knot {

using namespace attn_simd;

namespace {

std::string S(int64_t v) { return std::to_string(v); }

float* grow(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

const Tensor& need(const Tensor* t, int layer, const char* phase, const char* suffix) {
  if (!t)
    fail("missing tensor " + layer_tensor_name(layer, suffix) + " (layer " + S(layer) +
         ", phase " + phase + ")");
  return *t;
}

std::string shape_str(const Tensor& t) {
  std::string s = "[";
  for (size_t i = 0; i < t.shape.size(); i++) s += (i ? "," : "") + S(t.shape[i]);
  return s + "]";
}

// Row offset of rows [r0,r1) inside W: 0 when W was already cut to the slice, r0 when W
// holds all full_rows rows. Checks the row length too.
int64_t row_base(const Tensor& W, int64_t cols, int64_t full_rows, int64_t r0, int64_t r1,
                 const char* phase) {
  if (W.ne0() != cols)
    fail("tensor " + W.name + " has shape " + shape_str(W) + ", expected rows of " + S(cols) +
         " elements (phase " + phase + ")");
  if (W.nrows() == full_rows) return r0;
  if (W.nrows() == r1 - r0) return 0;
  fail("tensor " + W.name + " has " + S(W.nrows()) + " rows, expected " + S(full_rows) +
       " (or a slice of " + S(r1 - r0) + ") (phase " + phase + ")");
}

// f32 view of a small vector tensor (norm weight, bias); dequantizes into tmp if needed.
const float* vec_f32(const Tensor& t, int64_t n, std::vector<float>& tmp, const char* phase) {
  if (t.ne0() * t.nrows() != n)
    fail("tensor " + t.name + " has shape " + shape_str(t) + ", expected " + S(n) +
         " elements (phase " + phase + ")");
  if (t.type == DType::F32) return reinterpret_cast<const float*>(t.data());
  grow(tmp, n);
  dequantize_row(t.type, t.data(), tmp.data(), n);
  return tmp.data();
}

void rmsnorm_rows(const float* x, const Tensor& w, int ntok, int n, float eps, float* out,
                  Workspace& ws, const char* phase) {
  const float* wf = vec_f32(w, n, ws.tmp, phase);
  for (int t = 0; t < ntok; t++) rmsnorm(x + (size_t)t * n, wf, n, eps, out + (size_t)t * n);
}

void add_bias(float* y, int ntok, int64_t row, const float* b) {
  for (int t = 0; t < ntok; t++)
    for (int64_t i = 0; i < row; i++) y[(size_t)t * row + i] += b[i];
}

}  // namespace

// ---- weights -----------------------------------------------------------------------

// The LayerWeights field of each per-layer tensor of the arch table, by TensorId.
namespace {
const Tensor* LayerWeights::* const kLayerField[kTensorIds] = {
    nullptr,                      // TOKEN_EMBD
    nullptr,                      // OUTPUT_NORM
    nullptr,                      // OUTPUT
    &LayerWeights::attn_norm,     // ATTN_NORM
    &LayerWeights::attn_q,        // ATTN_Q
    &LayerWeights::attn_k,        // ATTN_K
    &LayerWeights::attn_v,        // ATTN_V
    &LayerWeights::attn_output,   // ATTN_OUT
    &LayerWeights::attn_q_bias,   // ATTN_Q_BIAS
    &LayerWeights::attn_k_bias,   // ATTN_K_BIAS
    &LayerWeights::attn_v_bias,   // ATTN_V_BIAS
    &LayerWeights::attn_q_norm,   // ATTN_Q_NORM
    &LayerWeights::attn_k_norm,   // ATTN_K_NORM
    &LayerWeights::ffn_norm,      // FFN_NORM
    &LayerWeights::ffn_gate,      // FFN_GATE
    &LayerWeights::ffn_up,        // FFN_UP
    &LayerWeights::ffn_down,      // FFN_DOWN
};
}  // namespace

LayerWeights layer_weights(const Model& m, int layer, bool loaded_only) {
  LayerWeights w;
  w.layer = layer;
  for (const ArchTensor& at : arch_info(m.config.arch, "model").tensors) {
    if (!kLayerField[(int)at.id]) continue;
    const Tensor* t = m.find(tensor_knot_name(at.id, layer));
    w.*kLayerField[(int)at.id] = loaded_only && t && !t->bytes ? nullptr : t;
  }
  return w;
}

void check_layer_tensors(const Model& m, int layer) {
  for (const ArchTensor& at : arch_info(m.config.arch, "model").tensors) {
    const TensorInfo& ti = tensor_info(at.id);
    if (ti.per_layer && at.need == Need::Required) {
      const unsigned first_phase = ti.phases & (~ti.phases + 1);  // lowest bit: the phase that loads it first
      m.get(tensor_knot_name(at.id, layer), layer, phase_name(first_phase));
    }
  }
}

// ---- workspace ---------------------------------------------------------------------

void Workspace::reserve(const ModelConfig& c, int max_tok, int n_ctx) {
  const size_t T = (size_t)std::max(1, max_tok);
  const size_t hd = (size_t)c.head_dim;
  grow(xn, T * c.n_embd);
  grow(q, T * c.n_head * hd);
  grow(k, T * c.n_head_kv * hd);
  grow(v, T * c.n_head_kv * hd);
  grow(att, T * c.n_head * hd);
  grow(kf, (size_t)n_ctx * hd);
  grow(vf, (size_t)n_ctx * hd);
  grow(scores, (size_t)n_ctx);
  grow(up, T * c.n_ff);
  grow(tmp, std::max(c.n_embd, c.n_head * c.head_dim));
  grow(delta, T * c.n_embd);
  grow(hidden, T * c.n_ff);
  note_peak();
}

size_t Workspace::bytes() const {
  size_t b = 0;
  for (const auto* v : {&xn, &q, &k, &v, &att, &kf, &vf, &scores, &up, &tmp, &ytile, &rowf, &delta, &hidden})
    b += v->capacity() * sizeof(float);
  return b + wtile.capacity();
}

void Workspace::note_peak() { peak = std::max(peak, bytes()); }

void Workspace::release() {
  note_peak();
  for (auto* v : {&xn, &q, &k, &v, &att, &kf, &vf, &scores, &up, &tmp, &ytile, &rowf, &delta, &hidden}) {
    v->clear();
    v->shrink_to_fit();
  }
  wtile.clear();
  wtile.shrink_to_fit();
}

// ---- building blocks ---------------------------------------------------------------

void rmsnorm(const float* x, const float* w, int n, float eps, float* out) {
  double ss = 0;
  for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
  const float scale = (float)(1.0 / std::sqrt(ss / n + (double)eps));
  for (int i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

void rope(float* x, int ntok, int row_stride, int n_heads, int head_dim, int rope_dims, int pos0,
          float theta, RopeStyle style) {
  const int half = rope_dims / 2;
  // frequency of pair i: theta^(-2i/rope_dims), as a running product (double: exact
  // enough for any context length; one cos/sin per (token, pair) shared by all heads)
  const double step = std::pow((double)theta, -2.0 / rope_dims);
  for (int t = 0; t < ntok; t++) {
    const double pos = (double)(pos0 + t);
    double freq = 1.0;
    for (int i = 0; i < half; i++, freq *= step) {
      const float c = (float)std::cos(pos * freq), s = (float)std::sin(pos * freq);
      const int a = style == RopeStyle::Norm ? 2 * i : i;
      const int b = style == RopeStyle::Norm ? 2 * i + 1 : i + half;
      for (int h = 0; h < n_heads; h++) {
        float* xh = x + (size_t)t * row_stride + (size_t)h * head_dim;
        const float x0 = xh[a], x1 = xh[b];
        xh[a] = x0 * c - x1 * s;
        xh[b] = x0 * s + x1 * c;
      }
    }
  }
}

void swiglu(float* g, const float* u, size_t n) {
  for (size_t i = 0; i < n; i++) g[i] = g[i] / (1.f + std::exp(-g[i])) * u[i];
}

namespace {

void swiglu_fast(float* g, const float* u, size_t n) { swiglu_fast_row(g, u, n); }

// SwiGLU in the precision of kernel k.
void swiglu_k(float* g, const float* u, size_t n, Kernel k) {
  if (k == Kernel::Reference) swiglu(g, u, n);
  else swiglu_fast(g, u, n);
}

}  // namespace

void softcap(float* y, size_t n, float c) {
  for (size_t i = 0; i < n; i++) y[i] = std::tanh(y[i] / c) * c;
}

void project_rows(const Tensor& W, int64_t r0, int64_t r1, const float* X, int64_t ntok, float* Y,
                  Kernel k) {
  const int64_t cols = W.ne0();
  if (r0 < 0 || r1 > W.nrows() || r0 >= r1)
    fail("rows [" + S(r0) + "," + S(r1) + ") out of range for tensor " + W.name + " with " +
         S(W.nrows()) + " rows");
  if (ntok == 1) {
    const size_t rb = row_bytes(W.type, cols, W.name);
    matvec(W.type, W.data() + (size_t)r0 * rb, r1 - r0, cols, X, Y, k);
  } else {
    matmul_rows(W.type, W.data(), r0, r1, cols, X, ntok, Y, k);
  }
}

void project_cols(const Tensor& W, int64_t c0, int64_t c1, const float* X, int64_t ntok, float* Y,
                  Kernel k, Workspace& ws) {
  const int64_t cols = W.ne0(), rows = W.nrows(), nc = c1 - c0;
  if (c0 == 0 && c1 == cols) return project_rows(W, 0, rows, X, ntok, Y, k);
  if (c0 < 0 || c1 > cols || c0 >= c1)
    fail("columns [" + S(c0) + "," + S(c1) + ") out of range for tensor " + W.name + " with rows of " +
         S(cols));
  const int blk = type_traits(W.type).block_elems;
  const size_t rb_full = row_bytes(W.type, cols, W.name);
  const bool aligned = c0 % blk == 0 && c1 % blk == 0;
  // The tile holds up to kColTileRows sub-rows; Y of the tile is scattered into Y.
  const DType ttype = aligned ? W.type : DType::F32;
  const size_t rb_tile = aligned ? row_bytes(W.type, nc, W.name) : (size_t)nc * sizeof(float);
  const size_t off = aligned ? row_bytes(W.type, c0, W.name) : 0;
  if (ws.wtile.size() < rb_tile * kColTileRows + 64) ws.wtile.resize(rb_tile * kColTileRows + 64);
  // 64-byte align the tile start for the kernels
  uint8_t* tile = ws.wtile.data();
  tile += (64 - (reinterpret_cast<uintptr_t>(tile) & 63)) & 63;
  float* yt = grow(ws.ytile, (size_t)ntok * kColTileRows);
  if (!aligned) grow(ws.rowf, cols);
  for (int64_t r0 = 0; r0 < rows; r0 += kColTileRows) {
    const int64_t nr = std::min<int64_t>(kColTileRows, rows - r0);
    for (int64_t i = 0; i < nr; i++) {
      const uint8_t* src = W.data() + (size_t)(r0 + i) * rb_full;
      if (aligned) {
        std::memcpy(tile + i * rb_tile, src + off, rb_tile);
      } else {
        dequantize_row(W.type, src, ws.rowf.data(), cols);
        std::memcpy(tile + i * rb_tile, ws.rowf.data() + c0, rb_tile);
      }
    }
    if (ntok == 1)
      matvec(ttype, tile, nr, nc, X, yt, k);
    else
      matmul(ttype, tile, nr, nc, X, ntok, yt, k);
    for (int64_t t = 0; t < ntok; t++)
      for (int64_t i = 0; i < nr; i++) Y[t * rows + r0 + i] = yt[t * nr + i];
  }
}

// ---- attention ---------------------------------------------------------------------

void attn(const ModelConfig& cfg, const LayerWeights& w, KvCache& kv, int pos0, const float* x,
          int ntok, float* out, const ForwardOptions& o, Workspace& ws, int h0, int h1) {
  const char* P = "attn";
  const int L = w.layer;
  const int E = cfg.n_embd, hd = cfg.head_dim;
  if (h1 < 0) h1 = cfg.n_head;
  if (cfg.n_head_kv <= 0 || cfg.n_head % cfg.n_head_kv != 0)
    fail("layer " + S(L) + ": n_head " + S(cfg.n_head) + " is not a multiple of n_head_kv " +
         S(cfg.n_head_kv));
  const int g = cfg.n_head / cfg.n_head_kv;  // query heads per KV head
  if (h0 < 0 || h1 > cfg.n_head || h0 >= h1 || h0 % g || h1 % g)
    fail("attention head slice [" + S(h0) + "," + S(h1) + ") of layer " + S(L) +
         " must lie in [0," + S(cfg.n_head) + ") on multiples of the GQA group size " + S(g));
  const int kv0 = h0 / g, kv1 = h1 / g;
  const int nh = h1 - h0, nkv = kv1 - kv0;
  if (kv.kv_head_begin() != kv0 || kv.kv_head_end() != kv1)
    fail("layer " + S(L) + ": KV cache holds KV heads [" + S(kv.kv_head_begin()) + "," +
         S(kv.kv_head_end()) + ") but the head slice [" + S(h0) + "," + S(h1) + ") needs [" + S(kv0) +
         "," + S(kv1) + ")");
  if (ntok <= 0) fail("attn: ntok must be positive, got " + S(ntok));
  if (pos0 + ntok > kv.n_ctx())
    fail("layer " + S(L) + ": positions up to " + S(pos0 + ntok) + " exceed the KV context of " +
         S(kv.n_ctx()));

  const Tensor& wn = need(w.attn_norm, L, P, "attn_norm_weight");
  const Tensor& wq = need(w.attn_q, L, P, "attn_q_weight");
  const Tensor& wk = need(w.attn_k, L, P, "attn_k_weight");
  const Tensor& wv = need(w.attn_v, L, P, "attn_v_weight");
  const Tensor& wo = need(w.attn_output, L, P, "attn_output_weight");

  const size_t qrow = (size_t)nh * hd, kvrow = (size_t)nkv * hd;
  float* xn = grow(ws.xn, (size_t)ntok * E);  // [ntok, E]
  float* q = grow(ws.q, ntok * qrow);         // [ntok, nh*hd]
  float* k = grow(ws.k, ntok * kvrow);        // [ntok, nkv*hd]
  float* v = grow(ws.v, ntok * kvrow);        // [ntok, nkv*hd]
  float* att = grow(ws.att, ntok * qrow);     // [ntok, nh*hd]

  rmsnorm_rows(x, wn, ntok, E, cfg.rms_eps, xn, ws, P);

  const int64_t qb = row_base(wq, E, (int64_t)cfg.n_head * hd, (int64_t)h0 * hd, (int64_t)h1 * hd, P);
  const int64_t kb = row_base(wk, E, (int64_t)cfg.n_head_kv * hd, (int64_t)kv0 * hd, (int64_t)kv1 * hd, P);
  const int64_t vb = row_base(wv, E, (int64_t)cfg.n_head_kv * hd, (int64_t)kv0 * hd, (int64_t)kv1 * hd, P);
  project_rows(wq, qb, qb + (int64_t)qrow, xn, ntok, q, o.kernel);
  project_rows(wk, kb, kb + (int64_t)kvrow, xn, ntok, k, o.kernel);
  project_rows(wv, vb, vb + (int64_t)kvrow, xn, ntok, v, o.kernel);
  // biases (qwen2): a full-length bias is indexed at the slice, a cut one from 0
  auto bias = [&](const Tensor* b, float* y, size_t row, int64_t full, int64_t start) {
    if (!b) return;
    const int64_t n = b->ne0() * b->nrows();
    const float* bf = vec_f32(*b, n == full ? full : (int64_t)row, ws.tmp, P);
    add_bias(y, ntok, row, bf + (n == full ? start : 0));
  };
  bias(w.attn_q_bias, q, qrow, (int64_t)cfg.n_head * hd, (int64_t)h0 * hd);
  bias(w.attn_k_bias, k, kvrow, (int64_t)cfg.n_head_kv * hd, (int64_t)kv0 * hd);
  bias(w.attn_v_bias, v, kvrow, (int64_t)cfg.n_head_kv * hd, (int64_t)kv0 * hd);

  // qwen3: RMSNorm of every query and key head (one [hd] weight shared by all heads)
  auto head_norm = [&](const Tensor* nw, float* y, int nheads) {
    if (!nw) return;
    const float* wf = vec_f32(*nw, hd, ws.tmp, P);
    for (int i = 0; i < ntok * nheads; i++) rmsnorm(y + (size_t)i * hd, wf, hd, cfg.rms_eps, y + (size_t)i * hd);
  };
  head_norm(w.attn_q_norm, q, nh);
  head_norm(w.attn_k_norm, k, nkv);

  const int rd = cfg.rope_dims > 0 ? cfg.rope_dims : hd;
  rope(q, ntok, (int)qrow, nh, hd, rd, pos0, cfg.rope_theta, cfg.rope_style);
  rope(k, ntok, (int)kvrow, nkv, hd, rd, pos0, cfg.rope_theta, cfg.rope_style);

  kv.append(L, pos0, ntok, k, v);

  // Causal grouped-query attention, one KV head at a time: its keys/values are read once
  // (an F16 cache converted into the workspace, f32 rows in place) and shared by the g
  // query heads and the ntok tokens.
  const int n_all = pos0 + ntok;
  const bool in_place = kv.type() != KvType::F16;  // F32, F16InF32: f32 rows
  float* kbuf = in_place ? nullptr : grow(ws.kf, (size_t)n_all * hd);  // [n_all, hd]
  float* vbuf = in_place ? nullptr : grow(ws.vf, (size_t)n_all * hd);  // [n_all, hd]
  float* srow[2] = {grow(ws.scores, n_all), nullptr};                  // [n_all] per row
  // Rows two at a time where the head size keeps the values in registers and the rows are
  // read in place (the second row's scores then go in ws.kf, which holds no keys: no memory
  // beyond an F16 cache's workspace): the softmax sum and the weighted values of one row are
  // add chains (one add per key), so two rows' chains interleave (sum_rows2,
  // weighted_values2: each row's sums as on its own, bit for bit).
  const bool pairs = in_place && (hd == 4 || hd == 8 || hd == 16);
  if (pairs) srow[1] = grow(ws.kf, n_all);
  const float scale = 1.f / std::sqrt((float)hd);
  const int rows = g * ntok;  // per KV head: row r is query head kvh*g + r/ntok at token r%ntok
  for (int kvh = kv0; kvh < kv1; kvh++) {
    const float* kf = kbuf;
    const float* vf = vbuf;
    if (in_place) {
      kf = kv.k_rows_f32(L, kvh);
      vf = kv.v_rows_f32(L, kvh);
    } else {
      kv.read_k(L, kvh, n_all, kbuf);
      kv.read_v(L, kvh, n_all, vbuf);
    }
    for (int r = 0; r < rows; r += pairs ? 2 : 1) {
      const int nr = pairs && r + 1 < rows ? 2 : 1;
      int n[2];
      float* oh[2];
      for (int i = 0; i < nr; i++) {
        const int h = kvh * g + (r + i) / ntok, t = (r + i) % ntok;
        const float* qh = q + t * qrow + (size_t)(h - h0) * hd;
        oh[i] = att + t * qrow + (size_t)(h - h0) * hd;
        n[i] = pos0 + t + 1;
        float* s = srow[i];
        float mx = -INFINITY;
        if (hd % 8 == 0)
          mx = scores_hd8(qh, kf, n[i], hd, scale, s);
        else
          for (int j = 0; j < n[i]; j++) {  // hot loop: scores
            s[j] = dot_f32(qh, kf + (size_t)j * hd, hd) * scale;
            mx = std::max(mx, s[j]);
          }
        if (o.kernel == Kernel::Reference)
          for (int j = 0; j < n[i]; j++) s[j] = std::exp(s[j] - mx);
        else
          exp_shifted(s, n[i], mx);
      }
      const float* sa = srow[0];
      const float* sb = srow[1];
      float sum[2] = {0, 0};
      if (nr == 2) {
        sum_rows2(sa, n[0], sb, n[1], &sum[0], &sum[1]);
      } else {
        for (int j = 0; j < n[0]; j++) sum[0] += sa[j];
      }
      const float inv[2] = {1.f / sum[0], nr == 2 ? 1.f / sum[1] : 0.f};
      // hot loop: weighted values (small heads: accumulators in registers, same sums)
      if (nr == 2) {
        switch (hd) {
          case 4: weighted_values2<1>(sa, inv[0], sb, inv[1], vf, n[0], n[1], hd, oh[0], oh[1]); break;
          case 8: weighted_values2<2>(sa, inv[0], sb, inv[1], vf, n[0], n[1], hd, oh[0], oh[1]); break;
          default: weighted_values2<4>(sa, inv[0], sb, inv[1], vf, n[0], n[1], hd, oh[0], oh[1]); break;
        }
        continue;
      }
      switch (hd) {
        case 4: weighted_values<1>(sa, inv[0], vf, n[0], hd, oh[0]); break;
        case 8: weighted_values<2>(sa, inv[0], vf, n[0], hd, oh[0]); break;
        case 16: weighted_values<4>(sa, inv[0], vf, n[0], hd, oh[0]); break;
        default:
          if (hd % 32 == 0) {  // 32 columns at a time in registers
            weighted_values_cols32(sa, inv[0], vf, n[0], hd, oh[0]);
            break;
          }
          std::fill(oh[0], oh[0] + hd, 0.f);
          for (int j = 0; j < n[0]; j++) axpy_f32(sa[j] * inv[0], vf + (size_t)j * hd, oh[0], hd);
      }
    }
  }

  // Output projection through columns [h0*hd, h1*hd) of attn_output.
  if (wo.nrows() != E)
    fail("tensor " + wo.name + " has shape " + shape_str(wo) + ", expected " + S(E) + " rows");
  if (wo.ne0() == (int64_t)qrow)  // already cut to the slice (or the full tensor)
    project_rows(wo, 0, E, att, ntok, out, o.kernel);
  else if (wo.ne0() == (int64_t)cfg.n_head * hd)
    project_cols(wo, (int64_t)h0 * hd, (int64_t)h1 * hd, att, ntok, out, o.kernel, ws);
  else
    fail("tensor " + wo.name + " has shape " + shape_str(wo) + ", expected rows of " +
         S((int64_t)cfg.n_head * hd) + " elements (phase attn)");
  ws.note_peak();
}

// ---- FFN ---------------------------------------------------------------------------

namespace {

void ffn_range(const ModelConfig& cfg, int L, int& c0, int& c1) {
  if (c1 < 0) c1 = cfg.n_ff;
  if (c0 < 0 || c1 > cfg.n_ff || c0 >= c1)
    fail("FFN column slice [" + S(c0) + "," + S(c1) + ") of layer " + S(L) + " must lie in [0," +
         S(cfg.n_ff) + ")");
}

void ffn_proj(const ModelConfig& cfg, const Tensor& W, const float* xn, int ntok, float* y,
              Kernel k, int c0, int c1, const char* phase) {
  const int64_t b = row_base(W, cfg.n_embd, cfg.n_ff, c0, c1, phase);
  project_rows(W, b, b + (c1 - c0), xn, ntok, y, k);
}

// What the gate and up phases begin with: the column slice checked (c1 < 0 becomes n_ff),
// the layer's ffn_norm present, xn = ffn_norm(x) [ntok, E] in ws.xn. phase: for messages.
const float* ffn_norm_input(const ModelConfig& cfg, const LayerWeights& w, const float* x, int ntok,
                            Workspace& ws, int& c0, int& c1, const char* phase) {
  ffn_range(cfg, w.layer, c0, c1);
  const Tensor& wn = need(w.ffn_norm, w.layer, phase, "ffn_norm_weight");
  float* xn = grow(ws.xn, (size_t)ntok * cfg.n_embd);
  rmsnorm_rows(x, wn, ntok, cfg.n_embd, cfg.rms_eps, xn, ws, phase);
  return xn;
}

}  // namespace

void ffn_gate(const ModelConfig& cfg, const LayerWeights& w, const float* x, int ntok, float* h,
              const ForwardOptions& o, Workspace& ws, int c0, int c1) {
  const float* xn = ffn_norm_input(cfg, w, x, ntok, ws, c0, c1, "ffn_gate");
  const Tensor& wg = need(w.ffn_gate, w.layer, "ffn_gate", "ffn_gate_weight");
  ffn_proj(cfg, wg, xn, ntok, h, o.kernel, c0, c1, "ffn_gate");
  ws.note_peak();
}

void ffn_up(const ModelConfig& cfg, const LayerWeights& w, const float* x, int ntok, float* h,
            const ForwardOptions& o, Workspace& ws, int c0, int c1) {
  const float* xn = ffn_norm_input(cfg, w, x, ntok, ws, c0, c1, "ffn_up");
  const Tensor& wu = need(w.ffn_up, w.layer, "ffn_up", "ffn_up_weight");
  float* u = grow(ws.up, (size_t)ntok * (c1 - c0));  // [ntok, nc]
  ffn_proj(cfg, wu, xn, ntok, u, o.kernel, c0, c1, "ffn_up");
  swiglu_k(h, u, (size_t)ntok * (c1 - c0), o.kernel);
  ws.note_peak();
}

void ffn_gate_up(const ModelConfig& cfg, const LayerWeights& w, const float* x, int ntok, float* h,
                 const ForwardOptions& o, Workspace& ws, int c0, int c1) {
  const float* xn = ffn_norm_input(cfg, w, x, ntok, ws, c0, c1, "ffn_gate");
  const Tensor& wg = need(w.ffn_gate, w.layer, "ffn_gate", "ffn_gate_weight");
  const Tensor& wu = need(w.ffn_up, w.layer, "ffn_up", "ffn_up_weight");
  float* u = grow(ws.up, (size_t)ntok * (c1 - c0));  // [ntok, nc]
  ffn_proj(cfg, wg, xn, ntok, h, o.kernel, c0, c1, "ffn_gate");
  ffn_proj(cfg, wu, xn, ntok, u, o.kernel, c0, c1, "ffn_up");
  swiglu_k(h, u, (size_t)ntok * (c1 - c0), o.kernel);
  ws.note_peak();
}

void ffn_down(const ModelConfig& cfg, const LayerWeights& w, const float* h, int ntok, float* out,
              const ForwardOptions& o, Workspace& ws, int c0, int c1) {
  const int L = w.layer;
  ffn_range(cfg, L, c0, c1);
  const Tensor& wd = need(w.ffn_down, L, "ffn_down", "ffn_down_weight");
  if (wd.nrows() != cfg.n_embd)
    fail("tensor " + wd.name + " has shape " + shape_str(wd) + ", expected " + S(cfg.n_embd) +
         " rows (phase ffn_down)");
  if (wd.ne0() == c1 - c0)
    project_rows(wd, 0, cfg.n_embd, h, ntok, out, o.kernel);
  else if (wd.ne0() == cfg.n_ff)
    project_cols(wd, c0, c1, h, ntok, out, o.kernel, ws);
  else
    fail("tensor " + wd.name + " has shape " + shape_str(wd) + ", expected rows of " + S(cfg.n_ff) +
         " elements (phase ffn_down)");
  ws.note_peak();
}

// ---- layer station ---------------------------------------------------------------

void forward_layers(const ModelConfig& cfg, const LayerWeights* layers, KvCache& kv, int pos0,
                    float* x, int ntok, const ForwardOptions& o, Workspace& ws) {
  const size_t nx = (size_t)ntok * cfg.n_embd;
  float* d = grow(ws.delta, nx);                          // [ntok, E]
  float* h = grow(ws.hidden, (size_t)ntok * cfg.n_ff);    // [ntok, n_ff]
  for (int l = kv.layer_begin(); l < kv.layer_end(); l++) {
    const LayerWeights& w = layers[l - kv.layer_begin()];
    if (w.layer != l)
      fail("forward_layers: weights for layer " + S(w.layer) + " given where layer " + S(l) +
           " is expected");
    attn(cfg, w, kv, pos0, x, ntok, d, o, ws);
    for (size_t i = 0; i < nx; i++) x[i] += d[i];
    ffn_gate_up(cfg, w, x, ntok, h, o, ws);
    ffn_down(cfg, w, h, ntok, d, o, ws);
    for (size_t i = 0; i < nx; i++) x[i] += d[i];
  }
}

// ---- embedding / lm_head -----------------------------------------------------------

void embed_rows(const Tensor& te, const int32_t* ids, int ntok, int64_t v0, int64_t v1,
                int64_t n_vocab_limit, float* out, int64_t tensor_row0) {
  const int64_t E = te.ne0();
  const size_t rb = row_bytes(te.type, E, te.name);
  for (int t = 0; t < ntok; t++) {
    const int32_t id = ids[t];
    if (id < 0 || id >= n_vocab_limit)
      fail("token " + S(t) + " has id " + S(id) + ", outside the vocabulary [0," + S(n_vocab_limit) +
           ")");
    float* o = out + (size_t)t * E;
    if (id < v0 || id >= v1) {
      std::fill(o, o + E, 0.f);
      continue;
    }
    const int64_t r = id - tensor_row0;
    if (r < 0 || r >= te.nrows())
      fail("token id " + S(id) + " maps to row " + S(r) + " of tensor " + te.name + " which has " +
           S(te.nrows()) + " rows (first row = vocab id " + S(tensor_row0) + ")");
    dequantize_row(te.type, te.data() + (size_t)r * rb, o, E);
  }
}

void output_norm(const ModelConfig& cfg, const Tensor& norm, const float* x, int ntok, float* out,
                 Workspace& ws) {
  rmsnorm_rows(x, norm, ntok, cfg.n_embd, cfg.rms_eps, out, ws, "output");
}

const Tensor& lm_head_tensor(const Model& m) {
  if (const Tensor* t = m.find("output_weight")) return *t;
  if (const Tensor* t = m.find("token_embd_weight")) return *t;
  fail("missing tensor output_weight (phase output; no token_embd_weight to tie to either)");
}

void lm_head_logits(const Tensor& W, const float* xn, int ntok, int64_t v0, int64_t v1,
                    float* logits, Kernel k, float softcap_c, int64_t tensor_row0) {
  const int64_t r0 = v0 - tensor_row0, r1 = v1 - tensor_row0;
  if (r0 < 0 || r1 > W.nrows() || r0 >= r1)
    fail("vocab slice [" + S(v0) + "," + S(v1) + ") is not inside tensor " + W.name + " (" +
         S(W.nrows()) + " rows starting at vocab id " + S(tensor_row0) + ")");
  project_rows(W, r0, r1, xn, ntok, logits, k);
  if (softcap_c > 0) softcap(logits, (size_t)ntok * (v1 - v0), softcap_c);
}

}  // namespace knot
