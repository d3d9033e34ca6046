// kv_cache.h — per-session key/value cache for a layer range [l0,l1) and a KV-head
// range [kvh0,kvh1) (all heads unless a station runs a head slice).
//
// Storage: one allocation, sized for n_ctx positions up front (no growth, no per-token
// allocation). Layout per layer and KV head is position-major rows of head_dim, so the
// attention loop reads one head's keys/values contiguously:
//   K: [layer][kv_head][n_ctx][head_dim]    V: same, after all of K.
//
// Element type:
//   KvType::F16 (default, fast mode): half the memory and bandwidth; the rounding error
//                (~1e-3 relative) is far below the weight quantization noise.
//   KvType::F32 (reference mode): exact activations, for comparisons with a float pass;
//   KvType::F16InF32: the F16 mode's values (each element rounded to f16 on append) held as
//                f32, so attention reads the rows in place with no f16 -> f32 conversion of
//                the history per step, and computes what it computes on an F16 cache bit for
//                bit, at twice its bytes: a small draft model's cache (kw_drafter_new), where
//                the conversion was most of a step at a few hundred positions.
//
// Memory: bytes per token = 2 (K and V) * n_layers * n_kv_heads * head_dim * sizeof(elem)
//   e.g. qwen2.5-coder-7b, 14 layers, 4 KV heads, head_dim 128, F16: 28 KiB per token,
//   so a 4096-token context costs 112 MiB — the budget check exists for exactly this.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "container/model.h"

namespace knot {

enum class KvType { F16, F32, F16InF32 };
const char* kv_type_name(KvType t);
size_t kv_elem_bytes(KvType t);

// 2 * n_layers * n_kv_heads * head_dim * sizeof(elem)
size_t kv_bytes_per_token(int head_dim, int n_layers, int n_kv_heads, KvType t);

class KvCache {
 public:
  KvCache() = default;
  // Throws knot::Error naming the budget and the requirement when
  // n_ctx * bytes_per_token > budget_bytes. kvh1 = -1: up to cfg.n_head_kv.
  KvCache(const ModelConfig& cfg, int l0, int l1, int n_ctx, KvType type,
          size_t budget_bytes = SIZE_MAX, int kvh0 = 0, int kvh1 = -1);

  // Writes positions [pos0, pos0+ntok) of `layer`. pos0 must equal n_pos(layer)
  // (contiguous append; truncate first to rewrite). k, v: [ntok, n_kv_heads()*head_dim],
  // heads in this cache's range, f32.
  void append(int layer, int pos0, int ntok, const float* k, const float* v);
  // Forget positions >= n_pos in every layer (a no-op for layers holding fewer).
  void truncate(int n_pos);

  // Snapshots (a station persisting its session, a replica rebuilding it): positions
  // [pos0, pos0+n) of every layer and KV head as the stored elements (F16 or F32, no
  // conversion), position-major so consecutive positions are consecutive bytes:
  //   [pos][layer][K, V][kv_head][head_dim]   bytes_per_token() per position.
  size_t bytes_per_token() const;
  // Needs every layer to hold pos0 + n positions. dst: [n * bytes_per_token()].
  void export_rows(int pos0, int n, uint8_t* dst) const;
  // Appends what export_rows wrote (a cache of the same layers, KV heads, head_dim and
  // type): pos0 must equal every layer's n_pos (truncate first), pos0 + n <= n_ctx.
  void import_rows(int pos0, int n, const uint8_t* src);
  // Release the storage; the cache is empty and unusable until re-created.
  void free();

  // Positions [0,n) of KV head `kvh` (absolute index) of `layer` as f32 rows.
  // dst: [n, head_dim]
  void read_k(int layer, int kvh, int n, float* dst) const;
  void read_v(int layer, int kvh, int n, float* dst) const;
  // F32 and F16InF32 caches only (throws naming the type otherwise): the rows of KV head `kvh` of
  // `layer` in place, positions [0, n_pos(layer)) as [n_pos, head_dim] f32 — what read_k /
  // read_v would copy, without the copy (attention reads an F32 cache this way). Valid until
  // the cache is freed or reassigned; positions appended later appear in place.
  const float* k_rows_f32(int layer, int kvh) const;
  const float* v_rows_f32(int layer, int kvh) const;

  int n_pos(int layer) const;  // positions held by one layer
  int n_pos() const;           // positions held by every layer (min over layers)
  int n_ctx() const { return n_ctx_; }
  int layer_begin() const { return l0_; }
  int layer_end() const { return l1_; }
  int kv_head_begin() const { return kvh0_; }
  int kv_head_end() const { return kvh1_; }
  int n_kv_heads() const { return kvh1_ - kvh0_; }
  int head_dim() const { return head_dim_; }
  KvType type() const { return type_; }
  size_t bytes() const { return bytes_; }
  bool empty() const { return !data_; }

 private:
  size_t offset(bool v, int layer, int kvh, int pos) const;  // element offset
  void check_layer(int layer, const char* what) const;
  void read(bool v, int layer, int kvh, int n, float* dst) const;
  const float* rows_f32(bool v, int layer, int kvh) const;

  KvType type_ = KvType::F16;
  int l0_ = 0, l1_ = 0, kvh0_ = 0, kvh1_ = 0, head_dim_ = 0, n_ctx_ = 0;
  size_t bytes_ = 0;
  std::shared_ptr<uint8_t> data_;
  std::vector<int> n_pos_;  // per layer
};

}  // namespace knot
