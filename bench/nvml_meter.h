// The board's energy counter and SM clock through NVML, opened with dlopen (libnvidia-ml ships with the driver; the
// toolkit has no header for it here, so the few entry points are declared below with NVML's documented types).
// Why: the full forward runs at the H200's 700 W cap (bench/NOTES.md, 2026-12-04), so a kernel's time alone does not
// say what it costs the ops around it; its energy per launch does. Bench-only: the runtime never reads NVML.
#pragma once

#include "h3c/runtime/cuda/dl_symbol.h"

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

namespace h3c::bench {

class NvmlMeter {
public:
  NvmlMeter() {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib_) {
      why_ = dlerror();
      return;
    }
    using h3c::runtime::cuda::dlSymbol;
    std::string missing;
    if (!(dlSymbol(lib_, init_, "nvmlInit_v2", missing) &&
          dlSymbol(lib_, handle_, "nvmlDeviceGetHandleByIndex_v2", missing) &&
          dlSymbol(lib_, energy_, "nvmlDeviceGetTotalEnergyConsumption", missing) &&
          dlSymbol(lib_, clock_, "nvmlDeviceGetClockInfo", missing))) {
      why_ = "libnvidia-ml.so.1 lacks " + missing;
      return;
    }
    if (init_() != 0 || handle_(0, &dev_) != 0) {
      why_ = "nvmlInit or the handle of device 0 failed";
      return;
    }
    unsigned long long e = 0;
    ok_ = energy_(dev_, &e) == 0;
    if (!ok_) why_ = "the board does not report its energy counter";
  }
  bool ok() const { return ok_; }
  const std::string &why() const { return why_; }
  // Millijoules since the driver loaded.
  unsigned long long millijoules() const {
    unsigned long long e = 0;
    energy_(dev_, &e);
    return e;
  }
  unsigned smMhz() const {
    unsigned m = 0;
    clock_(dev_, /*NVML_CLOCK_SM*/ 1, &m);
    return m;
  }

  // Samples the SM clock every 5 ms on a thread between start() and stop(); stop() returns the mean in MHz.
  void start() {
    sum_ = 0;
    n_ = 0;
    run_ = true;
    sampler_ = std::thread([this] {
      while (run_) {
        sum_ += smMhz();
        ++n_;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
  }
  double stop() {
    run_ = false;
    if (sampler_.joinable()) sampler_.join();
    return n_ ? double(sum_) / double(n_) : 0.0;
  }
  ~NvmlMeter() { stop(); }

private:
  void *lib_ = nullptr, *dev_ = nullptr;
  int (*init_)() = nullptr;
  int (*handle_)(unsigned, void **) = nullptr;
  int (*energy_)(void *, unsigned long long *) = nullptr;
  int (*clock_)(void *, int, unsigned *) = nullptr;
  bool ok_ = false;
  std::string why_;
  std::thread sampler_;
  std::atomic<bool> run_{false};
  std::atomic<unsigned long long> sum_{0}, n_{0};
};

} // namespace h3c::bench
