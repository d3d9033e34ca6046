// bench_generate MODEL [--prompt N] [--gen N] [--runs N] [--reference] [--chunk N]
// Single-thread prefill and decode tokens/s of the Engine (fast mode by default):
// an N-token prompt (default 128) then N greedy tokens (default 128), EOS ignored.
// Median of --runs (default 3) after one warm-up. Prints one JSON object.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "infer/generate.h"
#include "container/model_io.h"

int main(int argc, char** argv) {
  std::string path;
  int n_prompt = 128, n_gen = 128, runs = 3, chunk = 64;
  knot::Mode mode = knot::Mode::Fast;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    auto next = [&]() { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
    if (a == "--prompt") n_prompt = next();
    else if (a == "--gen") n_gen = next();
    else if (a == "--runs") runs = next();
    else if (a == "--chunk") chunk = next();
    else if (a == "--reference") mode = knot::Mode::Reference;
    else path = a;
  }
  if (path.empty() || n_prompt <= 0 || n_gen <= 0 || runs <= 0 || chunk <= 0) {
    std::fprintf(stderr, "usage: bench_generate MODEL [--prompt N] [--gen N] [--runs N] [--chunk N] [--reference]\n");
    return 2;
  }
  try {
    const auto t_load0 = std::chrono::steady_clock::now();
    knot::Model model = knot::load_model_file(path);
    const double load_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load0).count();
    knot::Tokenizer tok(model.tokenizer);
    knot::EngineOptions eo;
    eo.mode = mode;
    eo.chunk = chunk;
    eo.n_ctx = n_prompt + n_gen;
    knot::Engine engine(model, eo);

    // Deterministic prompt of ordinary tokens: BOS (when the vocab has one) then ids
    // spread over the vocabulary.
    std::vector<int32_t> prompt;
    if (tok.bos() >= 0) prompt.push_back(tok.bos());
    const int nv = engine.n_logits();
    for (int i = (int)prompt.size(); i < n_prompt; i++) prompt.push_back((int32_t)((7 + 131 * i) % nv));

    knot::GenerateParams gp;
    gp.n_predict = n_gen;
    gp.sampling.temperature = 0;
    gp.ignore_eos = true;

    std::vector<double> pre, dec;
    size_t peak = 0;
    for (int r = 0; r <= runs; r++) {
      engine.generate(tok, prompt, gp);
      if (r == 0) continue;  // warm-up
      pre.push_back(engine.telemetry().prefill_tok_s());
      dec.push_back(engine.telemetry().decode_tok_s());
      peak = std::max(peak, engine.telemetry().peak_bytes);
    }
    std::sort(pre.begin(), pre.end());
    std::sort(dec.begin(), dec.end());
    const knot::ModelConfig& c = model.config;
    std::printf(
        "{\"model\":\"%s\",\"arch\":\"%s\",\"n_embd\":%d,\"n_layer\":%d,\"n_head\":%d,"
        "\"n_head_kv\":%d,\"n_ff\":%d,\"n_vocab\":%d,\"mode\":\"%s\",\"kernel\":\"%s\","
        "\"kv\":\"%s\",\"threads\":1,\"chunk\":%d,\"prompt_tokens\":%d,\"decode_tokens\":%d,"
        "\"runs\":%d,\"load_s\":%.3f,\"prefill_tok_s\":%.1f,\"decode_tok_s\":%.1f,"
        "\"peak_kv_act_bytes\":%zu}\n",
        path.c_str(), c.arch.c_str(), c.n_embd, c.n_layer, c.n_head, c.n_head_kv, c.n_ff,
        c.n_vocab, knot::mode_name(mode), knot::kernel_name(engine.forward_options().kernel),
        knot::kv_type_name(engine.forward_options().kv_type), chunk, n_prompt, n_gen - 1, runs,
        load_s, pre[pre.size() / 2], dec[dec.size() / 2], peak);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_generate: error: %s\n", e.what());
    return 1;
  }
}
