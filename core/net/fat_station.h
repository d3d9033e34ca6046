// fat_station.h — a layer station in one native process (docs/protocol.md): the frame
// semantics of workers/station/index.mjs without the Worker around it, for a process that
// can hold more than an isolate's 128 MB ("fat"). Transport-free: station_server.h feeds
// it frames from HTTP POSTs and WebSocket messages.
//
// Contract:
//  * the model is a .knot file read through a ByteSource (a local file or HTTP ranges,
//    http_source.h): the header window first, then only this station's tensors (layers
//    [l0,l1) — a slice i/n: its head group's rows of q/k/v and FFN columns' rows of
//    gate/up — and output_norm for an exit), each verified by its XXH64 as it arrives,
//    loaded on first use (the first frame that runs the layer);
//  * sessions: one knot::Station (KV cache) per session id; a prefill/decode frame that
//    starts its positions' first layer (phase all, or attn of l0) at pos 0 opens a session,
//    below the positions held rewinds it (truncate), above them is a 409 naming session and
//    positions ("re-prefill"); the Worker station's 400s (n_ctx 0, pos + rows past n_ctx,
//    layer outside the range, normLast / phase norm asked of a non-exit station); end frees
//    a session; an idle session is freed after ttl_ms;
//  * a FrameError is a 400 with frame.mjs's message, StationError its status, anything else
//    500 (error_status()).
// No KV snapshots (a process restart loses its sessions: the 409 makes the coordinator
// re-prefill) and no chain forwarding (flag chain answers this station's own rows).
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "container/knot.h"
#include "infer/station.h"
#include "net/frame.h"

namespace knot::net {

class StationError : public std::runtime_error {
 public:
  StationError(int status, const std::string& m) : std::runtime_error(m), status(status) {}
  int status;
};

// 400 for a FrameError, a StationError's status, 500 for anything else.
int error_status(const std::exception& e);

struct FatStationConfig {
  std::string model;        // path or URL (for /health)
  std::string name;         // in messages: "station NAME: ..."
  int l0 = 0, l1 = 0;       // layers [l0, l1)
  std::string role = "mid"; // entry | mid | exit
  int slice_i = 0, slice_n = 1;
  bool reference = false;   // reference kernels + f32 KV (bit-exact with the wasm reference)
  uint64_t kv_budget = 1ull << 30;  // bytes one session's KV cache may take
  int64_t ttl_ms = 10 * 60 * 1000;
};

class FatStation {
 public:
  // Reads the header window (throws naming the source); checks layers, role and slice.
  FatStation(FatStationConfig cfg, std::unique_ptr<ByteSource> src);
  // One frame in, its answer frame out. Frames compute one at a time (a mutex, arrival order).
  std::vector<uint8_t> handle(const uint8_t* bytes, size_t len);
  // GET /health: config (knot inspect's names), layers, role, slice, sessions, memory
  // {rss, peakRss, tensorBytes, kvBytes}, source {bytesRead, reads, fileBytes, headerBytes}.
  nlohmann::json health();
  const ModelConfig& config() const { return h_.config; }
  void set_role(const std::string& role) { cfg_.role = role; }  // before serving

 private:
  struct Session {
    std::unique_ptr<Station> st;
    int n_pos = 0, n_ctx = 0;
    int64_t used = 0;
  };
  std::vector<uint8_t> layers(const Frame& f);
  std::vector<uint8_t> attn_phase(const Frame& f);
  std::vector<uint8_t> ffn_phase(const Frame& f);
  std::vector<uint8_t> norm_phase(const Frame& f);
  Session& session(const Frame& f);
  Session& open(const Frame& f, int n_ctx);
  void ffn(Session& s, int l, const float* x, int n, float* out);
  void ensure_layer(int l);
  void ensure_output_norm();
  void load(const std::string& name, int64_t r0, int64_t r1);  // r1 < 0: whole
  void sweep(int64_t now);
  std::vector<float> norm_rows(const float* x, int n);
  std::string who() const { return "station " + cfg_.name; }

  FatStationConfig cfg_;
  std::unique_ptr<ByteSource> src_;
  KnotHeader h_;
  Model model_;  // config + the tensors loaded so far
  int h0_ = 0, h1_ = 0, c0_ = 0, c1_ = 0;  // head slice and FFN columns
  std::vector<bool> layer_loaded_;
  uint64_t tensor_bytes_ = 0;
  std::map<std::string, Session> sessions_;
  std::mutex mu_;
  uint64_t frames_ = 0, rewinds_ = 0, lost_ = 0;
};

}  // namespace knot::net
