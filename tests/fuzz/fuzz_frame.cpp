// fuzz_frame.cpp — libFuzzer harness of the C++ wire frame codec (core/net/frame.h), the
// counterpart of the JS harness tests/fuzz/fuzz_frame.mjs: any input is decoded as any
// receiver and as a station (width 64, kinds prefill|decode|end). Contract: decode_frame
// refuses with a FrameError whose message starts "frame: ", or returns a frame that
// encodes back to exactly the input bytes; anything else (another exception, a sanitizer
// report, a leak) is a finding. Seeds: tests/fuzz/corpus/frame (make-frame-vectors.mjs --seeds).
#include <cstdlib>
#include <cstring>

#include "net/frame.h"

using namespace knot::net;

static void one(const uint8_t* data, size_t size, const Expect& ex) {
  try {
    const Frame f = decode_frame(data, size, ex);
    if (f.payload.size() != (size_t)f.rows * f.width * 4) std::abort();
    const auto back = encode_frame(f);
    if (back.size() != size || std::memcmp(back.data(), data, size) != 0) std::abort();  // not canonical
  } catch (const FrameError& e) {
    if (std::strncmp(e.what(), "frame: ", 7) != 0) std::abort();
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  one(data, size, {});
  Expect station;
  station.width = 64;
  station.kinds = {Kind::Prefill, Kind::Decode, Kind::End};
  one(data, size, station);
  return 0;
}
