// Loads a plan's kernels (NVRTC JIT with the disk cache -> cuModuleLoadData) and launches them with the launch ABI
// the plan records (docs/contract.md section 5): the grid from the request's extents, the block and dynamic shared
// memory as written, and the typed parameters resolved for one op (buffers from the op's operands, scalars from the
// extents, tensor maps encoded on the host). Shared by the GPU executor, the GPU kernel checks and the bench.
#pragma once

#include "h3c/plan/plan.h"
#include "h3c/runtime/cuda/driver.h"
#include "h3c/runtime/cuda/nvrtc_jit.h"

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace h3c::runtime::cuda {

struct LoadedKernel {
  const h3c::plan::Kernel *spec = nullptr;  // owned by the plan (or the caller), which outlives the runner's use
  std::string cubinKey;
  bool fromCache = false;
  CUmodule module = nullptr;
  CUfunction fn = nullptr;
  std::vector<CUfunction> phaseFns;  // the kernel's later phases (plan::Kernel::phases), in order
  // Cluster kernels: how many of their clusters the device runs at once (cuOccupancyMaxActiveClusters); a grid
  // dimension capped per SM (a persistent grid) is capped at this many clusters too, since clusters must fit in one
  // GPC and not every SM can take part (a grid of 132 CTAs in pairs left some pairs for a second wave).
  int maxActiveClusters = 0;
  std::vector<int> phaseMaxActiveClusters;  // the same for each later phase (0: a phase without a cluster)
};

// The device address of an op's operand (role, position), e.g. the arena region of op.in[index].
using OperandAddress = std::function<CUdeviceptr(h3c::plan::OperandRole role, int64_t index)>;

class KernelRunner {
public:
  explicit KernelRunner(std::filesystem::path cacheDir = NvrtcJit::defaultCacheDir());
  ~KernelRunner();
  KernelRunner(const KernelRunner &) = delete;
  KernelRunner &operator=(const KernelRunner &) = delete;

  // Compiles (or takes from the cache) and loads; kernels are kept by id. The kernel's arch must be the device's.
  const LoadedKernel &load(const h3c::plan::Kernel &k);
  // Loads every kernel of the list; the ones not loaded yet are JIT-compiled (or read from the cache) by up to
  // `threads` worker threads at once (0: the hardware's thread count), then loaded in list order. Compile errors are
  // reported for the first failing kernel in list order.
  void loadAll(const std::vector<const h3c::plan::Kernel *> &kernels, unsigned threads = 0);
  // Launches on `stream`: the entry, then each phase in order. A grid dimension of zero (a request without rows in
  // that domain) launches nothing. Scratch parameters point into the runner's scratch buffer (grown when a launch
  // needs more, after the stream's earlier work is done with it); launches on one stream never overlap, so every
  // op's phases have it to themselves.
  void launch(const LoadedKernel &k, const h3c::plan::Extents &extents, const OperandAddress &address,
              CUstream stream = nullptr);
  // The grid a launch would use (for tests and messages).
  std::array<unsigned, 3> grid(const h3c::plan::Kernel &k, const h3c::plan::Extents &extents) const {
    return grid(k, k.launch, extents);
  }
  std::array<unsigned, 3> grid(const h3c::plan::Kernel &k, const h3c::plan::Launch &l,
                               const h3c::plan::Extents &extents) const;
  const std::string &arch() const { return arch_; }
  NvrtcJit &jit() { return jit_; }

private:
  const LoadedKernel &install(const h3c::plan::Kernel &k, CompiledKernel *compiled);
  void checkArch(const h3c::plan::Kernel &k) const;
  NvrtcJit jit_;
  std::string arch_;
  std::map<std::string, std::unique_ptr<LoadedKernel>> loaded_;
  std::map<std::string, CUtensorMap> maps_;  // encoded tensor maps by (kernel, param, address, extents)
  DeviceBuffer scratch_;                      // the scratch parameters' memory (see launch)
};

} // namespace h3c::runtime::cuda
