// fat_station.cpp — see fat_station.h. Messages are workers/station/index.mjs's, so a
// coordinator (and a test) sees the same statuses and texts from either station.
#include "net/fat_station.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>

#include "container/arch.h"
#include "infer/forward.h"
#include "kernels/common.h"
#include "net/http_source.h"

namespace knot::net {

namespace {

std::string S(int64_t v) { return std::to_string(v); }

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// workers/lib/topology.mjs cuts(): k near-equal parts of n, cut points on multiples of align
std::vector<int> cuts(int n, int k, int align = 1) {
  std::vector<int> out{0};
  for (int i = 1; i < k; i++) {
    int c = (int)std::floor((double)n * i / k / align + 0.5) * align;
    if (c <= out.back() || c >= n) c = (int)std::floor((double)n * i / k + 0.5);
    out.push_back(c);
  }
  out.push_back(n);
  return out;
}

uint64_t rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long pages = 0, res = 0;
  const int got = std::fscanf(f, "%llu %llu", &pages, &res);
  std::fclose(f);
  return got == 2 ? res * 4096ull : 0;
}

// VmHWM: the process's peak resident set
uint64_t peak_rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  unsigned long long kb = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmHWM: %llu kB", &kb) == 1) break;
  std::fclose(f);
  return kb * 1024ull;
}

}  // namespace

int error_status(const std::exception& e) {
  if (dynamic_cast<const FrameError*>(&e)) return 400;
  if (auto* s = dynamic_cast<const StationError*>(&e)) return s->status;
  return 500;
}

FatStation::FatStation(FatStationConfig cfg, std::unique_ptr<ByteSource> src) : cfg_(std::move(cfg)), src_(std::move(src)) {
  h_ = read_knot_header(*src_);
  model_.config = h_.config;
  const ModelConfig& c = h_.config;
  if (cfg_.name.empty()) cfg_.name = "fat" + S(cfg_.l0) + "-" + S(cfg_.l1);
  if (!(cfg_.l0 >= 0 && cfg_.l1 > cfg_.l0 && cfg_.l1 <= c.n_layer))
    fail(who() + ": layers [" + S(cfg_.l0) + "," + S(cfg_.l1) + ") outside the model's " + S(c.n_layer));
  if (cfg_.role != "entry" && cfg_.role != "mid" && cfg_.role != "exit")
    fail(who() + ": role " + cfg_.role + " (want entry|mid|exit)");
  const int g = c.n_head_kv > 0 ? c.n_head / c.n_head_kv : 1;
  if (cfg_.slice_n < 1 || cfg_.slice_i < 0 || cfg_.slice_i >= cfg_.slice_n || cfg_.slice_n > c.n_head_kv)
    fail(who() + ": slice " + S(cfg_.slice_i) + "/" + S(cfg_.slice_n) + " (want i/n with 0 <= i < n <= n_head_kv " +
         S(c.n_head_kv) + ")");
  h0_ = 0, h1_ = c.n_head, c0_ = 0, c1_ = c.n_ff;
  if (cfg_.slice_n > 1) {
    const auto hc = cuts(c.n_head_kv, cfg_.slice_n), cc = cuts(c.n_ff, cfg_.slice_n, 256);
    h0_ = hc[cfg_.slice_i] * g, h1_ = hc[cfg_.slice_i + 1] * g;
    c0_ = cc[cfg_.slice_i], c1_ = cc[cfg_.slice_i + 1];
  }
  layer_loaded_.assign((size_t)c.n_layer, false);
}

void FatStation::load(const std::string& name, int64_t r0, int64_t r1) {
  const KnotTensor& kt = h_.get(name);
  Tensor t;
  if (r1 < 0) {
    t = read_knot_tensor(*src_, h_, kt, true);
  } else {
    t.name = kt.name, t.type = kt.type, t.shape = kt.shape, t.hash = kt.hash;
    const uint64_t rs = kt.row_size();
    t.size = (size_t)((r1 - r0) * (int64_t)rs);
    t.bytes = alloc_aligned(t.size);
    read_knot_rows(*src_, h_, kt, r0, r1, t.bytes.get(), true);
    t.shape[1] = r1 - r0;
    t.row0 = r0;
  }
  tensor_bytes_ += t.size;
  model_.tensors[name] = std::move(t);
}

// Layer l's tensors (the arch table's attention and FFN phases): the rows a slice needs of
// the tensors cut by rows, whole otherwise (column and element cuts happen in the core).
void FatStation::ensure_layer(int l) {
  if (layer_loaded_[(size_t)l]) return;
  const ModelConfig& c = h_.config;
  const ArchInfo& a = arch_info(c.arch, cfg_.model);
  const int hd = c.head_dim, g = c.n_head / c.n_head_kv;
  const bool whole_h = h1_ - h0_ == c.n_head, whole_c = c1_ - c0_ == c.n_ff;
  const unsigned layer_phases = PHASE_ATTN | PHASE_FFN_GATE | PHASE_FFN_UP | PHASE_FFN_DOWN;
  for (const ArchTensor& at : a.tensors) {
    const TensorInfo& ti = tensor_info(at.id);
    if (!ti.per_layer || !(ti.phases & layer_phases)) continue;
    const std::string name = tensor_knot_name(at.id, l);
    if (model_.find(name)) continue;  // loaded by an earlier frame that failed on a later tensor
    if (!h_.find(name)) {
      if (at.need != Need::Required) continue;
      const unsigned ph = ti.phases & layer_phases;
      throw StationError(500, who() + ": missing tensor " + name + " (layer " + S(l) + ", phase " + knot::phase_name(ph & -ph) +
                                  ") in " + cfg_.model);
    }
    int64_t r0 = 0, r1 = -1;
    if (ti.cut == SliceCut::Rows) {
      if (ti.over == SliceOver::Heads && !whole_h) r0 = (int64_t)h0_ * hd, r1 = (int64_t)h1_ * hd;
      if (ti.over == SliceOver::KvHeads && !whole_h) r0 = (int64_t)h0_ / g * hd, r1 = (int64_t)h1_ / g * hd;
      if (ti.over == SliceOver::Ffn && !whole_c) r0 = c0_, r1 = c1_;
    }
    load(name, r0, r1);
  }
  layer_loaded_[(size_t)l] = true;
}

void FatStation::ensure_output_norm() {
  if (model_.find("output_norm_weight")) return;
  if (!h_.find("output_norm_weight"))
    throw StationError(500, who() + ": missing tensor output_norm_weight (phase output_norm) in " + cfg_.model);
  load("output_norm_weight", 0, -1);
}

std::vector<float> FatStation::norm_rows(const float* x, int n) {
  ensure_output_norm();
  std::vector<float> out((size_t)n * h_.config.n_embd);
  Workspace ws;
  output_norm(h_.config, *model_.find("output_norm_weight"), x, n, out.data(), ws);
  return out;
}

void FatStation::sweep(int64_t now) {
  for (auto it = sessions_.begin(); it != sessions_.end();)
    it = now - it->second.used >= cfg_.ttl_ms ? sessions_.erase(it) : std::next(it);
}

FatStation::Session& FatStation::open(const Frame& f, int n_ctx) {
  sessions_.erase(f.sid);
  StationSpec sp;
  sp.l0 = cfg_.l0, sp.l1 = cfg_.l1, sp.h0 = h0_, sp.h1 = h1_, sp.n_ctx = n_ctx;
  sp.fo.kernel = cfg_.reference ? Kernel::Reference : Kernel::Simd;
  sp.fo.kv_type = cfg_.reference ? KvType::F32 : KvType::F16;
  sp.kv_limit = cfg_.kv_budget;
  sp.kv_limit_where = " (the station's --kv-budget)";
  Session s;
  try {
    s.st = std::make_unique<Station>(h_.config, sp);
  } catch (const std::exception& e) {
    throw StationError(400, who() + ": n_ctx " + S(n_ctx) + ": " + e.what());
  }
  s.n_ctx = n_ctx;
  return sessions_[f.sid] = std::move(s);
}

// workers/station/index.mjs #session, without snapshots: see fat_station.h.
FatStation::Session& FatStation::session(const Frame& f) {
  const int64_t n = f.rows, pos = f.pos;
  const bool starts = f.phase == Phase::All || (f.phase == Phase::Attn && f.layer == cfg_.l0);
  if (!f.n_ctx)
    throw StationError(400, who() + ": n_ctx 0 in a " + kind_name(f.kind) + " frame (the session's context must be positive)");
  auto it = sessions_.find(f.sid);
  Session* s = it == sessions_.end() ? nullptr : &it->second;
  const int64_t n_ctx = s ? s->n_ctx : (int64_t)f.n_ctx;
  if (pos + n > n_ctx)
    throw StationError(400, who() + ": positions [" + S(pos) + ", " + S(pos + n) + ") (pos + rows) past the session's context n_ctx " +
                                S(n_ctx));
  if (starts && pos == 0) s = &open(f, (int)std::min<uint32_t>(f.n_ctx, INT_MAX));
  if (!s || (f.phase != Phase::Ffn && (starts ? pos > s->n_pos : pos != s->n_pos))) {
    lost_++;
    throw StationError(409, who() + ": session " + f.sid + " lost: it holds " + (s ? S(s->n_pos) : std::string("no")) +
                                " positions, the frame starts at " + S(pos) + "; re-prefill");
  }
  if (starts) {
    if (pos < s->n_pos) s->n_pos = (int)pos, rewinds_++;
    s->st->truncate((int)pos);  // also drops the rows of a frame that failed part-way
  }
  s->used = now_ms();
  return *s;
}

void FatStation::ffn(Session& s, int l, const float* x, int n, float* out) {
  std::vector<float> h((size_t)n * (c1_ - c0_));
  s.st->ffn(model_, FfnPhase::Gate, l, x, n, h.data(), nullptr, c0_, c1_);
  s.st->ffn(model_, FfnPhase::Up, l, x, n, h.data(), nullptr, c0_, c1_);
  s.st->ffn(model_, FfnPhase::Down, l, nullptr, n, h.data(), out, c0_, c1_);
}

std::vector<uint8_t> FatStation::layers(const Frame& f) {
  if (f.flags & (FLAG_NORM_LAST | FLAG_NORM_ALL) && cfg_.role != "exit")
    throw StationError(400, who() + ": normLast asked of a " + cfg_.role + " station");
  Session& s = session(f);
  const int n = (int)f.rows, E = h_.config.n_embd;
  std::vector<float> x(f.f32(), f.f32() + f.values()), p(x.size());
  for (int l = cfg_.l0; l < cfg_.l1; l++) {
    ensure_layer(l);
    s.st->attn(model_, l, (int)f.pos, x.data(), n, p.data());
    for (size_t i = 0; i < x.size(); i++) x[i] += p[i];
    ffn(s, l, x.data(), n, p.data());
    for (size_t i = 0; i < x.size(); i++) x[i] += p[i];
  }
  s.n_pos += n;
  if (f.flags & FLAG_NORM_ALL) {
    auto o = norm_rows(x.data(), n);
    return encode_result(f, o.data(), o.size(), f.width);
  }
  if (f.flags & FLAG_NORM_LAST) {
    auto o = norm_rows(x.data() + (size_t)(n - 1) * E, 1);
    return encode_result(f, o.data(), o.size(), f.width);
  }
  return encode_result(f, x.data(), x.size(), f.width);
}

std::vector<uint8_t> FatStation::attn_phase(const Frame& f) {
  if (!(f.layer >= cfg_.l0 && f.layer < cfg_.l1))
    throw StationError(400, who() + ": layer " + S(f.layer) + " outside [" + S(cfg_.l0) + "," + S(cfg_.l1) + ")");
  Session& s = session(f);
  ensure_layer(f.layer);
  std::vector<float> out(f.values());
  s.st->attn(model_, f.layer, (int)f.pos, f.f32(), (int)f.rows, out.data());
  if (f.layer == cfg_.l1 - 1) s.n_pos += (int)f.rows;
  return encode_result(f, out.data(), out.size(), f.width);
}

std::vector<uint8_t> FatStation::ffn_phase(const Frame& f) {
  if (!(f.layer >= cfg_.l0 && f.layer < cfg_.l1))
    throw StationError(400, who() + ": layer " + S(f.layer) + " outside [" + S(cfg_.l0) + "," + S(cfg_.l1) + ")");
  Session& s = session(f);
  ensure_layer(f.layer);
  std::vector<float> out(f.values());
  ffn(s, f.layer, f.f32(), (int)f.rows, out.data());
  return encode_result(f, out.data(), out.size(), f.width);
}

std::vector<uint8_t> FatStation::norm_phase(const Frame& f) {
  if (cfg_.role != "exit") throw StationError(400, who() + ": phase norm asked of a " + cfg_.role + " station");
  const int n = (int)f.rows, E = h_.config.n_embd;
  auto o = f.flags & FLAG_NORM_ALL ? norm_rows(f.f32(), n) : norm_rows(f.f32() + (size_t)(n - 1) * E, 1);
  return encode_result(f, o.data(), o.size(), f.width);
}

std::vector<uint8_t> FatStation::handle(const uint8_t* bytes, size_t len) {
  std::lock_guard<std::mutex> lock(mu_);
  Expect ex;
  ex.width = h_.config.n_embd;
  ex.kinds = {Kind::Prefill, Kind::Decode, Kind::End};
  const Frame f = decode_frame(bytes, len, ex);
  frames_++;
  sweep(now_ms());
  if (f.kind == Kind::End) {
    sessions_.erase(f.sid);
    Frame r;
    r.kind = Kind::Result, r.sid = f.sid, r.req_id = f.req_id;
    return encode_frame(r);
  }
  switch (f.phase) {
    case Phase::All: return layers(f);
    case Phase::Attn: return attn_phase(f);
    case Phase::Ffn: return ffn_phase(f);
    case Phase::Norm: return norm_phase(f);
  }
  throw StationError(500, who() + ": unreachable phase");
}

nlohmann::json FatStation::health() {
  std::lock_guard<std::mutex> lock(mu_);
  const ModelConfig& c = h_.config;
  uint64_t kv = 0;
  nlohmann::json live = nlohmann::json::array();
  for (auto& [sid, s] : sessions_) {
    kv += s.st->kv().bytes();
    live.push_back({{"sid", sid}, {"nPos", s.n_pos}, {"nCtx", s.n_ctx}, {"kvBytesPerToken", s.st->kv().bytes_per_token()}});
  }
  const auto* counted = dynamic_cast<const CountingSource*>(src_.get());
  int loaded = 0;
  for (bool b : layer_loaded_) loaded += b;
  return {{"ok", true},
          {"name", cfg_.name},
          {"model", cfg_.model},
          {"role", cfg_.role},
          {"layers", {cfg_.l0, cfg_.l1}},
          {"slice", {cfg_.slice_i, cfg_.slice_n}},
          {"heads", {h0_, h1_}},
          {"cols", {c0_, c1_}},
          {"kernel", cfg_.reference ? "reference" : "simd"},
          {"config",
           {{"arch", c.arch}, {"n_embd", c.n_embd}, {"n_layer", c.n_layer}, {"n_head", c.n_head}, {"n_head_kv", c.n_head_kv},
            {"head_dim", c.head_dim}, {"n_ff", c.n_ff}, {"n_vocab", c.n_vocab}, {"n_vocab_tensor", c.n_vocab_tensor},
            {"rope_dims", c.rope_dims}, {"rope_theta", c.rope_theta}, {"rms_eps", c.rms_eps}, {"n_ctx_train", c.n_ctx_train},
            {"tied_embeddings", c.tied_embeddings}}},
          {"sessions", sessions_.size()},
          {"live", live},
          {"layersLoaded", loaded},
          {"tensorsLoaded", model_.tensors.size()},
          {"memory", {{"rss", rss_bytes()}, {"peakRss", peak_rss_bytes()}, {"tensorBytes", tensor_bytes_}, {"kvBytes", kv}}},
          {"source", {{"bytesRead", counted ? counted->bytes() : 0}, {"reads", counted ? counted->reads() : 0},
                      {"fileBytes", h_.file_size}, {"headerBytes", h_.payload_offset}}},
          {"stats", {{"frames", frames_}, {"rewinds", rewinds_}, {"lost", lost_}}}};
}

}  // namespace knot::net
