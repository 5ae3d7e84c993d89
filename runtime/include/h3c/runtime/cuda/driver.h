// The CUDA driver API, opened at run time with dlopen("libcuda.so.1"): h3c binaries never link the driver, so they
// start (and the CPU paths run) on machines without a GPU. <cuda.h> is used for types only.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <string>

namespace h3c::runtime::cuda {

struct DriverApi {
  CUresult (*cuInit)(unsigned int);
  CUresult (*cuDriverGetVersion)(int *);
  CUresult (*cuDeviceGetCount)(int *);
  CUresult (*cuDeviceGet)(CUdevice *, int);
  CUresult (*cuDeviceGetName)(char *, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuModuleLoadData)(CUmodule *, const void *);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*cuFuncSetAttribute)(CUfunction, CUfunction_attribute, int);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
  CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*cuMemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
  // Stream-ordered forms: a forward of the resident engine runs on the caller's stream (engine.h, DeviceIO).
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
  CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);  // the Python package's request read-back
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);  // hot updates from CUDA tensors
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*cuMemGetInfo)(size_t *, size_t *);
  CUresult (*cuEventCreate)(CUevent *, unsigned int);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent);
  CUresult (*cuGetErrorString)(CUresult, const char **);
  // Launches with attributes (thread-block clusters, programmatic dependent launch).
  CUresult (*cuLaunchKernelEx)(const CUlaunchConfig *, CUfunction, void **, void **);
  // How many clusters of a kernel fit on the device at once (a persistent cluster grid is capped at it).
  CUresult (*cuOccupancyMaxActiveClusters)(int *, CUfunction, const CUlaunchConfig *);
  // TMA descriptors (docs/contract.md section 5: the plan's tensor-map parameters, encoded on the host).
  // The checkpoint load (weight_upload.h): pinned host staging buffers, copied on per-worker streams.
  CUresult (*cuMemHostAlloc)(void **, size_t, unsigned int);
  CUresult (*cuMemFreeHost)(void *);
  CUresult (*cuStreamCreate)(CUstream *, unsigned int);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned int);  // a backward writing into the caller's memory
  CUresult (*cuTensorMapEncodeTiled)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                     const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                     CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
};

// The driver, loaded and initialized once. Throws h3c::Error ("cuda: ...") when it cannot be opened or has no
// device; driverAvailable() asks without throwing (for skips).
const DriverApi &driver();
bool driverAvailable(std::string *why = nullptr);

// Throws h3c::Error "cuda: <what>: <driver message>" unless r is CUDA_SUCCESS.
void check(CUresult r, const std::string &what);

// The current device (ordinal 0, or $H3C_CUDA_DEVICE) with its primary context made current.
struct Device {
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  int ccMajor = 0, ccMinor = 0, smCount = 0;
  std::string name;
  int driverVersion = 0;
  std::string arch() const;  // "sm_90a" for 9.x, "sm_100a" for 10.x; throws for others
};
const Device &device();

// A device allocation (RAII).
class DeviceBuffer {
public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer &&o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = 0; o.bytes_ = 0; }
  DeviceBuffer &operator=(DeviceBuffer &&o) noexcept;
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  CUdeviceptr get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  void upload(const void *src, size_t n, size_t offset = 0);
  void download(void *dst, size_t n, size_t offset = 0) const;

private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

} // namespace h3c::runtime::cuda
