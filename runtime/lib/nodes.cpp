// The node table comes from the fingerprint derivation (models/h3), the one place that writes it down.
#include "h3c/runtime/nodes.h"

#include "h3c/models/fingerprint.h"

#include <map>
#include <memory>
#include <mutex>

namespace h3c::rt {

namespace {

// A config's table and its positions by id.
struct NodeTable {
  std::vector<NodeInfo> nodes;
  std::unordered_map<std::string, size_t> index;
};

// Derived once per config for the process: the derivation builds the whole fingerprint (milliseconds at the full
// config), and the strict verdict of every forward reads the table. Entries are never removed, so a returned
// reference stays valid; a process sees a handful of configs at most.
const NodeTable &nodeTable(const h3::Config &c) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<const NodeTable>> byConfig;
  const std::string key = h3::configToJson(c).dump();
  std::lock_guard<std::mutex> lock(mu);
  auto &slot = byConfig[key];
  if (!slot) {
    auto t = std::make_unique<NodeTable>();
    for (auto &n : h3::deriveFingerprint(c, "").nodes) t->nodes.push_back({std::move(n.id), std::move(n.kind)});
    t->index.reserve(t->nodes.size());
    for (size_t i = 0; i < t->nodes.size(); ++i) t->index.emplace(t->nodes[i].id, i);
    slot = std::move(t);
  }
  return *slot;
}

} // namespace

const std::vector<NodeInfo> &expectedNodes(const h3::Config &c) { return nodeTable(c).nodes; }

const std::unordered_map<std::string, size_t> &expectedNodeIndex(const h3::Config &c) { return nodeTable(c).index; }

} // namespace h3c::rt
