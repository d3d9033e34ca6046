// generate_options.h — the rows of `generate`'s options in the option table (options.h):
// the prompt, the sampling and generation settings, the engine's (context, chunk, KV
// budget, mode), the JSON-only logprobs and the command-line-only flags, and the
// `generate` command itself (both CLIs). The node CLI's commands (cli_commands.h) list
// some of these rows again, so they exist once.
// Contract: apply_options() reads exactly session_option_rows(), the rows with a setter
// (the keys of kw_session_new's JSON and the JS API's options, bindings/options.mjs).
#pragma once
#include <vector>

#include "infer/options.h"

namespace knot::opt {

extern const OptionSpec kPrompt, kPromptFile, kNPredict, kTemp, kTopK, kTopP, kMinP, kRepeatPenalty, kRepeatLastN,
    kPresencePenalty, kFrequencyPenalty, kLogprobs, kSeed, kCtx, kChunk, kKvBudget, kStop, kIgnoreEos, kReference,
    kNoSpecial, kIds, kLookup, kDraft, kDraftN, kGrammar, kJsonSchema, kGrammarFile, kJsonSchemaFile;

// The positional MODEL of every command.
extern const char* const kModelHelp;

const CommandSpec& generate_command();

// The rows an options object may set, in the order messages list them.
const std::vector<const OptionSpec*>& session_option_rows();

}  // namespace knot::opt
