// The operator ledger (issue 5 item 6): one entry per logical node, saying how it actually ran, sealed by sha256
// over canonical JSON (support/canonical_json.h).
//
// {
//   "schema": "h3c-ledger-v1",
//   "header": {"plan_sha256", "fingerprint_sha256", "checkpoint": {...}, "config": {...}, "mode", "sp", "tp", "device",
//              "driver_version", "nvrtc_version", "request": {"sha256", "B", "S", ...}, "threads",
//              "non_finite": ["<weight|output> <name>: <counts>", ...] (only when there are any)},
//   "nodes": [{"id", "kind", "op", "op_index", "order_in_plan", "requested", "actual", "kernel", "kernel_sha256",
//              "reduction_order", "inputs": [{"value", "dtype", "shape"}], "outputs": [... and "hash" with
//              --hash-nodes (header "node_hash": the hash's name, support/content_hash.h)],
//              "audit": {"max_abs", "max_rel", "output"} (audit mode)}, ...],   // in execution order
//   "missing": [node ids of the config not executed],
//   "complete": bool, "accepted": bool,
//   "seal": "<sha256 of canonical JSON of the ledger without 'seal'>"
// }
//
// Bindings: row = follows the node's declared order exactly (generated GPU kernel or the CPU executor); interim =
// runs the node but not in the declared order; reference = unordered or fp64 implementation; native = a vendor
// library without an order guarantee. The strict rule: complete, every node `row`, and no non-finite weight or
// output (non-finite inputs are refused before any run). `accepted` = the strict rule
// holds.
#pragma once

#include "h3c/runtime/nodes.h"
#include "h3c/plan/plan.h"
#include "h3c/support/glob.h"

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace h3c::rt {

inline constexpr const char *kLedgerSchema = "h3c-ledger-v1";

enum class Binding { Row, Interim, Reference, Native };
std::string bindingName(Binding b);
Binding parseBinding(const std::string &s, const std::string &where);

enum class Mode { Strict, Audit, Off };
std::string modeName(Mode m);
Mode parseMode(const std::string &s);

// --bind 'GLOB=native|reference' (glob over node ids: '*' any run, '?' one character). Later rules win.
struct BindRule {
  std::string glob;
  Binding binding;
};
BindRule parseBindRule(const std::string &spec);
using h3c::globMatch;  // support/glob.h
// Every rule must match at least one node of the config: a typo would otherwise silently run the defaults.
void checkBindRules(const std::vector<BindRule> &rules, const h3::Config &c);

// The binding a node is requested with: `row` in strict and audit mode, `native` in off mode (the executor falls
// back to `row` where it has no native implementation), then the --bind overlay.
Binding requestedBinding(const std::string &nodeId, Mode mode, const std::vector<BindRule> &rules);

struct AuditError {
  double maxAbs = 0, maxRel = 0;
  std::string output;  // the value compared
};

struct LedgerVerdict {
  bool sealOk = false;
  bool complete = false;
  bool strictOk = false;                 // every node row and nothing missing
  std::vector<std::string> offenders;    // "<node>: actual <binding>" and "missing <node>"
  std::vector<std::string> problems;     // structural problems (schema, inconsistent flags)
  bool ok() const { return sealOk && complete && strictOk && problems.empty(); }
};

class LedgerBuilder {
public:
  // The header's sp and tp are the plan's (runModel checks the run options against them).
  LedgerBuilder(const plan::Plan &plan, Mode mode, std::string device, std::vector<BindRule> binds = {});
  nlohmann::json &header() { return header_; }
  Mode mode() const { return mode_; }
  // The binding requested for a node (requestedBinding() with this ledger's mode and rules).
  Binding requested(const std::string &nodeId) const;
  // One executed op: every node it covers gets an entry (requested from the mode and --bind rules, `actual` what
  // ran). `shapes` maps value name -> the shape actually used ([ranks?, B, rows, cols]).
  // `hashes` (--hash-nodes): value name -> content hash (support/content_hash.h) of the op's outputs.
  void recordOp(const plan::Op &op, Binding actual, std::map<std::string, std::vector<int64_t>> shapes,
                const std::optional<AuditError> &audit = std::nullopt,
                std::map<std::string, std::string> hashes = {});
  // Builds the sealed document: `missing` = expected nodes without entry, `complete`, `accepted`. recordOp keeps
  // compact records and the node entries are built here: a forward whose caller never reads its ledger (the
  // Python package) pays for the strict rule (verdict) only, not for a megabyte of JSON and its seal.
  nlohmann::json finish() const;
  // The strict rule over what was recorded, as verifyLedger(finish()) would judge it (sealOk true: finish seals),
  // without building the document.
  LedgerVerdict verdict() const;
  // A non-finite weight or output ("output sample: 3 NaN, 0 Inf (first: element 7, NaN)"): listed in the header's
  // "non_finite"; any entry fails the strict rule (`accepted` false, verify names it).
  void recordNonFinite(const std::string &what);

private:
  const plan::Plan &plan_;
  struct Record {
    const plan::Op *op;
    Binding actual;
    std::map<std::string, std::vector<int64_t>> shapes;
    std::optional<AuditError> audit;
    std::map<std::string, std::string> hashes;
  };
  nlohmann::json header_;
  std::vector<Record> records_;
  // (node id, actual binding name) of every recorded node, in execution order: what the strict rule reads.
  std::vector<std::pair<std::string, std::string>> ranNodes() const;
  Mode mode_;
  std::vector<BindRule> binds_;
};

std::string computeLedgerSeal(const nlohmann::json &ledger);  // over canonical JSON without "seal"
nlohmann::json sealLedger(nlohmann::json ledger);

// Checks the seal, the schema, that complete/accepted agree with the entries, and the strict rule.
LedgerVerdict verifyLedger(const nlohmann::json &ledger);
// Per-binding counts and the node list per non-row binding, as text.
std::string ledgerSummary(const nlohmann::json &ledger);

} // namespace h3c::rt
