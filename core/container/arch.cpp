// arch.cpp — the tensor table and the architecture table (see arch.h).
#include "container/arch.h"

namespace knot {

namespace {

constexpr unsigned FFN_IN = PHASE_FFN_GATE | PHASE_FFN_UP;  // ffn_norm feeds both

// One row per tensor any architecture has, indexed by TensorId.
const TensorInfo kTensors[kTensorIds] = {
    // id                     base           kind      layer  phases          shape                           slice cut        over                synth
    {TensorId::TOKEN_EMBD,   "token_embd",  "weight", false, PHASE_EMBED,    {Dim::Embd, Dim::VocabTensor},  SliceCut::Whole, SliceOver::None,    SynthInit::Embedding},
    {TensorId::OUTPUT_NORM,  "output_norm", "weight", false, PHASE_OUTPUT,   {Dim::Embd, Dim::None},         SliceCut::Whole, SliceOver::None,    SynthInit::Ones},
    {TensorId::OUTPUT,       "output",      "weight", false, PHASE_OUTPUT,   {Dim::Embd, Dim::VocabTensor},  SliceCut::Whole, SliceOver::None,    SynthInit::FanIn},
    {TensorId::ATTN_NORM,    "attn_norm",   "weight", true,  PHASE_ATTN,     {Dim::Embd, Dim::None},         SliceCut::Whole, SliceOver::None,    SynthInit::Ones},
    {TensorId::ATTN_Q,       "attn_q",      "weight", true,  PHASE_ATTN,     {Dim::Embd, Dim::QDim},         SliceCut::Rows,  SliceOver::Heads,   SynthInit::FanIn},
    {TensorId::ATTN_K,       "attn_k",      "weight", true,  PHASE_ATTN,     {Dim::Embd, Dim::KvDim},        SliceCut::Rows,  SliceOver::KvHeads, SynthInit::FanIn},
    {TensorId::ATTN_V,       "attn_v",      "weight", true,  PHASE_ATTN,     {Dim::Embd, Dim::KvDim},        SliceCut::Rows,  SliceOver::KvHeads, SynthInit::FanIn},
    {TensorId::ATTN_OUT,     "attn_output", "weight", true,  PHASE_ATTN,     {Dim::QDim, Dim::Embd},         SliceCut::Cols,  SliceOver::Heads,   SynthInit::FanInResidual},
    {TensorId::ATTN_Q_BIAS,  "attn_q",      "bias",   true,  PHASE_ATTN,     {Dim::QDim, Dim::None},         SliceCut::Elems, SliceOver::Heads,   SynthInit::Bias},
    {TensorId::ATTN_K_BIAS,  "attn_k",      "bias",   true,  PHASE_ATTN,     {Dim::KvDim, Dim::None},        SliceCut::Elems, SliceOver::KvHeads, SynthInit::Bias},
    {TensorId::ATTN_V_BIAS,  "attn_v",      "bias",   true,  PHASE_ATTN,     {Dim::KvDim, Dim::None},        SliceCut::Elems, SliceOver::KvHeads, SynthInit::Bias},
    {TensorId::ATTN_Q_NORM,  "attn_q_norm", "weight", true,  PHASE_ATTN,     {Dim::HeadDim, Dim::None},      SliceCut::Whole, SliceOver::None,    SynthInit::Ones},
    {TensorId::ATTN_K_NORM,  "attn_k_norm", "weight", true,  PHASE_ATTN,     {Dim::HeadDim, Dim::None},      SliceCut::Whole, SliceOver::None,    SynthInit::Ones},
    {TensorId::FFN_NORM,     "ffn_norm",    "weight", true,  FFN_IN,         {Dim::Embd, Dim::None},         SliceCut::Whole, SliceOver::None,    SynthInit::Ones},
    {TensorId::FFN_GATE,     "ffn_gate",    "weight", true,  PHASE_FFN_GATE, {Dim::Embd, Dim::Ff},           SliceCut::Rows,  SliceOver::Ffn,     SynthInit::FanIn},
    {TensorId::FFN_UP,       "ffn_up",      "weight", true,  PHASE_FFN_UP,   {Dim::Embd, Dim::Ff},           SliceCut::Rows,  SliceOver::Ffn,     SynthInit::FanIn},
    {TensorId::FFN_DOWN,     "ffn_down",    "weight", true,  PHASE_FFN_DOWN, {Dim::Ff, Dim::Embd},           SliceCut::Cols,  SliceOver::Ffn,     SynthInit::FanInResidual},
};

using T = TensorId;
using N = Need;

// The model-level tensors and the llama block every architecture here shares.
std::vector<ArchTensor> block(std::vector<ArchTensor> attn_extra) {
  std::vector<ArchTensor> v = {{T::TOKEN_EMBD, N::Required}, {T::OUTPUT_NORM, N::Required},
                               {T::OUTPUT, N::UnlessTied},   {T::ATTN_NORM, N::Required},
                               {T::ATTN_Q, N::Required},     {T::ATTN_K, N::Required},
                               {T::ATTN_V, N::Required}};
  v.insert(v.end(), attn_extra.begin(), attn_extra.end());
  for (ArchTensor t : {ArchTensor{T::ATTN_OUT, N::Required}, {T::FFN_NORM, N::Required}, {T::FFN_GATE, N::Required},
                       {T::FFN_UP, N::Required}, {T::FFN_DOWN, N::Required}})
    v.push_back(t);
  return v;
}

const std::vector<ArchInfo> kArchs = {
    // name     rope style        theta    rms eps  tensors (file order)
    {"llama", RopeStyle::Norm, 10000.f, 1e-5f,
     block({{T::ATTN_Q_BIAS, N::Optional}, {T::ATTN_K_BIAS, N::Optional}, {T::ATTN_V_BIAS, N::Optional}})},
    {"qwen2", RopeStyle::Neox, 1000000.f, 1e-6f,
     block({{T::ATTN_Q_BIAS, N::Expected}, {T::ATTN_K_BIAS, N::Expected}, {T::ATTN_V_BIAS, N::Expected}})},
    {"qwen3", RopeStyle::Neox, 1000000.f, 1e-6f,
     block({{T::ATTN_Q_NORM, N::Required}, {T::ATTN_K_NORM, N::Required}})},
};

}  // namespace

const char* phase_name(unsigned p) {
  switch (p) {
    case PHASE_EMBED: return "embed";
    case PHASE_ATTN: return "attn";
    case PHASE_FFN_GATE: return "ffn_gate";
    case PHASE_FFN_UP: return "ffn_up";
    case PHASE_FFN_DOWN: return "ffn_down";
    case PHASE_OUTPUT: return "output";
  }
  return "unknown";
}

const char* dim_name(Dim d) {
  static const char* const names[] = {"", "n_embd", "n_head*head_dim", "n_head_kv*head_dim", "n_ff", "n_vocab_tensor", "head_dim"};
  return names[(int)d];
}

int64_t dim_value(Dim d, const ModelConfig& c) {
  switch (d) {
    case Dim::None: return 1;
    case Dim::Embd: return c.n_embd;
    case Dim::QDim: return (int64_t)c.n_head * c.head_dim;
    case Dim::KvDim: return (int64_t)c.n_head_kv * c.head_dim;
    case Dim::Ff: return c.n_ff;
    case Dim::VocabTensor: return c.n_vocab_tensor;
    case Dim::HeadDim: return c.head_dim;
  }
  return 0;
}

const TensorInfo& tensor_info(TensorId id) { return kTensors[(int)id]; }

const std::vector<ArchInfo>& all_archs() { return kArchs; }

const ArchInfo* find_arch(const std::string& name) {
  for (const ArchInfo& a : kArchs)
    if (name == a.name) return &a;
  return nullptr;
}

std::string supported_archs() {
  std::string s;
  for (const ArchInfo& a : kArchs) s += (s.empty() ? "" : ", ") + std::string(a.name);
  return s;
}

const ArchInfo& arch_info(const std::string& name, const std::string& what) {
  const ArchInfo* a = find_arch(name);
  if (!a) fail(what + ": unsupported architecture '" + name + "' (supported: " + supported_archs() + ")");
  return *a;
}

std::string tensor_knot_name(TensorId id, int layer) {
  const TensorInfo& t = tensor_info(id);
  const std::string pre = t.per_layer ? "blk_" + std::to_string(layer) + "_" : "";
  return pre + t.base + "_" + t.kind;
}

std::string tensor_gguf_name(TensorId id, int layer) {
  const TensorInfo& t = tensor_info(id);
  const std::string pre = t.per_layer ? "blk." + std::to_string(layer) + "." : "";
  return pre + t.base + "." + t.kind;
}

std::vector<int64_t> tensor_shape(TensorId id, const ModelConfig& c) {
  const TensorInfo& t = tensor_info(id);
  std::vector<int64_t> s = {dim_value(t.shape[0], c)};
  if (t.shape[1] != Dim::None) s.push_back(dim_value(t.shape[1], c));
  return s;
}

std::string tensor_dims_text(TensorId id) {
  const TensorInfo& t = tensor_info(id);
  std::string s = dim_name(t.shape[0]);
  if (t.shape[1] != Dim::None) s += std::string(" x ") + dim_name(t.shape[1]);
  return s;
}

std::vector<std::string> phase_tensor_names(const ArchInfo& a, unsigned phase, int layer) {
  std::vector<std::string> v;
  for (const ArchTensor& at : a.tensors) {
    const TensorInfo& t = tensor_info(at.id);
    if (t.per_layer == (layer >= 0) && (t.phases & phase)) v.push_back(tensor_knot_name(at.id, layer));
  }
  return v;
}

}  // namespace knot
