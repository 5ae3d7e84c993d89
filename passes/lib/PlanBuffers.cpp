// h3-plan-buffers: liveness-based activation slots. Values are allocated in launch order when defined and
// released after their last reader; a released slot is reused by a later value of the same row domain (best fit:
// the smallest free slot that already holds it, else the largest free one, which grows). Sizes are symbolic
// (bytes per row of a domain, per batch item), so one plan serves every request size.
#include "Common.h"
#include "h3c/Passes/Passes.h"

#include "mlir/IR/Builders.h"

#include <map>

namespace h3c::passes {
#define GEN_PASS_DEF_H3PLANBUFFERS
#include "h3c/Passes/Passes.h.inc"
} // namespace h3c::passes

using namespace mlir;
using namespace h3c::h3ir;

namespace {

int64_t eltBytes(Type t) { return t.isBF16() ? 2 : t.isF32() || t.isInteger(32) ? 4 : 8; }

struct Slot {
  std::string domain;
  int64_t bytesPerRow = 0;
  bool free = false;
};

struct PlanBuffers : h3c::passes::impl::H3PlanBuffersBase<PlanBuffers> {
  using Base::Base;

  int64_t sp = 1;  // the module's h3.sp

  // Rows of a domain for the peak report: every token domain bounded by S (B = 1), one timestep; a rank's range of
  // S (Sr) the largest one, ceil(S / sp).
  int64_t rows(llvm::StringRef d) const {
    if (d == "T") return 1;
    if (d == "T3") return 3;
    if (d == "1") return 1;
    if (d == "Sr") return (tokens + sp - 1) / sp;
    return tokens;
  }

  void runOnOperation() override {
    ModuleOp m = getOperation();
    if (tokens < 1) {
      m.emitError() << "h3-plan-buffers: tokens must be >= 1";
      return signalPassFailure();
    }
    Builder b(m.getContext());
    // The discardable attributes this pass writes (declared and verified by the dialect).
    auto *dialect = m.getContext()->getLoadedDialect<H3Dialect>();
    if (auto a = dialect->getSpAttrHelper().getAttr(m)) sp = a.getInt();
    StringAttr slotName = dialect->getSlotAttrHelper().getName();
    auto slotsAttr = dialect->getSlotsAttrHelper();
    std::vector<Slot> slots;
    int64_t peak = 0;
    bool ok = true;
    m.walk([&](func::FuncOp fn) {
      if (fn.getBody().empty()) return;
      Block &body = fn.getBody().front();
      // Last reader of each value (the terminator keeps outputs alive to the end).
      llvm::DenseMap<Value, Operation *> last;
      for (Operation &op : body)
        for (Value v : op.getOperands()) last[v] = &op;
      llvm::DenseMap<Value, int> slotOf;
      int64_t live = 0;
      auto bytesPerRow = [](Value v) {
        auto t = cast<ActType>(v.getType());
        return t.getCols() * eltBytes(t.getElementType());
      };
      auto allocate = [&](Value v) {
        auto t = cast<ActType>(v.getType());
        int64_t need = bytesPerRow(v);
        int best = -1;
        for (int i = 0; i < (int)slots.size(); ++i) {
          const Slot &s = slots[i];
          if (!s.free || s.domain != t.getDomain()) continue;
          if (best < 0) { best = i; continue; }
          const Slot &cur = slots[best];
          bool fits = s.bytesPerRow >= need, curFits = cur.bytesPerRow >= need;
          if (fits != curFits ? fits : fits ? s.bytesPerRow < cur.bytesPerRow : s.bytesPerRow > cur.bytesPerRow)
            best = i;
        }
        if (best < 0) {
          slots.push_back(Slot{t.getDomain().str(), 0, false});
          best = slots.size() - 1;
        }
        slots[best].free = false;
        slots[best].bytesPerRow = std::max(slots[best].bytesPerRow, need);
        slotOf[v] = best;
        live += need * rows(t.getDomain());
        peak = std::max(peak, live);
        return best;
      };
      auto release = [&](Value v) {
        slots[slotOf[v]].free = true;
        live -= bytesPerRow(v) * rows(cast<ActType>(v.getType()).getDomain());
      };
      for (BlockArgument a : body.getArguments()) {
        if (!isa<ActType>(a.getType())) {
          fn.emitOpError() << "argument " << a.getArgNumber() << " is not an h3 activation";
          ok = false;
          return;
        }
        fn.setArgAttr(a.getArgNumber(), slotName, b.getI64IntegerAttr(allocate(a)));
      }
      for (BlockArgument a : body.getArguments())
        if (!last.count(a)) release(a);  // never read
      for (Operation &op : body) {
        if (isa<func::ReturnOp>(op)) continue;
        std::vector<Attribute> ids;
        for (Value r : op.getResults()) {
          if (!isa<ActType>(r.getType())) {
            op.emitOpError() << "result is not an h3 activation";
            ok = false;
            return;
          }
          ids.push_back(b.getI64IntegerAttr(allocate(r)));
        }
        slotsAttr.setAttr(&op, b.getArrayAttr(ids));
        // Release operands read for the last time here, and results nobody reads, after the op ran.
        llvm::SmallPtrSet<Value, 8> done;
        for (Value v : op.getOperands())
          if (last[v] == &op && done.insert(v).second) release(v);
        for (Value r : op.getResults())
          if (!last.count(r)) release(r);
      }
    });
    if (!ok) return signalPassFailure();
    std::vector<Attribute> table;
    int64_t total = 0;
    for (size_t i = 0; i < slots.size(); ++i) {
      table.push_back(b.getDictionaryAttr({
          b.getNamedAttr("id", b.getI64IntegerAttr(i)),
          b.getNamedAttr("bytes_per_row", b.getDictionaryAttr({b.getNamedAttr(slots[i].domain,
                                                                              b.getI64IntegerAttr(slots[i].bytesPerRow))})),
          b.getNamedAttr("fixed_bytes", b.getI64IntegerAttr(0)),
      }));
      total += slots[i].bytesPerRow * rows(slots[i].domain);
    }
    dialect->getBuffersAttrHelper().setAttr(m, b.getDictionaryAttr({
                                                   b.getNamedAttr("slots", b.getArrayAttr(table)),
                                                   b.getNamedAttr("tokens", b.getI64IntegerAttr(tokens)),
                                                   b.getNamedAttr("peak_live_bytes", b.getI64IntegerAttr(peak)),
                                                   b.getNamedAttr("slot_bytes", b.getI64IntegerAttr(total)),
                                               }));
  }
};

} // namespace
