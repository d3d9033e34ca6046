// infer_options.cpp — the one option spec of `generate` (core/infer/options.h): command
// line grammar and messages, usage text read from the table and the engine defaults, and
// the options object of the JS API / wasm ABI checked against the same ranges.
#include <gtest/gtest.h>

#include "infer/options.h"
#include "kernels/common.h"

using nlohmann::json;

namespace {

json parse(std::vector<std::string> args) {
  return knot::parse_command_line(knot::command_spec("generate"), args, "knot");
}

std::string usage_error(std::vector<std::string> args) {
  try {
    parse(args);
  } catch (const knot::UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

std::string apply_error(const json& j) {
  knot::RunOptions o;
  try {
    knot::apply_options(j, o);
  } catch (const knot::UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST(Options, ParsesACommandLineIntoTypedOptions) {
  const json r = parse({"m.gguf", "-p", "hi", "-n", "7", "--temp", "0.5", "--stop", "a", "--stop", "b",
                        "--reference", "--ids", "--seed", "9007199254740991", "--kv-budget", "4096"});
  EXPECT_EQ(r["action"], "run");
  EXPECT_EQ(r["args"], json::array({"m.gguf"}));
  EXPECT_EQ(r["options"]["n_predict"], 7);
  EXPECT_EQ(r["options"]["temperature"], 0.5);
  EXPECT_EQ(r["options"]["stop"], json::array({"a", "b"}));
  EXPECT_EQ(r["options"]["mode"], "reference");
  EXPECT_EQ(r["options"]["seed"], 9007199254740991LL);
  EXPECT_EQ(r["options"]["kv_budget"], 4096);
  EXPECT_EQ(r["cli"]["prompt"], "hi");
  EXPECT_EQ(r["cli"]["ids"], true);
  knot::RunOptions o;
  knot::apply_options(r["options"], o);
  EXPECT_EQ(o.gen.n_predict, 7);
  EXPECT_FLOAT_EQ(o.gen.sampling.temperature, 0.5f);
  EXPECT_EQ(o.gen.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(o.engine.mode, knot::Mode::Reference);
  EXPECT_EQ(o.gen.sampling.seed, 9007199254740991ull);
  EXPECT_EQ(o.engine.kv_budget, 4096u);
  EXPECT_EQ(parse({"-p", "x", "--help", "--bogus"})["action"], "help");
  EXPECT_EQ(parse({"-p", "x"})["action"], "usage");
}

TEST(Options, RefusalsNameTheOptionAndTheValue) {
  EXPECT_EQ(usage_error({"m", "-p", "x", "-n", "4294967299"}), "-n must be an integer in [0, 1048576], got 4294967299");
  EXPECT_EQ(usage_error({"m", "-p", "x", "--top-k", "2.5"}), "option --top-k: '2.5' is not an integer");
  EXPECT_EQ(usage_error({"m", "-p", "x", "--temp", "Infinity"}), "option --temp: 'Infinity' is not a number");
  EXPECT_EQ(usage_error({"m", "-p", "x", "--top-p", "0"}), "--top-p must be a number in (0, 1], got 0");
  EXPECT_EQ(usage_error({"m", "-p", "x", "--repeat-penalty", "0"}), "--repeat-penalty must be a number > 0, got 0");
  EXPECT_EQ(usage_error({"m", "-p", "x", "--seed"}), "option --seed needs a value");
  EXPECT_EQ(usage_error({"m", "-p", "x", "--bogus"}), "unknown option --bogus (see knot generate --help)");
  EXPECT_EQ(usage_error({"m", "n", "-p", "x"}), "unexpected argument 'n'");
  EXPECT_EQ(usage_error({"m", "-p", "x", "--prompt-file", "f"}), "give the prompt once (-p or --prompt-file)");
  EXPECT_EQ(usage_error({"m"}), "no prompt: pass -p TEXT or --prompt-file FILE");
  EXPECT_EQ(usage_error({"m", "-p", "x", "--kv-budget", "0"}), "--kv-budget must be an integer in [1, 9007199254740991], got 0");
}

TEST(Options, UsageTextComesFromTheTableAndTheEngineDefaults) {
  const std::string u = knot::usage_text(knot::command_spec("generate"), "knot");
  EXPECT_EQ(u.rfind("usage: knot generate MODEL (-p TEXT | --prompt-file FILE)", 0), 0u) << u;
  const knot::SamplerParams sp;
  char temp[64];
  std::snprintf(temp, sizeof temp, "(default %g, 0 = greedy)", sp.temperature);
  EXPECT_NE(u.find(temp), std::string::npos) << u;
  EXPECT_NE(u.find("  -n, --n-predict N      tokens to generate, 0..1048576 (default " +
                   std::to_string(knot::GenerateParams{}.n_predict) + ")\n"), std::string::npos) << u;
  EXPECT_NE(u.find("--top-p P              top-p in (0, 1] (default 0.95, 1 = off)"), std::string::npos) << u;
  EXPECT_NE(u.find("--seed S               sampler seed, 0..2^53-1 (default 0)"), std::string::npos) << u;
  for (const char* flag : {"--prompt-file", "--temp", "--top-k", "--min-p", "--repeat-penalty", "--ctx", "--chunk",
                           "--kv-budget", "--stop", "--ignore-eos", "--reference", "--ids"})
    EXPECT_NE(u.find(flag), std::string::npos) << flag;
}

TEST(Options, TheOptionsObjectHasTheSameRanges) {
  EXPECT_EQ(apply_error(json{{"top_p", 2}}), "top_p must be a number in (0, 1], got 2");
  EXPECT_EQ(apply_error(json{{"n_ctx", 1 << 30}}), "n_ctx must be an integer in [1, 1048576], got 1073741824");
  EXPECT_EQ(apply_error(json{{"top_k", 2.5}}), "option top_k: 2.5 is not an integer");
  EXPECT_EQ(apply_error(json{{"temperature", "hot"}}), "option temperature: \"hot\" is not a number");
  EXPECT_EQ(apply_error(json{{"mode", "turbo"}}), "mode must be \"fast\" or \"reference\", got \"turbo\"");
  EXPECT_EQ(apply_error(json{{"stop", "x"}}), "option stop: \"x\" is not an array of strings");
  EXPECT_EQ(apply_error(json{{"prompt", "x"}}).rfind("unknown option 'prompt' (known: ", 0), 0u);
  EXPECT_EQ(apply_error(json{{"seed", -1}}), "seed must be an integer in [0, 9007199254740991], got -1");
  EXPECT_EQ(apply_error(json{{"temperature", nullptr}, {"n_predict", 0}}), "(accepted)");
  EXPECT_EQ(apply_error(json::array()), "options are not a JSON object: []");
}

TEST(Options, IntOptionsOfOtherCommandsShareTheReader) {
  EXPECT_EQ(knot::parse_int_option("--layers", "12", 1, 100), 12);
  EXPECT_THROW(knot::parse_int_option("--layers", "0x10", 1, 100), knot::UsageError);
  try {
    knot::parse_int_option("--layers", "99999999999999999999", 1, 100);
    FAIL();
  } catch (const knot::UsageError& e) {
    EXPECT_STREQ(e.what(), "--layers must be an integer in [1, 100], got 99999999999999999999");
  }
}
