// The device noise kernel (noise.h): support/philox.h and philox_fill.cuh, embedded at build time.
#include "h3c/runtime/cuda/noise.h"

#include "h3c/support/error.h"

#include <algorithm>
#include <map>

namespace h3c::rt::cuda_src {
extern const char *const philox;
extern const char *const philox_fill;
} // namespace h3c::rt::cuda_src

namespace h3c::runtime::cuda {

const h3c::plan::Kernel &philoxFillKernel(const std::string &arch) {
  static std::map<std::string, h3c::plan::Kernel> kernels;
  auto it = kernels.find(arch);
  if (it != kernels.end()) return it->second;
  h3c::plan::Kernel k;
  k.id = "h3c_philox_fill_" + arch;
  k.entry = "h3c_philox_fill";
  k.arch = arch;
  k.nvrtcOptions = {"--gpu-architecture=" + arch, "--std=c++17", "--fmad=false"};
  k.source = std::string("// h3c sampler noise (Philox4x32-10, Box-Muller)\n") + h3c::rt::cuda_src::philox + "\n" +
             h3c::rt::cuda_src::philox_fill;
  k.launch.block = {256, 1, 1};
  return kernels.emplace(arch, std::move(k)).first->second;
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
