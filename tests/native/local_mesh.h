// local_mesh.h — a test oracle: a whole mesh in one process, the native twin of
// tests/wasm/local-mesh.mjs openLocalMesh (header-only; only tests/native include it).
// Layer stations cut into attention-head slices (each a knot::Station with its own KV cache
// of the range's layers and the slice's KV heads) and FFN column slices, and vocab shards
// (embedding rows, lm_head logits -> top-k + lse), merged by summing partials
// (docs/architecture.md) and merging the shards' top-k (docs/protocol.md). Tests compare it
// with the Engine.
//
// plan: layers {0, a, .., n_layer} (station cuts); per station heads {0, .., n_head}
// (multiples of the GQA group) and ffn {0, .., n_ff} cuts; vocab {0, .., n_vocab} shard
// cuts, end to end (tensor padding rows past n_vocab belong to no shard).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include <cmath>
#include <string>

#include "container/model.h"
#include "infer/station.h"
#include "kernels/common.h"
#include "text/sampler.h"

namespace knot {

struct MeshPlan {
  std::vector<int> layers;                   // station cuts {0, a, .., n_layer}
  std::vector<std::vector<int>> heads, ffn;  // per station: head cuts, FFN column cuts
  std::vector<int> vocab;                    // shard cuts {0, .., n_vocab}
};

// Throws naming the first bad cut.
inline void check_plan(const ModelConfig& c, const MeshPlan& p);

struct MeshOptions {
  ForwardOptions fo;
  int n_ctx = 64;
  int k = 8;  // each shard's top-k, and the merged list's length
  // FFN slice i of station s as one gate+up call (else two phases); nullptr: two phases.
  std::function<bool(int s, int i)> ffn_combined;
};

struct MeshStep {
  std::vector<float> logits;  // [n_vocab]: the shards' slices, assembled
  SliceTopK top;              // the shards' merged top-k + lse + min
};

class LocalMesh {
 public:
  // m is referenced: it must outlive the mesh.
  LocalMesh(const Model& m, const MeshPlan& p, const MeshOptions& o);
  // Positions [pos0, pos0 + n): embed (sum of shard partials), stations in order (per
  // layer x += sum of head-slice attention partials, then x += sum of FFN-slice partials),
  // output norm, every shard's lm_head slice and top-k of the last position.
  MeshStep step(const int32_t* ids, int n, int pos0);
  void truncate(int n_pos);  // every station
  const std::vector<std::vector<Station>>& stations() const { return st_; }  // [station][head slice]

 private:
  const Model& m_;
  MeshPlan p_;
  MeshOptions o_;
  std::vector<std::vector<Station>> st_;
  Workspace ws_;
};

namespace local_mesh_detail {

inline void check_cuts(const std::string& what, const std::vector<int>& c, int lo, int hi, int mult = 1) {
  auto list = [&] {
    std::string s = "{";
    for (size_t i = 0; i < c.size(); i++) s += (i ? ", " : "") + std::to_string(c[i]);
    return s + "}";
  };
  if (c.size() < 2 || c.front() != lo || c.back() != hi)
    fail("plan: " + what + " must run from " + std::to_string(lo) + " to " + std::to_string(hi) + ", got " + list());
  for (size_t i = 1; i < c.size(); i++)
    if (c[i] <= c[i - 1] || c[i] % mult)
      fail("plan: " + what + " cut " + std::to_string(c[i]) + " (after " + std::to_string(c[i - 1]) +
           ") must be increasing" + (mult > 1 ? " and a multiple of " + std::to_string(mult) : std::string()));
}

inline void add(std::vector<float>& acc, const std::vector<float>& p) {
  for (size_t i = 0; i < acc.size(); i++) acc[i] += p[i];
}

}  // namespace local_mesh_detail

inline void check_plan(const ModelConfig& c, const MeshPlan& p) {
  using local_mesh_detail::check_cuts;
  check_cuts("layers", p.layers, 0, c.n_layer);
  const size_t n = p.layers.size() - 1;
  if (p.heads.size() != n || p.ffn.size() != n)
    fail("plan: " + std::to_string(n) + " stations need " + std::to_string(n) + " head and " + std::to_string(n) +
         " FFN cut lists, got " + std::to_string(p.heads.size()) + " and " + std::to_string(p.ffn.size()));
  const int g = c.n_head_kv > 0 ? c.n_head / c.n_head_kv : 1;
  for (size_t s = 0; s < n; s++) {
    check_cuts("station " + std::to_string(s) + " heads", p.heads[s], 0, c.n_head, g);
    check_cuts("station " + std::to_string(s) + " FFN columns", p.ffn[s], 0, c.n_ff);
  }
  check_cuts("vocab", p.vocab, 0, c.n_vocab);
}

inline LocalMesh::LocalMesh(const Model& m, const MeshPlan& p, const MeshOptions& o) : m_(m), p_(p), o_(o) {
  check_plan(m.config, p);
  for (size_t s = 0; s + 1 < p.layers.size(); s++) {
    st_.emplace_back();
    for (size_t i = 0; i + 1 < p.heads[s].size(); i++) {
      StationSpec sp;
      sp.l0 = p.layers[s], sp.l1 = p.layers[s + 1];
      sp.h0 = p.heads[s][i], sp.h1 = p.heads[s][i + 1];
      sp.n_ctx = o.n_ctx;
      sp.fo = o.fo;
      st_[s].emplace_back(m.config, sp);
    }
  }
}

inline void LocalMesh::truncate(int n_pos) {
  for (auto& range : st_)
    for (Station& st : range) st.truncate(n_pos);
}

inline MeshStep LocalMesh::step(const int32_t* ids, int n, int pos0) {
  using local_mesh_detail::add;
  const ModelConfig& c = m_.config;
  const int E = c.n_embd, V = c.n_vocab;
  const size_t len = (size_t)n * E;
  const Tensor& te = m_.get("token_embd_weight", -1, "embed");
  std::vector<float> x(len, 0.f), part(len), d(len);
  for (size_t s = 0; s + 1 < p_.vocab.size(); s++) {  // embed: sum of the shards' partials
    embed_rows(te, ids, n, p_.vocab[s], p_.vocab[s + 1], V, part.data());
    add(x, part);
  }
  for (size_t s = 0; s < st_.size(); s++) {
    const auto& fc = p_.ffn[s];
    for (int l = p_.layers[s]; l < p_.layers[s + 1]; l++) {
      std::fill(d.begin(), d.end(), 0.f);
      for (Station& st : st_[s]) {
        st.attn(m_, l, pos0, x.data(), n, part.data());
        add(d, part);
      }
      add(x, d);
      std::fill(d.begin(), d.end(), 0.f);
      Station& run = st_[s][0];  // FFN slices need no KV: any station of the range runs them
      for (size_t i = 0; i + 1 < fc.size(); i++) {
        const int c0 = fc[i], c1 = fc[i + 1];
        std::vector<float> h((size_t)n * (c1 - c0));  // [n, c1-c0]
        if (o_.ffn_combined && o_.ffn_combined((int)s, (int)i)) {
          run.ffn(m_, FfnPhase::GateUp, l, x.data(), n, h.data(), nullptr, c0, c1);
        } else {
          run.ffn(m_, FfnPhase::Gate, l, x.data(), n, h.data(), nullptr, c0, c1);
          run.ffn(m_, FfnPhase::Up, l, x.data(), n, h.data(), nullptr, c0, c1);
        }
        run.ffn(m_, FfnPhase::Down, l, nullptr, n, h.data(), part.data(), c0, c1);
        add(d, part);
      }
      add(x, d);
    }
  }
  std::vector<float> xn(E);
  output_norm(c, m_.get("output_norm_weight", -1, "output"), x.data() + (size_t)(n - 1) * E, 1, xn.data(), ws_);
  MeshStep o;
  o.logits.assign(V, NAN);
  std::vector<SliceTopK> parts;
  for (size_t s = 0; s + 1 < p_.vocab.size(); s++) {
    const int v0 = p_.vocab[s], v1 = p_.vocab[s + 1];
    lm_head_logits(lm_head_tensor(m_), xn.data(), 1, v0, v1, o.logits.data() + v0, o_.fo.kernel);
    parts.push_back(topk_lse(o.logits.data() + v0, v0, v1, o_.k));
  }
  o.top = merge_topk(parts, o_.k);
  return o;
}

}  // namespace knot
