// cuBLASLt, opened at run time with dlopen (as the driver is, driver.h): h3c binaries never link it, so they build and
// run where it is absent; only a node bound `native` on the GPU needs it (native_ops.h). <cublasLt.h> is used for
// types only.
#pragma once

#include <cublasLt.h>

#include <string>
#include <vector>

namespace h3c::runtime::cuda {

struct CublasLtApi {
  size_t (*cublasLtGetVersion)();
  const char *(*cublasLtGetStatusString)(cublasStatus_t);
  cublasStatus_t (*cublasLtCreate)(cublasLtHandle_t *);
  cublasStatus_t (*cublasLtDestroy)(cublasLtHandle_t);
  cublasStatus_t (*cublasLtMatmulDescCreate)(cublasLtMatmulDesc_t *, cublasComputeType_t, cudaDataType_t);
  cublasStatus_t (*cublasLtMatmulDescDestroy)(cublasLtMatmulDesc_t);
  cublasStatus_t (*cublasLtMatmulDescSetAttribute)(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t,
                                                   const void *, size_t);
  cublasStatus_t (*cublasLtMatrixLayoutCreate)(cublasLtMatrixLayout_t *, cudaDataType, uint64_t, uint64_t, int64_t);
  cublasStatus_t (*cublasLtMatrixLayoutDestroy)(cublasLtMatrixLayout_t);
  cublasStatus_t (*cublasLtMatrixLayoutSetAttribute)(cublasLtMatrixLayout_t, cublasLtMatrixLayoutAttribute_t,
                                                     const void *, size_t);
  cublasStatus_t (*cublasLtMatmulPreferenceCreate)(cublasLtMatmulPreference_t *);
  cublasStatus_t (*cublasLtMatmulPreferenceDestroy)(cublasLtMatmulPreference_t);
  cublasStatus_t (*cublasLtMatmulPreferenceSetAttribute)(cublasLtMatmulPreference_t,
                                                         cublasLtMatmulPreferenceAttributes_t, const void *, size_t);
  cublasStatus_t (*cublasLtMatmulAlgoGetHeuristic)(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
                                                   cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                                   cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int,
                                                   cublasLtMatmulHeuristicResult_t[], int *);
  cublasStatus_t (*cublasLtMatmul)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void *, const void *,
                                   cublasLtMatrixLayout_t, const void *, cublasLtMatrixLayout_t, const void *,
                                   const void *, cublasLtMatrixLayout_t, void *, cublasLtMatrixLayout_t,
                                   const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t);
};

// The library names tried in order: $H3C_CUBLASLT_LIBRARY alone when set (a path or a soname); otherwise the soname
// of the headers' major version, the same file in the toolkit's library folder, then the unversioned name.
std::vector<std::string> cublasLtCandidates();

// Opens the first of `names` that loads and resolves every entry point into `api`; false with `why` (every name
// tried, and why each failed) otherwise. The library stays open for the process.
bool openCublasLt(const std::vector<std::string> &names, CublasLtApi &api, std::string &why);

// The library from cublasLtCandidates(), opened once: nullptr with `why` when it cannot be opened.
const CublasLtApi *cublasLt(std::string *why = nullptr);

// Throws h3c::Error "<what>: cuBLASLt <status name> (<status>)" unless s is CUBLAS_STATUS_SUCCESS.
void checkLt(const CublasLtApi &lt, cublasStatus_t s, const std::string &what);

} // namespace h3c::runtime::cuda
