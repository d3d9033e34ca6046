// loader.h — open a model file from disk: detect its format by magic and load a .gguf or
// a .knot into a Model (tensor names in knot convention). Sits above both containers
// (gguf + model_io, knot), so neither of them includes the other.
// Contract: errors name the file and what is wrong (bad magic, a directory, unreadable).
#pragma once
#include <string>

#include "container/model.h"
#include "container/model_io.h"

namespace knot {

enum class FileFormat { Unknown, Gguf, Knot };
FileFormat detect_format(const std::string& path);  // by magic; throws if unreadable

// A whole file's bytes (prompt files, tokenizer.json); errors name the file: a directory,
// cannot open (with errno's text), read error.
std::string read_file(const std::string& path);

// Reads a .gguf or .knot file from disk into a Model.
Model load_model_file(const std::string& path, const LoadOptions& opts = {});

}  // namespace knot
