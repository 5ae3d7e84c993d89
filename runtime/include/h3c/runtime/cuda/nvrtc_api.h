// NVRTC, opened with dlopen on its first use (the first kernel compiled, or the first cache key, which holds NVRTC's
// version), as the driver and cuBLASLt are (driver.h, cublaslt.h): h3c's binaries do not link it, so a process that
// never JIT-compiles (every CPU run, every test of the CPU paths) does not load its 105 MB and their relocations at
// start-up (measured on the 2-core machine: 45 ms of CPU per process, more under the sanitizers). <nvrtc.h> is used
// for types only.
#pragma once

#include <nvrtc.h>

#include <string>
#include <vector>

namespace h3c::runtime::cuda {

// The entry points h3c calls, with the types of the headers it was built with.
struct NvrtcApi {
  decltype(&::nvrtcGetErrorString) nvrtcGetErrorString;
  decltype(&::nvrtcVersion) nvrtcVersion;
  decltype(&::nvrtcCreateProgram) nvrtcCreateProgram;
  decltype(&::nvrtcDestroyProgram) nvrtcDestroyProgram;
  decltype(&::nvrtcCompileProgram) nvrtcCompileProgram;
  decltype(&::nvrtcGetProgramLogSize) nvrtcGetProgramLogSize;
  decltype(&::nvrtcGetProgramLog) nvrtcGetProgramLog;
  decltype(&::nvrtcGetCUBINSize) nvrtcGetCUBINSize;
  decltype(&::nvrtcGetCUBIN) nvrtcGetCUBIN;
};

// The library names tried in order: $H3C_NVRTC_LIBRARY alone when set (a path or a soname); otherwise the soname of
// the toolkit h3c was built with (libnvrtc.so.<CUDA major>, through the loader's path), then the same file in that
// toolkit's library folder.
std::vector<std::string> nvrtcCandidates();

// Opens the first of `names` that loads, resolves every entry point into `api` and is NVRTC of the headers' major
// version; false with `why` (every name tried, and why each failed) otherwise. The library stays open for the process.
bool openNvrtc(const std::vector<std::string> &names, NvrtcApi &api, std::string &why);

// The library from nvrtcCandidates(), opened once (thread-safe). Throws h3c::Error "nvrtc: NVRTC not found: <every
// name and why>" when none opens; every later call throws the same.
const NvrtcApi &nvrtc();

} // namespace h3c::runtime::cuda
