// An h3 op as a plan op (h3c::plan::Op, docs/contract.md section 5): the compiler's one translation from IR to the
// plan format's structs. h3-verify-strict uses it to ask the kernel emitter about every op; the plan emitter uses it
// to write the plan (through h3c_plan's writer, the only code that spells the JSON).
#pragma once

#include "h3c/kernels/emit.h"
#include "h3c/plan/plan.h"

#include "mlir/IR/Operation.h"
#include "mlir/IR/Value.h"

#include <string>

namespace h3c::passes {

// The plan name of an SSA value: `h3.name` of a func argument, or `values[i]` of the defining op.
std::string valueName(mlir::Value v);

// valueName(v), or "arg<N>" for an unnamed function argument (hand-written test inputs): the base of the names
// the shard passes give the values they create.
std::string planName(mlir::Value v);

// The plan value of an SSA value (dtype, domain, width, batch); slot -1.
plan::Value planValue(mlir::Value v, const std::string &name);

// Throws h3c::Error naming the op when it is not an h3 op, or (requireNames) when a value has no plan name; without
// requireNames such values are named "<unnamed>" (enough for the kernel emitter). `kernel` is left empty.
plan::Op toPlanOp(mlir::Operation *op, bool requireNames = true);

// The values an op reads and writes, for the kernel emitter.
kernels::OperandValues operandValues(mlir::Operation *op, bool requireNames = true);

} // namespace h3c::passes
