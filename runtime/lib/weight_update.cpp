// Checking a hot weight update and turning it into byte writes (weight_update.h).
#include "h3c/runtime/weight_update.h"

#include "h3c/runtime/tensor.h"
#include "h3c/support/error.h"
#include "h3c/support/parallel.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

namespace h3c::rt {

namespace {

// Host values are cast and scanned in chunks of this many elements on the machine's threads (a whole-model update
// from pinned host memory must not be bound by one core), with results that do not depend on the split.
constexpr size_t kChunk = size_t(1) << 20;

size_t chunks(size_t n) { return (n + kChunk - 1) / kChunk; }

// The input's values in `to`: F32 -> BF16 to nearest even, BF16 -> F32 exactly (the caller copies nothing when the
// dtypes agree).
std::vector<uint8_t> castTo(const WeightInput &in, int64_t numel, DType to) {
  const size_t n = size_t(numel);
  std::vector<uint8_t> out(n * dtypeSize(to));
  const uint8_t *src = static_cast<const uint8_t *>(in.host);
  const bool narrow = in.dtype == DType::F32 && to == DType::BF16;
  if (!narrow && !(in.dtype == DType::BF16 && to == DType::F32))
    fail("update:" + in.name, "cannot take {} values for a {} tensor", dtypeName(in.dtype), dtypeName(to));
  parallelForEach(chunks(n), 0, [&](size_t c) {
    for (size_t i = c * kChunk, e = std::min(n, i + kChunk); i < e; ++i) {
      if (narrow) {
        float f;
        std::memcpy(&f, src + 4 * i, 4);
        const uint16_t b = floatToBf16(f);
        std::memcpy(out.data() + 2 * i, &b, 2);
      } else {
        uint16_t b;
        std::memcpy(&b, src + 2 * i, 2);
        const float f = bf16ToFloat(b);
        std::memcpy(out.data() + 4 * i, &f, 4);
      }
    }
  });
  return out;
}

// Tensor::scanNonFinite over `numel` elements, chunk by chunk in parallel, combined in chunk order (counts added,
// the first element the lowest chunk's first).
Tensor::NonFinite scanValues(DType dtype, const uint8_t *bytes, size_t numel) {
  const size_t es = dtypeSize(dtype);
  std::vector<Tensor::NonFinite> part(chunks(numel));
  parallelForEach(part.size(), 0, [&](size_t c) {
    const size_t b = c * kChunk, e = std::min(numel, b + kChunk);
    Tensor::scanNonFinite(dtype, bytes + b * es, (e - b) * es, int64_t(b), part[c]);
  });
  Tensor::NonFinite all;
  for (const auto &p : part) {
    all.nan += p.nan;
    all.inf += p.inf;
    if (all.first < 0 && p.first >= 0) {
      all.first = p.first;
      all.firstValue = p.firstValue;
    }
  }
  return all;
}

int64_t numelOf(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

} // namespace

PreparedUpdate prepareWeightUpdate(const plan::Plan &p, const std::vector<WeightInput> &inputs, h3::QkvLayout layout,
                                   bool deviceChecked) {
  // The plan's tensors by name, and the native tensors as pieces of them (built once per update: ~600 entries).
  std::unordered_map<std::string, const plan::WeightTensor *> planTensors;
  std::vector<h3::TensorSpec> diffusers;
  for (const auto &b : p.weights)
    for (const auto &t : b.tensors) {
      planTensors.emplace(t.name, &t);
      diffusers.push_back({t.name, t.shape, t.dtype});
    }
  std::unordered_map<std::string, h3::MappedTensor> native;
  bool nativeBuilt = false;
  auto nativeTensor = [&](const std::string &name) -> const h3::MappedTensor * {
    if (!h3::isNativeName(name)) return nullptr;
    if (!nativeBuilt) {
      for (auto &m : h3::nativeFromDiffusers(h3::diffusersTensors(p.config), p.config, layout))
        native.emplace(m.spec.name, std::move(m));
      nativeBuilt = true;
    }
    auto it = native.find(name);
    return it == native.end() ? nullptr : &it->second;
  };

  PreparedUpdate u;
  std::map<std::string, uint64_t> covered;  // plan tensor -> bytes written
  std::map<std::string, std::string> coveredBy;
  // One input may write several pieces of a tensor (a native interleaved qkv_proj: a piece per head), which the
  // mapper keeps disjoint; two inputs may not write the same tensor.
  auto claim = [&](const std::string &tensor, uint64_t bytes, const std::string &by) {
    auto [it, fresh] = coveredBy.emplace(tensor, by);
    if (!fresh && it->second != by)
      fail("update:" + by, "writes plan tensor '{}', which '{}' of the same update writes too", tensor, it->second);
    covered[tensor] += bytes;
  };
  std::set<std::string> seen;
  for (const WeightInput &in : inputs) {
    const std::string where = "update:" + in.name;
    if (!seen.insert(in.name).second) fail(where, "is given twice");
    if (in.dtype != DType::BF16 && in.dtype != DType::F32)
      fail(where, "is {}; an update takes BF16 or F32 tensors", dtypeName(in.dtype));
    if ((in.host == nullptr) == (in.device == 0) && numelOf(in.shape) > 0)
      fail(where, "internal error: give host or device memory (exactly one)");
    // What the input is: a plan tensor (diffusers naming) or a native tensor made of plan tensors' byte ranges.
    DType pinned;
    std::vector<h3::SourcePiece> pieces;
    std::vector<int64_t> shape;
    if (auto it = planTensors.find(in.name); it != planTensors.end()) {
      pinned = it->second->dtype;
      shape = it->second->shape;
      pieces.push_back({in.name, 0, uint64_t(it->second->numel()) * dtypeSize(pinned)});
    } else if (const h3::MappedTensor *m = nativeTensor(in.name)) {
      if (m->pieces.empty())
        fail(where, "is computed from the config (rope frequencies), not a weight that can be replaced");
      pinned = m->spec.dtype;
      shape = m->spec.shape;
      pieces = m->pieces;
      for (const auto &pc : pieces)
        if (!planTensors.count(pc.source))
          fail(where, "maps onto '{}', which is no weight tensor of the plan", pc.source);
    } else {
      fail(where, "is no weight tensor of the plan ({} tensors, diffusers naming) and no native tensor of the "
           "config", planTensors.size());
    }
    if (in.shape != shape)
      fail(where, "has shape {}, the tensor {}", shapeText(in.shape), shapeText(shape));
    const int64_t numel = numelOf(shape);
    const uint8_t *src = nullptr;
    uint64_t dev = 0;
    if (in.device) {
      if (!deviceChecked)
        fail(where, "internal error: device values must be scanned for NaN / Inf by the caller");
      if (in.dtype != pinned)
        fail(where, "is {} on the device; the tensor is {} (cast it on the device first)", dtypeName(in.dtype),
             dtypeName(pinned));
      dev = in.device;
    } else {
      std::vector<uint8_t> v;
      if (in.dtype != pinned) {
        v = castTo(in, numel, pinned);
        src = v.data();
      } else {
        src = static_cast<const uint8_t *>(in.host);
      }
      const Tensor::NonFinite nf = scanValues(pinned, src, size_t(numel));
      if (nf.first >= 0)
        fail(where, "holds non-finite values{}: {}; nothing was updated",
             in.dtype != pinned ? fmt::format(" after the cast to {}", dtypeName(pinned)) : std::string(), nf.text());
      if (!v.empty()) u.owned.push_back(std::move(v));  // a vector's buffer stays put when the vector moves
    }
    uint64_t at = 0;
    for (const auto &pc : pieces) {
      claim(pc.source, pc.length, in.name);
      u.writes.push_back({pc.source, pc.offset, pc.length, src ? src + at : nullptr, dev ? dev + at : 0});
      at += pc.length;
    }
  }
  for (const auto &[tensor, bytes] : covered) {
    u.tensors.push_back(tensor);
    const plan::WeightTensor &t = *planTensors.at(tensor);
    u.whole.push_back(bytes == uint64_t(t.numel()) * dtypeSize(t.dtype));
  }
  return u;
}

} // namespace h3c::rt
