// `h3c ledger verify|summary`: check a run's operator ledger (seal + strict rule) or print its per-binding table.
#include "command.h"

#include "h3c/runtime/ledger.h"
#include "h3c/support/error.h"
#include "h3c/support/files.h"

#include <cstdio>

namespace {

nlohmann::json readLedger(const std::string &path) {
  std::string text = h3c::readFile(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error &e) {
    h3c::fail(path, "invalid JSON: {}", e.what());
  }
}

h3c::tool::Command cmd("ledger", "Operator ledgers: verify the seal and the strict rule, summarize bindings",
                       [](CLI::App &app) {
  app.require_subcommand(1);
  auto path = std::make_shared<std::string>();
  CLI::App *verify = app.add_subcommand("verify", "Check the seal and the strict rule (exit 1 on failure)");
  verify->add_option("ledger", *path, "ledger.json")->required();
  verify->callback([path] {
    h3c::rt::LedgerVerdict v = h3c::rt::verifyLedger(readLedger(*path));
    for (const auto &p : v.problems)
      std::printf("FAIL: %s\n", p.c_str());
    size_t shown = 0;
    for (const auto &o : v.offenders) {
      if (shown++ < 50)
        std::printf("not row: %s\n", o.c_str());
    }
    if (v.offenders.size() > 50)
      std::printf("... and %zu more\n", v.offenders.size() - 50);
    std::printf("seal: %s, complete: %s, strict: %s\n", v.sealOk ? "ok" : "BROKEN", v.complete ? "yes" : "no",
                v.strictOk ? "ok" : "violated");
    if (!v.ok())
      h3c::tool::exitCode() = h3c::kExitMismatch;
  });
  auto path2 = std::make_shared<std::string>();
  CLI::App *summary = app.add_subcommand("summary", "Per-binding table of a ledger");
  summary->add_option("ledger", *path2, "ledger.json")->required();
  summary->callback([path2] { std::fputs(h3c::rt::ledgerSummary(readLedger(*path2)).c_str(), stdout); });
});

} // namespace
