// The sampler's noise on the GPU (GpuPhilox*): support/philox.h compiled by NVRTC with the plan kernels' options
// (--fmad=false) and run on the device gives the same bits as the host's philoxNormals, for the initial noise and an
// SDE draw, several seeds and modalities, counts that are odd and large, and element offsets past 2^32 (the high
// counter word). Skips without a GPU.
#include "h3c/runtime/cuda/driver.h"
#include "h3c/runtime/cuda/kernel_runner.h"
#include "h3c/support/files.h"
#include "h3c/support/philox.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace hc = h3c::runtime::cuda;

namespace {

const char *kFill = R"(
extern "C" __global__ void __launch_bounds__(256) h3c_philox_fill(float *dst, const long long n,
    const unsigned long long first, const unsigned long long seed, const unsigned int modality,
    const unsigned int draw) {
  for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n; i += (long long)gridDim.x * 256)
    dst[i] = h3c::philox::normal(seed, modality, draw, first + (unsigned long long)i);
}
)";

class GpuPhilox : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    if (!hc::driverAvailable(&why)) GTEST_SKIP() << "no GPU: " << why;
    if (!runner_) runner_ = new hc::KernelRunner();
    if (kernel_.id.empty()) {
      const std::string arch = hc::device().arch();
      kernel_.id = "h3c_philox_fill_test_" + arch;
      kernel_.entry = "h3c_philox_fill";
      kernel_.arch = arch;
      kernel_.nvrtcOptions = {"--gpu-architecture=" + arch, "--std=c++17", "--fmad=false"};
      kernel_.source = h3c::readFile(std::string(H3C_SOURCE_DIR) + "/support/include/h3c/support/philox.h") + kFill;
      kernel_.launch.block = {256, 1, 1};
    }
  }
  std::vector<float> device(long long n, unsigned long long first, unsigned long long seed, unsigned modality,
                            unsigned draw) {
    const auto &lk = runner_->load(kernel_);
    hc::DeviceBuffer out(size_t(n) * 4);
    CUdeviceptr p = out.get();
    void *params[] = {&p, &n, &first, &seed, &modality, &draw};
    unsigned blocks = unsigned(std::min<long long>((n + 255) / 256, 4096));
    hc::check(hc::driver().cuLaunchKernel(lk.fn, blocks, 1, 1, 256, 1, 1, 0, nullptr, params, nullptr), "philox fill");
    hc::check(hc::driver().cuCtxSynchronize(), "philox fill");
    std::vector<float> v(static_cast<size_t>(n));
    out.download(v.data(), v.size() * 4);
    return v;
  }
  static hc::KernelRunner *runner_;
  static h3c::plan::Kernel kernel_;
};
hc::KernelRunner *GpuPhilox::runner_ = nullptr;
h3c::plan::Kernel GpuPhilox::kernel_;

} // namespace

TEST_F(GpuPhilox, DeviceNormalsEqualTheHostBitForBit) {
  struct Case {
    long long n;
    unsigned long long first, seed;
    unsigned modality, draw;
  };
  const Case cases[] = {{1 << 20, 0, 0, 0, 0},
                        {777777, 0, 0x1234567890abcdefull, 1, 0},
                        {4097, 0, 42, 0, 17},
                        {65536, (1ull << 33) + 5, 9, 1, 3}};
  for (const Case &c : cases) {
    std::vector<float> dev = device(c.n, c.first, c.seed, c.modality, c.draw);
    size_t diffs = 0, first = SIZE_MAX;
    for (long long i = 0; i < c.n; ++i) {
      float h = h3c::philox::normal(c.seed, c.modality, c.draw, c.first + (unsigned long long)i);
      if (std::memcmp(&h, &dev[size_t(i)], 4) != 0) {
        ++diffs;
        if (first == SIZE_MAX) first = size_t(i);
      }
    }
    std::printf("%s GpuPhilox seed %llu modality %u draw %u first %llu: %lld normals, %zu differ\n",
                diffs ? "FAIL" : "PASS", c.seed, c.modality, c.draw, c.first, c.n, diffs);
    EXPECT_EQ(diffs, 0u) << "first at " << first << ": host "
                         << h3c::philox::normal(c.seed, c.modality, c.draw, c.first + first) << " device "
                         << dev[first];
  }
}
