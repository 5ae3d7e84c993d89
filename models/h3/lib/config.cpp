#include "h3c/models/config.h"

#include "h3c/support/json_read.h"
#include "h3c/support/error.h"

#include <cmath>
#include <filesystem>
#include <set>

namespace h3c::h3 {

void Config::validate(const std::string &where) const {
  auto positive = [&](const char *key, long v) {
    if (v <= 0)
      fail(where, "config key '{}' must be positive, got {}", key, v);
  };
  positive("num_attention_heads", num_attention_heads);
  positive("attention_head_dim", attention_head_dim);
  positive("hidden_size", hidden_size);
  positive("num_layers", num_layers);
  if (num_refiner_layers < 0)
    fail(where, "config key 'num_refiner_layers' must be >= 0, got {}", num_refiner_layers);
  positive("ffn_dim", ffn_dim);
  positive("in_channels", in_channels);
  positive("audio_in_channels", audio_in_channels);
  for (int i = 0; i < 3; ++i)
    positive("patch_size", patch_size[i]);
  positive("text_dim", text_dim);
  positive("freq_dim", freq_dim);
  if (freq_dim % 2)
    fail(where, "config key 'freq_dim' must be even, got {}", freq_dim);
  positive("time_embed_hidden_dim", time_embed_hidden_dim);
  positive("time_embed_dim", time_embed_dim);
  positive("rope_freq_dim", rope_freq_dim);
  if (attention_head_dim % 2)
    fail(where, "config key 'attention_head_dim' must be even, got {}", attention_head_dim);
  if (rotaryDim() > attention_head_dim)
    fail(where, "config key 'rope_freq_dim': 6*{} rotated channels exceed attention_head_dim {}", rope_freq_dim,
         attention_head_dim);
  if (!(rope_theta > 0) || !std::isfinite(rope_theta))
    fail(where, "config key 'rope_theta' must be positive and finite");
  // Every width and every product the model forms (q/k/v width, patch width, ffn x hidden tensors) must stay far
  // from int overflow: each key is at most kMaxConfigInt, and the derived widths at most kMaxConfigWidth.
  for (auto [key, v] : {std::pair<const char *, int64_t>{"num_attention_heads * attention_head_dim",
                                                         int64_t(num_attention_heads) * attention_head_dim},
                        {"in_channels * patch_size", int64_t(in_channels) * patch_size[0] * patch_size[1] * patch_size[2]},
                        {"hidden_size", hidden_size},
                        {"ffn_dim", ffn_dim},
                        {"text_dim", text_dim},
                        {"time_embed_hidden_dim", time_embed_hidden_dim}})
    if (v > kMaxConfigWidth)
      fail(where, "config width {} = {} exceeds {}", key, v, kMaxConfigWidth);
  if (num_layers > 4096 || num_refiner_layers > 4096)
    fail(where, "config: more than 4096 layers");
  for (double e : {norm_eps, qk_norm_eps, final_norm_eps})
    if (!(e > 0 && e < 1))
      fail(where, "config eps values must lie in (0, 1)");
}

Config namedConfig(const std::string &name) {
  Config c;  // defaults = full
  if (name == "full")
    return c;
  if (name == "tiny") {
    c.num_attention_heads = 2;
    c.attention_head_dim = 16;
    c.hidden_size = 24;
    c.num_layers = 2;
    c.num_refiner_layers = 2;
    c.ffn_dim = 32;
    c.in_channels = 4;
    c.audio_in_channels = 6;
    c.text_dim = 8;
    c.freq_dim = 8;
    c.time_embed_hidden_dim = 24;
    c.time_embed_dim = 16;
    c.rope_freq_dim = 2;
    return c;
  }
  if (name == "small") {
    c.num_attention_heads = 2;
    c.attention_head_dim = 128;
    c.hidden_size = 192;
    c.ffn_dim = 512;
    c.text_dim = 160;
    c.freq_dim = 256;
    c.time_embed_hidden_dim = 192;
    c.time_embed_dim = 96;
    return c;
  }
  fail("--config", "unknown config '{}': expected full, small, tiny or a path to a JSON file", name);
}

nlohmann::json configToJson(const Config &c) {
  return nlohmann::json{{"num_attention_heads", c.num_attention_heads},
                        {"attention_head_dim", c.attention_head_dim},
                        {"hidden_size", c.hidden_size},
                        {"num_layers", c.num_layers},
                        {"num_refiner_layers", c.num_refiner_layers},
                        {"ffn_dim", c.ffn_dim},
                        {"in_channels", c.in_channels},
                        {"audio_in_channels", c.audio_in_channels},
                        {"patch_size", {c.patch_size[0], c.patch_size[1], c.patch_size[2]}},
                        {"text_dim", c.text_dim},
                        {"freq_dim", c.freq_dim},
                        {"time_embed_hidden_dim", c.time_embed_hidden_dim},
                        {"time_embed_dim", c.time_embed_dim},
                        {"rope_freq_dim", c.rope_freq_dim},
                        {"rope_theta", c.rope_theta},
                        {"norm_eps", c.norm_eps},
                        {"qk_norm_eps", c.qk_norm_eps},
                        {"final_norm_eps", c.final_norm_eps}};
}

Config configFromJson(const nlohmann::json &j, const std::string &where) {
  if (!j.is_object())
    fail(where, "config must be a JSON object");
  Config c;
  // Read as 64 bits and range-checked before narrowing: get<int>() would wrap 2^32 + 24 to 24.
  auto intIn = [&](const nlohmann::json &v, const std::string &at) {
    if (!v.is_number_integer())
      fail(at, "expected an integer, got {}", v.dump());
    if (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t(kMaxConfigInt)
                               : (v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxConfigInt))
      fail(at, "expected an integer in [0, {}], got {}", kMaxConfigInt, v.dump());
    return int(v.get<int64_t>());
  };
  auto getInt = [&](const std::string &key, int &dst) { dst = intIn(j.at(key), where + "/" + key); };
  auto getNum = [&](const std::string &key, double &dst) {
    const auto &v = j.at(key);
    if (!v.is_number() || !std::isfinite(v.get<double>()))
      fail(where + "/" + key, "expected a finite number, got {}", v.dump());
    dst = v.get<double>();
  };
  static const std::set<std::string> kInt = {"num_attention_heads", "attention_head_dim", "hidden_size",
                                             "num_layers", "num_refiner_layers", "ffn_dim", "in_channels",
                                             "audio_in_channels", "text_dim", "freq_dim", "time_embed_hidden_dim",
                                             "time_embed_dim", "rope_freq_dim"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string &k = it.key();
    if (!k.empty() && k[0] == '_')
      continue;  // _class_name, _diffusers_version, ...
    if (k == "num_attention_heads") getInt(k, c.num_attention_heads);
    else if (k == "attention_head_dim") getInt(k, c.attention_head_dim);
    else if (k == "hidden_size") getInt(k, c.hidden_size);
    else if (k == "num_layers") getInt(k, c.num_layers);
    else if (k == "num_refiner_layers") getInt(k, c.num_refiner_layers);
    else if (k == "ffn_dim") getInt(k, c.ffn_dim);
    else if (k == "in_channels") getInt(k, c.in_channels);
    else if (k == "audio_in_channels") getInt(k, c.audio_in_channels);
    else if (k == "text_dim") getInt(k, c.text_dim);
    else if (k == "freq_dim") getInt(k, c.freq_dim);
    else if (k == "time_embed_hidden_dim") getInt(k, c.time_embed_hidden_dim);
    else if (k == "time_embed_dim") getInt(k, c.time_embed_dim);
    else if (k == "rope_freq_dim") getInt(k, c.rope_freq_dim);
    else if (k == "rope_theta") getNum(k, c.rope_theta);
    else if (k == "norm_eps") getNum(k, c.norm_eps);
    else if (k == "qk_norm_eps") getNum(k, c.qk_norm_eps);
    else if (k == "final_norm_eps") getNum(k, c.final_norm_eps);
    else if (k == "patch_size") {
      const auto &v = it.value();
      if (!v.is_array() || v.size() != 3)
        fail(where + "/patch_size", "expected an array of 3 integers, got {}", v.dump());
      for (int i = 0; i < 3; ++i) {
        c.patch_size[i] = intIn(v[i], where + "/patch_size/" + std::to_string(i));
      }
    } else
      fail(where + "/" + k, "unknown config key");
  }
  (void)kInt;
  c.validate(where);
  return c;
}

Config loadConfig(const std::string &nameOrPath) {
  if (nameOrPath == "full" || nameOrPath == "small" || nameOrPath == "tiny")
    return namedConfig(nameOrPath);
  std::error_code ec;
  if (!std::filesystem::exists(nameOrPath, ec))
    fail("--config", "'{}' is neither full, small, tiny nor a readable JSON file", nameOrPath);
  return configFromJson(readJsonFile(nameOrPath), nameOrPath + "#");
}

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (auto d : shape)
    n *= d;
  return n;
}

bool isF32Module(const std::string &n) {
  auto starts = [&](const char *p) { return n.rfind(p, 0) == 0; };
  return starts("proj_in.") || starts("audio_proj_in.") || starts("time_embedder.") || starts("proj_out.") ||
         starts("audio_proj_out.");
}

std::vector<TensorSpec> diffusersTensors(const Config &c) {
  std::vector<TensorSpec> out;
  const int64_t H = c.hidden_size, I = c.innerDim(), F = c.ffn_dim, D = c.attention_head_dim;
  auto add = [&](std::string name, std::vector<int64_t> shape, TensorSpec::Init init = TensorSpec::Init::Normal) {
    DType t = isF32Module(name) ? DType::F32 : DType::BF16;
    out.push_back(TensorSpec{std::move(name), std::move(shape), t, init});
  };
  auto linear = [&](const std::string &p, int64_t n, int64_t k, bool bias) {
    add(p + ".weight", {n, k});
    if (bias)
      add(p + ".bias", {n});
  };
  auto attnFfn = [&](const std::string &p) {
    add(p + ".norm1.weight", {H}, TensorSpec::Init::Ones);
    add(p + ".norm2.weight", {H}, TensorSpec::Init::Ones);
    linear(p + ".attn.to_q", I, H, false);
    linear(p + ".attn.to_k", I, H, false);
    linear(p + ".attn.to_v", I, H, false);
    add(p + ".attn.norm_q.weight", {D}, TensorSpec::Init::Ones);
    add(p + ".attn.norm_k.weight", {D}, TensorSpec::Init::Ones);
    linear(p + ".attn.to_out.0", H, I, false);
    linear(p + ".ff.net.0.proj", 2 * F, H, false);
    linear(p + ".ff.net.2", H, F, false);
  };
  linear("proj_in", H, c.videoPatchDim(), true);
  linear("audio_proj_in", H, c.audio_in_channels, true);
  linear("context_embedder", H, c.text_dim, true);
  linear("time_embedder.linear_1", c.time_embed_hidden_dim, c.freq_dim, true);
  linear("time_embedder.linear_2", c.time_embed_dim, c.time_embed_hidden_dim, true);
  for (int b = 0; b < c.num_refiner_layers; ++b)
    attnFfn("token_refiner.refiner_blocks." + std::to_string(b));
  add("token_refiner.final_norm.weight", {H}, TensorSpec::Init::Ones);
  for (int b = 0; b < c.num_layers; ++b) {
    std::string p = "transformer_blocks." + std::to_string(b);
    attnFfn(p);
    linear(p + ".adaln_proj.linear", int64_t(kBlockAdaChunks) * kModalities * H, c.time_embed_dim, true);
  }
  add("norm_out.norm.weight", {H}, TensorSpec::Init::Ones);
  linear("norm_out.linear", 2 * H, c.time_embed_dim, true);
  linear("proj_out", c.videoPatchDim(), H, true);
  linear("audio_proj_out", c.audio_in_channels, H, true);
  return out;
}

int64_t parameterCount(const std::vector<TensorSpec> &t) {
  int64_t n = 0;
  for (const auto &s : t)
    n += s.numel();
  return n;
}

} // namespace h3c::h3
