// Unmerged LoRA on the CPU engine (docs/contract.md section 13; lora_slots.h, engine.h). The plans are the
// hand-written test plans with the LoRA path added here by JSON edits (not by the compiler's h3-lora pass): a
// lora_down op before every attention and feed-forward linear of the blocks, its output the linear's last input,
// the up slot its last weight. Checked against independent expectations: zero slots give the plain plan's bytes;
// an adapter gives the merged adapter's outputs within a bound and its effect far above it; two stacked adapters
// give the bytes of the one adapter whose factors are theirs concatenated; unload, refusals, hot updates of W beside
// a loaded adapter; the plan reader refuses LoRA paths that break the contract.
#include "error_of.h"
#include "run_options.h"
#include "test_plans.h"

#include "h3c/runtime/engine.h"
#include "h3c/runtime/lora.h"
#include "h3c/runtime/lora_slots.h"
#include "h3c/support/error.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

using namespace h3c;
using namespace h3c::rt;

namespace lora_unmerged_test {

using testplans::json;

RunOptions options(const plan::Plan &p) { return testtool::planOptions(p); }

bool targeted(const json &op) {
  for (const auto &n : op["nodes"]) {
    const std::string s = n;
    if (s.rfind("transformer_blocks.", 0) != 0) continue;
    for (const char *m : {".attn.to_q", ".attn.to_out.0", ".ff.net.0.proj", ".ff.net.2"})
      if (s.size() >= std::strlen(m) && s.compare(s.size() - std::strlen(m), std::strlen(m), m) == 0) return true;
  }
  return false;
}

// `plan` (a finished test plan document, fused) with the LoRA path of rank `rank` on every targeted linear of the
// blocks, as contract section 13 spells it.
json withLora(json plan, int64_t rank) {
  json ops = json::array();
  int64_t slot = int64_t(plan["slots"].size());
  for (json op : testplans::opsOf(plan)) {
    const std::string kind = op["op"];
    if ((kind == "linear" || kind == "qkv_linear") && targeted(op)) {
      const bool qkv = kind == "qkv_linear";
      const int64_t groups = qkv ? 3 : 1, width = groups * rank, K = op["attrs"]["K"];
      const int64_t rows = qkv ? 3 * op["attrs"]["N"].get<int64_t>() : op["attrs"]["N"].get<int64_t>();
      const std::string x = op["in"][0], module = op["nodes"][0].get<std::string>() + (qkv ? "kv" : "");
      const std::string t = module + ":lora_t", down = module + ".lora_down", up = module + ".lora_up";
      json xv = plan["values"][x];
      plan["values"][t] = {{"dtype", "BF16"}, {"rows", xv["rows"]}, {"cols", width}, {"batch", xv["batch"]}, {"slot", slot}};
      plan["slots"].push_back({{"id", slot}, {"bytes_per_row", {{xv["rows"].get<std::string>(), 2 * width}}}, {"fixed_bytes", 0}});
      ++slot;
      ops.push_back({{"op", "lora_down"}, {"nodes", json::array()}, {"in", {x}}, {"out", {t}},
                     {"weights", {{"weight", {down}}, {"bias", json::array()}}},
                     {"attrs", {{"K", K}, {"N", width}, {"out_dtype", "BF16"}, {"x_dtype", "BF16"}, {"w_dtype", "BF16"},
                                {"shard", {{"kind", "replicated"}, {"tp", 1}}}}},
                     {"order", op["order"]}, {"kernel", nullptr}});
      op["in"].push_back(t);
      op["weights"]["weight"].push_back(up);
      op["attrs"]["lora_k"] = width;
      for (const auto &[name, shape] : {std::pair{down, std::vector<int64_t>{width, K}}, std::pair{up, std::vector<int64_t>{rows, width}}})
        plan["weights"].push_back({{"buffer", name}, {"tensors", {{{"name", name}, {"dtype", "BF16"}, {"shape", shape}, {"adapter", true}}}}});
    }
    ops.push_back(op);
  }
  testplans::opsOf(plan) = ops;
  return testplans::rehash(plan);
}

plan::Plan loraPlan(const h3::Config &c, int64_t rank, int sp = 1) {
  return plan::planFromJson(withLora(testplans::modelPlan(c, /*fuse=*/true, 1, sp), rank), "/nonexistent", "lora.json");
}

// An adapter with one module per target: factors from a small LCG (lora_A [r, in], lora_B [out, r]), alpha = r.
LoraModule module(const h3::Config &c, const std::string &target, int64_t rank, uint32_t seed) {
  LoraModule m;
  m.target = target;
  m.rank = rank;
  m.alpha = double(rank);
  int64_t in = 0, out = 0;
  for (const auto &s : h3::diffusersTensors(c))
    if (s.name == target) out = s.shape[0], in = s.shape[1];
  uint32_t st = seed * 2654435761u + 17;
  auto next = [&] {
    st = st * 1664525u + 1013904223u;
    return (float(st >> 8) / float(1 << 24) - 0.5f) * 0.5f;
  };
  std::vector<float> a(size_t(rank * in)), b(size_t(out * rank));
  for (float &v : a) v = next();
  for (float &v : b) v = next();
  m.down = Tensor::fromFloats(DType::F32, {rank, in}, a.data());
  m.up = Tensor::fromFloats(DType::F32, {out, rank}, b.data());
  return m;
}

LoraAdapter adapter(std::vector<LoraModule> modules, const std::string &name) {
  LoraAdapter a;
  a.path = name;
  a.sha256 = std::string(64, '0');
  a.format = "diffusers";
  std::sort(modules.begin(), modules.end(), [](const LoraModule &x, const LoraModule &y) { return x.target < y.target; });
  a.modules = std::move(modules);
  return a;
}

const char *kQ = "transformer_blocks.0.attn.to_q.weight";
const char *kV = "transformer_blocks.0.attn.to_v.weight";
const char *kOut = "transformer_blocks.1.attn.to_out.0.weight";
const char *kFc1 = "transformer_blocks.1.ff.net.0.proj.weight";
const char *kFc2 = "transformer_blocks.0.ff.net.2.weight";

double relDiff(const Tensor &a, const Tensor &b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = double(a.getFloat(i)) - double(b.getFloat(i));
    num += d * d;
    den += double(b.getFloat(i)) * double(b.getFloat(i));
  }
  return std::sqrt(num / den);
}

TEST(LoraUnmerged, ZeroSlotsGiveThePlainPlansBytes) {
  const h3::Config c = h3::namedConfig("tiny");
  const Request r = makeRequest(c, {4, 2, 1, 2, 2, 1, 2}, 3);
  auto w = makeSyntheticWeights(c, 7);
  const plan::Plan plain = testplans::loadModelPlan(c, true), lora = loraPlan(c, 64);
  const RunResult a = runModel(plain, *w, r, options(plain)), b = runModel(lora, *w, r, options(lora));
  EXPECT_TRUE(a.outputs.sample.bytes == b.outputs.sample.bytes);
  EXPECT_TRUE(a.outputs.audio_sample.bytes == b.outputs.audio_sample.bytes);
  EXPECT_EQ(loraSlotTargets(lora).size(), 2u * 6u);  // q, k, v, to_out, fc1, fc2 of two blocks
  EXPECT_TRUE(loraSlotTargets(plain).empty());
}

// The adapter's term through the slots against the same adapter merged into W (section 12, tested on its own): the
// same function up to BF16 roundings, so the outputs agree within a bound far below the adapter's own effect.
TEST(LoraUnmerged, AnAdapterAgreesWithItsMergeAndUnloads) {
  const h3::Config c = h3::namedConfig("tiny");
  const Request r = makeRequest(c, {4, 2, 1, 2, 2, 1, 2}, 3);
  auto w = makeSyntheticWeights(c, 7);
  const plan::Plan plain = testplans::loadModelPlan(c, true), lora = loraPlan(c, 64);
  const LoraAdapter a = adapter({module(c, kQ, 8, 1), module(c, kV, 4, 2), module(c, kOut, 8, 3),
                                 module(c, kFc1, 16, 4), module(c, kFc2, 8, 5)}, "a");
  Engine un(lora, *w, options(lora)), merged(plain, *w, options(plain));
  const RunResult base = un.run(r);
  un.loadLora(a, 0.8);
  merged.loadLora(a, 0.8);
  EXPECT_TRUE(un.loraUnmerged());
  EXPECT_FALSE(merged.loraUnmerged());
  const RunResult u = un.run(r), m = merged.run(r);
  for (auto [x, y, z] : {std::tuple{&u.outputs.sample, &m.outputs.sample, &base.outputs.sample},
                         std::tuple{&u.outputs.audio_sample, &m.outputs.audio_sample, &base.outputs.audio_sample}}) {
    const double err = relDiff(*x, *y), effect = relDiff(*y, *z);
    EXPECT_LT(err, 2e-2) << "unmerged vs merged";
    EXPECT_GT(effect, 10 * err) << "the adapter's effect";
  }
  EXPECT_EQ(u.ledger["header"]["weights"]["lora"][0]["mode"], "unmerged");
  EXPECT_NE(u.ledger["header"]["weights"]["sha256"], base.ledger["header"]["weights"]["sha256"]);
  // W is untouched: a hot update of it goes on beside the adapter; a slot the adapter fills is refused.
  auto other = makeSyntheticWeights(c, 5);
  const Tensor fc2 = other->load(kFc2);
  EXPECT_NO_THROW(un.updateWeights({WeightInput{kFc2, fc2.dtype, fc2.shape, fc2.bytes.data(), 0}}));
  const Tensor slot = un.readWeight("transformer_blocks.0.ff.net.2.lora_up");
  EXPECT_THROW(un.updateWeights({WeightInput{"transformer_blocks.0.ff.net.2.lora_up", slot.dtype, slot.shape,
                                             slot.bytes.data(), 0}}), Error);
  const Tensor w2 = w->load(kFc2);
  un.updateWeights({WeightInput{kFc2, w2.dtype, w2.shape, w2.bytes.data(), 0}});
  EXPECT_TRUE(un.run(r).outputs.sample.bytes == u.outputs.sample.bytes);
  // Unloading zeroes the slots: the base bytes and identity again.
  un.unloadLoras();
  const RunResult back = un.run(r);
  EXPECT_TRUE(back.outputs.sample.bytes == base.outputs.sample.bytes);
  EXPECT_EQ(back.ledger["header"]["weights"]["sha256"], base.ledger["header"]["weights"]["sha256"]);
}

// Two adapters loaded one after the other fill consecutive ranks of the slots: the bytes of one adapter whose
// factors are theirs concatenated (same alpha / rank, so the same scale s).
TEST(LoraUnmerged, StackedAdaptersEqualTheirConcatenation) {
  const h3::Config c = h3::namedConfig("tiny");
  const Request r = makeRequest(c, {4, 2, 1, 2, 2, 1, 2}, 5);
  auto w = makeSyntheticWeights(c, 7);
  const plan::Plan lora = loraPlan(c, 64);
  const LoraModule m1 = module(c, kOut, 8, 11), m2 = module(c, kOut, 8, 12);
  LoraModule both = m1;
  both.rank = 16;
  both.alpha = 16;
  std::vector<float> a = m1.down.toFloats(), a2 = m2.down.toFloats(), b1 = m1.up.toFloats(), b2 = m2.up.toFloats();
  a.insert(a.end(), a2.begin(), a2.end());
  const int64_t out = m1.up.shape[0];
  std::vector<float> b(size_t(out * 16));
  for (int64_t i = 0; i < out; ++i)
    for (int64_t k = 0; k < 8; ++k) {
      b[size_t(i * 16 + k)] = b1[size_t(i * 8 + k)];
      b[size_t(i * 16 + 8 + k)] = b2[size_t(i * 8 + k)];
    }
  both.down = Tensor::fromFloats(DType::F32, {16, m1.down.shape[1]}, a.data());
  both.up = Tensor::fromFloats(DType::F32, {out, 16}, b.data());
  Engine two(lora, *w, options(lora)), one(lora, *w, options(lora));
  two.loadLora(adapter({m1}, "one"), -1.25);
  two.loadLora(adapter({m2}, "two"), -1.25);
  one.loadLora(adapter({both}, "both"), -1.25);
  const RunResult x = two.run(r), y = one.run(r);
  EXPECT_TRUE(x.outputs.sample.bytes == y.outputs.sample.bytes);
  EXPECT_TRUE(x.outputs.audio_sample.bytes == y.outputs.audio_sample.bytes);
  EXPECT_EQ(x.ledger["header"]["weights"]["sha256"], y.ledger["header"]["weights"]["sha256"]);
}

// Refused adapters change nothing: ranks beyond the slot rank, a scale that is no finite float.
TEST(LoraUnmerged, RefusedAdaptersChangeNothing) {
  const h3::Config c = h3::namedConfig("tiny");
  const Request r = makeRequest(c, {4, 2, 1, 2, 2, 1, 2}, 3);
  auto w = makeSyntheticWeights(c, 7);
  const plan::Plan lora = loraPlan(c, 64);
  Engine e(lora, *w, options(lora));
  e.loadLora(adapter({module(c, kOut, 8, 1)}, "ok"), 1.0);
  const RunResult before = e.run(r);
  auto refused = [&](const LoraAdapter &a, double scale, const char *what) {
    const std::string m = testtool::errorOf([&] { e.loadLora(a, scale); });
    EXPECT_NE(m.find(what), std::string::npos) << what << ": " << m;
    EXPECT_EQ(e.lorasLoaded(), 1u);
    const RunResult now = e.run(r);
    EXPECT_TRUE(now.outputs.sample.bytes == before.outputs.sample.bytes) << what;
    EXPECT_EQ(now.ledger["header"]["weights"]["sha256"], before.ledger["header"]["weights"]["sha256"]) << what;
  };
  refused(adapter({module(c, kOut, 57, 4)}, "big"), 1.0, "exceeds the plan's LoRA slot rank 64");
  refused(adapter({module(c, kFc1, 4, 5)}, "huge"), 1e39, "finite");
}

// An adapter that also targets weights no slot serves (the refiner's linears in these plans, proj_out in F32):
// those modules are merged (section 12), the rest go into the slots. Expected: the same engine with the merged
// values written as a hot update (mergeLora, tested against the contract on its own) and the served modules loaded
// alone; unload restores both.
TEST(LoraUnmerged, ModulesWithoutSlotsAreMerged) {
  const h3::Config c = h3::namedConfig("tiny");
  const Request r = makeRequest(c, {4, 2, 1, 2, 2, 1, 2}, 3);
  auto w = makeSyntheticWeights(c, 7);
  const plan::Plan lora = loraPlan(c, 64);
  const char *kRef = "token_refiner.refiner_blocks.0.attn.to_q.weight", *kProj = "proj_out.weight";
  const LoraModule out = module(c, kOut, 8, 1), ref = module(c, kRef, 4, 2), proj = module(c, kProj, 4, 3);
  Engine mixed(lora, *w, options(lora)), want(lora, *w, options(lora));
  const RunResult base = mixed.run(r);
  mixed.loadLora(adapter({out, ref, proj}, "mixed"), 0.6);
  const RunResult got = mixed.run(r);
  const Tensor mRef = mergeLora(w->load(kRef), {{&ref, 0.6}}), mProj = mergeLora(w->load(kProj), {{&proj, 0.6}});
  want.updateWeights({WeightInput{kRef, mRef.dtype, mRef.shape, mRef.bytes.data(), 0},
                      WeightInput{kProj, mProj.dtype, mProj.shape, mProj.bytes.data(), 0}});
  want.loadLora(adapter({out}, "served"), 0.6);
  const RunResult exp = want.run(r);
  EXPECT_TRUE(got.outputs.sample.bytes == exp.outputs.sample.bytes);
  EXPECT_TRUE(got.outputs.audio_sample.bytes == exp.outputs.audio_sample.bytes);
  EXPECT_EQ(got.ledger["header"]["weights"]["sha256"], exp.ledger["header"]["weights"]["sha256"]);
  EXPECT_EQ(got.ledger["header"]["weights"]["lora"][0]["merged_modules"], 2);
  EXPECT_EQ(got.ledger["header"]["weights"]["lora"][0]["mode"], "unmerged");
  mixed.unloadLoras();
  const RunResult back = mixed.run(r);
  EXPECT_TRUE(back.outputs.sample.bytes == base.outputs.sample.bytes);
  EXPECT_EQ(back.ledger["header"]["weights"]["sha256"], base.ledger["header"]["weights"]["sha256"]);
}

// Sequence parallelism: every rank runs the LoRA path on its rows; the bytes of the one-rank plan.
TEST(LoraUnmerged, SequenceParallelRanksGiveTheOneRankBytes) {
  const h3::Config c = h3::namedConfig("tiny");
  const Request r = makeRequest(c, {4, 2, 1, 2, 2, 1, 2}, 3);
  auto w = makeSyntheticWeights(c, 7);
  const plan::Plan one = loraPlan(c, 64), two = loraPlan(c, 64, 2);
  const LoraAdapter a = adapter({module(c, kQ, 8, 1), module(c, kFc1, 8, 2)}, "a");
  Engine e1(one, *w, options(one)), e2(two, *w, options(two));
  e1.loadLora(a, 0.5);
  e2.loadLora(a, 0.5);
  EXPECT_TRUE(e1.run(r).outputs.sample.bytes == e2.run(r).outputs.sample.bytes);
}

// The plan reader holds the LoRA path to the contract.
TEST(LoraUnmerged, ThePlanReaderRefusesBrokenLoraPaths) {
  const h3::Config c = h3::namedConfig("tiny");
  const json good = withLora(testplans::modelPlan(c, true), 64);
  EXPECT_NO_THROW(plan::planFromJson(good, "/nonexistent", "good.json"));
  auto refused = [&](const std::function<void(json &)> &edit, const char *what) {
    json p = good;
    edit(p);
    const std::string m = testtool::errorOf([&] { plan::planFromJson(testplans::rehash(p), "/nonexistent", "bad.json"); });
    EXPECT_NE(m.find(what), std::string::npos) << what << ": " << m;
  };
  auto firstOf = [](json &p, const char *kind) -> json & {
    for (json &o : testplans::opsOf(p))
      if (o["op"] == kind && (std::string(kind) != "linear" || o["attrs"].contains("lora_k"))) return o;
    throw std::runtime_error("no op");
  };
  refused([&](json &p) { firstOf(p, "linear")["attrs"]["lora_k"] = 128; }, "lora_t has 64 columns");
  refused([&](json &p) { firstOf(p, "linear")["attrs"]["lora_k"] = 96; }, "multiple of 64");
  refused([&](json &p) { firstOf(p, "lora_down")["nodes"] = {"transformer_blocks.0.ff.net.2"}; }, "implements no node");
  refused([&](json &p) {
    for (json &b : p["weights"])
      if (b["tensors"][0]["name"] == "transformer_blocks.0.ff.net.2.lora_up") b["tensors"][0]["shape"] = {24, 128};
  }, "adapter slot 'transformer_blocks.0.ff.net.2.lora_up' is 24x128");
  refused([&](json &p) {
    for (json &b : p["weights"])
      if (b["tensors"][0]["name"] == "transformer_blocks.0.ff.net.2.lora_up") b["tensors"][0].erase("adapter");
  }, "is not a tensor of this config");
  refused([&](json &p) {
    json &q = firstOf(p, "qkv_linear");
    q["in"].back() = p["functions"]["forward"]["ops"][0]["out"][0];  // the proj_in output, no lora_down's
  }, "reads");
}

} // namespace lora_unmerged_test
