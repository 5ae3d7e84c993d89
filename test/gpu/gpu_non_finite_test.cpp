// The strict rule's output scan on the GPU (GpuNonFinite*): the runtime's kernel (runtime/cuda/non_finite.h) gives
// what the host's Tensor::nonFinite gives over the same bytes (counts, first element, its value: the ledger's text),
// for two tensors in one launch, sizes from empty to many CTAs, NaN / +Inf / -Inf placed before, at and after CTA
// and grid-stride boundaries, and a second scan after reset() (no count carried over). Skips without a GPU.
#include "h3c/runtime/cuda/driver.h"
#include "h3c/runtime/cuda/kernel_runner.h"
#include "h3c/runtime/cuda/non_finite.h"
#include "h3c/runtime/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

namespace hc = h3c::runtime::cuda;
using h3c::rt::Tensor;

namespace {

// n finite float32 values (a fixed pseudo-random stream, large and small), then `bad` (index, value) written over.
Tensor floats(int64_t n, const std::vector<std::pair<int64_t, float>> &bad, uint64_t seed) {
  Tensor t = Tensor::zeros(h3c::DType::F32, {n});
  uint64_t x = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (int64_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const float v = float(int64_t(x >> 40) - (int64_t(1) << 23)) * 1e30f;  // up to ~8e36: finite
    std::memcpy(t.bytes.data() + 4 * i, &v, 4);
  }
  for (const auto &[i, v] : bad) std::memcpy(t.bytes.data() + 4 * i, &v, 4);
  return t;
}

} // namespace

TEST(GpuNonFinite, DeviceScanEqualsTheHostScan) {
  std::string why;
  if (!hc::driverAvailable(&why)) GTEST_SKIP() << "no GPU: " << why;
  hc::KernelRunner runner;
  const hc::LoadedKernel &k = runner.load(hc::nonFiniteKernel(runner.arch()));
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  float negNan;  // a NaN with the sign bit set: still NaN, never -Inf
  const uint32_t negNanBits = 0xFFC00001u;
  std::memcpy(&negNan, &negNanBits, 4);
  const int64_t big = int64_t(1024) * 256 * 3 + 17;  // more than one grid-stride pass of 1024 CTAs
  struct Case {
    int64_t n;
    std::vector<std::pair<int64_t, float>> bad;
  };
  const std::vector<Case> cases = {
      {0, {}},
      {1, {}},
      {1, {{0, -inf}}},
      {7, {{6, negNan}}},
      {256, {{255, inf}, {200, nan}}},
      {257, {{256, -inf}}},
      {4099, {{4098, nan}, {300, inf}, {301, -inf}}},
      {big, {{big - 1, nan}}},
      {big, {{1024 * 256 + 5, -inf}, {1024 * 256 * 2, nan}, {big - 2, inf}}},
      {big, {}},
  };
  hc::NonFiniteScan scan;
  for (size_t c = 0; c < cases.size(); ++c) {
    // Tensor 0: case c; tensor 1: the next case (wrapping), so both slots of one launch carry a result.
    const Case &a = cases[c], &b = cases[(c + 1) % cases.size()];
    const Tensor ta = floats(a.n, a.bad, c), tb = floats(b.n, b.bad, c + 100);
    hc::DeviceBuffer da(std::max<size_t>(4, ta.bytes.size())), db(std::max<size_t>(4, tb.bytes.size()));
    if (!ta.bytes.empty()) da.upload(ta.bytes.data(), ta.bytes.size());
    if (!tb.bytes.empty()) db.upload(tb.bytes.data(), tb.bytes.size());
    scan.reset(nullptr);
    scan.launch(k, {da.get(), db.get()}, {a.n, b.n}, nullptr);
    const hc::NonFiniteScan::Slots s = scan.readSlots(nullptr);
    for (int i = 0; i < 2; ++i) {
      const Tensor &t = i == 0 ? ta : tb;
      const std::string want = t.nonFinite().text(), got = hc::NonFiniteScan::decode(s, i).text();
      std::printf("%s GpuNonFinite case %zu tensor %d (%lld elements): device '%s', host '%s'\n",
                  got == want ? "PASS" : "FAIL", c, i, (long long)t.numel(), got.c_str(), want.c_str());
      EXPECT_EQ(got, want) << "case " << c << " tensor " << i;
    }
  }
  // The expectations themselves, spelled out (independent of Tensor::nonFinite): case 8's first is the -Inf.
  const Tensor t8 = floats(cases[8].n, cases[8].bad, 8);
  hc::DeviceBuffer d8(t8.bytes.size());
  d8.upload(t8.bytes.data(), t8.bytes.size());
  scan.reset(nullptr);
  scan.launch(k, {d8.get(), d8.get()}, {cases[8].n, 0}, nullptr);
  const hc::NonFiniteScan::Slots s = scan.readSlots(nullptr);
  EXPECT_EQ(hc::NonFiniteScan::decode(s, 0).text(), "1 NaN, 2 Inf (first: element 262149, -Inf)");
  EXPECT_EQ(hc::NonFiniteScan::decode(s, 1).first, -1);
  EXPECT_EQ(hc::NonFiniteScan::decode(s, 1).text(), "");
}
