// `h3c compile` as a library call: fingerprint -> h3 module -> h3-pipeline -> plan (+ kernel sources).
#pragma once

#include "h3c/Codegen/PlanEmitter.h"
#include "h3c/models/fingerprint.h"

#include <filesystem>
#include <string>

namespace h3c::codegen {

struct CompileOptions {
  std::string arch = "sm_90a";  // sm_90a or sm_100a
  int64_t sp = 1;               // sequence-parallel degree: 1, 2, 4, 8
  int64_t tp = 1;               // tensor-parallel degree: 1, 2, 4, 8
  bool fuse = true;
  bool qkEpilogue = false;      // sm_90a: qk_norm_rope fused into the qkv GEMM epilogue (false: two ops, same bits)
  bool fuseGrad = true;         // --backward: h3-fuse-grad (false keeps every grad_add: the same bits, for comparisons)
  bool foldSwigluGrad = false;  // --fold-swiglu-grad: h3-fuse-grad's swiglu_grad into fc2's dX (slower on Hopper today)
  bool wgmma = true;            // sm_90a: Hopper kernels for the bf16 linears (false: mma.sync, same bits)
  int64_t tokens = 8192;        // rows for the buffer peak report
  int64_t loraRank = 0;         // unmerged LoRA slots of this rank (h3-lora; 0: none)
  // h3-backward: the plan's second function (docs/contract.md section 14). Needs fuse false, sp = tp = 1.
  bool backward = false;
  // The tensors the backward trains (plan/trainable.h: globs, "lora" for the adapter slots); empty: all. Needs
  // backward.
  std::vector<std::string> trainable;
  // Activation checkpointing per block (plan/checkpoint.h, section 14): the backward's checkpoint segments. Needs
  // backward.
  bool checkpoint = false;
  // Selective recompute (plan::KeepRule): op kinds whose outputs the forward keeps instead of the segments rerunning
  // them, within keepBytes at `tokens` rows (-1: no cap). Needs checkpoint.
  std::vector<std::string> keep;
  int64_t keepBytes = -1;
  std::filesystem::path dumpIrDir;  // when set: 00-import.mlir and NN-<pass>.mlir after every pass
  // Kernel variants (`h3c compile --tune` over the measured defaults); never a bit of any output.
  kernels::EmitOptions tuning = kernels::EmitOptions::planDefaults();
};

struct CompileResult {
  EmittedPlan plan;
  double seconds = 0;  // import + passes + plan emission
  size_t keptSegments = 0;  // the checkpoint segments that --keep applied to (plan::blockCheckpoints)
};

// Throws h3c::Error with the pass diagnostics (each naming its node) when the pipeline fails.
CompileResult compile(const h3::Fingerprint &fp, const std::string &fingerprintSha256, const CompileOptions &o);

} // namespace h3c::codegen
