// `--hash-nodes` on the device: the content hash of support/content_hash.h computed where the value lives (no copy
// of the tensor back to the host). The kernel adds the two lane sums into a zeroed pair of u64 on the device; the
// host finishes them with contentHashHex, so the hash equals the CPU executor's for the same bytes.
#pragma once

#include "h3c/plan/plan.h"
#include "h3c/runtime/cuda/kernel_runner.h"

#include <cstddef>
#include <string>

namespace h3c::runtime::cuda {

// The kernel for `arch` (sm_90a, sm_100a, ...): NVRTC can compile it without a GPU.
const h3c::plan::Kernel &valueHashKernel(const std::string &arch);

// Queues the hash of `bytes` bytes at `src` on `stream`, adding its lane sums into the two u64 at `sums`.
void launchValueHash(const LoadedKernel &k, CUdeviceptr src, size_t bytes, CUdeviceptr sums, CUstream stream,
                     const std::string &what);

} // namespace h3c::runtime::cuda
