// dlopen-based cuBLASLt loader (see cublaslt.h).
#include "h3c/runtime/cuda/cublaslt.h"

#include "h3c/runtime/cuda/dl_symbol.h"

#include "h3c/support/error.h"

#include <mutex>

namespace h3c::runtime::cuda {
namespace {

bool resolveLt(void *lib, CublasLtApi &a, std::string &missing) {
  return dlSymbol(lib, a.cublasLtGetVersion, "cublasLtGetVersion", missing) &&
         dlSymbol(lib, a.cublasLtGetStatusString, "cublasLtGetStatusString", missing) &&
         dlSymbol(lib, a.cublasLtCreate, "cublasLtCreate", missing) && dlSymbol(lib, a.cublasLtDestroy, "cublasLtDestroy", missing) &&
         dlSymbol(lib, a.cublasLtMatmulDescCreate, "cublasLtMatmulDescCreate", missing) &&
         dlSymbol(lib, a.cublasLtMatmulDescDestroy, "cublasLtMatmulDescDestroy", missing) &&
         dlSymbol(lib, a.cublasLtMatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute", missing) &&
         dlSymbol(lib, a.cublasLtMatrixLayoutCreate, "cublasLtMatrixLayoutCreate", missing) &&
         dlSymbol(lib, a.cublasLtMatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy", missing) &&
         dlSymbol(lib, a.cublasLtMatrixLayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute", missing) &&
         dlSymbol(lib, a.cublasLtMatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate", missing) &&
         dlSymbol(lib, a.cublasLtMatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy", missing) &&
         dlSymbol(lib, a.cublasLtMatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute", missing) &&
         dlSymbol(lib, a.cublasLtMatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic", missing) &&
         dlSymbol(lib, a.cublasLtMatmul, "cublasLtMatmul", missing);
}

} // namespace

std::vector<std::string> cublasLtCandidates() {
  return toolkitLibraryCandidates("H3C_CUBLASLT_LIBRARY", "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR),
                                  {"libcublasLt.so"});
}

bool openCublasLt(const std::vector<std::string> &names, CublasLtApi &api, std::string &why) {
  CublasLtApi a{};
  void *lib = dlOpenFirst(names, [&](void *l, std::string &reason) {
    std::string missing;
    if (!resolveLt(l, a, missing)) {
      reason = "lacks " + missing;
      return false;
    }
    // The calls are made with the structs and enums of the headers h3c was built with: another major version (an
    // unversioned libcublasLt.so, or H3C_CUBLASLT_LIBRARY) is refused, not trusted.
    if (const size_t major = a.cublasLtGetVersion() / 10000; major != size_t(CUBLAS_VER_MAJOR)) {
      reason = "is cuBLASLt " + std::to_string(a.cublasLtGetVersion()) + ", h3c was built with major version " +
               std::to_string(CUBLAS_VER_MAJOR);
      return false;
    }
    return true;
  }, why);
  if (lib) api = a;
  return lib != nullptr;
}

const CublasLtApi *cublasLt(std::string *why) {
  static CublasLtApi api{};
  static bool ok = false;
  static std::string failure;
  static std::once_flag once;
  std::call_once(once, [] { ok = openCublasLt(cublasLtCandidates(), api, failure); });
  if (!ok && why) *why = failure;
  return ok ? &api : nullptr;
}

void checkLt(const CublasLtApi &lt, cublasStatus_t s, const std::string &what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  const char *msg = lt.cublasLtGetStatusString(s);
  fail(what, "cuBLASLt: {} (status {})", msg ? msg : "unknown status", int(s));
}

} // namespace h3c::runtime::cuda
