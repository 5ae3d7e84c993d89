// KernelRunner: JIT + module load + launch (see kernel_runner.h).
#include "h3c/runtime/cuda/kernel_runner.h"

#include "h3c/support/error.h"

namespace h3c::runtime::cuda {

KernelRunner::KernelRunner(std::filesystem::path cacheDir) : jit_(std::move(cacheDir)), arch_(device().arch()) {}

KernelRunner::~KernelRunner() {
  for (auto &kv : loaded_)
    if (kv.second->module) driver().cuModuleUnload(kv.second->module);
}

const LoadedKernel &KernelRunner::load(const h3c::kernels::KernelSource &k) {
  auto it = loaded_.find(k.id);
  if (it != loaded_.end()) return *it->second;
  CompiledKernel c = jit_.compile(k, arch_);
  auto lk = std::make_unique<LoadedKernel>();
  lk->id = k.id;
  lk->entry = k.entry;
  lk->cubinKey = c.key;
  lk->fromCache = c.fromCache;
  lk->launch = k.launch;
  const DriverApi &d = driver();
  device();
  check(d.cuModuleLoadData(&lk->module, c.cubin.data()), "cuModuleLoadData(" + k.id + ")");
  check(d.cuModuleGetFunction(&lk->fn, lk->module, k.entry.c_str()), "cuModuleGetFunction(" + k.entry + ")");
  if (k.launch.smemBytes > 48 * 1024)
    check(d.cuFuncSetAttribute(lk->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k.launch.smemBytes),
          "raising the shared-memory limit of " + k.id);
  auto &ref = *lk;
  loaded_.emplace(k.id, std::move(lk));
  return ref;
}

void KernelRunner::launch(const LoadedKernel &k, const h3c::kernels::KernelArgs &args, CUstream stream) {
  const auto &l = k.launch;
  long long rows = l.perItem ? args.meta[h3c::kernels::kMetaItemRows] : args.meta[h3c::kernels::kMetaRows];
  if (rows < 0) fail("kernel " + k.id, "negative row count {}", rows);
  if (rows == 0) return;
  long long units = rows * l.unitsPerRow;
  long long gx = (units + l.unitsPerBlock - 1) / l.unitsPerBlock;
  long long gz = l.perItem ? args.meta[h3c::kernels::kMetaBatch] : 1;
  if (gx > 0x7fffffffLL || gz > 65535 || l.gridY > 65535) fail("kernel " + k.id, "grid too large ({} x {} x {})", gx, l.gridY, gz);
  h3c::kernels::KernelArgs a = args;
  void *params[] = {&a};
  check(driver().cuLaunchKernel(k.fn, (unsigned)gx, (unsigned)l.gridY, (unsigned)gz, (unsigned)l.threads, 1, 1,
                                (unsigned)l.smemBytes, stream, params, nullptr),
        "launching " + k.id);
}

void KernelRunner::launchBlocks(const LoadedKernel &k, const h3c::kernels::KernelArgs &args, unsigned blocks,
                                CUstream stream) {
  h3c::kernels::KernelArgs a = args;
  void *params[] = {&a};
  check(driver().cuLaunchKernel(k.fn, blocks, 1, 1, (unsigned)k.launch.threads, 1, 1, (unsigned)k.launch.smemBytes,
                                stream, params, nullptr),
        "launching " + k.id);
}

} // namespace h3c::runtime::cuda
