// The command line of a `knot` subcommand by its one option spec (cli/commands.h
// parse_cli_or_usage).
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "infer/options.h"

nlohmann::json parse_cli_or_usage(const char* name, int argc, char** argv, int* exit_code) {
  const knot::CommandSpec& spec = knot::command_spec(name);
  nlohmann::json cl = knot::parse_command_line(spec, std::vector<std::string>(argv + 1, argv + argc), "knot");
  if (cl["action"] == "help" || cl["action"] == "usage") {
    const bool help = cl["action"] == "help";
    std::fputs(knot::usage_text(spec, "knot").c_str(), help ? stdout : stderr);
    *exit_code = help ? 0 : 2;
    return nullptr;
  }
  return cl;
}
