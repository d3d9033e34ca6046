// commands.h — `knot` subcommands. Each takes the arguments after its name
// (argv[0] = subcommand name) and returns the process exit code; errors are printed as
// "knot: error: <message>" on stderr.
#pragma once
#include <nlohmann/json.hpp>

int cmd_inspect(int argc, char** argv);
int cmd_convert(int argc, char** argv);
int cmd_verify(int argc, char** argv);
int cmd_synth(int argc, char** argv);
int cmd_plan(int argc, char** argv);
#include <string>
// cli/wrangler.cpp: the Worker configurations of a plan (planner JSON) written into dir by
// the one deployment description (core/infer/deployment.h), + plan.json and topology.json;
// model_key is the model's R2 object key ("" = the plan's model name as .knot). Returns the
// number of configs written; fails with a message.
size_t write_wrangler_configs(const std::string& plan_json, const std::string& dir, const std::string& model_key);
int cmd_tokenize(int argc, char** argv);  // cli/tokenize.cpp
int cmd_station(int argc, char** argv);   // cli/station.cpp
// Implemented in cli/generate.cpp; knot.cpp carries a weak fallback so the CLI links
// without it.
int cmd_generate(int argc, char** argv);
// The command line of `knot NAME` parsed by its one option spec (core/infer/options.h).
// -h/--help prints the usage on stdout and sets *exit_code = 0; a bad command line that asks
// for the usage prints it on stderr and sets 2; both return null (the command returns
// *exit_code). Otherwise the parse_command_line() result. Defined in cli/args.cpp.
nlohmann::json parse_cli_or_usage(const char* name, int argc, char** argv, int* exit_code);
