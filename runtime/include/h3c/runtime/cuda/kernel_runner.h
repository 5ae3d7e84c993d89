// Loads emitted kernels (NVRTC JIT with the disk cache -> cuModuleLoadData) and launches them with the grid their
// Launch descriptor derives from the run-time row counts in KernelArgs::meta (docs/contract.md section 6). Shared by
// the GPU executor, the GPU op tests and the bench.
#pragma once

#include "h3c/kernels/emit.h"
#include "h3c/runtime/cuda/driver.h"
#include "h3c/runtime/cuda/nvrtc_jit.h"

#include <filesystem>
#include <map>
#include <memory>
#include <string>

namespace h3c::runtime::cuda {

struct LoadedKernel {
  std::string id, entry, cubinKey;
  bool fromCache = false;
  h3c::kernels::Launch launch;
  CUmodule module = nullptr;
  CUfunction fn = nullptr;
};

class KernelRunner {
public:
  explicit KernelRunner(std::filesystem::path cacheDir = NvrtcJit::defaultCacheDir());
  ~KernelRunner();
  KernelRunner(const KernelRunner &) = delete;
  KernelRunner &operator=(const KernelRunner &) = delete;

  // Compiles (or takes from the cache) and loads; kernels are kept by id.
  const LoadedKernel &load(const h3c::kernels::KernelSource &k);
  // grid.x = ceil(rows * unitsPerRow / unitsPerBlock) with rows = meta[0] (meta[2] for per-item kernels),
  // grid.y = launch.gridY, grid.z = B (meta[1]) for per-item kernels. Zero rows: nothing is launched.
  void launch(const LoadedKernel &k, const h3c::kernels::KernelArgs &args, CUstream stream = nullptr);
  // A grid-stride kernel with an explicit block count (the synthetic generator).
  void launchBlocks(const LoadedKernel &k, const h3c::kernels::KernelArgs &args, unsigned blocks,
                    CUstream stream = nullptr);
  const std::string &arch() const { return arch_; }
  NvrtcJit &jit() { return jit_; }

private:
  NvrtcJit jit_;
  std::string arch_;
  std::map<std::string, std::unique_ptr<LoadedKernel>> loaded_;
};

} // namespace h3c::runtime::cuda
