// Shared internals of the trajectory writer, verifier and drift report (not part of h3c_trajectory's public API).
#pragma once

#include "h3c/support/safetensors.h"
#include "h3c/trajectory/trajectory.h"

#include <cstdlib>
#include <string>
#include <vector>

namespace h3c::rt::traj {

int64_t headerNumSteps(const nlohmann::json &h);
std::vector<int64_t> noiseShape(const nlohmann::json &h, int m);
int64_t numel(const std::vector<int64_t> &shape);
// header[grid][modality][i] as F32 ("sigmas" or "timesteps").
float gridValue(const nlohmann::json &h, const char *grid, int m, int64_t i);
// Required header fields and their types; `where` names the file.
void checkHeader(const nlohmann::json &h, const std::string &where);
// {"sha256", "max_abs", "items"} of a [B, rows, cols] tensor with `items` = B.
nlohmann::json tensorSummary(const std::vector<float> &v, int64_t items);
// sha256 of each of the `items` equal slices of `v`.
std::vector<std::string> itemHashes(const std::vector<float> &v, int64_t items);
// The record form of an SDE modality.
nlohmann::json sdeJson(const SdeRecord &r);
// The header's sampler is "sde".
bool isSde(const nlohmann::json &h);
// Generated (non-conditioning) elements per item of modality m.
int64_t generatedCount(const nlohmann::json &h, int m);
std::vector<float> readF32(const st::File &f, const std::string &name, const std::vector<int64_t> &shape);
void writeF32File(const std::filesystem::path &path,
                  const std::vector<std::pair<std::string, const std::vector<float> *>> &tensors,
                  const std::vector<std::vector<int64_t>> &shapes);
ModalityFloats readState(const std::filesystem::path &path, const nlohmann::json &header);

// AtomicFileWriter / AtomicDirectory temp names: ".<name>.tmp-<pid>-<n>-<hex>".
inline bool isTempName(const std::string &name) {
  return !name.empty() && name[0] == '.' && name.find(".tmp-") != std::string::npos;
}

// "<prefix>NNNNN<suffix>" with exactly five digits -> true and the number.
inline bool parseIndexed(const std::string &name, const std::string &prefix, const std::string &suffix,
                         int64_t &out) {
  if (name.size() != prefix.size() + 5 + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return false;
  out = 0;
  for (size_t i = prefix.size(); i < prefix.size() + 5; ++i) {
    if (name[i] < '0' || name[i] > '9')
      return false;
    out = out * 10 + (name[i] - '0');
  }
  return true;
}

} // namespace h3c::rt::traj
