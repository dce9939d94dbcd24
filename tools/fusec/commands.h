// Subcommands of the fusec CLI. Each adds itself to the app and returns the function that
// runs it once CLI11 has parsed the flags.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

#include "passes/pass_manager.h"

namespace fusec::cli {

using Command = std::function<int()>;

Command addOptCommand(CLI::App& app);
Command addCompileCommand(CLI::App& app);
Command addRunCommand(CLI::App& app);
Command addCodegenCommand(CLI::App& app);
Command addDeviceCommand(CLI::App& app);
Command addBenchCommand(CLI::App& app);
Command addProfileCommand(CLI::App& app);
// `fusec bench attention`, a subcommand of `bench` (its Command runs when it was given).
Command addBenchAttention(CLI::App& bench);

// The pass-manager flags shared by every command that runs a pipeline.
void addPassManagerFlags(CLI::App& cmd, PassManagerOptions& opts);

}  // namespace fusec::cli
