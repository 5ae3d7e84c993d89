// The h3 dialect: registration, the activation type and the order/shard attributes (parsing, printing,
// verification), and the shared helpers declared in H3Dialect.h. The discardable `h3.*` attributes are verified in
// H3DialectAttrs.cpp, the OrderedReduction interface in H3Ops.cpp.
#include "h3c/Dialect/H3/H3Dialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace h3c::h3ir;

#include "h3c/Dialect/H3/H3Dialect.cpp.inc"

#include "h3c/Dialect/H3/H3Enums.cpp.inc"

#include "h3c/Dialect/H3/H3Interfaces.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "h3c/Dialect/H3/H3Types.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "h3c/Dialect/H3/H3Attrs.cpp.inc"

void H3Dialect::initialize() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "h3c/Dialect/H3/H3Types.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "h3c/Dialect/H3/H3Attrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "h3c/Dialect/H3/H3Ops.cpp.inc"
      >();
}

namespace h3c::h3ir {

bool isRowDomain(llvm::StringRef d) {
  return d == "S" || d == "Nt" || d == "Nv" || d == "Na" || d == "T" || d == "T3" || d == "1" || d == "Sr";
}

std::string dtypeName(Type t) {
  if (!t) return "";
  if (t.isBF16()) return "BF16";
  if (t.isF32()) return "F32";
  if (t.isInteger(64)) return "I64";
  if (t.isInteger(32)) return "I32";
  return "";
}

OrderAttr kChunksOrder(MLIRContext *ctx) {
  return OrderAttr::get(ctx, OrderKind::k_chunks, kKStep, 1, 0, 0, Float32Type::get(ctx), Type());
}
OrderAttr laneTreeOrder(MLIRContext *ctx) {
  return OrderAttr::get(ctx, OrderKind::lane_tree, 0, 0, kLanes, 0, Float32Type::get(ctx), Type());
}
OrderAttr rowUnitsOrder(MLIRContext *ctx) {
  return OrderAttr::get(ctx, OrderKind::row_units, kKStep, kRowUnit, 0, 0, Float32Type::get(ctx), Type());
}
OrderAttr flashOrder(MLIRContext *ctx) {
  return OrderAttr::get(ctx, OrderKind::flash, kKStep, 0, 0, kKvBlock, Float32Type::get(ctx),
                        BFloat16Type::get(ctx));
}

std::string firstNode(Operation *op) {
  auto nodes = op->getAttrOfType<ArrayAttr>("nodes");
  if (!nodes || nodes.empty()) return "";
  if (auto s = dyn_cast<StringAttr>(nodes[0])) return s.str();
  return "";
}

} // namespace h3c::h3ir

// ---- !h3.act<[B,] domain, cols, dtype> ----

Type ActType::parse(AsmParser &p) {
  if (p.parseLess()) return {};
  bool batch = false;
  std::string domain;
  llvm::StringRef kw;
  auto parseDomain = [&]() -> ParseResult {
    if (succeeded(p.parseOptionalKeyword(&kw))) {
      domain = kw.str();
      return success();
    }
    int64_t one = 0;
    if (p.parseInteger(one) || one != 1) return p.emitError(p.getCurrentLocation(), "expected a row domain");
    domain = "1";
    return success();
  };
  if (parseDomain()) return {};
  if (domain == "B") {
    batch = true;
    if (p.parseComma() || parseDomain()) return {};
  }
  int64_t cols = 0;
  Type elt;
  if (p.parseComma() || p.parseInteger(cols) || p.parseComma() || p.parseType(elt) || p.parseGreater()) return {};
  return ActType::getChecked([&] { return p.emitError(p.getNameLoc()); }, p.getContext(), domain, cols, elt,
                             batch);
}

void ActType::print(AsmPrinter &p) const {
  p << "<";
  if (getBatch()) p << "B, ";
  p << getDomain() << ", " << getCols() << ", " << getElementType() << ">";
}

LogicalResult ActType::verify(llvm::function_ref<InFlightDiagnostic()> emitError, llvm::StringRef domain,
                              int64_t cols, Type elt, bool batch) {
  if (!isRowDomain(domain))
    return emitError() << "unknown row domain '" << domain << "' (S, Nt, Nv, Na, T, T3, 1, Sr)";
  if (cols <= 0) return emitError() << "column count must be positive, got " << cols;
  if (dtypeName(elt).empty()) return emitError() << "element type must be bf16, f32, i64 or i32, got " << elt;
  if (batch && !(domain == "S" || domain == "Nt" || domain == "Nv" || domain == "Na" || domain == "Sr"))
    return emitError() << "only token domains (S, Nt, Nv, Na, Sr) carry a batch axis, not '" << domain << "'";
  return success();
}

// ---- #h3.order<kind, key = value, ...> ----

Attribute OrderAttr::parse(AsmParser &p, Type) {
  std::string kindName;
  if (p.parseLess()) return {};
  llvm::SMLoc kindLoc = p.getCurrentLocation();
  if (p.parseKeywordOrString(&kindName)) return {};
  std::optional<OrderKind> kind = symbolizeOrderKind(kindName);
  if (!kind) {
    p.emitError(kindLoc, "unknown order kind '") << kindName << "' (k_chunks, lane_tree, flash, row_units)";
    return {};
  }
  int64_t kStep = 0, units = 0, lanes = 0, kvBlock = 0;
  Type acc, pt;
  while (succeeded(p.parseOptionalComma())) {
    llvm::StringRef key;
    if (p.parseKeyword(&key) || p.parseEqual()) return {};
    if (key == "acc") {
      if (p.parseType(acc)) return {};
    } else if (key == "p") {
      if (p.parseType(pt)) return {};
    } else {
      int64_t v = 0;
      if (p.parseInteger(v)) return {};
      if (key == "k_step") kStep = v;
      else if (key == "units") units = v;
      else if (key == "lanes") lanes = v;
      else if (key == "kv_block") kvBlock = v;
      else {
        p.emitError(p.getCurrentLocation(), "unknown order parameter '") << key << "'";
        return {};
      }
    }
  }
  if (p.parseGreater()) return {};
  return OrderAttr::getChecked([&] { return p.emitError(p.getNameLoc()); }, p.getContext(), *kind, kStep, units,
                               lanes, kvBlock, acc, pt);
}

void OrderAttr::print(AsmPrinter &p) const {
  p << "<" << stringifyOrderKind(getKind());
  switch (getKind()) {
  case OrderKind::k_chunks: p << ", k_step = " << getKStep() << ", units = " << getUnits(); break;
  case OrderKind::lane_tree: p << ", lanes = " << getLanes(); break;
  case OrderKind::flash: p << ", kv_block = " << getKvBlock() << ", k_step = " << getKStep(); break;
  case OrderKind::row_units: p << ", units = " << getUnits() << ", k_step = " << getKStep(); break;
  }
  p << ", acc = " << getAcc();
  if (getP()) p << ", p = " << getP();
  p << ">";
}

LogicalResult OrderAttr::verify(llvm::function_ref<InFlightDiagnostic()> emitError, OrderKind kind, int64_t kStep,
                                int64_t units, int64_t lanes, int64_t kvBlock, Type acc, Type p) {
  if (!acc) return emitError() << "order '" << stringifyOrderKind(kind) << "' needs an accumulator type (acc = f32)";
  switch (kind) {
  case OrderKind::k_chunks:
    if (kStep <= 0) return emitError() << "k_chunks needs k_step > 0";
    if (units != 1)
      return emitError() << "k_chunks has one unit (K in one chain; docs/contract.md section 4), got units = " << units;
    if (lanes || kvBlock || p) return emitError() << "k_chunks takes only k_step, units and acc";
    break;
  case OrderKind::lane_tree:
    if (lanes <= 0 || (lanes & (lanes - 1))) return emitError() << "lane_tree lanes must be a power of two, got " << lanes;
    if (kStep || units || kvBlock || p) return emitError() << "lane_tree takes only lanes and acc";
    break;
  case OrderKind::flash:
    if (kvBlock <= 0 || kStep <= 0) return emitError() << "flash needs kv_block > 0 and k_step > 0";
    if (!p) return emitError() << "flash needs the probability storage type p";
    if (units || lanes) return emitError() << "flash takes only kv_block, k_step, acc and p";
    break;
  case OrderKind::row_units:
    if (units <= 0 || kStep <= 0) return emitError() << "row_units needs units > 0 (rows a unit) and k_step > 0";
    if (lanes || kvBlock || p) return emitError() << "row_units takes only units, k_step and acc";
    break;
  }
  return success();
}

// ---- #h3.shard<kind, tp = N> ----

Attribute ShardAttr::parse(AsmParser &p, Type) {
  std::string kindName;
  int64_t tp = 0, segments = 1;
  if (p.parseLess()) return {};
  llvm::SMLoc kindLoc = p.getCurrentLocation();
  if (p.parseKeywordOrString(&kindName)) return {};
  std::optional<ShardKind> kind = symbolizeShardKind(kindName);
  if (!kind) {
    p.emitError(kindLoc, "unknown shard kind '") << kindName << "' (column, replicated)";
    return {};
  }
  if (p.parseComma() || p.parseKeyword("tp") || p.parseEqual() || p.parseInteger(tp)) return {};
  if (succeeded(p.parseOptionalComma()))
    if (p.parseKeyword("segments") || p.parseEqual() || p.parseInteger(segments)) return {};
  if (p.parseGreater()) return {};
  return ShardAttr::getChecked([&] { return p.emitError(p.getNameLoc()); }, p.getContext(), *kind, tp, segments);
}

void ShardAttr::print(AsmPrinter &p) const {
  p << "<" << stringifyShardKind(getKind()) << ", tp = " << getTp();
  if (getSegments() != 1) p << ", segments = " << getSegments();
  p << ">";
}

LogicalResult ShardAttr::verify(llvm::function_ref<InFlightDiagnostic()> emitError, ShardKind kind, int64_t tp,
                                int64_t segments) {
  if (tp < 1) return emitError() << "tp must be >= 1, got " << tp;
  if (segments < 1) return emitError() << "segments must be >= 1, got " << segments;
  if (kind == ShardKind::replicated && (tp != 1 || segments != 1))
    return emitError() << "a replicated op records tp = 1 and one segment";
  return success();
}
