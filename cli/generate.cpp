// knot generate — run a model locally and stream the continuation of a prompt.
#include <sys/stat.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "kernels/common.h"
#include "infer/generate.h"
#include "container/loader.h"
#include "text/vocab.h"

namespace {

void usage(FILE* f) {
  std::fprintf(f,
               "usage: knot generate MODEL (-p TEXT | --prompt-file FILE) [-n N] [options]\n"
               "  MODEL                .gguf or .knot file\n"
               "  -p, --prompt TEXT    prompt (not echoed)\n"
               "  --prompt-file FILE   prompt from a file, bytes as they are\n"
               "  -n, --n-predict N    tokens to generate, 0..1048576 (default 128)\n"
               "  --temp T             temperature >= 0, 0 = greedy (default 0.8)\n"
               "  --top-k K            >= 0 (default 40, 0 = off)\n"
               "  --top-p P            in (0, 1] (default 0.95, 1 = off)\n"
               "  --min-p M            in [0, 1] (default 0.05, 0 = off)\n"
               "  --repeat-penalty R   > 0 (default 1.0 = off)\n"
               "  --seed S             sampler seed, 0..2^53-1 (default 0)\n"
               "  --ctx N              context length, 1..1048576 (default min(train ctx, 2048))\n"
               "  --chunk N            prefill chunk size, 1..4096 (default 64)\n"
               "  --stop TEXT          stop string (repeatable)\n"
               "  --ignore-eos         keep generating past end-of-generation tokens\n"
               "  --reference          reference mode: dequantized f32 math, f32 KV cache\n"
               "  --ids                print only a JSON array of the generated ids\n");
}

// Option values: the same grammar, ranges and messages as bin/knotwork.mjs, so both CLIs
// accept and refuse exactly the same command lines.
struct UsageError : knot::Error {
  using knot::Error::Error;
};

[[noreturn]] void usage_fail(const std::string& msg) { throw UsageError(msg); }

bool is_int_text(const std::string& v) {  // -?[0-9]+
  size_t i = v.size() > 1 && v[0] == '-' ? 1 : 0;
  if (i >= v.size()) return false;
  for (; i < v.size(); i++)
    if (v[i] < '0' || v[i] > '9') return false;
  return true;
}

bool is_num_text(const std::string& v) {  // [+-]?(d+(.d*)?|.d+)([eE][+-]?d+)?
  size_t i = 0, n = v.size();
  auto digits = [&] {
    size_t s = i;
    while (i < n && v[i] >= '0' && v[i] <= '9') i++;
    return i - s;
  };
  if (i < n && (v[i] == '+' || v[i] == '-')) i++;
  size_t m = digits();
  if (i < n && v[i] == '.') i++, m += digits();
  if (m == 0) return false;
  if (i < n && (v[i] == 'e' || v[i] == 'E')) {
    i++;
    if (i < n && (v[i] == '+' || v[i] == '-')) i++;
    if (digits() == 0) return false;
  }
  return i == n;
}

long long int_value(const std::string& flag, const std::string& v, long long lo, long long hi) {
  if (!is_int_text(v)) usage_fail("option " + flag + ": '" + v + "' is not an integer");
  long long x = 0;
  auto r = std::from_chars(v.data(), v.data() + v.size(), x);
  if (r.ec != std::errc() || x < lo || x > hi)
    usage_fail(flag + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + v);
  return x;
}

double num_value(const std::string& flag, const std::string& v) {
  const double d = is_num_text(v) ? std::strtod(v.c_str(), nullptr) : NAN;
  if (!std::isfinite(d)) usage_fail("option " + flag + ": '" + v + "' is not a number");
  return d;
}

std::string read_prompt_file(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) knot::fail(path + ": is a directory");
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> fp(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!fp) knot::fail(path + ": cannot open: " + std::strerror(errno));
  std::string s;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, fp.get())) > 0) s.append(buf, n);
  if (std::ferror(fp.get())) knot::fail(path + ": read error: " + std::strerror(errno));
  return s;
}

constexpr long long MAX_TOKENS = 1 << 20;

}  // namespace

int cmd_generate(int argc, char** argv) {
  std::string path, prompt;
  bool have_prompt = false, ids_only = false, stdout_closed = false;
  knot::EngineOptions eo;
  knot::GenerateParams gp;
  try {
    for (int i = 1; i < argc; i++) {
      const std::string a = argv[i];
      auto val = [&]() -> std::string {
        if (i + 1 >= argc) usage_fail("option " + a + " needs a value");
        return argv[++i];
      };
      auto integer = [&](long long lo, long long hi) { return int_value(a, val(), lo, hi); };
      if (a == "-h" || a == "--help") {
        usage(stdout);
        return 0;
      } else if (a == "-p" || a == "--prompt") {
        if (have_prompt) usage_fail("give the prompt once (-p or --prompt-file)");
        prompt = val();
        have_prompt = true;
      } else if (a == "--prompt-file") {
        if (have_prompt) usage_fail("give the prompt once (-p or --prompt-file)");
        prompt = read_prompt_file(val());
        have_prompt = true;
      } else if (a == "-n" || a == "--n-predict") {
        gp.n_predict = (int)integer(0, MAX_TOKENS);
      } else if (a == "--temp") {
        const std::string v = val();
        gp.sampling.temperature = (float)num_value(a, v);
        if (!(gp.sampling.temperature >= 0)) usage_fail(a + " must be a number >= 0, got " + v);
      } else if (a == "--top-k") {
        gp.sampling.top_k = (int)integer(0, INT32_MAX);
      } else if (a == "--top-p") {
        const std::string v = val();
        const double x = num_value(a, v);
        if (!(x > 0 && x <= 1)) usage_fail(a + " must be a number in (0, 1], got " + v);
        gp.sampling.top_p = (float)x;
      } else if (a == "--min-p") {
        const std::string v = val();
        const double x = num_value(a, v);
        if (!(x >= 0 && x <= 1)) usage_fail(a + " must be a number in [0, 1], got " + v);
        gp.sampling.min_p = (float)x;
      } else if (a == "--repeat-penalty") {
        const std::string v = val();
        const double x = num_value(a, v);
        if (!(x > 0)) usage_fail(a + " must be a number > 0, got " + v);
        gp.sampling.repeat_penalty = (float)x;
      } else if (a == "--seed") {
        // < 2^53: the wasm CLI carries the seed as a JS number
        gp.sampling.seed = (uint64_t)integer(0, (1LL << 53) - 1);
      } else if (a == "--ctx") {
        eo.n_ctx = (int)integer(1, MAX_TOKENS);
      } else if (a == "--chunk") {
        eo.chunk = (int)integer(1, 4096);
      } else if (a == "--stop") {
        gp.stop.push_back(val());
      } else if (a == "--ignore-eos") {
        gp.ignore_eos = true;
      } else if (a == "--reference") {
        eo.mode = knot::Mode::Reference;
      } else if (a == "--ids") {
        ids_only = true;
      } else if (!a.empty() && a[0] == '-') {
        usage_fail("unknown option " + a + " (see knot generate --help)");
      } else if (path.empty()) {
        path = a;
      } else {
        usage_fail("unexpected argument '" + a + "'");
      }
    }
    if (path.empty()) {
      usage(stderr);
      return 2;
    }
    if (!have_prompt) usage_fail("no prompt: pass -p TEXT or --prompt-file FILE");

    knot::Model model = knot::load_model_file(path);
    if (eo.n_ctx > 0 && model.config.n_ctx_train > 0 && eo.n_ctx > model.config.n_ctx_train)
      std::fprintf(stderr, "knot: warning: --ctx %d is larger than the model's trained context (%d)\n", eo.n_ctx,
                   model.config.n_ctx_train);
    knot::Tokenizer tok(model.tokenizer);
    knot::Engine engine(model, eo);
    // BOS when the vocab asks for it (encode checks tokenizer.ggml.add_bos_token)
    const std::vector<int32_t> ids = tok.encode(prompt, true, false);
    if (ids.empty()) knot::fail("the prompt encodes to no tokens and the vocab adds no BOS");

    knot::GenerateResult r;
    if (ids_only) {
      r = engine.generate(tok, ids, gp);
      std::string out = "[";
      for (size_t i = 0; i < r.ids.size(); i++) out += (i ? "," : "") + std::to_string(r.ids[i]);
      out += "]\n";
      if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size()) stdout_closed = true;
    } else {
      // a write error (EPIPE: `| head -c 20`, SIGPIPE ignored in main) stops generation
      r = engine.generate(tok, ids, gp, [&](const std::string& piece) {
        if (std::fwrite(piece.data(), 1, piece.size(), stdout) != piece.size() || std::fflush(stdout) != 0)
          stdout_closed = true;
        return !stdout_closed;
      });
      if (!stdout_closed) std::fputc('\n', stdout);
    }
    // text before the stats on a shared terminal
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) stdout_closed = true;
    // the reader went away: exit quietly with success, as coreutils do
    if (stdout_closed) return 0;
    const knot::Telemetry& t = engine.telemetry();
    std::fprintf(stderr,
                 "knot: %s mode (%s kernels, %s KV), ctx %d, chunk %d\n"
                 "knot: prefill %d tokens in %.3f s (%.1f tok/s)\n"
                 "knot: decode %d tokens in %.3f s (%.1f tok/s), stop: %s\n"
                 "knot: peak KV+activation memory %.2f MiB\n",
                 knot::mode_name(eo.mode), knot::kernel_name(engine.forward_options().kernel),
                 knot::kv_type_name(engine.forward_options().kv_type), engine.n_ctx(), eo.chunk,
                 t.n_prompt, t.prefill_s, t.prefill_tok_s(), t.n_decoded, t.decode_s,
                 t.decode_tok_s(), r.stop_reason.c_str(), t.peak_bytes / 1048576.0);
    return 0;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "knot: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "knot: error: %s\n", e.what());
    return 1;
  }
}
