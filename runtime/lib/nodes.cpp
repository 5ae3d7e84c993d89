// The node table comes from the fingerprint derivation (models/h3), the one place that writes it down.
#include "h3c/runtime/nodes.h"

#include "h3c/models/fingerprint.h"

#include <map>
#include <memory>
#include <mutex>

namespace h3c::rt {

const std::vector<NodeInfo> &expectedNodes(const h3::Config &c) {
  // Derived once per config for the process: the derivation builds the whole fingerprint (milliseconds at the full
  // config), and the strict verdict of every forward reads the table. Entries are never removed, so a returned
  // reference stays valid; a process sees a handful of configs at most.
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<const std::vector<NodeInfo>>> byConfig;
  const std::string key = h3::configToJson(c).dump();
  std::lock_guard<std::mutex> lock(mu);
  auto &slot = byConfig[key];
  if (!slot) {
    auto out = std::make_unique<std::vector<NodeInfo>>();
    for (auto &n : h3::deriveFingerprint(c, "").nodes) out->push_back({std::move(n.id), std::move(n.kind)});
    slot = std::move(out);
  }
  return *slot;
}

const std::unordered_map<std::string, size_t> &expectedNodeIndex(const h3::Config &c) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<const std::unordered_map<std::string, size_t>>> byConfig;
  const std::vector<NodeInfo> &nodes = expectedNodes(c);
  const std::string key = h3::configToJson(c).dump();
  std::lock_guard<std::mutex> lock(mu);
  auto &slot = byConfig[key];
  if (!slot) {
    auto out = std::make_unique<std::unordered_map<std::string, size_t>>();
    out->reserve(nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i) out->emplace(nodes[i].id, i);
    slot = std::move(out);
  }
  return *slot;
}

} // namespace h3c::rt
