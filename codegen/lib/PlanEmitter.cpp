// h3 module -> plan::Plan (docs/contract.md section 5): values in the order they are defined (graph inputs first),
// ops in launch order (the func's op order), each with its kernel; weights in buffers laid out so that a kernel that
// reads several tensors as one matrix (qkv's [Wq; Wk; Wv]) finds them back to back. A module with `func @backward`
// (h3-backward) becomes the plan's second function (docs/contract.md section 14): its gradient ops have no kernel
// yet ("kernel": null, one warning per kind), its weight gradients are F32 values with a slot each.
#include "h3c/Codegen/PlanEmitter.h"

#include "h3c/Dialect/H3/H3Dialect.h"
#include "h3c/Passes/PlanOp.h"
#include "h3c/kernels/emit.h"
#include "h3c/support/error.h"
#include "h3c/support/version.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <algorithm>
#include <set>

using namespace mlir;
using namespace h3c::h3ir;

namespace h3c::codegen {

namespace {

std::string where(Operation *op) {
  std::string n = firstNode(op);
  return "op " + op->getName().getStringRef().str() + (n.empty() ? "" : " [" + n + "]");
}

// The rows of `name` (one of `list`, stacked in order) that a column-sharded op's segments cover: its split.
plan::Segments tensorSplit(const plan::Op &op, const std::vector<std::string> &list, const std::string &name,
                           const std::map<std::string, h3::TensorSpec> &specs) {
  int64_t off = 0;
  for (const auto &n : list) {
    int64_t rows = specs.at(n).shape.at(0);
    if (n != name) {
      off += rows;
      continue;
    }
    plan::Segments s;
    for (auto [b, e] : op.attrs.shard.segments)
      if (b >= off && e <= off + rows) s.emplace_back(b - off, e - off);
      else if (b < off + rows && e > off) fail(op.where, "column segment [{}, {}) straddles two tensors", b, e);
    if (s.empty() || s.front().first != 0 || s.back().second != rows)
      fail(op.where, "the column segments do not tile the rows of '{}'", name);
    return s;
  }
  fail(op.where, "does not read '{}'", name);
}

// Weight buffers in op order: the tensors a kernel parameter spans go into one buffer, every other tensor alone.
// A column-sharded op's tensors carry their split (section 5.2).
void addWeightBuffers(plan::Plan &p, const plan::Op &op, const std::optional<plan::Kernel> &k,
                      const std::map<std::string, h3::TensorSpec> &specs, const std::set<std::string> &adapterSlots,
                      std::set<std::string> &placed) {
  auto tensor = [&](const std::string &name) {
    auto it = specs.find(name);
    if (it == specs.end()) fail(op.where, "reads '{}', which is not a tensor of this config", name);
    plan::WeightTensor t{name, it->second.dtype, it->second.shape, {}, 1};
    t.adapter = it->second.init == h3::TensorSpec::Init::Zeros && adapterSlots.count(name);
    if (op.attrs.shard.kind == plan::ShardKind::Column && plan::splitsWeights(op.kind)) {
      bool bias = std::find(op.biases.begin(), op.biases.end(), name) != op.biases.end();
      t.split = tensorSplit(op, bias ? op.biases : op.weights, name, specs);
      t.splitParts = op.attrs.shard.tp;
    }
    return t;
  };
  std::set<std::string> grouped;
  if (k)
    for (const auto &prm : k->params)
      if (prm.kind != plan::KernelParam::Kind::Scalar && prm.span > 1) {
        const auto &list = prm.role == plan::OperandRole::Weight ? op.weights : op.biases;
        plan::WeightBuffer b;
        for (int64_t s = 0; s < prm.span; ++s) {
          const std::string &n = list.at(size_t(prm.index + s));
          b.name += (s ? "+" : "") + n;
          b.tensors.push_back(tensor(n));
          grouped.insert(n);
          if (!placed.insert(n).second) fail(op.where, "tensor '{}' is read by two ops", n);
        }
        p.weights.push_back(b);
      }
  for (const auto *list : {&op.weights, &op.biases})
    for (const auto &n : *list)
      if (!grouped.count(n)) {
        if (!placed.insert(n).second) fail(op.where, "tensor '{}' is read by two ops", n);
        p.weights.push_back({n, {tensor(n)}});
      }
}

// The backward function: its `@grad:` arguments are its inputs, its other arguments the forward values of the same
// names (saved activations, already values of the plan); each gradient op's results and weight gradients become
// values; the results are named after the inputs they are the gradients of.
template <class AddValue>
void emitBackward(plan::Plan &p, func::FuncOp fn, AddValue &addValue, std::vector<std::string> &weightGrads,
                  std::vector<std::string> &warnings, const kernels::EmitOptions &tuning) {
  plan::Function bwd;
  bwd.name = "backward";
  auto trainable = fn->getAttrOfType<ArrayAttr>("h3.trainable");
  if (!trainable) fail("func @backward", "has no h3.trainable (run h3-backward)");
  for (Attribute t : trainable) bwd.trainable.push_back(cast<StringAttr>(t).str());
  Block &body = fn.getBody().front();
  for (BlockArgument a : body.getArguments()) {
    const std::string n = passes::valueName(a);
    auto slot = fn.getArgAttrOfType<IntegerAttr>(a.getArgNumber(), "h3.slot");
    if (!slot) fail("backward argument " + n, "has no slot (run h3-plan-buffers)");
    if (n.rfind("@grad:", 0) == 0) {
      addValue(a, slot.getInt());
      bwd.inputs.push_back(n);
    } else if (!p.values.count(n) || p.values.at(n).slot != slot.getInt()) {
      fail("backward argument " + n, "is neither an output gradient (@grad:) nor a forward value in its slot");
    }
  }
  std::map<std::string, const plan::Op *> forwardOf;  // node -> forward op (attention_grad's kv_block)
  for (const plan::Op &op : p.functions.at("forward").ops)
    for (const auto &n : op.nodes) forwardOf[n] = &op;
  for (Operation &op : body) {
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      for (unsigned i = 0; i < ret.getNumOperands(); ++i) {
        auto key = fn.getResultAttrOfType<StringAttr>(i, "h3.name");
        if (!key) fail("func @backward result " + std::to_string(i), "has no h3.name");
        bwd.outputs[key.str()] = passes::valueName(ret.getOperand(i));
      }
      continue;
    }
    auto slots = op.getAttrOfType<ArrayAttr>("h3.slots");
    if (!slots || slots.size() != op.getNumResults()) fail(where(&op), "has no slots (run h3-plan-buffers)");
    for (unsigned i = 0; i < op.getNumResults(); ++i) addValue(op.getResult(i), cast<IntegerAttr>(slots[i]).getInt());
    plan::Op pop = passes::toPlanOp(&op);
    pop.index = bwd.ops.size();
    if (!plan::isGradOp(pop.kind)) fail(where(&op), "is no gradient op, but sits in func @backward");
    for (size_t k = op.getNumResults(); k < pop.out.size(); ++k) {  // the weight gradients (toPlanOp)
      const std::string &g = pop.out[k];
      const plan::WeightTensor &t = p.weightTensor(g.substr(std::string("grad:").size()));
      plan::Value v{g, DType::F32, plan::Domain::One, t.numel(), false, -1, -1};
      if (!p.values.emplace(g, v).second) fail(where(&op), "value {} defined twice", g);
      weightGrads.push_back(g);
      bwd.outputs[g] = g;
    }
    if (pop.kind == plan::OpKind::AttentionGrad) {
      auto it = forwardOf.find(pop.nodes.at(0));
      if (it == forwardOf.end()) fail(where(&op), "differentiates a node no forward op implements");
      pop.attrs.kvBlock = it->second->order.kvBlock;
    }
    // The gradient op's kernel (kernels/lib/emit_grad.cpp); its weight gradients are operands past the op's results.
    kernels::OperandValues ov = passes::operandValues(&op);
    for (size_t k = op.getNumResults(); k < pop.out.size(); ++k) ov.out.push_back(p.values.at(pop.out[k]));
    try {
      kernels::EmitOptions eo = tuning;
      eo.wgmma = p.options.wgmma;
      plan::Kernel k = kernels::emitKernel(pop, ov, p.options.arch, eo).value();
      auto it = p.kernels.find(k.id);
      if (it != p.kernels.end() && it->second.source != k.source)
        fail(where(&op), "kernel id {} names two different sources", k.id);
      pop.kernel = k.id;
      p.kernels.emplace(k.id, std::move(k));
    } catch (const std::exception &e) {
      warnings.push_back(where(&op) + ": no kernel: " + e.what());
    }
    bwd.ops.push_back(std::move(pop));
  }
  p.functions["backward"] = std::move(bwd);
}

} // namespace

EmittedPlan emitPlan(ModuleOp m, const h3::Fingerprint &fp, const std::string &fingerprintSha256,
                     const plan::Options &o, const kernels::EmitOptions &tuning) {
  func::FuncOp fn, bwdFn;
  for (auto f : m.getOps<func::FuncOp>()) {
    if (f.getName() == "backward") {
      bwdFn = f;
      continue;
    }
    if (fn) fail("h3 module", "has more than one forward func");
    fn = f;
  }
  if (bwdFn && bwdFn.getBody().empty()) fail("func @backward", "has no body");
  if (!fn || fn.getBody().empty()) fail("h3 module", "has no func with a body");
  auto buffers = m->getAttrOfType<DictionaryAttr>("h3.buffers");
  if (!buffers) fail("h3 module", "has no buffer plan (run h3-plan-buffers)");

  EmittedPlan out;
  plan::Plan &p = out.plan;
  p.fingerprintSha256 = fingerprintSha256;
  p.producer = versionJson();
  p.config = fp.config;
  p.options = o;
  p.ranks = plan::rankGrid(o.sp, o.tp);
  plan::Function forward;
  forward.name = "forward";

  auto addValue = [&](Value v, int64_t slot) {
    std::string n = passes::valueName(v);
    plan::Value pv = passes::planValue(v, n);
    pv.slot = slot;
    if (!p.values.emplace(n, pv).second) fail("value " + n, "defined twice");
  };
  Block &body = fn.getBody().front();
  for (BlockArgument a : body.getArguments()) {
    auto slot = fn.getArgAttrOfType<IntegerAttr>(a.getArgNumber(), "h3.slot");
    if (!slot) fail("func argument " + passes::valueName(a), "has no slot (run h3-plan-buffers)");
    addValue(a, slot.getInt());
    forward.inputs.push_back(passes::valueName(a));
  }

  std::map<std::string, h3::TensorSpec> specs;
  for (const auto &t : fp.tensors) specs[t.name] = t;
  // h3-lora's adapter slots (docs/contract.md section 13): BF16 matrices of the shapes it recorded, zero until an
  // adapter is loaded; no tensor of the model has their names.
  std::set<std::string> adapterSlots;
  if (auto slots = m->getAttrOfType<DictionaryAttr>("h3.adapter_slots"))
    for (NamedAttribute na : slots) {
      h3::TensorSpec s;
      s.name = na.getName().str();
      s.dtype = DType::BF16;
      for (Attribute d : cast<ArrayAttr>(na.getValue())) s.shape.push_back(cast<IntegerAttr>(d).getInt());
      s.init = h3::TensorSpec::Init::Zeros;
      if (!specs.emplace(s.name, s).second) fail("h3.adapter_slots", "'{}' is a tensor of the model", s.name);
      adapterSlots.insert(s.name);
    }
  std::set<std::string> placed;
  for (Operation &op : body) {
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      if (ret.getNumOperands() != 2) fail("func return", "expected sample and audio_sample");
      forward.outputs["sample"] = passes::valueName(ret.getOperand(0));
      forward.outputs["audio_sample"] = passes::valueName(ret.getOperand(1));
      continue;
    }
    auto slots = op.getAttrOfType<ArrayAttr>("h3.slots");
    if (!slots || slots.size() != op.getNumResults()) fail(where(&op), "has no slots (run h3-plan-buffers)");
    for (unsigned i = 0; i < op.getNumResults(); ++i) addValue(op.getResult(i), cast<IntegerAttr>(slots[i]).getInt());
    plan::Op pop = passes::toPlanOp(&op);
    pop.index = forward.ops.size();
    std::optional<plan::Kernel> k;
    try {
      kernels::EmitOptions eo = tuning;
      eo.wgmma = o.wgmma;
      k = kernels::emitKernel(pop, passes::operandValues(&op), o.arch, eo);
    } catch (const std::exception &e) {
      if (!plan::runsOnHost(pop.kind)) out.warnings.push_back(where(&op) + ": no kernel: " + e.what());
    }
    addWeightBuffers(p, pop, k, specs, adapterSlots, placed);
    if (k) {
      auto it = p.kernels.find(k->id);
      if (it != p.kernels.end() && it->second.source != k->source)
        fail(where(&op), "kernel id {} names two different sources", k->id);
      pop.kernel = k->id;
      p.kernels.emplace(k->id, std::move(*k));
    }
    forward.ops.push_back(std::move(pop));
  }

  const size_t forwardOps = forward.ops.size();
  p.functions["forward"] = std::move(forward);
  std::vector<std::string> weightGrads;  // values that get a slot of their own below
  if (bwdFn) emitBackward(p, bwdFn, addValue, weightGrads, out.warnings, tuning);

  for (Attribute a : cast<ArrayAttr>(buffers.get("slots"))) {
    auto d = cast<DictionaryAttr>(a);
    plan::Slot s;
    s.id = cast<IntegerAttr>(d.get("id")).getInt();
    for (NamedAttribute na : cast<DictionaryAttr>(d.get("bytes_per_row"))) {
      plan::Domain dom;
      if (!plan::parseDomain(na.getName().str(), dom)) fail("h3.buffers", "unknown row domain");
      s.bytesPerRow[dom] = cast<IntegerAttr>(na.getValue()).getInt();
    }
    s.fixedBytes = cast<IntegerAttr>(d.get("fixed_bytes")).getInt();
    p.slots.push_back(s);
  }
  // Each weight gradient in a slot of its own (an output: live to the end), rows "1".
  for (const auto &g : weightGrads) {
    plan::Value &v = p.values.at(g);
    v.slot = int64_t(p.slots.size());
    p.slots.push_back({v.slot, {{plan::Domain::One, v.cols * 4}}, 0});
  }
  p.stats = {{"ops", int64_t(forwardOps)},
             {"nodes", int64_t(fp.nodes.size())},
             {"kernels", int64_t(p.kernels.size())},
             {"buffer_report_tokens", cast<IntegerAttr>(buffers.get("tokens")).getInt()},
             {"peak_live_bytes", cast<IntegerAttr>(buffers.get("peak_live_bytes")).getInt()},
             {"slot_bytes", cast<IntegerAttr>(buffers.get("slot_bytes")).getInt()}};
  if (bwdFn) p.stats["backward_ops"] = int64_t(p.backward()->ops.size());
  return out;
}

} // namespace h3c::codegen
