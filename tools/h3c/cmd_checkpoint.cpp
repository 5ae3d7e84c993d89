// `h3c checkpoint snapshot | check | synth | map`: model folders in diffusers or native naming (see
// models/h3/include/h3c/models/checkpoint.h for the formats and rules).
#include "command.h"
#include "h3c/support/progress_line.h"

#include "h3c/models/checkpoint.h"
#include "h3c/models/fingerprint.h"
#include "h3c/support/error.h"
#include "h3c/support/files.h"

#include <cstdio>
#include <memory>

namespace cmd_checkpoint {

using namespace h3c;

// Bytes, optionally with a decimal suffix like huggingface_hub's max_shard_size: 5GB = 5 * 10^9.
uint64_t parseSize(const std::string &s) {
  size_t i = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9')
    ++i;
  if (i == 0 || i > 18)
    fail("--shard-size", "expected a positive byte count (optionally with KB, MB or GB), got '{}'", s);
  uint64_t v = std::stoull(s.substr(0, i));
  std::string suf = s.substr(i);
  uint64_t mul = suf.empty() || suf == "B" ? 1 : suf == "KB" ? 1000ull : suf == "MB" ? 1000000ull
                                                 : suf == "GB" ? 1000000000ull : 0;
  if (mul == 0)
    fail("--shard-size", "unknown suffix '{}' (expected KB, MB or GB)", suf);
  if (v == 0 || v > UINT64_MAX / mul)
    fail("--shard-size", "expected a positive byte count, got '{}'", s);
  return v * mul;
}

void printList(const char *title, const std::vector<std::string> &v) {
  if (v.empty())
    return;
  std::printf("%s (%zu):\n", title, v.size());
  for (const auto &s : v)
    std::printf("  %s\n", s.c_str());
}

// One line about a folder just written: tensors, parameters, files.
void summarize(const std::string &dir) {
  st::Folder f(dir);
  int64_t params = 0;
  for (const auto &n : f.names())
    params += f.at(n).info->numel();
  std::printf("wrote %s: %zu tensors (%s naming), %lld parameters, %zu safetensors file(s)\n", dir.c_str(),
              f.names().size(), h3::formatName(h3::detectFormat(f)), (long long)params, f.files().size());
}

struct Options {
  std::string dir, out, fingerprint, config = "full", mapConfig, to, qkv, in, shard;
  bool progress = false;
  uint64_t seed = 0;
};

void setup(CLI::App &app) {
  auto o = std::make_shared<Options>();
  app.require_subcommand(1);

  auto *snap = app.add_subcommand("snapshot", "Names, shapes, dtypes and sha256 of every tensor, and a content hash");
  snap->add_option("DIR", o->dir, "model folder")->required();
  snap->add_option("-o,--out", o->out, "write the snapshot JSON here (default: stdout)");
  snap->callback([o] {
    checkOutputsApart({{"DIR", o->dir}}, {{"-o", o->out}});
    std::string text = h3::snapshotCheckpoint(o->dir).dump(2) + "\n";
    if (o->out.empty())
      std::fwrite(text.data(), 1, text.size(), stdout);
    else {
      writeFileAtomic(o->out, text);
      std::printf("wrote %s\n", o->out.c_str());
    }
  });

  auto *check = app.add_subcommand("check", "Compare the stored tensors with the tensor list (exit 1 on a difference; "
                                            "F32 where BF16 is expected, in diffusers naming, is a cast: no "
                                            "difference)");
  check->add_option("DIR", o->dir, "model folder")->required();
  check->add_option("--fingerprint", o->fingerprint, "compare with this fingerprint's tensors (default: config.json)");
  auto checkJson = std::make_shared<bool>(false);
  check->add_flag("--json", *checkJson, "print the report as JSON");
  check->callback([o, checkJson] {
    h3::CheckReport r;
    if (!o->fingerprint.empty()) {
      h3::Fingerprint fp = h3::loadFingerprint(o->fingerprint);
      h3::ExpectedTensors e{fp.config, fp.tensors};
      r = h3::checkCheckpoint(o->dir, &e);
    } else {
      r = h3::checkCheckpoint(o->dir);
    }
    if (!r.ok())
      tool::exitCode() = kExitMismatch;
    if (*checkJson) {
      std::printf("%s\n", nlohmann::json{{"ok", r.ok()}, {"expected", r.expected}, {"missing", r.missing},
                                         {"unexpected", r.unexpected}, {"mismatched", r.mismatched},
                                         {"cast", r.cast}}
                               .dump(1)
                               .c_str());
      return;
    }
    if (r.ok()) {
      if (r.cast.empty())
        std::printf("ok: all %zu tensors match\n", r.expected);
      else
        std::printf("ok: all %zu tensors match, %zu of them stored as F32 where BF16 is expected: they load as BF16, "
                    "rounded to nearest even\n", r.expected, r.cast.size());
      return;
    }
    printList("missing", r.missing);
    printList("unexpected", r.unexpected);
    printList("mismatched", r.mismatched);
    printList("stored as F32, read as BF16", r.cast);
    std::printf("checkpoint differs: %zu missing, %zu unexpected, %zu mismatched\n", r.missing.size(),
                r.unexpected.size(), r.mismatched.size());
  });

  auto *synth = app.add_subcommand("synth", "Write a diffusers folder with deterministic synthetic weights");
  synth->add_option("--config", o->config, "full, small, tiny or a config JSON file")->required();
  synth->add_option("--seed", o->seed, "generator seed")->required();
  synth->add_option("-o,--out", o->out, "output folder (must not exist)")->required();
  synth->add_option("--shard-size", o->shard, "max bytes of tensor data per shard (default 5GB)");
  synth->add_flag("--progress", o->progress, "report the tensors and bytes written on stderr");
  synth->callback([o] {
    checkOutputsApart({{"--config", o->config}}, {{"--out", o->out}});
    uint64_t cap = o->shard.empty() ? st::kDefaultShardSize : parseSize(o->shard);
    h3::WriteProgress progress;
    if (o->progress) progress = ProgressLine("synth");
    h3::synthCheckpoint(h3::loadConfig(o->config), o->seed, o->out, cap, progress);
    summarize(o->out);
  });

  auto *map = app.add_subcommand("map", "Convert between diffusers and native naming (streaming, bitwise)");
  map->add_option("--to", o->to, "target naming")->required()->check(CLI::IsMember({"native", "diffusers"}));
  map->add_option("--qkv-layout", o->qkv, "native qkv_proj layout: interleaved (default) or concat")
      ->check(CLI::IsMember({"interleaved", "concat"}));
  map->add_option("--shard-size", o->shard, "max bytes of tensor data per shard (default 5GB)");
  map->add_option("--config", o->mapConfig,
                  "full, small, tiny or a config JSON file, instead of IN/config.json (e.g. for a raw release)");
  map->add_option("IN", o->in, "input folder")->required();
  map->add_option("-o,--out", o->out, "output folder (must not exist)")->required();
  map->add_flag("--progress", o->progress, "report the tensors and bytes written on stderr");
  map->callback([o] {
    checkOutputsApart({{"IN", o->in}, {"--config", o->mapConfig}}, {{"--out", o->out}});
    uint64_t cap = o->shard.empty() ? st::kDefaultShardSize : parseSize(o->shard);
    std::optional<h3::QkvLayout> layout;
    if (!o->qkv.empty())
      layout = h3::parseQkvLayout(o->qkv);
    h3::mapCheckpoint(o->in, o->out, o->to == "native" ? h3::CheckpointFormat::Native : h3::CheckpointFormat::Diffusers,
                      layout, cap,
                      o->mapConfig.empty() ? std::nullopt : std::optional<h3::Config>(h3::loadConfig(o->mapConfig)),
                      o->progress ? h3::WriteProgress(ProgressLine("map")) : h3::WriteProgress());
    summarize(o->out);
  });
}

h3c::tool::Command cmd("checkpoint", "Checkpoint tools: snapshot, check, synth, map", setup);

} // namespace cmd_checkpoint
