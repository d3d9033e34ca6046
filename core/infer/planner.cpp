// planner.cpp — topology from a header and a budget. See planner.h for the memory model.
#include "infer/planner.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "container/arch.h"
#include "container/gguf.h"
#include "container/knot.h"
#include "container/model_io.h"

namespace knot {

using ojson = nlohmann::ordered_json;

namespace {

constexpr uint64_t MiB = 1ull << 20;
constexpr int kKvElem = 2;                 // F16 KV cache (fast mode)
constexpr double kQ8KPerElem = 292.0 / 256; // activation quantization (Q8_K block per 256)
constexpr int kSubrequestCap = 10000, kConnectionCap = 6, kGenTokens = 4096;

std::string mib(uint64_t b) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.1f MiB", (double)b / MiB);
  return buf;
}

using Cut = SliceCut;  // how a layer tensor follows a slice (arch.h's tensor table)
using Over = SliceOver;

// A per-layer tensor of the model's architecture: which phase loads it and how a slice
// cuts it, from the architecture table (arch.h).
struct LayerTensorKind {
  std::string suffix;  // "attn_q_weight"
  const char* phase;   // attn | ffn_gate | ffn_up | ffn_down (ffn_norm: ffn_gate, and resident)
  Cut cut;
  Over over;
  bool required;
};
std::vector<LayerTensorKind> layer_kinds(const ModelConfig& c, const std::string& what) {
  std::vector<LayerTensorKind> v;
  for (const ArchTensor& at : arch_info(c.arch, what).tensors) {
    const TensorInfo& ti = tensor_info(at.id);
    if (!ti.per_layer) continue;
    v.push_back({tensor_knot_name(at.id, 0).substr(6), phase_name(ti.phases & (~ti.phases + 1)), ti.cut, ti.over,
                 at.need == Need::Required});
  }
  return v;
}
const char* kPhases[] = {"attn", "ffn_gate", "ffn_up", "ffn_down"};

// The residency rule of docs/memory.md (fluid stations keep these across requests).
bool always_resident(const PlanTensor& t) {
  return t.name.find("norm") != std::string::npos || t.name.find("bias") != std::string::npos || t.size < MiB;
}

struct Slice {
  int index = 0, count = 1;
  int h0 = 0, h1 = 0;  // attention heads
  int c0 = 0, c1 = 0;  // FFN columns
};

struct Cost {  // bytes
  uint64_t resident = 0, phase = 0, kv = 0, act = 0, module = 0, js = 0;
  uint64_t total() const { return resident + phase + kv + act + module + js; }
};

struct Station {
  int l0 = 0, l1 = 0;
  Slice slice;
  bool fluid = false, prefetch = false, aligned = true;
  int fat = -1;  // index into PlanOptions::fat: a native fat station
  Cost cost;
  int max_context = 0;
};

struct Shard {
  int64_t v0 = 0, v1 = 0;
  Cost cost;
};

// One complete plan the planner weighs: its isolates and its estimated speed.
struct Candidate {
  int min_slices = 1;  // every layer cut into at least this many slices
  std::vector<Station> stations;
  std::vector<Shard> shards;
  int chunk = 0, context = 0;
  PlanEstimate est;
  size_t isolates() const {  // Worker isolates (fat stations are processes of their own)
    size_t n = shards.size();
    for (const Station& s : stations) n += s.fat < 0;
    return n;
  }
  int min_cut() const {  // the coarsest cut of any layer (1: some layer whole)
    int m = 1 << 30;
    for (const Station& s : stations) m = std::min(m, s.slice.count);
    return m;
  }
};

class Planner {
 public:
  Planner(const PlanModel& m, const PlanOptions& o) : m_(m), o_(o), c_(m.config) {
    for (const auto& t : m.tensors) by_name_[t.name] = &t;
    E = c_.n_embd, H = c_.n_head, KVH = c_.n_head_kv, D = c_.head_dim, F = c_.n_ff, L = c_.n_layer;
    if (E <= 0 || H <= 0 || KVH <= 0 || D <= 0 || F <= 0 || L <= 0 || H % KVH || c_.n_vocab <= 0)
      fail(m.name + ": plan: config has invalid dims (n_embd " + std::to_string(E) + ", n_head " + std::to_string(H) +
           ", n_head_kv " + std::to_string(KVH) + ", head_dim " + std::to_string(D) + ", n_ff " + std::to_string(F) +
           ", n_layer " + std::to_string(L) + ")");
    G = H / KVH;
    if (o.budget <= o.module_bytes + o.js_heap_bytes)
      fail("plan: budget " + mib(o.budget) + " does not even hold the module (" + mib(o.module_bytes) + ") and the JS heap (" +
           mib(o.js_heap_bytes) + ")");
    if (o.mode != "resident" && o.mode != "fluid") fail("plan: mode must be resident or fluid, got '" + o.mode + "'");
    if (!o.fat.empty() && o.mode != "resident") fail("plan: --fat needs resident mode (fat stations hold their layers)");
    kinds_ = layer_kinds(c_, m.name + ": plan");
    // Every layer must have its required tensors (the plan is for this file).
    for (int l = 0; l < L; l++)
      for (const auto& k : kinds_)
        if (k.required && !find(l, k.suffix.c_str()))
          fail(m.name + ": plan: missing tensor " + layer_tensor_name(l, k.suffix.c_str()) + " (layer " + std::to_string(l) + ", phase " + k.phase + ")");
    if (!by_name_.count("token_embd_weight")) fail(m.name + ": plan: missing tensor token_embd_weight");
  }

  std::string run() {
    const int ctx_cap = c_.n_ctx_train > 0 ? c_.n_ctx_train : 1 << 20;
    if (o_.context > ctx_cap)
      fail("plan: --context " + std::to_string(o_.context) + " exceeds the model's training context " + std::to_string(ctx_cap));
    // Target context the topology must hold: what was asked, else 4096 (or the training
    // context when smaller) — except a fluid plan with a fixed station count, which takes
    // whatever context fits.
    const int target = o_.context > 0 ? o_.context : (o_.mode == "fluid" && o_.stations > 0 ? 1 : std::min(4096, ctx_cap));
    std::vector<int> chunks;
    if (o_.chunk > 0) chunks = {o_.chunk};
    else
      for (int k = 512; k >= 1; k /= 2) chunks.push_back(k);
    if (o_.objective != "memory" && o_.objective != "latency")
      fail("plan: objective must be memory or latency, got '" + o_.objective + "'");
    // Candidates: the fewest isolates (min_slices 1), and in resident mode every layer cut
    // into at least s slices (s <= n_head_kv): more parallel compute per token, more hops.
    const int max_min_slices = o_.mode == "resident" ? KVH : 1;
    std::vector<Candidate> cands;
    std::string why;
    for (int s = 1; s <= max_min_slices; s++) {
      Candidate c;
      if (!build(ctx_cap, target, chunks, s, c, s == 1 ? &why : nullptr)) {
        if (s == 1) fail("plan: budget " + mib(o_.budget) + " cannot be met: " + why);
        continue;
      }
      // a larger minimum that changes nothing (every layer already cut that finely) is no alternative
      bool same = false;
      for (const Candidate& d : cands) same = same || d.isolates() == c.isolates() && d.stations.size() == c.stations.size() &&
                                                         d.chunk == c.chunk && d.context == c.context && d.min_cut() == c.min_cut();
      if (!same) cands.push_back(std::move(c));
    }
    size_t pick = 0;
    for (size_t i = 1; i < cands.size(); i++) {
      const Candidate &a = cands[i], &b = cands[pick];
      const bool faster = a.est.decode_tok_s > b.est.decode_tok_s, fewer = a.isolates() < b.isolates();
      const bool tie_iso = a.isolates() == b.isolates(), tie_tok = a.est.decode_tok_s == b.est.decode_tok_s;
      if (o_.objective == "memory" ? fewer || (tie_iso && faster) : faster || (tie_tok && fewer)) pick = i;
    }
    chosen_ = cands[pick];
    for (size_t i = 0; i < cands.size(); i++)
      if (i != pick) rejected_.push_back(cands[i]);
    return to_json();
  }

 private:
  const PlanModel& m_;
  const PlanOptions& o_;
  const ModelConfig& c_;
  std::map<std::string, const PlanTensor*> by_name_;
  std::vector<LayerTensorKind> kinds_;  // the architecture's per-layer tensors
  int E, H, KVH, D, F, L, G;
  Candidate chosen_;
  std::vector<Candidate> rejected_;

  // A complete candidate for a minimum slice count: stations for the chunk that needs the
  // fewest, shards, context, costs at that context, the estimate. False (why set) when the
  // budget cannot be met.
  bool build(int ctx_cap, int target, const std::vector<int>& chunks, int min_slices, Candidate& c, std::string* why) const {
    bool found = false;
    std::string first_why;
    for (int k : chunks) {
      std::vector<Station> st;
      std::string reason;
      if (!build_stations(target, k, min_slices, st, reason)) {
        if (first_why.empty()) first_why = reason;
        continue;
      }
      if (!found || st.size() < c.stations.size()) {
        c.stations = st;
        c.chunk = k;
        found = true;
      }
    }
    if (!found) {
      if (why) *why = first_why;
      return false;
    }
    c.min_slices = min_slices;
    c.shards = build_shards(c.chunk);
    // The context: as asked, else the largest every isolate fits (<= training context).
    int ctx = ctx_cap;
    for (auto& s : c.stations) ctx = std::min(ctx, s.max_context);
    if (o_.context > 0) ctx = o_.context;
    c.context = ctx;
    if (c.chunk > c.context) c.chunk = std::max(1, c.context);
    for (auto& s : c.stations) {
      s.cost = station_cost(s.l0, s.l1, s.slice, s.fluid, c.context, c.chunk, nullptr, s.fat);
      if (s.fluid) s.prefetch = s.cost.total() + s.cost.phase <= o_.budget;  // room to load the next phase early
    }
    for (auto& s : c.shards) s.cost = shard_cost(s.v1 - s.v0, c.chunk);
    c.est = estimate_plan(shape(c), o_.cost);
    return true;
  }

  // Per generated token (decode): embed at the one shard owning the token, one request
  // per whole-layer station, two parallel rounds (attention, then FFN) over the slices of
  // a split layer, then lm-head top-k at every shard in parallel.
  struct Counts {
    int whole = 0, split_layers = 0, max_slices = 1;
  };
  static Counts counts(const std::vector<Station>& stations) {
    Counts n;
    for (const Station& s : stations) {
      if (s.slice.count > 1) {
        if (s.slice.index == 0) n.split_layers++;
        n.max_slices = std::max(n.max_slices, s.slice.count);
      } else {
        n.whole++;
      }
    }
    return n;
  }
  static int hops_per_token(const Counts& n) { return 1 + n.whole + 2 * n.split_layers + 1; }
  // Shard groups the session links to directly (the rest sit behind hubs): the links the
  // stations leave (a chain takes one).
  static int shard_groups(int members, int nsh) {
    const int station_links = members >= kConnectionCap ? 1 : members;
    return std::min(nsh, kConnectionCap - station_links);
  }

  // The plan as the time model sees it (plan_cost.h).
  PlanShape shape(const Candidate& c) const {
    PlanShape p;
    int range = -1, l0 = -1, l1 = -1;
    for (const Station& s : c.stations) {
      if (s.l0 != l0 || s.l1 != l1) range++, l0 = s.l0, l1 = s.l1;
      CostMember m;
      m.range = range;
      bool aligned = true;
      for (int l = s.l0; l < s.l1; l++)
        for (const auto& kind : kinds_)
          if (const PlanTensor* t = find(l, kind.suffix.c_str())) {
            const uint64_t b = slice_bytes(*t, kind, s.slice, &aligned);
            m.compute_bytes += b;
            if (s.fluid && !always_resident(*t)) m.streamed_bytes += b;
          }
      m.kv_bytes_per_token = kv_per_token(s.l1 - s.l0, s.slice);
      m.native = s.fat >= 0;
      p.members.push_back(m);
    }
    const PlanTensor* head = find("output_weight");
    if (!head) head = find("token_embd_weight");
    for (const Shard& s : c.shards) p.shard_lm_head_bytes.push_back(row_bytes(head->type, head->shape[0], head->name) * (uint64_t)(s.v1 - s.v0));
    const int nsh = (int)c.shards.size();
    p.hops = hops_per_token(counts(c.stations)) + (shard_groups((int)c.stations.size(), nsh) < nsh ? 1 : 0);  // + the hubs' hop
    p.chunk = c.chunk;
    return p;
  }

  const PlanTensor* find(int layer, const char* suffix) const {
    auto it = by_name_.find(layer_tensor_name(layer, suffix));
    return it == by_name_.end() ? nullptr : it->second;
  }
  const PlanTensor* find(const std::string& n) const {
    auto it = by_name_.find(n);
    return it == by_name_.end() ? nullptr : it->second;
  }
  static int block_elems(DType t) { return type_traits(t).block_elems; }

  // Bytes a slice holds of one layer tensor. A column cut that is not a multiple of the
  // type's block keeps whole rows (the core then dequantizes the tile; forward.h).
  uint64_t slice_bytes(const PlanTensor& t, const LayerTensorKind& k, const Slice& s, bool* aligned) const {
    if (s.count == 1 || k.over == Over::None) return t.size;
    int64_t a = 0, b = 0, n = 0;
    switch (k.over) {
      case Over::Heads: a = (int64_t)s.h0 * D, b = (int64_t)s.h1 * D, n = (int64_t)H * D; break;
      case Over::KvHeads: a = (int64_t)s.h0 / G * D, b = (int64_t)s.h1 / G * D, n = (int64_t)KVH * D; break;
      case Over::Ffn: a = s.c0, b = s.c1, n = F; break;
      case Over::None: break;
    }
    const int64_t rows = t.shape.size() > 1 ? t.shape[1] : 1;
    switch (k.cut) {
      case Cut::Rows: return row_bytes(t.type, t.shape[0], t.name) * (uint64_t)(b - a);
      case Cut::Elems: return t.size * (uint64_t)(b - a) / (uint64_t)n;
      case Cut::Cols: {
        const int be = block_elems(t.type);
        if (a % be || b % be) {
          *aligned = false;
          return t.size;
        }
        return row_bytes(t.type, b - a, t.name) * (uint64_t)rows;
      }
      case Cut::Whole: break;
    }
    return t.size;
  }

  // Workspace (forward.h) + ABI buffers + activation quantization for one call of a
  // chunk of k tokens at context ctx; only the ctx-dependent part when ctx_only.
  uint64_t station_act(const Slice& s, int k, int64_t ctx) const {
    const int64_t hs = s.count == 1 ? H : s.h1 - s.h0, kvs = hs / G, fs = s.count == 1 ? F : s.c1 - s.c0;
    const int64_t K = std::max(1, k);
    int64_t f = K * E * 2                       // xn, delta
                + K * hs * D * 2 + K * kvs * D * 2  // q, att, k, v
                + K * fs * 2                        // up, hidden
                + std::max<int64_t>(E, (int64_t)H * D) + K * 32 + std::max<int64_t>(E, F)  // tmp, ytile, rowf
                + 32 * std::max<int64_t>(E, F)      // wtile (f32 bound)
                + ctx * D * 2 + ctx;                // kf, vf, scores
    f += K * E * 2 + K * fs * 2;                  // ABI x/out and h buffers (wasm)
    uint64_t bytes = (uint64_t)f * 4;
    bytes += (uint64_t)(kQ8KPerElem * (double)(K * std::max<int64_t>({E, fs, hs * D})));
    bytes += (uint64_t)(K * std::max<int64_t>(E, fs)) * 4 * 2;  // JS copies of in/out
    return bytes;
  }
  uint64_t kv_per_token(int nl, const Slice& s) const {
    const int64_t kvs = s.count == 1 ? KVH : (s.h1 - s.h0) / G;
    return 2ull * (uint64_t)nl * (uint64_t)kvs * (uint64_t)D * kKvElem;
  }

  uint64_t budget_of(int fat) const { return fat < 0 ? o_.budget : o_.fat[(size_t)fat]; }

  Cost station_cost(int l0, int l1, const Slice& s, bool fluid, int64_t ctx, int k, bool* aligned_out = nullptr, int fat = -1) const {
    Cost c;
    bool aligned = true;
    for (int l = l0; l < l1; l++) {
      uint64_t phase[4] = {0, 0, 0, 0};
      for (const auto& kind : kinds_) {
        const PlanTensor* t = find(l, kind.suffix.c_str());
        if (!t) continue;
        const uint64_t b = slice_bytes(*t, kind, s, &aligned);
        if (!fluid || always_resident(*t)) {
          c.resident += b;
          continue;
        }
        for (int p = 0; p < 4; p++)
          if (std::strcmp(kind.phase, kPhases[p]) == 0) phase[p] += b;
      }
      for (uint64_t p : phase) c.phase = std::max(c.phase, p);
    }
    if (l1 == L)
      if (const PlanTensor* t = find("output_norm_weight")) c.resident += t->size;
    c.kv = kv_per_token(l1 - l0, s) * (uint64_t)ctx;
    c.act = station_act(s, k, ctx);
    c.module = fat < 0 ? o_.module_bytes : 0;  // a native process: no wasm module, no JS heap
    c.js = fat < 0 ? o_.js_heap_bytes : 0;
    if (aligned_out) *aligned_out = aligned;
    return c;
  }

  // Largest context whose KV (and attention scratch) fits; 0 when nothing fits.
  int max_context(int l0, int l1, const Slice& s, bool fluid, int k, int fat = -1) const {
    const Cost c0 = station_cost(l0, l1, s, fluid, 0, k, nullptr, fat);
    const uint64_t budget = budget_of(fat);
    if (c0.total() >= budget) return 0;
    const uint64_t per = kv_per_token(l1 - l0, s) + (uint64_t)(2 * D + 1) * 4;
    const uint64_t n = (budget - c0.total()) / per;
    return (int)std::min<uint64_t>(n, 1u << 30);
  }

  Slice make_slice(int i, int s) const {
    Slice sl;
    sl.index = i, sl.count = s;
    const int kv0 = (int)((int64_t)KVH * i / s), kv1 = (int)((int64_t)KVH * (i + 1) / s);
    sl.h0 = kv0 * G, sl.h1 = kv1 * G;
    // FFN columns in whole blocks of ffn_down's type when the width allows.
    const PlanTensor* down = find(0, "ffn_down_weight");
    int be = down ? block_elems(down->type) : 1;
    if (F % be || F / be < s) be = 1;
    const int64_t nb = F / be;
    sl.c0 = (int)(nb * i / s * be), sl.c1 = (int)(nb * (i + 1) / s * be);
    return sl;
  }

  bool fits(int l0, int l1, const Slice& s, bool fluid, int target, int k, std::string* why, int fat = -1) const {
    const Cost c = station_cost(l0, l1, s, fluid, target, k, nullptr, fat);
    if (c.total() <= budget_of(fat)) return true;
    if (why) {
      std::string what = (fat >= 0 ? "fat station " + std::to_string(fat) + ": " : std::string()) + "layers [" + std::to_string(l0) + "," + std::to_string(l1) + ")";
      if (s.count > 1) what += " slice " + std::to_string(s.index + 1) + "/" + std::to_string(s.count);
      *why = what + " needs " + mib(c.total()) + " (weights " + mib(c.resident) + ", largest phase " + mib(c.phase) +
             ", KV at context " + std::to_string(target) + " " + mib(c.kv) + ", activations for chunk " + std::to_string(k) +
             " " + mib(c.act) + ", module + JS " + mib(c.module + c.js) + ") > " + (fat >= 0 ? "its memory " : "budget ") + mib(budget_of(fat));
    }
    return false;
  }

  Station station(int l0, int l1, const Slice& s, bool fluid, int k, int fat = -1) const {
    Station st;
    st.l0 = l0, st.l1 = l1, st.slice = s, st.fluid = fluid, st.fat = fat;
    st.cost = station_cost(l0, l1, s, fluid, 0, k, &st.aligned, fat);
    st.max_context = max_context(l0, l1, s, fluid, k, fat);
    return st;
  }

  bool build_stations(int target, int k, int min_slices, std::vector<Station>& out, std::string& why) const {
    out.clear();
    const Slice whole = [&] { Slice s; s.h1 = H; s.c1 = F; return s; }();
    if (o_.mode == "fluid") {
      const int n0 = o_.stations > 0 ? o_.stations : 1, n1 = o_.stations > 0 ? o_.stations : L;
      if (n0 > L) { why = "--stations " + std::to_string(n0) + " exceeds the " + std::to_string(L) + " layers"; return false; }
      for (int n = n0; n <= n1; n++) {
        bool ok = true;
        for (int i = 0; i < n && ok; i++) {
          const int l0 = (int)((int64_t)L * i / n), l1 = (int)((int64_t)L * (i + 1) / n);
          const bool res_fits = fits(l0, l1, whole, false, target, k, nullptr);
          ok = res_fits || fits(l0, l1, whole, true, target, k, &why);
        }
        if (!ok) continue;
        for (int i = 0; i < n; i++) {
          const int l0 = (int)((int64_t)L * i / n), l1 = (int)((int64_t)L * (i + 1) / n);
          out.push_back(station(l0, l1, whole, !fits(l0, l1, whole, false, target, k, nullptr), k));
        }
        return true;
      }
      return false;
    }
    // fat stations first, from layer 0: each takes as many whole layers as fit its memory
    int from = 0;
    for (size_t f = 0; f < o_.fat.size(); f++) {
      if (from == L) {
        why = "fat station " + std::to_string(f) + " (" + mib(o_.fat[f]) + ") gets no layer: the fat stations before it hold all " +
              std::to_string(L);
        return false;
      }
      int l1 = from;
      std::string fwhy;
      while (l1 < L && fits(from, l1 + 1, whole, false, target, k, l1 == from ? &fwhy : nullptr, (int)f)) l1++;
      if (l1 == from) {
        why = "fat station " + std::to_string(f) + " does not hold layer " + std::to_string(from) + ": " + fwhy;
        return false;
      }
      out.push_back(station(from, l1, whole, false, k, (int)f));
      from = l1;
    }
    // resident: pack whole layers greedily; a layer that does not fit alone is sliced.
    for (int l0 = from; l0 < L;) {
      int l1 = l0;
      if (min_slices <= 1)
        while (l1 < L && fits(l0, l1 + 1, whole, false, target, k, l1 == l0 ? &why : nullptr)) l1++;
      if (l1 > l0) {
        out.push_back(station(l0, l1, whole, false, k));
        l0 = l1;
        continue;
      }
      int s = std::max(2, min_slices);
      for (; s <= KVH; s++) {
        bool ok = true;
        for (int i = 0; i < s && ok; i++) ok = fits(l0, l0 + 1, make_slice(i, s), false, target, k, &why);
        if (ok) break;
      }
      if (s > KVH) {
        why = "layer " + std::to_string(l0) + " does not fit even cut into " + std::to_string(KVH) +
              " slices (one per KV head): " + why;
        return false;
      }
      for (int i = 0; i < s; i++) out.push_back(station(l0, l0 + 1, make_slice(i, s), false, k));
      l0++;
    }
    return true;
  }

  // token_embd rows + lm_head rows (output, or token_embd again when tied: held once).
  uint64_t shard_row_bytes() const {
    const PlanTensor* te = find("token_embd_weight");
    const PlanTensor* out = find("output_weight");
    uint64_t b = row_bytes(te->type, te->shape[0], te->name);
    if (out) b += row_bytes(out->type, out->shape[0], out->name);
    return b;
  }
  Cost shard_cost(int64_t rows, int k) const {
    Cost c;
    c.resident = shard_row_bytes() * (uint64_t)rows;
    // embed: ids + [k, E] out (wasm + JS copy); lm_head: xn [E] + [rows] logits (wasm + JS).
    const uint64_t embed = (uint64_t)k * 4 + (uint64_t)k * E * 4 * 2;
    const uint64_t head = (uint64_t)E * 4 * 2 + (uint64_t)rows * 4 * 2 + (uint64_t)(kQ8KPerElem * E);
    c.act = std::max(embed, head);
    c.module = o_.module_bytes;
    c.js = o_.js_heap_bytes;
    return c;
  }

  std::vector<Shard> build_shards(int chunk) const {
    const int64_t V = c_.n_vocab;
    auto ok = [&](int n) {
      for (int i = 0; i < n; i++) {
        const int64_t a = V * i / n, b = V * (i + 1) / n;
        if (shard_cost(b - a, chunk).total() > o_.budget) return false;
      }
      return true;
    };
    int n = o_.shards;
    if (n > V) fail("plan: --shards " + std::to_string(n) + " exceeds the vocabulary of " + std::to_string(V) + " tokens");
    if (n > 0) {
      if (!ok(n)) {
        const Cost c = shard_cost((V + n - 1) / n, chunk);
        fail("plan: budget " + mib(o_.budget) + " cannot be met: a vocab shard of " + std::to_string((V + n - 1) / n) +
             " rows needs " + mib(c.total()) + " (rows " + mib(c.resident) + ", activations " + mib(c.act) + ", module + JS " +
             mib(c.module + c.js) + "); use more shards");
      }
    } else {
      const Cost one = shard_cost(1, chunk);
      if (one.total() > o_.budget)
        fail("plan: budget " + mib(o_.budget) + " cannot be met: even a one-row vocab shard needs " + mib(one.total()));
      const uint64_t per = shard_row_bytes() + 8;
      const uint64_t rows = std::max<uint64_t>(1, (o_.budget - shard_cost(0, chunk).total()) / per);
      n = (int)std::max<int64_t>(1, (V + (int64_t)rows - 1) / (int64_t)rows);
      while (!ok(n)) n++;
    }
    std::vector<Shard> out;
    for (int i = 0; i < n; i++) out.push_back({V * i / n, V * (i + 1) / n, {}});
    return out;
  }

  static ojson cost_json(const Cost& c) {
    return ojson{{"resident_weights", c.resident}, {"largest_phase", c.phase}, {"kv", c.kv},
                 {"activations", c.act}, {"module", c.module}, {"js_heap", c.js}, {"total", c.total()}};
  }

  static ojson estimate_json(const PlanEstimate& e, const CostModel& m) {
    auto r = [](double v, double q) { return std::round(v * q) / q; };
    return ojson{{"decode_tok_s", r(e.decode_tok_s, 1000)}, {"decode_ms", r(e.decode_ms, 100)},
                 {"station_ms", r(e.station_ms, 100)}, {"shard_ms", r(e.shard_ms, 100)}, {"hop_ms", r(e.hop_ms, 100)},
                 {"ttft_s", r(e.ttft_s, 100)}, {"ttft_pipelined_s", r(e.ttft_pipelined_s, 100)},
                 {"prompt_tokens", m.prompt_tokens}, {"prefill", "sequential"}};
  }

  std::string to_json() const {
    const Candidate& c = chosen_;
    ojson j;
    j["planner"] = 1;
    j["model"] = {{"name", m_.name}, {"arch", c_.arch}, {"n_layer", L}, {"n_embd", E}, {"n_head", H}, {"n_head_kv", KVH},
                  {"head_dim", D}, {"n_ff", F}, {"n_vocab", c_.n_vocab}, {"n_vocab_tensor", c_.n_vocab_tensor},
                  {"n_ctx_train", c_.n_ctx_train}, {"tied_embeddings", c_.tied_embeddings}};
    uint64_t wbytes = 0;
    for (const auto& t : m_.tensors) wbytes += t.size;
    j["model"]["weights_bytes"] = wbytes;
    j["budget"] = o_.budget;
    j["mode"] = o_.mode;
    j["context"] = c.context;
    j["chunk"] = c.chunk;
    // stations
    ojson st = ojson::array();
    int whole = 0, split_layers = 0, max_slices = 1, fluid = 0;
    for (size_t i = 0; i < c.stations.size(); i++) {
      const Station& s = c.stations[i];
      const std::string role = s.l0 == 0 && s.l1 == L ? "entry-exit" : s.l0 == 0 ? "entry" : s.l1 == L ? "exit" : "mid";
      std::string id = "station-" + std::to_string(s.l0) + "-" + std::to_string(s.l1);
      if (s.slice.count > 1) id += "-s" + std::to_string(s.slice.index) + "of" + std::to_string(s.slice.count);
      ojson e{{"id", id}, {"role", role}, {"layers", {s.l0, s.l1}}};
      if (s.slice.count > 1) {
        e["slice"] = {s.slice.index, s.slice.count};
        e["heads"] = {s.slice.h0, s.slice.h1};
        e["ffn_cols"] = {s.slice.c0, s.slice.c1};
        e["aligned"] = s.aligned;
        if (s.slice.index == 0) split_layers++;
        max_slices = std::max(max_slices, s.slice.count);
      } else {
        whole++;
      }
      e["mode"] = s.fluid ? "fluid" : "resident";
      if (s.fluid) {
        fluid++;
        e["prefetch"] = s.prefetch;
      }
      if (s.fat >= 0) {
        e["fat"] = true;
        e["fat_memory"] = o_.fat[(size_t)s.fat];
      }
      e["max_context"] = s.max_context;
      e["memory"] = cost_json(s.cost);
      st.push_back(e);
    }
    j["stations"] = st;
    ojson sh = ojson::array();
    for (const auto& s : c.shards) {
      sh.push_back({{"id", "shard-" + std::to_string(s.v0) + "-" + std::to_string(s.v1)},
                    {"vocab", {s.v0, s.v1}},
                    {"tensors", c_.tied_embeddings ? ojson{"token_embd_weight"} : ojson{"token_embd_weight", "output_weight"}},
                    {"memory", cost_json(s.cost)}});
    }
    j["shards"] = sh;
    j["padding_rows"] = {c_.n_vocab, c_.n_vocab_tensor};
    const int isolates = (int)c.isolates();
    j["isolates"] = isolates;
    if (!o_.fat.empty()) j["fat_stations"] = o_.fat.size();
    uint64_t peak = 0;  // of the Worker isolates
    for (const auto& s : c.stations)
      if (s.fat < 0) peak = std::max(peak, s.cost.total());
    for (const auto& s : c.shards) peak = std::max(peak, s.cost.total());
    j["largest_isolate"] = peak;
    // Per generated token (decode): embed at the one shard owning the token, one request
    // per whole-layer station, two parallel rounds (attention, then FFN) over the slices of
    // a split layer, then lm-head top-k at every shard in parallel.
    const int nsh = (int)c.shards.size();
    const int sub = 1 + whole + 2 * (int)(c.stations.size() - whole) + nsh;
    const int hops = hops_per_token(counts(c.stations));
    const int par = std::max(nsh, max_slices);
    const int waves = (nsh + kConnectionCap - 1) / kConnectionCap;
    ojson pt{{"hops", hops},
             {"subrequests", sub},
             {"simultaneous_connections", par},
             {"lm_head_waves", waves}};
    const int64_t prefill_chunks = (kGenTokens + c.chunk - 1) / c.chunk;
    const int64_t gen_sub = (int64_t)sub * kGenTokens;
    // The links the workers hold (workers/lib/topology.mjs, fitLinks/links): the stations
    // are chained when their members alone would take every link of the session DO — it
    // then links to the first station, each range's first slice to its other slices and to
    // the next range — and the shards sit behind hubs in the links left.
    const int members = (int)c.stations.size();
    const int ranges = whole + split_layers;
    const bool chain = members >= kConnectionCap;
    const int station_links = chain ? 1 : members;
    const int groups = shard_groups(members, nsh);
    const int hub_links = (nsh + groups - 1) / groups - 1;
    const int leader_links = chain ? (max_slices - 1) + (ranges > 1 ? 1 : 0) : 0;
    const int coordinator_links = station_links + groups;
    const int total_links = coordinator_links + (chain ? (ranges - 1) + (members - ranges) : 0) + (nsh - groups);
    pt["links"] = {{"chain", chain},
                   {"session", coordinator_links},
                   {"max_per_holder", std::max({coordinator_links, leader_links, hub_links})},
                   {"total", total_links}};
    pt["generation_4096"] = {
        {"subrequests_per_fetch", gen_sub},
        {"prefill_4096_chunks", prefill_chunks},
        {"within_subrequest_cap", gen_sub <= kSubrequestCap},
        {"websocket_links", total_links},
        {"subrequests_with_links", coordinator_links},
    };
    pt["limits"] = {{"subrequests", kSubrequestCap}, {"simultaneous_connections", kConnectionCap}};
    ojson notes = ojson::array();
    if (gen_sub > kSubrequestCap)
      notes.push_back("a " + std::to_string(kGenTokens) + "-token generation over plain fetch is " + std::to_string(gen_sub) +
                      " subrequests > " + std::to_string(kSubrequestCap) + ": hold WebSocket links (" +
                      std::to_string(total_links) + " in all, opened once; the session Durable Object holds " +
                      std::to_string(coordinator_links) + ")");
    if (chain)
      notes.push_back(std::to_string(members) + " station members would fill the session's " + std::to_string(kConnectionCap) +
                      " links: the stations form a chain (each holds at most " + std::to_string(std::max(leader_links, 1)) + " links)");
    if (par > kConnectionCap)
      notes.push_back("fan-out of " + std::to_string(par) + " exceeds " + std::to_string(kConnectionCap) +
                      " simultaneous connections over plain fetch (" + std::to_string((par + kConnectionCap - 1) / kConnectionCap) +
                      " waves); the shards sit behind " + std::to_string(groups) + " hub(s) instead");
    for (const auto& s : c.stations)
      if (s.slice.count > 1 && !s.aligned) {
        notes.push_back("station slices of layer " + std::to_string(s.l0) +
                        " cut attn_output/ffn_down columns off block boundaries: those tensors are held whole");
        break;
      }
    if (fluid) notes.push_back(std::to_string(fluid) + " fluid station(s): per layer load, run and evict attn, ffn_gate, ffn_up, ffn_down");
    pt["notes"] = notes;
    j["per_token"] = pt;
    j["objective"] = o_.objective;
    if (o_.replicas > 1) j["replicas"] = o_.replicas;  // the deployment renders every copy (deployment.cpp)
    j["estimate"] = estimate_json(c.est, o_.cost);
    ojson alts = ojson::array();
    for (const Candidate& a : rejected_) {
      uint64_t largest = 0;
      for (const auto& s : a.stations)
        if (s.fat < 0) largest = std::max(largest, s.cost.total());
      for (const auto& s : a.shards) largest = std::max(largest, s.cost.total());
      alts.push_back({{"min_slices", a.min_slices}, {"isolates", a.isolates()}, {"stations", a.stations.size()},
                      {"largest_isolate", largest}, {"context", a.context}, {"chunk", a.chunk},
                      {"estimate", estimate_json(a.est, o_.cost)}});
    }
    j["alternatives"] = alts;
    j["cost_model"] = {{"decode_bytes_per_ms", o_.cost.decode_bytes_per_ms},
                       {"prefill_token_bytes_per_ms", o_.cost.prefill_token_bytes_per_ms},
                       {"hop_ms", o_.cost.hop_ms}, {"fetch_bytes_per_ms", o_.cost.fetch_bytes_per_ms}};
    if (!o_.fat.empty()) j["cost_model"]["native_speedup"] = o_.cost.native_speedup;
    j["min_slices"] = c.min_slices;
    return j.dump(2) + "\n";
  }
};

}  // namespace

uint64_t parse_bytes(const std::string& s, const std::string& what) {
  size_t i = 0;
  while (i < s.size() && (std::isdigit((unsigned char)s[i]) || s[i] == '.')) i++;
  if (i == 0) fail(what + ": '" + s + "' is not a size (e.g. 128MB)");
  double v = 0;
  try {
    v = std::stod(s.substr(0, i));
  } catch (...) {
    fail(what + ": '" + s + "' is not a size (e.g. 128MB)");
  }
  std::string u = s.substr(i);
  for (auto& ch : u) ch = (char)std::toupper((unsigned char)ch);
  double mul = 1;
  if (u == "" || u == "B") mul = 1;
  else if (u == "K" || u == "KB" || u == "KIB") mul = 1024.0;
  else if (u == "M" || u == "MB" || u == "MIB") mul = 1048576.0;
  else if (u == "G" || u == "GB" || u == "GIB") mul = 1073741824.0;
  else fail(what + ": unknown unit '" + s.substr(i) + "' in '" + s + "' (B, KB, MB, GB; binary)");
  const double b = v * mul;
  if (!(b >= 1) || b > 1e15) fail(what + ": '" + s + "' is out of range");
  return (uint64_t)b;
}

std::vector<uint64_t> parse_byte_list(const std::string& s, const std::string& what) {
  std::vector<uint64_t> out;
  size_t at = 0;
  while (true) {
    const size_t comma = s.find(',', at);
    const std::string item = s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (item.empty()) fail(what + ": '" + s + "' has an empty size (e.g. 8GiB,8GiB)");
    out.push_back(parse_bytes(item, what));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

PlanModel plan_model_from_header(const uint8_t* p, size_t len, uint64_t file_size, const std::string& name, uint64_t* need) {
  *need = 0;
  PlanModel m;
  m.name = name;
  if (len >= 4 && std::memcmp(p, "KNOT", 4) == 0) {
    HeaderParse hp = parse_knot_header(p, len, file_size, name);
    if (!hp.complete) {
      *need = hp.need;
      return m;
    }
    m.config = hp.header.config;
    for (const auto& t : hp.header.tensors) m.tensors.push_back({t.name, t.type, t.shape, t.size});
  } else if (len >= 4 && std::memcmp(p, "GGUF", 4) == 0) {
    gguf::File f;
    try {
      f = gguf::parse(p, len, file_size, name);
    } catch (const gguf::Truncated& t) {
      *need = std::min<uint64_t>(file_size, std::max<uint64_t>(t.need, (uint64_t)len * 2));
      return m;
    }
    m.config = config_from_gguf(f, name);
    for (const auto& t : f.tensors) m.tensors.push_back({knot_tensor_name(t.name), t.type, t.shape, t.size});
  } else {
    fail(name + ": not a model file (magic is neither GGUF nor KNOT)");
  }
  return m;
}

PlanOptions plan_options_from_json(const std::string& text) {
  PlanOptions o;
  ojson j = ojson::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail("plan options: not a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const ojson& v = it.value();
    auto integer = [&](int lo, int hi) {
      if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
        fail("plan options: " + k + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + v.dump());
      return (int)v.get<int64_t>();
    };
    auto bytes = [&]() -> uint64_t {
      if (v.is_string()) return parse_bytes(v.get<std::string>(), k);
      if (v.is_number_unsigned() && v.get<uint64_t>() > 0) return v.get<uint64_t>();
      fail("plan options: " + k + " must be a size such as \"128MB\" or a byte count, got " + v.dump());
    };
    if (k == "budget") o.budget = bytes();
    else if (k == "context") o.context = integer(0, 1 << 20);
    else if (k == "chunk") o.chunk = integer(0, 4096);
    else if (k == "shards") o.shards = integer(0, 1 << 24);
    else if (k == "stations") o.stations = integer(0, 1 << 16);
    else if (k == "replicas") o.replicas = integer(1, 16);
    else if (k == "mode") {
      if (!v.is_string()) fail("plan options: mode must be \"resident\" or \"fluid\"");
      o.mode = v.get<std::string>();
    } else if (k == "module_bytes") o.module_bytes = bytes();
    else if (k == "js_heap_bytes") o.js_heap_bytes = bytes();
    else if (k == "objective") {
      if (!v.is_string()) fail("plan options: objective must be \"memory\" or \"latency\"");
      o.objective = v.get<std::string>();
    } else if (k == "cost") {
      if (!v.is_object()) fail("plan options: cost must be an object (bench/cost-model.json)");
      o.cost = cost_model_from_json(v.dump());
    } else if (k == "fat") {
      if (v.is_string()) o.fat = parse_byte_list(v.get<std::string>(), "fat");
      else if (v.is_array()) {
        o.fat.clear();
        for (const auto& x : v) {
          if (x.is_string()) o.fat.push_back(parse_bytes(x.get<std::string>(), "fat"));
          else if (x.is_number_unsigned() && x.get<uint64_t>() > 0) o.fat.push_back(x.get<uint64_t>());
          else fail("plan options: fat must list sizes such as \"8GiB\" or byte counts, got " + x.dump());
        }
      } else fail("plan options: fat must be sizes such as \"8GiB,8GiB\" or a list of them, got " + v.dump());
    } else fail("plan options: unknown option '" + k + "'");
  }
  return o;
}

std::string plan_json(const PlanModel& m, const PlanOptions& o) { return Planner(m, o).run(); }

}  // namespace knot
