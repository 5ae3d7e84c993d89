// Verification of the discardable `h3.*` attributes (declared in H3Dialect.td). The plan emitter reads them with
// unchecked casts, so a hand-written or stale module with a mistyped one is rejected here, by the verifier, naming
// the attribute; an `h3.*` name the dialect does not declare is rejected too, so a typo cannot go unnoticed.
#include "h3c/Dialect/H3/H3Dialect.h"

#include "mlir/IR/BuiltinOps.h"

using namespace mlir;
using namespace h3c::h3ir;

namespace {

bool nonNegativeI64(Attribute a) {
  auto i = dyn_cast_or_null<IntegerAttr>(a);
  return i && i.getType().isInteger(64) && i.getInt() >= 0;
}

// h3.buffers = {slots = [{id, bytes_per_row = {<domain> = n}, fixed_bytes}, ...], tokens, peak_live_bytes,
// slot_bytes}: what h3-plan-buffers writes and the plan emitter copies into the plan.
LogicalResult verifyBuffers(Operation *op, DictionaryAttr d) {
  auto bad = [&](llvm::StringRef what) { return op->emitOpError() << "'h3.buffers' " << what; };
  for (llvm::StringRef key : {"tokens", "peak_live_bytes", "slot_bytes"})
    if (!nonNegativeI64(d.get(key))) return bad("needs a non-negative i64 '") << key << "'";
  auto slots = dyn_cast_or_null<ArrayAttr>(d.get("slots"));
  if (!slots) return bad("needs an array 'slots'");
  if (d.size() != 4) return bad("has keys other than slots, tokens, peak_live_bytes and slot_bytes");
  for (auto [i, a] : llvm::enumerate(slots)) {
    auto s = dyn_cast<DictionaryAttr>(a);
    auto id = s ? dyn_cast_or_null<IntegerAttr>(s.get("id")) : IntegerAttr();
    if (!s || s.size() != 3 || !id || id.getInt() != int64_t(i) || !nonNegativeI64(s.get("fixed_bytes")))
      return bad("slot ") << i << " must be {id = " << i << ", bytes_per_row, fixed_bytes}";
    auto perRow = dyn_cast_or_null<DictionaryAttr>(s.get("bytes_per_row"));
    if (!perRow || perRow.size() != 1 || !isRowDomain(perRow.begin()->getName().getValue()) ||
        !nonNegativeI64(perRow.begin()->getValue()))
      return bad("slot ") << i << " needs bytes_per_row with exactly one row domain";
  }
  return success();
}

} // namespace

LogicalResult H3Dialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  StringAttr name = attr.getName();
  Attribute value = attr.getValue();
  bool onModule = isa<ModuleOp>(op);
  auto moduleOnly = [&]() { return op->emitOpError() << "'" << name.getValue() << "' belongs on the module"; };
  if (name == getConfigNameAttrHelper().getName()) {
    if (!onModule) return moduleOnly();
    if (!isa<StringAttr>(value)) return op->emitOpError() << "'h3.config_name' must be a string";
    return success();
  }
  if (name == getTpAttrHelper().getName() || name == getSpAttrHelper().getName()) {
    if (!onModule) return moduleOnly();
    auto n = dyn_cast<IntegerAttr>(value);
    if (!n || !n.getType().isInteger(64) || n.getInt() < 1)
      return op->emitOpError() << "'" << name.getValue() << "' must be an i64 >= 1";
    return success();
  }
  if (name == getArchAttrHelper().getName()) {
    if (!onModule) return moduleOnly();
    auto arch = dyn_cast<StringAttr>(value);
    if (!arch || (arch.getValue() != "sm_90a" && arch.getValue() != "sm_100a"))
      return op->emitOpError() << "'h3.arch' must be \"sm_90a\" or \"sm_100a\"";
    return success();
  }
  if (name == getBuffersAttrHelper().getName()) {
    if (!onModule) return moduleOnly();
    auto d = dyn_cast<DictionaryAttr>(value);
    if (!d) return op->emitOpError() << "'h3.buffers' must be a dictionary";
    return verifyBuffers(op, d);
  }
  if (name == getAdapterSlotsAttrHelper().getName()) {
    if (!onModule) return moduleOnly();
    auto d = dyn_cast<DictionaryAttr>(value);
    if (!d) return op->emitOpError() << "'h3.adapter_slots' must be a dictionary";
    for (NamedAttribute s : d) {
      auto shape = dyn_cast<ArrayAttr>(s.getValue());
      if (!shape || shape.size() != 2 || !llvm::all_of(shape, [](Attribute a) {
            auto i = dyn_cast<IntegerAttr>(a);
            return i && i.getType().isInteger(64) && i.getInt() > 0;
          }))
        return op->emitOpError() << "'h3.adapter_slots' entry '" << s.getName().getValue()
                                 << "' must be [rows, cols] of positive i64";
    }
    return success();
  }
  if (name == getTrainableAttrHelper().getName()) {
    auto sym = op->getAttrOfType<StringAttr>("sym_name");  // (by name: the dialect does not depend on func)
    if (op->getName().getStringRef() != "func.func" || !sym || sym.getValue() != "backward")
      return op->emitOpError() << "'h3.trainable' belongs on func @backward";
    auto list = dyn_cast<ArrayAttr>(value);
    if (!list || list.empty() || !llvm::all_of(list, [](Attribute a) {
          auto s = dyn_cast<StringAttr>(a);
          return s && !s.getValue().empty();
        }))
      return op->emitOpError() << "'h3.trainable' must list one or more non-empty patterns";
    return success();
  }
  if (name == getSlotsAttrHelper().getName()) {
    if (op->getDialect() != this)
      return op->emitOpError() << "'h3.slots' belongs on h3 ops (one slot per result)";
    auto slots = dyn_cast<ArrayAttr>(value);
    if (!slots || slots.size() != op->getNumResults() || !llvm::all_of(slots, nonNegativeI64))
      return op->emitOpError() << "'h3.slots' must list one non-negative i64 slot per result ("
                               << op->getNumResults() << ")";
    return success();
  }
  if (name == getNameAttrHelper().getName() || name == getSlotAttrHelper().getName())
    return op->emitOpError() << "'" << name.getValue() << "' belongs on a function argument or result";
  return op->emitOpError() << "has the unknown h3 attribute '" << name.getValue() << "'";
}

LogicalResult H3Dialect::verifyRegionArgAttribute(Operation *op, unsigned /*region*/, unsigned arg,
                                                  NamedAttribute attr) {
  StringAttr name = attr.getName();
  if (name == getNameAttrHelper().getName()) {
    auto s = dyn_cast<StringAttr>(attr.getValue());
    if (!s || s.getValue().empty())
      return op->emitOpError() << "argument " << arg << ": 'h3.name' must be a non-empty string";
    return success();
  }
  if (name == getSlotAttrHelper().getName()) {
    if (!nonNegativeI64(attr.getValue()))
      return op->emitOpError() << "argument " << arg << ": 'h3.slot' must be a non-negative i64";
    return success();
  }
  return op->emitOpError() << "argument " << arg << " has the unknown h3 attribute '" << name.getValue() << "'";
}

LogicalResult H3Dialect::verifyRegionResultAttribute(Operation *op, unsigned /*region*/, unsigned result,
                                                     NamedAttribute attr) {
  StringAttr name = attr.getName();
  if (name == getNameAttrHelper().getName()) {
    auto s = dyn_cast<StringAttr>(attr.getValue());
    if (!s || s.getValue().empty())
      return op->emitOpError() << "result " << result << ": 'h3.name' must be a non-empty string";
    return success();
  }
  return op->emitOpError() << "result " << result << " has the unknown h3 attribute '" << name.getValue() << "'";
}
