// h3 module -> plan.json (schema h3c-plan-v1). Values in the order they are defined (graph inputs first), ops in
// launch order (the func's op order), and for each op the generic view of its inherent attributes plus the
// derived ones kernels need (dtypes, widths; see docs/contract.md section 5, "attrs per op").
#include "h3c/Codegen/PlanEmitter.h"

#include "h3c/Dialect/H3/H3Dialect.h"
#include "h3c/models/config.h"
#include "h3c/support/canonical_json.h"
#include "h3c/support/error.h"
#include "h3c/support/files.h"
#include "h3c/support/sha256.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace mlir;
using namespace h3c::h3ir;

namespace h3c::codegen {

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
  if (auto s = dyn_cast<ShardAttr>(a)) return json{{"kind", s.getKind().str()}, {"tp", s.getTp()}};
  fail(w, "attribute of unsupported kind in the plan");
}

std::string typeName(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << t;
  return s;
}

json orderToJson(OrderAttr o) {
  json j{{"kind", o.getKind().str()}, {"acc", typeName(o.getAcc())}};
  if (o.getKind() == "k_chunks") {
    j["k_step"] = o.getKStep();
    j["units"] = o.getUnits();
  } else if (o.getKind() == "lane_tree") {
    j["lanes"] = o.getLanes();
  } else {
    j["kv_block"] = o.getKvBlock();
    j["k_step"] = o.getKStep();
    j["p"] = typeName(o.getP());
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

json opToPlanJson(Operation *op) {
  std::string w = where(op);
  if (op->getName().getDialectNamespace() != "h3") fail(w, "is not an h3 op");
  json j;
  j["op"] = op->getName().stripDialect().str();
  j["nodes"] = names(op->getAttrOfType<ArrayAttr>("nodes"));
  json in = json::array(), out = json::array();
  for (Value v : op->getOperands()) in.push_back(valueName(v));
  for (Value v : op->getResults()) out.push_back(valueName(v));
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
    attrs["epilogue"] = l.getEpilogue().str();
  } else if (auto a = dyn_cast<AllreduceTreeOp>(op)) {
    attrs["epilogue"] = a.getEpilogue().str();
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

EmittedPlan emitPlan(ModuleOp m, const h3::Fingerprint &fp, const std::string &fingerprintSha256,
                     const PlanOptions &o) {
  func::FuncOp fn;
  for (auto f : m.getOps<func::FuncOp>()) {
    if (fn) fail("h3 module", "has more than one func");
    fn = f;
  }
  if (!fn || fn.getBody().empty()) fail("h3 module", "has no func with a body");
  auto buffers = m->getAttrOfType<DictionaryAttr>("h3.buffers");
  if (!buffers) fail("h3 module", "has no buffer plan (run h3-plan-buffers)");

  EmittedPlan out;
  json values = json::object();
  json inputs = json::array();
  auto addValue = [&](Value v, int64_t slot) {
    ActType t = act(v);
    json e{{"dtype", h3ir::dtypeName(t.getElementType())}, {"rows", t.getDomain().str()}, {"cols", t.getCols()},
           {"batch", t.getBatch()}, {"slot", slot}};
    if (t.getParts() > 1) e["ranks"] = t.getParts();
    std::string n = valueName(v);
    if (values.contains(n)) fail("value " + n, "defined twice");
    values[n] = e;
  };
  Block &body = fn.getBody().front();
  for (BlockArgument a : body.getArguments()) {
    auto slot = fn.getArgAttrOfType<IntegerAttr>(a.getArgNumber(), "h3.slot");
    if (!slot) fail("func argument " + valueName(a), "has no slot (run h3-plan-buffers)");
    addValue(a, slot.getInt());
    inputs.push_back(valueName(a));
  }

  json ops = json::array();
  json kernels = json::object();
  for (Operation &op : body) {
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      if (ret.getNumOperands() != 2) fail("func return", "expected sample and audio_sample");
      continue;
    }
    auto slots = op.getAttrOfType<ArrayAttr>("h3.slots");
    if (!slots || slots.size() != op.getNumResults()) fail(where(&op), "has no slots (run h3-plan-buffers)");
    for (unsigned i = 0; i < op.getNumResults(); ++i) addValue(op.getResult(i), cast<IntegerAttr>(slots[i]).getInt());
    json j = opToPlanJson(&op);
    j["kernel"] = nullptr;
    std::optional<kernels::KernelSource> k;
    try {
      k = kernels::emitKernel(j, o.arch);
    } catch (const std::exception &e) {
      out.warnings.push_back(where(&op) + ": no kernel: " + e.what());
    }
    if (k) {
      auto it = out.kernels.find(k->id);
      if (it != out.kernels.end() && it->second.source != k->source)
        fail(where(&op), "kernel id {} names two different sources", k->id);
      out.kernels.emplace(k->id, *k);
      kernels[k->id] = {{"file", "kernels/" + k->id + ".cu"}, {"sha256", sha256Hex(k->source)}, {"entry", k->entry}};
      j["kernel"] = k->id;
    }
    ops.push_back(j);
  }
  auto ret = cast<func::ReturnOp>(body.getTerminator());

  json slots = json::array();
  for (Attribute a : cast<ArrayAttr>(buffers.get("slots"))) {
    auto d = cast<DictionaryAttr>(a);
    json bpr = json::object();
    for (NamedAttribute na : cast<DictionaryAttr>(d.get("bytes_per_row")))
      bpr[na.getName().str()] = cast<IntegerAttr>(na.getValue()).getInt();
    slots.push_back({{"id", cast<IntegerAttr>(d.get("id")).getInt()}, {"bytes_per_row", bpr},
                     {"fixed_bytes", cast<IntegerAttr>(d.get("fixed_bytes")).getInt()}});
  }

  json plan;
  plan["schema"] = "h3c-plan-v1";
  plan["fingerprint_sha256"] = fingerprintSha256;
  plan["config"] = h3::configToJson(fp.config);
  plan["options"] = {{"arch", o.arch}, {"tp", o.tp}, {"fuse", o.fuse}};
  plan["inputs"] = inputs;
  plan["outputs"] = {{"sample", valueName(ret.getOperand(0))}, {"audio_sample", valueName(ret.getOperand(1))}};
  plan["values"] = values;
  plan["slots"] = slots;
  plan["ops"] = ops;
  plan["kernels"] = kernels;
  plan["stats"] = {{"ops", ops.size()},
                   {"nodes", fp.nodes.size()},
                   {"kernels", kernels.size()},
                   {"buffer_report_tokens", cast<IntegerAttr>(buffers.get("tokens")).getInt()},
                   {"peak_live_bytes", cast<IntegerAttr>(buffers.get("peak_live_bytes")).getInt()},
                   {"slot_bytes", cast<IntegerAttr>(buffers.get("slot_bytes")).getInt()}};
  plan["plan_sha256"] = sha256Hex(canonicalJson(plan));  // over the object without plan_sha256
  out.plan = std::move(plan);
  return out;
}

void writePlanDirectory(const EmittedPlan &p, const fs::path &outIn) {
  fs::path out = outIn;
  while (!out.empty() && out.filename().empty()) out = out.parent_path();  // "OUT/" -> "OUT"
  if (out.empty()) fail(outIn.string(), "not a folder name");
  bool replace = false;
  if (fs::exists(out)) {
    if (!fs::is_directory(out) || !fs::exists(out / "plan.json"))
      fail(out.string(), "exists and is not a previous plan folder (no plan.json); refusing to replace it");
    replace = true;
  }
  AtomicDirectory dir(out, replace);
  if (!p.kernels.empty()) fs::create_directories(dir.tempPath() / "kernels");
  for (const auto &[id, k] : p.kernels) writeFileAtomic(dir.tempPath() / "kernels" / (id + ".cu"), k.source);
  writeFileAtomic(dir.tempPath() / "plan.json", p.plan.dump(1) + "\n");
  dir.commit();
}

} // namespace h3c::codegen
