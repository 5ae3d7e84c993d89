// The NVRTC loader (runtime/cuda/nvrtc_api.h), without a GPU: a process does not map NVRTC until its first use, which
// names it tries, that a missing library or one without the entry points is refused with every name and reason
// (and the JIT then fails closed naming them), and that the toolkit's library resolves every entry point.
#ifdef H3C_HAVE_CUDA
#include "h3c/runtime/cuda/nvrtc_api.h"
#include "h3c/runtime/cuda/nvrtc_jit.h"
#include "scoped_env.h"

#include <cuda.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace hc = h3c::runtime::cuda;

namespace {

using h3c::testtool::ScopedEnv;

bool nvrtcMapped() {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str().find("libnvrtc") != std::string::npos;
}

// In a fresh process (the death test re-runs this binary for this test alone): no NVRTC at start-up, NVRTC mapped
// once the JIT asks for its version.
TEST(NvrtcLoader, MappedOnFirstUseOnly) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        if (nvrtcMapped()) std::_Exit(1);
        hc::NvrtcJit::nvrtcVersion();
        std::_Exit(nvrtcMapped() ? 0 : 2);
      },
      testing::ExitedWithCode(0), "")
      << "1: NVRTC was mapped before its first use; 2: not after it";
}

TEST(NvrtcLoader, CandidatesAreTheToolkitsSonameOrTheOverride) {
  const std::string soname = "libnvrtc.so." + std::to_string(CUDA_VERSION / 1000);
  {
    ScopedEnv e("H3C_NVRTC_LIBRARY", nullptr);
    const auto names = hc::nvrtcCandidates();
    ASSERT_EQ(names.size(), 2u);
    EXPECT_EQ(names.front(), soname);
    // The second: that soname in lib64/ beside the include/ folder of the toolkit h3c was built with.
    const std::filesystem::path second = names.back();
    EXPECT_EQ(second.filename(), soname);
    EXPECT_EQ(second.parent_path().filename(), "lib64");
    EXPECT_EQ(second.parent_path().parent_path(), std::filesystem::path(H3C_CUDA_INCLUDE_DIR).parent_path());
  }
  ScopedEnv e("H3C_NVRTC_LIBRARY", "/opt/elsewhere/libnvrtc.so.99");
  EXPECT_EQ(hc::nvrtcCandidates(), std::vector<std::string>{"/opt/elsewhere/libnvrtc.so.99"});
}

TEST(NvrtcLoader, MissingLibrariesAreRefusedWithEveryReason) {
  hc::NvrtcApi api{};
  std::string why;
  EXPECT_FALSE(hc::openNvrtc({"/nonexistent/libnvrtc.so.13", "libh3c_no_such_library.so"}, api, why));
  EXPECT_NE(why.find("/nonexistent/libnvrtc.so.13"), std::string::npos) << why;
  EXPECT_NE(why.find("libh3c_no_such_library.so"), std::string::npos) << why;
  EXPECT_EQ(api.nvrtcCompileProgram, nullptr);
  // A library that opens but is not NVRTC: the first missing entry point is named.
  EXPECT_FALSE(hc::openNvrtc({"libc.so.6"}, api, why));
  EXPECT_NE(why.find("libc.so.6: lacks nvrtcGetErrorString"), std::string::npos) << why;
  EXPECT_FALSE(hc::openNvrtc({}, api, why));
  EXPECT_FALSE(why.empty());
}

// The JIT fails closed when NVRTC cannot be opened: an h3c::Error that says so and names what was tried (a fresh
// process, so that the loader's first and only attempt sees the override).
TEST(NvrtcLoader, TheJitFailsClosedWithoutNvrtc) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("H3C_NVRTC_LIBRARY", "/nonexistent/libnvrtc.so.13", 1);
        try {
          hc::NvrtcJit::nvrtcVersion();
        } catch (const h3c::Error &e) {
          std::fprintf(stderr, "%s\n", e.what());
          std::_Exit(3);
        }
        std::_Exit(0);
      },
      testing::ExitedWithCode(3), "nvrtc: NVRTC not found: /nonexistent/libnvrtc.so.13: cannot open shared object file");
}

TEST(NvrtcLoader, TheToolkitsLibraryResolves) {
  hc::NvrtcApi api{};
  std::string why;
  ScopedEnv e("H3C_NVRTC_LIBRARY", nullptr);
  ASSERT_TRUE(hc::openNvrtc(hc::nvrtcCandidates(), api, why)) << why;
  int major = 0, minor = 0;
  ASSERT_EQ(api.nvrtcVersion(&major, &minor), NVRTC_SUCCESS);
  EXPECT_EQ(major, CUDA_VERSION / 1000);
  EXPECT_STREQ(api.nvrtcGetErrorString(NVRTC_ERROR_INVALID_INPUT), "NVRTC_ERROR_INVALID_INPUT");
  // The JIT's own use reports the same version.
  EXPECT_EQ(hc::NvrtcJit::nvrtcVersion(), std::to_string(major) + "." + std::to_string(minor));
}

} // namespace
#endif
