// Ledger comparison (ledger_diff.h).
#include "h3c/runtime/ledger_diff.h"

#include "h3c/support/error.h"

#include <fmt/format.h>

#include <map>
#include <set>

namespace h3c::rt {

namespace {

using nlohmann::json;

const json &nodesOf(const json &l, const std::string &where) {
  if (!l.is_object() || !l.contains("nodes") || !l["nodes"].is_array())
    fail(where, "not a ledger: no 'nodes' array");
  return l["nodes"];
}

std::string idOf(const json &n, const std::string &where, size_t i) {
  if (!n.is_object() || !n.contains("id") || !n["id"].is_string())
    fail(where, "node entry {} has no id", i);
  return n["id"].get<std::string>();
}

std::string str(const json &j) { return j.is_string() ? j.get<std::string>() : j.dump(); }

// One compact line for a header value: strings as they are, objects by their hash field when they have one.
std::string brief(const json &j) {
  if (j.is_object())
    for (const char *k : {"sha256", "content_sha256", "seed"})
      if (j.contains(k)) return std::string(k) + " " + str(j[k]);
  std::string s = str(j);
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

bool hasHashes(const json &nodes) {
  for (const auto &n : nodes)
    if (n.is_object() && n.contains("outputs") && n["outputs"].is_array())
      for (const auto &o : n["outputs"])
        if (o.is_object() && o.contains("hash")) return true;
  return false;
}

void compareField(const json &a, const json &b, const char *key, const char *label, std::vector<std::string> &what) {
  const json va = a.value(key, json()), vb = b.value(key, json());
  if (va != vb) what.push_back(fmt::format("{}: {} -> {}", label, brief(va), brief(vb)));
}

// What differs between two entries of one node; `bitsDiffer` says whether an output hash is among it.
std::vector<std::string> compareNodes(const json &a, const json &b, bool hashes, bool &bitsDiffer) {
  std::vector<std::string> what;
  bitsDiffer = false;
  compareField(a, b, "requested", "requested binding", what);
  compareField(a, b, "actual", "actual binding", what);
  compareField(a, b, "op", "op", what);
  compareField(a, b, "kernel", "kernel", what);
  compareField(a, b, "kernel_sha256", "kernel source sha256", what);
  if (a.value("reduction_order", json()) != b.value("reduction_order", json()))
    what.push_back("reduction order differs");
  const json oa = a.value("outputs", json::array()), ob = b.value("outputs", json::array());
  if (oa.size() != ob.size()) {
    what.push_back(fmt::format("output count: {} -> {}", oa.size(), ob.size()));
    return what;
  }
  for (size_t i = 0; i < oa.size(); ++i) {
    const std::string name = str(oa[i].value("value", json("?")));
    if (oa[i].value("value", json()) != ob[i].value("value", json()))
      what.push_back(fmt::format("output {}: value {} -> {}", i, name, str(ob[i].value("value", json("?")))));
    for (const char *k : {"dtype", "shape"})
      if (oa[i].value(k, json()) != ob[i].value(k, json()))
        what.push_back(fmt::format("output '{}': {} {} -> {}", name, k, str(oa[i].value(k, json())),
                                   str(ob[i].value(k, json()))));
    if (hashes && oa[i].contains("hash") && ob[i].contains("hash") && oa[i]["hash"] != ob[i]["hash"]) {
      what.push_back(fmt::format("output '{}': hash {} -> {}", name, str(oa[i]["hash"]), str(ob[i]["hash"])));
      bitsDiffer = true;
    }
  }
  return what;
}

// The header's weights records: the tensors whose content hashes differ (a ledger written before the record
// existed has none: then only whether both lack it).
void compareWeights(const json &a, const json &b, LedgerDiff &d) {
  // The values, not how they came (a record's "updates" / "updated" may differ for the same values).
  const auto value = [](const json &w, const char *k) { return w.is_object() ? w.value(k, json()) : json(); };
  if (value(a, "sha256") == value(b, "sha256") && value(a, "tensors") == value(b, "tensors")) return;
  d.weightsDiffer = true;
  const json ta = a.is_object() ? a.value("tensors", json::object()) : json::object();
  const json tb = b.is_object() ? b.value("tensors", json::object()) : json::object();
  std::set<std::string> names;
  for (const json *t : {&ta, &tb})
    if (t->is_object())
      for (auto it = t->begin(); it != t->end(); ++it) names.insert(it.key());
  d.weightsTensors = names.size();
  for (const auto &n : names)
    if (!ta.contains(n) || !tb.contains(n) || ta[n] != tb[n]) d.weightsChanged.push_back(n);
  const auto field = [](const json &w, const char *k) {
    return w.is_object() && w.contains(k) ? str(w[k]) : std::string("(none)");
  };
  d.header.push_back(fmt::format("weights: sha256 {} -> {}", field(a, "sha256"), field(b, "sha256")));
}

} // namespace

LedgerDiff diffLedgers(const json &a, const json &b, const std::string &whereA, const std::string &whereB) {
  LedgerDiff d;
  const json &na = nodesOf(a, whereA), &nb = nodesOf(b, whereB);
  const json ha = a.value("header", json::object()), hb = b.value("header", json::object());
  std::set<std::string> keys;
  for (const json *h : {&ha, &hb})
    if (h->is_object())
      for (auto it = h->begin(); it != h->end(); ++it) keys.insert(it.key());
  for (const auto &k : keys) {
    const json va = ha.value(k, json()), vb = hb.value(k, json());
    if (va != vb && k != "weights") d.header.push_back(fmt::format("{}: {} -> {}", k, brief(va), brief(vb)));
  }
  compareWeights(ha.value("weights", json()), hb.value("weights", json()), d);
  d.hashesA = hasHashes(na);
  d.hashesB = hasHashes(nb);
  std::map<std::string, size_t> inB;
  for (size_t i = 0; i < nb.size(); ++i) inB[idOf(nb[i], whereB, i)] = i;
  std::set<std::string> seenA;
  for (size_t i = 0; i < na.size(); ++i) {
    const std::string id = idOf(na[i], whereA, i);
    seenA.insert(id);
    auto it = inB.find(id);
    if (it == inB.end()) {
      d.onlyA.push_back(id);
      if (!d.first) d.first = LedgerDiff::Node{id, str(na[i].value("op", json(""))), int64_t(i), -1, {"absent in B"}};
      continue;
    }
    ++d.compared;
    bool bitsDiffer = false;
    std::vector<std::string> what = compareNodes(na[i], nb[it->second], d.hashesA && d.hashesB, bitsDiffer);
    if (what.empty()) continue;
    ++d.differing;
    const LedgerDiff::Node node{id, str(na[i].value("op", json(""))), int64_t(i), int64_t(it->second), what};
    if (!d.first)
      d.first = node;
    if (!d.firstOutput && bitsDiffer)
      d.firstOutput = node;
  }
  for (size_t i = 0; i < nb.size(); ++i)
    if (!seenA.count(idOf(nb[i], whereB, i))) d.onlyB.push_back(idOf(nb[i], whereB, i));
  return d;
}

json LedgerDiff::toJson() const {
  json j = {{"same", same()},          {"compared", compared},   {"differing", differing},
            {"only_a", onlyA},         {"only_b", onlyB},        {"header", header},
            {"hashes_a", hashesA},     {"hashes_b", hashesB},    {"first", nullptr}};
  auto node = [](const Node &n) {
    return json{{"id", n.id}, {"op", n.op}, {"seq_a", n.seqA}, {"seq_b", n.seqB}, {"what", n.what}};
  };
  j["weights"] = {{"differ", weightsDiffer}, {"changed", weightsChanged}, {"tensors", weightsTensors}};
  if (first) j["first"] = node(*first);
  j["first_output"] = firstOutput ? node(*firstOutput) : json(nullptr);
  return j;
}

std::string LedgerDiff::text() const {
  std::string s;
  for (const auto &h : header) s += "header " + h + "\n";
  if (weightsDiffer) {
    std::string names;
    for (size_t i = 0; i < weightsChanged.size() && i < 8; ++i) names += (i ? ", " : "") + weightsChanged[i];
    if (weightsChanged.size() > 8) names += fmt::format(", ... {} more", weightsChanged.size() - 8);
    s += weightsChanged.empty()
             ? std::string("the weights differ (the ledgers' weights records differ; no per-tensor hashes to compare)\n")
             : fmt::format("the weights differ: {} of {} tensors ({})\n", weightsChanged.size(), weightsTensors, names);
  }
  if (first) {
    s += fmt::format("first difference at node '{}' (op {}, A seq {}, B seq {}):\n", first->id, first->op,
                     first->seqA, first->seqB);
    for (const auto &w : first->what) s += "  " + w + "\n";
  }
  if (firstOutput && firstOutput->id != first->id)
    s += fmt::format("first output difference at node '{}' (op {}, A seq {}): the bits part here\n", firstOutput->id,
                     firstOutput->op, firstOutput->seqA);
  else if (firstOutput)
    s += "  (the bits part here)\n";
  if (!onlyA.empty()) s += fmt::format("{} node(s) only in A, first '{}'\n", onlyA.size(), onlyA.front());
  if (!onlyB.empty()) s += fmt::format("{} node(s) only in B, first '{}'\n", onlyB.size(), onlyB.front());
  s += fmt::format("{} of {} nodes in both differ", differing, compared);
  if (!(hashesA && hashesB))
    s += fmt::format("; outputs not compared: no content hashes in {} (run with --hash-nodes)",
                     !hashesA && !hashesB ? "either ledger" : !hashesA ? "A" : "B");
  s += !same() ? "\n" : hashesA && hashesB ? "; same\n" : "; no difference in bindings, kernels and orders\n";
  return s;
}

} // namespace h3c::rt
