// The registered pipeline `h3-pipeline{arch=... sp=... tp=... fuse=... tokens=...}`: what `h3c compile` runs.
#include "h3c/Passes/Passes.h"

#include "mlir/Pass/PassRegistry.h"

namespace h3c::passes {

void buildPipeline(mlir::OpPassManager &pm, const PipelineOptions &o) {
  pm.addPass(createH3AssignReductionOrder());
  if (o.fuse) {
    H3FuseOptions fuse;
    fuse.arch = o.arch;
    fuse.wgmma = o.wgmma;
    fuse.tp = o.tp;
    fuse.qkEpilogue = o.qkEpilogue;
    pm.addPass(createH3Fuse(fuse));
  }
  if (o.loraRank != 0) {
    H3LoraOptions lora;
    lora.rank = o.loraRank;
    pm.addPass(createH3Lora(lora));
  }
  H3ShardTpOptions shard;
  shard.tp = o.tp;
  pm.addPass(createH3ShardTp(shard));
  H3ShardSeqOptions seq;
  seq.sp = o.sp;
  pm.addPass(createH3ShardSeq(seq));
  H3VerifyStrictOptions strict;
  strict.arch = o.arch;
  pm.addPass(createH3VerifyStrict(strict));
  // After the forward's verification (its gradient ops have no kernels yet), before the buffers: the backward's
  // values and its reads of saved activations are part of the one timeline h3-plan-buffers lays out.
  if (o.backward) {
    H3BackwardOptions bwd;
    bwd.trainable.assign(o.trainable.begin(), o.trainable.end());
    pm.addPass(createH3Backward(bwd));
    if (o.fuseGrad) {
      H3FuseGradOptions fg;
      fg.swigluDx = o.foldSwigluGrad;
      pm.addPass(createH3FuseGrad(fg));
      // The forward's fusions that keep every value the backward reads (qk_norm + rope): fewer passes over q and k
      // in the forward and in every checkpoint segment's recompute, the same bits.
      H3FuseOptions fwd;
      fwd.training = true;
      pm.addPass(createH3Fuse(fwd));
    }
  }
  H3PlanBuffersOptions buffers;
  buffers.tokens = o.tokens;
  pm.addPass(createH3PlanBuffers(buffers));
}

void registerAll() {
  registerH3Passes();
  mlir::PassPipelineRegistration<PipelineOptions>(
      "h3-pipeline", "The h3c compile pipeline: order, fuse, lora, shard-tp, shard-seq, verify, backward, fuse-grad, plan buffers", buildPipeline);
}

} // namespace h3c::passes
