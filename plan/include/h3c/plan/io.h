// Reading and writing plans: the only code that knows the JSON spelling of docs/contract.md section 5.
#pragma once

#include "h3c/plan/plan.h"

#include <nlohmann/json_fwd.hpp>

#include <filesystem>
#include <string>

namespace h3c::plan {

// `path` is a plan folder (holding plan.json) or the plan.json file itself. Verifies everything section 5 states:
// plan_sha256, the schema, the config, values/slots/weights, each op's operand arity, attrs and order, def-before-use,
// that every fingerprint node of the config is implemented by exactly one op, and every kernel (file present, hash,
// launch ABI, parameters that fit every op launching it). Errors are h3c::Error naming "plan.json#/<pointer>".
Plan loadPlan(const std::filesystem::path &path);
// The same checks on a parsed document; kernel files are read from `dir` (none are read when `dir` is empty and the
// plan names no kernel). `file` names the document in messages.
Plan planFromJson(const nlohmann::json &j, const std::filesystem::path &dir, const std::string &file = "plan.json");

// The plan as JSON, plan_sha256 included (computed over the canonical JSON of the object without it).
nlohmann::json planToJson(const Plan &p);
std::string computePlanSha256(const nlohmann::json &planJson);
// The JSON spelling of a reduction order (null for OrderKind::None), as the plan writes it; the ledger records it.
nlohmann::json orderToJson(const Order &o);
// Writes OUT/plan.json and OUT/kernels/<id>.cu atomically (a folder renamed into place when complete). An existing
// OUT is replaced only when it is a previous plan folder (holds plan.json and nothing but plan files). Returns the
// plan's sha256.
std::string writePlanFolder(const Plan &p, const std::filesystem::path &out);

} // namespace h3c::plan
