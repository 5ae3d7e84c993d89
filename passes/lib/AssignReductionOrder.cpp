// h3-assign-reduction-order: the order attribute of docs/contract.md section 4 on every reducing op. It depends
// on the op kind, the node (row-parallel candidates get U = 8 units) and the reduced extent only.
#include "Common.h"
#include "h3c/Passes/Passes.h"

namespace h3c::passes {
#define GEN_PASS_DEF_H3ASSIGNREDUCTIONORDER
#include "h3c/Passes/Passes.h.inc"
} // namespace h3c::passes

using namespace mlir;
using namespace h3c::h3ir;

namespace {

struct AssignReductionOrder : h3c::passes::impl::H3AssignReductionOrderBase<AssignReductionOrder> {
  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    bool ok = true;
    for (Operation *op : h3c::passes::h3Ops(getOperation())) {
      llvm::StringRef kind = requiredOrderKind(op);
      if (kind.empty()) continue;
      if (isa<AllreduceTreeOp>(op)) {
        // Created by h3-shard-tp with the order of the linear it completes.
        if (!op->getAttr("order")) {
          op->emitOpError() << "has no order: h3-shard-tp creates it with one";
          ok = false;
        }
        continue;
      }
      OrderAttr want;
      if (kind == "k_chunks") {
        std::vector<std::string> nodes = h3c::passes::nodeList(op);
        int64_t units = 1;
        if (isa<LinearOp>(op) && !nodes.empty() && h3c::passes::isRowParallelCandidate(nodes[0]))
          units = rowParallelUnits(cast<LinearOp>(op).getK());
        want = kChunksOrder(ctx, units);
      } else if (kind == "lane_tree") {
        want = laneTreeOrder(ctx);
      } else {
        want = flashOrder(ctx);
      }
      if (auto have = op->getAttrOfType<OrderAttr>("order")) {
        if (have != want) {
          op->emitOpError() << "[" << firstNode(op) << "] carries order " << have << " but the contract requires "
                            << want;
          ok = false;
        }
        continue;
      }
      op->setAttr("order", want);
    }
    if (!ok) signalPassFailure();
  }
};

} // namespace
