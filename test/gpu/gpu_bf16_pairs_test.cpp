// The prelude's bf16-pair instructions (kernels/cuda/common.cuh: bf2_rn, bf2_mul, bf2_one_plus, which the norm
// kernels use in place of f2bf and F32 arithmetic) against the F32 forms the contract writes, on the device, for every
// input they can get in a kernel:
//   - bf2_rn (cvt.rn.bf16x2.f32) vs pack_bf2 (h3c's f2bf) for all 2^32 F32 bit patterns, each taken through an F32
//     multiply by one first (exact for every non-NaN value, and a NaN comes out as whatever NaN the GPU's arithmetic
//     returns): bf2_rn only rounds arithmetic results;
//   - bf2_mul (mul.rn.bf16x2) vs pack_bf2 of the F32 products, for every bf16 a that bf2_rn can return (all but the
//     253 other NaN patterns) times every bf16 b, as the norm multiplies bf(x * inv) by w;
//   - bf2_one_plus (fma.rn.bf16x2 s * 1 + 1) vs pack_bf2(1 + s) for all 2^16 s (any NaN for a NaN s: an F32 fma
//     reads it).
// Counts the inputs that differ and the first one of each. Skips without a GPU.
#include "h3c/runtime/cuda/driver.h"
#include "h3c/runtime/cuda/kernel_runner.h"
#include "h3c/runtime/cuda/runtime_kernel.h"

#include <gtest/gtest.h>

#include <cstdio>

namespace h3c::kernels::tmpl {
extern const char *const common;
} // namespace h3c::kernels::tmpl

namespace hc = h3c::runtime::cuda;

namespace {

// bad[c]: how many inputs of check c differ; bad[3 + c]: the smallest of them (~0 when none). Grid-stride loops.
const char *const kPairsCheck = R"(
__device__ void pairs_bad(unsigned long long *bad, int c, unsigned long long input) {
  atomicAdd(bad + c, 1ull);
  atomicMin(bad + 3 + c, input);
}
extern "C" __global__ void h3c_bf16_pairs_check(unsigned long long *bad, const float one) {
  const unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
  // The low half from u, the high half from u with the sign flipped (each pattern in both halves over the loop).
  for (unsigned long long u = first; u < (1ull << 32); u += step) {
    const float v = __fmul_rn(__uint_as_float((h3u32)u), one);
    const float v2 = __fmul_rn(__uint_as_float((h3u32)u ^ 0x80000000u), one);
    if (bf2_rn(v, v2) != pack_bf2(v, v2)) pairs_bad(bad, 0, u);
  }
  // a in both halves, b in the low half and b ^ 0x8000 in the high one: u = a | b << 16 over a < 2^16, b < 2^15.
  for (unsigned long long u = first; u < (1ull << 31); u += step) {
    const h3u32 a = (h3u32)u & 0xffffu, b = (h3u32)(u >> 16), b2 = b | 0x8000u;
    if ((a & 0x7fffu) > 0x7f80u && a != 0x7fffu) continue;  // a NaN that bf2_rn never returns
    const h3u32 ref = pack_bf2(__fmul_rn(bf2f((h3bf)a), bf2f((h3bf)b)), __fmul_rn(bf2f((h3bf)a), bf2f((h3bf)b2)));
    if (bf2_mul(a | a << 16, b | b2 << 16) != ref) pairs_bad(bad, 1, u);
  }
  // Only an F32 fma reads bf(1 + s), which turns every NaN into the same one: a NaN s must give a NaN, of any payload.
  for (unsigned long long u = first; u < (1ull << 15); u += step) {
    const h3u32 s = (h3u32)u, s2 = s | 0x8000u;
    const h3u32 ref = pack_bf2(__fadd_rn(one, bf2f((h3bf)s)), __fadd_rn(one, bf2f((h3bf)s2)));
    const h3u32 got = bf2_one_plus(s | s2 << 16);
    const bool nan = (s & 0x7fffu) > 0x7f80u;
    if (nan ? (got & 0x7fffu) <= 0x7f80u || (got & 0x7fff0000u) <= 0x7f800000u : got != ref) pairs_bad(bad, 2, u);
  }
}
)";

} // namespace

TEST(GpuBf16Pairs, HardwarePairOpsEqualTheF32FormsOnEveryInput) {
  std::string why;
  if (!hc::driverAvailable(&why)) GTEST_SKIP() << "no GPU: " << why;
  hc::KernelRunner runner;
  const auto &k = hc::runtimeKernel("h3c_bf16_pairs_check", runner.arch(), {h3c::kernels::tmpl::common, kPairsCheck});
  const hc::LoadedKernel &lk = runner.load(k);
  unsigned long long init[6] = {0, 0, 0, ~0ull, ~0ull, ~0ull};
  hc::DeviceBuffer bad(sizeof init);
  bad.upload(init, sizeof init);
  CUdeviceptr p = bad.get();
  float one = 1.0f;  // a parameter, so that nothing folds the multiply by one away
  void *params[] = {&p, &one};
  hc::check(hc::driver().cuLaunchKernel(lk.fn, unsigned(hc::device().smCount) * 16, 1, 1, 256, 1, 1, 0, nullptr,
                                        params, nullptr),
            "launch h3c_bf16_pairs_check");
  hc::check(hc::driver().cuCtxSynchronize(), "h3c_bf16_pairs_check");
  unsigned long long got[6];
  bad.download(got, sizeof got);
  const char *what[3] = {"bf2_rn == pack_bf2 (all 2^32 F32 arithmetic results)",
                         "bf2_mul == pack_bf2 of the F32 products (every non-NaN a and 0x7fff, every b)",
                         "bf2_one_plus == pack_bf2(1 + s) (all 2^16 s; a NaN for NaN s)"};
  for (int c = 0; c < 3; ++c) {
    std::printf("%s GpuBf16Pairs %s: %llu inputs differ", got[c] ? "FAIL" : "PASS", what[c], got[c]);
    if (got[c]) std::printf(", the first at 0x%llx", got[3 + c]);
    std::printf("\n");
    EXPECT_EQ(got[c], 0u) << what[c] << ", first input 0x" << std::hex << got[3 + c];
  }
}
