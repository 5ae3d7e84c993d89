// The LoRA file reader (lora.h): diffusers' MiniMaxH3LoraLoaderMixin.lora_state_dict and
// _convert_non_diffusers_minimax_h3_lora_to_diffusers, rule for rule, onto h3c's diffusers weight names, except that
// factors are kept as stored (a kohya `.alpha` becomes the module's alpha instead of being folded into them) and
// that whatever diffusers would skip, drop or warn about is an error here.
#include "h3c/runtime/lora.h"

#include "h3c/support/dtype.h"
#include "h3c/support/error.h"
#include "h3c/support/json_read.h"
#include "h3c/support/safetensors.h"
#include "h3c/support/sha256.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <regex>
#include <set>

namespace h3c::rt {

namespace {

namespace fs = std::filesystem;

bool startsWith(const std::string &s, std::string_view p) { return s.compare(0, p.size(), p) == 0; }
bool endsWith(const std::string &s, std::string_view p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}
std::string replaceAll(std::string s, const std::string &from, const std::string &to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

// A folder is read when it holds exactly one .safetensors file (diffusers' pytorch_lora_weights.safetensors).
fs::path resolveFile(const fs::path &given) {
  if (!fs::is_directory(given))
    return given;
  std::vector<fs::path> found;
  for (const auto &e : fs::directory_iterator(given))
    if (e.path().extension() == ".safetensors" && e.is_regular_file())
      found.push_back(e.path());
  std::sort(found.begin(), found.end());
  if (found.size() != 1)
    fail(given.string(), "a LoRA folder must hold exactly one .safetensors file; it holds {}", found.size());
  return found[0];
}

// IEEE half to float, exact (every half is a float).
float halfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t(h >> 15) << 31, exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {
    // Subnormal: normalize (the value is mant * 2^-24).
    int e = -1;
    uint32_t m = mant;
    do {
      ++e;
      m <<= 1;
    } while ((m & 0x400u) == 0);
    bits = sign | (uint32_t(112 - e) << 23) | ((m & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Element i of a float tensor in the file, exactly as a double.
double elementAsDouble(DType t, const uint8_t *p, int64_t i) {
  switch (t) {
  case DType::F32: {
    float f;
    std::memcpy(&f, p + 4 * i, 4);
    return f;
  }
  case DType::BF16: {
    uint16_t b;
    std::memcpy(&b, p + 2 * i, 2);
    return bf16ToFloat(b);
  }
  case DType::F16: {
    uint16_t b;
    std::memcpy(&b, p + 2 * i, 2);
    return halfToFloat(b);
  }
  case DType::F64: {
    double d;
    std::memcpy(&d, p + 8 * i, 8);
    return d;
  }
  default: return 0;  // refused by the callers
  }
}

// The model's linear weights by diffusers name: shape [out, in].
std::map<std::string, std::vector<int64_t>> linearWeights(const h3::Config &c) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto &t : h3::diffusersTensors(c))
    if (t.shape.size() == 2 && endsWith(t.name, ".weight"))
      out.emplace(t.name, t.shape);
  return out;
}

// ---- key conversion ---------------------------------------------------------------------------------------------

// How one source module's factors become diffusers modules.
enum class Split {
  None,  // one target, factors as they are
  Qkv,   // fused qkv: to_q / to_k / to_v share lora_A, lora_B in thirds (after DiffSynth's de-interleave)
  Fc1,   // fused [gate; value] -> ff.net.0.proj [value; gate]: lora_B's halves swap
};

struct SourceModule {
  std::string target;  // the diffusers module (without ".weight"); for Qkv the attention module ("...attn")
  Split split = Split::None;
};

// A block index as diffusers writes it back (f"{i}"): only such indices are ever looked up.
bool canonicalIndex(const std::string &s) {
  if (s.empty() || s.size() > 9 || (s.size() > 1 && s[0] == '0'))
    return false;
  return std::all_of(s.begin(), s.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
}

// The original checkpoint's module names (the non-diffusers layouts) onto diffusers modules; nullopt for any other.
std::optional<SourceModule> originalModule(const std::string &base) {
  static const std::map<std::string, std::string> standalone = {
      {"video_patch_proj", "proj_in"},
      {"audio_patch_proj", "audio_proj_in"},
      {"condition_proj", "context_embedder"},
      {"time_embedder.proj_in", "time_embedder.linear_1"},
      {"time_embedder.proj_out", "time_embedder.linear_2"},
      {"final_layer.adaln_proj.linear", "norm_out.linear"},
      {"final_layer.video_out", "proj_out"},
      {"final_layer.audio_out", "audio_proj_out"},
  };
  if (auto it = standalone.find(base); it != standalone.end())
    return SourceModule{it->second, Split::None};
  static const std::pair<std::string, std::string> stacks[] = {{"blocks.", "transformer_blocks."},
                                                              {"token_refiner.blocks.", "token_refiner.refiner_blocks."}};
  for (const auto &[source, target] : stacks) {
    if (!startsWith(base, source))
      continue;
    const size_t dot = base.find('.', source.size());
    if (dot == std::string::npos)
      return std::nullopt;
    const std::string index = base.substr(source.size(), dot - source.size()), module = base.substr(dot + 1);
    if (!canonicalIndex(index))
      return std::nullopt;
    const std::string prefix = target + index + ".";
    if (module == "attn.qkv_proj")
      return SourceModule{prefix + "attn", Split::Qkv};
    if (module == "mlp.fc1")
      return SourceModule{prefix + "ff.net.0.proj", Split::Fc1};
    if (module == "attn.out_proj")
      return SourceModule{prefix + "attn.to_out.0", Split::None};
    if (module == "mlp.fc2")
      return SourceModule{prefix + "ff.net.2", Split::None};
    if (module == "adaln_proj.linear")
      return SourceModule{prefix + "adaln_proj.linear", Split::None};
    return std::nullopt;
  }
  return std::nullopt;
}

// musubi-tuner's flattened module name (`lora_unet_` removed, up to the first '.') back to the dotted one.
std::optional<std::string> unflattenMusubi(const std::string &module) {
  static const std::vector<std::pair<std::regex, std::string>> rules = [] {
    std::vector<std::pair<std::regex, std::string>> r;
    for (const auto &[p, s] : std::vector<std::pair<const char *, const char *>>{
             {R"(blocks_([0-9]+)_attn_(qkv|out)_proj)", "blocks.$1.attn.$2_proj"},
             {R"(blocks_([0-9]+)_mlp_fc([12]))", "blocks.$1.mlp.fc$2"},
             {R"(blocks_([0-9]+)_adaln_proj_linear)", "blocks.$1.adaln_proj.linear"},
             {R"(token_refiner_blocks_([0-9]+)_attn_(qkv|out)_proj)", "token_refiner.blocks.$1.attn.$2_proj"},
             {R"(token_refiner_blocks_([0-9]+)_mlp_fc([12]))", "token_refiner.blocks.$1.mlp.fc$2"},
             {R"((video|audio)_patch_proj)", "$1_patch_proj"},
             {R"(condition_proj)", "condition_proj"},
             {R"(time_embedder_proj_(in|out))", "time_embedder.proj_$1"},
             {R"(final_layer_adaln_proj_linear)", "final_layer.adaln_proj.linear"},
             {R"(final_layer_(video|audio)_out)", "final_layer.$1_out"}})
      r.emplace_back(std::regex(p), s);
    return r;
  }();
  for (const auto &[re, replacement] : rules)
    if (std::regex_match(module, re))
      return std::regex_replace(module, re, replacement);
  return std::nullopt;
}

// The factors of one source module as the file holds them.
struct Pair {
  std::string downKey, upKey, alphaKey;  // the file's own keys (for messages); alphaKey empty without one
};

struct Layout {
  std::string format;
  bool diffsynth = false;
  // Source module -> its keys; `sources` maps it to diffusers modules. Diffusers layouts: the module is the target.
  std::map<std::string, Pair> pairs;
  std::map<std::string, SourceModule> sources;
};

// Which key of a pair a normalized key is, and its module; false when it ends in none of the three suffixes.
bool splitSuffix(const std::string &key, const std::string &down, const std::string &up, std::string &module,
                 int &which) {
  const std::string suffixes[] = {down, up, ".alpha"};
  for (int i = 0; i < 3; ++i)
    if (endsWith(key, suffixes[i]) && key.size() > suffixes[i].size()) {
      module = key.substr(0, key.size() - suffixes[i].size());
      which = i;
      return true;
    }
  return false;
}

void addKey(Layout &l, const std::string &where, const std::string &module, int which, const std::string &fileKey) {
  Pair &p = l.pairs[module];
  std::string &slot = which == 0 ? p.downKey : which == 1 ? p.upKey : p.alphaKey;
  if (!slot.empty())
    fail(where, "`{}` and `{}` name the same LoRA tensor (module {})", slot, fileKey, module);
  slot = fileKey;
}

Layout recognize(const std::vector<std::string> &keys, const std::string &where) {
  auto any = [&](auto pred) { return std::any_of(keys.begin(), keys.end(), pred); };
  const bool nonDiffusers = any([](const std::string &k) {
    return startsWith(k, "diffusion_model.") || startsWith(k, "blocks.") || startsWith(k, "token_refiner.blocks.") ||
           startsWith(k, "final_layer.") || startsWith(k, "lora_unet_");
  });
  const bool peft = any([](const std::string &k) { return k.find(".default.weight") != std::string::npos; }) &&
                    !any([](const std::string &k) { return startsWith(k, "transformer.") || startsWith(k, "transformer_ref."); });
  Layout l;
  if (!nonDiffusers) {
    l.format = peft ? "peft" : "diffusers";
    for (const std::string &k : keys) {
      const std::string name = peft ? "transformer." + replaceAll(k, ".default.", ".") : k;
      std::string module;
      int which;
      if (endsWith(name, ".alpha"))
        fail(where, "`{}`: a per-module alpha tensor in the {} layout (diffusers refuses such a file: its keys must "
             "all name lora_A / lora_B; alphas belong in the kohya layout or the `__metadata__`)", k, l.format);
      if (!startsWith(name, "transformer.") || !splitSuffix(name, ".lora_A.weight", ".lora_B.weight", module, which))
        fail(where, "`{}` is not a MiniMax-H3 LoRA key of the {} layout (expected {}<module>.lora_A.weight / "
             ".lora_B.weight)", k, l.format, peft ? "<module>.lora_A.default.weight or " : "transformer.");
      module = module.substr(std::string("transformer.").size());
      addKey(l, where, module, which, k);
      l.sources.emplace(module, SourceModule{module, Split::None});
    }
    return l;
  }

  // The original checkpoint's names: diffusion_model. prefix, DiffSynth's .default. infix, musubi's flattening.
  std::vector<std::pair<std::string, std::string>> named;  // (normalized, file key)
  for (const std::string &k : keys)
    named.emplace_back(startsWith(k, "diffusion_model.") ? k.substr(16) : k, k);
  l.diffsynth = std::any_of(named.begin(), named.end(), [](const auto &n) {
    return n.first.find(".lora_A.default.weight") != std::string::npos ||
           n.first.find(".lora_B.default.weight") != std::string::npos;
  });
  if (l.diffsynth)
    for (auto &n : named)
      n.first = replaceAll(replaceAll(n.first, ".lora_A.default.", ".lora_A."), ".lora_B.default.", ".lora_B.");
  const bool musubi = std::any_of(named.begin(), named.end(), [](const auto &n) { return startsWith(n.first, "lora_unet_"); });
  if (musubi)
    for (auto &n : named) {
      const std::string rest = startsWith(n.first, "lora_unet_") ? n.first.substr(10) : n.first;
      const size_t dot = rest.find('.');
      const std::string module = rest.substr(0, dot), suffix = dot == std::string::npos ? "" : rest.substr(dot + 1);
      const auto dotted = unflattenMusubi(module);
      if (!dotted)
        fail(where, "`{}` does not name a MiniMax-H3 module in musubi-tuner's flattened `lora_unet_` layout",
             n.second);
      n.first = *dotted + "." + suffix;
    }
  const bool kohya = std::any_of(named.begin(), named.end(),
                                 [](const auto &n) { return n.first.find(".lora_down.weight") != std::string::npos; });
  l.format = musubi ? "musubi" : l.diffsynth ? "diffsynth" : kohya ? "kohya" : "original";
  const std::string down = kohya ? ".lora_down.weight" : ".lora_A.weight", up = kohya ? ".lora_up.weight" : ".lora_B.weight";
  for (const auto &[name, k] : named) {
    std::string module;
    int which;
    std::optional<SourceModule> src;
    if (splitSuffix(name, down, up, module, which))
      src = originalModule(module);
    if (!src)
      fail(where, "`{}` is not a LoRA key of MiniMax-H3's original module names ({} layout: <module>{} / {} / .alpha)",
           k, l.format, down, up);
    addKey(l, where, module, which, k);
    l.sources.emplace(module, *src);
  }
  return l;
}

// ---- alphas -----------------------------------------------------------------------------------------------------

// A number as Python's float() reads the `__metadata__` alpha, restricted to plain decimal notation; nullopt else.
std::optional<double> parseDecimal(const std::string &text) {
  size_t b = text.find_first_not_of(" \t\n\r\f\v"), e = text.find_last_not_of(" \t\n\r\f\v");
  if (b == std::string::npos)
    return std::nullopt;
  const std::string s = text.substr(b, e - b + 1);
  static const std::regex decimal(R"([+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?)");
  if (!std::regex_match(s, decimal))
    return std::nullopt;
  const double v = std::strtod(s.c_str(), nullptr);
  if (!std::isfinite(v))
    return std::nullopt;
  return v;
}

// diffusers' own adapter metadata (`lora_adapter_metadata`: the transformer's LoraConfig as JSON, `transformer.`
// prefixed keys), the subset a plain LoRA config uses. PEFT's pattern keys match a module by its full name or a
// dotted suffix of it ("^name": the full name only); patterns here are refused unless plain module paths.
struct AdapterConfig {
  int64_t r = 0;
  double alpha = 0;
  std::vector<std::pair<std::string, nlohmann::json>> rankPattern, alphaPattern;
  std::optional<std::vector<std::string>> targets;  // nullopt: every linear ("all-linear")

  static bool matches(const std::string &pattern, const std::string &module) {
    if (startsWith(pattern, "^"))
      return module == pattern.substr(1);
    return module == pattern || endsWith(module, "." + pattern);
  }
  // The pattern's value for `module`, or nullptr; more than one match is refused (PEFT's pick depends on key order).
  static const nlohmann::json *lookup(const std::vector<std::pair<std::string, nlohmann::json>> &patterns,
                                      const std::string &module, const std::string &where, const char *what) {
    const nlohmann::json *found = nullptr;
    for (const auto &[p, v] : patterns)
      if (matches(p, module)) {
        if (found)
          fail(where, "lora_adapter_metadata: more than one {} key matches module {}", what, module);
        found = &v;
      }
    return found;
  }
};

std::optional<AdapterConfig> adapterConfig(const std::map<std::string, std::string> &meta, const std::string &where) {
  auto it = meta.find("lora_adapter_metadata");
  if (it == meta.end() || it->second.empty())
    return std::nullopt;
  const nlohmann::json j = parseJson(it->second, where + " (__metadata__ lora_adapter_metadata)");
  if (!j.is_object())
    fail(where, "lora_adapter_metadata is not a JSON object");
  std::map<std::string, nlohmann::json> f;
  for (const auto &[k, v] : j.items())
    if (startsWith(k, "transformer."))
      f[k.substr(12)] = v;
  if (f.empty())
    fail(where, "lora_adapter_metadata has no `transformer.` entries (diffusers would configure the adapter with "
         "PEFT's defaults, not the file's ranks)");
  auto flagOff = [&](const char *name) {
    auto v = f.find(name);
    if (v != f.end() && !v->second.is_null() && !(v->second.is_boolean() && !v->second.get<bool>()))
      fail(where, "lora_adapter_metadata sets {} = {}; h3c merges plain LoRA only", name, v->second.dump());
  };
  for (const char *name : {"use_dora", "use_rslora", "lora_bias", "layers_to_transform", "layers_pattern"})
    flagOff(name);
  for (const char *name : {"exclude_modules", "modules_to_save"})
    if (auto v = f.find(name); v != f.end() && !v->second.is_null() && !v->second.empty())
      fail(where, "lora_adapter_metadata sets {} = {}; h3c merges plain LoRA only", name, v->second.dump());
  if (auto v = f.find("bias"); v != f.end() && v->second != "none")
    fail(where, "lora_adapter_metadata sets bias = {}; h3c merges plain LoRA only", v->second.dump());
  AdapterConfig a;
  auto number = [&](const nlohmann::json &v, const std::string &what) {
    if (!v.is_number() || !std::isfinite(v.get<double>()))
      fail(where, "lora_adapter_metadata: {} is not a finite number: {}", what, v.dump());
    return v.get<double>();
  };
  if (!f.count("r") || !f.count("lora_alpha"))
    fail(where, "lora_adapter_metadata lacks transformer.r or transformer.lora_alpha");
  if (!f["r"].is_number_integer())
    fail(where, "lora_adapter_metadata: r is not an integer: {}", f["r"].dump());
  a.r = f["r"].get<int64_t>();
  a.alpha = number(f["lora_alpha"], "lora_alpha");
  for (auto [name, dst] : {std::pair{"rank_pattern", &a.rankPattern}, std::pair{"alpha_pattern", &a.alphaPattern}}) {
    auto v = f.find(name);
    if (v == f.end() || v->second.is_null())
      continue;
    if (!v->second.is_object())
      fail(where, "lora_adapter_metadata: {} is not an object", name);
    for (const auto &[p, x] : v->second.items()) {
      const std::string path = startsWith(p, "^") ? p.substr(1) : p;
      if (path.empty() || !std::all_of(path.begin(), path.end(), [](char ch) {
            return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.';
          }))
        fail(where, "lora_adapter_metadata: {} key '{}' is a regular expression; h3c matches plain module paths only",
             name, p);
      number(x, std::string(name) + " '" + p + "'");
      dst->emplace_back(p, x);
    }
  }
  if (auto v = f.find("target_modules"); v != f.end() && !(v->second == "all-linear")) {
    if (!v->second.is_array())
      fail(where, "lora_adapter_metadata: target_modules {} is not a list of module names", v->second.dump());
    a.targets.emplace();
    for (const auto &t : v->second) {
      if (!t.is_string())
        fail(where, "lora_adapter_metadata: target_modules holds {}", t.dump());
      a.targets->push_back(t.get<std::string>());
    }
  }
  return a;
}

// The file's tensor as exact F32 values, refusing non-finite elements (named by the key and the element).
Tensor factorToF32(const st::File &f, const st::TensorInfo &t, const std::string &where) {
  if (t.dtype != DType::F32 && t.dtype != DType::BF16 && t.dtype != DType::F16)
    fail(where, "`{}`: dtype {}; LoRA factors must be F32, BF16 or F16", t.name, dtypeName(t.dtype));
  if (t.shape.size() != 2)
    fail(where, "`{}`: shape {}; a LoRA factor is a matrix", t.name, shapeText(t.shape));
  Tensor out = Tensor::zeros(DType::F32, t.shape);
  const uint8_t *p = f.data(t);
  float *dst = reinterpret_cast<float *>(out.bytes.data());
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = float(elementAsDouble(t.dtype, p, i));
    if (!std::isfinite(v))
      fail(where, "`{}`: element {} is {} (LoRA factors must be finite)", t.name, i, v);
    dst[i] = v;
  }
  return out;
}

double alphaValue(const st::File &f, const st::TensorInfo &t, const std::string &where) {
  if (t.dtype != DType::F32 && t.dtype != DType::BF16 && t.dtype != DType::F16 && t.dtype != DType::F64)
    fail(where, "`{}`: dtype {}; an alpha must be a float scalar", t.name, dtypeName(t.dtype));
  if (t.numel() != 1)
    fail(where, "`{}`: shape {}; an alpha is one number", t.name, shapeText(t.shape));
  const double v = elementAsDouble(t.dtype, f.data(t), 0);
  if (!std::isfinite(v))
    fail(where, "`{}` is {} (an alpha must be finite)", t.name, v);
  return v;
}

} // namespace

LoraAdapter readLora(const fs::path &given, const h3::Config &c) {
  const fs::path path = resolveFile(given);
  const std::string where = path.string();
  const st::File file(path);
  std::vector<std::string> keys;
  for (const auto &t : file.tensors())
    keys.push_back(t.name);
  std::sort(keys.begin(), keys.end());
  if (keys.empty())
    fail(where, "the file holds no tensors (no LoRA)");
  for (const std::string &k : keys) {
    if (k.find("dora_scale") != std::string::npos)
      fail(where, "`{}`: a DoRA magnitude; h3c cannot apply DoRA adapters (diffusers drops these keys and applies "
           "the rest as a plain LoRA, which is not the adapter that was trained)", k);
    if (startsWith(k, "transformer_ref."))
      fail(where, "`{}`: a LoRA for the `transformer_ref` partition; h3c runs one partition (`transformer`)", k);
  }
  const Layout layout = recognize(keys, where);

  // Alphas (lora_state_dict): a module's own `.alpha`; else diffusers' adapter metadata; else a `__metadata__`
  // alpha when the file has no `.alpha` at all; else alpha = rank.
  const bool alphaTensors = std::any_of(keys.begin(), keys.end(), [](const std::string &k) { return endsWith(k, ".alpha"); });
  const auto &meta = file.header().metadata;
  const std::optional<AdapterConfig> adapter = adapterConfig(meta, where);
  if (adapter && alphaTensors)
    fail(where, "the file has both per-module `.alpha` tensors and lora_adapter_metadata (diffusers would apply "
         "both); refused");
  std::optional<double> networkAlpha;
  if (auto it = meta.find("alpha"); it != meta.end() && !alphaTensors) {
    networkAlpha = parseDecimal(it->second);
    if (!networkAlpha)
      fail(where, "the `__metadata__` alpha '{}' is not a finite decimal number (diffusers ignores it with a "
           "warning and loads at alpha = rank); refused", it->second);
  }

  const auto weights = linearWeights(c);
  std::map<std::string, LoraModule> modules;
  std::map<std::string, std::string> targetKey;  // target -> the file key it came from (duplicate messages)
  const int64_t headDim = c.attention_head_dim;
  for (const auto &[module, keysOf] : layout.pairs) {
    if (keysOf.downKey.empty() || keysOf.upKey.empty()) {
      const std::string &have = keysOf.downKey.empty() ? (keysOf.upKey.empty() ? keysOf.alphaKey : keysOf.upKey)
                                                        : keysOf.downKey;
      fail(where, "`{}`: module {} has no {} in the file", have, module, keysOf.downKey.empty() ? "lora_A / lora_down" : "lora_B / lora_up");
    }
    const st::TensorInfo &dInfo = *file.find(keysOf.downKey), &uInfo = *file.find(keysOf.upKey);
    Tensor down = factorToF32(file, dInfo, where), up = factorToF32(file, uInfo, where);
    const int64_t rank = down.shape[0];
    if (rank < 1 || up.shape[1] != rank)
      fail(where, "`{}` {} and `{}` {}: lora_A is [rank, in] and lora_B [out, rank] with the same rank >= 1",
           keysOf.downKey, shapeText(down.shape), keysOf.upKey, shapeText(up.shape));
    const SourceModule &src = layout.sources.at(module);

    // The diffusers modules and their lora_B (rows of `up`, in order).
    std::vector<std::pair<std::string, std::vector<int64_t>>> parts;  // (module, source rows of up)
    const int64_t rows = up.shape[0];
    if (src.split == Split::Qkv) {
      if (rows % 3 != 0)
        fail(where, "`{}`: {} output rows, not divisible by 3; not a fused MiniMax-H3 qkv", keysOf.upKey, rows);
      if (layout.diffsynth && rows % (3 * headDim) != 0)
        fail(where, "`{}`: {} output rows, not a multiple of 3 * head_dim ({}); not a per-head interleaved qkv",
             keysOf.upKey, rows, 3 * headDim);
      const int64_t third = rows / 3;
      const char *names[] = {"to_q", "to_k", "to_v"};
      for (int64_t s = 0; s < 3; ++s) {
        std::vector<int64_t> from(static_cast<size_t>(third));
        for (int64_t r = 0; r < third; ++r)
          // DiffSynth: [head h: q k v] -> [q_all; k_all; v_all]; row (s, h, d) came from h * 3D + s * D + d.
          from[size_t(r)] = layout.diffsynth ? (r / headDim) * 3 * headDim + s * headDim + r % headDim : s * third + r;
        parts.emplace_back(src.target + "." + names[s], std::move(from));
      }
    } else if (src.split == Split::Fc1) {
      if (rows % 2 != 0)
        fail(where, "`{}`: {} output rows, not even; not a fused MiniMax-H3 SwiGLU projection", keysOf.upKey, rows);
      std::vector<int64_t> from(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r)
        from[size_t(r)] = r < rows / 2 ? rows / 2 + r : r - rows / 2;  // [gate; value] -> [value; gate]
      parts.emplace_back(src.target, std::move(from));
    } else {
      std::vector<int64_t> from(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r)
        from[size_t(r)] = r;
      parts.emplace_back(src.target, std::move(from));
    }

    for (auto &part : parts) {
      // Named references, not a structured binding: the lambdas below capture `target` (C++17 does not let a lambda
      // capture a structured binding; clang refuses it).
      const std::string &target = part.first;
      std::vector<int64_t> &from = part.second;
      const std::string weight = target + ".weight";
      auto w = weights.find(weight);
      if (w == weights.end())
        fail(where, "`{}`: its module {} is not a linear layer of this MiniMax-H3 config", keysOf.downKey, target);
      const int64_t out = w->second[0], in = w->second[1];
      if (down.shape[1] != in || int64_t(from.size()) != out)
        fail(where, "`{}` {} / `{}` {}: {} is [{}, {}] (its LoRA needs lora_A [rank, {}] and {} lora_B rows, has "
             "{})", keysOf.downKey, shapeText(down.shape), keysOf.upKey, shapeText(up.shape), weight, out, in, in,
             out, from.size());
      LoraModule m;
      m.target = weight;
      m.rank = rank;
      m.down = down;
      m.up = Tensor::zeros(DType::F32, {out, rank});
      for (int64_t r = 0; r < out; ++r)
        std::memcpy(m.up.bytes.data() + 4 * r * rank, up.bytes.data() + 4 * from[size_t(r)] * rank, size_t(4 * rank));
      if (!keysOf.alphaKey.empty()) {
        m.alpha = alphaValue(file, *file.find(keysOf.alphaKey), where);
      } else if (adapter) {
        if (adapter->targets && std::none_of(adapter->targets->begin(), adapter->targets->end(),
                                             [&](const std::string &t) { return AdapterConfig::matches(t, target); }))
          fail(where, "`{}`: lora_adapter_metadata's target_modules do not cover {} (diffusers would not load it)",
               keysOf.downKey, target);
        const nlohmann::json *r = AdapterConfig::lookup(adapter->rankPattern, target, where, "rank_pattern");
        const double wantRank = r ? r->get<double>() : double(adapter->r);
        if (wantRank != double(rank))
          fail(where, "`{}`: lora_adapter_metadata gives module {} rank {}, its factors have rank {}", keysOf.downKey,
               target, wantRank, rank);
        const nlohmann::json *a = AdapterConfig::lookup(adapter->alphaPattern, target, where, "alpha_pattern");
        m.alpha = a ? a->get<double>() : adapter->alpha;
      } else {
        m.alpha = networkAlpha ? *networkAlpha : double(rank);
      }
      if (auto [it, fresh] = targetKey.emplace(weight, keysOf.downKey); !fresh)
        fail(where, "`{}` and `{}` both adapt {}", it->second, keysOf.downKey, weight);
      modules.emplace(weight, std::move(m));
    }
  }

  LoraAdapter a;
  a.path = given.string();
  a.sha256 = sha256File(path);
  a.format = layout.format;
  for (auto &[name, m] : modules)
    a.modules.push_back(std::move(m));
  return a;
}

LoraSpec parseLoraSpec(const std::string &spec) {
  LoraSpec l{spec, 1.0};
  const size_t colon = spec.rfind(':');
  if (colon == std::string::npos || colon == 0) return l;
  const std::string tail = spec.substr(colon + 1);
  char *end = nullptr;
  const double v = std::strtod(tail.c_str(), &end);
  if (!tail.empty() && end && *end == '\0' && std::isfinite(v)) l = {spec.substr(0, colon), v};
  return l;
}

} // namespace h3c::rt
