// infer_crafted.cpp — the Engine checks the config against the tensors before sizing
// any buffer from it (issue 7): a crafted n_ff or n_layer is an error naming the field
// and its value, never an 8 GB allocation, a bare std::bad_alloc or a length_error.
#include <gtest/gtest.h>

#include <new>
#include <stdexcept>

#include "container_util.h"
#include "infer_util.h"

using namespace knot;
using ctest::contains;
using ctest::error_of;

TEST(Crafted, EngineRefusesFfnWiderThanItsTensors) {
  for (int n_ff : {1 << 24, 1 << 28, INT32_MAX}) {
    Model m = infer_test::synth(infer_test::llama_gqa("Q8_0"));  // a copy: tensors share bytes
    m.config.n_ff = n_ff;
    std::string e = error_of([&] { Engine eng(m, EngineOptions{}); });
    EXPECT_TRUE(contains(e, "tensor blk_0_ffn_gate_weight has shape 256 x 512, the config wants 256 x " +
                                std::to_string(n_ff) + " (n_embd x n_ff)"))
        << e;
  }
}

TEST(Crafted, EngineStopsAtTheFirstMissingLayer) {
  for (int n_layer : {1000000, INT32_MAX}) {
    Model m = infer_test::synth(infer_test::llama_gqa("Q8_0"));
    m.config.n_layer = n_layer;
    std::string e = error_of([&] { Engine eng(m, EngineOptions{}); });
    EXPECT_TRUE(contains(e, "missing tensor blk_2_attn_norm_weight (layer 2")) << e;
  }
}
