// The LoRA merge on the device: a weight tensor in device memory updated in place with the same bits as the host's
// mergeLora (lora.h; docs/contract.md section 12), for hot weight updates of a resident engine. The kernel
// (lora_merge.cuh) writes the merged tensor to scratch memory and checks it; only a fully finite result is copied
// over the weight, so a refused merge leaves the weight as it was.
#pragma once

#include "h3c/plan/plan.h"
#include "h3c/runtime/cuda/kernel_runner.h"
#include "h3c/runtime/lora.h"
#include "h3c/support/dtype.h"

#include <string>
#include <utility>
#include <vector>

namespace h3c::runtime::cuda {

// The kernels' entries ("h3c_lora_merge", "h3c_lora_copy"; one source) and the spec of one for `arch` (sm_90a,
// sm_100a, ...): NVRTC compiles them without a GPU.
const std::vector<std::string> &loraMergeKernelEntries();
const h3c::plan::Kernel &loraMergeKernel(const std::string &entry, const std::string &arch);

// W (rows x cols, BF16 or F32, at `w` in device memory, aligned to its element size) = the host mergeLora of W and
// `terms`, queued on `stream` and finished before it returns (the stream is synchronized: the factors' and the
// scratch's device memory is freed on return). The factors are uploaded from the modules' host tensors. Throws
// h3c::Error (naming the target, and the first non-finite element and its value as the host does) with W unchanged.
void mergeLoraOnDevice(KernelRunner &runner, CUdeviceptr w, h3c::DType dtype, int64_t rows, int64_t cols,
                       const std::vector<std::pair<const h3c::rt::LoraModule *, double>> &terms, CUstream stream);

} // namespace h3c::runtime::cuda
