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

// The row domains of docs/contract.md section 1.
bool isRowDomain(llvm::StringRef d);
// "BF16", "F32", "I64", "I32" (the plan's dtype names); "" for anything else.
std::string dtypeName(mlir::Type t);

// Reduction-order constants pinned by docs/contract.md section 4.
inline constexpr int64_t kKStep = 16;
inline constexpr int64_t kLanes = 32;
inline constexpr int64_t kKvBlock = 64;
inline constexpr int64_t kRowParallelUnits = 8;

// Units of a row-parallel candidate (attn.to_out.0 / ff.net.2 of a transformer block) with reduced extent K:
// 8 when K % (8 * k_step) == 0 (every released width), else the largest power of two u < 8 with
// K % (u * k_step) == 0 (narrow test configs, e.g. tiny's K = 32 -> 2). Depends on K only.
int64_t rowParallelUnits(int64_t k);

OrderAttr kChunksOrder(mlir::MLIRContext *ctx, int64_t units);
OrderAttr laneTreeOrder(mlir::MLIRContext *ctx);
OrderAttr flashOrder(mlir::MLIRContext *ctx);

// The first node id of an h3 op (for messages), "" if none.
std::string firstNode(mlir::Operation *op);

} // namespace h3c::h3ir
