// `h3c compile FINGERPRINT.json --arch sm_90a|sm_100a --sp N --tp M [--no-fuse] [--tune NAME=V ...] [--dump-ir DIR]
// [--tokens S] [--lora-rank R] [--backward [--trainable GLOB|lora ...] [--checkpoint blocks [--keep KIND
// [--keep-bytes N]]]] -o OUT/`:
// imports the fingerprint, runs h3-pipeline and writes OUT/plan.json + OUT/kernels/*.cu atomically.
#include "command.h"

#include "h3c/Codegen/Compile.h"
#include "h3c/plan/io.h"
#include "h3c/support/json_read.h"
#include "h3c/support/error.h"
#include "h3c/support/files.h"
#include "h3c/support/sha256.h"

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace cmd_compile {

struct Args {
  std::string fingerprint, arch = "sm_90a", out, dumpIr;
  int64_t sp = 1, tp = 1, tokens = 8192, loraRank = 0;
  bool noFuse = false, noWgmma = false, noQkEpilogue = false, qkEpilogue = false, backward = false, noFuseGrad = false,
       foldSwigluGrad = false;
  std::string checkpoint = "none";
  std::vector<std::string> keep;
  int64_t keepBytes = -1;
  std::vector<std::string> tune, trainable;
};

h3c::tool::Command cmd("compile", h3c::tool::kCompileHelp, [](CLI::App &app) {
  auto a = std::make_shared<Args>();
  app.add_option("fingerprint", a->fingerprint, "Fingerprint JSON (models/h3/fingerprint.json)")->required();
  app.add_option("--arch", a->arch, "Target architecture")->check(CLI::IsMember({"sm_90a", "sm_100a"}));
  app.add_option("--sp", a->sp, "Sequence-parallel degree (ranks split the packed rows)")
      ->check(CLI::IsMember({1, 2, 4, 8}));
  app.add_option("--tp", a->tp, "Tensor-parallel degree (ranks split the columns)")->check(CLI::IsMember({1, 2, 4, 8}));
  app.add_flag("--no-fuse", a->noFuse, "Skip h3-fuse (one op per node)");
  app.add_flag("--no-wgmma", a->noWgmma, "sm_90a: run the bf16 linears (and the AdaLN tables) on the mma.sync kernel "
                                         "instead of the Hopper ones; the same bits, slower (for comparisons)");
  // Apart by default since 2026-12-07: the pairs form of qk_norm_rope streams at the HBM's speed, and the plain qkv GEMM
  // in 2-CTA clusters plus it took 142-145 ms a forward against 153-154 for the fused epilogue (H100, bench/NOTES.md).
  auto *qkOn = app.add_flag("--qk-epilogue", a->qkEpilogue, "sm_90a: fold qk_norm_rope into the qkv GEMM's epilogue "
                                                             "(apart by default); the same bits (for comparisons)");
  app.add_flag("--no-qk-epilogue", a->noQkEpilogue, "sm_90a: keep qk_norm_rope apart from the qkv GEMM (the default)")
      ->excludes(qkOn);
  app.add_option("--tune", a->tune,
                 "Kernel variant NAME=VALUE (" + h3c::kernels::EmitOptions::tuningNames() + "), for every op, or "
                 "OP:NAME=VALUE for one op kind (qkv_linear, "
                 "qkv_linear+qk_norm_rope, linear+swiglu, "
                 "linear+gate_residual, norm_modulate, ...); changes speed, never a bit")
      ->allow_extra_args(false);
  app.add_option("--dump-ir", a->dumpIr, "Write the IR after import and after every pass into this folder");
  app.add_option("--tokens", a->tokens, "Packed rows S for the buffer peak report")->check(CLI::PositiveNumber);
  app.add_option("--lora-rank", a->loraRank,
                 "Unmerged LoRA: adapter slots of this rank (a multiple of 64) beside every attention and feed-forward "
                 "linear (docs/contract.md section 13); adapters of rank <= R load into them without touching W")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--backward", a->backward,
               "Also write the backward function (docs/contract.md section 14) of the unfused one-rank forward "
               "(implies --no-fuse; refuses --sp and --tp; with --lora-rank the adapters' gradients too). Its ops "
               "have no GPU kernel yet");
  app.add_flag("--no-fuse-grad", a->noFuseGrad,
               "With --backward: skip h3-fuse-grad, which by default adds a dX's sibling gradient part in the dX "
               "kernel's epilogue and rounds a g that several linear gradients read once (grad_round), and the "
               "forward's qk_norm + rope fusion (h3-fuse training=true); the same bits (for comparisons)");
  app.add_flag("--fold-swiglu-grad", a->foldSwigluGrad,
               "With --backward: h3-fuse-grad also takes each swiglu_grad into the dX that is its dy (fc2's), the "
               "same bits; off by default: on Hopper that dX runs slower than the two ops apart today (bench/NOTES.md "
               "2026-12-07)");
  app.add_option("--trainable", a->trainable,
                 "With --backward: the tensors that get gradients, a glob over tensor names ('*' any run, '?' one "
                 "character) or \"lora\" for the adapter slots of --lora-rank; repeatable (the union); the others "
                 "are frozen, no gradient op works for them (default: every tensor)")
      ->allow_extra_args(false);
  app.add_option("--checkpoint", a->checkpoint,
                 "With --backward: \"blocks\" writes one checkpoint segment per transformer block (docs/contract.md "
                 "section 14): the forward keeps the blocks' inputs only and the backward reruns a block's forward ops "
                 "(the same bits) before its gradient ops; \"none\" (default) keeps every value the backward reads")
      ->check(CLI::IsMember({"none", "blocks"}));
  app.add_option("--keep", a->keep,
                 "With --checkpoint blocks: an op kind whose outputs the forward keeps for the backward instead of the "
                 "segments rerunning it (selective recompute; \"attention\": a block's costliest op to rerun at long "
                 "rows, one bf16 [rows, heads * d] tensor to keep), or \"all\": whole blocks kept, not rerun (their "
                 "segments left out); repeatable. The kept values are the forward's own: no bit changes")
      ->allow_extra_args(false);
  app.add_option("--keep-bytes", a->keepBytes,
                 "With --keep: at most this many bytes of kept outputs at --tokens rows (a number with an optional "
                 "unit, KiB = 1024: \"4GiB\", \"512MiB\"); the segments take the rule from the last block down "
                 "while it fits (default: every segment)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("-o,--out", a->out, "Output plan folder")->required();
  app.callback([a] {
    h3c::checkOutputsApart({{"fingerprint", a->fingerprint}}, {{"-o", a->out}, {"--dump-ir", a->dumpIr}});
    std::string bytes = h3c::readFile(a->fingerprint);
    nlohmann::json j = h3c::parseJson(bytes, a->fingerprint);
    h3c::h3::Fingerprint fp = h3c::h3::fingerprintFromJson(j, a->fingerprint);
    h3c::codegen::CompileOptions o;
    o.arch = a->arch;
    o.sp = a->sp;
    o.tp = a->tp;
    // The backward differentiates the unfused forward (h3-backward refuses fused ops).
    o.fuse = !a->noFuse && !a->backward;
    o.backward = a->backward;
    o.wgmma = !a->noWgmma;
    o.qkEpilogue = a->qkEpilogue;
    o.fuseGrad = !a->noFuseGrad;
    o.foldSwigluGrad = a->foldSwigluGrad;
    o.tokens = a->tokens;
    o.loraRank = a->loraRank;
    o.trainable = a->trainable;
    o.checkpoint = a->checkpoint == "blocks";
    o.keep = a->keep;
    o.keepBytes = a->keepBytes;
    o.dumpIrDir = a->dumpIr;
    for (const std::string &t : a->tune) o.tuning.set(t, "--tune " + t);
    o.tuning.check("--tune");
    h3c::codegen::CompileResult r = h3c::codegen::compile(fp, h3c::sha256Hex(bytes), o);
    std::string sha = h3c::plan::writePlanFolder(r.plan.plan, a->out);
    // One line per op kind without a kernel (the plan has "kernel": null for each): count and the first reason.
    std::map<std::string, std::pair<size_t, std::string>> missing;
    for (const auto &w : r.plan.warnings) {
      auto &m = missing[w.substr(0, w.find(" ["))];
      if (m.first++ == 0) m.second = w;
    }
    for (const auto &[kind, m] : missing)
      std::fprintf(stderr, "h3c: warning: %zu x %s without a kernel (\"kernel\": null), e.g. %s\n", m.first, kind.c_str(),
                   m.second.c_str());
    const h3c::plan::Plan &p = r.plan.plan;
    std::printf("compiled %zu nodes into %zu ops, %zu kernels (%zu ops without a kernel) in %.3f s\n",
                fp.nodes.size(), p.forward().ops.size(), p.kernels.size(), r.plan.warnings.size(), r.seconds);
    if (p.backward()) {
      size_t noTable = 0;  // h3-backward: the AdaLN table gradients nothing reads (frozen tables), not computed
      for (const h3c::plan::Op &op : p.backward()->ops)
        noTable += (op.kind == h3c::plan::OpKind::NormModulateGrad || op.kind == h3c::plan::OpKind::GateResidualGrad) &&
                   !op.attrs.tableGrad;
      std::printf("backward: %zu gradient ops, %zu gradient outputs; %zu AdaLN table gradients nothing reads left out\n",
                  p.backward()->ops.size(), p.backward()->outputs.size(), noTable);
    }
    if (p.backward() && !a->noFuseGrad) {
      // What h3-fuse-grad made of the backward, as the plan holds it (docs/contract.md sections 5 and 14).
      using h3c::plan::OpKind;
      size_t sums = 0, normSums = 0, rounded = 0, byProducer = 0, statistics = 0, ropes = 0, loraPaths = 0,
             swiglus = 0;
      for (const h3c::plan::Op &op : p.backward()->ops) {
        normSums += op.kind == OpKind::NormModulateGrad && op.attrs.epilogue == h3c::plan::Epilogue::Residual;
        ropes += op.kind == OpKind::RmsNormGrad && op.attrs.rotaryDim > 0;
        sums += op.kind == OpKind::LinearGradX && op.attrs.epilogue == h3c::plan::Epilogue::Residual;
        loraPaths += op.kind == OpKind::LinearGradX && op.attrs.loraK > 0;
        swiglus += op.kind == OpKind::LinearGradX && op.attrs.epilogue == h3c::plan::Epilogue::Swiglu;
        rounded += op.kind == OpKind::GradRound;
        byProducer += (op.kind == OpKind::SwigluGrad || op.kind == OpKind::RmsNormGrad ||
                       op.kind == OpKind::GateResidualGrad || op.kind == OpKind::LinearGradX) &&
                      p.value(op.out.at(0)).dtype == h3c::DType::BF16;
        byProducer += op.kind == OpKind::AttentionGrad && p.value(op.out.at(2)).dtype == h3c::DType::BF16;  // dv
        statistics += op.kind == OpKind::AttentionGrad && op.attrs.lse;
      }
      std::printf("fused gradients (h3-fuse-grad): %zu sums in a dX's epilogue and %zu in a norm_modulate_grad's, "
                  "%zu gradients rounded to bf16 once (%zu by the op computing them), %zu attention row statistics "
                  "saved by the forward, %zu rope gradients rotated back in their qk_norm's norm gradient, %zu LoRA "
                  "down paths' dX taken into their base dX, %zu swiglu gradients taken into the dX that is their dy\n",
                  sums, normSums, rounded + byProducer, byProducer, statistics, ropes, loraPaths, swiglus);
      // h3-fuse training=true: qk_norm + rope pairs, linears with their residual, linears with their swiglu
      size_t qkFused = 0, epilogues = 0, keptX = 0;
      for (const h3c::plan::Op &op : p.forward().ops) {
        qkFused += op.kind == OpKind::QkNormRope;
        epilogues += op.kind == OpKind::Linear && (op.attrs.epilogue == h3c::plan::Epilogue::GateResidual ||
                                                   op.attrs.epilogue == h3c::plan::Epilogue::Residual);
        keptX += op.kind == OpKind::Linear && op.attrs.swigluX;
      }
      std::printf("fused forward (h3-fuse training=true): %zu qk_norm + rope of q and k in one qk_norm_rope, %zu "
                  "linears with their gate_residual / residual in the epilogue (the backward reads no output of "
                  "theirs), %zu with their swiglu (its x, which the backward reads, stored beside it)\n",
                  qkFused, epilogues, keptX);
    }
    std::printf("buffers: %zu slots, %lld bytes in slots, live peak %lld bytes at S = %lld\n", p.slots.size(),
                (long long)p.stats.at("slot_bytes"), (long long)p.stats.at("peak_live_bytes"), (long long)a->tokens);
    if (p.backward()) {
      std::printf("backward live peak %lld bytes at S = %lld (forward then backward, every saved value kept)\n",
                  (long long)p.stats.at("backward_peak_live_bytes"), (long long)a->tokens);
      if (!p.backward()->checkpoints.empty())
        std::printf("checkpointed: %zu segments, live peak %lld bytes at S = %lld\n", p.backward()->checkpoints.size(),
                    (long long)p.stats.at("backward_peak_live_bytes_checkpointed"), (long long)a->tokens);
      if (!a->keep.empty())
        std::printf("kept (--keep %s): in %zu of the blocks' segments, their outputs not rerun; %zu segments left "
                    "(a block with nothing left to rerun has none)\n",
                    fmt::format("{}", fmt::join(a->keep, ",")).c_str(), r.keptSegments,
                    p.backward()->checkpoints.size());
    }
    std::string planFile = (std::filesystem::path(a->out) / "plan.json").lexically_normal().string();
    std::printf("plan %s -> %s\n", sha.c_str(), planFile.c_str());
  });
});

} // namespace cmd_compile
