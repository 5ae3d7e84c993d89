// The runtime's own kernels (not plan kernels): the synthetic weight generator, the sampler's noise and the
// --hash-nodes value hash. Each is a plan::Kernel spec built once per entry and arch and kept for the process, so a
// KernelRunner loads it (NVRTC, disk cache) like any plan kernel. NVRTC compiles them without a GPU.
#pragma once

#include "h3c/plan/plan.h"

#include <initializer_list>
#include <string>

namespace h3c::runtime::cuda {

// The spec of entry `entry` for `arch`: id "<entry>_<arch>", 256-thread blocks, the plan kernels' --fmad=false (the
// generators name every fma), and the NVRTC source: `parts` (embedded texts) joined by newlines, the first time only.
const h3c::plan::Kernel &runtimeKernel(const std::string &entry, const std::string &arch,
                                       std::initializer_list<const char *> parts);

} // namespace h3c::runtime::cuda
