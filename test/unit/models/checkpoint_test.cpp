// Checkpoints: synthetic values against the generator's formula written out again here, the native layout against
// row formulas, bitwise round trips (tiny and small, both qkv layouts), fail-closed mapping, and the h3c checkpoint
// commands' exit codes and reports.
#include "error_of.h"
#include "h3c/models/checkpoint.h"
#include "h3c/models/fingerprint.h"
#include "h3c/support/dtype.h"
#include "h3c/support/error.h"
#include "h3c/support/files.h"
#include "h3c/support/safetensors.h"
#include "h3c/support/sha256.h"

#include "tool.h"

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>

namespace fs = std::filesystem;
using namespace h3c;
using h3c::testtool::runTool;
using h3::CheckpointFormat;
using h3::QkvLayout;

namespace {

// ---- the synthetic generator, written out from its documentation (synth_rng.h), not by calling it ----------------
uint64_t refSplitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
uint64_t refFnv(const std::string &s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s)
    h = (h ^ c) * 0x100000001b3ull;
  return h;
}
float refNormal(uint64_t seed, const std::string &name, uint64_t i) {
  uint64_t key = refSplitmix(seed ^ refFnv(name));
  uint64_t h0 = refSplitmix(key + 0x9E3779B97F4A7C15ull * (2 * i));
  uint64_t h1 = refSplitmix(key + 0x9E3779B97F4A7C15ull * (2 * i + 1));
  int64_t c = int64_t((h0 >> 32) + (h0 & 0xffffffffu) + (h1 >> 32) + (h1 & 0xffffffffu)) - (int64_t(1) << 33);
  return float(double(c) * (0.02 * std::sqrt(3.0) / 4294967296.0));
}
// bf16 by "nearest representable, ties to the even pattern", found by comparing the two candidates.
uint16_t refBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t lo = uint16_t(u >> 16), hi = uint16_t(lo + 1);
  double dl = std::fabs(double(f) - double(bf16ToFloat(lo))), dh = std::fabs(double(f) - double(bf16ToFloat(hi)));
  if (dl != dh)
    return dl < dh ? lo : hi;
  return (lo & 1) ? hi : lo;
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::random_device rd;
    path = fs::temp_directory_path() / ("h3c-ck-test-" + std::to_string(rd()) + std::to_string(rd()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

using h3c::testtool::errorOf;

#define EXPECT_ERROR(stmt, text)                                                                                      \
  do {                                                                                                                \
    std::string m_ = errorOf([&] { stmt; });                                                                          \
    EXPECT_NE(m_.find(text), std::string::npos) << "message: " << m_ << "\nexpected to contain: " << (text);         \
  } while (0)


std::string q(const fs::path &p) { return "'" + p.string() + "'"; }

// Copies a model folder with edits: tensors dropped, added (zero bytes) or given another dtype (zero bytes).
struct Edit {
  std::set<std::string> drop;
  std::vector<st::TensorDecl> add;
  std::map<std::string, DType> retype;
};
void copyEdited(const fs::path &src, const fs::path &dst, const Edit &e, const std::string &prefix) {
  st::Folder f(src);
  std::vector<st::TensorDecl> decls;
  for (const auto &n : f.names()) {
    if (e.drop.count(n))
      continue;
    const auto &en = f.at(n);
    DType t = e.retype.count(n) ? e.retype.at(n) : en.info->dtype;
    decls.push_back({n, t, en.info->shape});
  }
  for (const auto &a : e.add)
    decls.push_back(a);
  fs::create_directories(dst);
  fs::copy_file(src / "config.json", dst / "config.json");
  st::writeFolder(dst, prefix, decls, st::kDefaultShardSize, {}, [&](const st::TensorInfo &info, st::Writer &w) {
    const auto *en = f.find(info.name);
    if (en && en->info->nbytes() == info.nbytes()) {
      w.append(f.data(*en), info.nbytes());
    } else {
      std::vector<uint8_t> z(info.nbytes());
      w.append(z.data(), z.size());
    }
  });
}

// Every tensor of two folders, byte for byte (same names).
void expectSameTensors(const fs::path &a, const fs::path &b) {
  st::Folder fa(a), fb(b);
  ASSERT_EQ(fa.names(), fb.names());
  for (const auto &n : fa.names()) {
    const auto &ea = fa.at(n), &eb = fb.at(n);
    ASSERT_EQ(ea.info->dtype, eb.info->dtype) << n;
    ASSERT_EQ(ea.info->shape, eb.info->shape) << n;
    ASSERT_EQ(0, std::memcmp(fa.data(ea), fb.data(eb), ea.info->nbytes())) << n;
  }
}

size_t expectedDiffusersCount(const h3::Config &c) {
  return size_t(12 * c.num_layers + 10 * c.num_refiner_layers + 18);
}
size_t expectedNativeCount(const h3::Config &c) {
  return expectedDiffusersCount(c) - 2 * size_t(c.num_layers + c.num_refiner_layers) + 1;  // + rope.inv_freq
}

} // namespace

// ---- synthetic values ---------------------------------------------------------------------------------------------

TEST(CheckpointSynth, ValuesFollowTheDocumentedGenerator) {
  TempDir t;
  const auto cfg = h3::namedConfig("tiny");
  h3::synthCheckpoint(cfg, 7, t.path / "ck", 4096);  // small shards: several files plus an index
  EXPECT_TRUE(fs::exists(t.path / "ck" / "diffusion_pytorch_model.safetensors.index.json"));
  auto ck = h3::Checkpoint::open(t.path / "ck");
  EXPECT_EQ(ck->format(), CheckpointFormat::Diffusers);
  const auto specs = h3::diffusersTensors(cfg);
  ASSERT_EQ(ck->tensors().size(), specs.size());
  ASSERT_EQ(specs.size(), expectedDiffusersCount(cfg));
  size_t normals = 0, ones = 0;
  for (const auto &s : specs) {
    const auto *got = ck->find(s.name);
    ASSERT_NE(got, nullptr) << s.name;
    EXPECT_EQ(got->dtype, s.dtype) << s.name;
    EXPECT_EQ(got->shape, s.shape) << s.name;
    auto b = ck->bytes(s.name);
    EXPECT_TRUE(b.zeroCopy()) << s.name;
    const bool isNorm = s.name.find("norm") != std::string::npos && s.name.find("norm_out.linear") == std::string::npos;
    for (int64_t i = 0; i < s.numel(); ++i) {
      float want = isNorm ? 1.0f : refNormal(7, s.name, uint64_t(i));
      if (s.dtype == DType::BF16) {
        uint16_t v;
        std::memcpy(&v, b.data + 2 * i, 2);
        ASSERT_EQ(v, refBf16(want)) << s.name << "[" << i << "]";
      } else {
        float v;
        std::memcpy(&v, b.data + 4 * i, 4);
        ASSERT_EQ(v, want) << s.name << "[" << i << "]";
      }
    }
    (isNorm ? ones : normals)++;
  }
  EXPECT_EQ(ones, size_t(2 * (cfg.num_layers + cfg.num_refiner_layers) * 2 + 2));  // norm1/2, norm_q/k; 2 finals
  nlohmann::json cj = nlohmann::json::parse(readFile(t.path / "ck" / "config.json"));
  EXPECT_EQ(cj["_class_name"], "MiniMaxH3Transformer3DModel");
  EXPECT_EQ(cj["num_attention_heads"], 2);
  EXPECT_EQ(cj["rope_freq_dim"], 2);
}

TEST(CheckpointSynth, ScaleAndRange) {
  h3::TensorSpec s{"transformer_blocks.3.attn.to_q.weight", {512, 512}, DType::F32};
  std::vector<float> v(size_t(s.numel()));
  h3::synthTensor(s, 1234, v.data());
  double sum = 0, sq = 0, mx = 0;
  for (float x : v) {
    sum += x;
    sq += double(x) * x;
    mx = std::max(mx, std::fabs(double(x)));
  }
  const double n = double(v.size());
  EXPECT_NEAR(sum / n, 0.0, 1e-4);
  EXPECT_NEAR(std::sqrt(sq / n), 0.02, 0.0005);
  EXPECT_LT(mx, 2 * std::sqrt(3.0) * 0.02);
  // Pieces equal the whole.
  std::vector<float> piece(1000);
  h3::synthTensorRange(s, 1234, 70000, 71000, piece.data());
  EXPECT_EQ(0, std::memcmp(piece.data(), v.data() + 70000, 4000));
  EXPECT_EQ(h3::synthValue(s, 1234, 70001), refNormal(1234, s.name, 70001));
  EXPECT_ERROR(h3::synthTensorRange(s, 1, 10, 5, piece.data()), "element range [10, 5)");
  h3::TensorSpec bad{"x", {2}, DType::I64};
  int64_t d[2];
  EXPECT_ERROR(h3::synthTensor(bad, 1, d), "x: synthetic values exist for F32 and BF16 only, not I64");
  h3::TensorSpec zeros{"z", {3}, DType::BF16, h3::TensorSpec::Init::Zeros};
  uint16_t z[3] = {1, 1, 1};
  h3::synthTensor(zeros, 1, z);
  EXPECT_EQ(z[0] | z[1] | z[2], 0);
}

TEST(CheckpointSynth, DeterministicAndShardingIndependent) {
  TempDir t;
  const auto cfg = h3::namedConfig("tiny");
  h3::synthCheckpoint(cfg, 5, t.path / "a", 4096);
  h3::synthCheckpoint(cfg, 5, t.path / "b");  // one file
  h3::synthCheckpoint(cfg, 6, t.path / "c", 4096);
  auto sa = h3::snapshotCheckpoint(t.path / "a"), sb = h3::snapshotCheckpoint(t.path / "b"),
       sc = h3::snapshotCheckpoint(t.path / "c");
  EXPECT_EQ(sa["content_sha256"], sb["content_sha256"]);
  EXPECT_NE(sa["content_sha256"], sc["content_sha256"]);
  EXPECT_TRUE(sa["index_sha256"].is_string());
  EXPECT_TRUE(sb["index_sha256"].is_null());
  EXPECT_EQ(sa["tensor_count"], expectedDiffusersCount(cfg));
  // The per-tensor hash is the sha256 of the raw stored bytes.
  st::Folder f(t.path / "b");
  const auto &e = f.at("proj_in.weight");
  std::string raw(reinterpret_cast<const char *>(f.data(e)), e.info->nbytes());
  bool found = false;
  for (const auto &x : sa["tensors"])
    if (x["name"] == "proj_in.weight") {
      EXPECT_EQ(x["sha256"], sha256Hex(raw));
      EXPECT_EQ(x["dtype"], "F32");
      found = true;
    }
  EXPECT_TRUE(found);
  // A trailing slash names the same folder (the temp folder goes beside it, not inside).
  h3::synthCheckpoint(cfg, 5, t.path.string() + "/slash/", 4096);
  EXPECT_EQ(h3::snapshotCheckpoint(t.path / "slash")["content_sha256"], sa["content_sha256"]);
  EXPECT_ERROR(h3::synthCheckpoint(cfg, 5, "."), "not a usable output folder name");
  EXPECT_ERROR(h3::synthCheckpoint(cfg, 5, t.path / "x" / ".."), "output already exists");
  // OUT must not exist; a failed synth leaves nothing.
  EXPECT_ERROR(h3::synthCheckpoint(cfg, 5, t.path / "a"), "output already exists");
}

// ---- the native mapping -------------------------------------------------------------------------------------------

TEST(CheckpointMap, NativeLayoutFollowsTheRowFormulas) {
  TempDir t;
  const auto cfg = h3::namedConfig("tiny");
  h3::synthCheckpoint(cfg, 11, t.path / "d");
  for (QkvLayout layout : {QkvLayout::Interleaved, QkvLayout::Concat}) {
    fs::path n = t.path / (std::string("n-") + h3::qkvLayoutName(layout));
    h3::mapCheckpoint(t.path / "d", n, CheckpointFormat::Native, layout);
    st::Folder d(t.path / "d"), nf(n);
    EXPECT_EQ(nf.names().size(), expectedNativeCount(cfg));
    nlohmann::json cj = nlohmann::json::parse(readFile(n / "config.json"));
    EXPECT_EQ(cj["_h3c_format"], "native");
    EXPECT_EQ(cj["_h3c_qkv_layout"], h3::qkvLayoutName(layout));
    const int64_t H = cfg.hidden_size, D = cfg.attention_head_dim, I = cfg.innerDim(), F = cfg.ffn_dim;
    auto row = [](const st::Folder &f, const std::string &name, int64_t r, int64_t width) {
      const auto &e = f.at(name);
      return std::string(reinterpret_cast<const char *>(f.data(e)) + r * width * 2, size_t(width * 2));
    };
    for (const std::string blk : {"blocks.1.", "token_refiner.blocks.0."}) {
      const std::string dblk = blk == "blocks.1." ? "transformer_blocks.1." : "token_refiner.refiner_blocks.0.";
      const auto &qkv = nf.at(blk + "attn.qkv_proj.weight");
      ASSERT_EQ(qkv.info->shape, (std::vector<int64_t>{3 * I, H}));
      const char *qkvNames[3] = {"attn.to_q.weight", "attn.to_k.weight", "attn.to_v.weight"};
      for (int64_t r = 0; r < 3 * I; ++r) {
        int64_t which, srcRow;
        if (layout == QkvLayout::Interleaved) {
          int64_t head = r / (3 * D), within = r % (3 * D);
          which = within / D;
          srcRow = head * D + within % D;
        } else {
          which = r / I;
          srcRow = r % I;
        }
        ASSERT_EQ(row(nf, blk + "attn.qkv_proj.weight", r, H), row(d, dblk + qkvNames[which], srcRow, H))
            << blk << " row " << r;
      }
      for (int64_t r = 0; r < 2 * F; ++r) {  // native [gate; value], diffusers [value; gate]
        int64_t srcRow = r < F ? F + r : r - F;
        ASSERT_EQ(row(nf, blk + "mlp.fc1.weight", r, H), row(d, dblk + "ff.net.0.proj.weight", srcRow, H)) << r;
      }
      EXPECT_EQ(row(nf, blk + "attn.q_norm.weight", 0, D), row(d, dblk + "attn.norm_q.weight", 0, D));
      EXPECT_EQ(row(nf, blk + "mlp.fc2.weight", 0, F * H), row(d, dblk + "ff.net.2.weight", 0, F * H));
    }
    // Renames, F32 kept.
    const auto &vp = nf.at("video_patch_proj.weight");
    EXPECT_EQ(vp.info->dtype, DType::F32);
    EXPECT_EQ(0, std::memcmp(nf.data(vp), d.data(d.at("proj_in.weight")), vp.info->nbytes()));
    EXPECT_NE(nf.find("final_layer.adaln_proj.linear.bias"), nullptr);
    EXPECT_NE(nf.find("time_embedder.proj_out.weight"), nullptr);
    EXPECT_NE(nf.find("token_refiner.final_norm.weight"), nullptr);
    EXPECT_NE(nf.find("blocks.0.adaln_proj.linear.weight"), nullptr);
    // rope.inv_freq = 1 / theta^(2i / 2f).
    const auto &rope = nf.at("rope.inv_freq");
    ASSERT_EQ(rope.info->dtype, DType::F32);
    ASSERT_EQ(rope.info->shape, (std::vector<int64_t>{cfg.rope_freq_dim}));
    for (int i = 0; i < cfg.rope_freq_dim; ++i) {
      float v;
      std::memcpy(&v, nf.data(rope) + 4 * i, 4);
      double want = 1.0 / std::pow(cfg.rope_theta, double(2 * i) / double(2 * cfg.rope_freq_dim));
      EXPECT_NEAR(v, want, 2e-7 * want) << i;
    }
  }
  // The full config's rope has 16 entries; the first is 1, the last 1/10000^(30/32).
  auto r = h3::ropeInvFreq(h3::namedConfig("full"));
  ASSERT_EQ(r.size(), 16u);
  EXPECT_EQ(r[0], 1.0f);
  EXPECT_NEAR(r[15], std::pow(10000.0, -30.0 / 32.0), 1e-7 * r[15]);
}

TEST(CheckpointMap, FullConfigIs638To534PlusRope) {
  const auto cfg = h3::namedConfig("full");
  const auto d = h3::diffusersTensors(cfg);
  ASSERT_EQ(d.size(), 638u);
  const auto n = h3::nativeFromDiffusers(d, cfg, QkvLayout::Interleaved);
  ASSERT_EQ(n.size(), 535u);  // 534 + rope.inv_freq
  std::map<std::string, const h3::MappedTensor *> by;
  int64_t params = 0;
  for (const auto &m : n) {
    EXPECT_TRUE(by.emplace(m.spec.name, &m).second) << m.spec.name;
    EXPECT_TRUE(h3::isNativeName(m.spec.name) || m.spec.name == "token_refiner.final_norm.weight") << m.spec.name;
    params += m.spec.numel();
  }
  EXPECT_EQ(params, 33122992896LL + 16);  // same parameters, plus the 16 rope frequencies
  const auto &qkv = *by.at("blocks.49.attn.qkv_proj.weight");
  EXPECT_EQ(qkv.spec.shape, (std::vector<int64_t>{3 * 7168, 5376}));
  EXPECT_EQ(qkv.spec.dtype, DType::BF16);
  ASSERT_EQ(qkv.pieces.size(), 3u * 56);  // per head: q, k, v blocks of 128 rows
  EXPECT_EQ(qkv.pieces[4].source, "transformer_blocks.49.attn.to_k.weight");
  EXPECT_EQ(qkv.pieces[4].offset, 128u * 5376 * 2);
  EXPECT_EQ(qkv.pieces[4].length, 128u * 5376 * 2);
  EXPECT_EQ(by.at("token_refiner.blocks.1.mlp.fc1.weight")->spec.shape, (std::vector<int64_t>{2 * 14336, 5376}));
  EXPECT_EQ(by.at("final_layer.video_out.weight")->spec.dtype, DType::F32);
  EXPECT_EQ(by.at("final_layer.adaln_proj.linear.weight")->spec.shape, (std::vector<int64_t>{2 * 5376, 2688}));
  EXPECT_EQ(by.at("rope.inv_freq")->spec.shape, (std::vector<int64_t>{16}));
  EXPECT_EQ(h3::diffusersFromNative(d, cfg, QkvLayout::Concat).size(), 638u);
  // An incomplete list is refused by the mapping itself.
  auto broken = d;
  auto isV3 = [](const h3::TensorSpec &s) { return s.name == "transformer_blocks.3.attn.to_v.weight"; };
  broken.erase(std::remove_if(broken.begin(), broken.end(), isV3), broken.end());
  EXPECT_ERROR(h3::nativeFromDiffusers(broken, cfg, QkvLayout::Interleaved),
               "transformer_blocks.3.attn.to_v.weight: incomplete q/k/v set");
  auto reshaped = d;
  reshaped[0].shape = {1, 1};
  EXPECT_ERROR(h3::nativeTensors(reshaped, cfg), "proj_in.weight: shape [1, 1] disagrees with the config's [5376, 96]");
}

namespace {
void roundTrip(const std::string &config, QkvLayout layout, uint64_t shard) {
  TempDir t;
  const auto cfg = h3::namedConfig(config);
  h3::synthCheckpoint(cfg, 3, t.path / "d", shard);
  h3::mapCheckpoint(t.path / "d", t.path / "n", CheckpointFormat::Native, layout, shard);
  EXPECT_EQ(st::Folder(t.path / "n").names().size(), expectedNativeCount(cfg));
  // Back without naming the layout: it is read from the native config.json.
  h3::mapCheckpoint(t.path / "n", t.path / "d2", CheckpointFormat::Diffusers, std::nullopt, shard);
  expectSameTensors(t.path / "d", t.path / "d2");
  EXPECT_EQ(h3::snapshotCheckpoint(t.path / "d")["content_sha256"],
            h3::snapshotCheckpoint(t.path / "d2")["content_sha256"]);
  // And native -> diffusers -> native is bitwise too.
  h3::mapCheckpoint(t.path / "d2", t.path / "n2", CheckpointFormat::Native, layout, shard);
  expectSameTensors(t.path / "n", t.path / "n2");
}
} // namespace

TEST(CheckpointMap, RoundTripTinyInterleaved) { roundTrip("tiny", QkvLayout::Interleaved, 2048); }
TEST(CheckpointMap, RoundTripTinyConcat) { roundTrip("tiny", QkvLayout::Concat, st::kDefaultShardSize); }
TEST(CheckpointMap, RoundTripSmallInterleaved) { roundTrip("small", QkvLayout::Interleaved, 20000000); }
TEST(CheckpointMap, RoundTripSmallConcat) { roundTrip("small", QkvLayout::Concat, 20000000); }

TEST(CheckpointMap, OpenNativeServesDiffusersTensors) {
  TempDir t;
  const auto cfg = h3::namedConfig("tiny");
  h3::synthCheckpoint(cfg, 9, t.path / "d");
  h3::mapCheckpoint(t.path / "d", t.path / "ni", CheckpointFormat::Native, QkvLayout::Interleaved);
  h3::mapCheckpoint(t.path / "d", t.path / "nc", CheckpointFormat::Native, QkvLayout::Concat);
  auto d = h3::Checkpoint::open(t.path / "d");
  for (const char *dir : {"ni", "nc"}) {
    auto n = h3::Checkpoint::open(t.path / dir);
    EXPECT_EQ(n->format(), CheckpointFormat::Native);
    ASSERT_EQ(n->tensors().size(), d->tensors().size());
    for (const auto &s : h3::diffusersTensors(cfg)) {
      const auto *ns = n->find(s.name);
      ASSERT_NE(ns, nullptr) << s.name;
      EXPECT_EQ(ns->dtype, s.dtype);
      EXPECT_EQ(ns->shape, s.shape);
      auto a = d->bytes(s.name), b = n->bytes(s.name);
      ASSERT_EQ(a.size, b.size);
      ASSERT_EQ(0, std::memcmp(a.data, b.data, a.size)) << dir << " " << s.name;
      // A byte range in the middle, across piece boundaries.
      const uint64_t off = a.size / 3, len = a.size / 2;
      std::vector<uint8_t> part(len);
      n->read(s.name, off, len, part.data());
      ASSERT_EQ(0, std::memcmp(part.data(), a.data + off, len)) << s.name;
    }
    // Zero-copy where the diffusers tensor is one stored range.
    EXPECT_NE(n->view("proj_in.weight"), nullptr);
    EXPECT_EQ(n->view("transformer_blocks.0.ff.net.0.proj.weight"), nullptr);  // halves swapped: assembled
    if (std::string(dir) == "nc")
      EXPECT_NE(n->view("transformer_blocks.0.attn.to_k.weight"), nullptr);
    else
      EXPECT_EQ(n->view("transformer_blocks.0.attn.to_k.weight"), nullptr);
    EXPECT_ERROR(n->read("proj_in.weight", 1, n->nbytes("proj_in.weight"), nullptr), "outside the tensor");
    EXPECT_TRUE(h3::compareTensors(h3::diffusersTensors(cfg), *n).ok());
    EXPECT_ERROR(n->view("nope"), "tensor 'nope' is not in the checkpoint");
  }
  // compareTensors by diffusers name: a config with one more layer misses its 12 tensors; a wider text_dim
  // mismatches the one tensor it shapes.
  auto more = cfg;
  more.num_layers = 3;
  auto r = h3::compareTensors(h3::diffusersTensors(more), *d);
  EXPECT_EQ(r.missing.size(), 12u);
  EXPECT_TRUE(r.unexpected.empty());
  EXPECT_TRUE(r.mismatched.empty());
  auto wide = cfg;
  wide.text_dim = 16;
  r = h3::compareTensors(h3::diffusersTensors(wide), *d);
  EXPECT_EQ(r.mismatched,
            std::vector<std::string>{"context_embedder.weight: expected BF16 [24, 16], stored BF16 [24, 8]"});
  // Asking for the other layout than the one recorded is an error, not a silent scramble.
  h3::OpenOptions o;
  o.qkvLayout = QkvLayout::Concat;
  EXPECT_ERROR(h3::Checkpoint::open(t.path / "ni", o), "records qkv layout 'interleaved' but 'concat'");
}

TEST(CheckpointMap, FailsClosed) {
  TempDir t;
  const auto cfg = h3::namedConfig("tiny");
  h3::synthCheckpoint(cfg, 2, t.path / "d");
  h3::mapCheckpoint(t.path / "d", t.path / "n", CheckpointFormat::Native, QkvLayout::Interleaved);
  auto mapFails = [&](const fs::path &in, CheckpointFormat to, const std::string &text,
                      std::optional<QkvLayout> l = std::nullopt) {
    fs::path out = t.path / "out";
    EXPECT_ERROR(h3::mapCheckpoint(in, out, to, l), text);
    EXPECT_FALSE(fs::exists(out));
    for (const auto &e : fs::directory_iterator(t.path))  // no temp folder left behind either
      EXPECT_EQ(e.path().filename().string().find(".out.tmp"), std::string::npos) << e.path();
  };
  Edit noK;
  noK.drop = {"transformer_blocks.1.attn.to_k.weight"};
  copyEdited(t.path / "d", t.path / "noK", noK, "diffusion_pytorch_model");
  mapFails(t.path / "noK", CheckpointFormat::Native,
           "incomplete q/k/v set: tensor 'transformer_blocks.1.attn.to_k.weight' is missing");
  Edit extra;
  extra.add = {{"transformer_blocks.1.attn.to_qkv.weight", DType::BF16, {2}}};
  copyEdited(t.path / "d", t.path / "extra", extra, "diffusion_pytorch_model");
  mapFails(t.path / "extra", CheckpointFormat::Native,
           "unmapped tensor 'transformer_blocks.1.attn.to_qkv.weight'");
  Edit f32;
  f32.retype = {{"transformer_blocks.0.norm1.weight", DType::F32}};
  copyEdited(t.path / "d", t.path / "f32", f32, "diffusion_pytorch_model");
  mapFails(t.path / "f32", CheckpointFormat::Native,
           "tensor 'transformer_blocks.0.norm1.weight': stored F32 [24] but the config implies BF16 [24]");
  mapFails(t.path / "d", CheckpointFormat::Diffusers, "is already in diffusers naming");
  mapFails(t.path / "n", CheckpointFormat::Native, "is already in native naming");
  mapFails(t.path / "n", CheckpointFormat::Diffusers, "records qkv layout 'interleaved' but --qkv-layout concat",
           QkvLayout::Concat);
  Edit noNativeQkv;
  noNativeQkv.drop = {"blocks.0.attn.qkv_proj.weight"};
  copyEdited(t.path / "n", t.path / "nq", noNativeQkv, "model");
  mapFails(t.path / "nq", CheckpointFormat::Diffusers, "tensor 'blocks.0.attn.qkv_proj.weight' is missing");
  EXPECT_ERROR(h3::Checkpoint::open(t.path / "nq"), "native tensor 'blocks.0.attn.qkv_proj.weight' is missing");
  {  // a native folder whose rope.inv_freq disagrees with the config
    st::Folder nf(t.path / "n");
    std::vector<st::TensorDecl> decls;
    for (const auto &nm : nf.names())
      decls.push_back({nm, nf.at(nm).info->dtype, nf.at(nm).info->shape});
    fs::create_directories(t.path / "nr");
    fs::copy_file(t.path / "n" / "config.json", t.path / "nr" / "config.json");
    st::writeFolder(t.path / "nr", "model", decls, st::kDefaultShardSize, {},
                    [&](const st::TensorInfo &info, st::Writer &w) {
                      std::vector<uint8_t> b(nf.data(nf.at(info.name)), nf.data(nf.at(info.name)) + info.nbytes());
                      if (info.name == "rope.inv_freq")
                        b[0] ^= 0x40;  // element 0 is no longer 1.0
                      w.append(b.data(), b.size());
                    });
  }
  mapFails(t.path / "nr", CheckpointFormat::Diffusers, "rope.inv_freq: element 0 is");
  // Mixed namings are refused outright.
  Edit mixed;
  mixed.add = {{"blocks.9.norm1.weight", DType::BF16, {24}}};
  copyEdited(t.path / "d", t.path / "mixed", mixed, "diffusion_pytorch_model");
  mapFails(t.path / "mixed", CheckpointFormat::Native, "mixes diffusers names");
  // config.json's recorded naming must agree with the stored names.
  Edit none;
  copyEdited(t.path / "d", t.path / "claims-native", none, "diffusion_pytorch_model");
  {
    auto cj = h3::checkpointConfigJson(cfg, CheckpointFormat::Native, QkvLayout::Interleaved);
    writeFileAtomic(t.path / "claims-native" / "config.json", cj.dump());
  }
  mapFails(t.path / "claims-native", CheckpointFormat::Native,
           "config.json#/_h3c_format: says native but the stored tensors have diffusers names");
  EXPECT_ERROR(h3::Checkpoint::open(t.path / "claims-native"), "says native but the stored tensors");
  // A raw release's config.json has other keys: --config stands in for it.
  {
    Edit keep;
    copyEdited(t.path / "n", t.path / "raw", keep, "model");
    writeFileAtomic(t.path / "raw" / "config.json", "{\"token_refiner_num_layers\": 2}");
    mapFails(t.path / "raw", CheckpointFormat::Diffusers, "#/token_refiner_num_layers: unknown config key");
    h3::mapCheckpoint(t.path / "raw", t.path / "fromRaw", CheckpointFormat::Diffusers, std::nullopt,
                      st::kDefaultShardSize, cfg);
    expectSameTensors(t.path / "d", t.path / "fromRaw");
    std::string out;
    EXPECT_EQ(runTool("checkpoint map --to diffusers --config tiny " + q(t.path / "raw") + " -o " + q(t.path / "fr2"),
                      &out),
              0)
        << out;
    expectSameTensors(t.path / "d", t.path / "fr2");
  }
  // A native config that is not ours.
  writeFileAtomic(t.path / "nr" / "config.json", "{\"_class_name\": \"WanTransformer3DModel\"}");
  mapFails(t.path / "nr", CheckpointFormat::Diffusers, "#/_class_name: expected \"MiniMaxH3Transformer3DModel\"");
}

// ---- check / snapshot through the h3c binary ----------------------------------------------------------------------

TEST(CheckpointTool, SynthSnapshotCheck) {
  TempDir t;
  std::string out;
  ASSERT_EQ(runTool("checkpoint synth --config tiny --seed 4 --shard-size 3KB --out " + q(t.path / "ck"), &out), 0)
      << out;
  EXPECT_NE(out.find(": 62 tensors (diffusers naming), " + std::to_string(h3::parameterCount(h3::diffusersTensors(
                                                                  h3::namedConfig("tiny")))) +
                     " parameters"),
            std::string::npos)
      << out;
  EXPECT_TRUE(fs::exists(t.path / "ck" / "diffusion_pytorch_model-00001-of-00004.safetensors") ||
              fs::exists(t.path / "ck" / "diffusion_pytorch_model.safetensors.index.json"));
  EXPECT_EQ(runTool("checkpoint check " + q(t.path / "ck"), &out), 0) << out;
  EXPECT_NE(out.find("ok: all 62 tensors match"), std::string::npos) << out;
  ASSERT_EQ(runTool("checkpoint snapshot " + q(t.path / "ck") + " -o " + q(t.path / "snap.json"), &out), 0) << out;
  auto snap = nlohmann::json::parse(readFile(t.path / "snap.json"));
  EXPECT_EQ(snap["schema"], "h3c-checkpoint-snapshot-v1");
  EXPECT_EQ(snap["format"], "diffusers");
  EXPECT_EQ(snap["tensors"].size(), expectedDiffusersCount(h3::namedConfig("tiny")));
  EXPECT_EQ(snap, h3::snapshotCheckpoint(t.path / "ck"));
  // Each entry is the sha256 of its own tensor's bytes (the snapshot hashes tensors on several threads and assembles
  // the list in name order), here hashed one by one from the files.
  {
    st::Folder f(t.path / "ck");
    ASSERT_EQ(snap["tensors"].size(), f.names().size());
    for (const auto &e : snap["tensors"]) {
      const auto &entry = f.at(e["name"].get<std::string>());
      EXPECT_EQ(e["sha256"], sha256Hex(std::string_view(reinterpret_cast<const char *>(f.data(entry)),
                                                        size_t(entry.info->nbytes()))))
          << e["name"];
    }
  }
  // The same seed through the library gives the same content.
  h3::synthCheckpoint(h3::namedConfig("tiny"), 4, t.path / "lib");
  EXPECT_EQ(snap["content_sha256"], h3::snapshotCheckpoint(t.path / "lib")["content_sha256"]);

  // Against fingerprints: the tiny derivation matches, the pinned full one does not.
  writeFileAtomic(t.path / "tiny.json",
                  h3::fingerprintToJson(h3::deriveFingerprint(h3::namedConfig("tiny"), "tiny")).dump());
  EXPECT_EQ(runTool("checkpoint check " + q(t.path / "ck") + " --fingerprint " + q(t.path / "tiny.json"), &out), 0)
      << out;
  EXPECT_EQ(runTool("checkpoint check " + q(t.path / "ck") + " --fingerprint " + q(h3::pinnedFingerprintPath()),
                    &out),
            1)
      << out;
  EXPECT_NE(out.find("mismatched"), std::string::npos);
  EXPECT_NE(out.find("transformer_blocks.0.norm1.weight: expected BF16 [5376], stored BF16 [24]"), std::string::npos)
      << out;
  EXPECT_NE(out.find("transformer_blocks.49.norm1.weight"), std::string::npos);  // missing

  // Bad input: exit 2 with an error line.
  EXPECT_EQ(runTool("checkpoint check " + q(t.path / "nope"), &out), 2);
  EXPECT_NE(out.find("h3c: error: "), std::string::npos);
  EXPECT_EQ(runTool("checkpoint synth --config huge --seed 1 --out " + q(t.path / "x"), &out), 2);
  EXPECT_FALSE(fs::exists(t.path / "x"));
  EXPECT_EQ(runTool("checkpoint synth --config tiny --seed 1 --shard-size 0 --out " + q(t.path / "x"), &out), 2);
  EXPECT_EQ(runTool("checkpoint map --to native --qkv-layout rows " + q(t.path / "ck") + " -o " + q(t.path / "x"), &out),
            2);
  EXPECT_FALSE(fs::exists(t.path / "x"));
}

TEST(CheckpointTool, CheckListsMissingUnexpectedMismatched) {
  TempDir t;
  h3::synthCheckpoint(h3::namedConfig("tiny"), 1, t.path / "d");
  Edit e;
  e.drop = {"transformer_blocks.0.attn.to_v.weight", "proj_out.bias"};
  e.add = {{"transformer_blocks.0.attn.to_v.bias", DType::BF16, {32}}};
  // F16 for BF16 is a mismatch; F32 for BF16 (a float32 folder) is a cast, listed apart, no difference.
  e.retype = {{"context_embedder.weight", DType::F16}, {"transformer_blocks.0.attn.to_q.weight", DType::F32}};
  copyEdited(t.path / "d", t.path / "bad", e, "diffusion_pytorch_model");
  std::string out;
  EXPECT_EQ(runTool("checkpoint check " + q(t.path / "bad"), &out), 1) << out;
  EXPECT_NE(out.find("missing (2):\n  transformer_blocks.0.attn.to_v.weight\n  proj_out.bias"), std::string::npos)
      << out;
  EXPECT_NE(out.find("unexpected (1):\n  transformer_blocks.0.attn.to_v.bias"), std::string::npos) << out;
  EXPECT_NE(out.find("mismatched (1):\n  context_embedder.weight: expected BF16 [24, 8], stored F16 [24, 8]\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("stored as F32, read as BF16 (1):\n  transformer_blocks.0.attn.to_q.weight"), std::string::npos)
      << out;
  EXPECT_NE(out.find("2 missing, 1 unexpected, 1 mismatched"), std::string::npos);
  // The library report says the same.
  auto r = h3::checkCheckpoint(t.path / "bad");
  EXPECT_EQ(r.missing.size(), 2u);
  EXPECT_EQ(r.unexpected, std::vector<std::string>{"transformer_blocks.0.attn.to_v.bias"});
  EXPECT_EQ(r.mismatched.size(), 1u);
  EXPECT_EQ(r.cast, std::vector<std::string>{"transformer_blocks.0.attn.to_q.weight"});
  // Only the casts: ok, in the text and in the JSON (its keys as before, plus "cast").
  Edit f32;
  f32.retype = {{"transformer_blocks.0.attn.to_q.weight", DType::F32}, {"context_embedder.weight", DType::F32}};
  copyEdited(t.path / "d", t.path / "f32", f32, "diffusion_pytorch_model");
  EXPECT_EQ(runTool("checkpoint check " + q(t.path / "f32"), &out), 0) << out;
  EXPECT_NE(out.find("ok: all 62 tensors match, 2 of them stored as F32 where BF16 is expected: they load as BF16, "
                     "rounded to nearest even"),
            std::string::npos)
      << out;
  EXPECT_EQ(runTool("checkpoint check --json " + q(t.path / "f32"), &out), 0) << out;
  nlohmann::json rep = nlohmann::json::parse(out);
  EXPECT_EQ(rep["cast"].get<std::set<std::string>>(),
            (std::set<std::string>{"context_embedder.weight", "transformer_blocks.0.attn.to_q.weight"}));
  EXPECT_EQ(rep["cast"].size(), 2u);
  rep.erase("cast");
  EXPECT_EQ(rep, (nlohmann::json{{"ok", true}, {"expected", 62}, {"missing", nlohmann::json::array()},
                                 {"unexpected", nlohmann::json::array()}, {"mismatched", nlohmann::json::array()}}));
  // The other direction (BF16 stored where F32 is expected) and another shape stay mismatches.
  std::string f32Name;
  for (const auto &s : h3::diffusersTensors(h3::namedConfig("tiny")))
    if (s.dtype == DType::F32 && f32Name.empty()) f32Name = s.name;
  Edit down;
  down.retype = {{f32Name, DType::BF16}};
  copyEdited(t.path / "d", t.path / "down", down, "diffusion_pytorch_model");
  r = h3::checkCheckpoint(t.path / "down");
  EXPECT_EQ(r.mismatched.size(), 1u);
  EXPECT_TRUE(r.cast.empty());

  // Native folders are checked in native naming, through the tool's map.
  ASSERT_EQ(runTool("checkpoint map --to native " + q(t.path / "d") + " -o " + q(t.path / "n"), &out), 0) << out;
  EXPECT_EQ(runTool("checkpoint check " + q(t.path / "n"), &out), 0) << out;
  Edit ne;
  ne.drop = {"rope.inv_freq"};
  copyEdited(t.path / "n", t.path / "n2", ne, "model");
  EXPECT_EQ(runTool("checkpoint check " + q(t.path / "n2"), &out), 1) << out;
  EXPECT_NE(out.find("missing (1):\n  rope.inv_freq"), std::string::npos) << out;
  // A native folder's F32 for BF16 is a mismatch that says where F32 is read.
  Edit nf;
  nf.retype = {{"blocks.0.attn.qkv_proj.weight", DType::F32}};
  copyEdited(t.path / "n", t.path / "nf", nf, "model");
  EXPECT_EQ(runTool("checkpoint check " + q(t.path / "nf"), &out), 1) << out;
  EXPECT_NE(out.find("mismatched (1):\n  blocks.0.attn.qkv_proj.weight: expected BF16"), std::string::npos) << out;
  EXPECT_NE(out.find("(F32 is read as BF16 only from a folder in diffusers naming)"), std::string::npos) << out;
  ASSERT_EQ(runTool("checkpoint map --to diffusers " + q(t.path / "n") + " -o " + q(t.path / "d2"), &out), 0) << out;
  expectSameTensors(t.path / "d", t.path / "d2");
  // A failed map through the tool: exit 2, no output.
  EXPECT_EQ(runTool("checkpoint map --to native " + q(t.path / "bad") + " -o " + q(t.path / "n3"), &out), 2);
  EXPECT_FALSE(fs::exists(t.path / "n3"));
}

// Python (safetensors + torch, on the GPU machine) read the folders `h3c checkpoint synth --config tiny --seed 3` and
// `map --to native` wrote, and printed per-tensor hashes and the content hash (make_fixtures.py read): the same seed
// must still give exactly those bytes, as Python saw them.
TEST(CheckpointPython, SynthBytesAsPythonReadThem) {
  const fs::path report = fs::path(H3C_SOURCE_DIR) / "test/fixtures/safetensors/python_read_of_h3c_output.txt";
  if (!fs::exists(report))
    GTEST_SKIP() << "no Python report (make_fixtures.py read on a machine with torch + safetensors)";
  const std::string text = readFile(report);
  auto hashAfter = [&](const std::string &folder) {
    const std::string key = folder + ": ";
    size_t at = text.find(key);
    if (at == std::string::npos)
      return std::string();
    size_t h = text.find("content_sha256 ", at);
    return h == std::string::npos ? std::string() : text.substr(h + 15, 64);
  };
  const std::string pyDiffusers = hashAfter("tiny_diffusers"), pyNative = hashAfter("tiny_native");
  ASSERT_EQ(pyDiffusers.size(), 64u);
  ASSERT_EQ(pyNative.size(), 64u);
  TempDir t;
  h3::synthCheckpoint(h3::namedConfig("tiny"), 3, t.path / "d");
  h3::mapCheckpoint(t.path / "d", t.path / "n", CheckpointFormat::Native);
  EXPECT_EQ(h3::snapshotCheckpoint(t.path / "d")["content_sha256"], pyDiffusers);
  EXPECT_EQ(h3::snapshotCheckpoint(t.path / "n")["content_sha256"], pyNative);
  // One tensor by its own line, too: Python's hash of proj_in.weight's bytes.
  size_t line = text.find("  proj_in.weight F32 [24, 16] sha256=");
  ASSERT_NE(line, std::string::npos);
  const std::string pyHash = text.substr(text.find("sha256=", line) + 7, 64);
  st::Folder f(t.path / "d");
  const auto &e = f.at("proj_in.weight");
  EXPECT_EQ(sha256Hex(std::string(reinterpret_cast<const char *>(f.data(e)), e.info->nbytes())), pyHash);
}
