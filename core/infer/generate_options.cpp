// generate_options.cpp — the rows of generate's options and the `generate` command (see
// generate_options.h for the contract).
#include "infer/generate_options.h"

#include <algorithm>
#include <cstdint>

#include "kernels/common.h"
#include "text/grammar.h"
#include "text/json_schema.h"

namespace knot::opt {

namespace {

using json = nlohmann::json;

constexpr double kMaxTokens = 1 << 20;

template <class T>
T as(const json& v) {
  return v.get<T>();
}

// grammar / json_schema set the one grammar of a run
void set_grammar(RunOptions& o, std::string gbnf) {
  if (!o.gen.grammar.empty()) usage_fail("give grammar or json_schema, not both (--grammar or --json-schema)");
  Grammar::parse(gbnf);  // refused here, naming line, column and rule
  o.gen.grammar = std::move(gbnf);
}

}  // namespace

// clang-format off
#define KEY(k) .key = k
const OptionSpec kPrompt = {KEY("prompt"), .flag = "--prompt", .alias = "-p", .kind = OptKind::Text, .metavar = "TEXT",
  .help = "prompt (not echoed)", .group = "prompt"};
const OptionSpec kPromptFile = {KEY("prompt_file"), .flag = "--prompt-file", .kind = OptKind::Text, .metavar = "FILE",
  .help = "prompt from a file, bytes as they are", .group = "prompt"};
const OptionSpec kNPredict = {KEY("n_predict"), .flag = "--n-predict", .alias = "-n", .kind = OptKind::Int,
  .lo = 0, .hi = kMaxTokens, .metavar = "N", .help = "tokens to generate",
  .set = [](RunOptions& o, const json& v) { o.gen.n_predict = as<int>(v); },
  .get = [](const RunOptions& o) { return json(o.gen.n_predict); }};
const OptionSpec kTemp = {KEY("temperature"), .flag = "--temp", .kind = OptKind::Num, .lo = 0, .hi = kUnbounded, .hi_open = true,
  .metavar = "T", .help = "temperature", .note = "0 = greedy",
  .set = [](RunOptions& o, const json& v) { o.gen.sampling.temperature = as<float>(v); },
  .get = [](const RunOptions& o) { return json(o.gen.sampling.temperature); }};
const OptionSpec kTopK = {KEY("top_k"), .flag = "--top-k", .kind = OptKind::Int, .lo = 0, .hi = INT32_MAX,
  .metavar = "K", .help = "top-k", .note = "0 = off",
  .set = [](RunOptions& o, const json& v) { o.gen.sampling.top_k = as<int>(v); },
  .get = [](const RunOptions& o) { return json(o.gen.sampling.top_k); }};
const OptionSpec kTopP = {KEY("top_p"), .flag = "--top-p", .kind = OptKind::Num, .lo = 0, .hi = 1, .lo_open = true,
  .metavar = "P", .help = "top-p", .note = "1 = off",
  .set = [](RunOptions& o, const json& v) { o.gen.sampling.top_p = as<float>(v); },
  .get = [](const RunOptions& o) { return json(o.gen.sampling.top_p); }};
const OptionSpec kMinP = {KEY("min_p"), .flag = "--min-p", .kind = OptKind::Num, .lo = 0, .hi = 1,
  .metavar = "M", .help = "min-p", .note = "0 = off",
  .set = [](RunOptions& o, const json& v) { o.gen.sampling.min_p = as<float>(v); },
  .get = [](const RunOptions& o) { return json(o.gen.sampling.min_p); }};
const OptionSpec kRepeatPenalty = {KEY("repeat_penalty"), .flag = "--repeat-penalty", .kind = OptKind::Num,
  .lo = 0, .hi = kUnbounded, .lo_open = true, .hi_open = true, .metavar = "R", .help = "repeat penalty", .note = "1 = off",
  .set = [](RunOptions& o, const json& v) { o.gen.sampling.repeat_penalty = as<float>(v); },
  .get = [](const RunOptions& o) { return json(o.gen.sampling.repeat_penalty); }};
const OptionSpec kRepeatLastN = {KEY("repeat_last_n"), .flag = "--repeat-last-n", .kind = OptKind::Int,
  .lo = 0, .hi = kMaxTokens, .metavar = "N", .help = "tokens the penalties look back",
  .set = [](RunOptions& o, const json& v) { o.gen.sampling.repeat_last_n = as<int>(v); },
  .get = [](const RunOptions& o) { return json(o.gen.sampling.repeat_last_n); }};
const OptionSpec kPresencePenalty = {KEY("presence_penalty"), .flag = "--presence-penalty", .kind = OptKind::Num,
  .lo = -2, .hi = 2, .metavar = "X", .help = "presence penalty (OpenAI)", .note = "0 = off",
  .set = [](RunOptions& o, const json& v) { o.gen.sampling.presence_penalty = as<float>(v); },
  .get = [](const RunOptions& o) { return json(o.gen.sampling.presence_penalty); }};
const OptionSpec kFrequencyPenalty = {KEY("frequency_penalty"), .flag = "--frequency-penalty", .kind = OptKind::Num,
  .lo = -2, .hi = 2, .metavar = "X", .help = "frequency penalty (OpenAI)", .note = "0 = off",
  .set = [](RunOptions& o, const json& v) { o.gen.sampling.frequency_penalty = as<float>(v); },
  .get = [](const RunOptions& o) { return json(o.gen.sampling.frequency_penalty); }};
// JSON only (the OpenAI server asks for it): -1 off, else k in 0..20
const OptionSpec kLogprobs = {KEY("logprobs"), .kind = OptKind::Int, .lo = -1, .hi = 20,
  .set = [](RunOptions& o, const json& v) { o.logprobs = as<int>(v); }};
// < 2^53: the wasm CLI and the JS API carry the seed as a JS number
const OptionSpec kSeed = {KEY("seed"), .flag = "--seed", .kind = OptKind::Int, .lo = 0, .hi = kMaxSafeInt,
  .metavar = "S", .help = "sampler seed",
  .set = [](RunOptions& o, const json& v) { o.gen.sampling.seed = as<uint64_t>(v); },
  .get = [](const RunOptions& o) { return json(o.gen.sampling.seed); }};
const OptionSpec kCtx = {KEY("n_ctx"), .flag = "--ctx", .kind = OptKind::Int, .lo = 1, .hi = kMaxTokens,
  .metavar = "N", .help = "context length",
  .set = [](RunOptions& o, const json& v) { o.engine.n_ctx = as<int>(v); },
  .default_text = "min(train ctx, 2048)"};
const OptionSpec kChunk = {KEY("chunk"), .flag = "--chunk", .kind = OptKind::Int, .lo = 1, .hi = 4096,
  .metavar = "N", .help = "prefill chunk size",
  .set = [](RunOptions& o, const json& v) { o.engine.chunk = as<int>(v); },
  .get = [](const RunOptions& o) { return json(o.engine.chunk); }};
const OptionSpec kKvBudget = {KEY("kv_budget"), .flag = "--kv-budget", .kind = OptKind::Int, .lo = 1, .hi = kMaxSafeInt,
  .metavar = "BYTES", .help = "KV cache budget in bytes",
  .set = [](RunOptions& o, const json& v) { o.engine.kv_budget = (size_t)std::min<uint64_t>(as<uint64_t>(v), SIZE_MAX); },
  .default_text = "none; wasm: what fits in 128 MB"};
const OptionSpec kStop = {KEY("stop"), .flag = "--stop", .kind = OptKind::List, .metavar = "TEXT",
  .help = "stop string (repeatable)",
  .set = [](RunOptions& o, const json& v) { o.gen.stop = as<std::vector<std::string>>(v); }};
const OptionSpec kIgnoreEos = {KEY("ignore_eos"), .flag = "--ignore-eos", .kind = OptKind::Flag,
  .help = "keep generating past end-of-generation tokens", .value = "true",
  .set = [](RunOptions& o, const json& v) { o.gen.ignore_eos = as<bool>(v); }};
const OptionSpec kLookup = {KEY("lookup"), .flag = "--lookup", .kind = OptKind::Int, .lo = 0, .hi = 64,
  .metavar = "K", .help = "speculative decoding: draft up to K tokens by prompt lookup, verified in one pass",
  .note = "0 = off; greedy output is unchanged",
  .set = [](RunOptions& o, const json& v) { o.gen.lookup = as<int>(v); },
  .get = [](const RunOptions& o) -> json { return o.gen.lookup; }};
// A draft model (infer/draft_model.h): the command lines load it; the JS API takes the
// model itself ({draft}), so these are command-line-only rows.
const OptionSpec kDraft = {KEY("draft"), .flag = "--draft", .kind = OptKind::Text, .lo = 1, .metavar = "MODEL",
  .help = "speculative decoding: draft tokens with this small model (same vocabulary), verified in one pass",
  .note = "greedy output is unchanged"};
const OptionSpec kDraftN = {KEY("draft_n"), .flag = "--draft-n", .kind = OptKind::Int, .lo = 1, .hi = 64,
  .metavar = "K", .help = "tokens the draft model proposes per pass", .dflt = "4"};
const OptionSpec kDraftOneHot = {KEY("draft_one_hot"), .flag = "--draft-one-hot", .kind = OptKind::Flag,
  .help = "the draft model proposes its argmax also when sampling (one-hot drafts; for comparison)", .value = "true"};
const OptionSpec kReference = {KEY("mode"), .flag = "--reference", .kind = OptKind::Flag,
  .help = "reference mode: dequantized f32 math, f32 KV cache", .value = "\"reference\"",
  .set = [](RunOptions& o, const json& v) {
    const std::string m = as<std::string>(v);
    if (m != "fast" && m != "reference") usage_fail("mode must be \"fast\" or \"reference\", got \"" + m + "\"");
    o.engine.mode = m == "reference" ? Mode::Reference : Mode::Fast;
  }};
// Special-token text in the prompt ("<|im_start|>") becomes its token by default, as in
// llama.cpp's CLI; this keeps it plain text (cli.parse_special = false).
const OptionSpec kNoSpecial = {KEY("parse_special"), .flag = "--no-special", .kind = OptKind::Flag,
  .help = "special-token text in the prompt (<|im_start|>) stays plain text", .value = "false"};
const OptionSpec kIds = {KEY("ids"), .flag = "--ids", .kind = OptKind::Flag,
  .help = "print only a JSON array of the generated ids", .value = "true"};
// Grammar-constrained output (text/grammar.h, text/json_schema.h). JSON: the GBNF text, or
// the schema (its text keeps the property order; an object gives them in key order). The
// command lines take files (the CLIs read them into these keys).
const OptionSpec kGrammar = {KEY("grammar"), .kind = OptKind::Text,
  .set = [](RunOptions& o, const json& v) { set_grammar(o, as<std::string>(v)); }};
const OptionSpec kJsonSchema = {KEY("json_schema"), .kind = OptKind::Json,
  .set = [](RunOptions& o, const json& v) {
    set_grammar(o, v.is_string() ? json_schema_to_gbnf(std::string_view(v.get_ref<const std::string&>()))
                                 : json_schema_to_gbnf(nlohmann::ordered_json::parse(v.dump())));
  }};
const OptionSpec kGrammarFile = {KEY("grammar_file"), .flag = "--grammar", .kind = OptKind::Text, .lo = 1, .metavar = "FILE",
  .help = "constrain the output to a GBNF grammar (llama.cpp's syntax; root rule `root`)"};
const OptionSpec kJsonSchemaFile = {KEY("json_schema_file"), .flag = "--json-schema", .kind = OptKind::Text, .lo = 1,
  .metavar = "FILE", .help = "constrain the output to JSON that validates against a JSON Schema"};
#undef KEY
// clang-format on

const char* const kModelHelp = ".gguf or .knot file (node CLI: also an http(s) URL served with Range requests)";

const CommandSpec& generate_command() {
  static const CommandSpec c = {
      "generate", "MODEL (-p TEXT | --prompt-file FILE) [-n N] [options]", "MODEL", kModelHelp, nullptr,
      {&kPrompt, &kPromptFile, &kNPredict, &kTemp, &kTopK, &kTopP, &kMinP, &kRepeatPenalty, &kRepeatLastN,
       &kPresencePenalty, &kFrequencyPenalty, &kSeed, &kCtx, &kChunk, &kKvBudget, &kStop, &kIgnoreEos, &kLookup,
       &kDraft, &kDraftN, &kDraftOneHot, &kGrammarFile, &kJsonSchemaFile, &kReference, &kNoSpecial, &kIds},
      nullptr};
  return c;
}

const std::vector<const OptionSpec*>& session_option_rows() {
  static const std::vector<const OptionSpec*> rows = {
      &kNPredict, &kTemp, &kTopK, &kTopP, &kMinP, &kRepeatPenalty, &kRepeatLastN, &kPresencePenalty,
      &kFrequencyPenalty, &kLogprobs, &kSeed, &kCtx, &kChunk, &kKvBudget, &kStop, &kIgnoreEos, &kLookup, &kGrammar,
      &kJsonSchema, &kReference};
  return rows;
}

}  // namespace knot::opt
