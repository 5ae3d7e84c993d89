// The `native` binding on the GPU (ledger.h: a vendor library without an order guarantee): the provider's arithmetic
// for the reductions, the op's contract for everything else.
//   linear, adaln_table, qkv_linear: cuBLASLt (cublasLtMatmul, bf16 or F32 inputs as the weight, F32 compute, the
//     heuristic's first algorithm, workspace allowed) into an F32 buffer, then the runtime's epilogue kernel: bias,
//     the node's bf16 rounding, swiglu / residual / gate_residual (AdaLN table, ts_index, tags) / the qkv split and
//     the output rounding, exactly as docs/contract.md section 3 says (native_ops.cuh). Only the order of each sum
//     is the library's.
//   attention: per batch item, chunks of heads and query rows (scratch bounded by kAttentionScratchBytes): cuBLASLt
//     batched S = Q K^T (F32), a softmax kernel (P = bf(exp((s - max) d^-0.5) / sum), normalized before rounding),
//     cuBLASLt batched P V (F32), rounded to bf16.
// Every other op kind has no native implementation: the executor runs its row kernel and records `row`.
// cuBLASLt is opened with dlopen (cublaslt.h) at the first native op; without it a native op is an error naming its
// node, never a silent fallback.
#pragma once

#include "h3c/plan/plan.h"
#include "h3c/runtime/cuda/kernel_runner.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace h3c::runtime::cuda {

struct CublasLtApi;

// A device operand: rows (batch items flattened; a weight's rows are N, a bias's its length with cols 1).
struct NativeOperand {
  CUdeviceptr ptr = 0;
  h3c::DType dtype = h3c::DType::BF16;
  int64_t rows = 0, cols = 0;
};

// One op's operands at the positions of plan/ops.h, as the row kernel would read them.
struct NativeCall {
  const h3c::plan::Op *op = nullptr;
  std::vector<NativeOperand> in, out, weights, biases;
  int64_t batch = 1;  // B: attention attends within each batch item
  CUstream stream = nullptr;
};

// The runtime's native kernels (native_ops.cuh) for `arch`, by entry; NVRTC compiles them without a GPU.
const std::vector<std::string> &nativeKernelEntries();
const h3c::plan::Kernel &nativeKernel(const std::string &entry, const std::string &arch);

// The most device memory one attention chunk's scores, probabilities and sums take (S = 8,349 at 56 heads: a few
// heads per chunk).
inline constexpr size_t kAttentionScratchBytes = size_t(2) << 30;

class NativeOps {
public:
  // attentionScratchBytes: the bound on one attention chunk (tests cut small requests into many chunks with it).
  explicit NativeOps(KernelRunner &runner, size_t attentionScratchBytes = kAttentionScratchBytes);
  ~NativeOps();
  NativeOps(const NativeOps &) = delete;
  NativeOps &operator=(const NativeOps &) = delete;

  // Whether ops of this kind have a native implementation.
  static bool implements(h3c::plan::OpKind kind);
  // Whether this op has one: its kind has, and it is not a qkv_linear with the qk_norm_rope epilogue (the Hopper
  // GEMM's fused form: bound native it runs its row kernel, as the norm and rope ops have no native form either).
  static bool implements(const h3c::plan::Op &op);
  // Queues the op on c.stream. Throws naming the op's first node: no cuBLASLt, an operand outside what the op's
  // contract allows, or a cuBLASLt failure.
  void run(const NativeCall &c);

private:
  struct Gemm;
  enum class Scratch { Input, Sums, Scores, Probs, Out, Workspace };
  void linear(const NativeCall &c, const std::string &node);
  void attention(const NativeCall &c, const std::string &node);
  void matmul(const Gemm &g, CUstream stream, const std::string &what);
  CUdeviceptr scratch(Scratch which, size_t bytes, CUstream stream);
  const LoadedKernel &kernel(const std::string &entry);
  void launch(const std::string &entry, unsigned blocks, void **params, CUstream stream, const std::string &what);

  KernelRunner &runner_;
  size_t attentionScratchBytes_;
  const CublasLtApi *lt_ = nullptr;
  void *handle_ = nullptr;  // cublasLtHandle_t
  std::map<Scratch, DeviceBuffer> scratch_;
};

} // namespace h3c::runtime::cuda
