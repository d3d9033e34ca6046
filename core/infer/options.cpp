// options.cpp — the option table of `generate`, its command-line parser, usage text and
// the options-object reader (see options.h for the contract).
#include "infer/options.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "kernels/common.h"

namespace knot {

namespace {

using json = nlohmann::json;

constexpr double kMaxTokens = 1 << 20;
constexpr double kMaxSafeInt = 9007199254740991.0;  // 2^53-1: exact as a JS number
constexpr double kInf = std::numeric_limits<double>::infinity();

std::string fmt_int(double x) { return std::to_string((long long)x); }

template <class T>
T as(const json& v) {
  return v.get<T>();
}

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
const OptionSpec kTemp = {KEY("temperature"), .flag = "--temp", .kind = OptKind::Num, .lo = 0, .hi = kInf, .hi_open = true,
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
  .lo = 0, .hi = kInf, .lo_open = true, .hi_open = true, .metavar = "R", .help = "repeat penalty", .note = "1 = off",
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
// `serve` (node CLI)
const OptionSpec kPort = {KEY("port"), .flag = "--port", .kind = OptKind::Int, .lo = 0, .hi = 65535,
  .metavar = "N", .help = "TCP port", .note = "0 = any free port", .dflt = "8080"};
const OptionSpec kHost = {KEY("host"), .flag = "--host", .kind = OptKind::Text, .metavar = "H",
  .help = "address to listen on", .dflt = "\"127.0.0.1\""};
const OptionSpec kApiKey = {KEY("api_key"), .flag = "--api-key", .kind = OptKind::Text, .lo = 1, .metavar = "KEY",
  .help = "require \"Authorization: Bearer KEY\" on /v1/* and /health",
  .default_text = "the KNOTWORK_API_KEY environment variable, else none"};
const OptionSpec kName = {KEY("name"), .flag = "--name", .kind = OptKind::Text, .lo = 1, .metavar = "ID",
  .help = "model id in the API", .default_text = "the file name without extension"};
const OptionSpec kChatTemplate = {KEY("chat_template"), .flag = "--chat-template", .kind = OptKind::Text,
  .metavar = "NAME", .help = "chat template of /v1/chat/completions", .choices = "chatml|llama2|llama3|zephyr|jinja",
  .default_text = "the model's own; one knotwork cannot render is an error naming it"};
// `mesh` (node CLI): the topology of the Workers mesh (workers/lib/topology.mjs)
const OptionSpec kPlan = {KEY("plan"), .flag = "--plan", .kind = OptKind::Text, .lo = 1, .metavar = "FILE",
  .help = "topology or planner plan JSON (workers/lib/topology.mjs)"};
const OptionSpec kStations = {KEY("stations"), .flag = "--stations", .kind = OptKind::Ints, .lo = 0, .hi = 1 << 30,
  .metavar = "L,L,...", .help = "layers per station, in order", .default_text = "one station"};
const OptionSpec kShards = {KEY("shards"), .flag = "--shards", .kind = OptKind::Int, .lo = 1, .hi = 1 << 20,
  .metavar = "N", .help = "vocab shards, near-equal ranges", .default_text = "1"};
const OptionSpec kVocab = {KEY("vocab"), .flag = "--vocab", .kind = OptKind::Ints, .lo = 0, .hi = 1 << 30,
  .metavar = "C,C,...", .help = "explicit vocab cut points 0,...,n_vocab instead of --shards"};
const OptionSpec kSlices = {KEY("slices"), .flag = "--slices", .kind = OptKind::Int, .lo = 1, .hi = 1024,
  .metavar = "N", .help = "split every station into N head groups + N FFN slices", .default_text = "1"};
const OptionSpec kFluid = {KEY("fluid"), .flag = "--fluid", .kind = OptKind::Flag,
  .help = "stations load, run and evict one phase at a time", .value = "true"};
const OptionSpec kChain = {KEY("chain"), .flag = "--chain", .kind = OptKind::Flag,
  .help = "the coordinator links to the first station only, each station to the next (automatic when the "
          "station members would fill the 6 links)", .value = "true"};
const OptionSpec kLink = {KEY("link"), .flag = "--link", .kind = OptKind::Text, .metavar = "ws|http",
  .help = "coordinator links (ws: one WebSocket per peer)", .choices = "ws|http", .dflt = "\"ws\""};
// `plan` (node CLI; bindings/planner.mjs checks the values' meaning)
const OptionSpec kBudget = {KEY("budget"), .flag = "--budget", .kind = OptKind::Text, .lo = 1, .metavar = "SIZE",
  .help = "memory per isolate", .default_text = "128MB"};
const OptionSpec kPlanMode = {KEY("mode"), .flag = "--mode", .kind = OptKind::Text, .metavar = "resident|fluid",
  .help = "stations keep their layers, or load one phase at a time", .choices = "resident|fluid"};
const OptionSpec kContext = {KEY("context"), .flag = "--context", .kind = OptKind::Int, .lo = 0, .hi = 1 << 24,
  .metavar = "N", .help = "context per session"};
const OptionSpec kPlanChunk = {KEY("chunk"), .flag = "--chunk", .kind = OptKind::Int, .lo = 0, .hi = 1 << 24,
  .metavar = "N", .help = "prefill chunk"};
const OptionSpec kPlanShards = {KEY("shards"), .flag = "--shards", .kind = OptKind::Int, .lo = 0, .hi = 1 << 24,
  .metavar = "N", .help = "vocab shards"};
const OptionSpec kPlanStations = {KEY("stations"), .flag = "--stations", .kind = OptKind::Int, .lo = 0, .hi = 1 << 24,
  .metavar = "N", .help = "stations"};
const OptionSpec kObjective = {KEY("objective"), .flag = "--objective", .kind = OptKind::Text, .metavar = "memory|latency",
  .help = "the fewest isolates, or the highest estimated decode tok/s", .choices = "memory|latency"};
const OptionSpec kCost = {KEY("cost"), .flag = "--cost", .kind = OptKind::Text, .lo = 1, .metavar = "FILE",
  .help = "the time model's measured rates (bench/cost-model.json)"};
const OptionSpec kWrangler = {KEY("wrangler"), .flag = "--wrangler", .kind = OptKind::Text, .lo = 1, .metavar = "DIR",
  .help = "also write the Worker configurations of the plan into DIR: the coordinator (wrangler.jsonc, the only "
          "public route), one script per station member and per vocab shard, the warden; plan.json and "
          "topology.json beside them"};
const OptionSpec kKnot = {KEY("knot"), .flag = "--knot", .kind = OptKind::Text, .lo = 1, .metavar = "NAME",
  .help = "with --wrangler: the model's object key in R2", .default_text = "MODEL's file name, .gguf -> .knot"};
#undef KEY
// clang-format on

const OptionSpec* const kAll[] = {&kPrompt, &kPromptFile, &kNPredict, &kTemp, &kTopK, &kTopP, &kMinP,
                                  &kRepeatPenalty, &kRepeatLastN, &kPresencePenalty, &kFrequencyPenalty,
                                  &kLogprobs, &kSeed, &kCtx, &kChunk, &kKvBudget, &kStop, &kIgnoreEos,
                                  &kLookup, &kReference, &kNoSpecial, &kIds, &kPort, &kHost, &kApiKey, &kName,
                                  &kChatTemplate, &kPlan,
                                  &kStations, &kShards, &kVocab, &kSlices, &kFluid, &kChain, &kLink};

const char* const kModelHelp = ".gguf or .knot file (node CLI: also an http(s) URL served with Range requests)";

const CommandSpec kCommands[] = {
    {"generate", "MODEL (-p TEXT | --prompt-file FILE) [-n N] [options]", "MODEL", kModelHelp, nullptr,
     {&kPrompt, &kPromptFile, &kNPredict, &kTemp, &kTopK, &kTopP, &kMinP, &kRepeatPenalty, &kRepeatLastN,
      &kPresencePenalty, &kFrequencyPenalty, &kSeed, &kCtx, &kChunk, &kKvBudget, &kStop, &kIgnoreEos, &kLookup,
      &kReference, &kNoSpecial, &kIds},
     nullptr},
    {"serve", "MODEL [options]", "MODEL", kModelHelp, nullptr,
     {&kPort, &kHost, &kApiKey, &kName, &kCtx, &kChunk, &kReference, &kChatTemplate},
     "Routes: GET / (chat page), GET /v1/models, POST /v1/chat/completions, POST /v1/completions,\n"
     "GET /health. Prints \"knotwork: serving ID at http://HOST:PORT\" once it listens.\n"},
    // generate's options the mesh's coordinator sampler takes (its stations keep the KV and
    // run fast mode: no --kv-budget, no --reference), then the topology
    {"mesh", "MODEL [--plan FILE | --stations L,L,... [--shards N | --vocab C,C,...] [--slices N]]\n"
             "                     (-p TEXT | --prompt-file FILE) [-n N] [options]",
     "MODEL", kModelHelp,
     "Runs MODEL on a mesh of Workers under workerd (Miniflare): one script per station member and\n"
     "per vocab shard, a coordinator with a session Durable Object, the model in local R2 (a .gguf\n"
     "is converted to .knot first). stdout is exactly what generate prints; stderr reports hops,\n"
     "subrequests, connections and peak memory per isolate.\n",
     {&kPrompt, &kPromptFile, &kNPredict, &kTemp, &kTopK, &kTopP, &kMinP, &kRepeatPenalty, &kRepeatLastN,
      &kPresencePenalty, &kFrequencyPenalty, &kSeed, &kCtx, &kChunk, &kStop, &kIgnoreEos, &kNoSpecial, &kIds, &kPlan,
      &kStations, &kShards, &kVocab, &kSlices, &kFluid, &kChain, &kLink},
     nullptr},
    {"plan", "MODEL [--budget 128MB] [--mode resident|fluid] [--context N] [--chunk N]\n"
             "                     [--shards N] [--stations N] [--objective memory|latency] [--cost FILE]\n"
             "                     [--wrangler DIR [--knot NAME]]",
     "MODEL", kModelHelp,
     "Prints the mesh plan of MODEL (the JSON of native `knot plan`, the same planner in wasm).\n",
     {&kBudget, &kPlanMode, &kContext, &kPlanChunk, &kPlanShards, &kPlanStations, &kObjective, &kCost, &kWrangler, &kKnot},
     "Run the configurations with `wrangler dev -c DIR/wrangler.jsonc -c DIR/knot-st0.jsonc ...`\n"
     "or deploy each with `wrangler deploy -c DIR/<name>.jsonc`.\n"},
};

// "in [0, 1]", ">= 0", "> 0", "in (0, 1]": the range as messages state it.
std::string range_text(const OptionSpec& o) {
  const auto num = [&](double x) { return o.kind == OptKind::Int ? fmt_int(x) : format_g(x); };
  if (o.hi == kInf) return std::string(o.lo_open ? "> " : ">= ") + num(o.lo);
  return std::string("in ") + (o.lo_open ? "(" : "[") + num(o.lo) + ", " + num(o.hi) + (o.hi_open ? ")" : "]");
}

// The range as usage text shows it: "0..1048576", ">= 0" for an int up to INT32_MAX,
// "2^53-1" for the JS-safe bound.
std::string usage_range(const OptionSpec& o) {
  if (o.kind == OptKind::Num) return range_text(o);
  if (o.hi == INT32_MAX) return ">= " + fmt_int(o.lo);
  return fmt_int(o.lo) + ".." + (o.hi == kMaxSafeInt ? "2^53-1" : fmt_int(o.hi));
}

bool in_range(const OptionSpec& o, double x) {
  return (o.lo_open ? x > o.lo : x >= o.lo) && (o.hi_open ? x < o.hi : x <= o.hi);
}

std::string kind_noun(OptKind k) { return k == OptKind::Int ? "an integer" : "a number"; }

[[noreturn]] void range_fail(const std::string& name, const OptionSpec& o, const std::string& got) {
  usage_fail(name + " must be " + kind_noun(o.kind) + " " + range_text(o) + ", got " + got);
}

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

// Command-line text of option o (as typed: `flag`) -> its JSON value.
json value_from_text(const OptionSpec& o, const std::string& flag, const std::string& v) {
  if (o.kind == OptKind::Int) return json(parse_int_option(flag, v, (long long)o.lo, (long long)o.hi));
  if (o.kind == OptKind::Num) {
    const double d = is_num_text(v) ? std::strtod(v.c_str(), nullptr) : NAN;
    if (!std::isfinite(d)) usage_fail("option " + flag + ": '" + v + "' is not a number");
    if (!in_range(o, d)) range_fail(flag, o, v);
    return json(d);
  }
  if (o.kind == OptKind::Ints) {
    json a = json::array();
    for (size_t b = 0;;) {
      const size_t e = std::min(v.find(',', b), v.size());
      std::string item = v.substr(b, e - b);
      item.erase(0, item.find_first_not_of(' '));
      item.erase(item.find_last_not_of(' ') + 1);
      a.push_back(parse_int_option(flag, item, (long long)o.lo, (long long)o.hi));
      if (e == v.size()) break;
      b = e + 1;
    }
    return a;
  }
  if (o.kind == OptKind::Text && o.lo > 0 && v.empty()) usage_fail(flag + " must not be empty");
  if (o.choices) {
    const std::string_view c = o.choices;
    bool ok = false;
    for (size_t b = 0; b <= c.size();) {
      const size_t e = std::min(c.find('|', b), c.size());
      ok |= c.substr(b, e - b) == v;
      b = e + 1;
    }
    if (!ok) {
      std::string list(c);
      for (char& ch : list)
        if (ch == '|') ch = '/';
      usage_fail(flag + " must be one of " + list + ", got '" + v + "'");
    }
  }
  return json(v);
}

// An options-object value under key -> checked against the same table.
void check_json_value(const OptionSpec& o, const json& v) {
  const std::string key = o.key;
  auto wrong = [&](const char* want) { usage_fail("option " + key + ": " + v.dump() + " is not " + want); };
  switch (o.kind) {
    case OptKind::Int:
      if (!v.is_number() || (v.is_number_float() && v.get<double>() != std::floor(v.get<double>())))
        wrong("an integer");
      if (!in_range(o, v.get<double>())) range_fail(key, o, v.dump());
      break;
    case OptKind::Num:
      if (!v.is_number()) wrong("a number");
      if (!in_range(o, v.get<double>())) range_fail(key, o, v.dump());
      break;
    case OptKind::List:
      if (!v.is_array()) wrong("an array of strings");
      for (const auto& s : v)
        if (!s.is_string()) wrong("an array of strings");
      break;
    case OptKind::Ints:
      if (!v.is_array()) wrong("an array of integers");
      for (const auto& x : v)
        if (!x.is_number_integer() || !in_range(o, x.get<double>())) range_fail(key, o, x.dump());
      break;
    case OptKind::Flag:
      if (json::parse(o.value).is_string() ? !v.is_string() : !v.is_boolean())
        wrong(json::parse(o.value).is_string() ? "a string" : "a boolean");
      break;
    case OptKind::Text:
      if (!v.is_string()) wrong("a string");
      break;
  }
}

std::string flags_text(const OptionSpec& o) {
  std::string s = o.alias ? std::string(o.alias) + ", " + o.flag : std::string(o.flag);
  return o.metavar ? s + " " + o.metavar : s;
}

std::string default_text(const OptionSpec& o) {
  if (o.default_text) return o.default_text;
  if (o.dflt) {
    const json d = json::parse(o.dflt);
    return d.is_string() ? d.get<std::string>() : d.dump();
  }
  if (!o.get) return {};
  const json d = o.get(RunOptions{});
  return d.is_number_float() ? format_g(d.get<double>()) : d.dump();
}

}  // namespace

std::string format_g(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", x);
  return b;
}

long long parse_int_option(const std::string& flag, const std::string& v, long long lo, long long hi) {
  if (!is_int_text(v)) usage_fail("option " + flag + ": '" + v + "' is not an integer");
  long long x = 0;
  auto r = std::from_chars(v.data(), v.data() + v.size(), x);
  if (r.ec != std::errc() || x < lo || x > hi)
    usage_fail(flag + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + v);
  return x;
}

const CommandSpec& command_spec(std::string_view name) {
  for (const auto& c : kCommands)
    if (name == c.name) return c;
  fail("no option spec for command '" + std::string(name) + "'");
}

std::string usage_text(const CommandSpec& cmd, const std::string& prog) {
  size_t w = 19;  // the flags column: as wide as the widest, at least 19
  for (const OptionSpec* o : cmd.options) w = std::max(w, flags_text(*o).size());
  auto line = [&](const std::string& left, const std::string& right) {
    return "  " + left + std::string(w + 2 - left.size(), ' ') + right + "\n";
  };
  std::string out = "usage: " + prog + " " + cmd.name + " " + cmd.synopsis + "\n";
  if (cmd.about) out += cmd.about;
  out += line(cmd.positional, cmd.positional_help);
  for (const OptionSpec* o : cmd.options) {
    std::string h = o->help;
    if (o->kind == OptKind::Int || o->kind == OptKind::Num) {
      const std::string r = usage_range(*o);
      h += (r[0] >= '0' && r[0] <= '9' ? ", " : " ") + r;
    }
    const std::string d = default_text(*o);
    if (!d.empty()) h += " (default " + d + (o->note ? std::string(o->dflt ? "; " : ", ") + o->note : "") + ")";
    out += line(flags_text(*o), h);
  }
  return cmd.epilog ? out + cmd.epilog : out;
}

json parse_command_line(const CommandSpec& cmd, const std::vector<std::string>& args, const std::string& prog) {
  json options = json::object(), cli = json::object(), positional = json::array();
  std::vector<const char*> groups_given;
  for (size_t i = 0; i < args.size(); i++) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") return json{{"action", "help"}};
    const OptionSpec* o = nullptr;
    for (const OptionSpec* c : cmd.options)
      if (a == c->flag || (c->alias && a == c->alias)) o = c;
    if (!o) {
      if (a.size() > 1 && a[0] == '-')
        usage_fail("unknown option " + a + " (see " + prog + " " + cmd.name + " --help)");
      if (!positional.empty()) usage_fail("unexpected argument '" + a + "'");
      positional.push_back(a);
      continue;
    }
    if (o->group) {
      for (const char* g : groups_given)
        if (std::string_view(g) == o->group) {
          std::string flags;
          for (const OptionSpec* c : cmd.options)
            if (c->group && std::string_view(c->group) == o->group)
              flags += (flags.empty() ? "" : " or ") + std::string(c->alias ? c->alias : c->flag);
          usage_fail("give the " + std::string(o->group) + " once (" + flags + ")");
        }
      groups_given.push_back(o->group);
    }
    json& dst = o->set ? options : cli;
    if (o->kind == OptKind::Flag) {
      dst[o->key] = json::parse(o->value);
      continue;
    }
    if (i + 1 >= args.size()) usage_fail("option " + a + " needs a value");
    json v = value_from_text(*o, a, args[++i]);
    if (o->kind == OptKind::List) dst[o->key].push_back(std::move(v));
    else dst[o->key] = std::move(v);
  }
  if (positional.empty()) return json{{"action", "usage"}};
  // a group of which one is required and none was given: "no prompt: pass -p TEXT or ..."
  std::vector<std::string> missing;
  for (const OptionSpec* o : cmd.options) {
    if (!o->group) continue;
    bool given = false;
    for (const char* g : groups_given) given |= std::string_view(g) == o->group;
    if (given) continue;
    std::string flags;
    for (const OptionSpec* c : cmd.options)
      if (c->group && std::string_view(c->group) == o->group)
        flags += (flags.empty() ? "" : " or ") + std::string(c->alias ? c->alias : c->flag) + " " + c->metavar;
    usage_fail("no " + std::string(o->group) + ": pass " + flags);
  }
  for (const OptionSpec* o : cmd.options)
    if (o->dflt && !cli.contains(o->key)) cli[o->key] = json::parse(o->dflt);
  return json{{"action", "run"}, {"args", positional}, {"options", options}, {"cli", cli}};
}

void apply_options(const json& options, RunOptions& out) {
  if (!options.is_object()) usage_fail("options are not a JSON object: " + options.dump());
  for (const auto& [key, v] : options.items()) {
    const OptionSpec* o = nullptr;
    for (const OptionSpec* c : kAll)
      if (key == c->key && c->set) o = c;
    if (!o) {
      std::string known;
      for (const OptionSpec* c : kAll)
        if (c->set) known += (known.empty() ? "" : ", ") + std::string(c->key);
      usage_fail("unknown option '" + key + "' (known: " + known + ")");
    }
    if (v.is_null()) continue;
    check_json_value(*o, v);
    o->set(out, v);
  }
}

}  // namespace knot
