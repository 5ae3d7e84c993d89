// `h3c run`: one model evaluation of a compiled plan over a request, with the operator ledger.
#include "command.h"
#include "plan_run_args.h"

#include "h3c/models/config.h"
#include "h3c/plan/io.h"
#include "h3c/runtime/engine.h"
#include "h3c/support/canonical_json.h"
#include "h3c/support/error.h"
#include "h3c/support/files.h"
#include "h3c/support/signature.h"
#include "h3c/support/safetensors.h"

#include <cstdio>

namespace cmd_run {

struct Opts {
  h3c::tool::PlanRunArgs model;
  std::string out, device = "cpu", mode = "strict", ledger, signKey;
  long long sp = 0, tp = 0;
  int threads = 0;
  bool progress = false, hashNodes = false;
  std::vector<std::string> binds, updates, loras;
};

// No metadata: outputs of equivalent runs (another tp, fused or not, permuted request) are byte-equal files.
void writeOutputs(const std::string &path, const h3c::rt::Outputs &o) {
  std::vector<h3c::st::TensorDecl> decls = {{"sample", o.sample.dtype, o.sample.shape},
                                            {"audio_sample", o.audio_sample.dtype, o.audio_sample.shape}};
  h3c::st::Writer w(path, decls);
  for (const auto &info : w.order()) {
    const auto &t = info.name == "sample" ? o.sample : o.audio_sample;
    w.write(info.name, t.bytes.data(), t.bytes.size());
  }
  w.commit();
}

h3c::tool::Command cmd("run", "Run a compiled plan over a request (CPU reference or GPU) and write the ledger",
                       [](CLI::App &app) {
  auto o = std::make_shared<Opts>();
  o->model.add(app, "plan folder written by `h3c compile`");
  app.add_option("-o,--out", o->out, "output .safetensors (sample, audio_sample)")->required();
  app.add_option("--device", o->device, "cpu | gpu");
  app.add_option("--mode", o->mode, "strict | audit | off");
  app.add_option("--sp", o->sp, "sequence-parallel degree (must equal the plan's; default: the plan's)");
  app.add_option("--tp", o->tp, "tensor-parallel degree (must equal the plan's; default: the plan's)");
  app.add_option("--bind", o->binds, "GLOB=native|reference binding overlay (repeatable)");
  app.add_option("--threads", o->threads, "CPU worker threads (0 = all cores; never changes a bit)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--update", o->updates, "a .safetensors file or folder of weights (any subset, diffusers or native "
                 "names, BF16 or F32) that replace the checkpoint's before the run (repeatable, applied in order)");
  app.add_option("--lora", o->loras, "a LoRA adapter FILE[:SCALE] (diffusers, PEFT or kohya .safetensors) merged into "
                 "the weights after the updates (repeatable, merged in order)");
  app.add_option("--ledger", o->ledger, "ledger.json to write")->required();
  app.add_flag("--progress", o->progress, "print one line per op to stderr");
  app.add_flag("--hash-nodes", o->hashNodes, "record a content hash of every op output in the ledger (the GPU hashes on "
                                             "the device); compare two ledgers with `h3c ledger diff`");
  app.add_option("--sign-key", o->signKey, "Ed25519 private key (PEM): sign the ledger's seal into LEDGER.sig");
  app.callback([o] {
    o->model.requireWeights("h3c run");
    std::vector<h3c::PathArg> inputs = o->model.paths();
    for (const auto &u : o->updates) inputs.push_back({"--update", u});
    for (const auto &l : o->loras) inputs.push_back({"--lora", h3c::rt::parseLoraSpec(l).path});
    h3c::checkOutputsApart(inputs, {{"--out", o->out}, {"--ledger", o->ledger}});
    if (!o->signKey.empty())
      h3c::checkSigningKey(o->signKey);  // before the run, not after it
    h3c::h3::Config c = h3c::h3::loadConfig(o->model.config);
    h3c::plan::Plan plan = o->model.loadPlanFor(c);
    h3c::rt::RunOptions opt;
    opt.device = o->device;
    opt.mode = h3c::rt::parseMode(o->mode);
    opt.tp = o->tp > 0 ? o->tp : plan.options.tp;
    opt.sp = o->sp > 0 ? o->sp : plan.options.sp;
    opt.threads = o->threads;
    opt.hashNodes = o->hashNodes;
    opt.progress = o->progress;
    for (const auto &b : o->binds)
      opt.binds.push_back(h3c::rt::parseBindRule(b));
    std::unique_ptr<h3c::rt::WeightSource> w = o->model.weights(c);
    h3c::rt::Request req = h3c::rt::loadRequest(o->model.inputs);
    // One forward of an engine that caches nothing (runModel's), after the updates.
    h3c::rt::Engine engine(plan, *w, opt, /*cpuCacheBytes=*/0);
    h3c::tool::applyUpdatesAndAdapters(engine, o->updates, o->loras, c);
    h3c::rt::RunResult r = engine.run(req);
    // The ledger is written even when the strict rule fails (it is the evidence); outputs only when accepted or
    // when the mode does not demand it.
    h3c::writeFileAtomic(o->ledger, h3c::sealedJsonDump(r.ledger, 1) + "\n");  // Python-identical floats
    if (!o->signKey.empty())
      h3c::writeSignature(o->ledger, r.ledger.at("seal"), o->signKey);
    h3c::rt::LedgerVerdict v = h3c::rt::verifyLedger(r.ledger);
    if (opt.mode == h3c::rt::Mode::Strict && !v.strictOk) {
      std::string names;
      for (size_t i = 0; i < v.offenders.size() && i < 20; ++i)
        names += "\n  " + v.offenders[i];
      if (v.offenders.size() > 20)
        names += "\n  ... " + std::to_string(v.offenders.size() - 20) + " more";
      h3c::fail("--mode strict", "the strict rule failed ({} offender(s): nodes not run `row`, non-finite values); no "
                "outputs written (ledger: {}):{}",
                v.offenders.size(), o->ledger, names);
    }
    writeOutputs(o->out, r.outputs);
    std::printf("wrote %s and %s (%zu nodes, accepted: %s)\n", o->out.c_str(), o->ledger.c_str(),
                r.ledger["nodes"].size(), r.ledger["accepted"].get<bool>() ? "yes" : "no");
  });
});

} // namespace cmd_run
