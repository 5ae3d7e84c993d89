// h3c: the driver. `h3c --help` lists the subcommands; `h3c <cmd> --help` describes one. Unknown options are errors.
#include "command.h"

#include "h3c/support/error.h"
#include "h3c/support/files.h"
#include "h3c/support/version.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace h3c::tool {

Command::Command(std::string n, std::string h, Setup s) : name(std::move(n)), help(std::move(h)), setup(std::move(s)) {
  registry().push_back(this);
}

Command::Command(std::string n, std::string h, std::string exe)
    : name(std::move(n)), help(std::move(h)), executable(std::move(exe)) {
  registry().push_back(this);
}

std::vector<const Command *> &registry() {
  static std::vector<const Command *> r;
  return r;
}

int &exitCode() {
  static int code = 0;
  return code;
}

// Runs the command's executable, from h3c's own folder, in this process's place with the same arguments (argv[0]
// included, so its usage lines read "h3c compile ..."); returns only by throwing.
[[noreturn]] void runElsewhere(const Command &c, char **argv) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) fail(c.name, "cannot find h3c's own folder (/proc/self/exe): {}", ec.message());
  const std::string exe = (self.parent_path() / c.executable).string();
  execv(exe.c_str(), argv);
  fail(c.name, "cannot run {}: {}", exe, std::strerror(errno));
}

} // namespace h3c::tool

int main(int argc, char **argv) {
  for (const auto *c : h3c::tool::registry()) {
    if (argc > 1 && !c->executable.empty() && c->name == argv[1]) {
      try {
        h3c::tool::runElsewhere(*c, argv);
      } catch (const h3c::Error &e) {
        std::fprintf(stderr, "h3c: error: %s\n", e.what());
        return h3c::kExitError;
      }
    }
  }
  h3c::installMappedFileFaultHandler();
  CLI::App app{"h3c: a deterministic compiler and runtime for the MiniMax-H3 diffusion transformer"};
  app.require_subcommand(1);
  app.allow_extras(false);
  app.set_version_flag("--version", std::string("h3c ") + h3c::versionString() + " (build " + h3c::buildString() + ")");
  app.option_defaults()->always_capture_default();  // `--help` shows every option's default
  auto cmds = h3c::tool::registry();
  std::sort(cmds.begin(), cmds.end(), [](auto *a, auto *b) { return a->name < b->name; });
  for (const auto *c : cmds) {
    CLI::App *sub = app.add_subcommand(c->name, c->help);
    // Only the command being run gets its options: every setup allocates its CLI11 options and validators, which
    // the sanitizer build pays at each of the tests' h3c runs (800 of its 6,400 page faults at start-up); the list of
    // `h3c --help` needs the names and help lines alone.
    if (c->executable.empty() && (argc < 2 || c->name == argv[1])) c->setup(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : h3c::kExitError;
  } catch (const h3c::Error &e) {
    std::fprintf(stderr, "h3c: error: %s\n", e.what());
    return h3c::kExitError;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "h3c: error: %s\n", e.what());
    return h3c::kExitError;
  }
  return h3c::tool::exitCode();
}
