// The NVRTC JIT: compiles a plan's kernel (h3c::plan::Kernel: its exact source text with the plan's NVRTC options)
// to a cubin, with an on-disk cache. No GPU or driver is needed to compile.
//
// Cache: one file per entry, <dir>/<key>.cubin, key = sha256(source, options, NVRTC version, plan schema).
// A file holds "h3c-cubin-v1\n" + sha256(cubin) + "\n" + cubin, written atomically (AtomicFileWriter); an entry whose
// stored hash does not match its bytes (truncated, corrupted) is reported, removed and rebuilt.
#pragma once

#include "h3c/plan/plan.h"
#include "h3c/support/error.h"

#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

namespace h3c::runtime::cuda {

// A compile failure: names the kernel and carries NVRTC's log.
class CompileError : public h3c::Error {
public:
  CompileError(const std::string &kernelId, const std::string &log)
      : h3c::Error("kernel " + kernelId, "NVRTC compilation failed:\n" + log), log_(log) {}
  const std::string &log() const { return log_; }

private:
  std::string log_;
};

struct CompiledKernel {
  std::string id, entry, arch;
  std::string cubin;        // the ELF image for cuModuleLoadData
  std::string key;          // the cache key (sha256 hex)
  std::string log;          // NVRTC's log (ptxas notes included); empty for cache hits
  bool fromCache = false;
  bool rebuiltCorrupt = false;  // a corrupt cache entry was found and replaced
};

struct JitStats {
  int compiled = 0, cacheHits = 0, corruptRebuilt = 0;
};

class NvrtcJit {
public:
  // cacheDir empty: no disk cache. The folder is created when missing.
  explicit NvrtcJit(std::filesystem::path cacheDir = {});
  // Compiles exactly k.source with k.nvrtcOptions. The options must target k.arch. Thread-safe: NVRTC programs are
  // independent objects and cache entries are published by atomic rename, so several kernels compile at once.
  CompiledKernel compile(const h3c::plan::Kernel &k);
  JitStats stats() const {
    std::lock_guard<std::mutex> g(statsMutex_);
    return stats_;
  }

  static std::string nvrtcVersion();                                   // "13.0"
  static std::string cacheKey(const h3c::plan::Kernel &k);
  // The cache folder named by $H3C_KERNEL_CACHE, else $XDG_CACHE_HOME/h3c/kernels, else ~/.cache/h3c/kernels.
  static std::filesystem::path defaultCacheDir();

private:
  std::filesystem::path dir_;
  mutable std::mutex statsMutex_;
  JitStats stats_;
  void count(int JitStats::*field);
};

} // namespace h3c::runtime::cuda
