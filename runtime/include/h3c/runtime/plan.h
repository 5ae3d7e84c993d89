// The compiled plan (docs/contract.md section 5, schema "h3c-plan-v1"): read from PLANDIR/plan.json, validated
// strictly (fail closed: every problem is an h3c::Error naming "plan.json#/<JSON pointer>"), and kept in plain
// structs that both executors (CPU reference, GPU) walk in launch order.
#pragma once

#include "h3c/models/config.h"
#include "h3c/support/dtype.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace h3c::rt {

inline constexpr const char *kPlanSchema = "h3c-plan-v1";

// A value of the plan: rows in a symbolic domain ("S", "Nt", "Nv", "Na", "T", "T3", "1"), a fixed column count, a
// leading batch axis for token-domain values, and the buffer slot h3-plan-buffers assigned. `ranks` > 1 marks the
// per-rank F32 partials a row-parallel linear hands to allreduce_tree (logical shape [ranks, B, rows, cols]).
struct PlanValue {
  std::string name;
  DType dtype = DType::F32;
  std::string rows;
  int64_t cols = 0;
  bool batch = false;
  int64_t slot = -1;  // -1: no slot (host-only values, graph inputs)
  int64_t ranks = 1;
};

struct PlanSlot {
  int64_t id = 0;
  std::map<std::string, int64_t> bytesPerRow;  // row domain -> bytes per row (per batch item)
  int64_t fixedBytes = 0;
};

// The reduction order attribute (section 4). kind "" for ops that reduce nothing.
struct ReductionOrder {
  std::string kind;  // "", "k_chunks", "lane_tree", "flash"
  int64_t kStep = 0, units = 0, lanes = 0, kvBlock = 0;
  std::string acc, p;
  nlohmann::json json;  // as written in the plan (null when absent), copied into the ledger
};

struct PlanOp {
  size_t index = 0;  // position in launch order
  std::string op;    // linear, qkv_linear, rms_norm, ..., allreduce_tree (see opKinds())
  std::vector<std::string> nodes;  // fingerprint node ids this op implements
  std::vector<std::string> in, out;
  std::map<std::string, std::vector<std::string>> weights;  // role ("weight", "bias") -> diffusers tensor names
  nlohmann::json attrs = nlohmann::json::object();
  ReductionOrder order;
  std::optional<std::string> kernel;  // null: host-only op
  std::string where;  // "plan.json#/ops/17" for messages

  // attrs helpers: the value when present (type-checked), else `dflt`. Throw naming the attr's pointer.
  int64_t attrInt(const std::string &key, int64_t dflt) const;
  std::string attrString(const std::string &key, const std::string &dflt) const;
  bool hasAttr(const std::string &key) const { return attrs.contains(key); }
  const std::vector<std::string> &weightList(const std::string &role) const;  // empty when absent
  // Shard description: kind "none" | "replicated" | "column" | "row" and the degree.
  std::string shardKind() const;
  int64_t shardTp() const;
};

struct PlanKernel {
  std::string id, file, sha256, entry;
};

struct Plan {
  std::filesystem::path dir;  // the plan folder (kernel files are relative to it)
  nlohmann::json json;        // the whole document
  std::string planSha256;     // as recorded (verified on load)
  std::string fingerprintSha256;
  h3::Config config;
  std::string arch;
  int64_t tp = 1;
  bool fuse = true;
  std::vector<std::string> inputs;                // "@hidden_states", ...
  std::map<std::string, std::string> outputs;     // "sample" -> "unpack:sample"
  std::map<std::string, PlanValue> values;
  std::vector<PlanSlot> slots;
  std::vector<PlanOp> ops;
  std::map<std::string, PlanKernel> kernels;

  const PlanValue &value(const std::string &name) const;  // throws naming the value
  // For every value, the index of the last op that reads it (SIZE_MAX for plan outputs): lets executors free
  // activations as soon as they are dead.
  std::map<std::string, size_t> lastUse() const;
};

// The op kinds the runtime executes (section 3, the fused ops, and allreduce_tree).
const std::vector<std::string> &opKinds();
// The graph inputs section 2 names, in order.
const std::vector<std::string> &graphInputs();

// `path` is the plan folder (holding plan.json) or the plan.json file itself. Verifies plan_sha256, the schema, the
// config, value/slot/kernel references, def-before-use, reduction orders per op kind, kernel file hashes (when an op
// names a kernel), and that every fingerprint node of the config appears in exactly one op.
Plan loadPlan(const std::filesystem::path &path);
Plan planFromJson(const nlohmann::json &j, const std::filesystem::path &dir, const std::string &where = "plan.json");
// sha256 of the canonical JSON of `j` without its "plan_sha256" member (what plan_sha256 must equal).
std::string computePlanSha256(const nlohmann::json &j);

} // namespace h3c::rt
