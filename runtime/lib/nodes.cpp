// The node table comes from the fingerprint derivation (models/h3), the one place that writes it down.
#include "h3c/runtime/nodes.h"

#include "h3c/models/fingerprint.h"

namespace h3c::rt {

std::vector<NodeInfo> expectedNodes(const h3::Config &c) {
  std::vector<NodeInfo> out;
  for (auto &n : h3::deriveFingerprint(c, "").nodes) out.push_back({std::move(n.id), std::move(n.kind)});
  return out;
}

} // namespace h3c::rt
