// The device content hash (value_hash.h): support/synth_rng.h (splitmix64), content_hash.h and value_hash.cuh,
// embedded at build time.
#include "h3c/runtime/cuda/value_hash.h"

#include "h3c/runtime/cuda/runtime_kernel.h"
#include "h3c/support/error.h"

#include <algorithm>

namespace h3c::rt::cuda_src {
extern const char *const synth_rng;
extern const char *const content_hash;
extern const char *const value_hash;
} // namespace h3c::rt::cuda_src

namespace h3c::runtime::cuda {

const h3c::plan::Kernel &valueHashKernel(const std::string &arch) {
  return runtimeKernel("h3c_value_hash", arch,
                       {"// h3c value hash (--hash-nodes)", h3c::rt::cuda_src::synth_rng, h3c::rt::cuda_src::content_hash,
                        h3c::rt::cuda_src::value_hash});
}

void launchValueHash(const LoadedKernel &k, CUdeviceptr src, size_t bytes, CUdeviceptr sums, CUstream stream,
                     const std::string &what) {
  long long n = (long long)bytes;
  int aligned8 = src % 8 == 0;
  void *params[] = {&src, &n, &aligned8, &sums};
  // Enough CTAs to stream a large value at full bandwidth; the sums do not depend on the grid.
  const unsigned blocks = unsigned(std::clamp<size_t>((bytes / 8 + 255) / 256, 1, 1024));
  check(driver().cuLaunchKernel(k.fn, blocks, 1, 1, 256, 1, 1, 0, stream, params, nullptr), "hashing " + what);
}

} // namespace h3c::runtime::cuda
