// knot generate — run a model locally and stream the continuation of a prompt.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "commands.h"
#include "common.h"
#include "generate.h"
#include "model_io.h"
#include "vocab.h"

namespace {

void usage(FILE* f) {
  std::fprintf(f,
               "usage: knot generate MODEL -p TEXT [-n N] [options]\n"
               "  MODEL                .gguf or .knot file\n"
               "  -p, --prompt TEXT    prompt (not echoed)\n"
               "  -n, --n-predict N    tokens to generate (default 128)\n"
               "  --temp T             temperature, 0 = greedy (default 0.8)\n"
               "  --top-k K            (default 40, 0 = off)\n"
               "  --top-p P            (default 0.95, 1 = off)\n"
               "  --min-p M            (default 0.05, 0 = off)\n"
               "  --repeat-penalty R   (default 1.0 = off)\n"
               "  --seed S             sampler seed (default 0)\n"
               "  --ctx N              context length (default min(train ctx, 2048))\n"
               "  --chunk N            prefill chunk size (default 64)\n"
               "  --stop TEXT          stop string (repeatable)\n"
               "  --ignore-eos         keep generating past end-of-generation tokens\n"
               "  --reference          reference mode: dequantized f32 math, f32 KV cache\n"
               "  --ids                print only a JSON array of the generated ids\n");
}

}  // namespace

int cmd_generate(int argc, char** argv) {
  std::string path, prompt;
  bool have_prompt = false, ids_only = false;
  knot::EngineOptions eo;
  knot::GenerateParams gp;
  try {
    for (int i = 1; i < argc; i++) {
      const std::string a = argv[i];
      auto val = [&]() -> std::string {
        if (i + 1 >= argc) knot::fail("option " + a + " needs a value");
        return argv[++i];
      };
      auto num = [&]() -> double {
        const std::string v = val();
        char* end = nullptr;
        const double d = std::strtod(v.c_str(), &end);
        if (v.empty() || *end) knot::fail("option " + a + ": '" + v + "' is not a number");
        return d;
      };
      auto integer = [&]() -> long long {
        const std::string v = val();
        char* end = nullptr;
        const long long n = std::strtoll(v.c_str(), &end, 10);
        if (v.empty() || *end) knot::fail("option " + a + ": '" + v + "' is not an integer");
        return n;
      };
      if (a == "-h" || a == "--help") {
        usage(stdout);
        return 0;
      } else if (a == "-p" || a == "--prompt") {
        prompt = val();
        have_prompt = true;
      } else if (a == "-n" || a == "--n-predict") {
        gp.n_predict = (int)integer();
      } else if (a == "--temp") {
        gp.sampling.temperature = (float)num();
      } else if (a == "--top-k") {
        gp.sampling.top_k = (int)integer();
      } else if (a == "--top-p") {
        gp.sampling.top_p = (float)num();
      } else if (a == "--min-p") {
        gp.sampling.min_p = (float)num();
      } else if (a == "--repeat-penalty") {
        gp.sampling.repeat_penalty = (float)num();
      } else if (a == "--seed") {
        gp.sampling.seed = (uint64_t)integer();
      } else if (a == "--ctx") {
        eo.n_ctx = (int)integer();
        if (eo.n_ctx <= 0) knot::fail("--ctx must be positive");
      } else if (a == "--chunk") {
        eo.chunk = (int)integer();
        if (eo.chunk <= 0) knot::fail("--chunk must be positive");
      } else if (a == "--stop") {
        gp.stop.push_back(val());
      } else if (a == "--ignore-eos") {
        gp.ignore_eos = true;
      } else if (a == "--reference") {
        eo.mode = knot::Mode::Reference;
      } else if (a == "--ids") {
        ids_only = true;
      } else if (!a.empty() && a[0] == '-') {
        knot::fail("unknown option " + a + " (see knot generate --help)");
      } else if (path.empty()) {
        path = a;
      } else {
        knot::fail("unexpected argument '" + a + "'");
      }
    }
    if (path.empty()) {
      usage(stderr);
      return 2;
    }
    if (!have_prompt) knot::fail("no prompt: pass -p TEXT");
    if (gp.n_predict < 0) knot::fail("-n must not be negative");

    knot::Model model = knot::load_model_file(path);
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
      std::printf("%s]\n", out.c_str());
    } else {
      r = engine.generate(tok, ids, gp, [](const std::string& piece) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
        return true;
      });
      std::printf("\n");
    }
    std::fflush(stdout);  // text before the stats on a shared terminal
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
  } catch (const std::exception& e) {
    std::fprintf(stderr, "knot: error: %s\n", e.what());
    return 1;
  }
}
