// The LoRA merge on the GPU (GpuLoraMerge*): the runtime's kernel (runtime/cuda/lora_merge.h) leaves the weight with
// the bytes of the host's mergeLora (runtime/lora.h; docs/contract.md section 12) for BF16 and F32 weights, shapes
// from one element to more rows than one grid pass covers and columns that are not whole 256-thread blocks, ranks 1
// to 70, one to three stacked terms, on the legacy stream and on a created non-blocking stream. A merge that comes
// out non-finite is refused with the host's message and leaves the device weight as it was. Skips without a GPU.
#include "h3c/runtime/cuda/driver.h"
#include "h3c/runtime/cuda/kernel_runner.h"
#include "h3c/runtime/cuda/lora_merge.h"
#include "h3c/runtime/lora.h"
#include "h3c/support/error.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace hc = h3c::runtime::cuda;
using h3c::DType;
using h3c::rt::LoraModule;
using h3c::rt::LoraTerms;
using h3c::rt::Tensor;

namespace {

// Full-mantissa pseudo-random values in [-magnitude/2, magnitude/2).
std::vector<float> randoms(int64_t n, uint32_t seed, float magnitude) {
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t x = seed * 2654435761u + 12345u;
  for (auto &f : v) {
    x = x * 1664525u + 1013904223u;
    f = (float(x >> 8) / float(1 << 24) - 0.5f) * magnitude;
  }
  return v;
}

LoraModule module(int64_t rows, int64_t cols, int64_t rank, double alpha, uint32_t seed) {
  LoraModule m;
  m.target = "transformer_blocks.0.attn.to_q.weight";
  m.rank = rank;
  m.alpha = alpha;
  const std::vector<float> d = randoms(rank * cols, seed, 1.0f), u = randoms(rows * rank, seed + 1000, 0.5f);
  m.down = Tensor::fromFloats(DType::F32, {rank, cols}, d.data());
  m.up = Tensor::fromFloats(DType::F32, {rows, rank}, u.data());
  return m;
}

struct Stream {
  CUstream s = nullptr;
  explicit Stream(bool create) {
    if (create) hc::check(hc::driver().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "creating a stream");
  }
  ~Stream() {
    if (s) hc::driver().cuStreamDestroy(s);
  }
};

// The device merge of `w` (uploaded, merged in place, downloaded) or its error message.
std::string deviceMerge(hc::KernelRunner &runner, const Tensor &w, const LoraTerms &terms, CUstream stream,
                        Tensor &out) {
  hc::DeviceBuffer buf(std::max<size_t>(w.bytes.size(), 4));
  buf.upload(w.bytes.data(), w.bytes.size());
  // The upload is on the legacy stream, which a non-blocking stream does not wait for.
  hc::check(hc::driver().cuCtxSynchronize(), "uploading the weight");
  std::string error;
  try {
    hc::mergeLoraOnDevice(runner, buf.get(), w.dtype, w.shape[0], w.shape[1], terms, stream);
  } catch (const h3c::Error &e) {
    error = e.what();
  }
  out = w;
  buf.download(out.bytes.data(), out.bytes.size());
  return error;
}

} // namespace

TEST(GpuLoraMerge, DeviceMergeEqualsTheHostMerge) {
  std::string why;
  if (!hc::driverAvailable(&why)) GTEST_SKIP() << "no GPU: " << why;
  hc::KernelRunner runner;
  struct Case {
    DType dtype;
    int64_t rows, cols;
    std::vector<int64_t> ranks;
    bool stream;
  };
  const std::vector<Case> cases = {
      {DType::BF16, 1, 1, {1}, false},
      {DType::BF16, 5, 300, {3, 17}, false},
      {DType::F32, 33, 513, {64}, true},
      {DType::BF16, 262147, 3, {2, 1, 5}, true},  // more than 65535 CTA rows of 4: the grid-stride loop
      {DType::BF16, 96, 24, {70}, false},
      {DType::F32, 7, 257, {1, 2}, false},
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    const Case &k = cases[c];
    const std::vector<float> wv = randoms(k.rows * k.cols, uint32_t(c), 0.25f);
    const Tensor w = Tensor::fromFloats(k.dtype, {k.rows, k.cols}, wv.data());
    std::vector<LoraModule> mods;
    for (size_t t = 0; t < k.ranks.size(); ++t)
      mods.push_back(module(k.rows, k.cols, k.ranks[t], 0.5 + double(t), uint32_t(100 * c + t)));
    LoraTerms terms;
    for (size_t t = 0; t < mods.size(); ++t) terms.push_back({&mods[t], t % 2 ? -0.75 : 1.25});
    const Tensor host = h3c::rt::mergeLora(w, terms);
    Stream stream(k.stream);
    Tensor dev;
    const std::string error = deviceMerge(runner, w, terms, stream.s, dev);
    EXPECT_EQ(error, "") << "case " << c;
    const bool same = dev.bytes == host.bytes;
    std::printf("%s GpuLoraMerge case %zu (%s [%lld, %lld], %zu terms): device %s the host merge\n",
                same ? "PASS" : "FAIL", c, std::string(h3c::dtypeName(k.dtype)).c_str(), (long long)k.rows,
                (long long)k.cols, terms.size(), same ? "equals" : "differs from");
    EXPECT_TRUE(same) << "case " << c;
    if (k.rows * k.cols > 16) {
      EXPECT_NE(dev.bytes, w.bytes) << "case " << c << ": nothing merged";
    }
  }
}

TEST(GpuLoraMerge, NonFiniteIsRefusedAndLeavesTheWeight) {
  std::string why;
  if (!hc::driverAvailable(&why)) GTEST_SKIP() << "no GPU: " << why;
  hc::KernelRunner runner;
  const int64_t rows = 9, cols = 270;
  std::vector<float> wv = randoms(rows * cols, 7, 0.25f);
  wv[size_t(4 * cols + 261)] = h3c::bf16ToFloat(0x7F7F);  // bf16's largest: a positive term overflows it
  const Tensor w = Tensor::fromFloats(DType::BF16, {rows, cols}, wv.data());
  LoraModule m = module(rows, cols, 1, 1.0, 3);
  std::vector<float> ones(size_t(rows), 1.0f), onesCols(size_t(cols), 1.0f);
  m.up = Tensor::fromFloats(DType::F32, {rows, 1}, ones.data());
  m.down = Tensor::fromFloats(DType::F32, {1, cols}, onesCols.data());
  const LoraTerms terms = {{&m, std::ldexp(1.0, 120)}};
  std::string hostError;
  try {
    h3c::rt::mergeLora(w, terms);
  } catch (const h3c::Error &e) {
    hostError = e.what();
  }
  ASSERT_NE(hostError, "");
  Tensor dev;
  const std::string error = deviceMerge(runner, w, terms, nullptr, dev);
  std::printf("GpuLoraMerge non-finite: host '%s', device '%s'\n", hostError.c_str(), error.c_str());
  EXPECT_EQ(error, hostError);
  EXPECT_EQ(dev.bytes, w.bytes) << "the refused merge changed the device weight";
  // No terms: nothing launched, the weight as it was.
  EXPECT_EQ(deviceMerge(runner, w, {}, nullptr, dev), "");
  EXPECT_EQ(dev.bytes, w.bytes);
}
