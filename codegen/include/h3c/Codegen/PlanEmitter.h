// The plan emitter: an h3 module after the pipeline -> a plan (h3c::plan::Plan, docs/contract.md section 5) with the
// kernel the emitter (kernels/) produces for every op. Written to disk by h3c_plan's writer.
#pragma once

#include "h3c/kernels/emit.h"
#include "h3c/models/fingerprint.h"
#include "h3c/plan/plan.h"

#include "mlir/IR/BuiltinOps.h"

#include <string>
#include <vector>

namespace h3c::codegen {

struct EmittedPlan {
  plan::Plan plan;
  std::vector<std::string> warnings;  // ops whose kernel could not be emitted (kernel: null)
};

// `m` must have been through h3-plan-buffers (slots). Throws h3c::Error naming the op on a malformed module.
// `tuning` chooses kernel variants (never bits); its `wgmma` is taken from `o`.
EmittedPlan emitPlan(mlir::ModuleOp m, const h3::Fingerprint &fp, const std::string &fingerprintSha256,
                     const plan::Options &o, const kernels::EmitOptions &tuning = {});

} // namespace h3c::codegen
