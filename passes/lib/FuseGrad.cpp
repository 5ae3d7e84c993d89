// h3-fuse-grad: an h3.grad_add whose part is a dX that nothing else reads becomes that h3.linear_grad_x's residual,
// so the dX kernel's epilogue adds it (docs/contract.md section 14). The sum is the grad_add's own F32 addition
// (a + b and b + a round alike), so every gradient keeps its bits; what goes is the grad_add's pass over three F32
// tensors and the dX's store of its own value (the 33B LoRA step's 521 grad_adds took 132 ms of its backward on an
// H100, bench/NOTES.md 2026-12-06, 8 in 10 of them after a dX); the residual stream's sums with a norm_modulate's
// dx go into that norm gradient's store likewise. A qk_norm's norm gradient takes in the rope_grad before it (its dy
// rotated back as it is read). Then it rounds once the g that several linear
// gradients each rounded to bf16 (h3.grad_round, or the op computing g storing bf16), and has the forward attention
// save the row statistics its attention_grad reran (`lse`); a LoRA down path's dX goes into the base dX it was the
// residual of, and a swiglu_grad into the dX that is its dy. Each rewrite keeps every bit; `h3c compile
// --no-fuse-grad` skips the pass, and the GPU checks compare the two plans byte for byte.
#include "Common.h"
#include "h3c/Passes/PlanOp.h"
#include "h3c/Passes/Passes.h"
#include "h3c/models/config.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <map>

namespace h3c::passes {
#define GEN_PASS_DEF_H3FUSEGRAD
#include "h3c/Passes/Passes.h.inc"
} // namespace h3c::passes

using namespace mlir;
using namespace h3c::h3ir;

namespace {

// `v` exists when `op` runs: a block argument of op's block or the result of an op before it in that block.
bool readyBefore(Value v, Operation *op) {
  if (auto arg = dyn_cast<BlockArgument>(v)) return arg.getOwner() == op->getBlock();
  Operation *def = v.getDefiningOp();
  return def->getBlock() == op->getBlock() && def->isBeforeInBlock(op);
}

// A part the sum can fuse into: a dX without a residual that nothing but the grad_add reads.
LinearGradXOp fusableDx(Value part) {
  auto dx = part.getDefiningOp<LinearGradXOp>();
  return dx && !dx.getResidual() && part.hasOneUse() ? dx : LinearGradXOp();
}

// grad_add(a, b) -> linear_grad_x(g, residual = the other part) where a part is that op's dX and read only here.
// Where both parts are such dXs, the one with the longer reduction (N) takes the sum: its GEMM is bound by the tensor
// core, so the residual's load hides behind it, where a LoRA path's dX (N = the rank, one k-block) is bound by memory
// and the load would cost its full time (the 33B step: fc2's input, 0.45 against ~0.05 ms an op). That dX moves to
// right before the grad_add when the other part comes after it; nothing else reads it, and its operands come before.
struct FuseGradAdd : OpRewritePattern<GradAddOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(GradAddOp add, PatternRewriter &rewriter) const override {
    LinearGradXOp da = fusableDx(add.getA()), db = fusableDx(add.getB());
    if (!da && !db) return rewriter.notifyMatchFailure(add, "neither part is a dX read only here");
    // On a tie the later op (b's, as h3-backward adds the part it computed last): the other part is ready before it.
    const bool intoA =
        da && (!db || da.getN() > db.getN() || (da.getN() == db.getN() && !readyBefore(add.getA(), db)));
    LinearGradXOp dx = intoA ? da : db;
    Value other = intoA ? add.getB() : add.getA();
    if (!readyBefore(other, dx)) rewriter.moveOpBefore(dx, add);
    rewriter.modifyOpInPlace(dx, [&] {
      dx.getResidualMutable().assign(other);
      dx.setValuesAttr(add.getValuesAttr());  // the result is the sum: the grad_add's name
    });
    rewriter.replaceOp(add, dx.getDx());
    return success();
  }
};

// grad_add(a, b) -> norm_modulate_grad(..., residual = the other part) where neither part is a dX that FuseGradAdd
// takes and one is a norm_modulate_grad's dx read only here, the other ready before that op: the residual stream's
// gradient plus a block's norm gradient (the 33B step's 104 grad_adds after FuseGradAdd, 12.8 ms on an H200, each a
// pass over three F32 [rows, 5,376] tensors; in the epilogue the dx is neither stored alone nor read back).
struct FuseGradAddIntoNorm : OpRewritePattern<GradAddOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(GradAddOp add, PatternRewriter &rewriter) const override {
    if (fusableDx(add.getA()) || fusableDx(add.getB()))
      return rewriter.notifyMatchFailure(add, "a part is a dX (FuseGradAdd's)");
    auto normDx = [](Value part) {
      auto n = part.getDefiningOp<NormModulateGradOp>();
      return n && part == n.getDx() && !n.getResidual() && part.hasOneUse() ? n : NormModulateGradOp();
    };
    NormModulateGradOp na = normDx(add.getA()), nb = normDx(add.getB());
    NormModulateGradOp n = na && readyBefore(add.getB(), na) ? na : nb && readyBefore(add.getA(), nb) ? nb : nullptr;
    if (!n) return rewriter.notifyMatchFailure(add, "no part is a norm_modulate_grad's dx with the other before it");
    Value other = n == na ? add.getB() : add.getA();
    rewriter.modifyOpInPlace(n, [&] {
      n.getResidualMutable().assign(other);
      SmallVector<Attribute> values(n.getValues().begin(), n.getValues().end());
      values[0] = add.getValues()[0];  // dx is the sum: the grad_add's name
      n.setValuesAttr(rewriter.getArrayAttr(values));
    });
    rewriter.replaceOp(add, n.getDx());
    return success();
  }
};

// Whether a linear gradient's (first) weight is bf16: its products run on the tensor cores over bf(g).
bool bf16Weight(ArrayAttr w) { return !h3c::h3::isF32Module(cast<StringAttr>(w[0]).str()); }

// Whether `op` multiplies bf(g) of its operand g on the tensor cores, so that it may read a grad_round's bf16 g
// instead: a linear gradient of a bf16 weight that computes no bias gradient (dbias sums the F32 g).
bool roundsG(Operation *op, Value g) {
  if (auto dx = dyn_cast<LinearGradXOp>(op)) return dx.getG() == g && bf16Weight(dx.getWeight());
  if (auto dw = dyn_cast<LinearGradWOp>(op))
    return dw.getG() == g && bf16Weight(dw.getWeight()) && !computesBiasGradient(dw);
  return false;
}

// An F32 gradient that two or more such ops read gets one h3.grad_round before the first of them, and they read its
// bf16 result: g is rounded once where each op's rounding phase did it again (the 33B LoRA step: a LoRA linear's g
// by its dX, its dt and its up slot's dW). Returns the count of roundings made.
int shareRoundings(func::FuncOp f) {
  std::vector<Value> values(f.getArguments().begin(), f.getArguments().end());
  f.walk([&](Operation *op) {
    for (Value r : op->getResults()) values.push_back(r);
  });
  int made = 0;
  for (Value g : values) {
    auto t = dyn_cast<ActType>(g.getType());
    if (!t || !t.getElementType().isF32()) continue;
    std::vector<Operation *> readers;
    for (Operation *u : g.getUsers())
      if (roundsG(u, g) && !llvm::is_contained(readers, u)) readers.push_back(u);
    if (readers.size() < 2) continue;
    llvm::sort(readers, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
    OpBuilder b(readers.front());
    auto bfType = ActType::get(g.getContext(), t.getDomain(), t.getCols(), BFloat16Type::get(g.getContext()), t.getBatch());
    auto gb = GradRoundOp::create(b, readers.front()->getLoc(), bfType, g,
                                  readers.front()->getAttrOfType<ArrayAttr>("nodes"),
                                  h3c::passes::strArray(b, {h3c::passes::planName(g) + "~bf16"}));
    for (Operation *u : readers) u->setOperand(0, gb.getGb());
    ++made;
  }
  return made;
}

// A grad_round whose g nothing else reads, computed by an op that can store bf16 (swiglu_grad's dx, rms_norm_grad's
// dx, gate_residual_grad's dy; a bf16 linear's dX on the tensor cores, N and K multiples of 8: LoRA's dt;
// attention_grad's dv): that op's result becomes bf16, bf(g) rounded as it is stored, and the grad_round goes (the
// 33B step's fc1 g, 0.96 GB of F32, is then neither written nor read again as F32; its 312 dt and 52 dv roundings,
// 7.9 ms on an H100, bench/NOTES.md 2026-12-07). Returns the count folded.
int foldRoundings(func::FuncOp f) {
  std::vector<GradRoundOp> rounds;
  f.walk([&](GradRoundOp r) { rounds.push_back(r); });
  int folded = 0;
  for (GradRoundOp r : rounds) {
    Value g = r.getG();
    Operation *def = g.getDefiningOp();
    if (!g.hasOneUse() || !def) continue;
    auto dx = dyn_cast<LinearGradXOp>(def);
    const bool storesBf16 = (isa<SwigluGradOp, RmsNormGradOp>(def) && g == def->getResult(0)) ||
                            (isa<GateResidualGradOp>(def) && g == cast<GateResidualGradOp>(def).getDy()) ||
                            (isa<AttentionGradOp>(def) && g == cast<AttentionGradOp>(def).getDv()) ||
                            (dx && bf16Weight(dx.getWeight()) && dx.getN() % 8 == 0 && dx.getK() % 8 == 0);
    if (!storesBf16) continue;
    g.setType(r.getGb().getType());
    r.getGb().replaceAllUsesWith(g);
    r.erase();
    ++folded;
  }
  return folded;
}

// A qk_norm's h3.rms_norm_grad reading an h3.rope_grad's dx that nothing else reads takes the rope_grad in: it reads
// rope's output gradient and tables and rotates each element back with rope_grad's own operations before its norm
// gradient, so every value keeps its bits, and the F32 [rows, heads x head_dim] tensor between them is neither
// written nor read (the 33B LoRA step: 100 rope_grads, 19.8 ms on an H200, and the norm gradients' read of their
// output). The op names both nodes (the norm's first). Returns the count folded.
int foldRopeGrads(func::FuncOp f) {
  std::vector<RmsNormGradOp> norms;
  f.walk([&](RmsNormGradOp n) { norms.push_back(n); });
  int folded = 0;
  for (RmsNormGradOp n : norms) {
    auto r = n.getDy().getDefiningOp<RopeGradOp>();
    if (!r || !r.getDx().hasOneUse() || !n.getRopeTables().empty() || r.getHeadDim() != n.getGroup() ||
        int64_t(r.getHeads() * r.getHeadDim()) != cast<ActType>(n.getX().getType()).getCols())
      continue;
    OpBuilder b(n);
    SmallVector<Attribute> nodes(n.getNodes().begin(), n.getNodes().end());
    nodes.append(r.getNodes().begin(), r.getNodes().end());
    auto fused = RmsNormGradOp::create(b, n.getLoc(), n.getDx().getType(), r.getDy(), n.getX(),
                                       ValueRange{r.getCos(), r.getSin()}, n.getGroupAttr(), n.getEpsAttr(),
                                       n.getWeight(), n.getGrads(), r.getRotaryDimAttr(), n.getOrderAttr(),
                                       b.getArrayAttr(nodes), n.getValuesAttr());
    n.getDx().replaceAllUsesWith(fused.getDx());
    n.erase();
    r.erase();
    ++folded;
  }
  return folded;
}

// A bf16 linear's dX whose residual is the dX of a LoRA down path (the adapter's down slot `<module>.lora_down`, N =
// the rank) that nothing else reads takes that dX in: the op reads the path's bf(dt) as lora_t and the down slot as
// its second weight, and its kernel computes the path's chain (one k-block of at most 64) beside its own, adding the
// path's residual, then its own dX, in the two ops' order: the same bits. What goes is the path's GEMM, bound by its
// F32 store (the 33B LoRA step: 260 of them, ~28 ms on an H200), and this op's read of that F32 tensor. The path may
// be another node's that differentiates the same x (q, k and v share theirs). Runs after the roundings: the path's g
// must be bf16 (a grad_round's) by then. Returns the count folded.
int foldLoraDx(func::FuncOp f) {
  std::vector<LinearGradXOp> bases;
  f.walk([&](LinearGradXOp dx) { bases.push_back(dx); });
  int folded = 0;
  for (LinearGradXOp base : bases) {
    Value r = base.getResidual();
    auto l = r ? r.getDefiningOp<LinearGradXOp>() : LinearGradXOp();
    // The dX kernels take a path on their tiles of 128 columns or more: K > 64 (a skinny dX walks k-tiles of 128, not
    // the path's chunks). base's N > 64: a path's dX is never a base, so no op of `bases` is erased before its turn.
    if (!l || base.getLoraT() || l.getLoraT() || !r.hasOneUse() || !bf16Weight(base.getWeight()) ||
        base.getN() <= 64 || base.getK() <= 64 || l.getWeight().size() != 1 ||
        !cast<StringAttr>(l.getWeight()[0]).getValue().ends_with(".lora_down") || l.getK() != base.getK() ||
        l.getN() > 64 || l.getN() % 16 || !cast<ActType>(l.getG().getType()).getElementType().isBF16())
      continue;
    OpBuilder b(base);
    SmallVector<Attribute> weights(base.getWeight().begin(), base.getWeight().end());
    weights.push_back(l.getWeight()[0]);
    auto fused = LinearGradXOp::create(b, base.getLoc(), base.getDx().getType(), base.getG(), l.getResidual(), l.getG(),
                                       /*swiglu_x=*/Value(),
                                       base.getKAttr(), base.getNAttr(), b.getArrayAttr(weights), base.getOrderAttr(),
                                       b.getI64IntegerAttr(int64_t(l.getN())), base.getNodesAttr(),
                                       base.getValuesAttr());
    base.getDx().replaceAllUsesWith(fused.getDx());
    base.erase();
    l.erase();
    ++folded;
  }
  return folded;
}

// An h3.swiglu_grad whose dy is a bf16 linear's dX (with or without a LoRA down path taken in, no residual) that
// nothing else reads goes into that dX: the op reads the swiglu's input x = [v | g] as swiglu_x and its result is the
// swiglu_grad's dx (F32, or bf16 where the rounding was folded in), each dX element put through swiglu_grad's own
// operations as the kernel stores it: the same bits. What goes is the F32 [rows, F] dX's store and the swiglu_grad's
// read of it, and that op's pass (the 33B LoRA step: fc2's dX, 0.48 GB each way, and 52 swiglu_grads, 27.8 ms on
// an H100, bench/NOTES.md 2026-12-06). Runs after foldLoraDx (fc2's dX has taken its path in by then) and the
// roundings (the swiglu_grad's result type is final). Returns the count folded.
int foldSwigluGrads(func::FuncOp f) {
  std::vector<SwigluGradOp> grads;
  f.walk([&](SwigluGradOp s) { grads.push_back(s); });
  int folded = 0;
  for (SwigluGradOp s : grads) {
    auto dx = s.getDy().getDefiningOp<LinearGradXOp>();
    // A bf16 x; tiles of 128 columns or more (K > 64), K a multiple of 8 (a thread's pair of columns, value and gate
    // alike); not a LoRA slot's own dX.
    if (!dx || !s.getDy().hasOneUse() || dx.getResidual() || dx.getSwigluX() || !bf16Weight(dx.getWeight()) ||
        !cast<ActType>(s.getX().getType()).getElementType().isBF16() ||
        dx.getK() <= 64 || dx.getK() % 8 || dx.getN() % 8 ||
        cast<StringAttr>(dx.getWeight()[0]).getValue().ends_with(".lora_down") ||
        cast<StringAttr>(dx.getWeight()[0]).getValue().ends_with(".lora_up"))
      continue;
    OpBuilder b(s);
    SmallVector<Attribute> nodes(dx.getNodes().begin(), dx.getNodes().end());
    nodes.append(s.getNodes().begin(), s.getNodes().end());
    auto fused = LinearGradXOp::create(b, dx.getLoc(), s.getDx().getType(), dx.getG(), Value(), dx.getLoraT(), s.getX(),
                                       dx.getKAttr(), dx.getNAttr(), dx.getWeight(), dx.getOrderAttr(),
                                       dx.getLoraKAttr(), b.getArrayAttr(nodes), s.getValuesAttr());
    s.getDx().replaceAllUsesWith(fused.getDx());
    s.erase();
    dx.erase();
    ++folded;
  }
  return folded;
}

// Every h3.attention_grad reruns its forward attention's key walk for the row statistics L unless the forward saves
// them: the forward attention op gets its `lse` result (f32 [rows, heads], named "<o>:lse"), the backward function
// an argument of that name (a saved value, as h3-backward makes them), and the attention_grad reads it. The forward
// kernel writes the L its own walk ends with, which is the walk the backward reran (docs/contract.md section 14):
// the same bits, and phase 0 of the backward loses one of its four products (the 33B LoRA step on an H100: 3.1 ms of
// an op's 23.1; writing lse costs the forward ~0.2 ms an op). Returns the count of attention_grad ops given an lse, or
// -1 when the argument could not be added.
int saveRowStatistics(ModuleOp m) {
  func::FuncOp bwd, fwd;
  for (auto f : m.getOps<func::FuncOp>()) (f.getName() == "backward" ? bwd : fwd) = f;
  if (!bwd || !fwd) return 0;
  std::map<std::string, AttentionOp> forward;  // by the plan name of o
  fwd.walk([&](AttentionOp a) { forward[h3c::passes::planName(a.getO())] = a; });
  std::vector<AttentionGradOp> grads;
  bwd.walk([&](AttentionGradOp g) { grads.push_back(g); });
  int saved = 0;
  for (AttentionGradOp g : grads) {
    auto it = forward.find(h3c::passes::planName(g.getO()));
    if (g.getLse() || !isa<BlockArgument>(g.getO()) || it == forward.end()) continue;
    AttentionOp a = it->second;
    if (a.getLse()) continue;  // (one attention_grad per attention)
    ActType q = cast<ActType>(a.getQ().getType());
    auto lseType = ActType::get(m.getContext(), q.getDomain(), int64_t(a.getHeads()), Float32Type::get(m.getContext()),
                                q.getBatch());
    const std::string name = h3c::passes::planName(a.getO()) + ":lse";
    OpBuilder b(a);
    SmallVector<Attribute> values(a.getValues().begin(), a.getValues().end());
    values.push_back(b.getStringAttr(name));
    auto withLse = AttentionOp::create(b, a.getLoc(), a.getO().getType(), lseType, a.getQ(), a.getK(), a.getV(),
                                       a.getHeadsAttr(), a.getHeadDimAttr(), a.getOrderAttr(), a.getShardAttr(),
                                       a.getNodesAttr(), b.getArrayAttr(values));
    a.getO().replaceAllUsesWith(withLse.getO());
    a.erase();
    it->second = withLse;
    const unsigned arg = bwd.getNumArguments();
    if (failed(bwd.insertArgument(arg, lseType, b.getDictionaryAttr({b.getNamedAttr("h3.name", b.getStringAttr(name))}),
                                  g.getLoc())))
      return -1;
    g.getLseMutable().assign(bwd.getArgument(arg));
    ++saved;
  }
  return saved;
}

struct FuseGrad : h3c::passes::impl::H3FuseGradBase<FuseGrad> {
  using Base::Base;

  void runOnOperation() override {
    const bool swiglu = swigluDx;
    // Only this fusion: no folding, CSE or region simplification, and no op moves (the ops keep the backward's order).
    GreedyRewriteConfig config;
    config.setUseTopDownTraversal(true)
        .enableFolding(false)
        .enableConstantCSE(false)
        .setRegionSimplificationLevel(GreedySimplifyRegionLevel::Disabled);
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseGradAdd, FuseGradAddIntoNorm>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns), config))) {
      getOperation().emitError() << "h3-fuse-grad: the pattern did not converge";
      return signalPassFailure();
    }
    getOperation().walk([&](func::FuncOp f) {
      foldRopeGrads(f);
      shareRoundings(f);
      foldRoundings(f);
      foldLoraDx(f);
      if (swiglu) foldSwigluGrads(f);
    });
    if (saveRowStatistics(getOperation()) < 0) {
      getOperation().emitError() << "h3-fuse-grad: could not add the saved row statistics to func @backward";
      signalPassFailure();
    }
  }
};

} // namespace
