// `h3c fingerprint derive --config full|small|tiny|FILE [-o OUT]`: the architecture fingerprint of a config (stdout,
// or OUT written atomically). `h3c fingerprint validate FILE`: loads FILE with the strict validator and prints counts.
#include "command.h"

#include "h3c/models/fingerprint.h"
#include "h3c/support/files.h"

#include <cstdio>

namespace cmd_fingerprint {

std::string configNameOf(const std::string &arg) {
  return (arg == "full" || arg == "small" || arg == "tiny") ? arg : "custom";
}

h3c::tool::Command cmd("fingerprint", "Architecture fingerprint: derive from a config, validate a file",
                       [](CLI::App &app) {
  app.require_subcommand(1);
  auto *derive = app.add_subcommand("derive", "Derive the fingerprint of a config");
  static std::string config = "full", out;
  derive->add_option("--config", config, "full, small, tiny or a diffusers config.json")->capture_default_str();
  derive->add_option("-o,--out", out, "Write here (atomically) instead of stdout");
  derive->callback([] {
    h3c::checkOutputsApart({{"--config", config}}, {{"-o", out}});
    auto c = h3c::h3::loadConfig(config);
    auto fp = h3c::h3::deriveFingerprint(c, configNameOf(config));
    std::string text = h3c::h3::fingerprintToJson(fp).dump(1) + "\n";
    if (out.empty())
      std::fwrite(text.data(), 1, text.size(), stdout);
    else
      h3c::writeFileAtomic(out, text);
  });

  auto *validate = app.add_subcommand("validate", "Load a fingerprint with the strict validator and print counts");
  static std::string file;
  validate->add_option("file", file, "fingerprint.json")->required();
  validate->callback([] {
    auto fp = h3c::h3::loadFingerprint(file);
    std::printf("%s: valid h3-arch-fingerprint-v1 (config %s)\n", file.c_str(), fp.configName.c_str());
    std::printf("  tensors:     %zu\n", fp.tensors.size());
    std::printf("  parameters:  %lld\n", static_cast<long long>(fp.parameters()));
    std::printf("  nodes:       %zu (%zu in blocks, %zu top-level)\n", fp.nodes.size(), fp.blockNodeCount(),
                fp.nodes.size() - fp.blockNodeCount());
    std::printf("  blocks:      %d transformer, %d refiner\n", fp.config.num_layers, fp.config.num_refiner_layers);
    std::printf("  sampler:     shifts video %d, audio %d\n", fp.videoShift, fp.audioShift);
  });
});

} // namespace cmd_fingerprint
