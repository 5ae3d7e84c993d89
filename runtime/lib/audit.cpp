// Audit mode's error measure (cpu_ops.h: auditCompare), shared by the CPU executor and the GPU executor's audit.
#include "h3c/runtime/cpu_ops.h"

#include <algorithm>
#include <cmath>

namespace h3c::rt {

AuditError auditCompare(const HostValue &got, const HostValue &ref, const std::string &name) {
  AuditError e;
  e.output = name;
  double refMax = 0;
  if (got.dtype == DType::I64)
    return e;
  for (size_t i = 0; i < got.f.size() && i < ref.f.size(); ++i) {
    double d = std::fabs(double(got.f[i]) - double(ref.f[i]));
    if (!(d <= e.maxAbs))  // NaN propagates as "infinite" error
      e.maxAbs = std::isnan(d) ? INFINITY : d;
    refMax = std::max(refMax, std::fabs(double(ref.f[i])));
  }
  // Relative to the reference's largest magnitude (element-wise ratios explode near zero crossings).
  e.maxRel = refMax > 0 ? e.maxAbs / refMax : e.maxAbs;
  return e;
}

} // namespace h3c::rt
