// One entry point of a dlopen'ed library (the CUDA driver, cuBLASLt, the bench's NVML): `fn` set from dlsym,
// `missing` names the symbol when the library lacks it (the loaders chain these with && and report the first one
// missing).
#pragma once

#include <dlfcn.h>

#include <string>

namespace h3c::runtime::cuda {

template <typename F> bool dlSymbol(void *lib, F &fn, const char *name, std::string &missing) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!fn) missing = name;
  return fn != nullptr;
}

} // namespace h3c::runtime::cuda
