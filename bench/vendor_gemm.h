// cuBLASLt's plain bf16 GEMM y [M, N] = x [M, K] W [N, K]^T (bf16 out, F32 compute, the heuristic's first algorithm
// with a 32 MiB workspace: what torch.nn.functional.linear runs), or a linear's input gradient (VendorGemm::GradX), timed in the same process as h3c's kernels so both
// see the same clocks and power state. Opened through the runtime's dlopen loader (cublaslt.h). Bench-only.
#pragma once

#include "h3c/runtime/cuda/cublaslt.h"
#include "h3c/runtime/cuda/driver.h"

#include <stdexcept>
#include <string>

namespace h3c::bench {

class VendorGemm {
public:
  VendorGemm(long long M, long long N, long long K) : ws_(size_t(32) << 20) {
    // Column-major view: C (N x M, ld N) = W^T (W is K x N, ld K, transposed) * x (K x M, ld K).
    init(CUBLAS_OP_T, K, N, CUBLAS_OP_N, K, M, CUDA_R_16BF, N, M);
  }
  // A linear's input gradient dX [M, K] = g [M, N] W [N, K] (g bf16, W as the forward stores it, F32 out: the shape
  // of linear_grad_x's GEMM). Column-major view: C (K x M, ld K) = W (K x N, ld K, as it is) * g (N x M, ld N).
  // run(g, W, dX).
  struct GradX {};
  VendorGemm(GradX, long long M, long long N, long long K) : ws_(size_t(32) << 20) {
    init(CUBLAS_OP_N, K, N, CUBLAS_OP_N, N, M, CUDA_R_32F, K, M);
  }
  // A linear's weight gradient dW [N, K] = g^T x over M rows (g and x bf16 [M, N], [M, K]; F32 out: the shape of
  // linear_grad_w's GEMM). Column-major view: C (K x N, ld K) = x (K x M, ld K) * g^T (g is N x M, ld N,
  // transposed). run(g, x, dW).
  struct GradW {};
  VendorGemm(GradW, long long M, long long N, long long K) : ws_(size_t(32) << 20) {
    init(CUBLAS_OP_N, K, M, CUBLAS_OP_T, N, M, CUDA_R_32F, K, N);
  }
  ~VendorGemm() {
    const auto &lt = *lt_;
    lt.cublasLtMatmulPreferenceDestroy(pref_);
    lt.cublasLtMatrixLayoutDestroy(c_);
    lt.cublasLtMatrixLayoutDestroy(b_);
    lt.cublasLtMatrixLayoutDestroy(a_);
    lt.cublasLtMatmulDescDestroy(desc_);
    lt.cublasLtDestroy(handle_);
  }
  VendorGemm(const VendorGemm &) = delete;
  VendorGemm &operator=(const VendorGemm &) = delete;

  void run(CUdeviceptr x, CUdeviceptr w, CUdeviceptr y) {
    const float alpha = 1.0f, beta = 0.0f;
    h3c::runtime::cuda::checkLt(*lt_,
                                lt_->cublasLtMatmul(handle_, desc_, &alpha, reinterpret_cast<void *>(w), a_,
                                                    reinterpret_cast<void *>(x), b_, &beta,
                                                    reinterpret_cast<void *>(y), c_, reinterpret_cast<void *>(y), c_,
                                                    &heur_.algo, reinterpret_cast<void *>(ws_.get()), ws_.bytes(),
                                                    nullptr),
                                "cublasLtMatmul");
  }

private:
  // Column-major operands as stored: A aRows x aCols (ld aRows), B bRows x bCols (ld bRows), each transposed or not;
  // C cRows x cCols (ld cRows) of type cType. bf16 A and B, F32 compute. run()'s `w` is A, its `x` B.
  void init(cublasOperation_t transA, long long aRows, long long aCols, cublasOperation_t transB, long long bRows,
            long long bCols, cudaDataType_t cType, long long cRows, long long cCols) {
    namespace hc = h3c::runtime::cuda;
    std::string why;
    lt_ = hc::cublasLt(&why);
    if (!lt_) throw std::runtime_error("cuBLASLt: " + why);
    const auto &lt = *lt_;
    hc::checkLt(lt, lt.cublasLtCreate(&handle_), "handle");
    hc::checkLt(lt, lt.cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
    hc::checkLt(lt, lt.cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &transA, sizeof transA), "TRANSA");
    hc::checkLt(lt, lt.cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &transB, sizeof transB), "TRANSB");
    hc::checkLt(lt, lt.cublasLtMatrixLayoutCreate(&a_, CUDA_R_16BF, uint64_t(aRows), uint64_t(aCols), aRows), "layout A");
    hc::checkLt(lt, lt.cublasLtMatrixLayoutCreate(&b_, CUDA_R_16BF, uint64_t(bRows), uint64_t(bCols), bRows), "layout B");
    hc::checkLt(lt, lt.cublasLtMatrixLayoutCreate(&c_, cType, uint64_t(cRows), uint64_t(cCols), cRows), "layout C");
    hc::checkLt(lt, lt.cublasLtMatmulPreferenceCreate(&pref_), "preference");
    const uint64_t wsBytes = ws_.bytes();
    hc::checkLt(lt, lt.cublasLtMatmulPreferenceSetAttribute(pref_, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsBytes,
                                                            sizeof wsBytes),
                "workspace");
    int found = 0;
    hc::checkLt(lt, lt.cublasLtMatmulAlgoGetHeuristic(handle_, desc_, a_, b_, c_, c_, pref_, 1, &heur_, &found),
                "heuristic");
    if (found < 1) throw std::runtime_error("cuBLASLt offers no algorithm");
  }

  const h3c::runtime::cuda::CublasLtApi *lt_ = nullptr;
  h3c::runtime::cuda::DeviceBuffer ws_;
  cublasLtHandle_t handle_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
  cublasLtMatmulPreference_t pref_ = nullptr;
  cublasLtMatmulHeuristicResult_t heur_{};
};

} // namespace h3c::bench
