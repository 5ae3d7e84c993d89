// h3-lora{rank=R}: the unmerged LoRA path (docs/contract.md section 13). Each targeted linear keeps its weights and
// gets two adapter slots: an h3.lora_down computes t = bf(x A^T) over the down slot, and the linear's chain continues
// over t against the up slot (its last operand and weight, `lora_k`). The slots are plan weights no checkpoint holds;
// the plan emitter takes their shapes from the module's `h3.adapter_slots`.
#include "Common.h"
#include "h3c/Passes/PlanOp.h"
#include "h3c/Passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"

namespace h3c::passes {
#define GEN_PASS_DEF_H3LORA
#include "h3c/Passes/Passes.h.inc"
} // namespace h3c::passes

using namespace mlir;
using namespace h3c::h3ir;

// (a named namespace: the unity build puts the passes in one translation unit)
namespace h3_lora_pass {

ActType act(Value v) { return cast<ActType>(v.getType()); }

// diffusers' LoRA target modules of MiniMax-H3's attention and feed-forward (the fused qkv counts as its three).
const char *const kDefaultTargets[] = {"to_q", "to_k", "to_v", "to_out.0", "ff.net.0.proj", "ff.net.2"};

struct Lora : h3c::passes::impl::H3LoraBase<Lora> {
  using Base::Base;

  bool targeted(Operation *op) const {
    std::vector<std::string> t(targets.begin(), targets.end());
    if (t.empty()) t.assign(std::begin(kDefaultTargets), std::end(kDefaultTargets));
    for (const std::string &n : h3c::passes::nodeList(op))
      for (const std::string &m : t)
        if (n == m || h3c::passes::endsWith(n, "." + m)) return true;
    return false;
  }

  // The module a slot pair belongs to: the linear's first node, qkv's ".to_q" -> ".to_qkv".
  static std::string moduleOf(Operation *op) {
    std::string n = h3c::passes::nodeList(op).at(0);
    if (isa<QkvLinearOp>(op) && h3c::passes::endsWith(n, ".to_q")) n += "kv";
    return n;
  }

  void runOnOperation() override {
    ModuleOp m = getOperation();
    if (rank == 0) return;
    if (rank < 0 || rank % 64) {
      m.emitError() << "h3-lora: rank must be a positive multiple of 64 (the GEMMs' k-block), got " << int64_t(rank);
      return signalPassFailure();
    }
    if (m->hasAttr("h3.adapter_slots")) {
      m.emitError() << "h3-lora: the module already has adapter slots";
      return signalPassFailure();
    }
    Builder mb(m.getContext());
    SmallVector<NamedAttribute> slots;
    for (Operation *op : h3c::passes::h3Ops(m)) {
      if (!isa<LinearOp, QkvLinearOp>(op) || !targeted(op)) continue;
      auto weights = op->getAttrOfType<ArrayAttr>("weight");
      Value x = op->getOperand(0);
      const int64_t K = act(x).getCols();
      const bool qkv = isa<QkvLinearOp>(op);
      const int64_t groups = qkv ? 3 : 1;
      const int64_t width = groups * rank;
      int64_t rows = 0;
      if (auto l = dyn_cast<LinearOp>(op)) rows = int64_t(l.getN());
      else rows = 3 * int64_t(cast<QkvLinearOp>(op).getHeads() * cast<QkvLinearOp>(op).getHeadDim());
      if (!act(x).getElementType().isBF16()) {
        op->emitError() << "h3-lora: [" << h3c::h3ir::firstNode(op) << "] an unmerged LoRA path needs a bf16 input";
        return signalPassFailure();
      }
      if (op->getAttr("lora_k")) {
        op->emitError() << "h3-lora: [" << h3c::h3ir::firstNode(op) << "] already has a LoRA path";
        return signalPassFailure();
      }
      const std::string module = moduleOf(op), down = module + ".lora_down", up = module + ".lora_up";
      OpBuilder b(op);
      auto tType = ActType::get(m.getContext(), act(x).getDomain(), width, b.getBF16Type(), act(x).getBatch());
      auto d = LoraDownOp::create(b, op->getLoc(), tType, x, uint64_t(K), uint64_t(width),
                                  h3c::passes::strArray(b, {down}), op->getAttrOfType<OrderAttr>("order"),
                                  b.getArrayAttr({}), h3c::passes::strArray(b, {module + ":lora_t"}));
      op->insertOperands(op->getNumOperands(), d.getT());
      std::vector<std::string> w;
      for (Attribute a : weights) w.push_back(cast<StringAttr>(a).str());
      w.push_back(up);
      op->setAttr("weight", h3c::passes::strArray(b, w));
      op->setAttr("lora_k", b.getI64IntegerAttr(width));
      slots.push_back(mb.getNamedAttr(down, mb.getI64ArrayAttr({width, K})));
      slots.push_back(mb.getNamedAttr(up, mb.getI64ArrayAttr({rows, width})));
      if (failed(verify(op)) || failed(verify(d))) return signalPassFailure();
    }
    m->setAttr("h3.adapter_slots", mb.getDictionaryAttr(slots));
  }
};

} // namespace h3_lora_pass
