// `h3c ledger diff A B`: where two runs part. Walks A's nodes in graph (execution) order and compares each with B's
// node of the same id: requested and actual binding, kernel (id and source hash), reduction order, and every output's
// dtype, shape and content hash (`--hash-nodes`). The first node that differs is where the bits part (every later
// node reads it); the header fields that differ (plan, weights, request, device, ...) say why they may. A weight change
// is named as such: which tensors' content hashes differ (the header's "weights" record).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace h3c::rt {

struct LedgerDiff {
  struct Node {
    std::string id, op;
    int64_t seqA = -1, seqB = -1;     // positions in each ledger's node list (-1: absent)
    std::vector<std::string> what;    // "actual binding: row -> reference", "output 'x': hash 01.. -> 9f..", ...
  };
  std::vector<std::string> header;    // "plan_sha256: ab.. -> cd..", "request: ...", one line per differing field
  size_t compared = 0;                // nodes in both
  size_t differing = 0;               // of those, nodes with any difference
  std::vector<std::string> onlyA, onlyB;
  // Output hashes were compared only where both ledgers record them; this says which ledger lacks them.
  bool hashesA = false, hashesB = false;
  std::optional<Node> first;          // the first differing node in A's order (or the first node missing in B)
  std::optional<Node> firstOutput;    // the first node whose output hashes differ: where the bits part
  // The weights' identities (header "weights", weight_identity.h): whether they differ, and which tensors' hashes
  // (names in either ledger whose hash differs or is missing in the other), of how many.
  bool weightsDiffer = false;
  std::vector<std::string> weightsChanged;
  size_t weightsTensors = 0;
  bool same() const { return !first && onlyA.empty() && onlyB.empty() && !weightsDiffer; }
  nlohmann::json toJson() const;
  std::string text() const;
};

// Throws h3c::Error naming `whereA` / `whereB` when a ledger lacks its node list or a node its id.
LedgerDiff diffLedgers(const nlohmann::json &a, const nlohmann::json &b, const std::string &whereA = "A",
                       const std::string &whereB = "B");

} // namespace h3c::rt
