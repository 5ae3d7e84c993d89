// NVRTC compilation with a content-keyed, self-checking disk cache (see nvrtc_jit.h).
#include "h3c/runtime/cuda/nvrtc_jit.h"

#include "h3c/runtime/cuda/nvrtc_api.h"
#include "h3c/support/files.h"
#include "h3c/support/sha256.h"

#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>

namespace h3c::runtime::cuda {
namespace {

constexpr const char *kMagic = "h3c-cubin-v1\n";

void check(const NvrtcApi &api, nvrtcResult r, const std::string &where, const char *what) {
  if (r != NVRTC_SUCCESS) fail(where, "{}: {}", what, api.nvrtcGetErrorString(r));
}

// Reads a cache entry; returns false (and sets `corrupt`) when the file exists but does not verify.
bool readEntry(const std::filesystem::path &p, std::string &cubin, bool &corrupt) {
  corrupt = false;
  std::error_code ec;
  if (!std::filesystem::exists(p, ec)) return false;
  std::string bytes;
  try {
    bytes = readFile(p);
  } catch (const std::exception &) {
    corrupt = true;
    return false;
  }
  size_t m = std::string(kMagic).size();
  if (bytes.size() < m + 65 || bytes.compare(0, m, kMagic) != 0 || bytes[m + 64] != '\n') {
    corrupt = true;
    return false;
  }
  std::string stored = bytes.substr(m, 64);
  std::string body = bytes.substr(m + 65);
  if (body.empty() || sha256Hex(body) != stored) {
    corrupt = true;
    return false;
  }
  cubin = std::move(body);
  return true;
}

} // namespace

NvrtcJit::NvrtcJit(std::filesystem::path cacheDir) : dir_(std::move(cacheDir)) {
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec) fail(dir_.string(), "cannot create the kernel cache folder: {}", ec.message());
  }
}

std::string NvrtcJit::nvrtcVersion() {
  const NvrtcApi &api = nvrtc();
  int major = 0, minor = 0;
  check(api, api.nvrtcVersion(&major, &minor), "nvrtc", "nvrtcVersion");
  return std::to_string(major) + "." + std::to_string(minor);
}

std::string NvrtcJit::cacheKey(const h3c::plan::Kernel &k) {
  Sha256 h;
  auto field = [&](const std::string &s) {
    h.update(std::to_string(s.size()) + ":");
    h.update(s);
  };
  field(k.source);
  for (const auto &o : k.nvrtcOptions) field(o);
  field(k.arch);
  field(nvrtcVersion());
  field(h3c::plan::kPlanSchema);
  return h.hexDigest();
}

std::filesystem::path NvrtcJit::defaultCacheDir() {
  if (const char *e = std::getenv("H3C_KERNEL_CACHE"); e && *e) return e;
  if (const char *x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::filesystem::path(x) / "h3c" / "kernels";
  if (const char *home = std::getenv("HOME"); home && *home)
    return std::filesystem::path(home) / ".cache" / "h3c" / "kernels";
  return std::filesystem::temp_directory_path() / "h3c-kernels";
}

CompiledKernel NvrtcJit::compile(const h3c::plan::Kernel &k) {
  const std::string want = "--gpu-architecture=" + k.arch;
  bool targeted = false;
  for (const auto &o : k.nvrtcOptions) targeted |= o == want;
  if (!targeted) fail("kernel " + k.id, "its NVRTC options do not target its arch {}", k.arch);
  CompiledKernel out;
  out.id = k.id;
  out.entry = k.entry;
  out.arch = k.arch;
  out.key = cacheKey(k);
  std::filesystem::path entry;
  if (!dir_.empty()) {
    entry = dir_ / (out.key + ".cubin");
    bool corrupt = false;
    if (readEntry(entry, out.cubin, corrupt)) {
      out.fromCache = true;
      count(&JitStats::cacheHits);
      return out;
    }
    if (corrupt) {
      out.rebuiltCorrupt = true;
      count(&JitStats::corruptRebuilt);
      std::error_code ec;
      std::filesystem::remove(entry, ec);
    }
  }

  const NvrtcApi &api = nvrtc();
  nvrtcProgram prog;
  std::string name = k.id + ".cu";
  check(api, api.nvrtcCreateProgram(&prog, k.source.c_str(), name.c_str(), 0, nullptr, nullptr), "kernel " + k.id,
        "nvrtcCreateProgram");
  auto destroy = [&api](nvrtcProgram *p) { api.nvrtcDestroyProgram(p); };
  std::unique_ptr<nvrtcProgram, decltype(destroy)> guard(&prog, destroy);
  std::vector<const char *> copts;
  for (const auto &o : k.nvrtcOptions) copts.push_back(o.c_str());
  nvrtcResult r = api.nvrtcCompileProgram(prog, (int)copts.size(), copts.data());
  size_t logSize = 0;
  api.nvrtcGetProgramLogSize(prog, &logSize);
  std::string log(logSize, '\0');
  if (logSize) api.nvrtcGetProgramLog(prog, log.data());
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  if (r != NVRTC_SUCCESS) throw CompileError(k.id, std::string(api.nvrtcGetErrorString(r)) + "\n" + log);
  // Kernel qualification: ptxas serializes wgmma when it cannot keep the accumulators in flight (warnings C7510/
  // C7511, "wgmma.mma_async instructions are serialized"); such a kernel computes the right bits at a fraction of
  // its speed, which a plan that promised the Hopper kernel must not silently accept.
  if (log.find("instructions are serialized") != std::string::npos)
    throw CompileError(k.id, "refused: ptxas serialized its wgmma instructions (kernel not qualified)\n" + log);
  out.log = log;
  size_t size = 0;
  check(api, api.nvrtcGetCUBINSize(prog, &size), "kernel " + k.id, "nvrtcGetCUBINSize");
  if (size == 0) fail("kernel " + k.id, "NVRTC produced an empty cubin");
  out.cubin.assign(size, '\0');
  check(api, api.nvrtcGetCUBIN(prog, out.cubin.data()), "kernel " + k.id, "nvrtcGetCUBIN");
  count(&JitStats::compiled);

  if (!entry.empty()) {
    AtomicFileWriter w(entry);
    w.write(std::string(kMagic));
    w.write(sha256Hex(out.cubin) + "\n");
    w.write(out.cubin);
    w.commit();
  }
  return out;
}

void NvrtcJit::count(int JitStats::*field) {
  std::lock_guard<std::mutex> g(statsMutex_);
  ++(stats_.*field);
}

} // namespace h3c::runtime::cuda
