// The sampler's standard normal noise generated on the device (support/philox.h): the same bits as the host's
// philoxNormals (trajectory/sampler.h), so a rollout engine can draw its noise where its latents live. The kernel is
// compiled by NVRTC with the plan kernels' options (--fmad=false) and cached like them.
#pragma once

#include "h3c/plan/plan.h"
#include "h3c/runtime/cuda/kernel_runner.h"

#include <cstdint>
#include <string>

namespace h3c::runtime::cuda {

// The kernel for `arch` (sm_90a, sm_100a, ...): NVRTC can compile it without a GPU.
const h3c::plan::Kernel &philoxFillKernel(const std::string &arch);

// Writes `count` normals of the stream (seed, modality, draw), elements first..first+count-1, as F32 to `dst`, and
// waits for them. Needs a device (runner.arch() is its arch).
void philoxFillDevice(KernelRunner &runner, CUdeviceptr dst, int64_t count, uint64_t first, uint64_t seed,
                      uint32_t modality, uint32_t draw);

} // namespace h3c::runtime::cuda
