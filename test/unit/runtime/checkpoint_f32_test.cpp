// Float32 diffusers folders (checkpoint_weights.h): F32 stored where the config implies BF16 is read as BF16 rounded
// to nearest even. Expectations are independent of the library's rounding: f32_folder.h's reference (double
// arithmetic and nearbyint) and hand-written edge values; the content hash is the snapshot's of the stored bytes.
#include "error_of.h"
#include "f32_folder.h"
#include "tool.h"

#include "h3c/models/checkpoint.h"
#include "h3c/runtime/checkpoint_weights.h"
#include "h3c/support/error.h"
#include "h3c/support/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>

using namespace h3c;
using namespace h3c::rt;
using h3c::testtool::TempDir;
namespace fs = std::filesystem;
namespace tf = h3c::testf32;

namespace {

const char *kSpecial = "context_embedder.weight";  // BF16 [24, 8] in the tiny config

using h3c::testtool::errorOf;

// Element `i` of a stored tensor overwritten with the F32 bits `u`.
void pokeF32(const fs::path &dir, const std::string &name, size_t i, uint32_t u) {
  uint64_t at;
  fs::path file;
  {
    st::Folder f(dir);
    const auto &e = f.at(name);
    ASSERT_EQ(e.info->dtype, DType::F32) << name;
    file = e.file->path();
    at = e.file->header().dataOffset + e.info->begin + 4 * i;
  }
  std::fstream s(file, std::ios::in | std::ios::out | std::ios::binary);
  s.seekp(std::streamoff(at));
  s.write(reinterpret_cast<const char *>(&u), 4);
  ASSERT_TRUE(s.good());
}

} // namespace

// The reference and the library against the hand-written edge values (ties both ways, subnormals, overflow), and
// the in-place bulk rounding the stream uses (destination at or before the source).
TEST(CheckpointF32, RoundingEdgeValues) {
  std::vector<uint8_t> buf;
  for (const auto &s : tf::specials()) {
    EXPECT_EQ(tf::referenceBf16(tf::floatOf(s.f32)), s.bf16) << std::hex << s.f32;
    EXPECT_EQ(floatToBf16(tf::floatOf(s.f32)), s.bf16) << std::hex << s.f32;
    buf.insert(buf.end(), reinterpret_cast<const uint8_t *>(&s.f32), reinterpret_cast<const uint8_t *>(&s.f32) + 4);
  }
  roundF32ToBf16(buf.data(), buf.data(), tf::specials().size());
  for (size_t i = 0; i < tf::specials().size(); ++i) {
    uint16_t b;
    std::memcpy(&b, buf.data() + 2 * i, 2);
    EXPECT_EQ(b, tf::specials()[i].bf16) << i;
  }
  // NaN stays NaN (quiet), with its sign.
  for (uint32_t nan : {0x7FC00001u, 0xFFA00000u, 0x7F800001u}) {
    const uint16_t b = floatToBf16(tf::floatOf(nan));
    EXPECT_TRUE(std::isnan(bf16ToFloat(b))) << std::hex << nan;
    EXPECT_EQ(b >> 15, nan >> 31) << std::hex << nan;
  }
}

// A float32 diffusers folder (every BF16 tensor stored as F32 with low bits that exercise the rounding, the edge
// values in one tensor, config.json as save_pretrained writes it) loads as the reference's BF16 values, whole and
// by rows; F32 tensors of the config are read as stored; describe() records the cast and the stored bytes' hash.
TEST(CheckpointF32, LoadAndRowsRoundToNearestEven) {
  TempDir t;
  const h3::Config c = h3::namedConfig("tiny");
  h3::synthCheckpoint(c, 5, t.dir / "d");
  const auto w32 = tf::writeF32Folder(t.dir / "d", t.dir / "f32", c, [](const std::string &) { return true; },
                                      kSpecial, tf::firstNonFiniteSpecial());
  ASSERT_NE(readFile(t.dir / "f32" / "config.json").find("\"_diffusers_version\""), std::string::npos);
  ASSERT_TRUE(st::Folder(t.dir / "f32").indexPath().has_value());  // sharded
  size_t bf16 = 0;
  for (const auto &s : h3::diffusersTensors(c)) bf16 += s.dtype == DType::BF16;
  EXPECT_EQ(w32.cast.size(), bf16);
  EXPECT_LT(bf16, h3::diffusersTensors(c).size());  // some tensors are F32 in the config: read as stored

  CheckpointWeights w(c, t.dir / "f32");
  EXPECT_EQ(w.castToBf16(), w32.cast);
  for (const auto &s : h3::diffusersTensors(c)) {
    const Tensor x = w.load(s.name);
    EXPECT_EQ(x.dtype, s.dtype) << s.name;
    EXPECT_EQ(x.shape, s.shape) << s.name;
    EXPECT_EQ(x.bytes, w32.expected.at(s.name)) << s.name;
    if (s.shape.size() == 2 && s.shape[0] >= 3) {
      const int64_t b = 1, e = s.shape[0] - 1;
      const size_t row = size_t(s.numel() / s.shape[0]) * dtypeSize(s.dtype);
      const Tensor r = w.loadRows(s.name, b, e);
      const auto &want = w32.expected.at(s.name);
      EXPECT_EQ(r.bytes, std::vector<uint8_t>(want.begin() + b * row, want.begin() + e * row)) << s.name;
    }
  }
  // The edge values, as written by hand.
  const Tensor sp = w.load(kSpecial);
  for (size_t i = 0; i < tf::firstNonFiniteSpecial(); ++i) {
    uint16_t b;
    std::memcpy(&b, sp.bytes.data() + 2 * i, 2);
    EXPECT_EQ(b, tf::specials()[i].bf16) << i;
  }
  EXPECT_TRUE(w.nonFinite().empty());
  const nlohmann::json d = w.describe();
  EXPECT_EQ(d["cast"], (nlohmann::json{{"from", "F32"}, {"to", "BF16"}, {"rounding", "nearest-even"},
                                       {"tensors", bf16}}));
  EXPECT_EQ(d["content_sha256"], h3::snapshotCheckpoint(t.dir / "f32")["content_sha256"]);
  EXPECT_NE(d["content_sha256"], h3::snapshotCheckpoint(t.dir / "d")["content_sha256"]);
  // A BF16 folder describes no cast.
  CheckpointWeights plain(c, t.dir / "d");
  EXPECT_FALSE(plain.describe().contains("cast"));
}

// Mixed folders (some BF16 tensors stored as F32, the others as BF16) load the same way.
TEST(CheckpointF32, MixedFolder) {
  TempDir t;
  const h3::Config c = h3::namedConfig("tiny");
  h3::synthCheckpoint(c, 6, t.dir / "d");
  size_t k = 0;
  const auto w32 = tf::writeF32Folder(t.dir / "d", t.dir / "mixed", c, [&](const std::string &) { return k++ % 2; });
  ASSERT_GT(w32.cast.size(), 3u);
  CheckpointWeights w(c, t.dir / "mixed");
  EXPECT_EQ(w.castToBf16(), w32.cast);
  size_t bf16Stored = 0;
  for (const auto &s : h3::diffusersTensors(c)) {
    bf16Stored += s.dtype == DType::BF16 && !w32.cast.count(s.name);
    EXPECT_EQ(w.load(s.name).bytes, w32.expected.at(s.name)) << s.name;
  }
  EXPECT_GT(bf16Stored, 3u);
  EXPECT_EQ(w.describe()["cast"]["tensors"], w32.cast.size());
}

// An F32 value beyond BF16's range is finite as stored but Inf after the rounding: a strict load refuses it, naming
// the tensor (whole or the rows holding it); a lax load gives the Inf and records it. NaN stays NaN.
TEST(CheckpointF32, OverflowIsInfAfterTheCast) {
  TempDir t;
  const h3::Config c = h3::namedConfig("tiny");
  h3::synthCheckpoint(c, 5, t.dir / "d");
  const auto w32 = tf::writeF32Folder(t.dir / "d", t.dir / "f32", c, [](const std::string &) { return true; },
                                      kSpecial, tf::specials().size());
  const std::string nan = "transformer_blocks.0.attn.to_q.weight";  // BF16 in the config (proj_in.weight is F32)
  ASSERT_TRUE(w32.cast.count(nan));
  pokeF32(t.dir / "f32", nan, 3, 0x7FC00001u);  // NaN
  pokeF32(t.dir / "f32", nan, 4, 0xFFA00000u);  // negative signalling NaN
  const std::string text = "0 NaN, 3 Inf (first: element 11, +Inf)";
  {
    CheckpointWeights w(c, t.dir / "f32");
    std::string m = errorOf([&] { w.load(kSpecial); });
    EXPECT_NE(m.find(std::string("weights:") + kSpecial), std::string::npos) << m;
    EXPECT_NE(m.find(text), std::string::npos) << m;
    EXPECT_EQ(w.loadRows(kSpecial, 0, 1).bytes,
              std::vector<uint8_t>(w32.expected.at(kSpecial).begin(), w32.expected.at(kSpecial).begin() + 16));
    m = errorOf([&] { w.loadRows(kSpecial, 1, 2); });
    EXPECT_NE(m.find("0 NaN, 3 Inf (first: element 3, +Inf)"), std::string::npos) << m;  // element 11 = row 1's 3
    m = errorOf([&] { w.load(nan); });
    EXPECT_NE(m.find("weights:" + nan), std::string::npos) << m;
    EXPECT_NE(m.find("2 NaN, 0 Inf (first: element 3, NaN)"), std::string::npos) << m;
  }
  CheckpointWeights w(c, t.dir / "f32");
  w.setStrictFinite(false);
  EXPECT_EQ(w.load(kSpecial).bytes, w32.expected.at(kSpecial));
  const Tensor p = w.load(nan);
  ASSERT_EQ(p.dtype, DType::BF16);
  for (size_t i : {3, 4}) {
    uint16_t b;
    std::memcpy(&b, p.bytes.data() + 2 * i, 2);
    EXPECT_TRUE(std::isnan(bf16ToFloat(b))) << i << " " << std::hex << b << " ";
    EXPECT_EQ(b >> 15, i == 4 ? 1 : 0) << i;
  }
  EXPECT_EQ(w.nonFinite(), (std::vector<std::string>{std::string(kSpecial) + ": " + text,
                                                     nan + ": 2 NaN, 0 Inf (first: element 3, NaN)"}));
}

// Only F32 -> BF16 with exactly the config's shape, only in diffusers naming: every other dtype difference stays an
// error, and a native-named F32 folder is refused saying why.
TEST(CheckpointF32, OtherDifferencesStayErrors) {
  TempDir t;
  const h3::Config c = h3::namedConfig("tiny");
  h3::synthCheckpoint(c, 5, t.dir / "d");
  // A copy of folder `src` (prefix `prefix`) with tensor `name` stored as `dtype` / `shape` (zero bytes).
  auto retyped = [&](const fs::path &src, const std::string &prefix, const std::string &name, DType dtype,
                     std::vector<int64_t> shape, const std::string &out) {
    st::Folder f(src);
    std::vector<st::TensorDecl> decls;
    for (const auto &n : f.names())
      decls.push_back(n == name ? st::TensorDecl{n, dtype, shape} : st::TensorDecl{n, f.at(n).info->dtype,
                                                                                      f.at(n).info->shape});
    fs::create_directories(t.dir / out);
    fs::copy_file(src / "config.json", t.dir / out / "config.json");
    st::writeFolder(t.dir / out, prefix, decls, st::kDefaultShardSize, {}, [&](const st::TensorInfo &i, st::Writer &w) {
      if (i.name == name) {
        std::vector<uint8_t> z(i.nbytes());
        w.append(z.data(), z.size());
      } else {
        w.append(f.data(f.at(i.name)), i.nbytes());
      }
    });
    return t.dir / out;
  };
  // F32 where BF16 is expected, as a control: loads.
  EXPECT_NO_THROW(CheckpointWeights w(c, retyped(t.dir / "d", st::kDiffusersPrefix, kSpecial, DType::F32, {24, 8},
                                                 "ok")));
  std::string m = errorOf([&] {
    CheckpointWeights w(c, retyped(t.dir / "d", st::kDiffusersPrefix, kSpecial, DType::F16, {24, 8}, "f16"));
  });
  EXPECT_NE(m.find("mismatched context_embedder.weight: expected BF16 [24, 8], stored F16 [24, 8]"), std::string::npos)
      << m;
  m = errorOf([&] {
    CheckpointWeights w(c, retyped(t.dir / "d", st::kDiffusersPrefix, kSpecial, DType::F32, {8, 24}, "shape"));
  });
  EXPECT_NE(m.find("mismatched context_embedder.weight: expected BF16 [24, 8], stored F32 [8, 24]"), std::string::npos)
      << m;
  // A tensor F32 in the config stored as BF16: the other direction is no cast.
  std::string f32Name;
  for (const auto &s : h3::diffusersTensors(c))
    if (s.dtype == DType::F32 && f32Name.empty()) f32Name = s.name;
  ASSERT_FALSE(f32Name.empty());
  const auto shape = st::Folder(t.dir / "d").at(f32Name).info->shape;
  m = errorOf([&] {
    CheckpointWeights w(c, retyped(t.dir / "d", st::kDiffusersPrefix, f32Name, DType::BF16, shape, "b"));
  });
  EXPECT_NE(m.find("mismatched " + f32Name + ": expected F32"), std::string::npos) << m;
  // Native naming: F32 is refused, the message says where it is accepted.
  h3::mapCheckpoint(t.dir / "d", t.dir / "n", h3::CheckpointFormat::Native);
  const std::string native = "blocks.0.attn.qkv_proj.weight";
  const auto nshape = st::Folder(t.dir / "n").at(native).info->shape;
  m = errorOf([&] {
    CheckpointWeights w(c, retyped(t.dir / "n", h3::kNativePrefix, native, DType::F32, nshape, "nf"));
  });
  EXPECT_NE(m.find("mismatched " + native + ": expected BF16"), std::string::npos) << m;
  EXPECT_NE(m.find("F32 is read as BF16 only from a folder in diffusers naming"), std::string::npos) << m;
}
