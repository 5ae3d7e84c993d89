// makeRankWeights (weights.h): what one tensor-parallel rank of a plan holds. The plan names, per split tensor, the
// row segments and the rank's part of each (plan::partOf); the rank's tensor is those rows back to back.
#include "h3c/runtime/weights.h"

#include "h3c/support/error.h"

namespace h3c::rt {

namespace {

class RankWeights final : public WeightSource {
public:
  RankWeights(WeightSource &all, const plan::Plan &p, int64_t tpIndex) : WeightSource(all.config()), all_(all) {
    for (const auto &b : p.weights)
      for (const auto &t : b.tensors) {
        if (t.split.empty()) continue;
        rows_[t.name] = plan::partOf(t.split, tpIndex, t.splitParts);
        specs_.at(t.name).shape = t.localShape();
      }
  }

  Tensor load(const std::string &name) override {
    auto it = rows_.find(name);
    if (it == rows_.end()) return all_.load(name);
    Tensor out;
    for (auto [b, e] : it->second) {
      Tensor part = all_.loadRows(name, b, e);
      if (out.shape.empty()) {
        out.dtype = part.dtype;
        out.shape = part.shape;
        out.shape[0] = 0;
      }
      out.shape[0] += part.shape[0];
      out.bytes.insert(out.bytes.end(), part.bytes.begin(), part.bytes.end());
    }
    if (out.shape != spec(name).shape) fail("weights:" + name, "the rank's rows do not make its local shape");
    return out;
  }

  nlohmann::json describe() const override { return all_.describe(); }

private:
  WeightSource &all_;
  std::map<std::string, plan::Segments> rows_;
};

} // namespace

std::unique_ptr<WeightSource> makeRankWeights(WeightSource &all, const plan::Plan &p, int64_t tpIndex) {
  return std::make_unique<RankWeights>(all, p, tpIndex);
}

} // namespace h3c::rt
