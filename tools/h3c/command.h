// The h3c driver's subcommand registry. Each subcommand lives in its own cmd_<name>.cpp, compiled into the h3c
// executable, and registers itself at static-initialization time:
//
//   namespace cmd_checkpoint {
//   h3c::tool::Command cmd("checkpoint", "Checkpoint tools: snapshot, check, synth, map", setupFn);
//   }
//
// Each file keeps its helpers in its own namespace cmd_<name>, not an anonymous one: the h3c target is a unity build
// (CLI11's headers cost seconds of code generation in every translation unit that includes them), where the anonymous
// namespaces of all the files would be one namespace.
//
// A command whose code would make every other command's start-up slow (`compile`, which links the MLIR compiler) is
// its own executable beside h3c, registered in h3c by name only.
//
// `setup` receives the CLI11 subcommand to add options and sub-subcommands to, and sets its callback. Callbacks throw
// h3c::Error on bad input (printed as "h3c: error: ..." with exit code 2) or return an exit code through
// `exitCode()`.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace h3c::tool {

struct Command {
  using Setup = std::function<void(CLI::App &)>;
  Command(std::string name, std::string help, Setup setup);
  // A command that is another executable in h3c's own folder: `h3c <name> ARGS...` runs it in h3c's place with the
  // same arguments (see compile_elsewhere.cpp); h3c itself only lists it.
  Command(std::string name, std::string help, std::string executable);
  std::string name, help;
  Setup setup;
  std::string executable;  // empty: the command runs in h3c
};

// The one line that `h3c --help` shows for `compile`, in h3c and in h3c-compile alike.
inline constexpr const char *kCompileHelp = "Compile a fingerprint into a plan (plan.json + CUDA kernels)";

std::vector<const Command *> &registry();

// The exit code a callback wants (default 0). Callbacks that find a mismatch set kExitMismatch.
int &exitCode();

} // namespace h3c::tool
