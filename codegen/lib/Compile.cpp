// The compile driver: import, the registered pipeline (h3c::passes::buildPipeline, the same one `h3-pipeline`
// names), optional IR dumps after every pass, plan emission. Pass diagnostics become one h3c::Error.
#include "h3c/Codegen/Compile.h"

#include "h3c/Codegen/Importer.h"
#include "h3c/Passes/Passes.h"
#include "h3c/plan/checkpoint.h"
#include "h3c/plan/slots.h"
#include "h3c/plan/trainable.h"
#include "h3c/support/error.h"
#include "h3c/support/files.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/Pass/PassManager.h"

#include <chrono>

namespace fs = std::filesystem;
using namespace mlir;

namespace h3c::codegen {

namespace {

std::string print(Operation *op) {
  std::string s;
  llvm::raw_string_ostream os(s);
  op->print(os);
  return s;
}

// Writes the module after every pass into DIR/NN-<pass argument>.mlir.
class DumpConfig : public PassManager::IRPrinterConfig {
public:
  explicit DumpConfig(fs::path dir) : IRPrinterConfig(/*printModuleScope=*/true), dir_(std::move(dir)) {}
  void printAfterIfEnabled(Pass *pass, Operation *op, PrintCallbackFn) override {
    char prefix[16];
    std::snprintf(prefix, sizeof prefix, "%02d-", ++n_);
    // The module as h3c-opt prints it (no banner), so a dump is valid input for h3c-opt.
    writeFileAtomic(dir_ / (prefix + pass->getArgument().str() + ".mlir"), print(op) + "\n");
  }
  void printBeforeIfEnabled(Pass *, Operation *, PrintCallbackFn) override {}

private:
  fs::path dir_;
  int n_ = 0;
};

} // namespace

CompileResult compile(const h3::Fingerprint &fp, const std::string &fingerprintSha256, const CompileOptions &o) {
  if (o.arch != "sm_90a" && o.arch != "sm_100a") fail("--arch", "expected sm_90a or sm_100a, got '{}'", o.arch);
  if (o.tp != 1 && o.tp != 2 && o.tp != 4 && o.tp != 8) fail("--tp", "expected 1, 2, 4 or 8, got {}", o.tp);
  if (o.sp != 1 && o.sp != 2 && o.sp != 4 && o.sp != 8) fail("--sp", "expected 1, 2, 4 or 8, got {}", o.sp);
  // h3-backward differentiates the unfused, unsharded forward (section 14): refuse the rest here, before any pass,
  // with the option's name.
  if (o.backward) {
    if (o.fuse) fail("--backward", "the backward differentiates the unfused forward: compile with fusion off (--no-fuse)");
    if (o.sp != 1 || o.tp != 1) fail("--backward", "the backward is written for one rank (--sp 1 --tp 1), got sp {} tp {}", o.sp, o.tp);
  }
  if (!o.fuseGrad && !o.backward) fail("--no-fuse-grad", "fuses the backward's gradient sums: it needs --backward");
  if (o.foldSwigluGrad && (!o.backward || !o.fuseGrad))
    fail("--fold-swiglu-grad", "an h3-fuse-grad fusion: it needs --backward without --no-fuse-grad");
  if (o.checkpoint && !o.backward) fail("--checkpoint", "checkpoint segments belong to a backward: it needs --backward");
  plan::KeepRule keep;
  keep.tokens = o.tokens;
  keep.maxBytes = o.keepBytes;
  for (const std::string &k : o.keep) {
    plan::OpKind kind;
    if (k == "all") keep.all = true;
    else if (!plan::parseOpKind(k, kind))
      fail("--keep " + k, "names no op kind of the plan (e.g. \"attention\") nor \"all\"");
    else keep.kinds.insert(kind);
  }
  if (keep.any() && !o.checkpoint)
    fail("--keep", "keeps values a checkpoint segment would recompute: it needs --checkpoint blocks");
  if (o.keepBytes >= 0 && !keep.any()) fail("--keep-bytes", "caps what --keep keeps: it needs --keep");
  if (!o.trainable.empty()) {
    if (!o.backward) fail("--trainable", "selects what the backward trains: it needs --backward");
    plan::checkTrainable(o.trainable, "--trainable");
    // "lora" selects the adapter slots, which only --lora-rank makes.
    for (const std::string &t : o.trainable)
      if (t == plan::kTrainAdapters && o.loraRank == 0)
        fail("--trainable lora", "the plan has no LoRA adapter slots: compile with --lora-rank R");
  }
  auto t0 = std::chrono::steady_clock::now();
  MLIRContext ctx;
  ctx.disableMultithreading();
  OwningOpRef<ModuleOp> module = importFingerprint(ctx, fp);

  if (!o.dumpIrDir.empty()) {
    fs::create_directories(o.dumpIrDir);
    writeFileAtomic(o.dumpIrDir / "00-import.mlir", print(*module) + "\n");
  }
  PassManager pm(&ctx);
  passes::PipelineOptions po;
  po.arch = o.arch;
  po.sp = o.sp;
  po.tp = o.tp;
  po.fuse = o.fuse;
  po.wgmma = o.wgmma;
  po.qkEpilogue = o.qkEpilogue;
  po.fuseGrad = o.fuseGrad;
  po.foldSwigluGrad = o.foldSwigluGrad;
  po.tokens = o.tokens;
  po.loraRank = o.loraRank;
  po.backward = o.backward;
  po.trainable = o.trainable;
  passes::buildPipeline(pm, po);
  if (!o.dumpIrDir.empty()) pm.enableIRPrinting(std::make_unique<DumpConfig>(o.dumpIrDir));

  std::string diag;
  {
    ScopedDiagnosticHandler h(&ctx, [&](Diagnostic &d) {
      if (d.getSeverity() == DiagnosticSeverity::Error) {
        llvm::raw_string_ostream os(diag);
        os << "\n  " << d.getLocation() << ": " << d.str();
      }
      return success();
    });
    if (failed(pm.run(*module))) fail("h3-pipeline", "compilation failed:{}", diag);
  }
  CompileResult r;
  plan::Options plo;
  plo.arch = o.arch;
  plo.sp = o.sp;
  plo.tp = o.tp;
  plo.fuse = o.fuse;
  plo.wgmma = o.wgmma;
  r.plan = emitPlan(*module, fp, fingerprintSha256, plo, o.tuning);
  if (o.backward) {
    // The live peak of the forward-then-backward timeline at `tokens` rows, without and with the block segments.
    // With them, the values are placed again over the checkpointed schedule (a recomputed value's second life in its
    // recompute slot), so that the slots, and slot_bytes, are what an executor following the segments needs.
    plan::Plan &pl = r.plan.plan;
    pl.stats["backward_peak_live_bytes"] = plan::liveBytesPeak(pl, o.tokens, false);
    if (o.checkpoint) {
      pl.functions.at("backward").checkpoints = plan::blockCheckpoints(pl, keep, &r.keptSegments);
      pl.stats["backward_peak_live_bytes_checkpointed"] = plan::liveBytesPeak(pl, o.tokens, true);
      if (!pl.functions.at("backward").checkpoints.empty()) plan::placeOnCheckpointedSchedule(pl, o.tokens);
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

} // namespace h3c::codegen
