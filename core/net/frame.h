// frame.h — the station / shard wire frame (docs/protocol.md) in C++: the same encoder and
// validating decoder as workers/lib/frame.mjs, byte for byte and message for message, so a
// native station (core/net/station_server.h) answers a bad frame with the Worker's 400.
//
//   0  u32  magic "KWF1"           20 u32  width (hidden dim; 1 for token ids)
//   4  u16  version (1)            24 u16  layer (phase calls of a split layer)
//   6  u8   kind (Kind)            26 u8   phase (Phase)
//   7  u8   dtype 0 f32 | 1 i32    27 u8   flags (FLAG_*)
//   8  u32  request id             28 u32  n_ctx (context the session's KV cache holds)
//   12 u32  position of row 0      32 u16  session id length S (0..128, ASCII)
//   16 u32  rows (tokens)          34 u16  zero
//   36 S bytes session id, NUL-padded to 4;  then rows x width values (little-endian)
// Contract: decode_frame refuses with a FrameError whose message is frame.mjs's (the same
// checks in the same order); an accepted frame re-encodes to exactly its bytes
// (tests/native/net_frame.cpp on vectors written by frame.mjs; tests/fuzz/fuzz_frame.cpp).
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace knot::net {

constexpr uint32_t FRAME_MAGIC = 0x3146574b;  // "KWF1"
constexpr uint16_t FRAME_VERSION = 1;
constexpr size_t FRAME_HEADER = 36;

enum class Kind : uint8_t { Prefill = 1, Decode = 2, Embed = 3, Lmhead = 4, Result = 5, End = 6 };
enum class Phase : uint8_t { All = 0, Attn = 1, Ffn = 2, Norm = 3 };
constexpr uint8_t FLAG_NORM_LAST = 1, FLAG_FULL_LOGITS = 2, FLAG_CHAIN = 4, FLAG_TOP_ROW = 8, FLAG_NORM_ALL = 16;

const char* kind_name(Kind k);    // "prefill", ...; "" when unknown
const char* phase_name(Phase p);  // "all", ...; "" when unknown

class FrameError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Frame {
  Kind kind = Kind::Result;
  uint8_t dtype = 0;  // 0 f32, 1 i32 (of the payload)
  uint32_t req_id = 0, pos = 0, rows = 0, width = 0;
  uint16_t layer = 0;
  Phase phase = Phase::All;
  uint8_t flags = 0;
  uint32_t n_ctx = 0;
  std::string sid;
  std::vector<uint8_t> payload;  // rows x width x 4 bytes, little-endian values
  const float* f32() const { return reinterpret_cast<const float*>(payload.data()); }
  size_t values() const { return payload.size() / 4; }
};

// What a receiver pins: its hidden size (width of frames with rows; -1: any) and the kinds
// it accepts (empty: any).
struct Expect {
  int64_t width = -1;
  std::vector<Kind> kinds;
};

// Parse and validate; throws FrameError naming the field (frame.mjs decodeFrame's messages).
Frame decode_frame(const uint8_t* bytes, size_t len, const Expect& expect = {});
// The frame's bytes; rows are payload values / width (width 0: 0 rows), dtype as given.
// A payload that is not whole rows is a FrameError (frame.mjs encodeFrame).
std::vector<uint8_t> encode_frame(const Frame& f);
// A result frame answering f: same sid, request id, position and width; payload `values`.
std::vector<uint8_t> encode_result(const Frame& f, const float* values, size_t n, uint32_t width);
// The request id at offset 8 without decoding the rest; 0 when too short (frame.mjs requestId).
uint32_t request_id(const uint8_t* bytes, size_t len);

}  // namespace knot::net
