// dlopen-based CUDA driver loader (see driver.h).
#include "h3c/runtime/cuda/driver.h"

#include "h3c/runtime/cuda/dl_symbol.h"

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
    std::string w;  // the first entry point libcuda.so.1 lacks
    // Versioned entry points: the _v2 symbols are the 64-bit ABI every current driver exports.
    bool ok = dlSymbol(lib, a.cuInit, "cuInit", w) && dlSymbol(lib, a.cuDriverGetVersion, "cuDriverGetVersion", w) &&
              dlSymbol(lib, a.cuDeviceGetCount, "cuDeviceGetCount", w) && dlSymbol(lib, a.cuDeviceGet, "cuDeviceGet", w) &&
              dlSymbol(lib, a.cuDeviceGetName, "cuDeviceGetName", w) &&
              dlSymbol(lib, a.cuDeviceGetAttribute, "cuDeviceGetAttribute", w) &&
              dlSymbol(lib, a.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", w) &&
              dlSymbol(lib, a.cuCtxSetCurrent, "cuCtxSetCurrent", w) && dlSymbol(lib, a.cuCtxSynchronize, "cuCtxSynchronize", w) &&
              dlSymbol(lib, a.cuModuleLoadData, "cuModuleLoadData", w) && dlSymbol(lib, a.cuModuleUnload, "cuModuleUnload", w) &&
              dlSymbol(lib, a.cuModuleGetFunction, "cuModuleGetFunction", w) &&
              dlSymbol(lib, a.cuFuncSetAttribute, "cuFuncSetAttribute", w) && dlSymbol(lib, a.cuLaunchKernel, "cuLaunchKernel", w) &&
              dlSymbol(lib, a.cuMemAlloc, "cuMemAlloc_v2", w) && dlSymbol(lib, a.cuMemFree, "cuMemFree_v2", w) &&
              dlSymbol(lib, a.cuMemcpyHtoD, "cuMemcpyHtoD_v2", w) && dlSymbol(lib, a.cuMemcpyDtoH, "cuMemcpyDtoH_v2", w) &&
              dlSymbol(lib, a.cuMemcpyDtoD, "cuMemcpyDtoD_v2", w) &&
              dlSymbol(lib, a.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", w) &&
              dlSymbol(lib, a.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", w) &&
              dlSymbol(lib, a.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", w) &&
              dlSymbol(lib, a.cuStreamSynchronize, "cuStreamSynchronize", w) && dlSymbol(lib, a.cuMemsetD8, "cuMemsetD8_v2", w) &&
              dlSymbol(lib, a.cuMemGetInfo, "cuMemGetInfo_v2", w) && dlSymbol(lib, a.cuEventCreate, "cuEventCreate", w) &&
              dlSymbol(lib, a.cuEventDestroy, "cuEventDestroy_v2", w) && dlSymbol(lib, a.cuEventRecord, "cuEventRecord", w) &&
              dlSymbol(lib, a.cuEventSynchronize, "cuEventSynchronize", w) &&
              dlSymbol(lib, a.cuEventElapsedTime, "cuEventElapsedTime", w) &&
              dlSymbol(lib, a.cuGetErrorString, "cuGetErrorString", w) &&
              dlSymbol(lib, a.cuLaunchKernelEx, "cuLaunchKernelEx", w) &&
              dlSymbol(lib, a.cuOccupancyMaxActiveClusters, "cuOccupancyMaxActiveClusters", w) &&
              dlSymbol(lib, a.cuMemHostAlloc, "cuMemHostAlloc", w) && dlSymbol(lib, a.cuMemFreeHost, "cuMemFreeHost", w) &&
              dlSymbol(lib, a.cuStreamCreate, "cuStreamCreate", w) && dlSymbol(lib, a.cuStreamDestroy, "cuStreamDestroy_v2", w) &&
              dlSymbol(lib, a.cuStreamWaitEvent, "cuStreamWaitEvent", w) &&
              dlSymbol(lib, a.cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled", w);
    if (!ok) {
      L.why = "libcuda.so.1 lacks " + w;
      return;
    }
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
