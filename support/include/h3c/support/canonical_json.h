// Canonical JSON for hashing and sealing: object keys sorted (nlohmann::json's default std::map ordering), no
// whitespace, UTF-8 as is. Every hash h3c prints over JSON (plan, ledger, snapshot, trajectory) uses this form.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace h3c {

inline std::string canonicalJson(const nlohmann::json &j) { return j.dump(-1, ' ', false); }

} // namespace h3c
