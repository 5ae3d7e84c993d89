// KernelRunner: JIT + module load + launch from the plan's launch ABI (see kernel_runner.h).
#include "h3c/runtime/cuda/kernel_runner.h"

#include "h3c/support/error.h"
#include "h3c/support/parallel.h"

#include <array>
#include <cstring>

namespace h3c::runtime::cuda {

namespace plan = h3c::plan;

namespace {

// The launch configuration of a kernel with launch attributes (cuLaunchKernelEx, cuOccupancyMaxActiveClusters):
// its cluster dimensions when it has a cluster, and programmatic stream serialization when the plan says the kernel
// waits for its producers itself (plan::Launch::gridDependency). `attrs` holds the attributes the configuration
// points at.
CUlaunchConfig exLaunch(const plan::Launch &l, std::array<unsigned, 3> grid, CUstream stream,
                        std::array<CUlaunchAttribute, 2> &attrs) {
  CUlaunchConfig cfg{};
  cfg.gridDimX = grid[0];
  cfg.gridDimY = grid[1];
  cfg.gridDimZ = grid[2];
  cfg.blockDimX = unsigned(l.block[0]);
  cfg.blockDimY = unsigned(l.block[1]);
  cfg.blockDimZ = unsigned(l.block[2]);
  cfg.sharedMemBytes = unsigned(l.smemBytes);
  cfg.hStream = stream;
  attrs = {};
  unsigned n = 0;
  if (l.cluster[0] * l.cluster[1] * l.cluster[2] > 1) {
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attrs[n].value.clusterDim.x = unsigned(l.cluster[0]);
    attrs[n].value.clusterDim.y = unsigned(l.cluster[1]);
    attrs[n].value.clusterDim.z = unsigned(l.cluster[2]);
    ++n;
  }
  if (l.gridDependency) {
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attrs[n].value.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cfg.attrs = attrs.data();
  cfg.numAttrs = n;
  return cfg;
}

} // namespace

KernelRunner::KernelRunner(std::filesystem::path cacheDir) : jit_(std::move(cacheDir)), arch_(device().arch()) {}

KernelRunner::~KernelRunner() {
  for (auto &kv : loaded_)
    if (kv.second->module) driver().cuModuleUnload(kv.second->module);
}

const LoadedKernel &KernelRunner::load(const plan::Kernel &k) { return install(k, nullptr); }

const LoadedKernel &KernelRunner::install(const plan::Kernel &k, CompiledKernel *compiled) {
  auto it = loaded_.find(k.id);
  if (it != loaded_.end()) {
    if (it->second->spec->sha256 != k.sha256) fail("kernel " + k.id, "two different sources share this id");
    return *it->second;
  }
  checkArch(k);
  CompiledKernel c = compiled ? std::move(*compiled) : jit_.compile(k);
  auto lk = std::make_unique<LoadedKernel>();
  lk->spec = &k;
  lk->cubinKey = c.key;
  lk->fromCache = c.fromCache;
  const DriverApi &d = driver();
  device();
  check(d.cuModuleLoadData(&lk->module, c.cubin.data()), "cuModuleLoadData(" + k.id + ")");
  check(d.cuModuleGetFunction(&lk->fn, lk->module, k.entry.c_str()), "cuModuleGetFunction(" + k.entry + ")");
  if (k.launch.smemBytes > 48 * 1024)
    check(d.cuFuncSetAttribute(lk->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(k.launch.smemBytes)),
          "raising the shared-memory limit of " + k.id);
  // A launch with a cluster (the entry's or a phase's): how many of its clusters run at once (0: no cluster).
  auto activeClusters = [&](CUfunction f, const plan::Launch &l, const std::string &entry) {
    if (l.cluster[0] * l.cluster[1] * l.cluster[2] == 1) return 0;
    std::array<CUlaunchAttribute, 2> attrs{};
    const CUlaunchConfig cfg =
        exLaunch(l, {unsigned(l.cluster[0]), unsigned(l.cluster[1]), unsigned(l.cluster[2])}, nullptr, attrs);
    int n = 0;
    check(d.cuOccupancyMaxActiveClusters(&n, f, &cfg), "cuOccupancyMaxActiveClusters(" + entry + ")");
    if (n < 1)
      fail("kernel " + k.id, "no cluster of {} x {} x {} CTAs of {} fits on this device", l.cluster[0], l.cluster[1],
           l.cluster[2], entry);
    return n;
  };
  for (const plan::KernelPhase &ph : k.phases) {
    CUfunction f = nullptr;
    check(d.cuModuleGetFunction(&f, lk->module, ph.entry.c_str()), "cuModuleGetFunction(" + ph.entry + ")");
    if (ph.launch.smemBytes > 48 * 1024)
      check(d.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(ph.launch.smemBytes)),
            "raising the shared-memory limit of " + ph.entry);
    lk->phaseFns.push_back(f);
    lk->phaseMaxActiveClusters.push_back(activeClusters(f, ph.launch, ph.entry));
  }
  lk->maxActiveClusters = activeClusters(lk->fn, k.launch, k.entry);
  auto &ref = *lk;
  loaded_.emplace(k.id, std::move(lk));
  return ref;
}

void KernelRunner::checkArch(const plan::Kernel &k) const {
  if (k.arch != arch_)
    fail("kernel " + k.id, "was compiled into the plan for {}, this device is {}: recompile the plan with --arch {}",
         k.arch, arch_, arch_);
}

void KernelRunner::loadAll(const std::vector<const plan::Kernel *> &kernels, unsigned threads) {
  // The distinct kernels still to compile, in list order.
  std::vector<const plan::Kernel *> todo;
  std::map<std::string, size_t> seen;
  for (const plan::Kernel *k : kernels) {
    if (loaded_.count(k->id) || seen.count(k->id)) continue;
    checkArch(*k);
    seen.emplace(k->id, todo.size());
    todo.push_back(k);
  }
  std::vector<CompiledKernel> done(todo.size());
  // The first kernel (in plan order) that fails to compile is the error, whatever the thread timing (threads 0:
  // the cores).
  parallelForEach(todo.size(), threads, [&](size_t i) { done[i] = jit_.compile(*todo[i]); });
  for (size_t i = 0; i < todo.size(); ++i) install(*todo[i], &done[i]);
}

std::array<unsigned, 3> KernelRunner::grid(const plan::Kernel &k, const plan::Launch &l, const plan::Extents &e) const {
  std::array<unsigned, 3> g{};
  for (int i = 0; i < 3; ++i) {
    const plan::GridDim &d = l.grid[size_t(i)];
    int64_t v = d.extent.eval(e);
    if (v < 0) fail("kernel " + k.id, "grid dimension {} is negative ({})", i, v);
    v = (v + d.div - 1) / d.div;
    if (d.maxPerSm > 0) v = std::min<int64_t>(v, d.maxPerSm * device().smCount);
    // Whole clusters: up to the next multiple of the cluster's extent, or down where that passes the SM cap (a
    // persistent kernel's extra CTAs find no work; the cluster kernels walk tiles per cluster).
    const int64_t c = l.cluster[size_t(i)];
    if (c > 1) {
      v = (v + c - 1) / c * c;
      if (d.maxPerSm > 0) {
        // The loaded kernel's count for this launch (the entry's, or the phase whose launch `l` is).
        int active = 0;
        auto it = loaded_.find(k.id);
        if (it != loaded_.end()) {
          active = &l == &k.launch ? it->second->maxActiveClusters : 0;
          for (size_t p = 0; p < k.phases.size() && p < it->second->phaseMaxActiveClusters.size(); ++p)
            if (&l == &k.phases[p].launch) active = it->second->phaseMaxActiveClusters[p];
        }
        const int64_t fit = active > 0 ? int64_t(active) * c : d.maxPerSm * device().smCount / c * c;
        v = std::min(v, fit);
      }
    }
    if (v > (i == 0 ? 0x7fffffffLL : 65535LL)) fail("kernel " + k.id, "grid dimension {} too large ({})", i, v);
    g[size_t(i)] = unsigned(v);
  }
  return g;
}

namespace {

CUtensorMapSwizzle swizzleOf(const std::string &s) {
  if (s == "32B") return CU_TENSOR_MAP_SWIZZLE_32B;
  if (s == "64B") return CU_TENSOR_MAP_SWIZZLE_64B;
  if (s == "128B") return CU_TENSOR_MAP_SWIZZLE_128B;
  return CU_TENSOR_MAP_SWIZZLE_NONE;
}

CUtensorMapL2promotion promotionOf(const std::string &s) {
  if (s == "64B") return CU_TENSOR_MAP_L2_PROMOTION_L2_64B;
  if (s == "128B") return CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
  if (s == "256B") return CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  return CU_TENSOR_MAP_L2_PROMOTION_NONE;
}

} // namespace

void KernelRunner::launch(const LoadedKernel &lk, const plan::Extents &e, const OperandAddress &address,
                          CUstream stream) {
  const plan::Kernel &k = *lk.spec;
  const std::array<unsigned, 3> g = grid(k, e);
  // The scratch parameters' regions, back to back at 256-byte alignment.
  std::vector<size_t> scratchAt(k.params.size(), 0);
  size_t scratchBytes = 0;
  for (size_t i = 0; i < k.params.size(); ++i)
    if (k.params[i].kind == plan::KernelParam::Kind::Scratch) {
      const int64_t b = k.params[i].value.eval(e);
      if (b < 0) fail("kernel " + k.id, "scratch '{}' of {} bytes", k.params[i].name, b);
      scratchAt[i] = scratchBytes;
      scratchBytes += (size_t(b) + 255) / 256 * 256;
    }
  if (scratchBytes > scratch_.bytes()) {
    check(driver().cuStreamSynchronize(stream), "growing the scratch buffer for " + k.id);  // no kernel still reads it
    scratch_ = DeviceBuffer();
    scratch_ = DeviceBuffer(scratchBytes);
  }
  // The scratch region a tensor map describes, which must hold every byte the map addresses at this request.
  auto scratchPtr = [&](const plan::KernelParam &m) -> CUdeviceptr {
    for (size_t j = 0; j < k.params.size(); ++j) {
      const plan::KernelParam &s = k.params[j];
      if (s.kind != plan::KernelParam::Kind::Scratch || s.name != m.scratch) continue;
      const int64_t last = m.map.spanBytes(e);
      if (last > s.value.eval(e))
        fail("kernel " + k.id, "tensor map '{}' addresses {} bytes of scratch '{}', which holds {}", m.name, last,
             s.name, s.value.eval(e));
      return scratch_.get() + scratchAt[j];
    }
    fail("kernel " + k.id, "tensor map '{}' is over scratch '{}', which the kernel has no parameter of", m.name,
         m.scratch);
  };
  // Argument storage: every parameter gets its own slot; params[] points at them in signature order.
  struct Slot {
    alignas(64) unsigned char bytes[128];
  };
  std::vector<Slot> storage(k.params.size());
  std::vector<void *> params(k.params.size());
  for (size_t i = 0; i < k.params.size(); ++i) {
    const plan::KernelParam &p = k.params[i];
    params[i] = storage[i].bytes;
    if (p.kind == plan::KernelParam::Kind::Buffer) {
      CUdeviceptr ptr = address(p.role, p.index);
      std::memcpy(storage[i].bytes, &ptr, sizeof ptr);
    } else if (p.kind == plan::KernelParam::Kind::Scalar) {
      long long v = p.value.eval(e);
      std::memcpy(storage[i].bytes, &v, sizeof v);
    } else if (p.kind == plan::KernelParam::Kind::Scratch) {
      CUdeviceptr ptr = scratch_.get() + scratchAt[i];
      std::memcpy(storage[i].bytes, &ptr, sizeof ptr);
    } else {
      // Over an operand, or over one of the kernel's scratch regions (plan::KernelParam::scratch).
      CUdeviceptr ptr = p.scratch.empty() ? address(p.role, p.index) : scratchPtr(p);
      const plan::TensorMapSpec &m = p.map;
      std::vector<cuuint64_t> dims, strides;
      std::vector<cuuint32_t> box, elemStrides;
      std::string key = k.id + "/" + p.name + "@" + std::to_string(ptr);
      for (const auto &d : m.dims) {
        dims.push_back(cuuint64_t(d.eval(e)));
        key += ":" + std::to_string(dims.back());
      }
      for (const auto &s : m.strides) strides.push_back(cuuint64_t(s.eval(e)));
      for (int64_t b : m.box) {
        box.push_back(cuuint32_t(b));
        elemStrides.push_back(1);
      }
      auto it = maps_.find(key);
      if (it == maps_.end()) {
        CUtensorMap map;
        CUtensorMapDataType dt = m.dtype == DType::F32 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
        check(driver().cuTensorMapEncodeTiled(&map, dt, cuuint32_t(dims.size()), reinterpret_cast<void *>(ptr),
                                              dims.data(), strides.data(), box.data(), elemStrides.data(),
                                              CU_TENSOR_MAP_INTERLEAVE_NONE, swizzleOf(m.swizzle),
                                              promotionOf(m.l2Promotion),
                                              m.oobZero ? CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE
                                                        : CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA),
              "encoding tensor map " + p.name + " of " + k.id);
        it = maps_.emplace(key, map).first;
      }
      static_assert(sizeof(CUtensorMap) == 128, "CUtensorMap is 128 bytes");
      std::memcpy(storage[i].bytes, &it->second, sizeof(CUtensorMap));
    }
  }
  auto launchOne = [&](CUfunction fn, const plan::Launch &l, std::array<unsigned, 3> grid, const std::string &entry) {
    if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0) return;
    if (l.cluster[0] * l.cluster[1] * l.cluster[2] == 1 && !l.gridDependency) {
      check(driver().cuLaunchKernel(fn, grid[0], grid[1], grid[2], unsigned(l.block[0]), unsigned(l.block[1]),
                                    unsigned(l.block[2]), unsigned(l.smemBytes), stream, params.data(), nullptr),
            "launching " + entry);
      return;
    }
    std::array<CUlaunchAttribute, 2> attrs{};
    const CUlaunchConfig cfg = exLaunch(l, grid, stream, attrs);
    check(driver().cuLaunchKernelEx(&cfg, fn, params.data(), nullptr), "launching " + entry);
  };
  launchOne(lk.fn, k.launch, g, k.id);
  if (lk.phaseFns.size() != k.phases.size()) fail("kernel " + k.id, "loaded without its phases");
  for (size_t i = 0; i < k.phases.size(); ++i)
    launchOne(lk.phaseFns[i], k.phases[i].launch, grid(k, k.phases[i].launch, e), k.phases[i].entry);
}

} // namespace h3c::runtime::cuda
