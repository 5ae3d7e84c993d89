// The strict rule's output check on the device: when a forward leaves its outputs in the caller's memory (the Python
// package's CUDA tensors, DeviceIO), they are scanned for NaN / Inf where they are, with the same result as the
// host's Tensor::nonFinite over their bytes (counts, first element, its value), without copying them back. One
// launch scans both outputs; three 64-bit slots per output come back (48 bytes).
#pragma once

#include "h3c/plan/plan.h"
#include "h3c/runtime/cuda/kernel_runner.h"
#include "h3c/runtime/tensor.h"

#include <array>
#include <cstdint>
#include <string>

namespace h3c::runtime::cuda {

// The kernel for `arch` (sm_90a, sm_100a, ...): NVRTC can compile it without a GPU.
const h3c::plan::Kernel &nonFiniteKernel(const std::string &arch);

// Two float32 tensors (contiguous, 4-byte aligned; a count of 0 skips one) scanned on `stream`: reset(), then
// launch(), then readSlots() (it synchronizes the stream) and decode() per tensor.
class NonFiniteScan {
public:
  static constexpr int kTensors = 2;
  using Slots = std::array<unsigned long long, 3 * kTensors>;  // per tensor: NaN count, Inf count, first key

  // Queued on `stream`: the slots to their start values (counts 0, keys ~0).
  void reset(CUstream stream);
  // Queued on `stream`: the scan of n[i] float32 words at p[i].
  void launch(const LoadedKernel &k, const std::array<CUdeviceptr, kTensors> &p,
              const std::array<int64_t, kTensors> &n, CUstream stream);
  // The slots, copied back on `stream` and waited for (the stream's earlier work included).
  Slots readSlots(CUstream stream);
  // Tensor i's result, as Tensor::nonFinite would give over its bytes.
  static h3c::rt::Tensor::NonFinite decode(const Slots &s, int i);

private:
  DeviceBuffer slots_{sizeof(Slots)};
};

} // namespace h3c::runtime::cuda
