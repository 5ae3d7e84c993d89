// The options every command that runs a plan over a request takes (`h3c run`, `h3c backward`): the config, the
// weights (a checkpoint folder or a synthetic seed), the plan and the request, and how each is loaded and checked.
#pragma once

#include "h3c/models/config.h"
#include "h3c/plan/io.h"
#include "h3c/runtime/engine.h"
#include "h3c/runtime/lora.h"
#include "h3c/runtime/weights.h"
#include "h3c/support/error.h"
#include "h3c/support/files.h"

#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

namespace h3c::tool {

struct PlanRunArgs {
  std::string config, checkpoint, plan, inputs;
  long long synthetic = -1;

  void add(CLI::App &app, const std::string &planHelp) {
    app.add_option("--config", config, "full, small, tiny or a config.json (must match the plan)")->required();
    auto *ck = app.add_option("--checkpoint", checkpoint, "diffusers or native checkpoint folder");
    auto *sy = app.add_option("--synthetic", synthetic, "synthetic weights with this seed (h3c checkpoint synth)");
    ck->excludes(sy);
    app.add_option("--plan", plan, planHelp)->required();
    app.add_option("--inputs", inputs, "request .safetensors (h3c request make)")->required();
  }
  // The input paths, for checkOutputsApart.
  std::vector<PathArg> paths() const {
    return {{"--config", config}, {"--checkpoint", checkpoint}, {"--plan", plan}, {"--inputs", inputs}};
  }
  void requireWeights(const std::string &command) const {
    if (checkpoint.empty() && synthetic < 0) fail(command, "give --checkpoint DIR or --synthetic SEED");
  }
  // The plan, refused when it was compiled for another config than `c`.
  plan::Plan loadPlanFor(const h3::Config &c) const {
    plan::Plan p = plan::loadPlan(plan);
    if (h3::configToJson(c).dump() != h3::configToJson(p.config).dump())
      fail("--config", "'{}' differs from the config the plan was compiled for", config);
    return p;
  }
  std::unique_ptr<rt::WeightSource> weights(const h3::Config &c) const {
    return checkpoint.empty() ? rt::makeSyntheticWeights(c, uint64_t(synthetic)) : rt::makeCheckpointWeights(c, checkpoint);
  }
};

// The weights a command runs with after `--update` files (in order) and then `--lora` adapters (in order, merged or
// into a --lora-rank plan's slots): applied to `engine` (h3c run, h3c backward).
inline void applyUpdatesAndAdapters(rt::Engine &engine, const std::vector<std::string> &updates,
                                    const std::vector<std::string> &loras, const h3::Config &c) {
  for (const auto &path : updates) {
    const rt::UpdateFiles u = rt::openUpdateFiles(path, c);
    engine.updateWeights(u.inputs, u.layout);
  }
  for (const auto &spec : loras) {
    const rt::LoraSpec l = rt::parseLoraSpec(spec);
    engine.loadLora(rt::readLora(l.path, c), l.scale);
  }
}

} // namespace h3c::tool
