// h3-plan-buffers: liveness-based activation slots. Values are allocated in launch order when defined and
// released after their last reader; a released slot is reused by a later value of the same row domain (best fit:
// the smallest free slot that already holds it, else the largest free one, which grows; plan/slots.h, the rule the
// placement of a checkpointed plan shares). Sizes are symbolic
// (bytes per row of a domain, per batch item), so one plan serves every request size.
// With a backward function (h3-backward, docs/contract.md section 14) the forward and the backward are one timeline,
// the backward's ops after the forward's: a backward argument named like a forward value is that value (a saved
// activation), so it keeps the forward's slot and stays live until the backward's last read. The forward's outputs
// are never released (an executor returns them after both functions ran).
// With checkpoint segments (`h3c compile --checkpoint blocks`) the compile driver places the values again, over the
// checkpointed schedule (plan/slots.h placeOnCheckpointedSchedule): the segments are made from the emitted plan.
#include "Common.h"
#include "h3c/Passes/PlanOp.h"
#include "h3c/Passes/Passes.h"
#include "h3c/plan/slots.h"

#include "mlir/IR/Builders.h"

#include <algorithm>
#include <map>

namespace h3c::passes {
#define GEN_PASS_DEF_H3PLANBUFFERS
#include "h3c/Passes/Passes.h.inc"
} // namespace h3c::passes

using namespace mlir;
using namespace h3c::h3ir;

namespace {

int64_t eltBytes(Type t) { return t.isBF16() ? 2 : t.isF32() || t.isInteger(32) ? 4 : 8; }

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
    h3c::plan::SlotAllocator slots;  // the best-fit rule (plan/slots.h)
    int64_t peak = 0;
    bool ok = true;
    // The timeline: the forward's body, then the backward's (when there is one).
    std::vector<func::FuncOp> fns;
    for (auto fn : m.getOps<func::FuncOp>())
      if (!fn.getBody().empty()) fns.push_back(fn);
    std::stable_partition(fns.begin(), fns.end(), [](func::FuncOp f) { return f.getName() != "backward"; });
    // Saved activations: the backward's arguments that name a forward value stand for that value.
    llvm::DenseMap<Value, Value> savedOf;
    if (fns.size() == 2 && fns[1].getName() == "backward") {
      std::map<std::string, Value> forwardValues;
      Block &fwd = fns[0].getBody().front();
      for (BlockArgument a : fwd.getArguments()) forwardValues[h3c::passes::planName(a)] = a;
      for (Operation &op : fwd)
        for (Value r : op.getResults()) forwardValues[h3c::passes::planName(r)] = r;
      for (BlockArgument a : fns[1].getBody().front().getArguments()) {
        auto it = forwardValues.find(h3c::passes::planName(a));
        if (it != forwardValues.end()) savedOf[a] = it->second;
      }
    }
    auto canon = [&](Value v) {
      auto it = savedOf.find(v);
      return it == savedOf.end() ? v : it->second;
    };
    // Last reader of each value over the timeline; the forward's outputs are pinned (never released).
    llvm::DenseMap<Value, Operation *> last;
    llvm::DenseSet<Value> pinned;
    for (func::FuncOp fn : fns)
      for (Operation &op : fn.getBody().front())
        for (Value v : op.getOperands()) {
          last[canon(v)] = &op;
          if (isa<func::ReturnOp>(op)) pinned.insert(canon(v));
        }
    llvm::DenseMap<Value, int> slotOf;
    int64_t live = 0;
    for (func::FuncOp fn : fns) {
      Block &body = fn.getBody().front();
      auto bytesPerRow = [](Value v) {
        auto t = cast<ActType>(v.getType());
        return t.getCols() * eltBytes(t.getElementType());
      };
      auto allocate = [&](Value v) {
        auto t = cast<ActType>(v.getType());
        const int64_t need = bytesPerRow(v);
        const int best = int(slots.allocate(t.getDomain().str(), need));
        slotOf[v] = best;
        live += need * rows(t.getDomain());
        peak = std::max(peak, live);
        return best;
      };
      auto release = [&](Value v) {
        if (pinned.count(v)) return;
        slots.release(slotOf[v]);
        live -= bytesPerRow(v) * rows(cast<ActType>(v.getType()).getDomain());
      };
      for (BlockArgument a : body.getArguments()) {
        if (!isa<ActType>(a.getType())) {
          fn.emitOpError() << "argument " << a.getArgNumber() << " is not an h3 activation";
          ok = false;
          break;
        }
        // A saved activation keeps its forward value's slot (and life).
        const int slot = savedOf.count(a) ? slotOf.at(canon(a)) : allocate(a);
        fn.setArgAttr(a.getArgNumber(), slotName, b.getI64IntegerAttr(slot));
      }
      if (!ok) break;
      for (BlockArgument a : body.getArguments())
        if (!savedOf.count(a) && !last.count(a)) release(a);  // never read
      for (Operation &op : body) {
        if (isa<func::ReturnOp>(op)) continue;
        std::vector<Attribute> ids;
        for (Value r : op.getResults()) {
          if (!isa<ActType>(r.getType())) {
            op.emitOpError() << "result is not an h3 activation";
            ok = false;
            break;
          }
          ids.push_back(b.getI64IntegerAttr(allocate(r)));
        }
        slotsAttr.setAttr(&op, b.getArrayAttr(ids));
        // Release operands read for the last time here, and results nobody reads, after the op ran.
        if (!ok) break;
        llvm::SmallPtrSet<Value, 8> done;
        for (Value v : op.getOperands())
          if (last[canon(v)] == &op && done.insert(canon(v)).second) release(canon(v));
        for (Value r : op.getResults())
          if (!last.count(r)) release(r);
      }
      if (!ok) break;
    }
    if (!ok) return signalPassFailure();
    std::vector<Attribute> table;
    int64_t total = 0;
    for (size_t i = 0; i < slots.slots().size(); ++i) {
      const h3c::plan::SlotAllocator::Slot &slot = slots.slots()[i];
      table.push_back(b.getDictionaryAttr({
          b.getNamedAttr("id", b.getI64IntegerAttr(i)),
          b.getNamedAttr("bytes_per_row", b.getDictionaryAttr({b.getNamedAttr(slot.domain,
                                                                              b.getI64IntegerAttr(slot.bytesPerRow))})),
          b.getNamedAttr("fixed_bytes", b.getI64IntegerAttr(0)),
      }));
      total += slot.bytesPerRow * rows(slot.domain);
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
