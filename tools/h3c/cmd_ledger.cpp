// `h3c ledger verify|summary|diff`: check a run's operator ledger (seal + strict rule), print its per-binding table,
// or find the first node where two runs part.
#include "command.h"

#include "h3c/runtime/ledger.h"
#include "h3c/runtime/ledger_diff.h"
#include "h3c/support/json_read.h"
#include "h3c/support/error.h"
#include "h3c/support/files.h"
#include "h3c/support/signature.h"

#include <cstdio>
#include <optional>

namespace cmd_ledger {

nlohmann::json readLedger(const std::string &path) {
  return h3c::readJsonFile(path);
}

h3c::tool::Command cmd("ledger", "Operator ledgers: verify the seal and the strict rule, summarize bindings, diff two runs",
                       [](CLI::App &app) {
  app.require_subcommand(1);
  auto path = std::make_shared<std::string>();
  auto publicKey = std::make_shared<std::string>();
  CLI::App *verify = app.add_subcommand("verify", "Check the seal and the strict rule (exit 1 on failure)");
  verify->add_option("ledger", *path, "ledger.json")->required();
  verify->add_option("--public-key", *publicKey, "Ed25519 public key (PEM): also check ledger.json.sig");
  auto verifyJson = std::make_shared<bool>(false);
  verify->add_flag("--json", *verifyJson, "print the verdict as JSON");
  verify->callback([path, publicKey, verifyJson] {
    const nlohmann::json ledger = readLedger(*path);
    const h3c::rt::LedgerVerdict v = h3c::rt::verifyLedger(ledger);
    std::optional<std::string> signature;  // "" = ok, else what is wrong; none without --public-key
    if (!publicKey->empty())
      signature = v.sealOk ? h3c::checkSignature(*path, ledger.at("seal"), *publicKey)
                           : "the seal is broken: the signature cannot vouch for this content";
    if (!v.ok() || (signature && !signature->empty()))
      h3c::tool::exitCode() = h3c::kExitMismatch;
    if (*verifyJson) {
      nlohmann::json j = {{"seal_ok", v.sealOk},     {"complete", v.complete},   {"strict_ok", v.strictOk},
                          {"ok", v.ok()},            {"offenders", v.offenders}, {"problems", v.problems}};
      if (signature)
        j["signature"] = signature->empty() ? "ok" : *signature;
      std::printf("%s\n", j.dump(1).c_str());
      return;
    }
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
    if (signature)
      std::printf("signature: %s\n", signature->empty() ? "ok" : ("BAD: " + *signature).c_str());
  });
  auto pathA = std::make_shared<std::string>(), pathB = std::make_shared<std::string>();
  auto asJson = std::make_shared<bool>(false);
  CLI::App *diff = app.add_subcommand(
      "diff", "The first node (in graph order) whose binding, kernel, order or output hash differs between two "
              "ledgers (exit 1 when any node differs, 0 when none does)");
  diff->add_option("a", *pathA, "ledger.json (A)")->required();
  diff->add_option("b", *pathB, "ledger.json (B)")->required();
  diff->add_flag("--json", *asJson, "print the result as JSON");
  diff->callback([pathA, pathB, asJson] {
    const h3c::rt::LedgerDiff d = h3c::rt::diffLedgers(readLedger(*pathA), readLedger(*pathB), *pathA, *pathB);
    std::fputs(*asJson ? (d.toJson().dump(1) + "\n").c_str() : d.text().c_str(), stdout);
    if (!d.same())
      h3c::tool::exitCode() = h3c::kExitMismatch;
  });
  auto path2 = std::make_shared<std::string>();
  CLI::App *summary = app.add_subcommand("summary", "Per-binding table of a ledger");
  summary->add_option("ledger", *path2, "ledger.json")->required();
  summary->callback([path2] { std::fputs(h3c::rt::ledgerSummary(readLedger(*path2)).c_str(), stdout); });
});

} // namespace cmd_ledger
