// abi_cli.cpp — the option spec (core/infer/options.h) for the node CLI: it parses its
// command lines here, so both CLIs share one grammar, one set of ranges and messages.
//
//   kw_cli_parse(cmd, args_json, prog) -> result: parse_command_line()'s JSON;
//                                          a refused command line is KW_ERR_USAGE
//   kw_cli_usage(cmd, prog)            -> result: the usage text
//   kw_cli_format_g(x)                 -> result: printf("%g", x), as `knot inspect` prints
#include <nlohmann/json.hpp>

#include "abi_internal.h"
#include "infer/options.h"

using json = nlohmann::json;
using namespace kw;

KW_EXPORT(kw_cli_parse)
int kw_cli_parse(const char* cmd, uint32_t cmd_len, const char* args_json, uint32_t args_len, const char* prog,
                 uint32_t prog_len) {
  return guard([&] {
    const json a = json::parse(str_arg(args_json, args_len), nullptr, false);
    if (a.is_discarded() || !a.is_array()) knot::fail("kw_cli_parse: args are not a JSON array of strings");
    std::vector<std::string> args;
    for (const auto& s : a) {
      if (!s.is_string()) knot::fail("kw_cli_parse: args are not a JSON array of strings");
      args.push_back(s.get<std::string>());
    }
    const knot::CommandSpec& spec = knot::command_spec(str_arg(cmd, cmd_len));
    set_result(knot::parse_command_line(spec, args, std::string(str_arg(prog, prog_len))).dump());
  });
}

KW_EXPORT(kw_cli_usage)
int kw_cli_usage(const char* cmd, uint32_t cmd_len, const char* prog, uint32_t prog_len) {
  return guard([&] {
    set_result(knot::usage_text(knot::command_spec(str_arg(cmd, cmd_len)), std::string(str_arg(prog, prog_len))));
  });
}

KW_EXPORT(kw_cli_format_g)
int kw_cli_format_g(double x) {
  return guard([&] { set_result(knot::format_g(x)); });
}
