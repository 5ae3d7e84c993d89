// Helpers the trajectory test files share: one definition each (the test binary is a unity build, where two
// files' anonymous namespaces are one).
#pragma once

#include "h3c/support/files.h"

#include <filesystem>
#include <map>
#include <string>

namespace h3c::testtraj {

// One F32 rounding of an exact (double) value: the expectations round exactly where the sampler does.
inline float r32(double x) { return static_cast<float>(x); }

// Every regular file under `dir`: relative path -> bytes.
inline std::map<std::string, std::string> folderBytes(const std::filesystem::path &dir) {
  std::map<std::string, std::string> out;
  for (const auto &e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file())
      out[std::filesystem::relative(e.path(), dir).string()] = readFile(e.path());
  return out;
}

} // namespace h3c::testtraj
