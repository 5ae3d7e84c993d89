// dlopen-based NVRTC loader (see nvrtc_api.h).
#include "h3c/runtime/cuda/nvrtc_api.h"

#include "h3c/runtime/cuda/dl_symbol.h"

#include "h3c/support/error.h"

#include <cuda.h>

#include <mutex>

namespace h3c::runtime::cuda {
namespace {

constexpr int kCudaMajor = CUDA_VERSION / 1000;  // the toolkit headers h3c was built with

bool resolveNvrtc(void *lib, NvrtcApi &a, std::string &missing) {
  return dlSymbol(lib, a.nvrtcGetErrorString, "nvrtcGetErrorString", missing) &&
         dlSymbol(lib, a.nvrtcVersion, "nvrtcVersion", missing) &&
         dlSymbol(lib, a.nvrtcCreateProgram, "nvrtcCreateProgram", missing) &&
         dlSymbol(lib, a.nvrtcDestroyProgram, "nvrtcDestroyProgram", missing) &&
         dlSymbol(lib, a.nvrtcCompileProgram, "nvrtcCompileProgram", missing) &&
         dlSymbol(lib, a.nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize", missing) &&
         dlSymbol(lib, a.nvrtcGetProgramLog, "nvrtcGetProgramLog", missing) &&
         dlSymbol(lib, a.nvrtcGetCUBINSize, "nvrtcGetCUBINSize", missing) &&
         dlSymbol(lib, a.nvrtcGetCUBIN, "nvrtcGetCUBIN", missing);
}

} // namespace

std::vector<std::string> nvrtcCandidates() {
  return toolkitLibraryCandidates("H3C_NVRTC_LIBRARY", "libnvrtc.so." + std::to_string(kCudaMajor));
}

bool openNvrtc(const std::vector<std::string> &names, NvrtcApi &api, std::string &why) {
  NvrtcApi a{};
  void *lib = dlOpenFirst(names, [&](void *l, std::string &reason) {
    std::string missing;
    if (!resolveNvrtc(l, a, missing)) {
      reason = "lacks " + missing;
      return false;
    }
    // Programs and options are passed as the headers h3c was built with define them: another major version
    // (H3C_NVRTC_LIBRARY) is refused, not trusted.
    int major = 0, minor = 0;
    if (a.nvrtcVersion(&major, &minor) != NVRTC_SUCCESS || major != kCudaMajor) {
      reason = "is NVRTC " + std::to_string(major) + "." + std::to_string(minor) + ", h3c was built with major version " +
               std::to_string(kCudaMajor);
      return false;
    }
    return true;
  }, why);
  if (lib) api = a;
  return lib != nullptr;
}

// Under AddressSanitizer: NVRTC's thread-local storage, once NVRTC is opened with dlopen, is dynamic TLS, and the
// __tls_get_addr interceptor of the sanitizer runtimes up to LLVM 16 and GCC 13 takes a dynamic TLS block that starts
// 16 bytes into a page for a glibc 2.19 header and reads bounds from before it: LeakSanitizer's tracer then dies at
// exit ("Tracer caught signal 11"; NvrtcCompile.NonFiniteScanKernel under ctest, clang-14, every run). Without the
// interceptor LeakSanitizer does not scan dynamic TLS, so a block held only from there would be reported as a leak:
// no leak can hide. (The binaries that open NVRTC have this file; the environment's ASAN_OPTIONS still override it.)
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define H3C_ASAN_BUILD 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define H3C_ASAN_BUILD 1
#endif
#ifdef H3C_ASAN_BUILD
extern "C" __attribute__((visibility("default"), used)) const char *__asan_default_options() {
  return "intercept_tls_get_addr=0";
}
#endif

const NvrtcApi &nvrtc() {
  static NvrtcApi api{};
  static bool ok = false;
  static std::string failure;
  static std::once_flag once;
  std::call_once(once, [] { ok = openNvrtc(nvrtcCandidates(), api, failure); });
  if (!ok) fail("nvrtc", "NVRTC not found: {}", failure);
  return api;
}

} // namespace h3c::runtime::cuda
