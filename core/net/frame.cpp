// frame.cpp — see frame.h. Checks run in frame.mjs's order so a frame with several faults
// names the same one.
#include "net/frame.h"

#include <algorithm>
#include <charconv>
#include <cstring>

namespace knot::net {

namespace {

uint32_t u32(const uint8_t* p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
uint16_t u16(const uint8_t* p) { return (uint16_t)(p[0] | p[1] << 8); }
void put32(uint8_t* p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
void put16(uint8_t* p, uint16_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }

// A JS number as `${n}` prints it (integers below 1e21: the shortest round-trip digits,
// then zeros), so a length computed past 2^53 reads as frame.mjs's message does.
std::string js_number(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string s(buf, r.ptr);  // d.ddde+XX
  const size_t e = s.find('e');
  std::string digits = s.substr(0, e);
  const int exp = std::stoi(s.substr(e + 1));
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  if (exp < 0 || exp >= 21) return s;  // not reached for frame lengths
  while ((int)digits.size() < exp + 1) digits += '0';
  return digits;
}

std::string hex(uint32_t v) {
  char buf[16];
  auto r = std::to_chars(buf, buf + sizeof buf, v, 16);
  return std::string(buf, r.ptr);
}

bool rows_needed(Kind k) { return k == Kind::Prefill || k == Kind::Decode || k == Kind::Embed || k == Kind::Lmhead; }

}  // namespace

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Prefill: return "prefill";
    case Kind::Decode: return "decode";
    case Kind::Embed: return "embed";
    case Kind::Lmhead: return "lmhead";
    case Kind::Result: return "result";
    case Kind::End: return "end";
  }
  return "";
}

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::All: return "all";
    case Phase::Attn: return "attn";
    case Phase::Ffn: return "ffn";
    case Phase::Norm: return "norm";
  }
  return "";
}

uint32_t request_id(const uint8_t* b, size_t len) { return len >= 12 ? u32(b + 8) : 0; }

Frame decode_frame(const uint8_t* b, size_t len, const Expect& expect) {
  const std::string L = std::to_string(len);
  if (len < FRAME_HEADER) throw FrameError("frame: " + L + " bytes, shorter than the 36-byte header");
  const uint32_t magic = u32(b);
  if (magic != FRAME_MAGIC) throw FrameError("frame: bad magic 0x" + hex(magic) + " (expected \"KWF1\")");
  const uint16_t version = u16(b + 4);
  if (version != FRAME_VERSION)
    throw FrameError("frame: version " + std::to_string(version) + ", this worker speaks version 1");
  const uint8_t kind_id = b[6];
  const Kind kind = (Kind)kind_id;
  if (!*kind_name(kind)) throw FrameError("frame: unknown kind " + std::to_string(kind_id));
  if (!expect.kinds.empty()) {
    bool ok = false;
    std::string want;
    for (Kind k : expect.kinds) ok |= k == kind, want += (want.empty() ? "" : "|") + std::string(kind_name(k));
    if (!ok) throw FrameError(std::string("frame: kind ") + kind_name(kind) + " not accepted here (want " + want + ")");
  }
  const uint8_t dtype = b[7];
  if (dtype > 1) throw FrameError("frame: unknown dtype " + std::to_string(dtype));
  const uint32_t rows = u32(b + 16), width = u32(b + 20);
  const uint8_t phase_id = b[26];
  if (!*phase_name((Phase)phase_id)) throw FrameError("frame: unknown phase " + std::to_string(phase_id));
  const uint16_t sid_len = u16(b + 32);
  if (sid_len > 128) throw FrameError("frame: session id of " + std::to_string(sid_len) + " bytes (max 128)");
  if (u16(b + 34) != 0) throw FrameError("frame: reserved header bytes are not zero");
  if (width == 0 && rows != 0) throw FrameError("frame: " + std::to_string(rows) + " rows of width 0");
  const size_t sid_pad = ((size_t)sid_len + 3) & ~(size_t)3;
  // frame.mjs computes the length in doubles; exact here, and printed as JS prints it
  const unsigned __int128 want = (unsigned __int128)FRAME_HEADER + sid_pad + (unsigned __int128)rows * width * 4;
  if ((unsigned __int128)len != want) {
    const double wd = (double)FRAME_HEADER + (double)sid_pad + (double)rows * (double)width * 4.0;
    throw FrameError("frame: " + L + " bytes but the header says " + std::to_string(rows) + " rows x " +
                     std::to_string(width) + " values (" + js_number(wd) + " bytes)");
  }
  if (expect.width >= 0 && width != (uint64_t)expect.width && rows > 0)
    throw FrameError("frame: width " + std::to_string(width) + ", this worker's hidden dim is " + std::to_string(expect.width));
  if (rows == 0 && rows_needed(kind))
    throw FrameError(std::string("frame: a ") + kind_name(kind) + " frame with 0 rows (it needs at least one)");
  for (size_t i = 0; i < sid_len; i++)
    if (b[FRAME_HEADER + i] < 0x21 || b[FRAME_HEADER + i] > 0x7e) throw FrameError("frame: session id is not printable ASCII");
  for (size_t i = FRAME_HEADER + sid_len; i < FRAME_HEADER + sid_pad; i++)
    if (b[i]) throw FrameError("frame: session id padding byte at offset " + std::to_string(i) + " is 0x" + hex(b[i]) + ", not zero");
  Frame f;
  f.kind = kind, f.dtype = dtype, f.req_id = u32(b + 8), f.pos = u32(b + 12), f.rows = rows, f.width = width;
  f.layer = u16(b + 24), f.phase = (Phase)phase_id, f.flags = b[27], f.n_ctx = u32(b + 28);
  f.sid.assign((const char*)b + FRAME_HEADER, sid_len);
  f.payload.assign(b + FRAME_HEADER + sid_pad, b + len);
  return f;
}

std::vector<uint8_t> encode_frame(const Frame& f) {
  const size_t n = f.payload.size() / 4;
  if (f.payload.size() % 4) throw FrameError("encodeFrame: payload of " + std::to_string(f.payload.size()) + " bytes is not whole values");
  if (f.width && n % f.width)
    throw FrameError("encodeFrame: " + std::to_string(n) + " values are not rows of width " + std::to_string(f.width));
  if (f.sid.size() > 0xffff) throw FrameError("encodeFrame: session id of " + std::to_string(f.sid.size()) + " bytes");
  const uint32_t rows = f.width ? (uint32_t)(n / f.width) : 0;
  const size_t sid_pad = (f.sid.size() + 3) & ~(size_t)3;
  std::vector<uint8_t> out(FRAME_HEADER + sid_pad + f.payload.size(), 0);
  uint8_t* p = out.data();
  put32(p, FRAME_MAGIC);
  put16(p + 4, FRAME_VERSION);
  p[6] = (uint8_t)f.kind;
  p[7] = f.dtype;
  put32(p + 8, f.req_id);
  put32(p + 12, f.pos);
  put32(p + 16, rows);
  put32(p + 20, f.width);
  put16(p + 24, f.layer);
  p[26] = (uint8_t)f.phase;
  p[27] = f.flags;
  put32(p + 28, f.n_ctx);
  put16(p + 32, (uint16_t)f.sid.size());
  std::memcpy(p + FRAME_HEADER, f.sid.data(), f.sid.size());
  if (!f.payload.empty()) std::memcpy(p + FRAME_HEADER + sid_pad, f.payload.data(), f.payload.size());
  return out;
}

std::vector<uint8_t> encode_result(const Frame& f, const float* values, size_t n, uint32_t width) {
  Frame r;
  r.kind = Kind::Result;
  r.sid = f.sid, r.req_id = f.req_id, r.pos = f.pos, r.width = width;
  r.payload.resize(n * 4);
  if (n) std::memcpy(r.payload.data(), values, n * 4);
  return encode_frame(r);
}

}  // namespace knot::net
