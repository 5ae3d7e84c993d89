// The plan emitter: an h3 module after the pipeline -> plan.json (docs/contract.md section 5) plus the kernel
// sources the kernel emitter (codegen/kernels) produces for its ops.
#pragma once

#include "h3c/Passes/PlanJson.h"
#include "h3c/kernels/emit.h"
#include "h3c/models/fingerprint.h"

#include "mlir/IR/BuiltinOps.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace h3c::codegen {

using planjson::opToPlanJson;  // one op's plan entry without "kernel" (h3c/Passes/PlanJson.h)
using planjson::valueName;

struct PlanOptions {
  std::string arch = "sm_90a";
  int64_t tp = 1;
  bool fuse = true;
};

struct EmittedPlan {
  nlohmann::json plan;                                  // with plan_sha256
  std::map<std::string, kernels::KernelSource> kernels;  // id -> source
  std::vector<std::string> warnings;                    // ops whose kernel could not be emitted (kernel: null)
};

// `m` must have been through h3-plan-buffers (slots). Throws h3c::Error naming the op on a malformed module.
EmittedPlan emitPlan(mlir::ModuleOp m, const h3::Fingerprint &fp, const std::string &fingerprintSha256,
                     const PlanOptions &o);

// Writes OUT/plan.json and OUT/kernels/<id>.cu atomically (a folder renamed into place when complete). An existing
// OUT is replaced only when it is a previous plan folder (holds plan.json).
void writePlanDirectory(const EmittedPlan &p, const std::filesystem::path &out);

} // namespace h3c::codegen
