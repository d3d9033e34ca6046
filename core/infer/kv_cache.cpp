#include "infer/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "kernels/common.h"
#include "kernels/fp16.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"

namespace knot {

const char* kv_type_name(KvType t) {
  return t == KvType::F16 ? "F16" : t == KvType::F32 ? "F32" : "F16InF32";
}
size_t kv_elem_bytes(KvType t) { return t == KvType::F16 ? 2 : 4; }

size_t kv_bytes_per_token(int head_dim, int n_layers, int n_kv_heads, KvType t) {
  return 2 * (size_t)n_layers * (size_t)n_kv_heads * (size_t)head_dim * kv_elem_bytes(t);
}

KvCache::KvCache(const ModelConfig& cfg, int l0, int l1, int n_ctx, KvType type,
                 size_t budget_bytes, int kvh0, int kvh1) {
  if (kvh1 < 0) kvh1 = cfg.n_head_kv;
  if (l0 < 0 || l1 > cfg.n_layer || l0 >= l1)
    fail("KV cache: bad layer range [" + std::to_string(l0) + "," + std::to_string(l1) +
         ") for a model with " + std::to_string(cfg.n_layer) + " layers");
  if (kvh0 < 0 || kvh1 > cfg.n_head_kv || kvh0 >= kvh1)
    fail("KV cache: bad KV head range [" + std::to_string(kvh0) + "," + std::to_string(kvh1) +
         ") for a model with " + std::to_string(cfg.n_head_kv) + " KV heads");
  if (n_ctx <= 0) fail("KV cache: context length must be positive, got " + std::to_string(n_ctx));
  if (cfg.head_dim <= 0) fail("KV cache: model config has head_dim " + std::to_string(cfg.head_dim));
  type_ = type;
  l0_ = l0;
  l1_ = l1;
  kvh0_ = kvh0;
  kvh1_ = kvh1;
  head_dim_ = cfg.head_dim;
  n_ctx_ = n_ctx;
  const size_t per_tok = kv_bytes_per_token(head_dim_, l1 - l0, kvh1 - kvh0, type);
  const size_t need = per_tok * (size_t)n_ctx;
  if (need > budget_bytes)
    fail("KV cache needs " + std::to_string(need) + " bytes (" + std::to_string(n_ctx) +
         " positions x " + std::to_string(per_tok) + " bytes/token, " + kv_type_name(type) +
         ", layers [" + std::to_string(l0) + "," + std::to_string(l1) + "), " +
         std::to_string(kvh1 - kvh0) + " KV heads) but the KV budget is " +
         std::to_string(budget_bytes) + " bytes");
  bytes_ = need;
  data_ = alloc_aligned(need);
  n_pos_.assign(l1 - l0, 0);
}

void KvCache::check_layer(int layer, const char* what) const {
  if (!data_) fail(std::string("KV cache: ") + what + " on a freed or empty cache");
  if (layer < l0_ || layer >= l1_)
    fail(std::string("KV cache: ") + what + " for layer " + std::to_string(layer) +
         " but this cache holds layers [" + std::to_string(l0_) + "," + std::to_string(l1_) + ")");
}

size_t KvCache::offset(bool v, int layer, int kvh, int pos) const {
  const size_t nkv = (size_t)(kvh1_ - kvh0_);
  const size_t per_kind = (size_t)(l1_ - l0_) * nkv * n_ctx_ * head_dim_;
  return (v ? per_kind : 0) +
         (((size_t)(layer - l0_) * nkv + (kvh - kvh0_)) * n_ctx_ + pos) * head_dim_;
}

void KvCache::append(int layer, int pos0, int ntok, const float* k, const float* v) {
  check_layer(layer, "append");
  int& held = n_pos_[layer - l0_];
  if (pos0 != held)
    fail("KV cache: append at position " + std::to_string(pos0) + " but layer " +
         std::to_string(layer) + " holds " + std::to_string(held) +
         " positions (appends must be contiguous; truncate to rewrite)");
  if (ntok < 0 || pos0 + ntok > n_ctx_)
    fail("KV cache: appending " + std::to_string(ntok) + " positions at " + std::to_string(pos0) +
         " exceeds the context of " + std::to_string(n_ctx_) + " positions (layer " +
         std::to_string(layer) + ")");
  const int nkv = kvh1_ - kvh0_;
  const int row = nkv * head_dim_;
  for (int t = 0; t < ntok; t++) {
    for (int h = 0; h < nkv; h++) {
      const float* ks = k + (size_t)t * row + (size_t)h * head_dim_;
      const float* vs = v + (size_t)t * row + (size_t)h * head_dim_;
      const size_t ok = offset(false, layer, kvh0_ + h, pos0 + t);
      const size_t ov = offset(true, layer, kvh0_ + h, pos0 + t);
      if (type_ == KvType::F32) {
        float* base = reinterpret_cast<float*>(data_.get());
        std::memcpy(base + ok, ks, head_dim_ * sizeof(float));
        std::memcpy(base + ov, vs, head_dim_ * sizeof(float));
      } else if (type_ == KvType::F16InF32) {  // what an F16 cache reads back, stored wide
        float* base = reinterpret_cast<float*>(data_.get());
        for (int d = 0; d < head_dim_; d++) {
          base[ok + d] = half_to_float(fp32_to_fp16(ks[d]));
          base[ov + d] = half_to_float(fp32_to_fp16(vs[d]));
        }
      } else {
        fp16_t* base = reinterpret_cast<fp16_t*>(data_.get());
        fp32_to_fp16_row(ks, base + ok, (size_t)head_dim_);
        fp32_to_fp16_row(vs, base + ov, (size_t)head_dim_);
      }
    }
  }
  held = pos0 + ntok;
}

void KvCache::truncate(int n_pos) {
  if (n_pos < 0) fail("KV cache: truncate to negative position " + std::to_string(n_pos));
  for (int& p : n_pos_) p = std::min(p, n_pos);
}

size_t KvCache::bytes_per_token() const {
  return kv_bytes_per_token(head_dim_, l1_ - l0_, kvh1_ - kvh0_, type_);
}

void KvCache::export_rows(int pos0, int n, uint8_t* dst) const {
  if (!data_) fail("KV cache: export on a freed or empty cache");
  if (pos0 < 0 || n < 0 || pos0 + n > n_pos())
    fail("KV cache: export of positions [" + std::to_string(pos0) + "," + std::to_string(pos0 + n) + ") but the cache holds " +
         std::to_string(n_pos()));
  const size_t eb = kv_elem_bytes(type_), hd = (size_t)head_dim_ * eb;
  const uint8_t* base = data_.get();
  for (int t = 0; t < n; t++)
    for (int l = l0_; l < l1_; l++)
      for (int kind = 0; kind < 2; kind++)
        for (int h = kvh0_; h < kvh1_; h++) {
          std::memcpy(dst, base + offset(kind == 1, l, h, pos0 + t) * eb, hd);
          dst += hd;
        }
}

void KvCache::import_rows(int pos0, int n, const uint8_t* src) {
  if (!data_) fail("KV cache: import on a freed or empty cache");
  for (int l = l0_; l < l1_; l++)
    if (n_pos_[l - l0_] != pos0)
      fail("KV cache: import at position " + std::to_string(pos0) + " but layer " + std::to_string(l) + " holds " +
           std::to_string(n_pos_[l - l0_]) + " positions (imports append; truncate first)");
  if (n < 0 || pos0 + n > n_ctx_)
    fail("KV cache: importing " + std::to_string(n) + " positions at " + std::to_string(pos0) + " exceeds the context of " +
         std::to_string(n_ctx_) + " positions");
  const size_t eb = kv_elem_bytes(type_), hd = (size_t)head_dim_ * eb;
  uint8_t* base = data_.get();
  for (int t = 0; t < n; t++)
    for (int l = l0_; l < l1_; l++)
      for (int kind = 0; kind < 2; kind++)
        for (int h = kvh0_; h < kvh1_; h++) {
          std::memcpy(base + offset(kind == 1, l, h, pos0 + t) * eb, src, hd);
          src += hd;
        }
  for (int& p : n_pos_) p = pos0 + n;
}

void KvCache::free() {
  data_.reset();
  bytes_ = 0;
  n_pos_.assign(n_pos_.size(), 0);
}

int KvCache::n_pos(int layer) const {
  if (layer < l0_ || layer >= l1_)
    fail("KV cache: layer " + std::to_string(layer) + " outside [" + std::to_string(l0_) + "," +
         std::to_string(l1_) + ")");
  return n_pos_[layer - l0_];
}

int KvCache::n_pos() const {
  if (n_pos_.empty()) return 0;
  return *std::min_element(n_pos_.begin(), n_pos_.end());
}

void KvCache::read(bool v, int layer, int kvh, int n, float* dst) const {
  check_layer(layer, v ? "read V" : "read K");
  if (kvh < kvh0_ || kvh >= kvh1_)
    fail("KV cache: KV head " + std::to_string(kvh) + " outside this cache's range [" +
         std::to_string(kvh0_) + "," + std::to_string(kvh1_) + ")");
  if (n < 0 || n > n_pos_[layer - l0_])
    fail("KV cache: reading " + std::to_string(n) + " positions of layer " + std::to_string(layer) +
         " which holds " + std::to_string(n_pos_[layer - l0_]));
  const size_t o = offset(v, layer, kvh, 0);
  const size_t cnt = (size_t)n * head_dim_;
  if (type_ != KvType::F16) {
    std::memcpy(dst, reinterpret_cast<const float*>(data_.get()) + o, cnt * sizeof(float));
  } else {
    f16_to_f32_row(reinterpret_cast<const fp16_t*>(data_.get()) + o, dst, cnt);
  }
}

const float* KvCache::rows_f32(bool v, int layer, int kvh) const {
  check_layer(layer, v ? "V rows" : "K rows");
  if (type_ == KvType::F16)
    fail(std::string("KV cache: in-place f32 rows need an F32 or F16InF32 cache, this one holds ") + kv_type_name(type_));
  if (kvh < kvh0_ || kvh >= kvh1_)
    fail("KV cache: KV head " + std::to_string(kvh) + " outside this cache's range [" +
         std::to_string(kvh0_) + "," + std::to_string(kvh1_) + ")");
  return reinterpret_cast<const float*>(data_.get()) + offset(v, layer, kvh, 0);
}

const float* KvCache::k_rows_f32(int layer, int kvh) const { return rows_f32(false, layer, kvh); }
const float* KvCache::v_rows_f32(int layer, int kvh) const { return rows_f32(true, layer, kvh); }

void KvCache::read_k(int layer, int kvh, int n, float* dst) const { read(false, layer, kvh, n, dst); }
void KvCache::read_v(int layer, int kvh, int n, float* dst) const { read(true, layer, kvh, n, dst); }

}  // namespace knot
