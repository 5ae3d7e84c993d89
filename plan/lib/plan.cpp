// Lookups on a loaded plan (plan.h).
#include "h3c/plan/plan.h"

#include "h3c/support/error.h"

#include <climits>

namespace h3c::plan {

const std::string &Op::firstNode() const {
  static const std::string kNone = "-";
  return nodes.empty() ? kNone : nodes.front();
}

int64_t WeightTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const Function &Plan::forward() const {
  auto it = functions.find("forward");
  if (it == functions.end()) fail("plan.json#/functions", "has no forward function");
  return it->second;
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

std::map<std::string, size_t> Plan::lastUse(const Function &fn) const {
  std::map<std::string, size_t> last;
  for (const auto &op : fn.ops)
    for (const auto &v : op.in) last[v] = op.index;
  for (const auto &[k, v] : fn.outputs) last[v] = SIZE_MAX;
  return last;
}

} // namespace h3c::plan
