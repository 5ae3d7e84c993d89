// The plan entry of one h3 op (docs/contract.md section 5): shared by h3-verify-strict (which asks the kernel
// emitter whether a qualified kernel exists), the plan emitter and the --h3-to-cuda translation.
#include "h3c/Passes/PlanJson.h"

#include "h3c/Dialect/H3/H3Dialect.h"
#include "h3c/models/config.h"
#include "h3c/support/error.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <cmath>

using nlohmann::json;
using namespace mlir;
using namespace h3c::h3ir;

namespace h3c::planjson {

namespace {

std::string where(Operation *op) {
  std::string n = firstNode(op);
  return "op " + op->getName().getStringRef().str() + (n.empty() ? "" : " [" + n + "]");
}

json attrToJson(Attribute a, const std::string &w) {
  if (auto i = dyn_cast<IntegerAttr>(a)) return i.getInt();
  if (auto f = dyn_cast<FloatAttr>(a)) return f.getValueAsDouble();
  if (auto s = dyn_cast<StringAttr>(a)) return s.str();
  if (auto b = dyn_cast<BoolAttr>(a)) return b.getValue();
  if (auto arr = dyn_cast<ArrayAttr>(a)) {
    json j = json::array();
    for (Attribute e : arr) j.push_back(attrToJson(e, w));
    return j;
  }
  // The plan spells the dialect's enums with the same words as the IR.
  if (auto e = dyn_cast<EpilogueAttr>(a)) return stringifyEpilogue(e.getValue()).str();
  if (auto r = dyn_cast<RowIndexAttr>(a)) return stringifyRowIndex(r.getValue()).str();
  if (auto s = dyn_cast<ShardAttr>(a)) return json{{"kind", stringifyShardKind(s.getKind()).str()}, {"tp", s.getTp()}};
  fail(w, "attribute of unsupported kind in the plan");
}

std::string typeName(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << t;
  return s;
}

json orderToJson(OrderAttr o) {
  json j{{"kind", stringifyOrderKind(o.getKind()).str()}, {"acc", typeName(o.getAcc())}};
  switch (o.getKind()) {
  case OrderKind::k_chunks:
    j["k_step"] = o.getKStep();
    j["units"] = o.getUnits();
    break;
  case OrderKind::lane_tree:
    j["lanes"] = o.getLanes();
    break;
  case OrderKind::flash:
    j["kv_block"] = o.getKvBlock();
    j["k_step"] = o.getKStep();
    j["p"] = typeName(o.getP());
    break;
  }
  return j;
}

ActType act(Value v) { return cast<ActType>(v.getType()); }

std::vector<std::string> names(ArrayAttr a) {
  std::vector<std::string> r;
  for (Attribute e : a) r.push_back(cast<StringAttr>(e).str());
  return r;
}

// Storage dtype of a weight tensor (diffusers keeps the F32 modules in F32).
std::string weightDtype(const std::string &tensor) { return h3::isF32Module(tensor) ? "F32" : "BF16"; }

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

json opToPlanJson(Operation *op, bool requireNames) {
  auto nameOf = [&](Value v) -> std::string {
    if (requireNames) return valueName(v);
    try {
      return valueName(v);
    } catch (const Error &) {
      return "<unnamed>";
    }
  };
  std::string w = where(op);
  if (op->getName().getDialectNamespace() != "h3") fail(w, "is not an h3 op");
  json j;
  j["op"] = op->getName().stripDialect().str();
  j["nodes"] = names(op->getAttrOfType<ArrayAttr>("nodes"));
  json in = json::array(), out = json::array();
  for (Value v : op->getOperands()) in.push_back(nameOf(v));
  for (Value v : op->getResults()) out.push_back(nameOf(v));
  j["in"] = in;
  j["out"] = out;

  json weights = json::object();
  json attrs = json::object();
  json order = nullptr;
  auto props = dyn_cast_or_null<DictionaryAttr>(op->getPropertiesAsAttribute());
  if (props) {
    for (NamedAttribute na : props) {
      llvm::StringRef k = na.getName().getValue();
      if (k == "nodes" || k == "values") continue;
      if (k == "weight" || k == "bias") {
        weights[k.str()] = names(cast<ArrayAttr>(na.getValue()));
      } else if (k == "order") {
        order = orderToJson(cast<OrderAttr>(na.getValue()));
      } else {
        attrs[k.str()] = attrToJson(na.getValue(), w + " attr " + k.str());
      }
    }
  }

  // Derived attrs the kernels read (additive; docs/contract.md section 5).
  ActType y = act(op->getResult(0));
  attrs["out_dtype"] = h3ir::dtypeName(y.getElementType());
  if (op->getNumOperands()) attrs["x_dtype"] = h3ir::dtypeName(act(op->getOperand(0)).getElementType());
  if (weights.contains("weight") && !weights["weight"].empty())
    attrs["w_dtype"] = weightDtype(weights["weight"][0].get<std::string>());
  if (auto l = dyn_cast<LinearOp>(op)) {
    attrs["epilogue"] = stringifyEpilogue(l.getEpilogue()).str();
  } else if (auto a = dyn_cast<AllreduceTreeOp>(op)) {
    attrs["epilogue"] = stringifyEpilogue(a.getEpilogue()).str();
  } else if (auto q = dyn_cast<QkvLinearOp>(op)) {
    attrs["N"] = q.getHeads() * q.getHeadDim();
  } else if (auto t = dyn_cast<TimeEmbedOp>(op)) {
    attrs["K"] = t.getFreqDim();
    attrs["N"] = t.getOutDim();
  } else if (isa<RmsNormOp, NormModulateOp, GateResidualOp, PackOp>(op)) {
    attrs["H"] = act(op->getOperand(0)).getCols();
  } else if (isa<SwigluOp>(op)) {
    attrs["F"] = y.getCols();
    attrs["cols"] = y.getCols();
  } else if (isa<SiluOp, ResidualOp>(op)) {
    attrs["cols"] = y.getCols();
    attrs["dtype"] = h3ir::dtypeName(y.getElementType());
  } else if (auto u = dyn_cast<UnpackOp>(op)) {
    attrs["video_cols"] = act(u.getSample()).getCols();
    attrs["audio_cols"] = act(u.getAudioSample()).getCols();
  } else if (auto a = dyn_cast<AttentionOp>(op)) {
    attrs["domain"] = act(a.getQ()).getDomain().str();
    attrs["scale"] = 1.0 / std::sqrt(double(a.getHeadDim()));
  }
  if (!attrs.contains("shard")) attrs["shard"] = {{"kind", "replicated"}, {"tp", 1}};
  j["weights"] = weights;
  j["attrs"] = attrs;
  j["order"] = order;
  return j;
}

} // namespace h3c::planjson
