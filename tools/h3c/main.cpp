// h3c: the driver. `h3c --help` lists the subcommands; `h3c <cmd> --help` describes one. Unknown options are errors.
#include "command.h"

#include "h3c/support/error.h"
#include "h3c/support/files.h"
#include "h3c/support/version.h"

#include <algorithm>
#include <cstdio>

namespace h3c::tool {

Command::Command(std::string n, std::string h, Setup s) : name(std::move(n)), help(std::move(h)), setup(std::move(s)) {
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

} // namespace h3c::tool

int main(int argc, char **argv) {
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
    c->setup(*sub);
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
