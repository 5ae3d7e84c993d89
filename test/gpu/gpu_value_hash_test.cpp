// The ledger's content hash on the GPU (GpuValueHash*): the runtime's hash kernel (runtime/cuda/value_hash.h over
// support/content_hash.h) finishes to the host's contentHash for sizes with and without a tail word, 8-byte aligned
// and unaligned starts, a large buffer (many CTAs adding into the same sums), and the same value hashed twice into two
// pairs. Skips without a GPU.
#include "h3c/runtime/cuda/driver.h"
#include "h3c/runtime/cuda/kernel_runner.h"
#include "h3c/runtime/cuda/value_hash.h"
#include "h3c/support/content_hash.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

namespace hc = h3c::runtime::cuda;

TEST(GpuValueHash, DeviceHashEqualsTheHostHash) {
  std::string why;
  if (!hc::driverAvailable(&why)) GTEST_SKIP() << "no GPU: " << why;
  hc::KernelRunner runner;
  const hc::LoadedKernel &k = runner.load(hc::valueHashKernel(runner.arch()));
  const size_t sizes[] = {1, 7, 8, 9, 4096, 4099, 1000003, size_t(96) << 20};
  for (size_t n : sizes)
    for (size_t offset : {size_t(0), size_t(3)}) {  // offset 3: an unaligned start, read byte by byte
      std::vector<unsigned char> host(n + offset);
      unsigned long long x = 0x9E3779B97F4A7C15ull * (n + 1) + offset;
      for (auto &c : host) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        c = static_cast<unsigned char>(x >> 56);
      }
      hc::DeviceBuffer data(host.size()), sums(32);
      data.upload(host.data(), host.size());
      hc::check(hc::driver().cuMemsetD8(sums.get(), 0, 32), "zero");
      hc::launchValueHash(k, data.get() + offset, n, sums.get(), nullptr, "test");
      hc::launchValueHash(k, data.get() + offset, n, sums.get() + 16, nullptr, "test again");
      hc::check(hc::driver().cuCtxSynchronize(), "hash");
      unsigned long long s[4];
      sums.download(s, sizeof s);
      const std::string want = h3c::contentHash(host.data() + offset, n);
      const std::string got = h3c::contentHashHex(s[0], s[1], n), again = h3c::contentHashHex(s[2], s[3], n);
      const bool ok = got == want && again == want;
      std::printf("%s GpuValueHash %zu bytes at offset %zu: device %s, host %s\n", ok ? "PASS" : "FAIL", n, offset,
                  got.c_str(), want.c_str());
      EXPECT_EQ(got, want) << n << " bytes at offset " << offset;
      EXPECT_EQ(again, want);
    }
}
