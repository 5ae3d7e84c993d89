// Which weights produced a forward (issue 21, provenance): the ledger header's "weights" record. Every plan weight
// tensor is hashed as the executor holds it (its pinned dtype, diffusers layout, the whole tensor) with the node
// content hash (support/content_hash.h, "h3c-sum128-v1"; the GPU hashes its device copy where it lives), and the
// per-tensor hashes are combined in a fixed order:
//
//   sha256 = sha256 of the lines "<name> <dtype> <shape> <hash>\n", one per plan weight tensor, sorted by name
//            (shape as "[3072, 3072]", dtype as safetensors spells it)
//
// The identity depends on the values only: not on the plan's buffer layout, sp or tp, nor on where the values came
// from (a checkpoint in BF16 or F32, synthetic weights, hot updates, a merged LoRA adapter), so a trainer that holds
// the same values computes the same sha256 from its own tensors (the package's h3c.weights_identity).
#pragma once

#include "h3c/plan/plan.h"

#include <nlohmann/json.hpp>

#include <map>
#include <string>

namespace h3c::rt {

inline constexpr const char *kWeightsIdentityName = "h3c-weights-v1";

// The combined sha256 of `hashes` (plan tensor -> content hash) over the tensors of `p`; throws naming a tensor of
// the plan that has no hash (or a hash of a name the plan lacks).
std::string combineWeightHashes(const plan::Plan &p, const std::map<std::string, std::string> &hashes);

// The same over a tensor list given as name -> (dtype, shape, hash): what a trainer computes from its state dict.
struct HashedTensor {
  std::string dtype;   // "BF16"
  std::string shape;   // "[3072, 3072]"
  std::string hash;
};
std::string combineWeightHashes(const std::map<std::string, HashedTensor> &tensors);

} // namespace h3c::rt
