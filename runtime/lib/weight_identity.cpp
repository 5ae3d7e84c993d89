// The weights' identity (weight_identity.h).
#include "h3c/runtime/weight_identity.h"

#include "h3c/support/error.h"
#include "h3c/support/sha256.h"

namespace h3c::rt {

std::string combineWeightHashes(const std::map<std::string, HashedTensor> &tensors) {
  Sha256 sha;
  for (const auto &[name, t] : tensors) {  // std::map: sorted by name
    const std::string line = name + " " + t.dtype + " " + t.shape + " " + t.hash + "\n";
    sha.update(line.data(), line.size());
  }
  return sha.hexDigest();
}

std::string combineWeightHashes(const plan::Plan &p, const std::map<std::string, std::string> &hashes) {
  std::map<std::string, HashedTensor> tensors;
  for (const auto &b : p.weights)
    for (const auto &t : b.tensors) {
      auto it = hashes.find(t.name);
      if (it == hashes.end()) fail("weights:" + t.name, "internal error: no content hash");
      tensors[t.name] = {std::string(dtypeName(t.dtype)), shapeText(t.shape), it->second};
    }
  if (tensors.size() != hashes.size())
    fail("weights", "internal error: {} hashes for the plan's {} tensors", hashes.size(), tensors.size());
  return combineWeightHashes(tensors);
}

} // namespace h3c::rt
