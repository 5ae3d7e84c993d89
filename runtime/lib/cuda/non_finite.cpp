// The device output scan (non_finite.h): non_finite.cuh, embedded at build time.
#include "h3c/runtime/cuda/non_finite.h"

#include "h3c/runtime/cuda/runtime_kernel.h"
#include "h3c/support/error.h"

#include <algorithm>
#include <limits>

namespace h3c::rt::cuda_src {
extern const char *const non_finite;
} // namespace h3c::rt::cuda_src

namespace h3c::runtime::cuda {

const h3c::plan::Kernel &nonFiniteKernel(const std::string &arch) {
  return runtimeKernel("h3c_non_finite", arch, {"// h3c output non-finite scan", h3c::rt::cuda_src::non_finite});
}

void NonFiniteScan::reset(CUstream stream) {
  // A static source: the asynchronous copy may read it after this returns.
  static const Slots start = {0, 0, ~0ull, 0, 0, ~0ull};
  check(driver().cuMemcpyHtoDAsync(slots_.get(), start.data(), sizeof start, stream), "resetting the output scan");
}

void NonFiniteScan::launch(const LoadedKernel &k, const std::array<CUdeviceptr, kTensors> &p,
                           const std::array<int64_t, kTensors> &n, CUstream stream) {
  CUdeviceptr p0 = p[0], p1 = p[1], out = slots_.get();
  long long n0 = n[0], n1 = n[1];
  if (n0 < 0 || n1 < 0) h3c::fail("output scan", "negative element count");
  if ((n0 && p0 % 4) || (n1 && p1 % 4)) h3c::fail("output scan", "a float32 tensor that is not 4-byte aligned");
  void *params[] = {&p0, &n0, &p1, &n1, &out};
  // Enough CTAs to stream the larger output at full bandwidth; the results do not depend on the grid.
  const long long most = std::max(n0, n1);
  const unsigned blocks = unsigned(std::clamp<long long>((most + 255) / 256, 1, 1024));
  check(driver().cuLaunchKernel(k.fn, blocks, kTensors, 1, 256, 1, 1, 0, stream, params, nullptr),
        "scanning the outputs for NaN / Inf");
}

NonFiniteScan::Slots NonFiniteScan::readSlots(CUstream stream) {
  Slots s{};
  check(driver().cuMemcpyDtoHAsync(s.data(), slots_.get(), sizeof s, stream), "reading the output scan");
  check(driver().cuStreamSynchronize(stream), "reading the output scan");
  return s;
}

h3c::rt::Tensor::NonFinite NonFiniteScan::decode(const Slots &s, int i) {
  h3c::rt::Tensor::NonFinite r;
  const unsigned long long nan = s[size_t(3 * i)], inf = s[size_t(3 * i + 1)], key = s[size_t(3 * i + 2)];
  if (nan + inf == 0) return r;  // first stays -1: all finite
  r.nan = int64_t(nan);
  r.inf = int64_t(inf);
  r.first = int64_t(key >> 2);
  const unsigned kind = unsigned(key & 3);
  r.firstValue = kind == 0 ? std::numeric_limits<float>::quiet_NaN()
                 : kind == 2 ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  return r;
}

} // namespace h3c::runtime::cuda
