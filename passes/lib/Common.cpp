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
