// The LoRA merge kernels (runtime/cuda/lora_merge.h) compile with NVRTC for sm_90a and sm_100a without a GPU: one
// source, both entries in the cubin. test/gpu/gpu_lora_merge_test.cpp runs them against the host merge on a GPU.
#ifdef H3C_HAVE_CUDA
#include "h3c/runtime/cuda/lora_merge.h"
#include "h3c/runtime/cuda/nvrtc_jit.h"
#include "h3c/support/error.h"

#include <gtest/gtest.h>

namespace hc = h3c::runtime::cuda;

TEST(NvrtcCompile, LoraMergeKernels) {
  hc::NvrtcJit jit;
  for (const char *arch : {"sm_90a", "sm_100a"}) {
    const auto &entries = hc::loraMergeKernelEntries();
    ASSERT_EQ(entries.size(), 2u);
    auto c = jit.compile(hc::loraMergeKernel(entries[0], arch));
    EXPECT_EQ(c.cubin.compare(0, 4, "\x7f" "ELF"), 0) << arch;
    for (const auto &e : entries) {
      EXPECT_EQ(hc::loraMergeKernel(e, arch).source, hc::loraMergeKernel(entries[0], arch).source);
      EXPECT_NE(c.cubin.find(e), std::string::npos) << arch << ": no entry " << e;
    }
  }
  EXPECT_THROW(hc::loraMergeKernel("h3c_lora_nothing", "sm_90a"), h3c::Error);
}
#endif
