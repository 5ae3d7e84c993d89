// The cuBLASLt loader of the native binding (runtime/cuda/cublaslt.h), without a GPU: which names it tries, that a
// missing library or one without the entry points is refused with every name and reason, and that the toolkit's
// library (where this machine has one) resolves every entry point.
#ifdef H3C_HAVE_CUDA
#include "h3c/runtime/cuda/cublaslt.h"
#include "scoped_env.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace hc = h3c::runtime::cuda;

namespace {

using h3c::testtool::ScopedEnv;

TEST(CublasLtLoader, CandidatesAreTheHeadersSonameOrTheOverride) {
  {
    ScopedEnv e("H3C_CUBLASLT_LIBRARY", nullptr);
    const auto names = hc::cublasLtCandidates();
    ASSERT_GE(names.size(), 2u);
    EXPECT_EQ(names.front(), "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR));
    EXPECT_EQ(names.back(), "libcublasLt.so");
  }
  ScopedEnv e("H3C_CUBLASLT_LIBRARY", "/opt/elsewhere/libcublasLt.so.99");
  EXPECT_EQ(hc::cublasLtCandidates(), std::vector<std::string>{"/opt/elsewhere/libcublasLt.so.99"});
}

TEST(CublasLtLoader, MissingLibrariesAreRefusedWithEveryReason) {
  hc::CublasLtApi api{};
  std::string why;
  EXPECT_FALSE(hc::openCublasLt({"/nonexistent/libcublasLt.so.13", "libh3c_no_such_library.so"}, api, why));
  EXPECT_NE(why.find("/nonexistent/libcublasLt.so.13"), std::string::npos) << why;
  EXPECT_NE(why.find("libh3c_no_such_library.so"), std::string::npos) << why;
  EXPECT_EQ(api.cublasLtMatmul, nullptr);
  // A library that opens but is not cuBLASLt: the first missing entry point is named.
  EXPECT_FALSE(hc::openCublasLt({"libc.so.6"}, api, why));
  EXPECT_NE(why.find("lacks cublasLtGetVersion"), std::string::npos) << why;
  EXPECT_FALSE(hc::openCublasLt({}, api, why));
  EXPECT_FALSE(why.empty());
}

TEST(CublasLtLoader, TheToolkitsLibraryResolves) {
  hc::CublasLtApi api{};
  std::string why;
  ScopedEnv e("H3C_CUBLASLT_LIBRARY", nullptr);
  if (!hc::openCublasLt(hc::cublasLtCandidates(), api, why)) GTEST_SKIP() << "no cuBLASLt here: " << why;
  EXPECT_NE(api.cublasLtMatmul, nullptr);
  EXPECT_NE(api.cublasLtMatmulAlgoGetHeuristic, nullptr);
  // The version needs no device; the library is the headers' major version (CUBLAS_VERSION = major * 10000 + ...).
  EXPECT_EQ(api.cublasLtGetVersion() / 10000, size_t(CUBLAS_VER_MAJOR));
  const char *msg = api.cublasLtGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED);
  ASSERT_NE(msg, nullptr);
  EXPECT_GT(std::string(msg).size(), 0u);
}

} // namespace
#endif
