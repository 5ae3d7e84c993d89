// The h3c version and build (git commit) this binary was built from: `h3c --version`, and recorded in the plans,
// ledgers and trajectories it writes, so a result names the code that made it.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace h3c {

const char *versionString();  // the project version, e.g. "0.9.0"
const char *buildString();    // the git commit (12 hex digits, "-dirty" when the tree differed), or "unknown"
// {"version": ..., "build": ...}: what plans, ledgers and trajectories record under "h3c".
nlohmann::json versionJson();

} // namespace h3c
