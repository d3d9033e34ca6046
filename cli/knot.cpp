// knot.cpp — the `knot` command line: inspect, convert, verify, synth, help.
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>

#include <charconv>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <memory>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "container/convert.h"
#include "container/gguf.h"
#include "container/hash.h"
#include "container/knot.h"
#include "container/loader.h"
#include "container/synth.h"
#include "infer/planner.h"
#include "infer/options.h"

using namespace knot;

__attribute__((weak)) int cmd_generate(int, char**) {
  std::fprintf(stderr, "knot: error: generate is not built into this binary\n");
  return 2;
}

static const char* USAGE =
    "usage: knot <command> [args]\n"
    "\n"
    "commands:\n"
    "  inspect FILE [--kv] [--no-hash]  config, tensor table and totals of a .gguf or .knot\n"
    "                                 (--kv: all GGUF metadata; --no-hash: skip hashing\n"
    "                                 GGUF tensor data, which reads the whole file)\n"
    "  convert IN.gguf OUT.knot [--type T] [--allow-requantize]\n"
    "                                 T: F32 F16 BF16 Q8_0 Q4_0 Q4_K Q5_K Q6_K Q4_K_M Q5_K_M\n"
    "                                 (default: keep the source types; OUT must end in .knot;\n"
    "                                 a NaN/Inf in the source is refused)\n"
    "  verify FILE                    layout, stale check, tensor set and shapes vs config,\n"
    "                                 every hash, NaN/Inf scales\n"
    "  synth --arch llama|qwen2|qwen3 --hidden N --layers N --heads N --kv-heads N --ffn N\n"
    "        --vocab N [--head-dim N] [--vocab-tensor N] [--type T] [--seed S] [--tied] [--ctx N]\n"
    "        [--fast] [--header-only] OUT(.gguf|.knot)\n"
    "                                 deterministic random-weight model (--fast: rows drawn\n"
    "                                 from a pool of quantized blocks, seconds for a 7B shape;\n"
    "                                 --header-only: .gguf header + sparse zero payload);\n"
    "                                 --vocab-from tokenizer.json [--tokenizer-config\n"
    "                                 tokenizer_config.json]: that real byte-level BPE\n"
    "                                 vocabulary (--vocab N then pads it to N tokens)\n"
    "  plan MODEL [--budget 128MB] [--mode resident|fluid] [--context N] [--chunk N]\n"
    "       [--shards N] [--stations N] [--objective memory|latency] [--replicas R]\n"
    "       [--cost FILE] [--fat SIZE,...] [--wrangler DIR [--knot NAME]]\n"
    "                                 mesh topology for a per-isolate memory budget, as JSON,\n"
    "                                 with its estimated decode tok/s and time to first token\n"
    "                                 (--objective: fewest isolates or fastest; --cost: the\n"
    "                                 measured rates, bench/cost-model.json; --wrangler: write\n"
    "                                 one Worker config per isolate; --replicas R: R copies of\n"
    "                                 every station member and shard to fail over to)\n"
    "  tokenize MODEL (-p TEXT | --prompt-file FILE) [--ids] [--no-bos] [--no-special]\n"
    "                                 token ids and pieces (see `knot tokenize --help`)\n"
    "  generate MODEL (-p TEXT | --prompt-file FILE) [options]\n"
    "                                 run a model (see `knot generate --help`)\n"
    "  station MODEL|URL --layers A..B [--role entry|mid|exit] [--port N] [--slice i/n]\n"
    "                                 serve layers [A, B) as a mesh station over HTTP and\n"
    "                                 WebSocket (see `knot station --help`)\n"
    "  help                           this text\n";

static std::string human(uint64_t b) {
  char buf[32];
  if (b >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", b / 1073741824.0);
  else if (b >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", b / 1048576.0);
  else if (b >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else std::snprintf(buf, sizeof buf, "%llu B", (unsigned long long)b);
  return buf;
}

static std::string shape_str(const std::vector<int64_t>& s) {
  std::string o;
  for (size_t i = 0; i < s.size(); i++) o += (i ? " x " : "") + std::to_string(s[i]);
  return o;
}

static void print_config(const ModelConfig& c) {
  std::printf("config:\n");
  std::printf("  arch             %s\n", c.arch.c_str());
  std::printf("  n_embd           %d\n", c.n_embd);
  std::printf("  n_layer          %d\n", c.n_layer);
  std::printf("  n_head           %d\n", c.n_head);
  std::printf("  n_head_kv        %d\n", c.n_head_kv);
  std::printf("  head_dim         %d\n", c.head_dim);
  std::printf("  n_ff             %d\n", c.n_ff);
  std::printf("  n_vocab          %d\n", c.n_vocab);
  std::printf("  n_vocab_tensor   %d\n", c.n_vocab_tensor);
  std::printf("  rope             %s, dims %d, theta %g\n", c.rope_style == RopeStyle::Neox ? "neox" : "norm", c.rope_dims, c.rope_theta);
  std::printf("  rms_eps          %g\n", c.rms_eps);
  std::printf("  n_ctx_train      %d\n", c.n_ctx_train);
  std::printf("  tied_embeddings  %s\n", c.tied_embeddings ? "yes" : "no");
}

static void print_tokenizer(const TokenizerData& t) {
  std::printf("tokenizer:\n");
  std::printf("  model %s%s%s, %zu tokens, %zu merges, bos %d, eos %d, unk %d, pad %d, eot %d, add_bos %s, add_space_prefix %s%s\n",
              t.model.c_str(), t.pre.empty() ? "" : ", pre ", t.pre.c_str(), t.tokens.size(), t.merges.size(), t.bos_id, t.eos_id,
              t.unk_id, t.pad_id, t.eot_id, t.add_bos ? "yes" : "no", t.add_space_prefix ? "yes" : "no",
              t.chat_template.empty() ? "" : ", chat template");
}

struct Row {
  std::string name, type, shape;
  uint64_t bytes;
  std::string hash;
};

static void print_table(const std::vector<Row>& rows) {
  size_t wn = 4, wt = 4, ws = 5;
  for (auto& r : rows) wn = std::max(wn, r.name.size()), wt = std::max(wt, r.type.size()), ws = std::max(ws, r.shape.size());
  std::printf("tensors:\n  %-5s %-*s %-*s %-*s %12s  %s\n", "#", (int)wn, "name", (int)wt, "type", (int)ws, "shape", "bytes", "hash");
  std::map<std::string, std::pair<int, uint64_t>> by_type;
  uint64_t total = 0;
  for (size_t i = 0; i < rows.size(); i++) {
    auto& r = rows[i];
    std::printf("  %-5zu %-*s %-*s %-*s %12llu  %s\n", i, (int)wn, r.name.c_str(), (int)wt, r.type.c_str(), (int)ws, r.shape.c_str(),
                (unsigned long long)r.bytes, r.hash.c_str());
    by_type[r.type].first++;
    by_type[r.type].second += r.bytes;
    total += r.bytes;
  }
  std::printf("totals: %zu tensors, %llu bytes (%s)", rows.size(), (unsigned long long)total, human(total).c_str());
  for (auto& [t, v] : by_type) std::printf(", %s x%d %s", t.c_str(), v.first, human(v.second).c_str());
  std::printf("\n");
}

static bool has_flag(std::vector<std::string>& args, const char* flag) {
  for (size_t i = 0; i < args.size(); i++)
    if (args[i] == flag) {
      args.erase(args.begin() + (long)i);
      return true;
    }
  return false;
}

static std::string take_opt(std::vector<std::string>& args, const char* opt, const std::string& dflt) {
  for (size_t i = 0; i < args.size(); i++)
    if (args[i] == opt) {
      if (i + 1 >= args.size()) usage_fail(std::string("option ") + opt + " needs a value");
      std::string v = args[i + 1];
      args.erase(args.begin() + (long)i, args.begin() + (long)i + 2);
      return v;
    }
  return dflt;
}

// Range-checked, never wrapped by a cast (the option table's reader, core/infer/options.h).
static int64_t parse_int(const std::string& s, const char* opt, int64_t lo = 1, int64_t hi = INT32_MAX) {
  return parse_int_option(opt, s, lo, hi);
}

static std::vector<std::string> rest(int argc, char** argv) { return std::vector<std::string>(argv + 1, argv + argc); }

static void no_unknown_flags(const std::vector<std::string>& args) {
  for (auto& a : args)
    if (a.size() > 1 && a[0] == '-') usage_fail("unknown option " + a + " (see `knot help`)");
}

// Progress on stderr only for a terminal: logs and pipes stay clean.
static std::function<void(uint64_t, uint64_t, const std::string&)> progress_bar(const char* verb) {
  if (!isatty(2)) return {};
  return [verb](uint64_t done, uint64_t total, const std::string& name) {
    int pct = total ? (int)(done * 100 / total) : 100;
    int fill = pct * 30 / 100;
    std::fprintf(stderr, "\r%s [%.*s%*s] %3d%% %-40.40s", verb, fill, "##############################", 30 - fill, "", pct, name.c_str());
    if (done >= total && name.empty()) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };
}

int cmd_inspect(int argc, char** argv) {
  auto args = rest(argc, argv);
  bool all_kv = has_flag(args, "--kv"), do_hash = !has_flag(args, "--no-hash");
  no_unknown_flags(args);
  if (args.size() != 1) usage_fail("usage: knot inspect FILE [--kv] [--no-hash]");
  const std::string path = args[0];
  FileFormat fmt = detect_format(path);
  if (fmt == FileFormat::Gguf) {
    gguf::File f = gguf::parse_file(path);
    std::printf("file: %s\nformat: GGUF v%u, %zu metadata keys, %zu tensors, alignment %llu, data at offset %llu, %llu bytes\n", path.c_str(),
                f.version, f.kv.size(), f.tensors.size(), (unsigned long long)f.alignment, (unsigned long long)f.data_offset,
                (unsigned long long)f.file_size);
    std::printf("metadata:\n");
    for (auto& [k, v] : f.kv) {
      if (!all_kv && v.type == gguf::VType::ARRAY && v.size() > 16)
        std::printf("  %-44s [%s x %zu]\n", k.c_str(), gguf::vtype_name(v.elem), v.size());
      else
        std::printf("  %-44s %s\n", k.c_str(), v.to_display(all_kv ? SIZE_MAX : 8).c_str());
    }
    // a dump should work on any GGUF, even one whose config we cannot run
    try {
      print_config(config_from_gguf(f, path));
    } catch (const Error& e) {
      std::printf("config: unavailable: %s\n", e.what());
    }
    try {
      print_tokenizer(tokenizer_from_gguf(f, path));
    } catch (const Error& e) {
      std::printf("tokenizer: unavailable: %s\n", e.what());
    }
    std::vector<Row> rows;
    FileSource src(path);
    for (auto& t : f.tensors) {
      std::string h = "-";
      if (do_hash) {
        std::vector<uint8_t> buf((size_t)t.size);
        src.read(f.data_offset + t.offset, t.size, buf.data());
        h = hash_hex(hash64(buf.data(), buf.size()));
      }
      rows.push_back({t.name, dtype_name(t.type), shape_str(t.shape), t.size, h});  // GGUF names, as gguf-dump shows them
    }
    print_table(rows);
    return 0;
  }
  if (fmt == FileFormat::Knot) {
    FileSource src(path);
    KnotHeader h = read_knot_header(src);
    std::printf("file: %s\nformat: knot v%u, schema %d, metaLen %u, codec marker at %llu, payload at offset %llu, %llu bytes\n", path.c_str(),
                h.version, h.schema, h.meta_len, (unsigned long long)h.align, (unsigned long long)h.payload_offset,
                (unsigned long long)h.file_size);
    print_config(h.config);
    auto meta = nlohmann::json::parse(h.meta_json, nullptr, false);
    if (meta.is_object() && meta.contains("info") && meta["info"].is_object()) {
      std::printf("info:\n");
      for (auto& [k, v] : meta["info"].items()) std::printf("  %-16s %s\n", k.c_str(), v.is_string() ? v.get<std::string>().c_str() : v.dump().c_str());
    }
    std::printf("tokenizer blob: offset %llu, %llu bytes, hash %s\n", (unsigned long long)h.tokenizer.offset,
                (unsigned long long)h.tokenizer.size, hash_hex(h.tokenizer.hash).c_str());
    print_tokenizer(read_knot_tokenizer(src, h, true));
    std::vector<Row> rows;
    for (auto& t : h.tensors) {
      std::string hs = hash_hex(t.hash);
      if (t.chunk_rows) hs += " (+" + std::to_string(t.chunk_hashes.size()) + " chunk hashes / " + std::to_string(t.chunk_rows) + " rows)";
      rows.push_back({t.name, dtype_name(t.type), shape_str(t.shape), t.size, hs});
    }
    print_table(rows);
    return 0;
  }
  fail(path + ": bad magic: neither a GGUF nor a .knot file");
}

int cmd_convert(int argc, char** argv) {
  auto args = rest(argc, argv);
  ConvertOptions o;
  o.type = take_opt(args, "--type", "");
  o.allow_requantize = has_flag(args, "--allow-requantize");
  no_unknown_flags(args);
  if (args.size() != 2) usage_fail("usage: knot convert IN.gguf OUT.knot [--type T] [--allow-requantize]");
  const FileFormat fmt = detect_format(args[0]);
  if (fmt == FileFormat::Knot)
    fail(args[0] + ": already a .knot file (convert reads GGUF; to change types, convert from the source GGUF)");
  if (fmt != FileFormat::Gguf) fail(args[0] + ": not a GGUF file (bad magic)");
  const std::string& out = args[1];
  if (out.size() < 5 || out.compare(out.size() - 5, 5, ".knot") != 0)
    fail(out + ": the output name must end in .knot (refusing to write a .knot file under another extension)");
  o.progress = progress_bar("converting");
  ConvertResult r = convert_gguf_to_knot(args[0], out, o);
  for (auto& n : r.notes) std::fprintf(stderr, "note: %s\n", n.c_str());
  std::printf("%s: %zu tensors, %s -> %s\n", args[1].c_str(), r.n_tensors, human(r.bytes_in).c_str(), human(r.bytes_out).c_str());
  return 0;
}

int cmd_verify(int argc, char** argv) {
  auto args = rest(argc, argv);
  no_unknown_flags(args);
  if (args.size() != 1) usage_fail("usage: knot verify FILE");
  const std::string path = args[0];
  FileFormat fmt = detect_format(path);
  std::vector<std::string> problems;
  size_t n = 0;
  if (fmt == FileFormat::Knot) {
    FileSource src(path);
    auto bar = progress_bar("verifying");
    problems = verify_knot(src, [&](size_t i, size_t n) {
      if (bar) bar(i, n, i < n ? "tensor " + std::to_string(i) : "");
    });
    n = read_knot_header(src).tensors.size();
  } else if (fmt == FileFormat::Gguf) {
    gguf::File f = gguf::parse_file(path);  // layout: ranges, overlaps, types, row lengths
    const ModelConfig cfg = config_from_gguf(f, path);
    tokenizer_from_gguf(f, path);
    std::vector<TensorRef> refs;
    for (auto& t : f.tensors) refs.push_back({knot_tensor_name(t.name), t.name, t.shape});
    problems = check_tensor_set(cfg, refs, true, path);
    FileSource src(path);
    for (auto& t : f.tensors) {
      std::vector<uint8_t> buf((size_t)t.size);
      src.read(f.data_offset + t.offset, t.size, buf.data());
      int64_t bad = first_nonfinite_block(t.type, buf.data(), t.size);
      if (bad >= 0) problems.push_back(path + ": tensor " + t.name + ": non-finite scale or value at block " + std::to_string(bad));
    }
    n = f.tensors.size();
  } else {
    fail(path + ": bad magic: neither a GGUF nor a .knot file");
  }
  if (!problems.empty()) {
    for (auto& p : problems) std::fprintf(stderr, "knot: error: %s\n", p.c_str());
    std::fprintf(stderr, "knot: error: %s: %zu problem(s)\n", path.c_str(), problems.size());
    return 1;
  }
  std::printf("%s: ok (%zu tensors%s)\n", path.c_str(), n, fmt == FileFormat::Knot ? ", layout, hashes and scales verified" : ", layout and scales verified");
  return 0;
}

int cmd_synth(int argc, char** argv) {
  auto args = rest(argc, argv);
  SynthOptions o;
  o.arch = take_opt(args, "--arch", o.arch);
  o.hidden = (int)parse_int(take_opt(args, "--hidden", std::to_string(o.hidden)), "--hidden");
  o.layers = (int)parse_int(take_opt(args, "--layers", std::to_string(o.layers)), "--layers");
  o.heads = (int)parse_int(take_opt(args, "--heads", std::to_string(o.heads)), "--heads");
  o.kv_heads = (int)parse_int(take_opt(args, "--kv-heads", std::to_string(o.kv_heads)), "--kv-heads");
  o.ffn = (int)parse_int(take_opt(args, "--ffn", std::to_string(o.ffn)), "--ffn");
  o.head_dim = (int)parse_int(take_opt(args, "--head-dim", "0"), "--head-dim", 0);
  o.vocab_from = take_opt(args, "--vocab-from", "");
  o.tokenizer_config = take_opt(args, "--tokenizer-config", "");
  // with --vocab-from, --vocab only pads (default: the file's token count)
  o.vocab = (int)parse_int(take_opt(args, "--vocab", o.vocab_from.empty() ? std::to_string(o.vocab) : "0"), "--vocab",
                           o.vocab_from.empty() ? 1 : 0);
  o.ctx = (int)parse_int(take_opt(args, "--ctx", std::to_string(o.ctx)), "--ctx", 0);
  o.vocab_tensor = (int)parse_int(take_opt(args, "--vocab-tensor", "0"), "--vocab-tensor", 0);
  o.type = take_opt(args, "--type", o.type);
  o.seed = (uint64_t)parse_int(take_opt(args, "--seed", "1"), "--seed", 0, INT64_MAX);
  o.tied = has_flag(args, "--tied");
  o.fast = has_flag(args, "--fast");
  o.header_only = has_flag(args, "--header-only");
  no_unknown_flags(args);
  if (args.size() != 1) usage_fail("usage: knot synth --arch llama|qwen2|qwen3 --hidden N --layers N --heads N --kv-heads N --ffn N --vocab N [--type T] [--seed S] OUT");
  o.progress = progress_bar("synth");
  o.vocab = synth_model(o, args[0]).n_vocab;
  std::printf("%s: synthetic %s, hidden %d, %d layers, %d/%d heads, ffn %d, vocab %d%s%s, %s, seed %llu\n", args[0].c_str(), o.arch.c_str(),
              o.hidden, o.layers, o.heads, o.kv_heads, o.ffn, o.vocab, o.vocab_from.empty() ? "" : " from ", o.vocab_from.c_str(),
              o.type.c_str(), (unsigned long long)o.seed);
  return 0;
}

// Reads the header only (growing the prefix as the parser asks), plans, prints JSON.
int cmd_plan(int argc, char** argv) {
  auto args = rest(argc, argv);
  PlanOptions o;
  o.budget = parse_bytes(take_opt(args, "--budget", "128MB"), "--budget");
  o.mode = take_opt(args, "--mode", o.mode);
  o.context = (int)parse_int(take_opt(args, "--context", "0"), "--context", 0, 1 << 20);
  o.chunk = (int)parse_int(take_opt(args, "--chunk", "0"), "--chunk", 0, 4096);
  o.shards = (int)parse_int(take_opt(args, "--shards", "0"), "--shards", 0, 1 << 24);
  o.stations = (int)parse_int(take_opt(args, "--stations", "0"), "--stations", 0, 1 << 16);
  o.objective = take_opt(args, "--objective", o.objective);
  o.replicas = (int)parse_int(take_opt(args, "--replicas", "1"), "--replicas", 1, 16);
  const std::string fat = take_opt(args, "--fat", "");
  if (!fat.empty()) o.fat = parse_byte_list(fat, "--fat");
  const std::string cost = take_opt(args, "--cost", "");
  if (!cost.empty()) {
    try {
      o.cost = cost_model_from_json(read_file(cost));
    } catch (const Error& e) {
      fail(cost + ": " + e.what());
    }
  }
  const std::string wrangler = take_opt(args, "--wrangler", "");
  const std::string key = take_opt(args, "--knot", "");
  no_unknown_flags(args);
  if (args.size() != 1) usage_fail("usage: knot plan MODEL [--budget 128MB] [--mode resident|fluid] [--context N] [--chunk N] [--shards N] [--stations N] [--objective memory|latency] [--replicas R] [--cost FILE] [--fat SIZE,...] [--wrangler DIR]");
  const std::string path = args[0];
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> fp(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!fp) fail(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (fstat(fileno(fp.get()), &st) != 0 || S_ISDIR(st.st_mode)) fail(path + ": is a directory or unreadable");
  const uint64_t size = (uint64_t)st.st_size;
  std::vector<uint8_t> buf;
  uint64_t want = std::min<uint64_t>(size, 256 * 1024);
  const std::string name = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  for (;;) {
    buf.resize((size_t)want);
    if (std::fseek(fp.get(), 0, SEEK_SET) != 0 || std::fread(buf.data(), 1, buf.size(), fp.get()) != buf.size())
      fail(path + ": short read of the header (" + std::to_string(want) + " bytes)");
    uint64_t need = 0;
    PlanModel m = plan_model_from_header(buf.data(), buf.size(), size, name, &need);
    if (need) {
      if (need <= want) fail(path + ": header parser asked for " + std::to_string(need) + " bytes after " + std::to_string(want));
      want = std::min(need, size);
      continue;
    }
    const std::string plan = plan_json(m, o);
    if (!key.empty() && wrangler.empty()) fail("--knot goes with --wrangler DIR");
    if (!wrangler.empty()) write_wrangler_configs(plan, wrangler, key);
    std::fputs(plan.c_str(), stdout);
    return std::fflush(stdout) == 0 ? 0 : 1;
  }
}

int main(int argc, char** argv) {
  // a closed stdout (`knot generate ... | head`) shows up as a write error, not a kill
  std::signal(SIGPIPE, SIG_IGN);
  if (argc < 2) {
    std::fputs(USAGE, stderr);
    return 2;
  }
  std::string cmd = argv[1];
  try {
    if (cmd == "help" || cmd == "--help" || cmd == "-h") {
      std::fputs(USAGE, stdout);
      return 0;
    }
    if (cmd == "inspect") return cmd_inspect(argc - 1, argv + 1);
    if (cmd == "convert") return cmd_convert(argc - 1, argv + 1);
    if (cmd == "verify") return cmd_verify(argc - 1, argv + 1);
    if (cmd == "synth") return cmd_synth(argc - 1, argv + 1);
    if (cmd == "plan") return cmd_plan(argc - 1, argv + 1);
    if (cmd == "generate") return cmd_generate(argc - 1, argv + 1);
    if (cmd == "tokenize") return cmd_tokenize(argc - 1, argv + 1);
    if (cmd == "station") return cmd_station(argc - 1, argv + 1);
    std::fprintf(stderr, "knot: error: unknown command '%s'\n%s", cmd.c_str(), USAGE);
    return 2;
  } catch (const UsageError& e) {  // usage errors exit 2, as in node bin/knotwork.mjs
    std::fprintf(stderr, "knot: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "knot: error: %s\n", e.what());
    return 1;
  }
}
