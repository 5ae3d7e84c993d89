// dlopen-based CUDA driver loader (see driver.h).
#include "h3c/runtime/cuda/driver.h"

#include "h3c/support/error.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

namespace h3c::runtime::cuda {
namespace {

struct Loaded {
  DriverApi api{};
  bool ok = false;
  std::string why;
};

template <typename F> bool sym(void *lib, F &fn, const char *name, std::string &why) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!fn) why = std::string("libcuda.so.1 lacks ") + name;
  return fn != nullptr;
}

Loaded &loaded() {
  static Loaded L;
  static std::once_flag once;
  std::call_once(once, [] {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char *e = dlerror();
      L.why = std::string("cannot open libcuda.so.1 (no NVIDIA driver?): ") + (e ? e : "");
      return;
    }
    DriverApi &a = L.api;
    std::string &w = L.why;
    // Versioned entry points: the _v2 symbols are the 64-bit ABI every current driver exports.
    bool ok = sym(lib, a.cuInit, "cuInit", w) && sym(lib, a.cuDriverGetVersion, "cuDriverGetVersion", w) &&
              sym(lib, a.cuDeviceGetCount, "cuDeviceGetCount", w) && sym(lib, a.cuDeviceGet, "cuDeviceGet", w) &&
              sym(lib, a.cuDeviceGetName, "cuDeviceGetName", w) &&
              sym(lib, a.cuDeviceGetAttribute, "cuDeviceGetAttribute", w) &&
              sym(lib, a.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", w) &&
              sym(lib, a.cuCtxSetCurrent, "cuCtxSetCurrent", w) && sym(lib, a.cuCtxSynchronize, "cuCtxSynchronize", w) &&
              sym(lib, a.cuModuleLoadData, "cuModuleLoadData", w) && sym(lib, a.cuModuleUnload, "cuModuleUnload", w) &&
              sym(lib, a.cuModuleGetFunction, "cuModuleGetFunction", w) &&
              sym(lib, a.cuFuncSetAttribute, "cuFuncSetAttribute", w) && sym(lib, a.cuLaunchKernel, "cuLaunchKernel", w) &&
              sym(lib, a.cuMemAlloc, "cuMemAlloc_v2", w) && sym(lib, a.cuMemFree, "cuMemFree_v2", w) &&
              sym(lib, a.cuMemcpyHtoD, "cuMemcpyHtoD_v2", w) && sym(lib, a.cuMemcpyDtoH, "cuMemcpyDtoH_v2", w) &&
              sym(lib, a.cuMemcpyDtoD, "cuMemcpyDtoD_v2", w) &&
              sym(lib, a.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", w) &&
              sym(lib, a.cuStreamSynchronize, "cuStreamSynchronize", w) && sym(lib, a.cuMemsetD8, "cuMemsetD8_v2", w) &&
              sym(lib, a.cuMemGetInfo, "cuMemGetInfo_v2", w) && sym(lib, a.cuEventCreate, "cuEventCreate", w) &&
              sym(lib, a.cuEventDestroy, "cuEventDestroy_v2", w) && sym(lib, a.cuEventRecord, "cuEventRecord", w) &&
              sym(lib, a.cuEventSynchronize, "cuEventSynchronize", w) &&
              sym(lib, a.cuEventElapsedTime, "cuEventElapsedTime", w) &&
              sym(lib, a.cuGetErrorString, "cuGetErrorString", w) &&
              sym(lib, a.cuLaunchKernelEx, "cuLaunchKernelEx", w) &&
              sym(lib, a.cuOccupancyMaxActiveClusters, "cuOccupancyMaxActiveClusters", w) &&
              sym(lib, a.cuMemHostAlloc, "cuMemHostAlloc", w) && sym(lib, a.cuMemFreeHost, "cuMemFreeHost", w) &&
              sym(lib, a.cuStreamCreate, "cuStreamCreate", w) && sym(lib, a.cuStreamDestroy, "cuStreamDestroy_v2", w) &&
              sym(lib, a.cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled", w);
    if (!ok) return;
    CUresult r = a.cuInit(0);
    if (r != CUDA_SUCCESS) {
      L.why = "cuInit failed (error " + std::to_string((int)r) + ")";
      return;
    }
    int n = 0;
    if (a.cuDeviceGetCount(&n) != CUDA_SUCCESS || n == 0) {
      L.why = "no CUDA device";
      return;
    }
    L.ok = true;
  });
  return L;
}

} // namespace

bool driverAvailable(std::string *why) {
  Loaded &L = loaded();
  if (!L.ok && why) *why = L.why;
  return L.ok;
}

const DriverApi &driver() {
  Loaded &L = loaded();
  if (!L.ok) fail("cuda", "{}", L.why);
  return L.api;
}

void check(CUresult r, const std::string &what) {
  if (r == CUDA_SUCCESS) return;
  const char *msg = nullptr;
  if (driverAvailable()) loaded().api.cuGetErrorString(r, &msg);
  fail("cuda", "{}: {} (error {})", what, msg ? msg : "unknown error", (int)r);
}

std::string Device::arch() const {
  if (ccMajor == 9) return "sm_90a";
  if (ccMajor == 10) return "sm_100a";
  fail("cuda", "device {} has compute capability {}.{}: h3c's kernels target sm_90a (H100/H200) and sm_100a (B200)",
       name, ccMajor, ccMinor);
}

const Device &device() {
  static Device d;
  static std::once_flag once;
  std::call_once(once, [] {
    const DriverApi &a = driver();
    int ordinal = 0;
    if (const char *e = std::getenv("H3C_CUDA_DEVICE"); e && *e) ordinal = std::atoi(e);
    check(a.cuDeviceGet(&d.dev, ordinal), "cuDeviceGet");
    char name[256] = {0};
    check(a.cuDeviceGetName(name, sizeof name, d.dev), "cuDeviceGetName");
    d.name = name;
    check(a.cuDeviceGetAttribute(&d.ccMajor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d.dev), "attribute");
    check(a.cuDeviceGetAttribute(&d.ccMinor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d.dev), "attribute");
    check(a.cuDeviceGetAttribute(&d.smCount, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d.dev), "attribute");
    check(a.cuDriverGetVersion(&d.driverVersion), "cuDriverGetVersion");
    check(a.cuDevicePrimaryCtxRetain(&d.ctx, d.dev), "cuDevicePrimaryCtxRetain");
  });
  check(driver().cuCtxSetCurrent(d.ctx), "cuCtxSetCurrent");
  return d;
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  device();
  if (bytes) check(driver().cuMemAlloc(&ptr_, bytes), "cuMemAlloc of " + std::to_string(bytes) + " bytes");
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) driver().cuMemFree(ptr_);
}

DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&o) noexcept {
  if (this != &o) {
    if (ptr_) driver().cuMemFree(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = 0;
    o.bytes_ = 0;
  }
  return *this;
}

void DeviceBuffer::upload(const void *src, size_t n, size_t offset) {
  if (offset + n > bytes_) fail("cuda", "upload of {} bytes at {} overflows a {}-byte buffer", n, offset, bytes_);
  if (n) check(driver().cuMemcpyHtoD(ptr_ + offset, src, n), "cuMemcpyHtoD");
}

void DeviceBuffer::download(void *dst, size_t n, size_t offset) const {
  if (offset + n > bytes_) fail("cuda", "download of {} bytes at {} overflows a {}-byte buffer", n, offset, bytes_);
  if (n) check(driver().cuMemcpyDtoH(dst, ptr_ + offset, n), "cuMemcpyDtoH");
}

} // namespace h3c::runtime::cuda
