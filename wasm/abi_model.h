// abi_model.h — model handles shared by the wasm/abi*.cpp units.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "abi_internal.h"
#include "container/knot.h"
#include "container/model.h"
#include "text/generator.h"
#include "text/vocab.h"

namespace kw {

struct TableEntry {
  std::string name;     // knot name
  uint64_t offset = 0;  // absolute in the file
  uint64_t size = 0;
  uint64_t hash = 0;       // 0: none to verify
  bool loaded = false;
  bool tokenizer = false;  // .knot tokenizer blob, not a tensor
  std::vector<int64_t> shape;  // full shape (the Tensor's shape shrinks for a row range; Tensor::row0)
};

struct ModelEntry {
  std::string what;    // file name for messages
  std::string format;  // "gguf" | "knot"
  knot::Model model;
  std::vector<TableEntry> table;
  std::unique_ptr<knot::Tokenizer> tok;
  std::vector<uint8_t> tok_blob;  // .knot: tokenizer JSON until parsed
  std::unique_ptr<knot::KnotHeader> knot_header;  // .knot: for verified row-range reads
  bool ready = false;
  bool text_only = false;  // kw_model_text_finish: tokenizer + config, no tensors (mesh coordinator)
};

// Index of a tensor in m.table; throws naming the model when absent.
size_t table_index(const ModelEntry& m, uint32_t i, const char* fn);

extern Table<ModelEntry> g_models;

// Throws (HandleError / knot::Error) unless h is a fully loaded model.
ModelEntry& ready_model(int h, const char* fn);

// A core object (Generator, Station) bound to the model handle it reads: the model is
// looked up by handle per call, so a freed model is a handle error, never a dangling
// reference.
template <class T>
struct Bound {
  int model = 0;
  std::unique_ptr<T> obj;
};

// Sessions reference their model; freeing a model frees its sessions first.
void free_sessions_of(int model_handle);
// Drafters (abi_draft.cpp) run their draft model's weights; freeing the model frees them.
void free_drafters_of(int model_handle);
// A live session's weights never change under it: replacing, evicting or cutting a
// tensor of a model with sessions is refused (fn names the call, what the tensor).
void refuse_if_sessions(int model_handle, const ModelEntry& m, const char* fn, const std::string& what);

// Sampling drafts (abi_session.cpp): a generator handle (0: none) and the proposal layout of
// kw_session_propose / kw_drafter_propose_with (wasm/abi.h).
knot::Generator* generator_arg(int32_t g, const char* fn);
void set_proposal_result(const std::vector<int32_t>& ids, const std::vector<knot::Sampler::Dist>& q);

}  // namespace kw
