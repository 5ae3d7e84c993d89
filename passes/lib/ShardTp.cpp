// h3-shard-tp{tp=N}: tensor parallelism by columns only (docs/contract.md section 5.2). In the transformer blocks
// every GEMM is column-parallel with the full K, so no reduction is ever split and every collective is a bf16
// all-gather (a copy):
//   - the AdaLN table (each of its chunks split alike), q/k/v (by heads), fc1 (value and gate halves alike), and
//     to_out / fc2 (by output columns, after an all-gather of their input) compute the rank's columns;
//   - the q/k norms, rope, attention (by heads), swiglu and gate_residual follow their operands' columns;
//   - norm_modulate reads whole values (the stream and the table), so the rank's columns are all-gathered before it.
// An op's attributes and result types become the rank's (local widths); `shard = #h3.shard<column, tp, segments>`
// records how the full op's columns are split. Where an op reads a value by columns that a rank holds whole (the
// packed stream entering block 0), an h3.split keeps the rank's columns. The refiner and the top-level ops stay
// replicated. Every rank's bits equal tp = 1's: each output element is computed from the same operands in the same
// order, only by another rank.
#include "Common.h"
#include "h3c/Passes/PlanOp.h"
#include "h3c/Passes/Passes.h"

#include "mlir/IR/Builders.h"

namespace h3c::passes {
#define GEN_PASS_DEF_H3SHARDTP
#include "h3c/Passes/Passes.h.inc"
} // namespace h3c::passes

using namespace mlir;
using namespace h3c::h3ir;
using h3c::passes::endsWith;

namespace {

ActType actOf(Value v) { return cast<ActType>(v.getType()); }

struct ShardTp : h3c::passes::impl::H3ShardTpBase<ShardTp> {
  using Base::Base;

  bool ok = true;
  // Values holding a rank's columns, with the number of equal segments of their full width.
  llvm::DenseMap<Value, int64_t> localSegs;
  llvm::DenseMap<Value, Value> gathered;  // rank's columns -> the all-gathered whole value
  llvm::DenseMap<Value, Value> splits;    // whole value -> the rank's columns (h3.split)

  InFlightDiagnostic error(Operation *op) {
    ok = false;
    return op->emitOpError() << "[" << firstNode(op) << "] ";
  }

  // Marks `op` column-parallel over `segments` equal segments after checking that `count` (heads, columns of a
  // segment, ...) splits over the ranks.
  bool shard(Operation *op, int64_t count, llvm::StringRef what, int64_t segments) {
    if (count % tp) {
      error(op) << "cannot split " << count << " " << what << " over tp = " << int64_t(tp);
      return false;
    }
    op->setAttr("shard", ShardAttr::get(op->getContext(), ShardKind::column, tp, segments));
    return true;
  }

  void setI64(Operation *op, llvm::StringRef name, int64_t v) {
    op->setAttr(name, Builder(op->getContext()).getI64IntegerAttr(v));
  }

  // Result `r` now holds the rank's columns of a full width made of `segments` equal segments.
  void localResult(Value r, int64_t segments) {
    ActType t = actOf(r);
    r.setType(ActType::get(r.getContext(), t.getDomain(), t.getCols() / tp, t.getElementType(), t.getBatch()));
    localSegs[r] = segments;
  }

  OpBuilder after(Value v) {
    OpBuilder b(v.getContext());
    b.setInsertionPointAfterValue(v);
    return b;
  }

  // `v` as a whole value: the all-gather of a rank's columns (created once, right after v is defined).
  Value whole(Value v) {
    auto it = localSegs.find(v);
    if (it == localSegs.end()) return v;
    if (Value g = gathered.lookup(v)) return g;
    ActType t = actOf(v);
    OpBuilder b = after(v);
    auto type = ActType::get(v.getContext(), t.getDomain(), t.getCols() * tp, t.getElementType(), t.getBatch());
    auto g = AllGatherOp::create(b, v.getLoc(), type, v, Axis::cols, uint64_t(tp), uint64_t(it->second),
                                 b.getArrayAttr({}),
                                 h3c::passes::strArray(b, {h3c::passes::planName(v) + ":gather_cols"}));
    gathered[v] = g.getFull();
    return g.getFull();
  }

  // `v` as the rank's columns of `segments` equal segments: v itself, the input of the all-gather that made it
  // whole, or an h3.split of it (created once, right after v is defined).
  Value part(Operation *user, Value v, int64_t segments) {
    auto have = localSegs.find(v);
    if (have != localSegs.end()) {
      if (have->second != segments)
        error(user) << "reads a value split into " << have->second << " column segments as " << segments;
      return v;
    }
    if (auto g = v.getDefiningOp<AllGatherOp>(); g && g.getAxis() == Axis::cols && int64_t(g.getSegments()) == segments)
      return g.getPart();
    if (Value s = splits.lookup(v)) return s;
    ActType t = actOf(v);
    if (t.getCols() % (tp * segments)) {
      error(user) << "cannot split " << t.getCols() << " columns into " << segments << " segments over tp = "
                  << int64_t(tp);
      return v;
    }
    OpBuilder b = after(v);
    auto type = ActType::get(v.getContext(), t.getDomain(), t.getCols() / tp, t.getElementType(), t.getBatch());
    auto s = SplitOp::create(b, v.getLoc(), type, v, Axis::cols, uint64_t(tp), uint64_t(segments),
                             b.getArrayAttr({}), h3c::passes::strArray(b, {h3c::passes::planName(v) + ":split_cols"}));
    splits[v] = s.getPart();
    localSegs[s.getPart()] = segments;
    return s.getPart();
  }

  void wholeOperands(Operation *op) {
    for (OpOperand &o : op->getOpOperands()) o.set(whole(o.get()));
  }

  // A linear of a transformer block: q/k/v by heads, fc1 by value and gate halves, to_out / fc2 by output columns.
  void linear(LinearOp l, const std::string &node) {
    Operation *op = l;
    int64_t N = l.getN();
    l->setOperand(0, whole(l.getX()));
    if (endsWith(node, ".attn.to_q") || endsWith(node, ".attn.to_k") || endsWith(node, ".attn.to_v")) {
      // Unfused q/k/v: the heads come from the block's q/k norm or attention.
      int64_t headDim = 0;
      for (Operation *u : l.getY().getUsers())
        if (auto h = u->getAttrOfType<IntegerAttr>("head_dim")) headDim = h.getInt();
      if (!headDim || N % headDim) {
        error(op) << "cannot find the head size of this projection to split it head-aligned";
        return;
      }
      if (!shard(op, N / headDim, "heads", 1)) return;
      setI64(op, "N", N / tp);
      localResult(l.getY(), 1);
    } else if (endsWith(node, ".ff.net.0.proj")) {
      if (!shard(op, N / 2, "ffn columns (value and gate halves)", 2)) return;
      setI64(op, "N", N / tp);
      localResult(l.getY(), l.getEpilogue() == Epilogue::swiglu ? 1 : 2);
    } else if (endsWith(node, ".attn.to_out.0") || endsWith(node, ".ff.net.2")) {
      if (!shard(op, N, "output columns", 1)) return;
      // Epilogue operands: the stream's and the table's rank columns; the row metadata whole.
      // (They follow x: operand 1 on.)
      for (unsigned i = 1; i < op->getNumOperands(); ++i) {
        Value v = op->getOperand(i);
        if (i == 1) op->setOperand(i, part(op, v, 1));
        else if (i == 2) op->setOperand(i, part(op, v, *l.getNumChunks()));
        else op->setOperand(i, whole(v));
      }
      setI64(op, "N", N / tp);
      localResult(l.getY(), 1);
    } else {
      wholeOperands(op);
    }
  }

  void runOnOperation() override {
    ModuleOp m = getOperation();
    if (tp < 1) {
      m.emitError() << "h3-shard-tp: tp must be >= 1, got " << int64_t(tp);
      return signalPassFailure();
    }
    if (tp > 1 && m->hasAttr("h3.adapter_slots")) {
      // (docs/contract.md section 13: the down slot would be replicated and the up slot split with W; not built)
      m.emitError() << "h3-shard-tp: unmerged LoRA (h3-lora) is not split over tensor-parallel ranks yet; compile "
                       "with --tp 1 (sequence parallelism works) or load the adapter merged";
      return signalPassFailure();
    }
    auto tpAttr = getContext().getLoadedDialect<H3Dialect>()->getTpAttrHelper();
    bool sharded = false;
    m.walk([&](Operation *op) {
      auto axis = op->getAttrOfType<AxisAttr>("axis");
      sharded |= op->hasAttr("shard") || (axis && axis.getValue() == Axis::cols);
    });
    if ((tpAttr.getAttr(m) && tpAttr.getAttr(m).getInt() > 1) || sharded) {
      m.emitError() << "h3-shard-tp: the module is already split over tensor-parallel ranks";
      return signalPassFailure();
    }
    tpAttr.setAttr(m, Builder(m.getContext()).getI64IntegerAttr(tp));
    if (tp == 1) return;
    for (Operation *op : h3c::passes::h3Ops(m)) {
      std::string node = firstNode(op);
      if (!h3c::passes::startsWith(node, "transformer_blocks.")) {
        wholeOperands(op);  // refiner, top level: replicated
        continue;
      }
      if (auto t = dyn_cast<AdalnTableOp>(op)) {
        wholeOperands(op);
        int64_t segs = t.getRowsPerTimestep() * t.getNumChunks();
        if (!shard(op, t.getN() / segs, "columns of each AdaLN chunk", segs)) continue;
        setI64(op, "N", t.getN() / tp);
        localResult(t.getTable(), t.getNumChunks());  // the [T3, chunks x H] view: one segment per chunk
      } else if (auto q = dyn_cast<QkvLinearOp>(op)) {
        if (q.getEpilogue() != Epilogue::none) {
          // The fused epilogue reads whole norm weights and is emitted for one rank's whole q/k/v only; h3-fuse
          // leaves q/k/v and the norms apart when tp > 1.
          error(op) << "qkv_linear with the '" << stringifyEpilogue(q.getEpilogue())
                    << "' epilogue cannot be split over tp = " << int64_t(tp) << " (fuse with tp=" << int64_t(tp) << ")";
          continue;
        }
        wholeOperands(op);
        if (!shard(op, q.getHeads(), "heads", 3)) continue;
        setI64(op, "heads", q.getHeads() / tp);
        for (Value r : op->getResults()) localResult(r, 1);
      } else if (isa<QkNormOp, RopeOp, QkNormRopeOp, AttentionOp>(op)) {
        int64_t heads = op->getAttrOfType<IntegerAttr>("heads").getInt();
        if (!shard(op, heads, "heads", 1)) continue;
        // q/k/v: the rank's heads; the rope tables (F32 cos/sin, per row) whole.
        for (OpOperand &o : op->getOpOperands())
          o.set(actOf(o.get()).getElementType().isF32() ? whole(o.get()) : part(op, o.get(), 1));
        setI64(op, "heads", heads / tp);
        for (Value r : op->getResults()) localResult(r, 1);
      } else if (auto s = dyn_cast<SwigluOp>(op)) {
        if (!shard(op, actOf(s.getY()).getCols(), "ffn columns", 1)) continue;
        op->setOperand(0, part(op, s.getX(), 2));
        localResult(s.getY(), 1);
      } else if (auto g = dyn_cast<GateResidualOp>(op)) {
        if (!shard(op, actOf(g.getZ()).getCols(), "columns", 1)) continue;
        op->setOperand(0, part(op, g.getX(), 1));
        op->setOperand(1, part(op, g.getY(), 1));
        op->setOperand(2, part(op, g.getTable(), g.getNumChunks()));
        for (unsigned i = 3; i < op->getNumOperands(); ++i) op->setOperand(i, whole(op->getOperand(i)));
        localResult(g.getZ(), 1);
      } else if (auto l = dyn_cast<LinearOp>(op)) {
        linear(l, node);
      } else {
        wholeOperands(op);  // norm_modulate: the whole stream and table
      }
    }
    // Function results are whole values.
    m.walk([&](func::ReturnOp r) { wholeOperands(r); });
    if (!ok) signalPassFailure();
  }
};

} // namespace
