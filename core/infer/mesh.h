// mesh.h — a whole mesh in one process: the native twin of bindings/mesh.mjs
// openLocalMesh. Layer stations cut into attention-head slices (each a knot::Station
// with its own KV cache of the range's layers and the slice's KV heads) and FFN column
// slices, and vocab shards (embedding rows, lm_head logits -> top-k + lse), merged by
// summing partials (docs/architecture.md) and merging the shards' top-k (docs/protocol.md). Tests compare
// it with the Engine; a native coordinator samples from step().top with a Generator.
//
// plan: layers {0, a, .., n_layer} (station cuts); per station heads {0, .., n_head}
// (multiples of the GQA group) and ffn {0, .., n_ff} cuts; vocab {0, .., n_vocab} shard
// cuts, end to end (tensor padding rows past n_vocab belong to no shard).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "container/model.h"
#include "infer/station.h"
#include "text/sampler.h"

namespace knot {

struct MeshPlan {
  std::vector<int> layers;                   // station cuts {0, a, .., n_layer}
  std::vector<std::vector<int>> heads, ffn;  // per station: head cuts, FFN column cuts
  std::vector<int> vocab;                    // shard cuts {0, .., n_vocab}
};

// Throws naming the first bad cut.
void check_plan(const ModelConfig& c, const MeshPlan& p);

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

}  // namespace knot
