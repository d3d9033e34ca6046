// convert.cpp — GGUF -> .knot conversion with optional re-quantization.
#include "container/convert.h"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>

#include <sys/stat.h>

#include "container/gguf.h"
#include "container/knot.h"
#include "container/model_io.h"

namespace knot {

static bool is_float_type(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

void check_target_type(const std::string& target) {
  if (target.empty() || target == "Q4_K_M" || target == "Q5_K_M" || target == "q4_k_m" || target == "q5_k_m") return;
  DType t;
  try {
    t = dtype_from_name(target);
  } catch (const Error&) {
    fail("unknown target type '" + target + "' (F32 F16 BF16 Q8_0 Q4_0 Q4_K Q5_K Q6_K Q4_K_M Q5_K_M)");
  }
  if (!type_traits(t).storage) fail("type " + target + " is not a storage type");
}

// llama.cpp's rule for which layers get more bits in the _M mixes.
static bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static int layer_of(const std::string& name) {
  if (name.rfind("blk_", 0) != 0) return -1;
  return std::atoi(name.c_str() + 4);
}

static bool has(const std::string& s, const char* sub) { return s.find(sub) != std::string::npos; }

DType choose_tensor_type(const std::string& target_in, const std::string& name, DType src,
                         const std::vector<int64_t>& shape, int n_layer, bool allow_requantize, std::string* note) {
  if (target_in.empty()) return src;
  std::string target = target_in;
  for (char& c : target) c = (char)std::toupper((unsigned char)c);
  // norms, biases, 1-D tensors: tiny and precision-critical
  if (shape.size() < 2 || has(name, "norm")) return is_float_type(src) ? DType::F32 : src;
  if (!is_float_type(src) && !allow_requantize) {
    if (note && target != dtype_name(src))
      *note = name + ": source is " + dtype_name(src) + ", kept (re-quantizing a quantized tensor needs --allow-requantize)";
    return src;
  }
  DType want;
  if (target == "Q4_K_M" || target == "Q5_K_M") {
    want = target == "Q4_K_M" ? DType::Q4_K : DType::Q5_K;
    int il = layer_of(name);
    if (name == "output_weight") want = DType::Q6_K;
    else if (il >= 0 && (has(name, "attn_v_weight") || has(name, "ffn_down_weight")) && use_more_bits(il, n_layer))
      want = DType::Q6_K;
  } else {
    want = dtype_from_name(target);
  }
  const int64_t ne0 = shape[0];
  if (ne0 % type_traits(want).block_elems == 0) return want;
  DType fb = ne0 % QK8_0 == 0 && want != DType::F16 ? DType::Q8_0 : DType::F16;
  if (ne0 % type_traits(fb).block_elems != 0) fb = DType::F16;
  if (note)
    *note = name + ": row length " + std::to_string(ne0) + " is not a multiple of " + dtype_name(want) + "'s block of " +
            std::to_string(type_traits(want).block_elems) + ", stored as " + dtype_name(fb);
  return fb;
}

void convert_row(DType src_t, const void* src, DType dst_t, void* dst, int64_t n, float* scratch) {
  if (src_t == dst_t) {
    std::memcpy(dst, src, row_bytes(src_t, n));
    return;
  }
  const float* f = (const float*)src;
  if (src_t != DType::F32) {
    dequantize_row(src_t, src, scratch, n);
    f = scratch;
  }
  quantize_row(dst_t, f, dst, n);
}

// Same file under two names (or the same name): writing would destroy the source.
static bool same_file(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

ConvertResult convert_gguf_to_knot(const std::string& in, const std::string& out, const ConvertOptions& opts) {
  check_target_type(opts.type);
  if (same_file(in, out) || same_file(in, out + ".tmp"))
    fail(out + ": is the input file " + in + "; refusing to overwrite the source");
  gguf::File f = gguf::parse_file(in);
  ModelConfig cfg = config_from_gguf(f, in);
  TokenizerData tok = tokenizer_from_gguf(f, in);

  ConvertResult res;
  std::vector<KnotTensorDesc> descs;
  std::map<std::string, int> kept;  // quantized sources left as they are, by type
  size_t n_kept = 0;
  for (auto& ti : f.tensors) {
    std::string name = knot_tensor_name(ti.name), note;
    DType t = choose_tensor_type(opts.type, name, ti.type, ti.shape, cfg.n_layer, opts.allow_requantize, &note);
    if (!note.empty() && t == ti.type && !is_float_type(ti.type)) {
      kept[dtype_name(t)]++, n_kept++;  // one summary line instead of a note per tensor
    } else if (!note.empty()) {
      res.notes.push_back(note);
    }
    descs.push_back({name, t, ti.shape});
    res.bytes_in += ti.size;
  }
  if (n_kept) {
    std::string by;
    for (auto& [ty, k] : kept) by += (by.empty() ? "" : ", ") + ty + " x" + std::to_string(k);
    res.notes.push_back("kept " + std::to_string(n_kept) + " quantized tensors as they are (" + by +
                        "); pass --allow-requantize to re-quantize");
  }
  std::vector<std::pair<std::string, std::string>> info = {
      {"source", in.substr(in.find_last_of('/') == std::string::npos ? 0 : in.find_last_of('/') + 1)},
      {"source_format", "gguf v" + std::to_string(f.version)},
      {"requested_type", opts.type.empty() ? "keep" : opts.type}};
  if (auto* v = f.find("general.name"); v && v->type == gguf::VType::STRING) info.push_back({"name", v->s});

  const std::string tmp = out + ".tmp";
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> fp(std::fopen(tmp.c_str(), "wb"), std::fclose);
  if (!fp) fail(tmp + ": cannot create: " + std::strerror(errno));
  try {
    FileSource src(in);
    KnotWriter w(fp.get(), cfg, tok, descs, info);
    uint64_t done = 0;
    for (size_t i = 0; i < f.tensors.size(); i++) {
      const gguf::TensorInfo& ti = f.tensors[i];
      const KnotTensorDesc& d = descs[i];
      if (opts.progress) opts.progress(done, res.bytes_in, d.name);
      const int64_t ne0 = ti.shape[0], nrows = ti.nelements() / ne0;
      const uint64_t abs = f.data_offset + ti.offset;
      // A NaN/Inf value or block scale would make a file verify rejects: refuse here,
      // naming the tensor, row and block.
      const size_t rin = row_bytes(ti.type, ne0, ti.name), rout = row_bytes(d.type, ne0, d.name);
      const int64_t bel = type_traits(ti.type).block_elems;
      auto scan_row = [&](const uint8_t* row, int64_t r) {
        int64_t bad = first_nonfinite(ti.type, row, ne0);
        if (bad < 0) return;
        if (is_float_type(ti.type))
          fail(in + ": tensor " + ti.name + ": non-finite value at row " + std::to_string(r) + ", column " + std::to_string(bad) +
               "; refusing to convert");
        fail(in + ": tensor " + ti.name + ": non-finite block scale at row " + std::to_string(r) + ", block " +
             std::to_string(bad / bel) + " (tensor block " + std::to_string((r * ne0 + bad) / bel) + "); refusing to convert");
      };
      if (d.type == ti.type) {
        // same type: copy through in bounded pieces of whole rows (<= 64 MiB)
        const int64_t step = std::max<int64_t>(1, (int64_t)((64u << 20) / rin));
        std::vector<uint8_t> buf((size_t)(std::min(step, nrows) * (int64_t)rin));
        for (int64_t r0 = 0; r0 < nrows; r0 += step) {
          const int64_t nr = std::min(step, nrows - r0);
          src.read(abs + (uint64_t)r0 * rin, (uint64_t)nr * rin, buf.data());
          for (int64_t r = 0; r < nr; r++) scan_row(buf.data() + (size_t)r * rin, r0 + r);
          w.append(buf.data(), (size_t)nr * rin);
        }
      } else {
        std::vector<uint8_t> rowin(rin), rowout(rout);
        std::vector<float> scratch((size_t)ne0);  // [ne0]
        for (int64_t r = 0; r < nrows; r++) {
          src.read(abs + (uint64_t)r * rin, rin, rowin.data());
          scan_row(rowin.data(), r);
          try {
            convert_row(ti.type, rowin.data(), d.type, rowout.data(), ne0, scratch.data());
          } catch (const Error& e) {
            fail(in + ": tensor " + ti.name + " row " + std::to_string(r) + ": " + e.what());
          }
          w.append(rowout.data(), rout);
        }
      }
      w.end_tensor();
      done += ti.size;
      res.bytes_out += w.tensors()[i].size;
    }
    w.finish();
    if (opts.progress) opts.progress(res.bytes_in, res.bytes_in, "");
    if (std::fclose(fp.release()) != 0) fail(tmp + ": close failed");
    if (std::rename(tmp.c_str(), out.c_str()) != 0) fail(out + ": cannot rename from " + tmp + ": " + std::strerror(errno));
  } catch (...) {
    if (fp) fp.reset();
    std::remove(tmp.c_str());
    throw;
  }
  res.n_tensors = f.tensors.size();
  return res;
}

}  // namespace knot
