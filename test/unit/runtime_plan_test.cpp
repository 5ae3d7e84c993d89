// plan.json reading fails closed, naming the JSON pointer of the problem.
#include "runtime_test_plans.h"

#include "h3c/runtime/nodes.h"
#include "h3c/support/error.h"
#include "h3c/support/files.h"
#include "h3c/support/sha256.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace fs = std::filesystem;
using namespace h3c;
using namespace h3c::rt;
using nlohmann::json;

namespace {

json tinyPlan(bool fuse = false) { return testplans::modelPlan(h3::namedConfig("tiny"), fuse); }

void rejects(const json &plan, const std::string &needle, const fs::path &dir = "/nonexistent") {
  try {
    planFromJson(plan, dir, "plan.json");
    ADD_FAILURE() << "accepted a bad plan (expected: " << needle << ")";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

size_t opIndexOf(const json &plan, const std::string &node) {
  for (size_t i = 0; i < plan["ops"].size(); ++i)
    for (const auto &n : plan["ops"][i]["nodes"])
      if (n == node)
        return i;
  return SIZE_MAX;
}

} // namespace

TEST(RuntimePlan, ValidPlansLoad) {
  for (bool fuse : {false, true}) {
    Plan p = planFromJson(tinyPlan(fuse), "/nonexistent");
    EXPECT_EQ(p.tp, 1);
    EXPECT_EQ(p.fuse, fuse);
    EXPECT_EQ(p.outputs.at("sample"), "unpack:sample");
    size_t nodes = 0;
    for (const auto &op : p.ops)
      nodes += op.nodes.size();
    EXPECT_EQ(nodes, expectedNodes(p.config).size());
    EXPECT_EQ(p.ops.front().op, "rope_table");
    // lastUse: the packed stream dies at the first block's norm1 ... and plan outputs are never freed.
    auto last = p.lastUse();
    EXPECT_EQ(last.at("unpack:sample"), SIZE_MAX);
  }
  EXPECT_EQ(expectedNodes(h3::namedConfig("full")).size(), 893u);
}

TEST(RuntimePlan, HashIsCheckedAgainstTheContent) {
  json p = tinyPlan();
  // plan_sha256 = sha256 of the canonical JSON of the plan without plan_sha256 (computed here independently).
  json copy = p;
  copy.erase("plan_sha256");
  EXPECT_EQ(p["plan_sha256"], sha256Hex(copy.dump()));
  p["ops"][3]["order"]["units"] = 2;
  rejects(p, "#/plan_sha256");
}

TEST(RuntimePlan, StructuralErrorsNameTheirPointer) {
  json p = tinyPlan();
  json a = p;
  a["schema"] = "h3c-plan-v0";
  rejects(testplans::rehash(a), "#/schema");
  json b = p;
  b["surprise"] = 1;
  rejects(testplans::rehash(b), "#/surprise");
  json c = p;
  c["ops"][2]["op"] = "conv2d";
  rejects(testplans::rehash(c), "#/ops/2/op");
  size_t i = opIndexOf(p, "proj_in");
  json d = p;
  d["ops"][i]["order"] = {{"kind", "lane_tree"}, {"lanes", 32}, {"acc", "f32"}};
  rejects(testplans::rehash(d), "must carry a 'k_chunks'");
  json e = p;
  e["ops"][i]["order"]["k_step"] = 32;
  rejects(testplans::rehash(e), "#/ops/" + std::to_string(i) + "/order/k_step");
  json f = p;
  f["ops"][i]["order"] = nullptr;
  rejects(testplans::rehash(f), "#/ops/" + std::to_string(i) + "/order");
  json g = p;
  g["ops"][i]["in"][0] = "@nothing";
  rejects(testplans::rehash(g), "unknown value '@nothing'");
  // Use before definition: the first block's norm1 reads a value defined later.
  size_t n1 = opIndexOf(p, "transformer_blocks.0.norm1");
  json h = p;
  h["ops"][n1]["in"][0] = "transformer_blocks.1.gate_residual_ff";
  rejects(testplans::rehash(h), "read before any op defines it");
  json k = p;
  k["values"]["pack"]["rows"] = "Q";
  rejects(testplans::rehash(k), "#/values/pack/rows");
  json m = p;
  m["values"]["@timestep"]["batch"] = true;
  rejects(testplans::rehash(m), "#/values/@timestep/batch");
  json o = p;
  o["options"]["tp"] = 3;
  rejects(testplans::rehash(o), "#/options/tp");
}

TEST(RuntimePlan, EveryNodeExactlyOnce) {
  json p = tinyPlan();
  size_t i = opIndexOf(p, "transformer_blocks.1.ff.swiglu");
  json a = p;
  a["ops"][i]["nodes"] = json::array({"transformer_blocks.1.ff.swiglu", "transformer_blocks.1.norm2"});
  rejects(testplans::rehash(a), "already implemented");
  json b = p;
  b["ops"][i]["nodes"] = json::array({"transformer_blocks.7.ff.swiglu"});
  rejects(testplans::rehash(b), "not a node of this config");
  // Dropping the unpack op leaves its node uncovered (and the outputs undefined).
  json c = p;
  c["ops"].erase(c["ops"].size() - 1);
  rejects(testplans::rehash(c), "never defined");
  json d = p;
  size_t s = opIndexOf(p, "transformer_blocks.0.ff.swiglu");
  d["ops"][s]["nodes"] = json::array();
  rejects(testplans::rehash(d), "at least one node");
}

TEST(RuntimePlan, KernelSourcesAreHashChecked) {
  fs::path dir = fs::temp_directory_path() / ("h3c_plan_k_" + std::to_string(::getpid()));
  fs::create_directories(dir / "kernels");
  writeFileAtomic(dir / "kernels/k1.cu", "extern \"C\" __global__ void k1() {}\n");
  json p = tinyPlan();
  size_t i = opIndexOf(p, "proj_in");
  p["ops"][i]["kernel"] = "k1";
  p["kernels"]["k1"] = {{"file", "kernels/k1.cu"}, {"sha256", sha256File(dir / "kernels/k1.cu")}, {"entry", "k1"}};
  Plan ok = planFromJson(testplans::rehash(p), dir);
  EXPECT_EQ(*ok.ops[i].kernel, "k1");
  json bad = p;
  bad["kernels"]["k1"]["sha256"] = std::string(64, 'a');
  rejects(testplans::rehash(bad), "#/kernels/k1/sha256", dir);
  json missing = p;
  missing["kernels"]["k1"]["file"] = "kernels/k2.cu";
  rejects(testplans::rehash(missing), "does not exist", dir);
  json escape = p;
  escape["kernels"]["k1"]["file"] = "../k1.cu";
  rejects(testplans::rehash(escape), "relative to the plan folder", dir);
  json unknown = p;
  unknown["ops"][i]["kernel"] = "k9";
  rejects(testplans::rehash(unknown), "#/ops/" + std::to_string(i) + "/kernel", dir);
  // On disk: loadPlan(dir) reads dir/plan.json.
  writeFileAtomic(dir / "plan.json", testplans::rehash(p).dump());
  EXPECT_EQ(loadPlan(dir).ops.size(), ok.ops.size());
  writeFileAtomic(dir / "plan.json", "{not json");
  EXPECT_THROW(loadPlan(dir), Error);
  fs::remove_all(dir);
}
