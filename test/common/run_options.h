// The run options of a runtime test: the plan's own sp and tp, two threads (the CI machine's cores).
#pragma once

#include "h3c/plan/plan.h"
#include "h3c/runtime/executor.h"

namespace h3c::testtool {

inline rt::RunOptions planOptions(const plan::Plan &p) {
  rt::RunOptions o;
  o.tp = p.options.tp;
  o.sp = p.options.sp;
  o.threads = 2;
  return o;
}

} // namespace h3c::testtool
