// h3 op -> plan::Op (PlanOp.h): operands in the contract's positions, the op's inherent attributes as typed attrs,
// the derived attrs the kernels read (dtypes, widths) and the sp/tp geometry spelled out (column segments).
#include "h3c/Passes/PlanOp.h"

#include "h3c/Dialect/H3/H3Dialect.h"
#include "h3c/models/config.h"
#include "h3c/support/error.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <cmath>

using namespace mlir;
using namespace h3c::h3ir;

namespace h3c::passes {

namespace {

std::string where(Operation *op) {
  std::string n = firstNode(op);
  return "op " + op->getName().getStringRef().str() + (n.empty() ? "" : " [" + n + "]");
}

DType dtypeOf(Type t, const std::string &w) {
  DType d;
  std::string n = h3ir::dtypeName(t);
  if (!parseDType(n, d)) fail(w, "element type without a plan dtype");
  return d;
}

ActType act(Value v) { return cast<ActType>(v.getType()); }

std::vector<std::string> names(ArrayAttr a) {
  std::vector<std::string> r;
  for (Attribute e : a) r.push_back(cast<StringAttr>(e).str());
  return r;
}

plan::Order toOrder(OrderAttr o, const std::string &w) {
  plan::Order r;
  if (!o) return r;
  const std::string kind = stringifyOrderKind(o.getKind()).str();
  if (!plan::parseOrderKind(kind, r.kind)) fail(w, "unknown order kind '{}'", kind);
  r.kStep = o.getKStep();
  // row_units spells its unit (128 rows) as the IR's `units`; k_chunks' units is always 1.
  if (r.kind == plan::OrderKind::RowUnits) r.unit = o.getUnits();
  else r.units = o.getUnits();
  r.lanes = o.getLanes();
  r.kvBlock = o.getKvBlock();
  return r;
}

// `count` equal segments of `width` columns.
plan::Segments equalSegments(int64_t width, int64_t count) {
  plan::Segments s;
  for (int64_t k = 0; k < count; ++k) s.emplace_back(k * width / count, (k + 1) * width / count);
  return s;
}

// The full (tp = 1) width a column-parallel op's segments tile: the GEMM's weight rows (qkv: the three stacked
// tensors), otherwise its output columns; the op's attrs and types are the rank's.
int64_t fullColumns(Operation *op, const plan::OpAttrs &a, int64_t tp) {
  if (isa<QkvLinearOp>(op)) return 3 * a.N * tp;
  if (isa<LinearOp, AdalnTableOp>(op)) return a.N * tp;
  return act(op->getResult(0)).getCols() * tp;
}

} // namespace

std::string valueName(Value v) {
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    auto fn = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
    if (fn)
      if (auto n = fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "h3.name")) return n.str();
    fail("func argument " + std::to_string(arg.getArgNumber()), "has no h3.name");
  }
  Operation *op = v.getDefiningOp();
  auto values = op->getAttrOfType<ArrayAttr>("values");
  unsigned i = cast<OpResult>(v).getResultNumber();
  if (!values || i >= values.size()) fail(where(op), "result {} has no plan name", i);
  return cast<StringAttr>(values[i]).str();
}

std::string planName(Value v) {
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    if (auto fn = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp()))
      if (auto n = fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "h3.name")) return n.str();
    return "arg" + std::to_string(arg.getArgNumber());
  }
  Operation *op = v.getDefiningOp();
  auto values = op->getAttrOfType<ArrayAttr>("values");
  unsigned i = cast<OpResult>(v).getResultNumber();
  if (values && i < values.size())
    if (auto s = dyn_cast<StringAttr>(values[i])) return s.str();
  return op->getName().stripDialect().str() + std::to_string(i);
}

plan::Value planValue(Value v, const std::string &name) {
  ActType t = act(v);
  plan::Value r;
  r.name = name;
  r.dtype = dtypeOf(t.getElementType(), "value " + name);
  if (!plan::parseDomain(t.getDomain().str(), r.rows)) fail("value " + name, "unknown row domain");
  r.cols = t.getCols();
  r.batch = t.getBatch();
  return r;
}

plan::Op toPlanOp(Operation *op, bool requireNames) {
  auto nameOf = [&](Value v) -> std::string {
    if (requireNames) return valueName(v);
    try {
      return valueName(v);
    } catch (const Error &) {
      return "<unnamed>";
    }
  };
  const std::string w = where(op);
  if (op->getName().getDialectNamespace() != "h3") fail(w, "is not an h3 op");
  plan::Op r;
  r.where = w;
  if (!plan::parseOpKind(op->getName().stripDialect().str(), r.kind)) fail(w, "is not an op kind of the plan");
  if (auto n = op->getAttrOfType<ArrayAttr>("nodes")) r.nodes = names(n);
  for (Value v : op->getOperands()) r.in.push_back(nameOf(v));
  for (Value v : op->getResults()) r.out.push_back(nameOf(v));

  plan::OpAttrs &a = r.attrs;
  int64_t segmentCount = 1;
  std::vector<std::string> weightGrads;  // a gradient op's `grads`: its outputs after the activation gradients
  auto props = dyn_cast_or_null<DictionaryAttr>(op->getPropertiesAsAttribute());
  if (props) {
    for (NamedAttribute na : props) {
      const std::string k = na.getName().getValue().str();
      Attribute v = na.getValue();
      // (operandSegmentSizes: how an op with an optional operand beside a variadic splits its operands, which the
      // plan's input roles say by the attrs: norm_modulate_grad's residual.)
      if (k == "nodes" || k == "values" || k == "operandSegmentSizes") continue;
      if (k == "weight") { r.weights = names(cast<ArrayAttr>(v)); continue; }
      if (k == "bias") { r.biases = names(cast<ArrayAttr>(v)); continue; }
      if (k == "grads") { weightGrads = names(cast<ArrayAttr>(v)); continue; }
      if (k == "order") { r.order = toOrder(cast<OrderAttr>(v), w); continue; }
      if (k == "shard") {
        auto s = cast<ShardAttr>(v);
        if (!plan::parseShardKind(stringifyShardKind(s.getKind()).str(), a.shard.kind)) fail(w, "unknown shard kind");
        a.shard.tp = s.getTp();
        segmentCount = s.getSegments();
        continue;
      }
      if (auto i = dyn_cast<IntegerAttr>(v)) {
        int64_t x = i.getInt();
        if (k == "K") a.K = x;
        else if (k == "N") a.N = x;
        else if (k == "chunk") a.chunk = x;
        else if (k == "num_chunks") a.numChunks = x;
        else if (k == "shift_chunk") a.shiftChunk = x;
        else if (k == "scale_chunk") a.scaleChunk = x;
        else if (k == "rows_per_timestep") a.rowsPerTimestep = x;
        else if (k == "heads") a.heads = x;
        else if (k == "head_dim") a.headDim = x;
        else if (k == "rotary_dim") a.rotaryDim = x;
        else if (k == "freq_dim") a.freqDim = x;
        else if (k == "hidden") a.hidden = x;
        else if (k == "out_dim") a.outDim = x;
        else if (k == "parts") a.parts = x;
        else if (k == "segments") segmentCount = x;
        else if (k == "lora_k") a.loraK = x;
        else if (k == "group") a.group = x;
        else fail(w, "integer attribute '{}' has no plan attr", k);
      } else if (auto f = dyn_cast<FloatAttr>(v)) {
        if (k == "eps") a.eps = f.getValueAsDouble();
        else if (k == "theta") a.theta = f.getValueAsDouble();
        else fail(w, "float attribute '{}' has no plan attr", k);
      } else if (auto e = dyn_cast<EpilogueAttr>(v)) {
        if (!plan::parseEpilogue(stringifyEpilogue(e.getValue()).str(), a.epilogue)) fail(w, "unknown epilogue");
      } else if (auto ri = dyn_cast<RowIndexAttr>(v)) {
        if (!plan::parseRowIndex(stringifyRowIndex(ri.getValue()).str(), a.rowIndex)) fail(w, "unknown row index");
      } else if (auto ax = dyn_cast<AxisAttr>(v)) {
        if (!plan::parseAxis(stringifyAxis(ax.getValue()).str(), a.axis)) fail(w, "unknown axis");
      } else {
        fail(w, "attribute '{}' of unsupported kind in the plan", k);
      }
    }
  }

  // The weight gradients a gradient op computes are values of the plan (F32, named grad:<tensor>), after its
  // activation gradients (plan::emitsWeightGrads).
  for (const auto &g : weightGrads) {
    r.out.push_back(g);
    r.grads.push_back(g.substr(std::string("grad:").size()));  // (the verifier checked the prefix)
  }

  // Derived attrs the kernels read (docs/contract.md section 5.1).
  if (op->getNumResults() == 0) {  // linear_grad_w: its outputs are the weight gradients
    a.outDtype = DType::F32;
    a.xDtype = dtypeOf(act(op->getOperand(0)).getElementType(), w);
    a.wDtype = h3::isF32Module(r.weights.at(0)) ? DType::F32 : DType::BF16;
    return r;
  }
  ActType y = act(op->getResult(0));
  a.outDtype = dtypeOf(y.getElementType(), w);
  if (op->getNumOperands()) a.xDtype = dtypeOf(act(op->getOperand(0)).getElementType(), w);
  if (!r.weights.empty()) a.wDtype = h3::isF32Module(r.weights[0]) ? DType::F32 : DType::BF16;
  if (auto q = dyn_cast<QkvLinearOp>(op)) {
    a.N = q.getHeads() * q.getHeadDim();
  } else if (auto t = dyn_cast<TimeEmbedOp>(op)) {
    a.K = t.getFreqDim();
    a.N = t.getOutDim();
  } else if (isa<RmsNormOp, NormModulateOp, GateResidualOp, PackOp>(op)) {
    a.H = act(op->getOperand(0)).getCols();
  } else if (isa<SwigluOp>(op)) {
    a.F = y.getCols();
    a.cols = y.getCols();
  } else if (isa<SiluOp, ResidualOp>(op)) {
    a.cols = y.getCols();
    a.dtype = a.outDtype;
  } else if (auto u = dyn_cast<UnpackOp>(op)) {
    a.videoCols = act(u.getSample()).getCols();
    a.audioCols = act(u.getAudioSample()).getCols();
  } else if (auto gx = dyn_cast<LinearGradXOp>(op); gx && gx.getResidual()) {
    a.epilogue = plan::Epilogue::Residual;  // h3-fuse-grad's sum: the plan op reads "residual" after g
  } else if (auto gx = dyn_cast<LinearGradXOp>(op); gx && gx.getSwigluX()) {
    a.epilogue = plan::Epilogue::Swiglu;  // h3-fuse-grad's swiglu_grad taken in: "swiglu_x" its last input
  } else if (auto nm = dyn_cast<NormModulateGradOp>(op)) {
    a.H = act(op->getOperand(0)).getCols();
    if (nm.getResidual()) a.epilogue = plan::Epilogue::Residual;  // h3-fuse-grad's sum: "residual" after the row meta
  } else if (isa<GradAddOp, GradRoundOp, SiluGradOp>(op)) {
    a.cols = y.getCols();
  } else if (isa<SwigluGradOp>(op)) {
    a.F = act(op->getOperand(0)).getCols();
  } else if (isa<RmsNormGradOp>(op)) {
    a.cols = y.getCols();
  } else if (isa<NormModulateGradOp, GateResidualGradOp, PackGradOp>(op)) {
    a.H = act(op->getOperand(0)).getCols();
  } else if (auto u = dyn_cast<UnpackGradOp>(op)) {
    a.videoCols = act(u.getDsample()).getCols();
    a.audioCols = act(u.getDaudioSample()).getCols();
  } else if (auto ag = dyn_cast<AttentionGradOp>(op); ag && ag.getLse()) {
    a.lse = 1;  // h3-fuse-grad: the forward's row statistics
  } else if (auto at = dyn_cast<AttentionOp>(op)) {
    a.lse = at.getLse() ? 1 : 0;
    if (!plan::parseDomain(act(at.getQ()).getDomain().str(), a.domain)) fail(w, "unknown attention domain");
    a.scale = 1.0 / std::sqrt(double(at.getHeadDim()));
  }
  // h3-fuse training=true: the swiglu's x kept beside its output.
  if (auto l = dyn_cast<LinearOp>(op)) a.swigluX = l.getSwigluX() ? 1 : 0;
  // h3-backward: a table gradient nothing reads is not computed (section 14).
  if (auto g = dyn_cast<GateResidualGradOp>(op)) a.tableGrad = g.getDtable() ? 1 : 0;
  if (auto nm = dyn_cast<NormModulateGradOp>(op)) a.tableGrad = nm.getDtable() ? 1 : 0;
  if (isa<AllGatherOp, SplitOp>(op)) {
    // The whole value's width and dtype; column segments of the whole value.
    ActType full = act(isa<AllGatherOp>(op) ? op->getResult(0) : op->getOperand(0));
    a.cols = full.getCols();
    a.dtype = a.outDtype;
    if (a.axis == plan::Axis::Cols) a.segments = equalSegments(a.cols, segmentCount);
  }
  if (a.shard.kind == plan::ShardKind::Column) a.shard.segments = equalSegments(fullColumns(op, a, a.shard.tp), segmentCount);
  return r;
}

kernels::OperandValues operandValues(Operation *op, bool requireNames) {
  kernels::OperandValues v;
  auto nameOf = [&](Value x) { return requireNames ? valueName(x) : std::string(); };
  for (Value x : op->getOperands()) v.in.push_back(planValue(x, nameOf(x)));
  for (Value x : op->getResults()) v.out.push_back(planValue(x, nameOf(x)));
  return v;
}

} // namespace h3c::passes
