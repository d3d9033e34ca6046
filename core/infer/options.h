// options.h — the one option spec of `generate` (and friends): one table row per option
// with its JSON key, flags, kind, range, default and help. Everything that reads options
// goes through it, so the grammar, ranges and messages exist once. The rows and command
// specs: generate_options.h (generate's, the options objects'), cli_commands.h (the node
// CLI's serve, mesh and plan); this header and options.cpp are the machinery over them:
//   * both CLIs: `knot generate` calls parse_command_line() directly; `node
//     bin/knotwork.mjs generate` calls it through the wasm ABI (kw_cli_parse, kw_cli_usage);
//   * the session options of the JS API and the wasm ABI (kw_session_new's JSON, same keys)
//     go through apply_options(), with the same ranges.
// Contract: a command line or option object the table refuses throws knot::UsageError
// (exit status 2 in both CLIs, KW_ERR_USAGE at the ABI) with a message naming the option
// and the value; nothing is clamped or wrapped.
//
// parse_command_line() result (JSON):
//   {"action": "help"}               -h/--help: print usage_text() on stdout, exit 0
//   {"action": "usage"}              no positional argument: usage on stderr, exit 2
//   {"action": "run", "args": [positional...], "options": {key: value}, "cli": {key: value}}
//     options: the keys apply_options() takes (kw_session_new's JSON);
//     cli:     what only the command line uses (prompt, prompt_file, ids, port, ...),
//              with the defaults of those that have one.
// Commands: generate (both CLIs; generate_options.h), serve, mesh and plan (node CLI;
// cli_commands.h). A new command (e.g. `tokenize`) is one more CommandSpec listing the rows
// it takes (new rows for options it alone has) and one more entry in command_spec().
#pragma once
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "infer/generate.h"

namespace knot {

// Bounds the rows use: hi = kUnbounded is no upper bound (usage: ">= lo");
// hi = kMaxSafeInt is 2^53-1, exact as a JS number (usage: "2^53-1").
inline constexpr double kUnbounded = std::numeric_limits<double>::infinity();
inline constexpr double kMaxSafeInt = 9007199254740991.0;

enum class OptKind {
  Flag,  // no value; sets `value` (a JSON literal)
  Int,   // integer text -?[0-9]+ in [lo, hi]
  Num,   // decimal number text, finite, within lo/hi (each bound open or closed)
  Text,  // any string
  List,  // any string, repeatable: a JSON array
  Ints,  // comma-separated integers, each in [lo, hi]: a JSON array ("4,4,4" -> [4,4,4])
  Json,  // JSON only: a string, an object or a boolean (the setter reads it: a JSON Schema)
};

// What an option sets: the engine / sampling / generation options of one run.
struct RunOptions {
  EngineOptions engine;
  GenerateParams gen;
  int logprobs = -1;  // session steps: the sampled token's logprob + the k best (k <= 20), -1 off
};

struct OptionSpec {
  const char* key = nullptr;      // JSON key ("n_predict")
  const char* flag = nullptr;     // "--n-predict"; nullptr: JSON only
  const char* alias = nullptr;    // "-n" or nullptr
  OptKind kind = OptKind::Flag;
  double lo = 0, hi = 0;          // Int/Num range (inclusive unless lo_open/hi_open);
  bool lo_open = false, hi_open = false;  // Text with lo > 0: must not be empty
  const char* metavar = nullptr;  // "N"
  const char* help = nullptr;     // "tokens to generate"
  const char* note = nullptr;     // shown after the default ("0 = greedy")
  const char* value = nullptr;    // Flag: the JSON value it sets
  const char* choices = nullptr;  // Text: the values it takes, "|"-separated ("ws|http")
  const char* group = nullptr;    // options of which exactly one must be given ("prompt")
  // The engine/sampler field it sets and reads (set == nullptr: a command-line-only
  // option, returned under "cli").
  void (*set)(RunOptions&, const nlohmann::json&) = nullptr;
  nlohmann::json (*get)(const RunOptions&) = nullptr;
  const char* default_text = nullptr;  // the default as usage shows it, when get() cannot say
  const char* dflt = nullptr;          // command-line-only: JSON default put under "cli"
};

struct CommandSpec {
  const char* name;        // "generate"
  const char* synopsis;    // after "usage: PROG generate "
  const char* positional;  // "MODEL"
  const char* positional_help;
  const char* about;       // text between the synopsis and the options, or nullptr
  std::vector<const OptionSpec*> options;
  const char* epilog;      // text after the options, or nullptr
};

// The command table; throws knot::Error for an unknown command name.
const CommandSpec& command_spec(std::string_view name);

// args: the arguments after the command name. prog: "knot" or "knotwork" (messages).
nlohmann::json parse_command_line(const CommandSpec& cmd, const std::vector<std::string>& args,
                                  const std::string& prog);
std::string usage_text(const CommandSpec& cmd, const std::string& prog);

// One integer option value as the table reads it (-?[0-9]+, in [lo, hi], no wrap): for
// commands whose options are not in the table yet (`knot synth`).
long long parse_int_option(const std::string& flag, const std::string& text, long long lo, long long hi);

// printf("%g"): the one float format of usage text, messages and the CLIs' `inspect`
// (exported as kw_cli_format_g, so the node CLI prints floats as `knot` does).
std::string format_g(double x);

// Options object (kw_session_new's JSON; keys of the table, null = default) -> run
// options. Unknown keys and out-of-range values are UsageErrors naming the key.
void apply_options(const nlohmann::json& options, RunOptions& out);

}  // namespace knot
