// Ledger: bindings and globs, the seal, the strict rule, and what verify reports.
#include "h3c/models/fingerprint.h"
#include "h3c/runtime/ledger.h"
#include "h3c/support/canonical_json.h"
#include "h3c/support/error.h"
#include "h3c/support/sha256.h"

#include <gtest/gtest.h>

using namespace h3c;
using namespace h3c::rt;
using nlohmann::json;

namespace {

// A complete, accepted ledger of the tiny config, written by hand (not by LedgerBuilder).
json handLedger() {
  h3::Config c = h3::namedConfig("tiny");
  json nodes = json::array();
  for (const auto &n : expectedNodes(c))
    nodes.push_back({{"id", n.id}, {"kind", n.kind}, {"requested", "row"}, {"actual", "row"}});
  json l = {{"schema", "h3c-ledger-v1"},
            {"header", {{"config", h3::configToJson(c)}, {"mode", "strict"}, {"tp", 1}, {"device", "cpu"}}},
            {"nodes", nodes},
            {"missing", json::array()},
            {"complete", true},
            {"accepted", true}};
  // The seal, computed here from its definition: sha256 over the canonical JSON (sorted keys, no spaces).
  l["seal"] = sha256Hex(l.dump());
  return l;
}

json reseal(json l) {
  l.erase("seal");
  l["seal"] = sha256Hex(l.dump(-1));
  return l;
}

} // namespace

TEST(Ledger, GlobAndBindRules) {
  EXPECT_TRUE(globMatch("transformer_blocks.*.attn.*", "transformer_blocks.12.attn.to_q"));
  EXPECT_FALSE(globMatch("transformer_blocks.*.attn.*", "token_refiner.refiner_blocks.0.attn.to_q"));
  EXPECT_TRUE(globMatch("*", ""));
  EXPECT_TRUE(globMatch("proj_?n", "proj_in"));
  EXPECT_FALSE(globMatch("proj_?n", "proj_out"));
  EXPECT_TRUE(globMatch("*norm*", "transformer_blocks.0.norm1"));
  EXPECT_FALSE(globMatch("a*b", "acbd"));
  BindRule r = parseBindRule("transformer_blocks.*.ff.*=native");
  EXPECT_EQ(r.binding, Binding::Native);
  EXPECT_EQ(r.glob, "transformer_blocks.*.ff.*");
  EXPECT_THROW(parseBindRule("nothing"), Error);
  EXPECT_THROW(parseBindRule("x=row"), Error);  // only native/reference can be requested
  EXPECT_THROW(parseBindRule("x=fast"), Error);
  std::vector<BindRule> rules = {parseBindRule("*=reference"), parseBindRule("proj_in=native")};
  EXPECT_EQ(requestedBinding("proj_in", Mode::Strict, rules), Binding::Native);  // later rules win
  EXPECT_EQ(requestedBinding("pack", Mode::Strict, rules), Binding::Reference);
  EXPECT_EQ(requestedBinding("pack", Mode::Strict, {}), Binding::Row);
  EXPECT_EQ(requestedBinding("pack", Mode::Audit, {}), Binding::Row);
  EXPECT_EQ(requestedBinding("pack", Mode::Off, {}), Binding::Native);
}

TEST(Ledger, SealIsSha256OfCanonicalJsonWithoutTheSeal) {
  json l = handLedger();
  EXPECT_EQ(computeLedgerSeal(l), l["seal"]);
  EXPECT_EQ(sealLedger(l)["seal"], l["seal"]);
  LedgerVerdict v = verifyLedger(l);
  EXPECT_TRUE(v.ok()) << (v.problems.empty() ? "" : v.problems[0]);
  EXPECT_EQ(canonicalJson(json{{"b", 1}, {"a", {1, 2}}}), "{\"a\":[1,2],\"b\":1}");
}

TEST(Ledger, TamperingBreaksTheSeal) {
  json l = handLedger();
  l["header"]["tp"] = 2;
  LedgerVerdict v = verifyLedger(l);
  EXPECT_FALSE(v.sealOk);
  EXPECT_FALSE(v.ok());
  json m = handLedger();
  m["nodes"][0]["kind"] = "linear";
  EXPECT_FALSE(verifyLedger(m).sealOk);
}

TEST(Ledger, StrictRuleNamesNonRowAndMissingNodes) {
  json l = handLedger();
  l["nodes"][7]["actual"] = "native";
  l["nodes"][9]["actual"] = "interim";
  l["accepted"] = false;
  l = reseal(l);
  LedgerVerdict v = verifyLedger(l);
  EXPECT_TRUE(v.sealOk);
  EXPECT_TRUE(v.complete);
  EXPECT_FALSE(v.strictOk);
  ASSERT_EQ(v.offenders.size(), 2u);
  EXPECT_EQ(v.offenders[0], l["nodes"][7]["id"].get<std::string>() + ": actual native");
  EXPECT_TRUE(v.problems.empty());

  json m = handLedger();
  std::string gone = m["nodes"][20]["id"];
  m["nodes"].erase(20);
  m["complete"] = false;
  m["accepted"] = false;
  m = reseal(m);
  LedgerVerdict w = verifyLedger(m);
  EXPECT_TRUE(w.sealOk);
  EXPECT_FALSE(w.complete);
  EXPECT_FALSE(w.ok());
  ASSERT_EQ(w.offenders.size(), 1u);
  EXPECT_EQ(w.offenders[0], "missing " + gone);

  // A ledger that claims acceptance it does not have is inconsistent even when resealed.
  json n = handLedger();
  n["nodes"][3]["actual"] = "reference";
  n = reseal(n);
  LedgerVerdict x = verifyLedger(n);
  EXPECT_FALSE(x.problems.empty());
  EXPECT_FALSE(x.ok());

  // Duplicates and unknown nodes are problems.
  json d = handLedger();
  d["nodes"].push_back(d["nodes"][0]);
  d["nodes"].push_back({{"id", "transformer_blocks.99.norm1"}, {"actual", "row"}});
  d = reseal(d);
  EXPECT_GE(verifyLedger(d).problems.size(), 2u);
}

TEST(Ledger, SummaryCountsBindings) {
  json l = handLedger();
  l["nodes"][0]["actual"] = "reference";
  l["nodes"][0]["requested"] = "reference";
  std::string s = ledgerSummary(l);
  EXPECT_NE(s.find("reference"), std::string::npos);
  EXPECT_NE(s.find(l["nodes"][0]["id"].get<std::string>()), std::string::npos);
  EXPECT_NE(s.find(std::to_string(l["nodes"].size() - 1)), std::string::npos);  // the row count
}

// The node table is derived once per config and kept (every forward's strict verdict reads it): the same table for
// an equal config, another for another config, and the fingerprint derivation's ids and kinds in its order.
TEST(Ledger, ExpectedNodesAreDerivedOncePerConfig) {
  const h3::Config tiny = h3::namedConfig("tiny");
  const std::vector<NodeInfo> &a = expectedNodes(tiny);
  EXPECT_EQ(&a, &expectedNodes(h3::namedConfig("tiny")));
  const std::vector<NodeInfo> &small = expectedNodes(h3::namedConfig("small"));
  EXPECT_NE(&a, &small);
  EXPECT_GT(small.size(), a.size());
  const auto derived = h3::deriveFingerprint(tiny, "").nodes;
  ASSERT_EQ(a.size(), derived.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].id, derived[i].id);
    EXPECT_EQ(a[i].kind, derived[i].kind);
  }
}
