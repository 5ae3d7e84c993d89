// `h3c compile --backward --checkpoint blocks` (docs/contract.md sections 5 and 14): the checkpoint segments written
// and read back the same, and the reader refusing segments edited (and re-hashed) so that an executor following
// them would free a value still read, recompute from a value it dropped, or recompute after the first gradient op
// that reads the result, or recompute into a slot a live value holds.
#include "h3c/Codegen/Compile.h"
#include "h3c/plan/checkpoint.h"
#include "h3c/plan/io.h"
#include "h3c/support/error.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

namespace fs = std::filesystem;
using nlohmann::json;
using namespace h3c;

// (a named namespace holding the tests too: the unity build compiles a binary's test files as one translation
// unit, where anonymous namespaces would merge)
namespace checkpoint_plan_test {

struct TinyCheckpointed {
  fs::path dir = fs::temp_directory_path() / ("h3c_checkpoint_plan_" + std::to_string(::getpid()));
  plan::Plan plan;
  json doc;
  TinyCheckpointed() {
    codegen::CompileOptions o;
    o.fuse = false;
    o.backward = true;
    o.checkpoint = true;
    o.tokens = 256;
    const h3::Fingerprint fp = h3::deriveFingerprint(h3::namedConfig("tiny"), "tiny");
    fs::remove_all(dir);
    plan::writePlanFolder(codegen::compile(fp, "0000", o).plan.plan, dir);
    plan = plan::loadPlan(dir);
    doc = plan::planToJson(plan);
  }
  ~TinyCheckpointed() { fs::remove_all(dir); }
};

const TinyCheckpointed &tiny() {
  static TinyCheckpointed t;
  return t;
}

void rejects(json p, const std::string &needle) {
  p["plan_sha256"] = plan::computePlanSha256(p);
  try {
    plan::planFromJson(p, tiny().dir, "plan.json");
    ADD_FAILURE() << "accepted bad checkpoints (expected: " << needle << ")";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(CheckpointPlan, BlockOfNodes) {
  EXPECT_EQ(plan::blockOf("transformer_blocks.7.attn.to_q"), "transformer_blocks.7");
  EXPECT_EQ(plan::blockOf("token_refiner.refiner_blocks.0.norm1"), "token_refiner.refiner_blocks.0");
  EXPECT_EQ(plan::blockOf("proj_in"), "");
  EXPECT_EQ(plan::blockOf("time_embedder.linear_1"), "");
  EXPECT_EQ(plan::blockOf("transformer_blocks.x.norm1"), "");
}

TEST(CheckpointPlan, WrittenReadBackAndRefusedWhenEdited) {
  const json &good = tiny().doc;
  ASSERT_TRUE(good["functions"]["backward"].contains("checkpoints"));
  EXPECT_EQ(plan::planToJson(plan::planFromJson(good, tiny().dir)), good);
  const json &cs = good["functions"]["backward"]["checkpoints"];
  ASSERT_EQ(cs.size(), 4u);  // tiny: two refiner blocks, two transformer blocks
  const std::string w = "/functions/backward/checkpoints/1";
  auto edit = [&](auto f) {
    json p = good;
    f(p["functions"]["backward"]["checkpoints"]);
    return p;
  };
  // A kept value left out: the forward would drop what the recompute reads.
  rejects(edit([](json &c) { c[1]["kept"].erase(c[1]["kept"].size() - 1); }), w + "/kept");
  // A recompute op of the previous segment, or past its end.
  rejects(edit([](json &c) { c[1]["recompute"][0] = c[0]["recompute"][0]; }), "is outside the segment");
  // Not ascending.
  rejects(edit([](json &c) { std::swap(c[1]["recompute"][0], c[1]["recompute"][1]); }), "not ascending");
  // Recomputing after the first gradient op that reads a recomputed value, or freeing before the last.
  rejects(edit([](json &c) { c[1]["backward_ops"][0] = c[1]["backward_ops"][0].get<int64_t>() + 1; }),
          w + "/backward_ops");
  rejects(edit([](json &c) { c[1]["backward_ops"][1] = c[1]["backward_ops"][1].get<int64_t>() - 1; }),
          w + "/backward_ops");
  // Overlapping segments; a segment holding another block's op.
  rejects(edit([](json &c) { c[1]["forward_ops"][0] = c[0]["forward_ops"][1].get<int64_t>() - 1; }),
          "overlaps or precedes");
  rejects(edit([](json &c) { c[1]["forward_ops"][1] = c[2]["forward_ops"][0].get<int64_t>() + 1; }),
          "not of block");
  // Rerunning the op that defines the block's output (read by the next block): the forward could not drop it.
  rejects(edit([&](json &c) {
            const int64_t end = c[1]["forward_ops"][1].get<int64_t>();
            c[1]["recompute"].push_back(end - 1);
          }),
          "which a forward op after the segment or an output reads");
  rejects(edit([](json &c) { c[1]["segment"] = "proj_in"; }), "names no block");
  rejects(edit([](json &c) { c[1]["color"] = 1; }), w + "/color");
}

// A recomputed value's second slot (plan/slots.h): refused where the recompute would overwrite a value still live,
// missing, on a value no segment recomputes, or naming no slot.
TEST(CheckpointPlan, RecomputeSlotsRefusedOverLiveValues) {
  const json &good = tiny().doc;
  const json &c = good["functions"]["backward"]["checkpoints"][1];
  const size_t k = c["recompute"][0].get<size_t>();
  const std::string recomputed = good["functions"]["forward"]["ops"][k]["out"][0].get<std::string>();
  const std::string kept = c["kept"][0].get<std::string>();  // live from the forward through the recompute
  ASSERT_TRUE(good["values"][recomputed].contains("recompute_slot")) << recomputed;
  ASSERT_FALSE(good["values"][kept].contains("recompute_slot")) << kept;
  auto edit = [&](auto f) {
    json p = good;
    f(p);
    return p;
  };
  // The recompute would write into the slot of a value it reads.
  rejects(edit([&](json &p) { p["values"][recomputed]["recompute_slot"] = p["values"][kept]["slot"]; }),
          "/values/" + recomputed + "/recompute_slot");
  rejects(edit([&](json &p) { p["values"][recomputed]["recompute_slot"] = p["values"][kept]["slot"]; }),
          "with '" + kept + "', which is still live");
  // No second slot for a recomputed value; one for a value no segment recomputes; one of no slot.
  rejects(edit([&](json &p) { p["values"][recomputed].erase("recompute_slot"); }), "has no recompute_slot");
  rejects(edit([&](json &p) { p["values"][kept]["recompute_slot"] = 0; }), "is recomputed by no checkpoint segment");
  rejects(edit([&](json &p) { p["values"][recomputed]["recompute_slot"] = 1 << 19; }), "no slot with id");
  // Without the segments nothing is recomputed: the plan's recompute slots are refused.
  rejects(edit([&](json &p) { p["functions"]["backward"].erase("checkpoints"); }),
          "is recomputed by no checkpoint segment");
  // Two graph inputs (both live at the first step) in one slot.
  const json &in = good["functions"]["forward"]["inputs"];
  rejects(edit([&](json &p) { p["values"][in[1].get<std::string>()]["slot"] = p["values"][in[0].get<std::string>()]["slot"]; }),
          "/values/" + in[1].get<std::string>() + "/slot");
}

TEST(CheckpointPlan, NeedsABackward) {
  codegen::CompileOptions o;
  o.checkpoint = true;
  o.fuse = false;
  const h3::Fingerprint fp = h3::deriveFingerprint(h3::namedConfig("tiny"), "tiny");
  try {
    codegen::compile(fp, "0000", o);
    ADD_FAILURE() << "compiled checkpoints without a backward";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("--checkpoint"), std::string::npos) << e.what();
  }
}

} // namespace checkpoint_plan_test
