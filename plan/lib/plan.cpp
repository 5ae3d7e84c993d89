// Lookups on a loaded plan (plan.h).
#include "h3c/plan/plan.h"

#include "h3c/support/dtype.h"
#include "h3c/support/error.h"

#include <climits>

namespace h3c::plan {

const std::string &Op::firstNode() const {
  static const std::string kNone = "-";
  return nodes.empty() ? kNone : nodes.front();
}

int64_t TensorMapSpec::spanBytes(const Extents &e) const {
  const int64_t elem = int64_t(dtypeSize(dtype));
  int64_t last = elem;
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = dims[i].eval(e), stride = i == 0 ? elem : strides[i - 1].eval(e);
    if (d < 1) return 0;  // an empty request: the kernel loads nothing
    last += (d - 1) * stride;
  }
  return last;
}

int64_t WeightTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<int64_t> WeightTensor::localShape() const {
  std::vector<int64_t> s = shape;
  if (!split.empty() && !s.empty()) s[0] /= splitParts;
  return s;
}

Segments partOf(const Segments &segs, int64_t part, int64_t parts) {
  if (parts < 1 || part < 0 || part >= parts) fail("column segments", "part {} of {} does not exist", part, parts);
  Segments r;
  for (auto [b, e] : segs) {
    if ((e - b) % parts) fail("column segments", "[{}, {}) does not split into {} equal parts", b, e, parts);
    int64_t w = (e - b) / parts;
    r.emplace_back(b + part * w, b + (part + 1) * w);
  }
  return r;
}

std::vector<Rank> rankGrid(int64_t sp, int64_t tp) {
  std::vector<Rank> r;
  for (int64_t i = 0; i < sp; ++i)
    for (int64_t j = 0; j < tp; ++j) r.push_back({i * tp + j, i, j});
  return r;
}

std::pair<int64_t, int64_t> rankRows(int64_t spIndex, int64_t sp, int64_t S) {
  if (sp < 1 || spIndex < 0 || spIndex >= sp) fail("sequence-parallel rank", "{} of {} does not exist", spIndex, sp);
  // floor(i*S/sp): S*sp stays far below 2^63 for any request the runtime accepts.
  return {spIndex * S / sp, (spIndex + 1) * S / sp};
}

const Function &Plan::forward() const {
  auto it = functions.find("forward");
  if (it == functions.end()) fail("plan.json#/functions", "has no forward function");
  return it->second;
}

const Function *Plan::backward() const {
  auto it = functions.find("backward");
  return it == functions.end() ? nullptr : &it->second;
}

const Value &Plan::value(const std::string &name) const {
  auto it = values.find(name);
  if (it == values.end()) fail("plan.json#/values", "no value named '{}'", name);
  return it->second;
}

const Kernel &Plan::kernel(const Op &op) const {
  if (!op.kernel) fail(op.where, "op '{}' ({}) has no kernel", opKindName(op.kind), op.firstNode());
  auto it = kernels.find(*op.kernel);
  if (it == kernels.end()) fail(op.where + "/kernel", "kernel '{}' is not in #/kernels", *op.kernel);
  return it->second;
}

std::pair<const WeightBuffer *, int64_t> Plan::weightLocation(const std::string &tensor) const {
  for (const auto &b : weights) {
    int64_t off = 0;
    for (const auto &t : b.tensors) {
      if (t.name == tensor) return {&b, off};
      off += t.numel();
    }
  }
  fail("plan.json#/weights", "no weight buffer holds '{}'", tensor);
}

const WeightTensor &Plan::weightTensor(const std::string &tensor) const {
  for (const auto &b : weights)
    for (const auto &t : b.tensors)
      if (t.name == tensor) return t;
  fail("plan.json#/weights", "no weight buffer holds '{}'", tensor);
}

std::map<std::string, size_t> Plan::lastUse(const Function &fn) const {
  std::map<std::string, size_t> last;
  for (const auto &op : fn.ops)
    for (const auto &v : op.in) last[v] = op.index;
  for (const auto &[k, v] : fn.outputs) last[v] = SIZE_MAX;
  return last;
}

} // namespace h3c::plan
