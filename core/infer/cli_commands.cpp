// cli_commands.cpp — the rows and specs of the node CLI's serve, mesh and plan commands
// (see cli_commands.h for the contract).
#include "infer/cli_commands.h"

#include "infer/generate_options.h"

namespace knot::opt {

namespace {

// clang-format off
#define KEY(k) .key = k
// `serve` (node CLI)
const OptionSpec kPort = {KEY("port"), .flag = "--port", .kind = OptKind::Int, .lo = 0, .hi = 65535,
  .metavar = "N", .help = "TCP port", .note = "0 = any free port", .dflt = "8080"};
const OptionSpec kHost = {KEY("host"), .flag = "--host", .kind = OptKind::Text, .metavar = "H",
  .help = "address to listen on", .dflt = "\"127.0.0.1\""};
const OptionSpec kApiKey = {KEY("api_key"), .flag = "--api-key", .kind = OptKind::Text, .lo = 1, .metavar = "KEY",
  .help = "require \"Authorization: Bearer KEY\" on every route but / and /health",
  .default_text = "the KNOTWORK_API_KEY environment variable, else none"};
const OptionSpec kName = {KEY("name"), .flag = "--name", .kind = OptKind::Text, .lo = 1, .metavar = "ID",
  .help = "model id in the API", .default_text = "the file name without extension"};
const OptionSpec kChatTemplate = {KEY("chat_template"), .flag = "--chat-template", .kind = OptKind::Text,
  .metavar = "NAME", .help = "chat template of /v1/chat/completions", .choices = "chatml|llama2|llama3|zephyr|jinja",
  .default_text = "the model's own; one knotwork cannot render is an error naming it"};
const OptionSpec kParallel = {KEY("parallel"), .flag = "--parallel", .kind = OptKind::Int, .lo = 1, .hi = 64,
  .metavar = "N", .help = "generations that run at once (slots sharing the model; later requests queue)",
  .note = "fewer when the wasm memory holds fewer sessions", .dflt = "4"};
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
const OptionSpec kPrefillMode = {KEY("prefill"), .flag = "--prefill", .kind = OptKind::Text, .metavar = "pipelined|sequential",
  .help = "mesh prefill: chunks in flight across stations at once, or one chunk at a time", .choices = "pipelined|sequential",
  .dflt = "\"pipelined\""};
const OptionSpec kMeshFat = {KEY("fat"), .flag = "--fat", .kind = OptKind::Ints, .lo = 0, .hi = 1 << 20,
  .metavar = "I,J,...", .help = "run the stations with these indices (0 = the first) as native fat stations "
          "(build/bin/knot station, reading the .knot by HTTP range from a local server), the rest as Workers"};
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
const OptionSpec kReplicas = {KEY("replicas"), .flag = "--replicas", .kind = OptKind::Int, .lo = 1, .hi = 16,
  .metavar = "R", .help = "copies of every station member and vocab shard: routes a session fails over to", .default_text = "1"};
const OptionSpec kCost = {KEY("cost"), .flag = "--cost", .kind = OptKind::Text, .lo = 1, .metavar = "FILE",
  .help = "the time model's measured rates (bench/cost-model.json)"};
const OptionSpec kPlanFat = {KEY("fat"), .flag = "--fat", .kind = OptKind::Text, .lo = 1, .metavar = "SIZE,SIZE,...",
  .help = "native fat stations (knot station) of these memories: from layer 0 each takes as many layers as fit, "
          "Worker isolates the rest (resident mode)"};
const OptionSpec kWrangler = {KEY("wrangler"), .flag = "--wrangler", .kind = OptKind::Text, .lo = 1, .metavar = "DIR",
  .help = "also write the Worker configurations of the plan into DIR: the coordinator (wrangler.jsonc, the only "
          "public route), one script per station member and per vocab shard, the warden; plan.json and "
          "topology.json beside them"};
const OptionSpec kKnot = {KEY("knot"), .flag = "--knot", .kind = OptKind::Text, .lo = 1, .metavar = "NAME",
  .help = "with --wrangler: the model's object key in R2", .default_text = "MODEL's file name, .gguf -> .knot"};
// `station` (native knot): a fat layer station (core/net/fat_station.h)
const OptionSpec kStLayers = {KEY("layers"), .flag = "--layers", .kind = OptKind::Text, .lo = 1, .metavar = "A..B",
  .help = "the station's layers [A, B) (B exclusive, as a topology's [l0, l1))"};
const OptionSpec kStRole = {KEY("role"), .flag = "--role", .kind = OptKind::Text, .metavar = "entry|mid|exit",
  .help = "the station's place in the mesh (exit: output_norm, normLast / normAll, phase norm)",
  .choices = "entry|mid|exit", .default_text = "entry when A is 0, exit when B is n_layer, else mid"};
const OptionSpec kStPort = {KEY("port"), .flag = "--port", .kind = OptKind::Int, .lo = 0, .hi = 65535,
  .metavar = "N", .help = "TCP port on 127.0.0.1", .note = "0 = any free port", .dflt = "0"};
const OptionSpec kStHost = {KEY("host"), .flag = "--host", .kind = OptKind::Text, .metavar = "H",
  .help = "address to listen on", .dflt = "\"127.0.0.1\""};
const OptionSpec kStSlice = {KEY("slice"), .flag = "--slice", .kind = OptKind::Text, .lo = 1, .metavar = "i/n",
  .help = "serve slice i of n: KV-head group i and FFN column slice i (topology.mjs cuts), for attn / ffn frames",
  .default_text = "0/1, the whole layers"};
const OptionSpec kStName = {KEY("name"), .flag = "--name", .kind = OptKind::Text, .lo = 1, .metavar = "ID",
  .help = "the station's name in error messages", .default_text = "fatA-B"};
const OptionSpec kStReference = {KEY("reference"), .flag = "--reference", .kind = OptKind::Flag,
  .help = "reference kernels and f32 KV (bit-exact with the wasm reference station)", .value = "true"};
const OptionSpec kStKvBudget = {KEY("kv_budget"), .flag = "--kv-budget", .kind = OptKind::Text, .lo = 1, .metavar = "SIZE",
  .help = "bytes one session's KV cache may take (a larger n_ctx is a 400)", .default_text = "1GB"};
#undef KEY
// clang-format on

}  // namespace

const CommandSpec& serve_command() {
  static const CommandSpec c = {
      "serve", "MODEL [options]", "MODEL", kModelHelp, nullptr,
      {&kPort, &kHost, &kApiKey, &kName, &kCtx, &kChunk, &kReference, &kChatTemplate, &kParallel, &kDraft, &kDraftN},
      "Routes: GET / (chat page), GET /v1/models, POST /v1/chat/completions, POST /v1/completions,\n"
      "POST /v1/embeddings, GET /health, and llama-server's POST /tokenize, /detokenize, /apply-template,\n"
      "GET /props, /metrics. Listens at once (\"knotwork: listening at URL\"; /health is a 503 while the\n"
      "model loads) and prints \"knotwork: serving ID at http://HOST:PORT\" once the model is loaded.\n"};
  return c;
}

// generate's options the mesh's coordinator sampler takes (its stations keep the KV and
// run fast mode: no --kv-budget, no --reference), then the topology
const CommandSpec& mesh_command() {
  static const CommandSpec c = {
      "mesh",
      "MODEL [--plan FILE | --stations L,L,... [--shards N | --vocab C,C,...] [--slices N]] [--fat I,J,...]\n"
      "                     (-p TEXT | --prompt-file FILE) [-n N] [options]",
      "MODEL", kModelHelp,
      "Runs MODEL on a mesh of Workers under workerd (Miniflare): one script per station member and\n"
      "per vocab shard, a coordinator with a session Durable Object, the model in local R2 (a .gguf\n"
      "is converted to .knot first). stdout is exactly what generate prints; stderr reports hops,\n"
      "subrequests, connections and peak memory per isolate. --draft: the coordinator drafts with\n"
      "that model (the deployment's DRAFT, its .knot in R2) and the stations verify in one pass.\n",
      {&kPrompt, &kPromptFile, &kNPredict, &kTemp, &kTopK, &kTopP, &kMinP, &kRepeatPenalty, &kRepeatLastN,
       &kPresencePenalty, &kFrequencyPenalty, &kSeed, &kCtx, &kChunk, &kStop, &kIgnoreEos, &kGrammarFile, &kJsonSchemaFile, &kNoSpecial, &kIds, &kPlan,
       &kStations, &kShards, &kVocab, &kSlices, &kFluid, &kChain, &kLink, &kLookup, &kDraft, &kDraftN, &kPrefillMode, &kReplicas, &kMeshFat},
      nullptr};
  return c;
}

const CommandSpec& plan_command() {
  static const CommandSpec c = {
      "plan",
      "MODEL [--budget 128MB] [--mode resident|fluid] [--context N] [--chunk N]\n"
      "                     [--shards N] [--stations N] [--objective memory|latency] [--replicas R] [--cost FILE]\n"
      "                     [--fat SIZE,...] [--wrangler DIR [--knot NAME]]",
      "MODEL", kModelHelp,
      "Prints the mesh plan of MODEL (the JSON of native `knot plan`, the same planner in wasm).\n",
      {&kBudget, &kPlanMode, &kContext, &kPlanChunk, &kPlanShards, &kPlanStations, &kObjective, &kReplicas, &kCost, &kPlanFat, &kWrangler, &kKnot},
      "Run the configurations with `wrangler dev -c DIR/wrangler.jsonc -c DIR/knot-st0.jsonc ...`\n"
      "or deploy each with `wrangler deploy -c DIR/<name>.jsonc`.\n"};
  return c;
}

const CommandSpec& station_command() {
  static const CommandSpec c = {
      "station", "MODEL|URL --layers A..B [--role entry|mid|exit] [--port N] [--slice i/n] [options]", "MODEL|URL",
      "a .knot file, or its http:// URL (read by range)",
      "Serves layers [A, B) of MODEL as a mesh station (docs/protocol.md): frames by POST /?sid=S or as\n"
      "WebSocket messages (GET /link?sid=S), GET /health. Reads the header, then only this station's\n"
      "tensors, each verified by its hash, on first use. Prints \"knot station listening on\n"
      "http://HOST:PORT\" once listening; exits 0 on SIGTERM.\n",
      {&kStLayers, &kStRole, &kStPort, &kStHost, &kStSlice, &kStName, &kStReference, &kStKvBudget},
      nullptr};
  return c;
}

}  // namespace knot::opt
