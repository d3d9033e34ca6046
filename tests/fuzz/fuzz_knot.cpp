// fuzz_knot.cpp — .knot header parse + tensor table + row plans: the header through
// the pure parser and through a ByteSource, the required-tensor check, row-range reads
// (chunk-hash and whole-tensor verification, and unverified), the tokenizer blob, and
// the full `knot verify` pass. Input: a .knot file (seeds: small synth files).
#include "container/knot.h"
#include "container/model_io.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  knot::KnotHeader h;
  bool ok = false;
  refuse_ok([&] {
    // the two-fetch protocol: first a short prefix, then what the parser asks for
    knot::HeaderParse hp = knot::parse_knot_header(data, std::min<size_t>(size, 16), size, "fuzz.knot");
    if (!hp.complete) {
      if (hp.need > size) return;
      hp = knot::parse_knot_header(data, (size_t)hp.need, size, "fuzz.knot");
    }
    if (!hp.complete) return;
    h = std::move(hp.header);
    ok = true;
  });
  if (!ok) return 0;
  knot::MemorySource src(data, size, "fuzz.knot");
  refuse_ok([&] { (void)knot::read_knot_header(src, 32); });
  std::vector<knot::TensorRef> refs;
  for (auto& t : h.tensors) refs.push_back({t.name, t.name, t.shape});
  refuse_ok([&] { (void)knot::check_tensor_set(h.config, refs, false, h.what); });
  refuse_ok([&] { (void)knot::read_knot_tokenizer(src, h, false); });
  for (const knot::KnotTensor& t : h.tensors) {
    const int64_t n = t.nrows();
    // row plans: first row, last row, a middle range across a chunk edge, everything
    const int64_t plans[][2] = {{0, 1}, {n - 1, n}, {n / 3, n / 3 + 300}, {0, n}, {n, n + 1}, {-1, 2}};
    for (auto& pr : plans) {
      for (bool verify : {true, false}) {
        refuse_ok([&] {
          const uint64_t rs = t.row_size();
          if (pr[0] < 0 || pr[1] < pr[0] || pr[1] > n) {
            uint8_t dummy[1];
            knot::read_knot_rows(src, h, t, pr[0], pr[1], dummy, verify);  // must refuse
            return;
          }
          std::vector<uint8_t> dst((size_t)((uint64_t)(pr[1] - pr[0]) * rs));
          knot::read_knot_rows(src, h, t, pr[0], pr[1], dst.data(), verify);
        });
      }
    }
  }
  refuse_ok([&] { (void)knot::verify_knot(src); });
  refuse_ok([&] { (void)knot::load_knot(src); });
  return 0;
}
