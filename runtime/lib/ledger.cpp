// The operator ledger: building, sealing, verifying, summarizing.
#include "h3c/runtime/ledger.h"

#include "h3c/plan/io.h"

#include "h3c/support/canonical_json.h"
#include "h3c/support/error.h"
#include "h3c/support/sha256.h"
#include "h3c/support/version.h"

#include <map>
#include <set>

using nlohmann::json;

namespace h3c::rt {

std::string bindingName(Binding b) {
  switch (b) {
  case Binding::Row: return "row";
  case Binding::Interim: return "interim";
  case Binding::Reference: return "reference";
  case Binding::Native: return "native";
  }
  return "?";
}

Binding parseBinding(const std::string &s, const std::string &where) {
  if (s == "row") return Binding::Row;
  if (s == "interim") return Binding::Interim;
  if (s == "reference") return Binding::Reference;
  if (s == "native") return Binding::Native;
  fail(where, "unknown binding '{}' (expected row, interim, reference or native)", s);
}

std::string modeName(Mode m) { return m == Mode::Strict ? "strict" : m == Mode::Audit ? "audit" : "off"; }

Mode parseMode(const std::string &s) {
  if (s == "strict") return Mode::Strict;
  if (s == "audit") return Mode::Audit;
  if (s == "off") return Mode::Off;
  fail("--mode", "expected strict, audit or off, got '{}'", s);
}

BindRule parseBindRule(const std::string &spec) {
  auto eq = spec.rfind('=');
  if (eq == std::string::npos || eq == 0)
    fail("--bind", "expected 'GLOB=native|reference', got '{}'", spec);
  BindRule r{spec.substr(0, eq), parseBinding(spec.substr(eq + 1), "--bind")};
  if (r.binding != Binding::Native && r.binding != Binding::Reference)
    fail("--bind", "only native or reference can be requested, got '{}'", spec.substr(eq + 1));
  return r;
}

Binding requestedBinding(const std::string &nodeId, Mode mode, const std::vector<BindRule> &rules) {
  Binding b = mode == Mode::Off ? Binding::Native : Binding::Row;
  for (const auto &r : rules)
    if (globMatch(r.glob, nodeId))
      b = r.binding;
  return b;
}

void checkBindRules(const std::vector<BindRule> &rules, const h3::Config &c) {
  if (rules.empty())
    return;
  const auto &nodes = expectedNodes(c);
  for (const auto &r : rules) {
    bool any = false;
    for (const auto &n : nodes)
      if ((any = globMatch(r.glob, n.id)))
        break;
    if (!any)
      fail("--bind", "'{}' matches no node of this config (node ids look like "
                     "'transformer_blocks.0.attn.to_q'; docs/contract.md section 2)", r.glob);
  }
}

LedgerBuilder::LedgerBuilder(const plan::Plan &plan, Mode mode, std::string device, std::vector<BindRule> binds)
    : plan_(plan), mode_(mode), binds_(std::move(binds)) {
  checkBindRules(binds_, plan.config);
  json rules = json::array();
  for (const auto &r : binds_)
    rules.push_back(r.glob + "=" + bindingName(r.binding));
  header_ = {{"h3c", versionJson()},
             {"plan_sha256", plan.planSha256},
             {"fingerprint_sha256", plan.fingerprintSha256},
             {"config", h3::configToJson(plan.config)},
             {"arch", plan.options.arch},
             {"fuse", plan.options.fuse},
             {"mode", modeName(mode)},
             {"sp", plan.options.sp},
             {"tp", plan.options.tp},
             {"device", std::move(device)},
             {"binds", rules},
             {"driver_version", nullptr},
             {"nvrtc_version", nullptr},
             {"checkpoint", nullptr},
             {"request", nullptr}};
}

Binding LedgerBuilder::requested(const std::string &nodeId) const { return requestedBinding(nodeId, mode_, binds_); }

void LedgerBuilder::recordOp(const plan::Op &op, Binding actual, std::map<std::string, std::vector<int64_t>> shapes,
                             const std::optional<AuditError> &audit, std::map<std::string, std::string> hashes) {
  records_.push_back({&op, actual, std::move(shapes), audit, std::move(hashes)});
}

namespace {

// The strict rule over (node id, actual binding) pairs in execution order: unknown and repeated ids are problems,
// non-row nodes offenders, expected nodes without an entry missing. Shared by the builder and verifyLedger.
// (The table's positions by id, and one flag a node: the package's verdict runs after every forward, and two sets of
// 893 strings took ~0.7 ms of it.)
void evaluateIds(const std::vector<std::pair<std::string, std::string>> &ran, const h3::Config &c,
                 std::vector<std::string> &missing, std::vector<std::string> &offenders,
                 std::vector<std::string> &problems) {
  const std::vector<NodeInfo> &expected = expectedNodes(c);
  const std::unordered_map<std::string, size_t> &index = expectedNodeIndex(c);
  std::vector<char> seenKnown(expected.size(), 0);
  std::set<std::string> seenUnknown;
  for (const auto &[id, actual] : ran) {
    auto it = index.find(id);
    const bool again = it == index.end() ? !seenUnknown.insert(id).second : seenKnown[it->second]++ != 0;
    if (it == index.end())
      problems.push_back("'" + id + "' is not a node of the recorded config");
    if (again)
      problems.push_back("'" + id + "' is recorded twice");
    if (actual != "row")
      offenders.push_back(id + ": actual " + actual);
  }
  for (size_t i = 0; i < expected.size(); ++i)
    if (!seenKnown[i])
      missing.push_back(expected[i].id);
}

// The same over a ledger document's node entries.
void evaluate(const json &nodes, const h3::Config &c, std::vector<std::string> &missing,
              std::vector<std::string> &offenders, std::vector<std::string> &problems) {
  std::vector<std::pair<std::string, std::string>> ran;
  for (const auto &e : nodes) {
    if (!e.is_object() || !e.contains("id") || !e["id"].is_string() || !e.contains("actual") ||
        !e["actual"].is_string()) {
      problems.push_back("a node entry lacks 'id' or 'actual'");
      continue;
    }
    ran.emplace_back(e["id"].get<std::string>(), e["actual"].get<std::string>());
  }
  evaluateIds(ran, c, missing, offenders, problems);
}

// The verdict's strict rule from the evaluation: complete, every node row, and no non-finite value in the header's
// "non_finite" list (shared by the builder's verdict and verifyLedger).
void applyStrictRule(LedgerVerdict &v, const std::vector<std::string> &missing, const json &nonFinite) {
  v.complete = missing.empty();
  for (auto &m : missing)
    v.offenders.push_back("missing " + m);
  if (!nonFinite.is_array())
    v.problems.push_back("header 'non_finite' is not an array");
  else
    for (const auto &e : nonFinite)
      v.offenders.push_back("non-finite " + (e.is_string() ? e.get<std::string>() : e.dump()));
  v.strictOk = v.complete && v.offenders.empty();
}

} // namespace

std::vector<std::pair<std::string, std::string>> LedgerBuilder::ranNodes() const {
  std::vector<std::pair<std::string, std::string>> ran;
  for (const Record &r : records_)
    for (const auto &n : r.op->nodes)
      ran.emplace_back(n, bindingName(r.actual));
  return ran;
}

LedgerVerdict LedgerBuilder::verdict() const {
  LedgerVerdict v;
  std::vector<std::string> missing;
  evaluateIds(ranNodes(), plan_.config, missing, v.offenders, v.problems);
  v.sealOk = true;
  applyStrictRule(v, missing, header_.value("non_finite", json::array()));
  return v;
}

json LedgerBuilder::finish() const {
  const std::vector<NodeInfo> &expected = expectedNodes(plan_.config);
  std::vector<std::string> missing, offenders, problems;
  evaluateIds(ranNodes(), plan_.config, missing, offenders, problems);
  if (!problems.empty())
    fail("ledger", "inconsistent ledger: {}", problems.front());
  std::map<std::string, std::string> kinds;  // each node gets its kind from the node table
  for (auto &n : expected)
    kinds[n.id] = n.kind;
  json nodes = json::array();
  for (const Record &r : records_) {
    const plan::Op &op = *r.op;
    auto io = [&](const std::vector<std::string> &names, bool hashed) {
      json a = json::array();
      for (const auto &n : names) {
        const plan::Value &pv = plan_.value(n);
        auto it = r.shapes.find(n);
        json e = {{"value", n},
                  {"dtype", std::string(dtypeName(pv.dtype))},
                  {"shape", it == r.shapes.end() ? json(nullptr) : json(it->second)}};
        if (auto h = r.hashes.find(n); hashed && h != r.hashes.end())
          e["hash"] = h->second;
        a.push_back(std::move(e));
      }
      return a;
    };
    const json ins = io(op.in, false), outs = io(op.out, true), order = plan::orderToJson(op.order);
    const json kernel = op.kernel ? json(*op.kernel) : json(nullptr);
    const json kernelSha = op.kernel ? json(plan_.kernels.at(*op.kernel).sha256) : json(nullptr);
    for (const auto &n : op.nodes) {
      json e = {{"id", n},
                {"seq", nodes.size()},
                {"op", plan::opKindName(op.kind)},
                {"op_index", op.index},
                {"requested", bindingName(requested(n))},
                {"actual", bindingName(r.actual)},
                {"kernel", kernel},
                {"kernel_sha256", kernelSha},
                {"reduction_order", order},
                {"inputs", ins},
                {"outputs", outs}};
      if (r.audit)
        e["audit"] = {{"max_abs", r.audit->maxAbs}, {"max_rel", r.audit->maxRel}, {"output", r.audit->output}};
      auto k = kinds.find(n);
      e["kind"] = k == kinds.end() ? std::string() : k->second;
      nodes.push_back(std::move(e));
    }
  }
  json l = {{"schema", kLedgerSchema},
            {"header", header_},
            {"nodes", std::move(nodes)},
            {"missing", missing},
            {"complete", missing.empty()},
            {"accepted", missing.empty() && offenders.empty() && !header_.contains("non_finite")}};
  return sealLedger(std::move(l));
}

void LedgerBuilder::recordNonFinite(const std::string &what) { header_["non_finite"].push_back(what); }

std::string computeLedgerSeal(const json &ledger) {
  json copy = ledger;
  copy.erase("seal");
  return sha256Hex(canonicalJson(copy));
}

json sealLedger(json ledger) {
  ledger["seal"] = computeLedgerSeal(ledger);
  return ledger;
}

LedgerVerdict verifyLedger(const json &l) {
  LedgerVerdict v;
  if (!l.is_object() || l.value("schema", std::string()) != kLedgerSchema) {
    v.problems.push_back(std::string("schema is not ") + kLedgerSchema);
    return v;
  }
  v.sealOk = l.contains("seal") && l["seal"].is_string() && l["seal"] == computeLedgerSeal(l);
  if (!v.sealOk)
    v.problems.push_back("the seal does not match the content (the ledger was modified)");
  h3::Config c;
  try {
    c = h3::configFromJson(l.at("header").at("config"), "ledger#/header/config");
  } catch (const std::exception &e) {
    v.problems.push_back(std::string("header config: ") + e.what());
    return v;
  }
  if (!l.contains("nodes") || !l["nodes"].is_array()) {
    v.problems.push_back("'nodes' is not an array");
    return v;
  }
  std::vector<std::string> missing;
  evaluate(l["nodes"], c, missing, v.offenders, v.problems);
  applyStrictRule(v, missing, l["header"].value("non_finite", json::array()));
  if (l.value("complete", !v.complete) != v.complete)
    v.problems.push_back("'complete' disagrees with the node entries");
  if (l.value("accepted", !v.strictOk) != v.strictOk)
    v.problems.push_back("'accepted' disagrees with the strict rule");
  return v;
}

std::string ledgerSummary(const json &l) {
  std::map<std::string, std::map<std::string, int>> counts;  // actual -> requested -> n
  std::map<std::string, std::vector<std::string>> nonRow;
  std::map<std::string, std::pair<double, std::string>> worst;  // kind -> max_rel, node
  for (const auto &e : l.value("nodes", json::array())) {
    std::string a = e.value("actual", "?"), r = e.value("requested", "?");
    counts[a][r]++;
    if (a != "row")
      nonRow[a].push_back(e.value("id", "?"));
    if (e.contains("audit")) {
      std::string kind = e.value("kind", "?");
      double rel = e["audit"].value("max_rel", 0.0);
      if (!worst.count(kind) || rel > worst[kind].first)
        worst[kind] = {rel, e.value("id", "?")};
    }
  }
  const json &h = l.value("header", json::object());
  std::string out = fmt::format("ledger: device {}, mode {}, sp {}, tp {}, plan {}\n", h.value("device", "?"),
                                h.value("mode", "?"), h.value("sp", 1), h.value("tp", 0),
                                h.value("plan_sha256", "?").substr(0, 16));
  if (const json w = h.value("weights", json()); w.is_object())
    out += fmt::format("weights: sha256 {} ({} tensors, {}), {} update(s) since the load\n",
                       w.value("sha256", "?"), w.value("tensors", json::object()).size(), w.value("identity", "?"),
                       w.value("updates", 0));
  out += fmt::format("{:<10} {:<10} {:>6}\n", "actual", "requested", "nodes");
  for (const auto &[a, m] : counts)
    for (const auto &[r, n] : m)
      out += fmt::format("{:<10} {:<10} {:>6}\n", a, r, n);
  for (const auto &[a, ids] : nonRow) {
    out += fmt::format("{} nodes ({}):", a, ids.size());
    for (size_t i = 0; i < ids.size() && i < 8; ++i)
      out += " " + ids[i];
    if (ids.size() > 8)
      out += fmt::format(" ... (+{})", ids.size() - 8);
    out += "\n";
  }
  if (!worst.empty()) {
    out += "audit, worst max_rel per node kind:\n";
    for (const auto &[k, w] : worst)
      out += fmt::format("  {:<16} {:.3e}  {}\n", k, w.first, w.second);
  }
  out += fmt::format("complete: {}, accepted: {}\n", l.value("complete", false), l.value("accepted", false));
  return out;
}

} // namespace h3c::rt
