// station.h — a layer station's per-session state (docs/architecture.md): the KV cache of layers
// [l0,l1) and attention heads [h0,h1), its scratch buffers, and the per-phase forward
// calls a mesh makes on it, with the checks a mesh needs:
//  * the head slice lies on whole GQA groups (h0, h1 multiples of n_head / n_head_kv), so
//    the station holds exactly KV heads [h0/g, h1/g);
//  * the KV cache fits a byte limit (computed in 64 bits: n_ctx x bytes/token can wrap a
//    32-bit size_t in wasm32), else an error naming context, need, bytes/token and limit;
//  * a phase's layer lies in [l0,l1);
//  * a weight held as a row range (Tensor::row0, a slice station's own rows of q/k/v or
//    gate/up) holds exactly the rows the slice needs — another slice's rows have the
//    same count and would give a wrong partial without any error.
// Weights are not the station's: each call takes the Model, whose tensors the caller may
// load just before and evict right after (fluid mode); a tensor without bytes counts as
// absent, and the phase names it ("missing tensor blk_3_ffn_up_weight (layer 3, phase
// ffn_up)"). Activations are f32 row-major:
//   x, out: [ntok, n_embd]   h: [ntok, c1-c0]
// Phases write partial residuals; the caller sums the partials of all slices.
// Used natively (tests/native/infer_session.cpp) and by wasm/abi_mesh.cpp.
#pragma once
#include <cstdint>
#include <string>

#include "container/model.h"
#include "infer/forward.h"
#include "infer/kv_cache.h"

namespace knot {

enum class FfnPhase { Gate = 0, Up = 1, Down = 2, GateUp = 3 };  // numbering is the ABI's

// Bytes of KV cache for n_ctx positions of layers [l0,l1) and KV heads [kvh0,kvh1), in 64 bits.
uint64_t kv_bytes_needed(const ModelConfig& c, int l0, int l1, int kvh0, int kvh1, int n_ctx, KvType t);

// Throws "<who>: a context of N tokens needs X bytes of <type> KV cache (B bytes/token) but
// only Y bytes are available<where>" when need > limit.
void check_kv_fits(const std::string& who, uint64_t per_token, int n_ctx, KvType t, uint64_t limit,
                   const std::string& where = "");

// Throws unless tensor t (nullptr or without bytes: absent, the phase names it) holds all
// `full` rows or exactly rows [r0,r1) (from t->row0). slice names the cut for the message.
void check_slice_rows(const Tensor* t, int64_t full, int64_t r0, int64_t r1, const std::string& slice);

struct StationSpec {
  int l0 = 0, l1 = 0;       // layers [l0,l1)
  int h0 = 0, h1 = -1;      // attention heads [h0,h1); h1 = -1: all
  int n_ctx = 0;            // positions
  ForwardOptions fo;        // kernel and KV element type
  uint64_t kv_limit = UINT64_MAX;  // bytes the KV cache may take
  std::string kv_limit_where;      // appended to the budget error (e.g. " under the 128 MB wasm memory cap")
};

class Station {
 public:
  // Validates the slice (GQA group), n_ctx and the KV budget; allocates the KV cache.
  Station(const ModelConfig& c, const StationSpec& s);

  // Attention of `layer` for positions [pos0, pos0+ntok): appends K/V, out = partial residual.
  void attn(const Model& m, int layer, int pos0, const float* x, int ntok, float* out);
  // FFN phase over columns [c0,c1) (c1 = -1: n_ff): Gate x -> h; Up x, h -> h; Down h -> out;
  // GateUp x -> h. Buffers a phase does not use may be null.
  void ffn(const Model& m, FfnPhase ph, int layer, const float* x, int ntok, float* h, float* out,
           int c0 = 0, int c1 = -1);
  void truncate(int n_pos);  // forget positions >= n_pos (0: a new sequence)
  // Snapshots of the session's KV (KvCache::export_rows / import_rows): positions
  // [pos0, pos0+n) as kv().bytes_per_token() bytes each; an import appends at n_pos().
  void export_kv(int pos0, int n, uint8_t* dst) const { kv_.export_rows(pos0, n, dst); }
  void import_kv(int pos0, int n, const uint8_t* src) { kv_.import_rows(pos0, n, src); }

  const StationSpec& spec() const { return s_; }
  int n_pos() const { return kv_.n_pos(); }
  int n_ctx() const { return kv_.n_ctx(); }
  const KvCache& kv() const { return kv_; }
  const Workspace& workspace() const { return ws_; }

 private:
  void check_layer(int layer, const char* what) const;

  const ModelConfig cfg_;
  StationSpec s_;
  int g_ = 1;  // GQA group size
  KvCache kv_;
  Workspace ws_;
};

}  // namespace knot
