// CUDA C++ kernel emission for one plan op (docs/contract.md sections 3-6). Pure C++, no MLIR: the MLIR translation
// (codegen/, `h3c compile`) calls it for every op it lowers, and tools that only have a plan (the GPU executor, the
// NVRTC tests) call it too.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace h3c::kernels {

// How the executor launches a kernel (all kernels take one `H3cArgs` by value; docs/contract.md section 6).
//   rows       = meta[0]: B * rows of in[0] ("in0"), of out[0] ("out0"), B * (Nv + Na) ("unpack"), T ("T")
//   grid.x     = ceil(rowsForGrid * unitsPerRow / unitsPerBlock), rowsForGrid = rows, or meta[2] when perItem
//   grid.y     = gridY, grid.z = B when perItem else 1
struct Launch {
  int threads = 256;
  int smemBytes = 0;          // dynamic shared memory (> 48 KiB needs the function attribute raised)
  std::string rowsOf = "in0";
  long long unitsPerRow = 1;
  long long unitsPerBlock = 1;
  int gridY = 1;
  bool perItem = false;       // attention: grid.x over the rows of one batch item, grid.z over items
};

struct KernelSource {
  std::string id;      // content-derived, stable: e.g. "linear_bf16_k5376_n21504_u1_<hash8>"
  std::string entry;   // the extern "C" __global__ function name in `source`
  std::string source;  // complete NVRTC-compilable CUDA C++ (no includes at all)
  Launch launch;
};

// The kernel for a plan op (its "op", "attrs", "order", "weights" fields), or nullopt for ops that run on the host
// (rope_table, timestep_sinusoid, pack metadata). `arch` is "sm_90a" or "sm_100a". Throws h3c::Error naming the op
// when no qualified fixed-order kernel exists for it (unknown op, missing/invalid attrs, unsupported order).
std::optional<KernelSource> emitKernel(const nlohmann::json &planOp, const std::string &arch);

// The argument block every kernel takes by value (`H3cArgs` in the kernel prelude; docs/contract.md section 6).
struct KernelArgs {
  const void *in[8] = {};
  void *out[4] = {};
  const void *w[4] = {};
  long long meta[16] = {};
};
static_assert(sizeof(KernelArgs) == 256, "KernelArgs must match the kernels' H3cArgs layout");

enum MetaIndex : int {
  kMetaRows = 0, kMetaBatch = 1, kMetaItemRows = 2, kMetaMetaRows = 3, kMetaNt = 4, kMetaNv = 5, kMetaNa = 6,
  kMetaT = 7,
};

// The synthetic weight generator on the GPU (support/synth_rng.h compiled by NVRTC, so values are bit-identical to
// the host's h3::synthValue): out[0] = dst, meta[0] = count, meta[1] = key (u64 bits), meta[2] = scale (double bits),
// meta[3] = 1 for BF16 output (else F32), meta[4] = init (0 normal, 1 ones, 2 zeros). 256 threads, grid-stride.
KernelSource synthFillKernel();

// The op kinds emitKernel knows (for messages and tests).
const char *const *knownOps();

} // namespace h3c::kernels
