// h3 module -> plan.json (schema h3c-plan-v1). Values in the order they are defined (graph inputs first), ops in
// launch order (the func's op order), and for each op the generic view of its inherent attributes plus the
// derived ones kernels need (dtypes, widths; see docs/contract.md section 5, "attrs per op").
#include "h3c/Codegen/PlanEmitter.h"
#include "h3c/Passes/PlanJson.h"

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

using planjson::opToPlanJson;
using planjson::valueName;

namespace {

std::string where(Operation *op) {
  std::string n = firstNode(op);
  return "op " + op->getName().getStringRef().str() + (n.empty() ? "" : " [" + n + "]");
}

ActType act(Value v) { return cast<ActType>(v.getType()); }

} // namespace

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
