// `h3c generate`: run the MiniMax-H3 sampler (rectified-flow Euler, two schedules; or the Flow-GRPO SDE with per-step
// log-probabilities) over a compiled plan and record a sealed trajectory; `h3c generate --resume TRAJ/` continues an
// interrupted one from its last sealed step (--plan / --inputs / --checkpoint where those files moved).
#include "command.h"

#include "h3c/support/error.h"
#include "h3c/support/files.h"
#include "h3c/support/signature.h"
#include "h3c/trajectory/generate.h"

#include <cstdio>
#include <cstdlib>
#include <unistd.h>

namespace cmd_generate {

struct Opts {
  h3c::rt::GenerateOptions g;
  std::string out, resume, mode = "strict", seeds;
  long long synthetic = -1, sp = 0, tp = 0, seed = -1;
  std::vector<std::string> binds;
  bool progress = false;
};

h3c::tool::Command cmd("generate", "Sample a trajectory (MiniMax-H3 scheduler) over a plan; resumable and sealed",
                       [](CLI::App &app) {
  auto o = std::make_shared<Opts>();
  auto *cfg = app.add_option("--config", o->g.config, "full, small, tiny or a config.json (must match the plan)");
  auto *ck = app.add_option("--checkpoint", o->g.checkpoint, "diffusers or native checkpoint folder");
  auto *sy = app.add_option("--synthetic", o->synthetic, "synthetic weights with this seed");
  ck->excludes(sy);
  app.add_option("--plan", o->g.plan, "plan folder written by `h3c compile` (with --resume: where it moved)");
  app.add_option("--inputs", o->g.request, "request .safetensors: the packed layout and latent shapes");
  auto *st = app.add_option("--steps", o->g.steps, "sigma grid points, terminal 0 included (N - 1 model evaluations)");
  auto *vs = app.add_option("--video-shift", o->g.videoShift, "sigma shift of the video schedule")->capture_default_str();
  auto *as = app.add_option("--audio-shift", o->g.audioShift, "sigma shift of the audio schedule")->capture_default_str();
  auto *sd = app.add_option("--seed", o->seed, "noise seed: batch item b uses seed + b");
  auto *ss = app.add_option("--seeds", o->seeds, "per-item noise seeds s0,s1,... (one per batch item)");
  ss->excludes(sd);
  auto *nz = app.add_option("--noise", o->g.noise, "initial latents of the generated rows (safetensors video/audio)");
  auto *sa = app.add_option("--sampler", o->g.sampler, "ode (diffusers' Euler) | sde (Flow-GRPO, with log-probs)");
  auto *nl = app.add_option("--noise-level", o->g.noiseLevel, "SDE noise level a")->capture_default_str();
  auto *ou = app.add_option("-o,--out", o->out, "trajectory folder to create");
  auto *sv = app.add_flag("--save-tensors", o->g.saveTensors, "also store velocities and latents of every step");
  auto *dv = app.add_option("--device", o->g.run.device, "cpu | gpu");
  auto *md = app.add_option("--mode", o->mode, "strict | audit | off");
  auto *sp = app.add_option("--sp", o->sp, "sequence-parallel degree (default: the plan's)");
  auto *tp = app.add_option("--tp", o->tp, "tensor-parallel degree (default: the plan's)");
  auto *bd = app.add_option("--bind", o->binds, "GLOB=native|reference binding overlay (repeatable)");
  auto *bf = app.add_option("--bind-from-step", o->g.bindFromStep, "apply the --bind rules from this step on");
  app.add_option("--threads", o->g.run.threads, "CPU worker threads (never changes a bit)")->check(CLI::Range(0, 1024));
  app.add_option("--update", o->g.updates, "a .safetensors file or folder of weights (any subset, diffusers or "
                 "native names, BF16 or F32) that replace the checkpoint's before the first step (repeatable; with "
                 "--resume: the recorded ones' new locations)");
  auto *lr = app.add_option("--lora", o->g.loras, "a LoRA adapter FILE[:SCALE] merged into the weights after the updates "
                 "(repeatable; recorded, and merged again by --resume)");
  app.add_option("--ledger", o->g.ledgerDir, "folder for the ledger of every step (step-NNNNN.json)");
  app.add_flag("--hash-nodes", o->g.run.hashNodes, "every step's ledger records a content hash of every op output");
  app.add_flag("--progress", o->progress, "report every step on stderr (default: on a terminal only)");
  app.add_option("--sign-key", o->g.signKey, "Ed25519 private key (PEM): sign the finished trajectory (final.json.sig)");
  auto *rs = app.add_option("--resume", o->resume, "continue this trajectory from its last sealed step");
  for (auto *opt : {cfg, sy, st, vs, as, sd, ss, nz, sa, nl, ou, sv, dv, md, sp, tp, bd, bf, lr})
    rs->excludes(opt);  // --plan, --inputs, --checkpoint may accompany --resume: files that moved (hash-checked)
  app.callback([o] {
    o->g.progress = o->progress || ::isatty(2);
    if (!o->g.signKey.empty())
      h3c::checkSigningKey(o->g.signKey);  // before the run, not after it
    if (const char *stop = std::getenv("H3C_GENERATE_STOP_AFTER"))  // tests: simulate a kill after N steps
      o->g.stopAfter = std::atoll(stop);
    if (!o->resume.empty()) {
      std::vector<h3c::PathArg> in = {
          {"--plan", o->g.plan}, {"--inputs", o->g.request}, {"--checkpoint", o->g.checkpoint}};
      for (const auto &u : o->g.updates) in.push_back({"--update", u});
      h3c::checkOutputsApart(in, {{"--resume", o->resume}, {"--ledger", o->g.ledgerDir}});
      int64_t n = h3c::rt::resumeGenerate(o->resume, o->g);
      std::printf("%s: %lld steps sealed\n", o->resume.c_str(), static_cast<long long>(n));
      return;
    }
    for (auto [given, name] : {std::pair<bool, const char *>{!o->g.config.empty(), "--config"},
                               {!o->g.plan.empty(), "--plan"},
                               {!o->g.request.empty(), "--inputs"},
                               {o->g.steps > 0, "--steps"},
                               {!o->out.empty(), "--out"}})
      if (!given)
        h3c::fail("h3c generate", "{} is required (or --resume TRAJ)", name);
    std::vector<h3c::PathArg> in = {{"--config", o->g.config}, {"--plan", o->g.plan}, {"--inputs", o->g.request},
                                    {"--checkpoint", o->g.checkpoint}, {"--noise", o->g.noise}};
    for (const auto &u : o->g.updates) in.push_back({"--update", u});
    h3c::checkOutputsApart(in, {{"--out", o->out}, {"--ledger", o->g.ledgerDir}});
    o->g.synthetic = o->synthetic;
    if (o->seed >= 0)
      o->g.seed = uint64_t(o->seed);
    if (!o->seeds.empty()) {
      size_t start = 0;
      while (true) {
        size_t comma = o->seeds.find(',', start);
        std::string one = o->seeds.substr(start, comma - start);
        char *end = nullptr;
        unsigned long long v = std::strtoull(one.c_str(), &end, 10);
        if (one.empty() || *end != '\0' || one[0] == '-')
          h3c::fail("--seeds", "expected comma-separated non-negative integers, got '{}'", o->seeds);
        o->g.seeds.push_back(v);
        if (comma == std::string::npos)
          break;
        start = comma + 1;
      }
    }
    o->g.run.mode = h3c::rt::parseMode(o->mode);
    o->g.run.sp = o->sp;
    o->g.run.tp = o->tp;
    for (const auto &b : o->binds)
      o->g.run.binds.push_back(h3c::rt::parseBindRule(b));
    int64_t n = h3c::rt::generate(o->out, o->g);
    std::printf("%s: %lld steps sealed\n", o->out.c_str(), static_cast<long long>(n));
  });
});

} // namespace cmd_generate
