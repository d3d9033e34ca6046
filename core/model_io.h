// model_io.h — load a Model from a .gguf or .knot file (chosen by magic), and map
// GGUF metadata to ModelConfig / TokenizerData.
// Contract: errors name the file and what is wrong; a missing required config key,
// a tensor whose bytes run past the file, an unknown tensor type all throw knot::Error.
#pragma once
#include <string>

#include "model.h"

namespace knot {

struct LoadOptions {
  bool load_tensors = true;   // false: config + tokenizer + tensor table only (no bytes)
  bool verify_hashes = true;  // .knot: check every tensor's content hash on read
};

// Reads a .gguf or .knot file from disk into a Model (tensor names in knot convention).
Model load_model_file(const std::string& path, const LoadOptions& opts = {});

}  // namespace knot
