// The h3 passes and the registered pipeline `h3-pipeline{arch=sm_90a sp=1 tp=1 fuse=true}`.
#pragma once

#include "h3c/Dialect/H3/H3Dialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

#include <memory>
#include <string>

namespace h3c::passes {

#define GEN_PASS_DECL
#include "h3c/Passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "h3c/Passes/Passes.h.inc"

struct PipelineOptions : public mlir::PassPipelineOptions<PipelineOptions> {
  Option<std::string> arch{*this, "arch", llvm::cl::desc("sm_90a or sm_100a"), llvm::cl::init("sm_90a")};
  Option<int64_t> sp{*this, "sp", llvm::cl::desc("sequence-parallel degree (1, 2, 4, 8)"), llvm::cl::init(1)};
  Option<int64_t> tp{*this, "tp", llvm::cl::desc("tensor-parallel degree (1, 2, 4, 8)"), llvm::cl::init(1)};
  Option<bool> fuse{*this, "fuse", llvm::cl::desc("run h3-fuse"), llvm::cl::init(true)};
  Option<bool> wgmma{*this, "wgmma", llvm::cl::desc("sm_90a: Hopper (wgmma) kernels for the bf16 linears"),
                     llvm::cl::init(true)};
  Option<bool> qkEpilogue{*this, "qk-epilogue",
                          llvm::cl::desc("sm_90a: qk_norm_rope fused into the qkv GEMM's epilogue (off: the two ops "
                                         "apart, h3c compile's default since 2026-12-07)"),
                          llvm::cl::init(false)};
  Option<int64_t> tokens{*this, "tokens", llvm::cl::desc("rows for the buffer peak report"), llvm::cl::init(8192)};
  Option<int64_t> loraRank{*this, "lora-rank",
                           llvm::cl::desc("unmerged LoRA slots of this rank on the attention and feed-forward linears "
                                          "(a multiple of 64; 0: none)"),
                           llvm::cl::init(0)};
  Option<bool> backward{*this, "backward",
                        llvm::cl::desc("run h3-backward after verify-strict (the unfused one-rank forward)"),
                        llvm::cl::init(false)};
  Option<bool> fuseGrad{*this, "fuse-grad",
                        llvm::cl::desc("run h3-fuse-grad and h3-fuse training=true after h3-backward (false keeps "
                                       "every grad_add and the unfused forward, for comparisons)"),
                        llvm::cl::init(true)};
  Option<bool> foldSwigluGrad{*this, "fold-swiglu-grad",
                              llvm::cl::desc("h3-fuse-grad swiglu-dx: a swiglu_grad into the dX that is its dy "
                                             "(slower on Hopper today)"),
                              llvm::cl::init(false)};
  ListOption<std::string> trainable{*this, "trainable",
                                    llvm::cl::desc("h3-backward: the tensors that get gradients (globs, \"lora\"; "
                                                   "default all)")};
};

// assign-reduction-order, [fuse], [lora], shard-tp, shard-seq, verify-strict, [backward, [fuse-grad, fuse
// training=true]], plan-buffers
// (in that order).
void buildPipeline(mlir::OpPassManager &pm, const PipelineOptions &o);
// Registers every h3 pass and the h3-pipeline.
void registerAll();

} // namespace h3c::passes
