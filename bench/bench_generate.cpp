// bench_generate MODEL [--prompt N] [--gen N] [--runs N] [--reference] [--chunk N] [--prompt-file F]
// Single-thread prefill and decode tokens/s of the Engine (fast mode by default):
// an N-token prompt (default 128: BOS + the first tokens of bench/prompt.txt, the same ids
// bench/generate.mjs times in wasm; both print the ids' FNV-1a hash) then N greedy decode
// steps (default 128; N + 1 tokens sampled), EOS ignored.
// Median of --runs (default 3) after one warm-up. Prints one JSON object.
// --simd NAME forces one of the SIMD variants this CPU can run ("avx512vnni", "avxvnni", "avx2";
// default: the best), so variants compare in one session. "loadavg" (/proc/loadavg at
// the start) and "cpu_share" (this thread's CPU time / wall time over the timed runs,
// median) say how much of a core the figures got on a shared host; *_tok_s_cpu time the
// same prompt and as many greedy decode steps through Engine::eval on this thread's CPU
// time (what the kernels cost, whatever the other processes on the host do).
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "infer/generate.h"
#include "container/loader.h"
#include "kernels/kernels_internal.h"

int main(int argc, char** argv) {
  std::string path, prompt_file, simd;
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
    else if (a == "--prompt-file" && i + 1 < argc) prompt_file = argv[++i];
    else if (a == "--simd" && i + 1 < argc) simd = argv[++i];
    else path = a;
  }
  if (path.empty() || n_prompt <= 0 || n_gen <= 0 || runs <= 0 || chunk <= 0) {
    std::fprintf(stderr, "usage: bench_generate MODEL [--prompt N] [--gen N] [--runs N] [--chunk N] [--reference]\n");
    return 2;
  }
  try {
    if (!simd.empty()) {
      knot::NamedKernels tables[4];
      const int n = knot::usable_simd_tables(tables);
      int k = 0;
      while (k < n && simd != tables[k].name) k++;
      if (k == n) throw knot::UsageError("--simd " + simd + ": not a SIMD variant this CPU can run");
      knot::set_simd_kernels_for_test(tables[k].table);
    }
    double loadavg = 0;
    if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
      if (std::fscanf(f, "%lf", &loadavg) != 1) loadavg = 0;
      std::fclose(f);
    }
    auto cpu_now = [] {
      timespec ts;
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    };
    const auto t_load0 = std::chrono::steady_clock::now();
    knot::Model model = knot::load_model_file(path);
    const double load_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load0).count();
    knot::Tokenizer tok(model.tokenizer);
    knot::EngineOptions eo;
    eo.mode = mode;
    eo.chunk = chunk;
    eo.n_ctx = n_prompt + n_gen + 8;
    knot::Engine engine(model, eo);

    // The prompt: bench/prompt.txt repeated, tokenized with BOS, first n_prompt ids.
    if (prompt_file.empty()) {
      std::string exe = argv[0];
      const size_t slash = exe.find_last_of('/');
      prompt_file = (slash == std::string::npos ? std::string(".") : exe.substr(0, slash)) + "/../../bench/prompt.txt";
    }
    std::string text;
    {
      std::FILE* f = std::fopen(prompt_file.c_str(), "rb");
      if (!f) throw knot::Error(prompt_file + ": cannot open the benchmark prompt (--prompt-file)");
      char buf[4096];
      for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
      std::fclose(f);
      while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    }
    std::string all;
    for (int k = 0; k < 8; k++) all += text;
    std::vector<int32_t> prompt = tok.encode(all, true, false);
    if ((int)prompt.size() < n_prompt) throw knot::Error("the benchmark text gives only " + std::to_string(prompt.size()) + " tokens");
    prompt.resize((size_t)n_prompt);
    uint32_t ids_hash = 0x811c9dc5u;
    for (int32_t id : prompt)
      for (int k = 0; k < 4; k++) ids_hash = (ids_hash ^ (((uint32_t)id >> (8 * k)) & 255u)) * 0x01000193u;

    knot::GenerateParams gp;
    gp.n_predict = n_gen + 1;  // n_gen decode steps after the token prefill samples
    gp.sampling.temperature = 0;
    gp.ignore_eos = true;

    std::vector<double> pre, dec, share;
    size_t peak = 0;
    for (int r = 0; r <= runs; r++) {
      const double c0 = cpu_now();
      const auto w0 = std::chrono::steady_clock::now();
      engine.generate(tok, prompt, gp);
      if (r == 0) continue;  // warm-up
      share.push_back((cpu_now() - c0) / std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count());
      pre.push_back(engine.telemetry().prefill_tok_s());
      dec.push_back(engine.telemetry().decode_tok_s());
      peak = std::max(peak, engine.telemetry().peak_bytes);
    }
    std::vector<double> pre_cpu, dec_cpu;
    for (int r = 0; r < runs; r++) {
      engine.reset();
      const double c0 = cpu_now();
      const float* lg = engine.eval(prompt.data(), (int)prompt.size());
      const double c1 = cpu_now();
      for (int k = 0; k < n_gen; k++) {
        int32_t best = 0;
        for (int v = 1; v < engine.n_logits(); v++)
          if (lg[v] > lg[best]) best = v;
        lg = engine.eval(&best, 1);
      }
      const double c2 = cpu_now();
      pre_cpu.push_back((double)prompt.size() / (c1 - c0));
      dec_cpu.push_back((double)n_gen / (c2 - c1));
    }
    std::sort(pre_cpu.begin(), pre_cpu.end());
    std::sort(dec_cpu.begin(), dec_cpu.end());
    std::sort(pre.begin(), pre.end());
    std::sort(dec.begin(), dec.end());
    std::sort(share.begin(), share.end());
    const knot::ModelConfig& c = model.config;
    std::printf(
        "{\"model\":\"%s\",\"arch\":\"%s\",\"n_embd\":%d,\"n_layer\":%d,\"n_head\":%d,"
        "\"n_head_kv\":%d,\"n_ff\":%d,\"n_vocab\":%d,\"mode\":\"%s\",\"kernel\":\"%s\","
        "\"kv\":\"%s\",\"threads\":1,\"chunk\":%d,\"prompt_tokens\":%d,\"decode_tokens\":%d,"
        "\"runs\":%d,\"load_s\":%.3f,\"prefill_tok_s\":%.1f,\"decode_tok_s\":%.1f,"
        "\"peak_kv_act_bytes\":%zu,\"prompt_ids_hash\":\"%08x\",\"simd\":\"%s\",\"loadavg\":%.2f,"
        "\"cpu_share\":%.2f,\"prefill_tok_s_cpu\":%.1f,\"decode_tok_s_cpu\":%.1f}\n",
        path.c_str(), c.arch.c_str(), c.n_embd, c.n_layer, c.n_head, c.n_head_kv, c.n_ff,
        c.n_vocab, knot::mode_name(mode), knot::kernel_name(engine.forward_options().kernel),
        knot::kv_type_name(engine.forward_options().kv_type), chunk, n_prompt, n_gen, runs,
        load_s, pre[pre.size() / 2], dec[dec.size() / 2], peak, ids_hash, knot::simd_kernels_name(), loadavg,
        share[share.size() / 2], pre_cpu[pre_cpu.size() / 2], dec_cpu[dec_cpu.size() / 2]);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_generate: error: %s\n", e.what());
    return 1;
  }
}
