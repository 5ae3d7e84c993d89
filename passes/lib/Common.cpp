#include "Common.h"

#include <regex>

using namespace mlir;

namespace h3c::passes {

std::string blockPrefix(const std::string &node) {
  static const std::regex re(R"(^((transformer_blocks|token_refiner\.refiner_blocks)\.[0-9]+\.).*)");
  std::smatch m;
  if (std::regex_match(node, m, re)) return m[1].str();
  return "";
}

h3ir::OrderAttr contractOrder(h3ir::OrderedReduction op) {
  MLIRContext *ctx = op->getContext();
  switch (op.getRequiredOrderKind()) {
  case h3ir::OrderKind::k_chunks: return h3ir::kChunksOrder(ctx);
  case h3ir::OrderKind::lane_tree: return h3ir::laneTreeOrder(ctx);
  case h3ir::OrderKind::flash: return h3ir::flashOrder(ctx);
  case h3ir::OrderKind::row_units: return h3ir::rowUnitsOrder(ctx);
  }
  llvm_unreachable("unknown order kind");
}

std::vector<std::string> nodeList(Operation *op) {
  std::vector<std::string> r;
  if (auto a = op->getAttrOfType<ArrayAttr>("nodes"))
    for (Attribute s : a) r.push_back(cast<StringAttr>(s).str());
  return r;
}

ArrayAttr strArray(Builder &b, const std::vector<std::string> &v) {
  std::vector<Attribute> a;
  for (const auto &s : v) a.push_back(b.getStringAttr(s));
  return b.getArrayAttr(a);
}

std::vector<Operation *> h3Ops(ModuleOp m) {
  std::vector<Operation *> ops;
  m.walk([&](Operation *op) {
    if (op->getName().getDialectNamespace() == "h3") ops.push_back(op);
  });
  return ops;
}

} // namespace h3c::passes
