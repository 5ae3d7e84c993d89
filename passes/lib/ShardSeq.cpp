// h3-shard-seq{sp=N}: sequence parallelism (docs/contract.md section 5.2). Every rank holds the full weights and a
// contiguous range of the canonical packed rows (domain Sr). The packed stream and its per-row metadata (pack's
// outputs, the rope tables) are split by rows right where they are made (h3.split, a local copy); everything
// computed from them then lives on the rank's rows. Only attention mixes rows: its keys and values are all-gathered
// by rows (h3.all_gather, in canonical order) and each rank attends its own query rows over every key. The output
// heads' rows are all-gathered before unpack. Every op except attention is row-independent and attention sums the
// keys in canonical order, so every row's bits equal the one-rank run's.
#include "Common.h"
#include "h3c/Passes/PlanOp.h"
#include "h3c/Passes/Passes.h"

#include "mlir/IR/Builders.h"

namespace h3c::passes {
#define GEN_PASS_DEF_H3SHARDSEQ
#include "h3c/Passes/Passes.h.inc"
} // namespace h3c::passes

using namespace mlir;
using namespace h3c::h3ir;

namespace {

ActType act(Value v) { return cast<ActType>(v.getType()); }
bool onRankRows(Value v) { return isa<ActType>(v.getType()) && act(v).getDomain() == "Sr"; }

struct ShardSeq : h3c::passes::impl::H3ShardSeqBase<ShardSeq> {
  using Base::Base;

  llvm::DenseMap<Value, Value> gathered;  // a rank's rows -> all rows

  ActType withDomain(ActType t, llvm::StringRef d) {
    return ActType::get(t.getContext(), d, t.getCols(), t.getElementType(), t.getBatch());
  }

  // All rows of `v` (held as the rank's rows), gathered once right before its first reader `user`.
  Value allRows(Value v, Operation *user) {
    if (Value g = gathered.lookup(v)) return g;
    OpBuilder b(user);
    auto g = AllGatherOp::create(b, v.getLoc(), withDomain(act(v), "S"), v, Axis::rows,
                                 uint64_t(sp), 1, b.getArrayAttr({}),
                                 h3c::passes::strArray(b, {h3c::passes::planName(v) + ":gather_rows"}));
    gathered[v] = g.getFull();
    return g.getFull();
  }

  // The S-domain results of `op` that anything reads, split by rows right after it; every reader gets the split.
  void splitResults(Operation *op) {
    OpBuilder b(op->getContext());
    b.setInsertionPointAfter(op);
    for (Value r : op->getResults()) {
      if (act(r).getDomain() != "S" || r.use_empty()) continue;
      auto s = SplitOp::create(b, r.getLoc(), withDomain(act(r), "Sr"), r, Axis::rows,
                               uint64_t(sp), 1, b.getArrayAttr({}),
                               h3c::passes::strArray(b, {h3c::passes::planName(r) + ":split_rows"}));
      r.replaceAllUsesExcept(s.getPart(), s);
      b.setInsertionPointAfter(s);
    }
  }

  void runOnOperation() override {
    ModuleOp m = getOperation();
    if (sp < 1) {
      m.emitError() << "h3-shard-seq: sp must be >= 1, got " << int64_t(sp);
      return signalPassFailure();
    }
    auto spAttr = getContext().getLoadedDialect<H3Dialect>()->getSpAttrHelper();
    bool split = false;
    m.walk([&](Operation *op) {
      for (Value r : op->getResults()) split |= onRankRows(r);
    });
    if ((spAttr.getAttr(m) && spAttr.getAttr(m).getInt() > 1) || split) {
      m.emitError() << "h3-shard-seq: the module is already split by rows (it holds values of a rank's rows, Sr)";
      return signalPassFailure();
    }
    spAttr.setAttr(m, Builder(m.getContext()).getI64IntegerAttr(sp));
    if (sp == 1) return;
    for (Operation *op : h3c::passes::h3Ops(m)) {
      if (isa<PackOp, RopeTableOp>(op)) {
        splitResults(op);
        continue;
      }
      if (!llvm::any_of(op->getOperands(), onRankRows)) continue;
      if (auto a = dyn_cast<AttentionOp>(op)) {
        // The rank's queries attend every key: k and v are all-gathered by rows, in canonical order.
        for (unsigned i : {1u, 2u})
          if (onRankRows(op->getOperand(i))) op->setOperand(i, allRows(op->getOperand(i), op));
      } else if (isa<UnpackOp>(op)) {
        // unpack selects rows of every modality out of all of S.
        for (OpOperand &o : op->getOpOperands())
          if (onRankRows(o.get())) o.set(allRows(o.get(), op));
        continue;
      }
      // Row-independent: what the op computes from the rank's rows is the rank's rows.
      for (Value r : op->getResults())
        if (act(r).getDomain() == "S") r.setType(withDomain(act(r), "Sr"));
    }
    // Function results are whole values.
    m.walk([&](func::ReturnOp r) {
      for (OpOperand &o : r->getOpOperands())
        if (onRankRows(o.get())) o.set(allRows(o.get(), r));
    });
  }
};

} // namespace
