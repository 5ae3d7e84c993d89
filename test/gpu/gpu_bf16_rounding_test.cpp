// The kernels' bf16 rounding (kernels/cuda/common.cuh: f2bf, rbf and pack_bf2 on the hardware's cvt.rn.bf16 /
// cvt.rn.bf16x2 with h3c's NaN rule beside them) against the contract's rounding (support/dtype.h): for every one of
// the 2^32 F32 bit patterns on the device, against the rule written out again in this test's kernel, and for a
// sample of patterns copied back, against the host's floatToBf16. Skips without a GPU.
#include "h3c/kernels/emit.h"
#include "h3c/runtime/cuda/driver.h"
#include "h3c/runtime/cuda/kernel_runner.h"
#include "h3c/support/dtype.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace h3c::kernels::tmpl {
extern const char *const common;  // the prelude every generated kernel starts with (embedded_templates.cpp)
}

namespace hc = h3c::runtime::cuda;
namespace plan = h3c::plan;

namespace {

// The check kernel: the prelude, then the contract's rule as this test writes it (RNE; a NaN keeps sign and payload
// top and is made quiet), and a grid-stride walk over the patterns [start, start + count).
const char *const kCheck = R"(
__device__ unsigned short want_bf16(unsigned int u) {
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
extern "C" __global__ void h3c_bf16_rounding_check(unsigned long long start, unsigned long long count,
                                                    unsigned long long *mismatches, unsigned int *first,
                                                    unsigned short *sample, unsigned long long sampleEvery) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < count;
       i += (unsigned long long)gridDim.x * blockDim.x) {
    const unsigned int u = (unsigned int)(start + i);
    const unsigned int v = u * 2654435761u;  // a second pattern for the pair's other half
    const float f = __uint_as_float(u), g = __uint_as_float(v);
    const unsigned short w = want_bf16(u), wv = want_bf16(v);
    const unsigned int pair = pack_bf2(f, g), pairSwapped = pack_bf2(g, f);
    const bool ok = f2bf(f) == w && __float_as_uint(rbf(f)) == ((unsigned int)w << 16) &&
                    pair == ((unsigned int)w | ((unsigned int)wv << 16)) &&
                    pairSwapped == ((unsigned int)wv | ((unsigned int)w << 16));
    if (!ok) {
      atomicAdd(mismatches, 1ull);
      atomicMin(first, u);
    }
    if (i % sampleEvery == 0) sample[i / sampleEvery] = f2bf(f);
  }
}
)";

} // namespace

TEST(GpuBf16Rounding, EveryF32PatternRoundsAsTheContractSays) {
  std::string why;
  if (!hc::driverAvailable(&why)) GTEST_SKIP() << "no GPU: " << why;
  hc::KernelRunner runner;
  plan::Kernel k;
  k.id = "bf16_rounding_check";
  k.entry = "h3c_bf16_rounding_check";
  k.file = "kernels/bf16_rounding_check.cu";
  k.source = std::string(h3c::kernels::tmpl::common) + kCheck;
  k.arch = runner.arch();
  k.nvrtcOptions = h3c::kernels::nvrtcOptions(k.arch);
  const hc::LoadedKernel &lk = runner.load(k);

  const unsigned long long count = 1ull << 32, every = 4099;  // every 4,099th pattern comes back to the host
  const size_t samples = size_t(count / every + 1);
  hc::DeviceBuffer mism(8), first(4), sample(samples * 2);
  hc::check(hc::driver().cuMemsetD8(mism.get(), 0, 8), "zero");
  hc::check(hc::driver().cuMemsetD8(first.get(), 0xff, 4), "max");
  unsigned long long start = 0;
  CUdeviceptr m = mism.get(), f = first.get(), s = sample.get();
  void *args[] = {&start, const_cast<unsigned long long *>(&count), &m, &f, &s, const_cast<unsigned long long *>(&every)};
  hc::check(hc::driver().cuLaunchKernel(lk.fn, 132 * 16, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr), "launch");
  hc::check(hc::driver().cuCtxSynchronize(), "bf16 rounding check");
  unsigned long long bad = 0;
  unsigned firstBad = 0;
  mism.download(&bad, 8);
  first.download(&firstBad, 4);
  std::vector<uint16_t> got(samples);
  sample.download(got.data(), samples * 2);
  size_t hostBad = 0;
  for (size_t i = 0; i < samples; ++i) {
    const uint32_t u = uint32_t(i * every);
    float x;
    std::memcpy(&x, &u, 4);
    if (got[i] != h3c::floatToBf16(x)) ++hostBad;
  }
  std::printf("%s GpuBf16Rounding: 2^32 F32 patterns, %llu differ from the contract's rule (first 0x%08x); %zu "
              "samples against the host's floatToBf16, %zu differ\n",
              bad == 0 && hostBad == 0 ? "PASS" : "FAIL", bad, bad ? firstBad : 0u, samples, hostBad);
  EXPECT_EQ(bad, 0ull) << "first differing pattern 0x" << std::hex << firstBad;
  EXPECT_EQ(hostBad, 0u);
}
