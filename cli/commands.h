// commands.h — `knot` subcommands. Each takes the arguments after its name
// (argv[0] = subcommand name) and returns the process exit code; errors are printed as
// "knot: error: <message>" on stderr.
#pragma once

int cmd_inspect(int argc, char** argv);
int cmd_convert(int argc, char** argv);
int cmd_verify(int argc, char** argv);
int cmd_synth(int argc, char** argv);
// Implemented in cli/generate.cpp; knot.cpp carries a weak fallback so the CLI links
// without it.
int cmd_generate(int argc, char** argv);
