// CUDA C++ kernel emission for one plan op (docs/contract.md section 5). Pure C++, no MLIR: the MLIR translation
// (codegen/, `h3c compile`) calls it for every op it lowers, and tools that only have a plan can call it too.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace h3c::kernels {

struct KernelSource {
  std::string id;      // content-derived, stable: e.g. "linear_bf16_k5376_n21504_u1_<hash8>"
  std::string entry;   // the extern "C" __global__ function name in `source`
  std::string source;  // complete NVRTC-compilable CUDA C++ (only <cuda/std/...> headers)
};

// The kernel for a plan op (its "op", "attrs", "order" fields), or nullopt for ops that run on the host
// (rope_table, timestep_sinusoid, pack metadata). `arch` is "sm_90a" or "sm_100a". Throws h3c::Error naming the op
// when no qualified fixed-order kernel exists for it.
std::optional<KernelSource> emitKernel(const nlohmann::json &planOp, const std::string &arch);

} // namespace h3c::kernels
