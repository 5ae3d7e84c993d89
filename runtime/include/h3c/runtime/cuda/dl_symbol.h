// The pieces of the dlopen'ed libraries' loaders (the CUDA driver, NVRTC, cuBLASLt, the bench's NVML): one entry point
// set from dlsym, and the first of several library names that opens and is accepted.
#pragma once

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace h3c::runtime::cuda {

// `fn` set from dlsym; `missing` names the symbol when the library lacks it (the loaders chain these with && and
// report the first one missing).
template <typename F> bool dlSymbol(void *lib, F &fn, const char *name, std::string &missing) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!fn) missing = name;
  return fn != nullptr;
}

// Opens the first of `names` (sonames or paths) that dlopen loads and `accept(lib, reason)` takes (it resolves the
// entry points and checks the version; a library it refuses, with `reason`, is closed again). Returns the library,
// open for the rest of the process, or nullptr with `why` naming every name tried and why each failed.
inline void *dlOpenFirst(const std::vector<std::string> &names,
                         const std::function<bool(void *lib, std::string &reason)> &accept, std::string &why) {
  why.clear();
  for (const auto &name : names) {
    void *lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char *e = dlerror();  // names the file already
      why += (why.empty() ? "" : "; ") + (e ? std::string(e) : name + ": cannot be opened");
      continue;
    }
    std::string reason;
    if (accept(lib, reason)) return lib;
    why += (why.empty() ? "" : "; ") + name + ": " + reason;
    dlclose(lib);
  }
  if (names.empty()) why = "no library name to try";
  return nullptr;
}

// The names a toolkit library is tried by: $<envVar> alone when set (a path or a soname); otherwise `soname` through
// the loader's path, the same file in the library folder of the toolkit h3c was built with (for machines whose loader
// path lacks it), then `fallbacks`.
inline std::vector<std::string> toolkitLibraryCandidates(const char *envVar, const std::string &soname,
                                                         const std::vector<std::string> &fallbacks = {}) {
  if (const char *e = std::getenv(envVar); e && *e) return {e};
  std::vector<std::string> names = {soname};
#ifdef H3C_CUDA_INCLUDE_DIR
  names.push_back((std::filesystem::path(H3C_CUDA_INCLUDE_DIR).parent_path() / "lib64" / soname).string());
#endif
  names.insert(names.end(), fallbacks.begin(), fallbacks.end());
  return names;
}

} // namespace h3c::runtime::cuda
