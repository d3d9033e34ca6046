// net_frame.cpp — the C++ wire frame codec (core/net/frame.h) against the JS one
// (workers/lib/frame.mjs) on shared vectors that frame.mjs writes at test time
// (tests/fuzz/make-frame-vectors.mjs, ctest fixture net_frame_fixture -> build/frame-vectors.json):
// every fuzzer input gets the same verdict — the same FrameError message, or the same
// fields and payload — decoded as any receiver and as a station (width and kinds pinned);
// every accepted frame re-encodes to exactly its bytes; frames given by fields encode to
// the bytes encodeFrame made.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "net/frame.h"
#include "test_paths.h"

using namespace knot::net;
using json = nlohmann::json;

namespace {

std::vector<uint8_t> unhex(const std::string& h) {
  std::vector<uint8_t> out(h.size() / 2);
  for (size_t i = 0; i < out.size(); i++) out[i] = (uint8_t)std::stoi(h.substr(2 * i, 2), nullptr, 16);
  return out;
}
std::string hex(const std::vector<uint8_t>& b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (uint8_t x : b) s += d[x >> 4], s += d[x & 15];
  return s;
}

json vectors() {
  const std::string path = knot_test::env_or("KNOT_FRAME_VECTORS", knot_test::bin_dir() + "/../frame-vectors.json");
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": missing (ctest runs net_frame_fixture first: node tests/fuzz/make-frame-vectors.mjs --out FILE)");
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

Kind kind_of(const std::string& s) {
  for (int k = 1; k <= 6; k++)
    if (s == kind_name((Kind)k)) return (Kind)k;
  throw std::runtime_error("kind " + s);
}
Phase phase_of(const std::string& s) {
  for (int p = 0; p <= 3; p++)
    if (s == phase_name((Phase)p)) return (Phase)p;
  throw std::runtime_error("phase " + s);
}

void expect_fields(const Frame& f, const json& w, const std::string& where) {
  EXPECT_EQ(kind_name(f.kind), w["kind"].get<std::string>()) << where;
  EXPECT_EQ(f.dtype, w["dtype"].get<int>()) << where;
  EXPECT_EQ(f.req_id, w["reqId"].get<uint32_t>()) << where;
  EXPECT_EQ(f.pos, w["pos"].get<uint32_t>()) << where;
  EXPECT_EQ(f.rows, w["rows"].get<uint32_t>()) << where;
  EXPECT_EQ(f.width, w["width"].get<uint32_t>()) << where;
  EXPECT_EQ(f.layer, w["layer"].get<int>()) << where;
  EXPECT_EQ(phase_name(f.phase), w["phase"].get<std::string>()) << where;
  EXPECT_EQ(f.flags, w["flags"].get<int>()) << where;
  EXPECT_EQ(f.n_ctx, w["nCtx"].get<uint32_t>()) << where;
  EXPECT_EQ(f.sid, w["sid"].get<std::string>()) << where;
  EXPECT_EQ(hex(f.payload), w["payload"].get<std::string>()) << where;
}

// decode as frame.mjs did: the same message, or the same fields and a byte-equal re-encode
void check(const std::vector<uint8_t>& b, const json& verdict, const Expect& ex, const std::string& where) {
  try {
    const Frame f = decode_frame(b.data(), b.size(), ex);
    ASSERT_TRUE(verdict.contains("frame")) << where << ": accepted, frame.mjs refused: " << verdict["error"];
    expect_fields(f, verdict["frame"], where);
    EXPECT_EQ(hex(encode_frame(f)), hex(b)) << where << ": not canonical";
  } catch (const FrameError& e) {
    ASSERT_TRUE(verdict.contains("error")) << where << ": refused (" << e.what() << "), frame.mjs accepted";
    EXPECT_EQ(std::string(e.what()), verdict["error"].get<std::string>()) << where;
  }
}

}  // namespace

TEST(NetFrame, DecodesFuzzInputsAsFrameMjs) {
  const json v = vectors();
  Expect station;
  station.width = v["station"]["width"].get<int64_t>();
  for (auto& k : v["station"]["kinds"]) station.kinds.push_back(kind_of(k));
  size_t accepted = 0, refused = 0;
  for (size_t i = 0; i < v["decode"].size(); i++) {
    const json& t = v["decode"][i];
    const auto b = unhex(t["hex"]);
    check(b, t["any"], {}, "decode[" + std::to_string(i) + "]");
    check(b, t["station"], station, "decode[" + std::to_string(i) + "] as a station");
    (t["any"].contains("frame") ? accepted : refused)++;
  }
  // the vectors exercise both verdicts (a generator that only made one would prove little)
  EXPECT_GT(accepted, 100u);
  EXPECT_GT(refused, 100u);
}

TEST(NetFrame, EncodesAsFrameMjs) {
  const json v = vectors();
  ASSERT_FALSE(v["encode"].empty());
  for (auto& t : v["encode"]) {
    const json& w = t["fields"];
    Frame f;
    f.kind = kind_of(w["kind"]), f.dtype = (uint8_t)w["dtype"].get<int>(), f.req_id = w["reqId"], f.pos = w["pos"];
    f.width = w["width"], f.layer = (uint16_t)w["layer"].get<int>(), f.phase = phase_of(w["phase"]);
    f.flags = (uint8_t)w["flags"].get<int>(), f.n_ctx = w["nCtx"], f.sid = w["sid"], f.payload = unhex(w["payload"]);
    EXPECT_EQ(hex(encode_frame(f)), t["hex"].get<std::string>()) << w.dump();
  }
}

TEST(NetFrame, EncodeRefusesPartialRows) {
  Frame f;
  f.kind = Kind::Prefill, f.width = 3, f.payload.resize(4 * 4);
  try {
    encode_frame(f);
    FAIL() << "4 values as rows of 3 encoded";
  } catch (const FrameError& e) {
    EXPECT_STREQ(e.what(), "encodeFrame: 4 values are not rows of width 3");
  }
}
