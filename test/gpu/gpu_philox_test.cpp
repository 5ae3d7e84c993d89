// The sampler's noise on the GPU (GpuPhilox*): the runtime's device noise kernel (runtime/cuda/noise.h:
// support/philox.h compiled by NVRTC with --fmad=false) gives the same bits as the host's philox::normal, for the
// initial noise and SDE draws, several seeds and modalities, odd and large counts, and element offsets past 2^33
// (the high counter word). Skips without a GPU.
#include "h3c/runtime/cuda/driver.h"
#include "h3c/runtime/cuda/kernel_runner.h"
#include "h3c/runtime/cuda/noise.h"
#include "h3c/support/philox.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <vector>

namespace hc = h3c::runtime::cuda;

TEST(GpuPhilox, DeviceNormalsEqualTheHostBitForBit) {
  std::string why;
  if (!hc::driverAvailable(&why)) GTEST_SKIP() << "no GPU: " << why;
  hc::KernelRunner runner;
  struct Case {
    long long n;
    unsigned long long first, seed;
    unsigned modality, draw;
  };
  const Case cases[] = {{1 << 20, 0, 0, 0, 0},
                        {777777, 0, 0x1234567890abcdefull, 1, 0},
                        {4097, 0, 42, 0, 17},
                        {65537, (1ull << 33) + 5, 9, 1, 3}};
  for (const Case &c : cases) {
    hc::DeviceBuffer buf(size_t(c.n) * 4);
    hc::philoxFillDevice(runner, buf.get(), c.n, c.first, c.seed, c.modality, c.draw);
    std::vector<float> dev(static_cast<size_t>(c.n));
    buf.download(dev.data(), dev.size() * 4);
    size_t diffs = 0, first = SIZE_MAX;
    for (long long i = 0; i < c.n; ++i) {
      const float h = h3c::philox::normal(c.seed, c.modality, c.draw, c.first + (unsigned long long)i);
      if (std::memcmp(&h, &dev[size_t(i)], 4) != 0) {
        ++diffs;
        if (first == SIZE_MAX) first = size_t(i);
      }
    }
    std::printf("%s GpuPhilox seed %llu modality %u draw %u first %llu: %lld normals, %zu differ\n",
                diffs ? "FAIL" : "PASS", c.seed, c.modality, c.draw, c.first, c.n, diffs);
    EXPECT_EQ(diffs, 0u) << "first at " << first;
  }
}
