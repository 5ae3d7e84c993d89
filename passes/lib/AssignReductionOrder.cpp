// h3-assign-reduction-order: the order attribute of docs/contract.md section 4 on every reducing op (every op with
// the OrderedReduction interface). It depends on the op kind only: k_chunks (one unit), lane_tree or flash.
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
    bool ok = true;
    getOperation().walk([&](OrderedReduction red) {
      Operation *op = red;
      OrderAttr have = red.getOrderAttr();
      OrderAttr want = h3c::passes::contractOrder(red);
      if (!have) {
        red.setOrderAttr(want);
      } else if (have != want) {
        op->emitOpError() << "[" << firstNode(op) << "] carries order " << have << " but the contract requires "
                          << want;
        ok = false;
      }
    });
    if (!ok) signalPassFailure();
  }
};

} // namespace
