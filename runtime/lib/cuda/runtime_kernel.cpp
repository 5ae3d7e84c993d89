// The runtime's own kernel specs (runtime_kernel.h).
#include "h3c/runtime/cuda/runtime_kernel.h"

#include <map>
#include <mutex>

namespace h3c::runtime::cuda {

const h3c::plan::Kernel &runtimeKernel(const std::string &entry, const std::string &arch,
                                       std::initializer_list<const char *> parts) {
  static std::mutex mu;
  static std::map<std::string, h3c::plan::Kernel> kernels;  // node-based: references stay valid as it grows
  std::lock_guard<std::mutex> lock(mu);
  const std::string id = entry + "_" + arch;
  auto it = kernels.find(id);
  if (it != kernels.end()) return it->second;
  h3c::plan::Kernel k;
  k.id = id;
  k.entry = entry;
  k.arch = arch;
  k.nvrtcOptions = {"--gpu-architecture=" + arch, "--std=c++17", "--fmad=false"};
  for (const char *part : parts) k.source += std::string(part) + "\n";
  k.launch.block = {256, 1, 1};
  return kernels.emplace(id, std::move(k)).first->second;
}

} // namespace h3c::runtime::cuda
