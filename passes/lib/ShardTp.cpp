// h3-shard-tp{tp=N}: the tensor-parallel split of the transformer blocks (docs/contract.md section 4, TP).
// Column-parallel: q/k/v (head-aligned), the q/k norms and rope, attention, fc1 (value and gate halves split alike),
// swiglu and the AdaLN table (each chunk split alike). Row-parallel: the linears whose order has U > 1 units
// (to_out, fc2): rank r reduces units [r*U/N, (r+1)*U/N) by the sub-tree; for N > 1 the linear yields N F32 rank
// partials and an explicit h3.allreduce_tree combines them by the upper tree levels, then applies bias, epilogue
// and rounding, so every N reproduces tp = 1 bit for bit. The refiner and top-level ops stay replicated.
#include "Common.h"
#include "h3c/Passes/Passes.h"

#include "mlir/IR/Builders.h"

#include <map>

namespace h3c::passes {
#define GEN_PASS_DEF_H3SHARDTP
#include "h3c/Passes/Passes.h.inc"
} // namespace h3c::passes

using namespace mlir;
using namespace h3c::h3ir;
using h3c::passes::endsWith;

namespace {

struct ShardTp : h3c::passes::impl::H3ShardTpBase<ShardTp> {
  using Base::Base;

  bool ok = true;

  InFlightDiagnostic error(Operation *op) {
    ok = false;
    return op->emitOpError() << "[" << firstNode(op) << "] ";
  }

  // Column split of `what` (a count of heads, halves or columns) over tp ranks.
  void column(Operation *op, int64_t count, llvm::StringRef what) {
    if (count % tp) {
      error(op) << "cannot split " << count << " " << what << " over tp = " << int64_t(tp);
      return;
    }
    op->setAttr("shard", ShardAttr::get(op->getContext(), ShardKind::column, tp));
  }

  void rowParallel(LinearOp l) {
    Operation *op = l;
    OrderAttr order = l.getOrderAttr();
    if (!order) {
      error(op) << "has no reduction order (run h3-assign-reduction-order first)";
      return;
    }
    int64_t units = order.getUnits();
    if (units % tp) {
      error(op) << "cannot split " << units << " canonical K units over tp = " << int64_t(tp);
      return;
    }
    if (tp & (tp - 1)) {
      error(op) << "the pairwise unit tree needs a power-of-two tp, got " << int64_t(tp);
      return;
    }
    MLIRContext *ctx = op->getContext();
    ShardAttr shard = ShardAttr::get(ctx, ShardKind::row, tp);
    if (tp == 1) {
      op->setAttr("shard", shard);
      return;
    }
    auto y = cast<ActType>(l.getY().getType());
    OpBuilder b(op);
    auto partType = ActType::get(ctx, y.getDomain(), l.getN(), b.getF32Type(), y.getBatch(), tp);
    std::vector<std::string> nodes = h3c::passes::nodeList(op);
    std::string yName = cast<StringAttr>(l.getValues()[0]).str();
    auto part = LinearOp::create(b, l.getLoc(), partType, l.getX(), ValueRange{}, l.getK(), l.getN(), l.getWeight(),
                                 b.getArrayAttr({}), Epilogue::none, IntegerAttr(), IntegerAttr(), RowIndexAttr(),
                                 order, shard,
                                 h3c::passes::strArray(b, {nodes[0]}), h3c::passes::strArray(b, {nodes[0] + ":partials"}));
    std::vector<std::string> rest(nodes.begin() + 1, nodes.end());
    auto ar = AllreduceTreeOp::create(b, l.getLoc(), y, part.getY(), l.getEpilogueOperands(), tp, units, l.getN(),
                                      l.getBias(), l.getEpilogue(), l.getChunkAttr(), l.getNumChunksAttr(),
                                      l.getRowIndexAttr(), order, h3c::passes::strArray(b, rest),
                                      h3c::passes::strArray(b, {yName}));
    l.getY().replaceAllUsesWith(ar.getY());
    op->erase();
  }

  void runOnOperation() override {
    ModuleOp m = getOperation();
    if (tp < 1) {
      m.emitError() << "h3-shard-tp: tp must be >= 1, got " << int64_t(tp);
      return signalPassFailure();
    }
    getContext().getLoadedDialect<H3Dialect>()->getTpAttrHelper().setAttr(
        m, Builder(m.getContext()).getI64IntegerAttr(tp));
    for (Operation *op : h3c::passes::h3Ops(m)) {
      std::string node = firstNode(op);
      if (!h3c::passes::startsWith(node, "transformer_blocks.")) continue;  // refiner, top level: replicated
      if (auto q = dyn_cast<QkvLinearOp>(op)) {
        column(op, q.getHeads(), "heads");
      } else if (auto n = dyn_cast<QkNormOp>(op)) {
        column(op, n.getHeads(), "heads");
      } else if (auto r = dyn_cast<RopeOp>(op)) {
        column(op, r.getHeads(), "heads");
      } else if (auto n = dyn_cast<QkNormRopeOp>(op)) {
        column(op, n.getHeads(), "heads");
      } else if (auto a = dyn_cast<AttentionOp>(op)) {
        column(op, a.getHeads(), "heads");
      } else if (auto s = dyn_cast<SwigluOp>(op)) {
        column(op, cast<ActType>(s.getY().getType()).getCols(), "ffn columns");
      } else if (auto t = dyn_cast<AdalnTableOp>(op)) {
        int64_t chunkCols = t.getN() / t.getRowsPerTimestep() / t.getNumChunks();
        column(op, chunkCols, "columns of each AdaLN chunk");
      } else if (auto l = dyn_cast<LinearOp>(op)) {
        if (l.getShard()) continue;
        if (l.getOrder() && l.getOrder()->getUnits() > 1) {
          rowParallel(l);
        } else if (endsWith(node, ".ff.net.0.proj")) {
          column(op, l.getN() / 2, "ffn columns (value and gate halves)");
        } else if (endsWith(node, ".attn.to_q") || endsWith(node, ".attn.to_k") || endsWith(node, ".attn.to_v")) {
          // Unfused q/k/v: the heads come from the block's attention.
          int64_t headDim = 0;
          for (Operation *u : l.getY().getUsers())
            if (auto h = u->getAttrOfType<IntegerAttr>("head_dim")) headDim = h.getInt();
          if (!headDim || l.getN() % headDim) {
            error(op) << "cannot find the head size of this projection to split it head-aligned";
            continue;
          }
          column(op, l.getN() / headDim, "heads");
        }
      }
    }
    if (!ok) signalPassFailure();
  }
};

} // namespace
