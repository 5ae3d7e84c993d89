// The MiniMax-H3 transformer configuration (diffusers' MiniMaxH3Transformer3DModel keys) and the tensors it implies.
// Named configs: "full" (the released 33B model), "tiny" (diffusers' own test config), "small" (the full 50 + 2 block
// topology with head_dim 128 and narrow widths, for GPU tests that take seconds).
#pragma once

#include "h3c/support/dtype.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace h3c::h3 {

constexpr int kModalities = 3;  // token tags: 0 video, 1 text, 2 audio
constexpr int kBlockAdaChunks = 6;  // shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp

// Range limits of config integers (the full model uses at most 14336): each key, and each derived width.
inline constexpr int64_t kMaxConfigInt = 1 << 20;
inline constexpr int64_t kMaxConfigWidth = 1 << 20;

struct Config {
  int num_attention_heads = 56;
  int attention_head_dim = 128;
  int hidden_size = 5376;
  int num_layers = 50;
  int num_refiner_layers = 2;
  int ffn_dim = 14336;
  int in_channels = 24;
  int audio_in_channels = 32;
  int patch_size[3] = {1, 2, 2};
  int text_dim = 5120;
  int freq_dim = 256;
  int time_embed_hidden_dim = 5376;
  int time_embed_dim = 2688;
  int rope_freq_dim = 16;
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  double qk_norm_eps = 1e-5;
  double final_norm_eps = 1e-5;

  int innerDim() const { return num_attention_heads * attention_head_dim; }
  int videoPatchDim() const { return in_channels * patch_size[0] * patch_size[1] * patch_size[2]; }
  int rotaryDim() const { return 2 * 3 * rope_freq_dim; }

  // Throws h3c::Error naming the key when a value is out of range (e.g. rotary dim > head dim, odd freq_dim).
  void validate(const std::string &where) const;
};

// "full", "small", "tiny"; throws for any other name.
Config namedConfig(const std::string &name);
// A named config or a path to a JSON file (diffusers config.json keys; `_class_name`, `_diffusers_version` and
// other keys starting with '_' are ignored, unknown keys are errors).
Config loadConfig(const std::string &nameOrPath);

nlohmann::json configToJson(const Config &c);
Config configFromJson(const nlohmann::json &j, const std::string &where);

// One tensor of the diffusers-format checkpoint.
struct TensorSpec {
  std::string name;  // diffusers naming
  std::vector<int64_t> shape;
  DType dtype;
  enum class Init { Normal, Ones, Zeros } init = Init::Normal;  // how synthetic checkpoints fill it
  int64_t numel() const;
};

// All tensors in a fixed order: top-level inputs, time embedder, token refiner, transformer blocks, output heads.
// For the full config: 638 tensors and 33,122,992,896 parameters.
std::vector<TensorSpec> diffusersTensors(const Config &c);
int64_t parameterCount(const std::vector<TensorSpec> &t);

// True for the modules diffusers keeps in F32 (_keep_in_fp32_modules): proj_in, audio_proj_in, time_embedder,
// proj_out, audio_proj_out. Everything else is BF16.
bool isF32Module(const std::string &tensorName);

} // namespace h3c::h3
