// Hot weight updates on the CPU engine (weight_update.h, engine.h): an update followed by a forward is byte-equal to
// a cold load of a checkpoint folder holding the same weights; F32 inputs are rounded to nearest even (checked
// against the rounding rule spelled out on the bits here); native names place their rows as the native layout
// says (built here from index formulas); a refused update changes nothing; the ledger's weights record is the
// documented formula over the documented per-tensor hash, and `ledger diff` names the tensors that changed.
#include "run_options.h"
#include "test_plans.h"

#include "h3c/models/checkpoint.h"
#include "h3c/runtime/engine.h"
#include "h3c/runtime/ledger_diff.h"
#include "h3c/runtime/lora.h"
#include "h3c/support/content_hash.h"
#include "h3c/support/error.h"
#include "h3c/support/files.h"
#include "h3c/support/safetensors.h"
#include "h3c/support/sha256.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

using namespace h3c;
using namespace h3c::rt;
namespace fs = std::filesystem;

// Everything in a namespace of its own, tests included: the test binaries are unity builds, where another file's
// anonymous-namespace helpers (options, TempDir) would collide.
namespace weight_update_test {

using testplans::loadModelPlan;

RunOptions options(const plan::Plan &p) { return testtool::planOptions(p); }

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("h3c-update-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  static int &counter() {
    static int n = 0;
    return n;
  }
};

// A diffusers folder holding synthetic seed `seed`'s tensors with `replaced` ones in their place: the cold load.
fs::path writeFolder(const fs::path &dir, const h3::Config &c, uint64_t seed,
                     const std::map<std::string, Tensor> &replaced) {
  auto base = makeSyntheticWeights(c, seed);
  std::vector<st::TensorDecl> decls;
  for (const auto &s : h3::diffusersTensors(c)) decls.push_back({s.name, s.dtype, s.shape});
  fs::create_directories(dir);
  st::writeFolder(dir, st::kDiffusersPrefix, decls, st::kDefaultShardSize, {},
                  [&](const st::TensorInfo &info, st::Writer &w) {
                    auto it = replaced.find(info.name);
                    const Tensor t = it != replaced.end() ? it->second : base->load(info.name);
                    w.append(t.bytes.data(), t.bytes.size());
                  });
  writeFileAtomic(dir / "config.json",
                  h3::checkpointConfigJson(c, h3::CheckpointFormat::Diffusers, h3::QkvLayout::Interleaved).dump(1));
  return dir;
}

WeightInput input(const std::string &name, const Tensor &t) {
  return WeightInput{name, t.dtype, t.shape, t.bytes.data(), 0};
}

// The F32 words that round to the BF16 bits `b` by round-to-nearest-even, spelled out on the bits: the low half
// below 0x8000 rounds down, above rounds up, exactly 0x8000 goes to the even neighbour.
struct F32Case {
  uint32_t f32;
  uint16_t bf16;
};
F32Case roundingCase(uint16_t b, int which) {
  const uint32_t hi = uint32_t(b) << 16;
  switch (which % 4) {
  case 0: return {hi | 0x1234u, b};                                        // below half: down
  case 1: return {hi | 0x9000u, uint16_t(b + 1)};                          // above half: up (away in magnitude)
  case 2: return {hi | 0x8000u, uint16_t((b & 1) ? b + 1 : b)};            // the tie: to even
  default: return {hi, b};                                                 // exact
  }
}

// A tensor of `spec`'s shape in F32 whose values round to `target`'s BF16 values, with every rounding case.
Tensor f32Rounding(const Tensor &target, Tensor *expected) {
  Tensor f = Tensor::zeros(DType::F32, target.shape);
  *expected = target;
  for (int64_t i = 0; i < target.numel(); ++i) {
    uint16_t b;
    std::memcpy(&b, target.bytes.data() + 2 * i, 2);
    if ((b & 0x7F80u) == 0x7F80u || (b & 0x7FFFu) == 0x7F7Fu) b = 0x3F80;  // keep away from Inf / NaN
    const F32Case k = roundingCase(b, int(i));
    std::memcpy(f.bytes.data() + 4 * i, &k.f32, 4);
    std::memcpy(expected->bytes.data() + 2 * i, &k.bf16, 2);
  }
  return f;
}

// The documented identity (weight_identity.h), computed here from the documented per-tensor hash.
std::string expectedIdentity(const plan::Plan &p, WeightSource &w, std::map<std::string, std::string> *perTensor) {
  std::map<std::string, std::string> lines;
  for (const auto &b : p.weights)
    for (const auto &t : b.tensors) {
      const Tensor v = w.load(t.name);
      const std::string h = contentHash(v.bytes.data(), v.bytes.size());
      (*perTensor)[t.name] = h;
      lines[t.name] = t.name + " " + std::string(dtypeName(t.dtype)) + " " + shapeText(t.shape) + " " + h + "\n";
    }
  Sha256 sha;
  for (const auto &[name, line] : lines) sha.update(line);
  return sha.hexDigest();
}

const char *kQ = "transformer_blocks.0.attn.to_q.weight";
const char *kK = "transformer_blocks.0.attn.to_k.weight";
const char *kV = "transformer_blocks.0.attn.to_v.weight";
const char *kFc1 = "transformer_blocks.1.ff.net.0.proj.weight";
const char *kOut = "transformer_blocks.1.attn.to_out.0.weight";



TEST(WeightUpdate, UpdateThenForwardEqualsColdLoadAndTheIdentityFollows) {
  const h3::Config c = h3::namedConfig("tiny");
  const Request r = makeRequest(c, {4, 2, 1, 2, 2, 1, 2}, 9);
  auto other = makeSyntheticWeights(c, 11);
  // New values: three tensors from another seed (BF16 as they are, one given as F32 that rounds to them), and an
  // F32-pinned tensor given in BF16 (widens exactly).
  std::map<std::string, Tensor> replaced;
  for (const char *n : {kQ, kOut}) replaced[n] = other->load(n);
  Tensor expectedFc1;
  const Tensor fc1F32 = f32Rounding(other->load(kFc1), &expectedFc1);
  replaced[kFc1] = expectedFc1;
  std::string f32Name;
  for (const auto &s : h3::diffusersTensors(c))
    if (s.dtype == DType::F32 && s.shape.size() == 2) f32Name = s.name;
  ASSERT_FALSE(f32Name.empty());
  Tensor f32Target = other->load(f32Name);
  Tensor f32Bf16 = Tensor::zeros(DType::BF16, f32Target.shape);
  for (int64_t i = 0; i < f32Target.numel(); ++i) {
    const uint16_t b = floatToBf16(f32Target.getFloat(i));
    std::memcpy(f32Bf16.bytes.data() + 2 * i, &b, 2);
    const float widened = bf16ToFloat(b);
    std::memcpy(f32Target.bytes.data() + 4 * i, &widened, 4);
  }
  replaced[f32Name] = f32Target;
  const std::set<std::string> names = {f32Name, kQ, kOut, kFc1};
  const std::vector<std::string> sorted(names.begin(), names.end());

  for (int tp : {1, 2}) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    const plan::Plan p = loadModelPlan(c, /*fuse=*/true, tp);
    auto w = makeSyntheticWeights(c, 7);
    Engine e(p, *w, options(p));
    const RunResult before = e.run(r);
    e.updateWeights({input(kQ, replaced[kQ]), input(kOut, replaced[kOut]), input(kFc1, fc1F32),
                     input(f32Name, f32Bf16)});
    const RunResult after = e.run(r);

    TempDir tmp;
    auto cold = makeCheckpointWeights(c, writeFolder(tmp.path / "ckpt", c, 7, replaced));
    const RunResult want = runModel(p, *cold, r, options(p));
    EXPECT_TRUE(after.outputs.sample.bytes == want.outputs.sample.bytes);
    EXPECT_TRUE(after.outputs.audio_sample.bytes == want.outputs.audio_sample.bytes);
    EXPECT_FALSE(after.outputs.sample.bytes == before.outputs.sample.bytes);

    // The identity: the documented formula over the cold folder's values, equal in both ledgers.
    std::map<std::string, std::string> perTensor;
    const std::string id = expectedIdentity(p, *cold, &perTensor);
    const auto &rec = after.ledger["header"]["weights"];
    EXPECT_EQ(rec["sha256"], id);
    EXPECT_EQ(want.ledger["header"]["weights"]["sha256"], id);
    EXPECT_EQ(rec["tensors"], nlohmann::json(perTensor));
    EXPECT_EQ(rec["identity"], "h3c-weights-v1");
    EXPECT_EQ(rec["updates"], 1);
    EXPECT_EQ(rec["updated"], nlohmann::json(sorted));
    EXPECT_NE(before.ledger["header"]["weights"]["sha256"], id);

    // ledger diff names the weight change, the tensors that changed and only those.
    const LedgerDiff d = diffLedgers(before.ledger, after.ledger);
    EXPECT_TRUE(d.weightsDiffer);
    EXPECT_EQ(d.weightsChanged, sorted);
    EXPECT_FALSE(d.same());
    EXPECT_NE(d.text().find("the weights differ: 4 of"), std::string::npos) << d.text();
    EXPECT_FALSE(diffLedgers(after.ledger, want.ledger).weightsDiffer);
  }
}

TEST(WeightUpdate, NativeNamesPlaceRowsAsTheNativeLayoutSays) {
  const h3::Config c = h3::namedConfig("tiny");
  const plan::Plan p = loadModelPlan(c, /*fuse=*/true);
  const Request r = makeRequest(c, {4, 2, 1, 2, 2, 1, 2}, 3);
  auto other = makeSyntheticWeights(c, 5);
  const Tensor q = other->load(kQ), k = other->load(kK), v = other->load(kV), f = other->load(kFc1);
  const int64_t H = c.num_attention_heads, D = c.attention_head_dim, cols = q.shape.at(1);
  const size_t row = size_t(cols) * 2;
  // Interleaved: per head h the rows [q_h; k_h; v_h]; concat: [Q; K; V]. fc1 = [gate; value], diffusers [value; gate].
  Tensor inter = Tensor::zeros(DType::BF16, {3 * H * D, cols}), concat = inter;
  for (int64_t h = 0; h < H; ++h)
    for (int64_t d = 0; d < D; ++d)
      for (int j = 0; j < 3; ++j) {
        const Tensor &src = j == 0 ? q : j == 1 ? k : v;
        std::memcpy(inter.bytes.data() + size_t((h * 3 + j) * D + d) * row, src.bytes.data() + size_t(h * D + d) * row,
                    row);
        std::memcpy(concat.bytes.data() + size_t(j * H * D + h * D + d) * row,
                    src.bytes.data() + size_t(h * D + d) * row, row);
      }
  const int64_t half = f.shape.at(0) / 2;
  const size_t frow = size_t(f.shape.at(1)) * 2;
  Tensor fc1 = Tensor::zeros(DType::BF16, f.shape);
  std::memcpy(fc1.bytes.data(), f.bytes.data() + size_t(half) * frow, size_t(half) * frow);  // gate
  std::memcpy(fc1.bytes.data() + size_t(half) * frow, f.bytes.data(), size_t(half) * frow);  // value

  auto run = [&](const std::vector<WeightInput> &in, h3::QkvLayout layout) {
    auto w = makeSyntheticWeights(c, 7);
    Engine e(p, *w, options(p));
    e.updateWeights(in, layout);
    return e.run(r);
  };
  const RunResult byDiffusers =
      run({input(kQ, q), input(kK, k), input(kV, v), input(kFc1, f)}, h3::QkvLayout::Interleaved);
  const RunResult byInterleaved = run({input("blocks.0.attn.qkv_proj.weight", inter),
                                       input("blocks.1.mlp.fc1.weight", fc1)}, h3::QkvLayout::Interleaved);
  const RunResult byConcat = run({input("blocks.0.attn.qkv_proj.weight", concat),
                                  input("blocks.1.mlp.fc1.weight", fc1)}, h3::QkvLayout::Concat);
  for (const RunResult *x : {&byInterleaved, &byConcat}) {
    EXPECT_TRUE(x->outputs.sample.bytes == byDiffusers.outputs.sample.bytes);
    EXPECT_EQ(x->ledger["header"]["weights"]["sha256"], byDiffusers.ledger["header"]["weights"]["sha256"]);
  }
  // The interleaved rows read as concat are other weights.
  const RunResult wrong = run({input("blocks.0.attn.qkv_proj.weight", inter)}, h3::QkvLayout::Concat);
  EXPECT_FALSE(wrong.outputs.sample.bytes == byDiffusers.outputs.sample.bytes);
}

TEST(WeightUpdate, ARefusedUpdateChangesNothing) {
  const h3::Config c = h3::namedConfig("tiny");
  const plan::Plan p = loadModelPlan(c, /*fuse=*/true);
  const Request r = makeRequest(c, {4, 2, 1, 2, 2, 1, 2}, 3);
  auto w = makeSyntheticWeights(c, 7);
  Engine e(p, *w, options(p));
  const RunResult before = e.run(r);
  auto other = makeSyntheticWeights(c, 5);
  const Tensor good = other->load(kOut);
  Tensor nan = other->load(kQ);
  const uint16_t qnan = 0x7FC0;
  std::memcpy(nan.bytes.data() + 2 * 7, &qnan, 2);
  Tensor overflow = Tensor::zeros(DType::F32, nan.shape);  // 3.4e38 is finite in F32 and Inf in BF16
  const float big = 3.4e38f;
  std::memcpy(overflow.bytes.data() + 4 * 3, &big, 4);
  Tensor wrongShape = Tensor::zeros(DType::BF16, {nan.shape[0] + 1, nan.shape[1]});
  Tensor ints = Tensor::zeros(DType::I64, nan.shape);
  const Tensor qkv = Tensor::zeros(DType::BF16, {3 * nan.shape[0], nan.shape[1]});
  const Tensor goodQ = other->load(kQ);
  struct Case {
    std::vector<WeightInput> in;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{input(kOut, good), input(kQ, nan)}, "update:" + std::string(kQ) + ": holds non-finite values: 1 NaN"},
      {{input(kOut, good), input(kQ, overflow)}, "after the cast to BF16: 0 NaN, 1 Inf (first: element 3"},
      {{input(kOut, good), input(kQ, wrongShape)}, "has shape"},
      {{input(kOut, good), input(kQ, ints)}, "is I64"},
      {{input(kOut, good), input("transformer_blocks.0.attn.to_z.weight", good)}, "is no weight tensor of the plan"},
      {{input(kOut, good), input(kOut, good)}, "is given twice"},
      {{input(kQ, goodQ), input("blocks.0.attn.qkv_proj.weight", qkv)}, "which '" + std::string(kQ) + "' of the same"},
      {{input(kOut, good), input("rope.inv_freq", good)}, "computed from the config"},
  };
  for (const Case &k : cases) {
    try {
      e.updateWeights(k.in);
      ADD_FAILURE() << "accepted: " << k.says;
    } catch (const Error &err) {
      EXPECT_NE(std::string(err.what()).find(k.says), std::string::npos) << err.what() << " / " << k.says;
    }
  }
  const RunResult after = e.run(r);
  EXPECT_TRUE(after.outputs.sample.bytes == before.outputs.sample.bytes);
  EXPECT_EQ(after.ledger["header"]["weights"], before.ledger["header"]["weights"]);
  EXPECT_EQ(after.ledger["header"]["weights"]["updates"], 0);
}

TEST(WeightUpdate, UpdateFilesFromAFolderOrAFile) {
  const h3::Config c = h3::namedConfig("tiny");
  const plan::Plan p = loadModelPlan(c, /*fuse=*/true);
  TempDir tmp;
  auto other = makeSyntheticWeights(c, 5);
  const Tensor q = other->load(kQ);
  const fs::path file = tmp.path / "one.safetensors";
  {
    st::Writer w(file, {{kQ, q.dtype, q.shape}});
    w.write(kQ, q.bytes.data(), q.bytes.size());
    w.commit();
  }
  UpdateFiles u = openUpdateFiles(file, c);
  ASSERT_EQ(u.inputs.size(), 1u);
  EXPECT_EQ(u.inputs[0].name, kQ);
  // A folder whose config.json describes another model is refused, naming the key.
  const fs::path dir = tmp.path / "folder";
  fs::create_directories(dir);
  fs::copy_file(file, dir / "diffusion_pytorch_model.safetensors");
  h3::Config small = h3::namedConfig("small");
  writeFileAtomic(dir / "config.json",
                  h3::checkpointConfigJson(small, h3::CheckpointFormat::Diffusers, h3::QkvLayout::Interleaved).dump());
  EXPECT_THROW(openUpdateFiles(dir, c), Error);
  writeFileAtomic(dir / "config.json",
                  h3::checkpointConfigJson(c, h3::CheckpointFormat::Native, h3::QkvLayout::Concat).dump());
  UpdateFiles v = openUpdateFiles(dir, c);
  EXPECT_EQ(v.layout, h3::QkvLayout::Concat);
  EXPECT_THROW(openUpdateFiles(tmp.path / "missing", c), Error);
}

// A diffusers-layout LoRA file (transformer.<module>.lora_A/B.weight, F32) for `targets` at `rank`, values from
// another synthetic seed's tensors scaled down; returns the factors by target as floats (A [rank, in], B [out, rank]).
struct Factors {
  std::vector<float> a, b;
  int64_t in = 0, out = 0;
};
std::map<std::string, Factors> writeLora(const fs::path &path, const h3::Config &c,
                                         const std::vector<std::string> &targets, int64_t rank, uint32_t seed) {
  std::map<std::string, Factors> f;
  std::vector<st::TensorDecl> decls;
  for (const auto &t : targets) {
    Factors &x = f[t];
    for (const auto &s : h3::diffusersTensors(c))
      if (s.name == t) x.out = s.shape[0], x.in = s.shape[1];
    x.a.resize(size_t(rank * x.in));
    x.b.resize(size_t(x.out * rank));
    uint32_t st = seed * 2654435761u + uint32_t(t.size());
    auto next = [&] {
      st = st * 1664525u + 1013904223u;
      return (float(st >> 8) / float(1 << 24) - 0.5f) * 0.25f;
    };
    for (float &v : x.a) v = next();
    for (float &v : x.b) v = next();
    const std::string m = "transformer." + t.substr(0, t.size() - std::string(".weight").size());
    decls.push_back({m + ".lora_A.weight", DType::F32, {rank, x.in}});
    decls.push_back({m + ".lora_B.weight", DType::F32, {x.out, rank}});
  }
  st::Writer w(path, decls);
  for (const auto &info : w.order()) {
    const std::string t = info.name.substr(std::string("transformer.").size(),
                                           info.name.find(".lora_") - std::string("transformer.").size()) + ".weight";
    const std::vector<float> &v = info.name.find("lora_A") != std::string::npos ? f.at(t).a : f.at(t).b;
    w.write(info.name, v.data(), v.size() * 4);
  }
  w.commit();
  return f;
}

// The contract's merge (docs/contract.md section 12), written out here for BF16 weights: w = W, then per adapter
// s = float(scale * alpha / rank) with alpha = rank (an alpha-less file), acc an fma chain over k, w = w + s * acc
// (separately rounded), rounded once to BF16 at the end.
Tensor mergedByContract(const Tensor &w, const std::vector<std::pair<const Factors *, double>> &terms, int64_t rank) {
  Tensor out = w;
  const int64_t rows = w.shape[0], cols = w.shape[1];
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      float v = w.getFloat(i * cols + j);
      for (const auto &[f, scale] : terms) {
        const float s = float(scale * double(rank) / double(rank));
        float acc = 0.0f;
        for (int64_t k = 0; k < rank; ++k) acc = std::fma(f->b[size_t(i * rank + k)], f->a[size_t(k * cols + j)], acc);
        volatile float prod = s * acc;
        v = v + prod;
      }
      const uint16_t b = floatToBf16(v);
      std::memcpy(out.bytes.data() + 2 * (i * cols + j), &b, 2);
    }
  return out;
}

TEST(WeightUpdate, MergedLoraEqualsAColdLoadOfTheMergedValuesAndUnloads) {
  const h3::Config c = h3::namedConfig("tiny");
  const plan::Plan p = loadModelPlan(c, /*fuse=*/true);
  const Request r = makeRequest(c, {4, 2, 1, 2, 2, 1, 2}, 3);
  TempDir tmp;
  const int64_t rank = 4;
  const std::vector<std::string> t1 = {kQ, kOut}, t2 = {kOut, kFc1};
  const auto f1 = writeLora(tmp.path / "one.safetensors", c, t1, rank, 1);
  const auto f2 = writeLora(tmp.path / "two.safetensors", c, t2, rank, 2);
  auto w = makeSyntheticWeights(c, 7);
  Engine e(p, *w, options(p));
  const RunResult before = e.run(r);
  e.loadLora(readLora(tmp.path / "one.safetensors", c), 0.75);
  e.loadLora(readLora(tmp.path / "two.safetensors", c), -1.5);
  const RunResult merged = e.run(r);
  // The cold load: a folder holding the contract's merged values.
  std::map<std::string, Tensor> values;
  values[kQ] = mergedByContract(w->load(kQ), {{&f1.at(kQ), 0.75}}, rank);
  values[kOut] = mergedByContract(w->load(kOut), {{&f1.at(kOut), 0.75}, {&f2.at(kOut), -1.5}}, rank);
  values[kFc1] = mergedByContract(w->load(kFc1), {{&f2.at(kFc1), -1.5}}, rank);
  auto cold = makeCheckpointWeights(c, writeFolder(tmp.path / "ckpt", c, 7, values));
  const RunResult want = runModel(p, *cold, r, options(p));
  EXPECT_TRUE(merged.outputs.sample.bytes == want.outputs.sample.bytes);
  EXPECT_TRUE(merged.outputs.audio_sample.bytes == want.outputs.audio_sample.bytes);
  EXPECT_EQ(merged.ledger["header"]["weights"]["sha256"], want.ledger["header"]["weights"]["sha256"]);
  const auto &lora = merged.ledger["header"]["weights"]["lora"];
  ASSERT_EQ(lora.size(), 2u);
  EXPECT_EQ(lora[0]["scale"], 0.75);
  EXPECT_EQ(lora[1]["modules"], 2);
  EXPECT_EQ(lora[0]["mode"], "merged");
  EXPECT_EQ(lora[0]["sha256"].get<std::string>().size(), 64u);
  // A tensor an adapter touches cannot be updated while it is merged; others can.
  const Tensor q = w->load(kQ);
  EXPECT_THROW(e.updateWeights({input(kQ, q)}), Error);
  // Unloading restores the bytes and the identity.
  e.unloadLoras();
  const RunResult after = e.run(r);
  EXPECT_TRUE(after.outputs.sample.bytes == before.outputs.sample.bytes);
  EXPECT_EQ(after.ledger["header"]["weights"]["sha256"], before.ledger["header"]["weights"]["sha256"]);
  EXPECT_EQ(after.ledger["header"]["weights"]["lora"].size(), 0u);
  // A refused adapter (a non-finite merged value: a huge scale) changes nothing.
  EXPECT_THROW(e.loadLora(readLora(tmp.path / "one.safetensors", c), 1e300), Error);
  EXPECT_TRUE(e.run(r).outputs.sample.bytes == before.outputs.sample.bytes);
  EXPECT_EQ(e.lorasLoaded(), 0u);
}

// An adapter over a tensor a hot update wrote: merged from the updated value, and the unload returns to it (not
// to the checkpoint's).
TEST(WeightUpdate, LoraOverAnUpdatedTensorUnloadsToTheUpdate) {
  const h3::Config c = h3::namedConfig("tiny");
  const plan::Plan p = loadModelPlan(c, /*fuse=*/true);
  const Request r = makeRequest(c, {4, 2, 1, 2, 2, 1, 2}, 3);
  TempDir tmp;
  const auto f = writeLora(tmp.path / "one.safetensors", c, {kOut}, 4, 9);
  auto w = makeSyntheticWeights(c, 7);
  auto other = makeSyntheticWeights(c, 5);
  const Tensor updated = other->load(kOut);
  Engine e(p, *w, options(p));
  e.updateWeights({input(kOut, updated)});
  const RunResult afterUpdate = e.run(r);
  e.loadLora(readLora(tmp.path / "one.safetensors", c), 2.0);
  std::map<std::string, Tensor> values = {{kOut, mergedByContract(updated, {{&f.at(kOut), 2.0}}, 4)}};
  auto cold = makeCheckpointWeights(c, writeFolder(tmp.path / "ckpt", c, 7, values));
  EXPECT_TRUE(e.run(r).outputs.sample.bytes == runModel(p, *cold, r, options(p)).outputs.sample.bytes);
  e.unloadLoras();
  const RunResult back = e.run(r);
  EXPECT_TRUE(back.outputs.sample.bytes == afterUpdate.outputs.sample.bytes);
  EXPECT_EQ(back.ledger["header"]["weights"]["sha256"], afterUpdate.ledger["header"]["weights"]["sha256"]);
}

} // namespace weight_update_test
