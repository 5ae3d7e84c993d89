// LoRA files and the host merge (runtime/lora.h): small files in every layout diffusers reads for MiniMax-H3, written
// with the project's safetensors writer for the tiny config, land on the targets, ranks, alphas and factor rows that
// diffusers' conversion rules give (the rows checked against index formulas written here); refusals name the key and
// the file; the merge equals the contract's float sequence computed here element by element (and is within rounding
// of fp64), is independent of the thread count, and stacks adapters in order.
#include "tool.h"
#include "h3c/models/config.h"
#include "h3c/runtime/lora.h"
#include "h3c/support/dtype.h"
#include "h3c/support/error.h"
#include "h3c/support/safetensors.h"
#include "h3c/support/sha256.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <vector>

using namespace h3c;
using namespace h3c::rt;
using h3c::testtool::TempDir;

namespace {

const h3::Config &tiny() {
  static const h3::Config c = h3::namedConfig("tiny");
  return c;
}

// One tensor to write: values as floats (stored in `dtype`: exact for the values used here) or raw bytes.
struct T {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<float> values;
  std::vector<uint8_t> raw;  // used instead of `values` when not empty
};

std::vector<uint8_t> encode(const T &t) {
  if (!t.raw.empty())
    return t.raw;
  std::vector<uint8_t> b(t.values.size() * dtypeSize(t.dtype));
  for (size_t i = 0; i < t.values.size(); ++i) {
    if (t.dtype == DType::F32) {
      std::memcpy(b.data() + 4 * i, &t.values[i], 4);
    } else if (t.dtype == DType::BF16) {
      const uint16_t h = floatToBf16(t.values[i]);
      std::memcpy(b.data() + 2 * i, &h, 2);
    } else if (t.dtype == DType::F64) {
      const double d = t.values[i];
      std::memcpy(b.data() + 8 * i, &d, 8);
    } else {
      ADD_FAILURE() << "encode: dtype " << dtypeName(t.dtype);
    }
  }
  return b;
}

void writeFile(const std::filesystem::path &path, const std::vector<T> &ts,
               const std::map<std::string, std::string> &meta = {}) {
  std::vector<st::TensorDecl> decls;
  std::map<std::string, std::vector<uint8_t>> bytes;
  for (const T &t : ts) {
    decls.push_back({t.name, t.dtype, t.shape});
    bytes[t.name] = encode(t);
  }
  st::Writer w(path, decls, meta);
  for (const auto &info : w.order())
    w.write(info.name, bytes[info.name].data(), bytes[info.name].size());
  w.commit();
}

// Distinct values per tensor, exact in BF16 (8 significant bits) and in F32: k/64 for k in [-127, 127], no zeros.
std::vector<float> pattern(int64_t n, int seed) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int k = int((i * 37 + seed * 11) % 127) + 1;
    v[size_t(i)] = float((i + seed) % 2 ? k : -k) / 64.0f;
  }
  return v;
}

T mat(const std::string &name, int64_t rows, int64_t cols, int seed, DType dtype = DType::F32) {
  return T{name, dtype, {rows, cols}, pattern(rows * cols, seed), {}};
}
T scalar(const std::string &name, float v, DType dtype = DType::F32) { return T{name, dtype, {}, {v}, {}}; }

const LoraModule &module(const LoraAdapter &a, const std::string &target) {
  for (const auto &m : a.modules)
    if (m.target == target)
      return m;
  static LoraModule none;
  ADD_FAILURE() << "no module " << target;
  return none;
}

float at(const Tensor &t, int64_t r, int64_t c) {
  EXPECT_EQ(t.dtype, DType::F32);
  float f;
  std::memcpy(&f, t.bytes.data() + 4 * (r * t.shape[1] + c), 4);
  return f;
}

// Factor checks: module m's down equals `down` (its values), and up row r equals source row from(r) of `up`.
void expectDown(const LoraModule &m, const std::vector<float> &down) {
  ASSERT_EQ(m.down.numel(), int64_t(down.size())) << m.target;
  for (int64_t i = 0; i < m.down.numel(); ++i)
    ASSERT_EQ(m.down.getFloat(i), down[size_t(i)]) << m.target << " down element " << i;
}
template <typename F>
void expectUpRows(const LoraModule &m, const std::vector<float> &up, int64_t rank, F from) {
  for (int64_t r = 0; r < m.up.shape[0]; ++r)
    for (int64_t k = 0; k < rank; ++k)
      ASSERT_EQ(at(m.up, r, k), up[size_t(from(r) * rank + k)]) << m.target << " up row " << r << " col " << k;
}

std::vector<std::string> targets(const LoraAdapter &a) {
  std::vector<std::string> t;
  for (const auto &m : a.modules)
    t.push_back(m.target);
  return t;
}

} // namespace

// The tiny config: hidden 24, 2 heads of 16 (inner 32), ffn 32, time_embed_dim 16, 2 + 2 blocks.

TEST(LoraRead, DiffusersLayoutWithDtypesFolderAndSha) {
  TempDir tmp("h3c_lora");
  const int64_t r = 3;
  // F16 lora_A of proj_in ([24, 16] weight): halves given by their bits, with their exact values.
  const uint16_t halves[] = {0x3C00, 0xC000, 0x0001, 0x7BFF, 0x3555, 0x8400, 0x03FF, 0x0000};
  const float halfValues[] = {1.0f, -2.0f, 5.9604644775390625e-08f, 65504.0f, 0.333251953125f,
                              -6.103515625e-05f, 6.0975551605224609375e-05f, 0.0f};
  T f16{"transformer.proj_in.lora_A.weight", DType::F16, {2, 16}, {}, {}};
  std::vector<float> f16Values;
  for (int i = 0; i < 32; ++i) {
    const uint16_t h = halves[i % 8];
    f16.raw.push_back(uint8_t(h & 0xFF));
    f16.raw.push_back(uint8_t(h >> 8));
    f16Values.push_back(halfValues[i % 8]);
  }
  const T qA = mat("transformer.transformer_blocks.1.attn.to_q.lora_A.weight", r, 24, 1);
  const T qB = mat("transformer.transformer_blocks.1.attn.to_q.lora_B.weight", 32, r, 2, DType::BF16);
  writeFile(tmp.dir / "pytorch_lora_weights.safetensors",
            {qA, qB, f16, mat("transformer.proj_in.lora_B.weight", 24, 2, 3)});
  // A folder holding one file reads that file; path is as given, sha256 is the file's.
  const LoraAdapter a = readLora(tmp.dir, tiny());
  EXPECT_EQ(a.path, tmp.dir.string());
  EXPECT_EQ(a.sha256, sha256File(tmp.dir / "pytorch_lora_weights.safetensors"));
  EXPECT_EQ(a.format, "diffusers");
  EXPECT_EQ(targets(a), (std::vector<std::string>{"proj_in.weight", "transformer_blocks.1.attn.to_q.weight"}));
  const LoraModule &q = module(a, "transformer_blocks.1.attn.to_q.weight");
  EXPECT_EQ(q.rank, r);
  EXPECT_EQ(q.alpha, double(r));  // alpha-less: alpha = rank
  EXPECT_EQ(q.down.dtype, DType::F32);
  EXPECT_EQ(q.down.shape, (std::vector<int64_t>{r, 24}));
  EXPECT_EQ(q.up.shape, (std::vector<int64_t>{32, r}));
  expectDown(q, qA.values);
  expectUpRows(q, qB.values, r, [](int64_t row) { return row; });
  const LoraModule &p = module(a, "proj_in.weight");
  EXPECT_EQ(p.rank, 2);
  expectDown(p, f16Values);

  // A `__metadata__` alpha is every module's alpha (the file has no `.alpha` tensors).
  writeFile(tmp.dir / "pytorch_lora_weights.safetensors", {qA, qB}, {{"alpha", " 8.5 "}, {"format", "pt"}});
  EXPECT_EQ(readLora(tmp.dir / "pytorch_lora_weights.safetensors", tiny()).modules.at(0).alpha, 8.5);
}

TEST(LoraRead, PeftLayout) {
  TempDir tmp("h3c_lora");
  const T a = mat("transformer_blocks.0.ff.net.2.lora_A.default.weight", 4, 32, 5);
  const T b = mat("transformer_blocks.0.ff.net.2.lora_B.default.weight", 24, 4, 6);
  const T c = mat("token_refiner.refiner_blocks.1.attn.to_v.lora_A.weight", 2, 24, 7);  // without the infix
  const T d = mat("token_refiner.refiner_blocks.1.attn.to_v.lora_B.default.weight", 32, 2, 8);
  writeFile(tmp / "peft.safetensors", {a, b, c, d});
  const LoraAdapter l = readLora(tmp / "peft.safetensors", tiny());
  EXPECT_EQ(l.format, "peft");
  EXPECT_EQ(targets(l), (std::vector<std::string>{"token_refiner.refiner_blocks.1.attn.to_v.weight",
                                                  "transformer_blocks.0.ff.net.2.weight"}));
  const LoraModule &m = module(l, "transformer_blocks.0.ff.net.2.weight");
  EXPECT_EQ(m.rank, 4);
  EXPECT_EQ(m.alpha, 4.0);
  expectDown(m, a.values);
  expectUpRows(m, b.values, 4, [](int64_t row) { return row; });
}

// kohya under diffusion_model.: fused qkv split in thirds sharing lora_A, fc1's halves swapped, `.alpha` kept as the
// module's alpha with the factors as stored, the standalone renames.
TEST(LoraRead, KohyaLayoutSplitsQkvSwapsFc1AndKeepsAlpha) {
  TempDir tmp("h3c_lora");
  const int64_t r = 3;
  const T qkvDown = mat("diffusion_model.blocks.0.attn.qkv_proj.lora_down.weight", r, 24, 1);
  const T qkvUp = mat("diffusion_model.blocks.0.attn.qkv_proj.lora_up.weight", 96, r, 2, DType::BF16);
  const T fc1Down = mat("diffusion_model.blocks.1.mlp.fc1.lora_down.weight", 2, 24, 3);
  const T fc1Up = mat("diffusion_model.blocks.1.mlp.fc1.lora_up.weight", 64, 2, 4);
  writeFile(tmp / "kohya.safetensors",
            {qkvDown, qkvUp, scalar("diffusion_model.blocks.0.attn.qkv_proj.alpha", 4.0f), fc1Down, fc1Up,
             mat("diffusion_model.final_layer.video_out.lora_down.weight", 1, 24, 5),
             mat("diffusion_model.final_layer.video_out.lora_up.weight", 16, 1, 6),
             scalar("diffusion_model.final_layer.video_out.alpha", 0.5f, DType::BF16),
             mat("diffusion_model.token_refiner.blocks.0.attn.out_proj.lora_down.weight", 2, 32, 7),
             mat("diffusion_model.token_refiner.blocks.0.attn.out_proj.lora_up.weight", 24, 2, 8)},
            {{"alpha", "100"}});  // ignored: the file has `.alpha` tensors
  const LoraAdapter a = readLora(tmp / "kohya.safetensors", tiny());
  EXPECT_EQ(a.format, "kohya");
  EXPECT_EQ(targets(a), (std::vector<std::string>{
                            "proj_out.weight", "token_refiner.refiner_blocks.0.attn.to_out.0.weight",
                            "transformer_blocks.0.attn.to_k.weight", "transformer_blocks.0.attn.to_q.weight",
                            "transformer_blocks.0.attn.to_v.weight", "transformer_blocks.1.ff.net.0.proj.weight"}));
  const char *qkv[] = {"to_q", "to_k", "to_v"};
  for (int64_t s = 0; s < 3; ++s) {
    const LoraModule &m = module(a, std::string("transformer_blocks.0.attn.") + qkv[s] + ".weight");
    EXPECT_EQ(m.rank, r);
    EXPECT_EQ(m.alpha, 4.0);
    expectDown(m, qkvDown.values);  // shared, unscaled
    expectUpRows(m, qkvUp.values, r, [s](int64_t row) { return s * 32 + row; });
  }
  const LoraModule &fc1 = module(a, "transformer_blocks.1.ff.net.0.proj.weight");
  EXPECT_EQ(fc1.alpha, 2.0);  // no `.alpha` for this module: alpha = rank, not the metadata's 100
  expectDown(fc1, fc1Down.values);
  expectUpRows(fc1, fc1Up.values, 2, [](int64_t row) { return row < 32 ? row + 32 : row - 32; });
  EXPECT_EQ(module(a, "proj_out.weight").alpha, 0.5);
  EXPECT_EQ(module(a, "token_refiner.refiner_blocks.0.attn.to_out.0.weight").alpha, 2.0);
}

TEST(LoraRead, MusubiLayout) {
  TempDir tmp("h3c_lora");
  writeFile(tmp / "musubi.safetensors",
            {mat("lora_unet_blocks_1_attn_qkv_proj.lora_down.weight", 2, 24, 1),
             mat("lora_unet_blocks_1_attn_qkv_proj.lora_up.weight", 96, 2, 2),
             scalar("lora_unet_blocks_1_attn_qkv_proj.alpha", 1.0f),
             mat("lora_unet_time_embedder_proj_in.lora_down.weight", 1, 8, 3),
             mat("lora_unet_time_embedder_proj_in.lora_up.weight", 24, 1, 4),
             mat("lora_unet_token_refiner_blocks_1_mlp_fc2.lora_down.weight", 2, 32, 5),
             mat("lora_unet_token_refiner_blocks_1_mlp_fc2.lora_up.weight", 24, 2, 6),
             mat("lora_unet_final_layer_adaln_proj_linear.lora_down.weight", 2, 16, 7),
             mat("lora_unet_final_layer_adaln_proj_linear.lora_up.weight", 48, 2, 8),
             mat("lora_unet_blocks_0_adaln_proj_linear.lora_down.weight", 2, 16, 9),
             mat("lora_unet_blocks_0_adaln_proj_linear.lora_up.weight", 432, 2, 10),
             mat("lora_unet_audio_patch_proj.lora_down.weight", 1, 6, 11),
             mat("lora_unet_audio_patch_proj.lora_up.weight", 24, 1, 12)});
  const LoraAdapter a = readLora(tmp / "musubi.safetensors", tiny());
  EXPECT_EQ(a.format, "musubi");
  EXPECT_EQ(targets(a), (std::vector<std::string>{
                            "audio_proj_in.weight", "norm_out.linear.weight", "time_embedder.linear_1.weight",
                            "token_refiner.refiner_blocks.1.ff.net.2.weight", "transformer_blocks.0.adaln_proj.linear.weight",
                            "transformer_blocks.1.attn.to_k.weight", "transformer_blocks.1.attn.to_q.weight",
                            "transformer_blocks.1.attn.to_v.weight"}));
  EXPECT_EQ(module(a, "transformer_blocks.1.attn.to_v.weight").alpha, 1.0);
  EXPECT_EQ(module(a, "norm_out.linear.weight").alpha, 2.0);
}

// DiffSynth: `.default.` over the original names, qkv interleaved per head ([h: q k v]), de-interleaved with the
// config's head_dim (16 in tiny) before the thirds.
TEST(LoraRead, DiffSynthDeinterleavesQkvPerHead) {
  TempDir tmp("h3c_lora");
  const int64_t r = 2, D = 16;
  const T up = mat("blocks.0.attn.qkv_proj.lora_B.default.weight", 96, r, 2);
  writeFile(tmp / "ds.safetensors", {mat("blocks.0.attn.qkv_proj.lora_A.default.weight", r, 24, 1), up,
                                     mat("blocks.0.mlp.fc2.lora_A.default.weight", r, 32, 3),
                                     mat("blocks.0.mlp.fc2.lora_B.default.weight", 24, r, 4)});
  const LoraAdapter a = readLora(tmp / "ds.safetensors", tiny());
  EXPECT_EQ(a.format, "diffsynth");
  const char *qkv[] = {"to_q", "to_k", "to_v"};
  for (int64_t s = 0; s < 3; ++s) {
    const LoraModule &m = module(a, std::string("transformer_blocks.0.attn.") + qkv[s] + ".weight");
    // Row h * D + d of projection s came from row h * 3D + s * D + d.
    expectUpRows(m, up.values, r, [&](int64_t row) { return (row / D) * 3 * D + s * D + row % D; });
  }
  EXPECT_EQ(module(a, "transformer_blocks.0.ff.net.2.weight").alpha, 2.0);

  // The same names without the infix: the original layout, thirds without the de-interleave.
  writeFile(tmp / "orig.safetensors", {mat("blocks.0.attn.qkv_proj.lora_A.weight", r, 24, 1),
                                       T{"blocks.0.attn.qkv_proj.lora_B.weight", DType::F32, {96, r}, up.values, {}}});
  const LoraAdapter o = readLora(tmp / "orig.safetensors", tiny());
  EXPECT_EQ(o.format, "original");
  expectUpRows(module(o, "transformer_blocks.0.attn.to_k.weight"), up.values, r,
               [](int64_t row) { return 32 + row; });
}

// diffusers' own adapter metadata (lora_adapter_metadata, the LoraConfig as JSON): r, lora_alpha and the patterns.
TEST(LoraRead, AdapterMetadata) {
  TempDir tmp("h3c_lora");
  const std::vector<T> ts = {mat("transformer.transformer_blocks.0.attn.to_q.lora_A.weight", 3, 24, 1),
                             mat("transformer.transformer_blocks.0.attn.to_q.lora_B.weight", 32, 3, 2),
                             mat("transformer.transformer_blocks.0.attn.to_k.lora_A.weight", 3, 24, 3),
                             mat("transformer.transformer_blocks.0.attn.to_k.lora_B.weight", 32, 3, 4),
                             mat("transformer.proj_in.lora_A.weight", 2, 16, 5),
                             mat("transformer.proj_in.lora_B.weight", 24, 2, 6)};
  auto meta = [](const std::string &extra) {
    return std::map<std::string, std::string>{
        {"lora_adapter_metadata", R"({"transformer.r": 3, "transformer.lora_alpha": 6,
          "transformer.rank_pattern": {"proj_in": 2},
          "transformer.alpha_pattern": {"^transformer_blocks.0.attn.to_k": 1.5},
          "transformer.target_modules": ["to_q", "to_k", "proj_in"], "transformer.use_dora": false)" + extra + "}"},
        {"alpha", "99"}};  // the adapter metadata wins
  };
  writeFile(tmp / "m.safetensors", ts, meta(""));
  const LoraAdapter a = readLora(tmp / "m.safetensors", tiny());
  EXPECT_EQ(module(a, "transformer_blocks.0.attn.to_q.weight").alpha, 6.0);
  EXPECT_EQ(module(a, "transformer_blocks.0.attn.to_k.weight").alpha, 1.5);
  EXPECT_EQ(module(a, "proj_in.weight").alpha, 6.0);
  for (const char *bad : {R"(, "transformer.use_rslora": true)", R"(, "transformer.lora_bias": true)"}) {
    writeFile(tmp / "m.safetensors", ts, meta(bad));
    EXPECT_THROW(readLora(tmp / "m.safetensors", tiny()), Error) << bad;
  }
  // target_modules that do not cover proj_in; a rank the factors do not have.
  auto refusedWith = [&](const std::string &json, const std::string &what) {
    writeFile(tmp / "m.safetensors", ts, {{"lora_adapter_metadata", json}});
    try {
      readLora(tmp / "m.safetensors", tiny());
      ADD_FAILURE() << "accepted " << json;
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  refusedWith(R"({"transformer.r": 3, "transformer.lora_alpha": 6, "transformer.rank_pattern": {"proj_in": 2},
    "transformer.target_modules": ["to_q", "to_k"]})", "transformer.proj_in.lora_A.weight");
  refusedWith(R"({"transformer.r": 3, "transformer.lora_alpha": 6})", "module proj_in rank 3");
}

// Every refusal names the key (or the module) and the file.
TEST(LoraRead, Refusals) {
  TempDir tmp("h3c_lora");
  const std::string file = tmp / "bad.safetensors";
  auto refused = [&](const std::vector<T> &ts, const std::string &what,
                     const std::map<std::string, std::string> &meta = {}) {
    writeFile(file, ts, meta);
    try {
      readLora(file, tiny());
      ADD_FAILURE() << "accepted a file with " << ts.at(0).name << " (expected: " << what << ")";
    } catch (const Error &e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(what), std::string::npos) << msg;
      EXPECT_NE(msg.find(file), std::string::npos) << msg;
    }
  };
  const std::string q = "transformer.transformer_blocks.0.attn.to_q";
  const T qA = mat(q + ".lora_A.weight", 2, 24, 1), qB = mat(q + ".lora_B.weight", 32, 2, 2);
  // Unknown module / key.
  refused({mat("transformer.transformer_blocks.0.attn.to_z.lora_A.weight", 2, 24, 1),
           mat("transformer.transformer_blocks.0.attn.to_z.lora_B.weight", 32, 2, 2)},
          "transformer.transformer_blocks.0.attn.to_z.lora_A.weight");
  refused({qA, qB, mat("transformer.transformer_blocks.0.attn.to_q.lora_B.bias", 1, 32, 3)}, "lora_B.bias");
  refused({mat("text_encoder.layers.0.q.lora_A.weight", 2, 24, 1)}, "text_encoder.layers.0.q.lora_A.weight");
  refused({mat("transformer.transformer_blocks.2.attn.to_q.lora_A.weight", 2, 24, 1),
           mat("transformer.transformer_blocks.2.attn.to_q.lora_B.weight", 32, 2, 2)},
          "transformer_blocks.2.attn.to_q.lora_A.weight");  // tiny has 2 blocks
  refused({mat("transformer.transformer_blocks.0.norm1.lora_A.weight", 2, 24, 1),
           mat("transformer.transformer_blocks.0.norm1.lora_B.weight", 24, 2, 2)}, "norm1.lora_A.weight");
  refused({mat("token_refiner.blocks.0.adaln_proj.linear.lora_A.weight", 2, 16, 1),
           mat("token_refiner.blocks.0.adaln_proj.linear.lora_B.weight", 432, 2, 2)},
          "token_refiner.blocks.0.adaln_proj.linear.lora_A.weight");  // a refiner block has no AdaLN projection
  refused({mat("lora_unet_blocks_01_mlp_fc2.lora_down.weight", 2, 32, 1),
           mat("lora_unet_blocks_01_mlp_fc2.lora_up.weight", 24, 2, 2)}, "lora_unet_blocks_01_mlp_fc2.lora_down");
  refused({mat("lora_unet_blocks_0_mlp_fc3.lora_down.weight", 2, 32, 1)}, "lora_unet_blocks_0_mlp_fc3.lora_down");
  refused({mat("blocks.0.mlp.fc2.lora_down.weight", 2, 32, 1), mat("blocks.0.mlp.fc2.lora_up.weight", 24, 2, 2),
           mat("blocks.1.mlp.fc2.lora_A.weight", 2, 32, 3), mat("blocks.1.mlp.fc2.lora_B.weight", 24, 2, 4)},
          "blocks.1.mlp.fc2.lora_A.weight");  // kohya and lora_A names mixed
  // Shapes: in features, rank disagreement, qkv rows.
  refused({mat(q + ".lora_A.weight", 2, 25, 1), qB}, q + ".lora_A.weight");
  refused({qA, mat(q + ".lora_B.weight", 32, 3, 2)}, q + ".lora_B.weight");
  refused({qA, mat(q + ".lora_B.weight", 31, 2, 2)}, q + ".lora_A.weight");
  refused({mat("blocks.0.attn.qkv_proj.lora_A.weight", 2, 24, 1), mat("blocks.0.attn.qkv_proj.lora_B.weight", 95, 2, 2)},
          "blocks.0.attn.qkv_proj.lora_B.weight");
  refused({mat("blocks.0.attn.qkv_proj.lora_A.default.weight", 2, 24, 1),
           mat("blocks.0.attn.qkv_proj.lora_B.default.weight", 48 + 3, 2, 2)},
          "blocks.0.attn.qkv_proj.lora_B.default.weight");
  // The partition, DoRA, a lone factor, non-finite factors, dtypes, alphas.
  refused({mat("transformer_ref.transformer_blocks.0.attn.to_q.lora_A.weight", 2, 24, 1)}, "one partition");
  refused({qA, qB, T{q + ".lora_magnitude_vector.dora_scale", DType::F32, {1, 32}, pattern(32, 3), {}}},
          q + ".lora_magnitude_vector.dora_scale");
  refused({qA}, q + ".lora_A.weight");
  refused({qB}, q + ".lora_B.weight");
  refused({mat("blocks.0.mlp.fc2.lora_A.weight", 2, 32, 1), mat("blocks.0.mlp.fc2.lora_B.weight", 24, 2, 2),
           scalar("blocks.1.mlp.fc2.alpha", 2.0f)}, "blocks.1.mlp.fc2.alpha");
  T nan = qB;
  nan.dtype = DType::BF16;
  nan.values[17] = std::numeric_limits<float>::quiet_NaN();
  refused({qA, nan}, q + ".lora_B.weight`: element 17");
  T inf = qA;
  inf.values[5] = -std::numeric_limits<float>::infinity();
  refused({inf, qB}, q + ".lora_A.weight`: element 5");
  T f64 = qA;
  f64.dtype = DType::F64;
  refused({f64, qB}, q + ".lora_A.weight`: dtype F64");
  refused({mat("blocks.0.mlp.fc2.lora_A.weight", 2, 32, 1), mat("blocks.0.mlp.fc2.lora_B.weight", 24, 2, 2),
           scalar("blocks.0.mlp.fc2.alpha", std::numeric_limits<float>::infinity())}, "blocks.0.mlp.fc2.alpha");
  refused({qA, qB, scalar(q + ".alpha", 2.0f)}, q + ".alpha");  // diffusers layouts carry no alpha tensors
  refused({qA, qB}, "'0x10'", {{"alpha", "0x10"}});
  refused({qA, qB}, "'eight'", {{"alpha", "eight"}});
  // One module given twice (the peft infix and without it).
  refused({mat("transformer_blocks.0.ff.net.2.lora_A.default.weight", 2, 32, 1),
           mat("transformer_blocks.0.ff.net.2.lora_A.weight", 2, 32, 2),
           mat("transformer_blocks.0.ff.net.2.lora_B.default.weight", 24, 2, 3)},
          "transformer_blocks.0.ff.net.2.lora_A.weight");
  // A folder with two files.
  writeFile(tmp / "second.safetensors", {qA, qB});
  EXPECT_THROW(readLora(tmp.dir, tiny()), Error);
}

// ---- merge ------------------------------------------------------------------------------------------------------

namespace {

// A module with given factors (F32) for a weight [out, in].
LoraModule makeModule(const std::string &target, int64_t out, int64_t in, int64_t rank, double alpha, uint32_t seed,
                      float magnitude) {
  LoraModule m;
  m.target = target;
  m.rank = rank;
  m.alpha = alpha;
  std::vector<float> d(size_t(rank * in)), u(size_t(out * rank));
  uint32_t x = seed * 2654435761u + 1;
  auto next = [&] {
    x = x * 1664525u + 1013904223u;
    return (float(x >> 8) / float(1 << 24) - 0.5f) * magnitude;  // 24 random bits: full F32 mantissas
  };
  for (auto &v : d)
    v = next();
  for (auto &v : u)
    v = next();
  m.down = Tensor::fromFloats(DType::F32, {rank, in}, d.data());
  m.up = Tensor::fromFloats(DType::F32, {out, rank}, u.data());
  return m;
}

Tensor makeWeight(DType dtype, int64_t out, int64_t in, uint32_t seed) {
  std::vector<float> w(size_t(out * in));
  uint32_t x = seed + 7;
  for (auto &v : w) {
    x = x * 1664525u + 1013904223u;
    v = (float(x >> 8) / float(1 << 24) - 0.5f) * 0.25f;
  }
  return Tensor::fromFloats(dtype, {out, in}, w.data());
}

// The contract's sequence for one element, written out plainly (volatile: the product is rounded on its own).
float contractElement(const Tensor &w, const LoraTerms &terms, int64_t i, int64_t j) {
  float v = w.getFloat(i * w.shape[1] + j);
  for (const auto &[m, scale] : terms) {
    const float s = float(scale * m->alpha / double(m->rank));
    float acc = 0.0f;
    for (int64_t k = 0; k < m->rank; ++k)
      acc = std::fma(m->up.getFloat(i * m->rank + k), m->down.getFloat(k * w.shape[1] + j), acc);
    volatile float product = s * acc;
    v = v + product;
  }
  return w.dtype == DType::BF16 ? roundBf16(v) : v;
}

// fp64: W + sum_t scale alpha / rank * (up down)[i][j].
double exactElement(const Tensor &w, const LoraTerms &terms, int64_t i, int64_t j, double *magnitude) {
  double v = w.getFloat(i * w.shape[1] + j), mag = std::fabs(v);
  for (const auto &[m, scale] : terms) {
    double dot = 0, absDot = 0;
    for (int64_t k = 0; k < m->rank; ++k) {
      const double p = double(m->up.getFloat(i * m->rank + k)) * m->down.getFloat(k * w.shape[1] + j);
      dot += p;
      absDot += std::fabs(p);
    }
    const double f = scale * m->alpha / double(m->rank);
    v += f * dot;
    mag += std::fabs(f) * absDot;
  }
  *magnitude = mag;
  return v;
}

void expectContract(const Tensor &w, const LoraTerms &terms, const Tensor &merged) {
  ASSERT_EQ(merged.dtype, w.dtype);
  ASSERT_EQ(merged.shape, w.shape);
  int64_t mismatches = 0;
  for (int64_t i = 0; i < w.shape[0]; ++i)
    for (int64_t j = 0; j < w.shape[1]; ++j) {
      const float got = merged.getFloat(i * w.shape[1] + j), want = contractElement(w, terms, i, j);
      if (std::memcmp(&got, &want, 4) != 0 && ++mismatches <= 5)
        ADD_FAILURE() << "element [" << i << ", " << j << "]: " << got << " != the contract's " << want;
      double mag;
      const double exact = exactElement(w, terms, i, j, &mag);
      // The output rounding (half an ulp: 2^-8 relative for bf16, 2^-24 for F32) plus the F32 sums' rounding.
      const double unit = w.dtype == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -24);
      EXPECT_LE(std::fabs(double(got) - exact), unit * std::fabs(exact) * 1.01 + 64 * std::ldexp(1.0, -24) * mag)
          << "element [" << i << ", " << j << "]";
    }
  EXPECT_EQ(mismatches, 0);
}

} // namespace

TEST(LoraMerge, EqualsTheContractSequenceBf16AndF32) {
  for (DType dt : {DType::BF16, DType::F32}) {
    const Tensor w = makeWeight(dt, 37, 29, 1);
    const LoraModule a = makeModule("x.weight", 37, 29, 5, 4.0, 1, 0.5f), b = makeModule("x.weight", 37, 29, 3, 3.0, 2, 2.0f);
    const LoraTerms terms = {{&a, 0.7}, {&b, -1.3}};
    expectContract(w, terms, mergeLora(w, terms, 2));
  }
}

// w + s * acc is a rounded multiply then a rounded add: a fused form would give 2^-11 + 2^-13 + 2^-24 here.
TEST(LoraMerge, ProductAndSumAreRoundedSeparately) {
  const float u = 1.0f + std::ldexp(1.0f, -12);
  LoraModule m;
  m.target = "x.weight";
  m.rank = 1;
  m.alpha = 1;
  m.down = Tensor::fromFloats(DType::F32, {1, 1}, &u);
  m.up = Tensor::fromFloats(DType::F32, {1, 1}, &u);
  const float minusOne = -1.0f;
  const Tensor w = Tensor::fromFloats(DType::F32, {1, 1}, &minusOne);
  // acc = fma(u, u, 0) = 1 + 2^-11 (a tie, to even); s * acc = 1 + 2^-11 + 2^-13 (a tie, to even); + -1.
  const Tensor merged = mergeLora(w, {{&m, 1.0 + std::ldexp(1.0, -13)}}, 1);
  EXPECT_EQ(merged.getFloat(0), std::ldexp(1.0f, -11) + std::ldexp(1.0f, -13));
  EXPECT_EQ(loraTermScale(m, 0.1), float(0.1 * 1.0 / 1.0));
  LoraModule third = m;
  third.alpha = 3;
  third.rank = 7;
  EXPECT_EQ(loraTermScale(third, 0.1), float(0.1 * 3.0 / 7.0));
}

TEST(LoraMerge, IndependentOfThreads) {
  const Tensor w = makeWeight(DType::BF16, 203, 67, 3);
  const LoraModule a = makeModule("x.weight", 203, 67, 8, 8.0, 3, 1.0f);
  const LoraTerms terms = {{&a, 1.0}};
  const Tensor one = mergeLora(w, terms, 1), three = mergeLora(w, terms, 3), all = mergeLora(w, terms, 0);
  EXPECT_EQ(one.bytes, three.bytes);
  EXPECT_EQ(one.bytes, all.bytes);
  EXPECT_NE(one.bytes, w.bytes);
}

// Two adapters read from files (diffusers, kohya) onto one weight, merged in the given order.
TEST(LoraMerge, TwoAdaptersStacked) {
  TempDir tmp("h3c_lora");
  writeFile(tmp / "a.safetensors", {mat("transformer.transformer_blocks.0.attn.to_k.lora_A.weight", 3, 24, 1),
                                    mat("transformer.transformer_blocks.0.attn.to_k.lora_B.weight", 32, 3, 2)},
            {{"alpha", "1.5"}});
  writeFile(tmp / "b.safetensors", {mat("blocks.0.attn.qkv_proj.lora_down.weight", 2, 24, 3),
                                    mat("blocks.0.attn.qkv_proj.lora_up.weight", 96, 2, 4),
                                    scalar("blocks.0.attn.qkv_proj.alpha", 8.0f)});
  const LoraAdapter a = readLora(tmp / "a.safetensors", tiny()), b = readLora(tmp / "b.safetensors", tiny());
  const std::string target = "transformer_blocks.0.attn.to_k.weight";
  const Tensor w = makeWeight(DType::BF16, 32, 24, 5);
  const LoraTerms ab = {{&module(a, target), 0.8}, {&module(b, target), 0.6}};
  const LoraTerms ba = {{&module(b, target), 0.6}, {&module(a, target), 0.8}};
  expectContract(w, ab, mergeLora(w, ab));
  expectContract(w, ba, mergeLora(w, ba));
}

TEST(LoraMerge, RefusesNonFiniteResultsAndMisfits) {
  // bf16's largest finite value plus a positive term rounds to +Inf.
  std::vector<float> big(6, 0.5f);
  big[4] = bf16ToFloat(0x7F7F);
  const Tensor w = Tensor::fromFloats(DType::BF16, {2, 3}, big.data());
  const LoraModule m = makeModule("blk.weight", 2, 3, 1, 1.0, 9, 1.0f);
  LoraModule up = m;
  float *u = reinterpret_cast<float *>(up.up.bytes.data()), *d = reinterpret_cast<float *>(up.down.bytes.data());
  u[0] = u[1] = 1.0f;
  d[0] = d[1] = d[2] = 1.0f;
  try {
    mergeLora(w, {{&up, std::ldexp(1.0, 120)}});
    ADD_FAILURE() << "a merge to +Inf was accepted";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("blk.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[1, 1] is inf"), std::string::npos) << e.what();
  }
  EXPECT_EQ(mergeLora(w, {}).bytes, w.bytes);  // no terms: W as it is
  const LoraModule other = makeModule("other.weight", 2, 3, 1, 1.0, 9, 1.0f);
  EXPECT_THROW(mergeLora(w, {{&m, 1.0}, {&other, 1.0}}), Error);  // two targets
  const LoraModule wide = makeModule("blk.weight", 2, 4, 1, 1.0, 9, 1.0f);
  EXPECT_THROW(mergeLora(w, {{&wide, 1.0}}), Error);
  EXPECT_THROW(mergeLora(w, {{&m, std::numeric_limits<double>::infinity()}}), Error);
  EXPECT_THROW(mergeLora(Tensor::zeros(DType::F64, {2, 3}), {{&m, 1.0}}), Error);
}
