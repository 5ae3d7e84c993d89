// `h3c trajectory verify TRAJ [--json]`: checks the seals, the hash chain, the grids, the saved tensors and the latest
// state of a trajectory; exit 0 when valid and complete, 1 when invalid or only a sealed prefix (an interrupted run),
// 2 when the folder cannot be read at all.
// `h3c trajectory drift A B [--json] [--plot drift.svg]`: the first step, kind (header, sigma, velocity, latent) and
// modality where two trajectories differ, and the per-step max abs difference after it; exit 0 when identical, 1 when
// not.
#include "command.h"

#include "h3c/support/error.h"
#include "h3c/support/files.h"
#include "h3c/support/json_read.h"
#include "h3c/support/signature.h"
#include "h3c/trajectory/trajectory.h"

#include <cstdio>
#include <filesystem>

namespace cmd_trajectory {

h3c::tool::Command cmd("trajectory", "Sealed sampler trajectories: verify one, report the drift between two",
                       [](CLI::App &app) {
  app.require_subcommand(1);
  static std::string dir, a, b, plot, publicKey;
  static bool verifyJson = false, driftJson = false;

  auto *verify = app.add_subcommand("verify", "Verify a trajectory folder (seals, hash chain, tensors, state)");
  verify->add_option("trajectory", dir, "TRAJ/ folder written by h3c generate")->required();
  verify->add_flag("--json", verifyJson, "Print the report as JSON");
  verify->add_option("--public-key", publicKey, "Ed25519 public key (PEM): also check final.json.sig");
  verify->callback([] {
    if (!std::filesystem::is_directory(dir))
      h3c::fail(dir, "no such trajectory folder");
    auto r = h3c::rt::verifyTrajectory(dir);
    if (verifyJson) {
      std::printf("%s\n", r.toJson().dump(1).c_str());
    } else {
      if (!r.valid)
        std::printf("INVALID: %s\n", r.problem.c_str());
      else if (!r.complete)
        std::printf("INCOMPLETE: a valid sealed prefix of %lld of %lld steps (resume with h3c generate --resume)\n",
                    static_cast<long long>(r.sealedSteps), static_cast<long long>(r.numSteps));
      else
        std::printf("OK: %lld steps sealed, chain intact, final latents sealed\n",
                    static_cast<long long>(r.sealedSteps));
      for (const auto &n : r.notes)
        std::printf("note: %s\n", n.c_str());
    }
    h3c::tool::exitCode() = r.valid && r.complete ? h3c::kExitOk : h3c::kExitMismatch;
    if (!publicKey.empty()) {
      const std::filesystem::path fin = std::filesystem::path(dir) / "final.json";
      std::string bad = r.valid && r.complete
                            ? h3c::checkSignature(fin, h3c::readJsonFile(fin.string()).at("seal"), publicKey)
                            : "the trajectory is not complete: nothing is signed yet";
      std::printf("signature: %s\n", bad.empty() ? "ok" : ("BAD: " + bad).c_str());
      if (!bad.empty())
        h3c::tool::exitCode() = h3c::kExitMismatch;
    }
  });

  auto *drift = app.add_subcommand("drift", "Where two trajectories first differ, and by how much per step");
  drift->add_option("a", a, "trajectory A")->required();
  drift->add_option("b", b, "trajectory B")->required();
  drift->add_flag("--json", driftJson, "Print the report as JSON");
  drift->add_option("--plot", plot, "Also write an SVG of the per-step difference per modality");
  drift->callback([] {
    h3c::checkOutputsApart({{"trajectory A", a}, {"trajectory B", b}}, {{"--plot", plot}});
    auto ta = h3c::rt::loadTrajectory(a), tb = h3c::rt::loadTrajectory(b);
    auto r = h3c::rt::driftTrajectories(ta, tb);
    if (driftJson)
      std::printf("%s\n", r.toJson().dump(1).c_str());
    else
      std::printf("%s", r.text().c_str());
    if (!plot.empty())
      h3c::writeFileAtomic(plot, h3c::rt::driftSvg(r, "trajectory drift: " + a + " vs " + b));
    h3c::tool::exitCode() = r.identical ? h3c::kExitOk : h3c::kExitMismatch;
  });
});

} // namespace cmd_trajectory
