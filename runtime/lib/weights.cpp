// Weight sources: synthetic (counter-based, generated per tensor on demand), the in-memory cache of another source,
// and what they share (specs, the NaN / Inf check). Checkpoint folders: checkpoint_weights.cpp.
#include "h3c/runtime/weights.h"

#include "h3c/models/checkpoint.h"
#include "h3c/runtime/cpu_ops.h"
#include "h3c/support/content_hash.h"
#include "h3c/support/error.h"
#include "h3c/support/parallel.h"

namespace h3c::rt {

WeightSource::WeightSource(const h3::Config &c) : config_(c) {
  for (auto &s : h3::diffusersTensors(c))
    specs_[s.name] = s;
}

const h3::TensorSpec &WeightSource::spec(const std::string &name) const {
  auto it = specs_.find(name);
  if (it == specs_.end())
    fail("weights", "'{}' is not a tensor of this config", name);
  return it->second;
}

void WeightSource::checkFinite(const std::string &name, const Tensor &t) {
  const Tensor::NonFinite nf = t.nonFinite();
  if (nf.first < 0)
    return;
  if (strictFinite_)
    fail("weights:" + name, "holds non-finite values: {}; a strict run refuses them", nf.text());
  nonFinite_[name] = nf.text();
}

std::vector<std::string> WeightSource::nonFinite() const {
  std::vector<std::string> v;
  for (const auto &[name, text] : nonFinite_)
    v.push_back(name + ": " + text);
  return v;
}

namespace {

// Rows [b, e) of a kept tensor (the first axis), as a TP rank reads them.
Tensor sliceRows(const Tensor &t, const std::string &name, int64_t b, int64_t e) {
  if (t.shape.empty() || b < 0 || e > t.shape[0] || b > e)
    fail("weights:" + name, "rows [{}, {}) out of range for shape {}", b, e, t.shapeString());
  size_t rowBytes = t.bytes.size() / size_t(std::max<int64_t>(1, t.shape[0]));
  Tensor out;
  out.dtype = t.dtype;
  out.shape = t.shape;
  out.shape[0] = e - b;
  out.bytes.assign(t.bytes.begin() + long(rowBytes * size_t(b)), t.bytes.begin() + long(rowBytes * size_t(e)));
  return out;
}

} // namespace

Tensor WeightSource::loadRows(const std::string &name, int64_t rowBegin, int64_t rowEnd) {
  return sliceRows(load(name), name, rowBegin, rowEnd);
}

float syntheticValue(uint64_t seed, const h3::TensorSpec &spec, int64_t index) {
  return h3::synthValue(spec, seed, uint64_t(index));
}

namespace {

class SyntheticWeights final : public WeightSource {
public:
  SyntheticWeights(const h3::Config &c, uint64_t seed) : WeightSource(c), seed_(seed) {}
  Tensor load(const std::string &name) override {
    const auto &s = spec(name);
    return loadRange(s, 0, s.shape.empty() ? 1 : s.shape[0]);
  }
  Tensor loadRows(const std::string &name, int64_t b, int64_t e) override {
    const auto &s = spec(name);
    if (b < 0 || e > s.shape[0] || b > e)
      fail("weights:" + name, "rows [{}, {}) out of range", b, e);
    return loadRange(s, b, e);
  }
  nlohmann::json describe() const override { return {{"kind", "synthetic"}, {"seed", seed_}}; }

private:
  Tensor loadRange(const h3::TensorSpec &s, int64_t rowBegin, int64_t rowEnd) {
    int64_t rowElems = s.shape.size() > 1 ? s.numel() / s.shape[0] : 1;
    std::vector<int64_t> shape = s.shape;
    shape[0] = rowEnd - rowBegin;
    Tensor t = Tensor::zeros(s.dtype, shape);
    uint64_t begin = uint64_t(rowBegin * rowElems), n = uint64_t((rowEnd - rowBegin) * rowElems);
    size_t es = dtypeSize(s.dtype);
    // Elements are independent (counter-based), so the split across threads cannot change a bit.
    parallelFor(int64_t(n), int(hardwareThreads()), [&](int64_t a, int64_t z) {
      h3::synthTensorRange(s, seed_, begin + uint64_t(a), begin + uint64_t(z), t.bytes.data() + size_t(a) * es);
    });
    return t;
  }
  uint64_t seed_;
};

class CachedWeights final : public WeightSource {
public:
  explicit CachedWeights(WeightSource &source) : WeightSource(source.config()), source_(source) {}
  Tensor load(const std::string &name) override { return kept(name); }
  Tensor loadRows(const std::string &name, int64_t b, int64_t e) override { return sliceRows(kept(name), name, b, e); }
  nlohmann::json describe() const override { return source_.describe(); }

private:
  const Tensor &kept(const std::string &name) {
    auto it = kept_.find(name);
    if (it == kept_.end())
      it = kept_.emplace(name, source_.load(name)).first;
    return it->second;
  }
  WeightSource &source_;
  std::map<std::string, Tensor> kept_;
};

} // namespace

std::unique_ptr<WeightSource> makeCachedWeights(WeightSource &source) {
  return std::make_unique<CachedWeights>(source);
}

OverlayWeights::OverlayWeights(WeightSource &base) : WeightSource(base.config()), base_(base) {}

Tensor OverlayWeights::load(const std::string &name) {
  auto it = kept_.find(name);
  if (it != kept_.end()) return it->second;
  Tensor t = base_.load(name);
  if (!hashes_.count(name)) hashes_[name] = contentHash(t.bytes.data(), t.bytes.size());
  return t;
}

std::string OverlayWeights::contentHashOf(const std::string &name) {
  auto it = hashes_.find(name);
  if (it != hashes_.end()) return it->second;
  load(name);
  return hashes_.at(name);
}

void OverlayWeights::erase(const std::string &name) {
  if (kept_.erase(name)) hashes_.erase(name);
}

Tensor OverlayWeights::loadRows(const std::string &name, int64_t b, int64_t e) {
  auto it = kept_.find(name);
  return it == kept_.end() ? base_.loadRows(name, b, e) : sliceRows(it->second, name, b, e);
}

void OverlayWeights::holdAdapterSlots(const plan::Plan &p) {
  for (const auto &b : p.weights)
    for (const auto &t : b.tensors) {
      if (!t.adapter) continue;
      if (specs_.count(t.name)) fail("weights:" + t.name, "an adapter slot named like a tensor of the model");
      h3::TensorSpec s;
      s.name = t.name;
      s.dtype = t.dtype;
      s.shape = t.shape;
      s.init = h3::TensorSpec::Init::Zeros;
      specs_[t.name] = s;
      set(t.name, Tensor::zeros(t.dtype, t.shape));
    }
}

void OverlayWeights::set(const std::string &name, Tensor t) {
  const h3::TensorSpec &s = spec(name);
  if (t.dtype != s.dtype || t.shape != s.shape)
    fail("weights:" + name, "a replacement must be {} {}, got {} {}", dtypeName(s.dtype), shapeText(s.shape),
         dtypeName(t.dtype), t.shapeString());
  hashes_[name] = contentHash(t.bytes.data(), t.bytes.size());
  kept_[name] = std::move(t);
}

std::unique_ptr<WeightSource> makeSyntheticWeights(const h3::Config &c, uint64_t seed) {
  return std::make_unique<SyntheticWeights>(c, seed);
}

} // namespace h3c::rt
