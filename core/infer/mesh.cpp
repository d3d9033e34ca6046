#include "infer/mesh.h"

#include <cmath>
#include <string>

#include "kernels/common.h"

namespace knot {

namespace {

void check_cuts(const std::string& what, const std::vector<int>& c, int lo, int hi, int mult = 1) {
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

void add(std::vector<float>& acc, const std::vector<float>& p) {
  for (size_t i = 0; i < acc.size(); i++) acc[i] += p[i];
}

}  // namespace

void check_plan(const ModelConfig& c, const MeshPlan& p) {
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

LocalMesh::LocalMesh(const Model& m, const MeshPlan& p, const MeshOptions& o) : m_(m), p_(p), o_(o) {
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

void LocalMesh::truncate(int n_pos) {
  for (auto& range : st_)
    for (Station& st : range) st.truncate(n_pos);
}

MeshStep LocalMesh::step(const int32_t* ids, int n, int pos0) {
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
