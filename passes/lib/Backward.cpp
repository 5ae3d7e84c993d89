// h3-backward: the backward function of the forward (docs/contract.md section 14). The forward's ops are visited in
// reverse and each emits its gradient ops into `func @backward`; a value read by several ops gets the h3.grad_add of
// their parts in that visiting order (the contract's order for several consumers). Forward values the gradient ops
// read become the backward's arguments under their forward names (saved activations: the plan's two functions share
// them), so nothing here recomputes or copies a forward value. An unmerged LoRA path (h3-lora) is two more GEMMs
// whose gradients are those of a linear; `trainable` leaves the gradients of frozen tensors out (section 14).
#include "Common.h"
#include "h3c/Passes/PlanOp.h"
#include "h3c/Passes/Passes.h"
#include "h3c/plan/trainable.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/TypeSwitch.h"

#include <map>
#include <set>

namespace h3c::passes {
#define GEN_PASS_DEF_H3BACKWARD
#include "h3c/Passes/Passes.h.inc"
} // namespace h3c::passes

using namespace mlir;
using namespace h3c::h3ir;

// (a named namespace: the unity build puts the passes in one translation unit)
namespace h3_backward_pass {

ActType act(Value v) { return cast<ActType>(v.getType()); }
bool isFloat(Value v) {
  auto t = dyn_cast<ActType>(v.getType());
  return t && (t.getElementType().isBF16() || t.getElementType().isF32());
}
// A value no gradient is taken of: integers, and the tables the host computes from the request's positions and
// timesteps (rope_table, timestep_sinusoid), which are conditioning, not parameters or activations.
bool differentiable(Value v) {
  if (!isFloat(v)) return false;
  Operation *def = v.getDefiningOp();
  return !(def && isa<RopeTableOp, TimestepSinusoidOp>(def));
}

// The backward being built: its entry block, the forward values it has read so far (arguments), and the gradient
// of every forward value so far.
class Builder {
public:
  Builder(func::FuncOp bwd, std::vector<std::string> trainable, std::set<std::string> adapters)
      : bwd_(bwd), b_(bwd.getContext()), trainable_(std::move(trainable)), adapters_(std::move(adapters)) {
    b_.setInsertionPointToEnd(&bwd.getBody().front());
  }

  // Whether tensor `t` gets a gradient (plan/trainable.h).
  bool trains(StringRef t) const {
    return h3c::plan::trains(trainable_, t.str(), adapters_.count(t.str()) != 0);
  }
  // "grad:<tensor>" for each trained tensor of `weight`, then of `bias`.
  ArrayAttr gradNames(ArrayAttr weight, ArrayAttr bias) {
    std::vector<std::string> n;
    for (ArrayAttr a : {weight, bias})
      for (Attribute t : a)
        if (trains(cast<StringAttr>(t).getValue())) n.push_back("grad:" + cast<StringAttr>(t).str());
    return h3c::passes::strArray(b_, n);
  }

  OpBuilder &b() { return b_; }
  MLIRContext *ctx() { return bwd_.getContext(); }

  // The f32 gradient type of a forward value.
  ActType gradType(Value v) {
    ActType t = act(v);
    return ActType::get(ctx(), t.getDomain(), t.getCols(), Float32Type::get(ctx()), t.getBatch());
  }

  // An argument of the backward named `name`.
  Value argument(Type t, const std::string &name) {
    Block &body = bwd_.getBody().front();
    Value a = body.addArgument(t, bwd_.getLoc());
    argNames_.push_back(b_.getStringAttr(name));
    return a;
  }

  // The forward value v as the backward reads it (one argument per value, made at its first use).
  Value saved(Value v) {
    auto it = saved_.find(v);
    if (it != saved_.end()) return it->second;
    return saved_[v] = argument(v.getType(), h3c::passes::planName(v));
  }
  SmallVector<Value> saved(ValueRange vs) {
    SmallVector<Value> r;
    for (Value v : vs) r.push_back(saved(v));
    return r;
  }

  Value grad(Value v) const {
    auto it = grads_.find(v);
    return it == grads_.end() ? Value() : it->second;
  }

  // A unique plan name for a gradient value of v.
  std::string name(Value v, const std::string &tag) {
    std::string n = "grad:" + h3c::passes::planName(v) + tag;
    for (int k = 2; !names_.insert(n).second; ++k) n = "grad:" + h3c::passes::planName(v) + tag + "~" + std::to_string(k);
    return n;
  }

  // Adds g, a part of v's gradient computed by `node`, to what v has (h3.grad_add, in the visiting order).
  void accumulate(Value v, Value g, const std::string &node) {
    if (!differentiable(v)) return;
    Value &have = grads_[v];
    if (!have) {
      have = g;
      return;
    }
    auto sum = GradAddOp::create(b_, bwd_.getLoc(), gradType(v), have, g, h3c::passes::strArray(b_, {node}),
                                 h3c::passes::strArray(b_, {name(v, "+" + node)}));
    have = sum.getC();
  }

  void finish(func::FuncOp fwd) {
    SmallVector<Value> results;
    SmallVector<Attribute> resultNames;
    // A result is named after the input it is the gradient of ("grad:@hidden_states"); its value keeps its own name.
    for (BlockArgument a : fwd.getArguments())
      if (Value g = grad(a)) {
        results.push_back(g);
        resultNames.push_back(b_.getStringAttr("grad:" + h3c::passes::planName(a)));
      }
    func::ReturnOp::create(b_, bwd_.getLoc(), results);
    Block &body = bwd_.getBody().front();
    bwd_.setFunctionType(FunctionType::get(ctx(), body.getArgumentTypes(), ValueRange(results).getTypes()));
    for (size_t i = 0; i < argNames_.size(); ++i) bwd_.setArgAttr(unsigned(i), "h3.name", argNames_[i]);
    for (size_t i = 0; i < resultNames.size(); ++i) bwd_.setResultAttr(unsigned(i), "h3.name", resultNames[i]);
  }

private:
  func::FuncOp bwd_;
  OpBuilder b_;
  std::vector<std::string> trainable_;
  std::set<std::string> adapters_;  // the module's adapter slots (h3.adapter_slots)
  DenseMap<Value, Value> saved_, grads_;
  SmallVector<Attribute> argNames_;
  std::set<std::string> names_;
};

// Sets the contract's order on a new reducing gradient op.
template <class OpT>
OpT ordered(OpT op) {
  auto red = cast<OrderedReduction>(op.getOperation());
  red.setOrderAttr(h3c::passes::contractOrder(red));
  return op;
}

struct Backward : h3c::passes::impl::H3BackwardBase<Backward> {
  using Base::Base;

  // Refuses what this pass does not differentiate yet; returns the forward func.
  func::FuncOp forwardOf(ModuleOp m) {
    func::FuncOp fwd;
    for (auto f : m.getOps<func::FuncOp>()) {
      if (f.getName() == "backward") {
        f.emitError() << "h3-backward: the module already has a backward function";
        return {};
      }
      if (fwd) {
        m.emitError() << "h3-backward: the module must hold one forward function, it holds more";
        return {};
      }
      fwd = f;
    }
    if (!fwd || fwd.getBody().empty()) {
      m.emitError() << "h3-backward: the module has no forward function with a body";
      return {};
    }
    return fwd;
  }

  // The gradient ops of one forward op whose results have gradients; an error for a kind without them.
  LogicalResult differentiate(Operation *op, Builder &bb) {
    OpBuilder &b = bb.b();
    Location loc = op->getLoc();
    const std::string node = firstNode(op);
    auto nodes = op->getAttrOfType<ArrayAttr>("nodes");
    auto unsupported = [&](const std::string &why) {
      op->emitError() << "h3-backward: [" << node << "] " << why;
      return failure();
    };
    if (auto shard = op->getAttrOfType<ShardAttr>("shard"); shard && shard.getKind() != ShardKind::replicated)
      return unsupported("is split over tensor-parallel ranks: differentiate the unsharded graph (before h3-shard-tp)");
    // The plan names of an op's results: the gradients of these forward values.
    auto names = [&](std::initializer_list<Value> vs) {
      std::vector<std::string> n;
      for (Value v : vs) n.push_back(bb.name(v, ""));
      return h3c::passes::strArray(b, n);
    };
    // rms_norm (group = the row) and qk_norm (group = head_dim): one gradient op.
    auto normGrad = [&](Value x, Value y, IntegerAttr group, FloatAttr eps, ArrayAttr weight) {
      auto d = ordered(RmsNormGradOp::create(b, loc, bb.gradType(x), bb.grad(y), bb.saved(x), ValueRange{}, group,
                                             eps, weight, bb.gradNames(weight, b.getArrayAttr({})), IntegerAttr(),
                                             OrderAttr(), nodes, names({x})));
      bb.accumulate(x, d.getDx(), node);
      return success();
    };
    return llvm::TypeSwitch<Operation *, LogicalResult>(op)
        .Case<LinearOp>([&](LinearOp l) {
          if (l.getEpilogue() != Epilogue::none)
            return unsupported("is a fused linear (an epilogue): differentiate the unfused graph (before h3-fuse)");
          Value g = bb.grad(l.getY()), x = l.getX();
          // With an unmerged LoRA path the last weight is the up slot and the last operand t = lora_down(x): the
          // chain over [x | t] against [W | up] is two GEMMs, each differentiated as a linear.
          ArrayAttr weight = l.getWeight();
          if (l.getLoraK()) {
            if (weight.size() != 2 || l.getEpilogueOperands().size() != 1)
              return unsupported("has a LoRA path but not one weight and one lora_t operand beside x");
            weight = b.getArrayAttr({l.getWeight()[0]});
          }
          if (ArrayAttr grads = bb.gradNames(weight, l.getBias()); !grads.empty())
            ordered(LinearGradWOp::create(b, loc, g, bb.saved(x), l.getKAttr(), l.getNAttr(), weight, l.getBias(),
                                          grads, OrderAttr(), nodes, b.getArrayAttr({})));
          if (l.getLoraK()) {
            Value t = l.getEpilogueOperands()[0];
            ArrayAttr up = b.getArrayAttr({l.getWeight()[1]});
            IntegerAttr L = b.getI64IntegerAttr(int64_t(*l.getLoraK()));
            if (ArrayAttr grads = bb.gradNames(up, b.getArrayAttr({})); !grads.empty())
              ordered(LinearGradWOp::create(b, loc, g, bb.saved(t), L, l.getNAttr(), up, b.getArrayAttr({}), grads,
                                            OrderAttr(), nodes, b.getArrayAttr({})));
            auto dt = ordered(LinearGradXOp::create(b, loc, bb.gradType(t), g, Value(), Value(), Value(), L, l.getNAttr(), up,
                                                    OrderAttr(), IntegerAttr(), nodes, names({t})));
            bb.accumulate(t, dt.getDx(), node);
          }
          if (!differentiable(x)) return success();  // the time embedder's sinusoid: no dx
          auto dx = ordered(LinearGradXOp::create(b, loc, bb.gradType(x), g, Value(), Value(), Value(), l.getKAttr(),
                                                  l.getNAttr(), weight, OrderAttr(), IntegerAttr(), nodes, names({x})));
          bb.accumulate(x, dx.getDx(), node);
          return success();
        })
        .Case<LoraDownOp>([&](LoraDownOp d) {
          // t = bf(x down^T): the rounding passes dt through; dx's part and the down slot's gradient as a linear's.
          // The ops name the base linear's node (the adapter is no node: section 13), the one op that reads t.
          Value t = d.getT(), x = d.getX();
          if (!t.hasOneUse() || !isa<LinearOp>(*t.getUsers().begin()))
            return unsupported("h3.lora_down: its result must be read by exactly one linear (its LoRA path)");
          ArrayAttr base = (*t.getUsers().begin())->getAttrOfType<ArrayAttr>("nodes");
          const std::string baseNode = firstNode(*t.getUsers().begin());
          Value g = bb.grad(t);
          if (ArrayAttr grads = bb.gradNames(d.getWeight(), b.getArrayAttr({})); !grads.empty())
            ordered(LinearGradWOp::create(b, loc, g, bb.saved(x), d.getKAttr(), d.getNAttr(), d.getWeight(),
                                          b.getArrayAttr({}), grads, OrderAttr(), base, b.getArrayAttr({})));
          auto dx = ordered(LinearGradXOp::create(b, loc, bb.gradType(x), g, Value(), Value(), Value(), d.getKAttr(),
                                                  d.getNAttr(), d.getWeight(), OrderAttr(), IntegerAttr(), base, names({x})));
          bb.accumulate(x, dx.getDx(), baseNode);
          return success();
        })
        .Case<ResidualOp>([&](ResidualOp r) {
          Value g = bb.grad(r.getZ());
          bb.accumulate(r.getX(), g, node);
          bb.accumulate(r.getY(), g, node);
          return success();
        })
        .Case<GateResidualOp>([&](GateResidualOp r) {
          Value g = bb.grad(r.getZ());
          bb.accumulate(r.getX(), g, node);
          auto d = ordered(GateResidualGradOp::create(
              b, loc, bb.gradType(r.getY()), bb.gradType(r.getTable()), g, bb.saved(r.getY()), bb.saved(r.getTable()),
              bb.saved(r.getRowMeta()), r.getChunkAttr(), r.getNumChunksAttr(), r.getRowIndexAttr(), OrderAttr(), nodes,
              names({r.getY(), r.getTable()})));
          bb.accumulate(r.getY(), d.getDy(), node);
          bb.accumulate(r.getTable(), d.getDtable(), node);
          return success();
        })
        .Case<SwigluOp>([&](SwigluOp s) {
          auto d = SwigluGradOp::create(b, loc, bb.gradType(s.getX()), bb.grad(s.getY()), bb.saved(s.getX()), nodes,
                                        names({s.getX()}));
          bb.accumulate(s.getX(), d.getDx(), node);
          return success();
        })
        .Case<RmsNormOp>([&](RmsNormOp n) {
          return normGrad(n.getX(), n.getY(), b.getI64IntegerAttr(act(n.getX()).getCols()), n.getEpsAttr(),
                          n.getWeight());
        })
        .Case<QkNormOp>([&](QkNormOp n) {
          return normGrad(n.getX(), n.getY(), n.getHeadDimAttr(), n.getEpsAttr(), n.getWeight());
        })
        .Case<NormModulateOp>([&](NormModulateOp n) {
          auto d = ordered(NormModulateGradOp::create(
              b, loc, bb.gradType(n.getX()), bb.gradType(n.getTable()), bb.grad(n.getY()), bb.saved(n.getX()),
              bb.saved(n.getTable()), bb.saved(n.getRowMeta()), Value(), n.getEpsAttr(), n.getWeight(),
              bb.gradNames(n.getWeight(), b.getArrayAttr({})), n.getShiftChunkAttr(),
              n.getScaleChunkAttr(), n.getNumChunksAttr(), n.getRowIndexAttr(), OrderAttr(), nodes,
              names({n.getX(), n.getTable()})));
          bb.accumulate(n.getX(), d.getDx(), node);
          bb.accumulate(n.getTable(), d.getDtable(), node);
          return success();
        })
        .Case<RopeOp>([&](RopeOp r) {
          auto d = RopeGradOp::create(b, loc, bb.gradType(r.getX()), bb.grad(r.getY()), bb.saved(r.getCos()),
                                      bb.saved(r.getSin()), r.getHeadsAttr(), r.getHeadDimAttr(), r.getRotaryDimAttr(),
                                      nodes, names({r.getX()}));
          bb.accumulate(r.getX(), d.getDx(), node);
          return success();
        })
        .Case<AttentionOp>([&](AttentionOp a) {
          if (act(a.getQ()).getDomain() != act(a.getK()).getDomain())
            return unsupported("attends gathered keys (sequence parallel): differentiate before h3-shard-seq");
          auto d = ordered(AttentionGradOp::create(
              b, loc, bb.gradType(a.getQ()), bb.gradType(a.getK()), bb.gradType(a.getV()), bb.saved(a.getQ()),
              bb.saved(a.getK()), bb.saved(a.getV()), bb.saved(a.getO()), bb.grad(a.getO()), Value(), a.getHeadsAttr(),
              a.getHeadDimAttr(), OrderAttr(), nodes, names({a.getQ(), a.getK(), a.getV()})));
          bb.accumulate(a.getQ(), d.getDq(), node);
          bb.accumulate(a.getK(), d.getDk(), node);
          bb.accumulate(a.getV(), d.getDv(), node);
          return success();
        })
        .Case<SiluOp>([&](SiluOp a) {
          auto d = SiluGradOp::create(b, loc, bb.gradType(a.getX()), bb.grad(a.getY()), bb.saved(a.getX()), nodes,
                                      names({a.getX()}));
          bb.accumulate(a.getX(), d.getDx(), node);
          return success();
        })
        .Case<AdalnTableOp>([&](AdalnTableOp t) {
          auto d = ordered(AdalnTableGradOp::create(
              b, loc, bb.gradType(t.getTemb()), bb.grad(t.getTable()), bb.saved(t.getTemb()), t.getKAttr(),
              t.getNAttr(), t.getRowsPerTimestepAttr(), t.getWeight(), t.getBias(),
              bb.gradNames(t.getWeight(), t.getBias()), OrderAttr(), nodes, names({t.getTemb()})));
          bb.accumulate(t.getTemb(), d.getDtemb(), node);
          return success();
        })
        .Case<PackOp>([&](PackOp p) {
          // Only x carries a gradient; the row metadata are integers or feed the host's rope table.
          auto d = PackGradOp::create(b, loc, bb.gradType(p.getText()), bb.gradType(p.getVideo()),
                                      bb.gradType(p.getAudio()), bb.grad(p.getX()), nodes,
                                      names({p.getText(), p.getVideo(), p.getAudio()}));
          bb.accumulate(p.getText(), d.getDtext(), node);
          bb.accumulate(p.getVideo(), d.getDvideo(), node);
          bb.accumulate(p.getAudio(), d.getDaudio(), node);
          return success();
        })
        .Case<UnpackOp>([&](UnpackOp u) {
          Value gs = bb.grad(u.getSample()), ga = bb.grad(u.getAudioSample());
          if (!gs || !ga) return unsupported("needs the gradients of both samples");
          auto d = UnpackGradOp::create(b, loc, bb.gradType(u.getVideo()), bb.gradType(u.getAudio()), gs, ga, nodes,
                                        names({u.getVideo(), u.getAudio()}));
          bb.accumulate(u.getVideo(), d.getDvideo(), node);
          bb.accumulate(u.getAudio(), d.getDaudio(), node);
          return success();
        })
        .Default([&](Operation *o) {
          return unsupported("h3." + o->getName().stripDialect().str() + " has no gradient yet");
        });
  }

  // A norm_modulate_grad or gate_residual_grad whose table gradient nothing reads (the AdaLN tables and what feeds
  // them frozen: LoRA training) is rebuilt without it: the table's sums over the rows are not computed, and
  // gate_residual_grad reads no y, so the forward keeps no linear output for it (nor for the fusion of that linear
  // and its gate_residual, h3-fuse training=true). dx / dy are the same operations on the same inputs.
  static void dropDeadTableGradient(Operation *op) {
    auto dropSecond = [](ArrayAttr values) { return ArrayAttr::get(values.getContext(), {values[0]}); };
    if (auto g = dyn_cast<GateResidualGradOp>(op); g && g.getDtable() && g.getDtable().use_empty()) {
      OpBuilder b(g);
      auto d = GateResidualGradOp::create(b, g.getLoc(), g.getDy().getType(), Type(), g.getDz(), Value(),
                                          g.getTable(), g.getRowMeta(), g.getChunkAttr(), g.getNumChunksAttr(),
                                          g.getRowIndexAttr(), g.getOrderAttr(), g.getNodes(), dropSecond(g.getValues()));
      g.getDy().replaceAllUsesWith(d.getDy());
      g.erase();
    } else if (auto n = dyn_cast<NormModulateGradOp>(op); n && n.getDtable() && n.getDtable().use_empty()) {
      OpBuilder b(n);
      auto d = NormModulateGradOp::create(b, n.getLoc(), n.getDx().getType(), Type(), n.getDy(), n.getX(),
                                          n.getTable(), n.getRowMeta(), n.getResidual(), n.getEpsAttr(),
                                          n.getWeight(), n.getGrads(), n.getShiftChunkAttr(), n.getScaleChunkAttr(),
                                          n.getNumChunksAttr(), n.getRowIndexAttr(), n.getOrderAttr(), n.getNodes(),
                                          dropSecond(n.getValues()));
      n.getDx().replaceAllUsesWith(d.getDx());
      n.erase();
    }
  }

  // Gradient ops whose results nothing reads and that compute no weight gradient (a frozen part's chain: the
  // time embedder's when it and the AdaLN tables are frozen), the table gradients nothing reads, then the saved
  // values only they read.
  static void removeDead(func::FuncOp bwd) {
    Block &body = bwd.getBody().front();
    SmallVector<Operation *> ops;
    for (Operation &op : body.without_terminator()) ops.push_back(&op);
    for (Operation *op : llvm::reverse(ops)) {  // readers before what they read
      auto grads = op->getAttrOfType<ArrayAttr>("grads");
      if (op->getNumResults() && op->use_empty() && (!grads || grads.empty())) op->erase();
      else dropDeadTableGradient(op);
    }
    llvm::BitVector unused(body.getNumArguments());
    for (BlockArgument a : body.getArguments()) {
      auto name = bwd.getArgAttrOfType<StringAttr>(a.getArgNumber(), "h3.name");
      if (a.use_empty() && name && !name.getValue().starts_with("@grad:")) unused.set(a.getArgNumber());
    }
    if (unused.any()) (void)bwd.eraseArguments(unused);
  }

  void runOnOperation() override {
    ModuleOp m = getOperation();
    func::FuncOp fwd = forwardOf(m);
    if (!fwd) return signalPassFailure();
    OpBuilder mb(m.getContext());
    mb.setInsertionPointAfter(fwd);
    auto bwd = func::FuncOp::create(mb, fwd.getLoc(), "backward", mb.getFunctionType({}, {}));
    bwd.addEntryBlock();
    std::vector<std::string> train(trainable.begin(), trainable.end());
    if (train.empty()) train = {"*"};
    for (const std::string &t : train)
      if (t.empty()) {
        m.emitError() << "h3-backward: an empty trainable pattern";
        return signalPassFailure();
      }
    std::set<std::string> adapters;
    if (auto slots = m->getAttrOfType<DictionaryAttr>("h3.adapter_slots"))
      for (NamedAttribute s : slots) adapters.insert(s.getName().str());
    // Every pattern selects a tensor some op reads (a typo would silently freeze what it meant to train).
    std::set<std::string> tensors;
    fwd.walk([&](Operation *op) {
      for (const char *k : {"weight", "bias"})
        if (auto a = op->getAttrOfType<ArrayAttr>(k))
          for (Attribute t : a) tensors.insert(cast<StringAttr>(t).str());
    });
    for (const std::string &p : train)
      if (llvm::none_of(tensors, [&](const std::string &t) { return h3c::plan::trains({p}, t, adapters.count(t) != 0); })) {
        m.emitError() << "h3-backward: trainable pattern '" << p << "' selects no weight tensor of the module";
        return signalPassFailure();
      }
    Builder bb(bwd, train, adapters);
    // The gradients of the forward's results (a value returned twice gets the sum of both).
    auto ret = cast<func::ReturnOp>(fwd.getBody().front().getTerminator());
    for (Value r : ret.getOperands())
      if (differentiable(r)) bb.accumulate(r, bb.argument(bb.gradType(r), "@grad:" + h3c::passes::planName(r)), "output");
    SmallVector<Operation *> ops;
    for (Operation &op : fwd.getBody().front().without_terminator()) ops.push_back(&op);
    for (Operation *op : llvm::reverse(ops)) {
      if (llvm::none_of(op->getResults(), [&](Value r) { return bool(bb.grad(r)); })) continue;
      if (failed(differentiate(op, bb))) return signalPassFailure();
    }
    bb.finish(fwd);
    removeDead(bwd);
    bwd->setAttr("h3.trainable", h3c::passes::strArray(mb, train));
    // Each weight's gradient is computed by one op: a tensor two ops read (tied weights) would need the sum of both
    // parts, which no gradient op computes yet.
    std::set<std::string> seen;
    WalkResult tied = bwd.walk([&](Operation *op) {
      if (auto grads = op->getAttrOfType<ArrayAttr>("grads"))
        for (Attribute a : grads)
          if (!seen.insert(cast<StringAttr>(a).str()).second) {
            op->emitError() << "h3-backward: [" << firstNode(op) << "] " << cast<StringAttr>(a).getValue()
                            << ": the tensor is read by two ops (tied weights have no gradient sum yet)";
            return WalkResult::interrupt();
          }
      return WalkResult::advance();
    });
    if (tied.wasInterrupted() || failed(verify(bwd))) return signalPassFailure();
  }
};

} // namespace h3_backward_pass
