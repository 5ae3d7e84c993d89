// The plan entry (docs/contract.md section 5) of one h3 op, without "kernel": op, nodes, in, out, weights, attrs,
// order. What the kernel emitter (codegen/kernels) reads, so h3-verify-strict can ask it about every op.
#pragma once

#include "mlir/IR/Operation.h"
#include "mlir/IR/Value.h"

#include <nlohmann/json.hpp>

#include <string>

namespace h3c::planjson {

// The plan name of an SSA value: `h3.name` of a func argument, or `values[i]` of the defining op.
std::string valueName(mlir::Value v);

// Throws h3c::Error naming the op when it is not an h3 op, or (requireNames) when a value has no plan name;
// without requireNames such values are listed as "<unnamed>" (enough for the kernel emitter).
nlohmann::json opToPlanJson(mlir::Operation *op, bool requireNames = true);

} // namespace h3c::planjson
