// The h3 dialect's C++ API: the generated dialect, enum, type, attribute, interface and op classes, plus small
// helpers that the importer, the passes and the plan emitter share (dtype names, order constructors).
#pragma once

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"

#include "h3c/Dialect/H3/H3Dialect.h.inc"

#include "h3c/Dialect/H3/H3Enums.h.inc"

#define GET_TYPEDEF_CLASSES
#include "h3c/Dialect/H3/H3Types.h.inc"

#define GET_ATTRDEF_CLASSES
#include "h3c/Dialect/H3/H3Attrs.h.inc"

namespace h3c::h3ir::detail {
// OrderedReduction's verifier: an order, when present, has the kind the op type requires.
llvm::LogicalResult verifyOrderedReduction(mlir::Operation *op);
} // namespace h3c::h3ir::detail

#include "h3c/Dialect/H3/H3Interfaces.h.inc"

#define GET_OP_CLASSES
#include "h3c/Dialect/H3/H3Ops.h.inc"

#include <string>

namespace h3c::h3ir {

// The row domains of docs/contract.md section 1 (Sr: a rank's range of S under sequence parallelism).
bool isRowDomain(llvm::StringRef d);
// "BF16", "F32", "I64", "I32" (the plan's dtype names); "" for anything else.
std::string dtypeName(mlir::Type t);

// Reduction-order constants pinned by docs/contract.md section 4.
inline constexpr int64_t kKStep = 16;
inline constexpr int64_t kLanes = 32;
// kv_block 128 since 2026-12-04 (was 64): half the running-max updates and o rescales per key, and an m64n128 S
// wgmma on Hopper. Plans compiled before carry kv_block 64 and their own kernel text, and keep their bits.
inline constexpr int64_t kKvBlock = 128;
// row_units: the canonical rows of one unit of a gradient's sum over rows (docs/contract.md section 14).
inline constexpr int64_t kRowUnit = 128;

// k_chunks with one unit (U = 1: every linear reduces K in one ascending chain of 16-wide chunks).
OrderAttr kChunksOrder(mlir::MLIRContext *ctx);
OrderAttr laneTreeOrder(mlir::MLIRContext *ctx);
OrderAttr flashOrder(mlir::MLIRContext *ctx);
OrderAttr rowUnitsOrder(mlir::MLIRContext *ctx);

// The first node id of an h3 op (for messages), "" if none.
std::string firstNode(mlir::Operation *op);

// Whether a linear_grad_w's `grads` names its bias's gradient (dbias sums the F32 g: such an op cannot read bf(g)).
bool computesBiasGradient(LinearGradWOp op);

} // namespace h3c::h3ir
