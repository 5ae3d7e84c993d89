// h3-verify-strict: the gate before planning. Every reducing op (OrderedReduction) must carry the order the
// contract pins (section 4) and every op must be one a qualified fixed-order kernel (or the host) implements on the
// target arch. Errors name the node. A pure check: it reads the module and changes nothing (the arch is the pass
// option; it is not recorded in the IR).
#include "Common.h"
#include "h3c/Passes/PlanOp.h"
#include "h3c/Passes/Passes.h"
#include "h3c/kernels/emit.h"

namespace h3c::passes {
#define GEN_PASS_DEF_H3VERIFYSTRICT
#include "h3c/Passes/Passes.h.inc"
} // namespace h3c::passes

using namespace mlir;
using namespace h3c::h3ir;

namespace {

// Largest head size the fixed-order attention kernel holds in registers/shared memory.
// The mma.sync attention kernel keeps a 64-query block and double-buffered K/V blocks of kv_block (128) rows in
// shared memory: (64 + 4 * 128) * (d + 8) * 2 bytes fit an sm_90/sm_100 CTA up to d = 192.
constexpr int64_t kMaxHeadDim = 192;

struct VerifyStrict : h3c::passes::impl::H3VerifyStrictBase<VerifyStrict> {
  using Base::Base;
  bool ok = true;

  InFlightDiagnostic error(Operation *op) {
    ok = false;
    return op->emitOpError() << "[" << firstNode(op) << "] ";
  }

  void checkOrder(Operation *op) {
    auto red = dyn_cast<OrderedReduction>(op);
    if (!red) {
      // Not declared by the op, so a discardable attribute: nothing would follow it.
      if (op->getAttr("order")) error(op) << "reduces nothing but carries an order";
      return;
    }
    OrderKind kind = red.getRequiredOrderKind();
    OrderAttr order = red.getOrderAttr();
    if (!order) {
      error(op) << "reduction without an order (" << stringifyOrderKind(kind) << " required)";
      return;
    }
    // (The op verifier already rejects an order of the wrong kind.)
    if (!order.getAcc().isF32()) error(op) << "accumulator must be f32";
    switch (kind) {
    case OrderKind::k_chunks: {
      if (order.getKStep() != kKStep)
        error(op) << "k_step must be " << kKStep << " (the MMA K width), got " << order.getKStep();
      else if (order != h3c::passes::contractOrder(red))
        error(op) << "needs the order " << h3c::passes::contractOrder(red);
      break;
    }
    case OrderKind::lane_tree:
      if (order.getLanes() != kLanes) error(op) << "lane_tree needs " << kLanes << " lanes, got " << order.getLanes();
      break;
    case OrderKind::flash:
      if (order.getKvBlock() != kKvBlock || order.getKStep() != kKStep)
        error(op) << "flash needs kv_block = " << kKvBlock << " and k_step = " << kKStep;
      if (!order.getP() || !order.getP().isBF16()) error(op) << "flash stores P as bf16";
      break;
    case OrderKind::row_units:
      if (order != h3c::passes::contractOrder(red)) error(op) << "needs the order " << h3c::passes::contractOrder(red);
      break;
    }
  }

  void checkKernel(Operation *op) {
    if (auto a = dyn_cast<AttentionOp>(op)) {
      if (a.getHeadDim() % kKStep || a.getHeadDim() > kMaxHeadDim)
        error(op) << "no fixed-order attention kernel for head_dim " << a.getHeadDim() << " (needs a multiple of "
                  << kKStep << ", at most " << kMaxHeadDim << ")";
    }
    auto *dialect = op->getContext()->getLoadedDialect<H3Dialect>();
    ModuleOp m = op->getParentOfType<ModuleOp>();
    auto degree = [&](bool seq) -> int64_t {
      IntegerAttr a = seq ? dialect->getSpAttrHelper().getAttr(m) : dialect->getTpAttrHelper().getAttr(m);
      return a ? a.getInt() : 1;
    };
    if (auto shard = op->getAttrOfType<ShardAttr>("shard"))
      if (shard.getTp() != degree(false))
        error(op) << "is sharded over tp = " << shard.getTp() << " but the module is tp = " << degree(false);
    // Layout ops move rows over the sp ranks and columns over the tp ranks (docs/contract.md section 5.2).
    auto layout = [&](Axis axis, int64_t parts) {
      bool seq = axis == Axis::rows;
      if (parts != degree(seq))
        error(op) << "moves " << parts << " parts of " << stringifyAxis(axis) << " but the module is "
                  << (seq ? "sp" : "tp") << " = " << degree(seq);
    };
    if (auto g = dyn_cast<AllGatherOp>(op)) layout(g.getAxis(), g.getParts());
    if (auto s = dyn_cast<SplitOp>(op)) layout(s.getAxis(), s.getParts());
    if (auto l = dyn_cast<LinearOp>(op)) {
      Type in = cast<ActType>(l.getX().getType()).getElementType();
      if (!in.isBF16() && !in.isF32()) error(op) << "no linear kernel for input " << in;
    }
  }

  // The kernel emitter is the authority on what a qualified fixed-order kernel implements: ask it for every op
  // (it checks the op's shapes, dtypes and order against its templates; host ops and the layout ops, copies the
  // runtime performs, have none). h3c compile reports ops without a device kernel.
  void checkEmitter(Operation *op) {
    try {
      (void)h3c::kernels::emitKernel(h3c::passes::toPlanOp(op, /*requireNames=*/false),
                                     h3c::passes::operandValues(op, /*requireNames=*/false), std::string(arch));
    } catch (const std::exception &e) {
      error(op) << "no qualified fixed-order kernel: " << e.what();
    }
  }

  void runOnOperation() override {
    ModuleOp m = getOperation();
    if (arch != "sm_90a" && arch != "sm_100a") {
      m.emitError() << "h3-verify-strict: unsupported arch '" << std::string(arch) << "' (sm_90a, sm_100a)";
      return signalPassFailure();
    }
    m.walk([&](Operation *op) {
      if (isa<ModuleOp, func::FuncOp, func::ReturnOp>(op)) return;
      if (op->getName().getDialectNamespace() != "h3") {
        op->emitOpError() << "is not an h3 op: no fixed-order kernel implements it";
        ok = false;
        return;
      }
      checkOrder(op);
      checkKernel(op);
      if (ok) checkEmitter(op);
    });
    if (!ok) return signalPassFailure();
    markAllAnalysesPreserved();
  }
};

} // namespace
