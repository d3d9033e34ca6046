// cli_commands.h — the node CLI's own commands in the option table (options.h): `serve`
// (the OpenAI server, bin/knotwork.mjs), `mesh` (a model on a Workers mesh under workerd)
// and `plan` (the mesh planner and its Worker configurations); and native `knot station`
// (a fat layer station, cli/station.cpp).
// Contract: their own rows are command-line only (no setter: parse_command_line() returns
// them under "cli"); the generation settings they take are generate's rows
// (generate_options.h), listed again, so ranges and messages are the same.
#pragma once
#include "infer/options.h"

namespace knot::opt {

const CommandSpec& serve_command();
const CommandSpec& mesh_command();
const CommandSpec& plan_command();
const CommandSpec& station_command();  // native `knot station` (cli/station.cpp)

}  // namespace knot::opt
