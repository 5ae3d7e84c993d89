// Helpers shared by the h3 passes: node-id tests and the func the importer builds.
#pragma once

#include "h3c/Dialect/H3/H3Dialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <string>
#include <vector>

namespace h3c::passes {

inline bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
inline bool startsWith(const std::string &s, const std::string &prefix) { return s.rfind(prefix, 0) == 0; }

// "transformer_blocks.7." for "transformer_blocks.7.attn.to_q"; "" for top-level nodes.
std::string blockPrefix(const std::string &node);
// The order docs/contract.md section 4 pins for a reducing op: k_chunks with one unit (U = 1, every linear);
// lane_tree with 32 lanes; flash. h3-assign-reduction-order gives it out, h3-verify-strict checks it.
h3c::h3ir::OrderAttr contractOrder(h3c::h3ir::OrderedReduction op);


std::vector<std::string> nodeList(mlir::Operation *op);
mlir::ArrayAttr strArray(mlir::Builder &b, const std::vector<std::string> &v);

// The h3 ops of every func in the module, in program order (a snapshot: safe to rewrite while iterating).
std::vector<mlir::Operation *> h3Ops(mlir::ModuleOp m);

} // namespace h3c::passes
