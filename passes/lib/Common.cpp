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

bool isRowParallelCandidate(const std::string &node) {
  static const std::regex re(R"(^transformer_blocks\.[0-9]+\.(attn\.to_out\.0|ff\.net\.2)$)");
  return std::regex_match(node, re);
}

h3ir::OrderAttr contractOrder(h3ir::OrderedReduction op) {
  MLIRContext *ctx = op->getContext();
  switch (op.getRequiredOrderKind()) {
  case h3ir::OrderKind::k_chunks: {
    int64_t units = 1;
    if (auto ar = dyn_cast<h3ir::AllreduceTreeOp>(op.getOperation()))
      units = ar.getUnits();
    else if (auto l = dyn_cast<h3ir::LinearOp>(op.getOperation()); l && isRowParallelCandidate(h3ir::firstNode(l)))
      units = h3ir::rowParallelUnits(l.getK());
    return h3ir::kChunksOrder(ctx, units);
  }
  case h3ir::OrderKind::lane_tree: return h3ir::laneTreeOrder(ctx);
  case h3ir::OrderKind::flash: return h3ir::flashOrder(ctx);
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
