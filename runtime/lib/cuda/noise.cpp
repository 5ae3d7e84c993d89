// The device noise kernel (noise.h): support/philox.h and philox_fill.cuh, embedded at build time.
#include "h3c/runtime/cuda/noise.h"

#include "h3c/runtime/cuda/runtime_kernel.h"
#include "h3c/support/error.h"

#include <algorithm>

namespace h3c::rt::cuda_src {
extern const char *const philox;
extern const char *const philox_fill;
} // namespace h3c::rt::cuda_src

namespace h3c::runtime::cuda {

const h3c::plan::Kernel &philoxFillKernel(const std::string &arch) {
  return runtimeKernel("h3c_philox_fill", arch,
                       {"// h3c sampler noise (Philox4x32-10, Box-Muller)", h3c::rt::cuda_src::philox,
                        h3c::rt::cuda_src::philox_fill});
}

void philoxFillDevice(KernelRunner &runner, CUdeviceptr dst, int64_t count, uint64_t first, uint64_t seed,
                      uint32_t modality, uint32_t draw) {
  if (count < 0) fail("noise", "negative element count {}", count);
  if (count == 0) return;
  const LoadedKernel &lk = runner.load(philoxFillKernel(runner.arch()));
  long long n = count;
  unsigned long long f = first, s = seed;
  unsigned m = modality, d = draw;
  void *params[] = {&dst, &n, &f, &s, &m, &d};
  const unsigned blocks = unsigned(std::min<int64_t>((count + 255) / 256, 65536));
  check(driver().cuLaunchKernel(lk.fn, blocks, 1, 1, 256, 1, 1, 0, nullptr, params, nullptr), "launch h3c_philox_fill");
  check(driver().cuCtxSynchronize(), "h3c_philox_fill");
}

} // namespace h3c::runtime::cuda
