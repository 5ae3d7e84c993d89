// The logical node table of docs/contract.md section 2 (ids and kinds in table order), as the fingerprint derivation
// (models/h3) writes it for a config. The ledger must account for exactly these nodes.
#pragma once

#include "h3c/models/config.h"

#include <string>
#include <unordered_map>
#include <vector>

namespace h3c::rt {

struct NodeInfo {
  std::string id;
  std::string kind;  // rope_table, linear, rms_norm, ... (section 2)
};

// 893 nodes for the full config: 15 top-level + 17 per transformer block + 14 per refiner block. Derived once per
// config and kept for the process (the reference stays valid).
const std::vector<NodeInfo> &expectedNodes(const h3::Config &c);

// The same table's positions by node id (the strict verdict of every forward looks each recorded node up in it).
const std::unordered_map<std::string, size_t> &expectedNodeIndex(const h3::Config &c);

} // namespace h3c::rt
