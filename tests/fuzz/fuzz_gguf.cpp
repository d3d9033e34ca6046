// fuzz_gguf.cpp — GGUF header parse, then everything the loaders derive from it:
// config, tokenizer, the required-tensor check, metadata display (knot inspect).
// Input: a GGUF file (seeds: headers of the shared models and synth files).
#include "container/gguf.h"
#include "container/model_io.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  knot::gguf::File f;
  bool ok = false;
  refuse_ok([&] {
    // the header as a prefix of a (claimed) larger file, as range readers do
    f = knot::gguf::parse(data, size, (uint64_t)size, "fuzz.gguf");
    ok = true;
  });
  if (!ok) return 0;
  for (auto& kv : f.kv) refuse_ok([&] { (void)kv.second.to_display(8); });
  refuse_ok([&] {
    knot::ModelConfig c = knot::config_from_gguf(f, "fuzz.gguf");
    std::vector<knot::TensorRef> refs;
    for (auto& t : f.tensors) refs.push_back({knot::knot_tensor_name(t.name), t.name, t.shape});
    (void)knot::check_tensor_set(c, refs, true, "fuzz.gguf");
    (void)knot::config_to_json(c);
  });
  refuse_ok([&] { (void)knot::tokenizer_from_gguf(f, "fuzz.gguf"); });
  return 0;
}
