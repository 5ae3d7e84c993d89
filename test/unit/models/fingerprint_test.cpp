// The architecture fingerprint: the checked-in file, counts from H3-FACTS.md and docs/contract.md written out as
// literals, the wiring of diffusers' forward checked node by node, and the strict loader's rejections.
#include "h3c/models/fingerprint.h"
#include "h3c/support/error.h"
#include "h3c/support/files.h"

#include "tool.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <map>

using namespace h3c;
using h3c::testtool::runTool;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

json derivedJson(const std::string &name) {
  return h3::fingerprintToJson(h3::deriveFingerprint(h3::namedConfig(name), name));
}

size_t nodeIndex(const json &j, const std::string &id) {
  for (size_t i = 0; i < j["nodes"].size(); ++i)
    if (j["nodes"][i]["id"] == id)
      return i;
  ADD_FAILURE() << "no node " << id;
  return 0;
}

std::vector<std::string> strs(const json &j) { return j.get<std::vector<std::string>>(); }

} // namespace

TEST(Fingerprint, CheckedInFileEqualsDerivationOfFull) {
  std::string path = h3::pinnedFingerprintPath();
  EXPECT_EQ(path, std::string(H3C_SOURCE_DIR) + "/models/h3/fingerprint.json");
  json onDisk = json::parse(readFile(path));
  EXPECT_TRUE(onDisk == derivedJson("full")) << "models/h3/fingerprint.json is stale: run "
                                                "`h3c fingerprint derive --config full -o models/h3/fingerprint.json`";
  auto fp = h3::loadFingerprint(path);  // and the strict loader accepts it
  EXPECT_EQ(fp.configName, "full");
}

TEST(Fingerprint, FullCountsAndParameters) {
  auto fp = h3::loadFingerprint(h3::pinnedFingerprintPath());
  EXPECT_EQ(fp.tensors.size(), 638u);
  EXPECT_EQ(fp.parameters(), 33122992896LL);
  EXPECT_EQ(fp.nodes.size(), 893u);
  EXPECT_EQ(fp.blockNodeCount(), 878u);
  size_t blocks = 0, refiner = 0;
  std::map<std::string, int> perBlock;
  for (const auto &n : fp.nodes) {
    if (n.block.rfind("transformer_blocks.", 0) == 0)
      ++blocks;
    if (n.block.rfind("token_refiner.refiner_blocks.", 0) == 0)
      ++refiner;
    if (!n.block.empty())
      ++perBlock[n.block];
  }
  EXPECT_EQ(blocks, 850u);
  EXPECT_EQ(refiner, 28u);
  EXPECT_EQ(perBlock.size(), 52u);
  for (auto &[b, k] : perBlock)
    EXPECT_EQ(k, b.rfind("transformer_blocks.", 0) == 0 ? 17 : 14) << b;
  EXPECT_EQ(fp.videoShift, 12);
  EXPECT_EQ(fp.audioShift, 3);
  json j = json::parse(readFile(h3::pinnedFingerprintPath()));
  EXPECT_EQ(j["totals"]["parameters"].get<int64_t>(), 33122992896LL);
  EXPECT_EQ(j["model"]["repo"], "MiniMaxAI/MiniMax-H3");
  EXPECT_EQ(j["model"]["revision"], "42ed227");
}

TEST(Fingerprint, TopLevelOrderFollowsContract) {
  auto fp = h3::deriveFingerprint(h3::namedConfig("full"), "full");
  std::vector<std::string> top;
  for (const auto &n : fp.nodes)
    if (n.block.empty())
      top.push_back(n.id + "/" + n.kind);
  std::vector<std::string> expected = {
      "rope/rope_table",          "proj_in/linear",
      "audio_proj_in/linear",     "context_embedder/linear",
      "token_refiner.final_norm/rms_norm", "pack/pack",
      "time_proj/timestep_sinusoid", "time_embedder.linear_1/linear",
      "time_embedder.act/silu",   "time_embedder.linear_2/linear",
      "norm_out.linear/adaln_table", "norm_out.norm/norm_modulate",
      "proj_out/linear",          "audio_proj_out/linear",
      "unpack/unpack"};
  EXPECT_EQ(top, expected);
  // Positions: 4 top nodes, then 28 refiner nodes, final_norm at 32, pack 33, time nodes 34..37, blocks 38..887.
  EXPECT_EQ(fp.nodes[32].id, "token_refiner.final_norm");
  EXPECT_EQ(fp.nodes[38].id, "transformer_blocks.0.adaln_proj");
  EXPECT_EQ(fp.nodes[38 + 17 * 50].id, "norm_out.linear");
}

TEST(Fingerprint, BlockNodesInContractOrder) {
  auto fp = h3::deriveFingerprint(h3::namedConfig("full"), "full");
  const char *block[] = {"adaln_proj/adaln_table", "norm1/norm_modulate", "attn.to_q/linear", "attn.to_k/linear",
                         "attn.to_v/linear", "attn.norm_q/qk_norm", "attn.norm_k/qk_norm", "attn.rope_q/rope",
                         "attn.rope_k/rope", "attn.attention/attention", "attn.to_out.0/linear",
                         "gate_residual_attn/gate_residual", "norm2/norm_modulate", "ff.net.0.proj/linear",
                         "ff.swiglu/swiglu", "ff.net.2/linear", "gate_residual_ff/gate_residual"};
  const char *refiner[] = {"norm1/rms_norm", "attn.to_q/linear", "attn.to_k/linear", "attn.to_v/linear",
                           "attn.norm_q/qk_norm", "attn.norm_k/qk_norm", "attn.attention/attention",
                           "attn.to_out.0/linear", "residual_attn/residual", "norm2/rms_norm",
                           "ff.net.0.proj/linear", "ff.swiglu/swiglu", "ff.net.2/linear", "residual_ff/residual"};
  for (int b = 0; b < 2; ++b)
    for (int k = 0; k < 14; ++k) {
      const auto &n = fp.nodes[4 + 14 * b + k];
      EXPECT_EQ(n.id + "/" + n.kind, "token_refiner.refiner_blocks." + std::to_string(b) + "." + refiner[k]);
      EXPECT_EQ(n.block, "token_refiner.refiner_blocks." + std::to_string(b));
    }
  for (int b = 0; b < 50; ++b)
    for (int k = 0; k < 17; ++k) {
      const auto &n = fp.nodes[38 + 17 * b + k];
      EXPECT_EQ(n.id + "/" + n.kind, "transformer_blocks." + std::to_string(b) + "." + block[k]);
    }
}

// The wiring of diffusers' forward, written out for block 3 and the top-level nodes.
TEST(Fingerprint, WiringFollowsDiffusersForward) {
  json j = derivedJson("full");
  auto in = [&](const std::string &id) { return strs(j["nodes"][nodeIndex(j, id)]["inputs"]); };
  auto tens = [&](const std::string &id) { return strs(j["nodes"][nodeIndex(j, id)]["tensors"]); };
  auto attrs = [&](const std::string &id) { return j["nodes"][nodeIndex(j, id)]["attrs"]; };
  using V = std::vector<std::string>;
  const std::string p = "transformer_blocks.3.";
  EXPECT_EQ(in(p + "adaln_proj"), V{"time_embedder.linear_2"});
  EXPECT_EQ(tens(p + "adaln_proj"), (V{p + "adaln_proj.linear.weight", p + "adaln_proj.linear.bias"}));
  EXPECT_EQ(in(p + "norm1"),
            (V{"transformer_blocks.2.gate_residual_ff", p + "adaln_proj", "pack:ts_index", "pack:tags"}));
  EXPECT_EQ(in(p + "attn.to_k"), V{p + "norm1"});
  EXPECT_EQ(in(p + "attn.norm_k"), V{p + "attn.to_k"});
  EXPECT_EQ(in(p + "attn.rope_q"), (V{p + "attn.norm_q", "rope:cos", "rope:sin"}));
  EXPECT_EQ(in(p + "attn.attention"), (V{p + "attn.rope_q", p + "attn.rope_k", p + "attn.to_v"}));
  EXPECT_EQ(in(p + "gate_residual_attn"), (V{"transformer_blocks.2.gate_residual_ff", p + "attn.to_out.0",
                                              p + "adaln_proj", "pack:ts_index", "pack:tags"}));
  EXPECT_EQ(in(p + "norm2"), (V{p + "gate_residual_attn", p + "adaln_proj", "pack:ts_index", "pack:tags"}));
  EXPECT_EQ(in(p + "ff.swiglu"), V{p + "ff.net.0.proj"});
  EXPECT_EQ(in(p + "gate_residual_ff"),
            (V{p + "gate_residual_attn", p + "ff.net.2", p + "adaln_proj", "pack:ts_index", "pack:tags"}));
  EXPECT_EQ(in("transformer_blocks.0.norm1")[0], "pack");
  // Chunks: shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp.
  EXPECT_EQ(attrs(p + "norm1")["shift_chunk"], 0);
  EXPECT_EQ(attrs(p + "norm1")["scale_chunk"], 1);
  EXPECT_EQ(attrs(p + "gate_residual_attn")["chunk"], 2);
  EXPECT_EQ(attrs(p + "norm2")["shift_chunk"], 3);
  EXPECT_EQ(attrs(p + "norm2")["scale_chunk"], 4);
  EXPECT_EQ(attrs(p + "gate_residual_ff")["chunk"], 5);
  EXPECT_EQ(attrs(p + "adaln_proj")["out_features"], 18 * 5376);
  EXPECT_EQ(attrs(p + "adaln_proj")["rows_per_timestep"], 3);
  EXPECT_EQ(attrs(p + "attn.attention")["domain"], "S");
  EXPECT_DOUBLE_EQ(attrs(p + "attn.attention")["scale"].get<double>(), 1.0 / std::sqrt(128.0));
  EXPECT_EQ(attrs(p + "attn.rope_k")["rotary_dim"], 96);
  EXPECT_EQ(attrs(p + "ff.net.0.proj")["out_features"], 2 * 14336);
  EXPECT_EQ(attrs(p + "ff.net.2")["in_features"], 14336);
  EXPECT_EQ(attrs(p + "attn.to_out.0")["in_features"], 7168);

  // Refiner: plain pre-norm, attention over the text rows without rope.
  const std::string r = "token_refiner.refiner_blocks.1.";
  EXPECT_EQ(in(r + "norm1"), V{"token_refiner.refiner_blocks.0.residual_ff"});
  EXPECT_EQ(in("token_refiner.refiner_blocks.0.norm1"), V{"context_embedder"});
  EXPECT_EQ(in(r + "attn.attention"), (V{r + "attn.norm_q", r + "attn.norm_k", r + "attn.to_v"}));
  EXPECT_EQ(attrs(r + "attn.attention")["domain"], "Nt");
  EXPECT_EQ(in(r + "residual_attn"), (V{"token_refiner.refiner_blocks.0.residual_ff", r + "attn.to_out.0"}));
  EXPECT_EQ(in(r + "residual_ff"), (V{r + "residual_attn", r + "ff.net.2"}));
  EXPECT_EQ(in("token_refiner.final_norm"), V{r + "residual_ff"});

  // Top level.
  EXPECT_EQ(in("pack"), (V{"token_refiner.final_norm", "proj_in", "audio_proj_in", "@text_indices", "@video_indices",
                           "@audio_indices", "@position_ids", "@token_tags", "@timestep_indices"}));
  EXPECT_EQ(strs(j["nodes"][nodeIndex(j, "pack")]["outputs"]),
            (V{"pack", "pack:positions", "pack:tags", "pack:ts_index"}));
  EXPECT_EQ(strs(j["nodes"][nodeIndex(j, "rope")]["outputs"]), (V{"rope:cos", "rope:sin"}));
  EXPECT_EQ(in("time_proj"), V{"@timestep"});
  EXPECT_EQ(in("norm_out.linear"), V{"time_embedder.linear_2"});
  EXPECT_EQ(in("norm_out.norm"), (V{"transformer_blocks.49.gate_residual_ff", "norm_out.linear", "pack:ts_index"}));
  EXPECT_EQ(attrs("norm_out.norm")["row_index"], "timestep");
  EXPECT_EQ(attrs("norm_out.norm")["out_dtype"], "F32");
  EXPECT_EQ(attrs("norm_out.linear")["chunks"], 2);
  EXPECT_EQ(in("proj_out"), V{"norm_out.norm"});
  EXPECT_EQ(in("audio_proj_out"), V{"norm_out.norm"});
  EXPECT_EQ(in("unpack"), (V{"proj_out", "audio_proj_out"}));
  EXPECT_EQ(attrs("proj_in")["weight_dtype"], "F32");
  EXPECT_EQ(attrs("context_embedder")["weight_dtype"], "BF16");
  EXPECT_EQ(attrs("time_proj")["dim"], 256);
  EXPECT_EQ(attrs("rope")["theta"], 10000.0);
}

TEST(Fingerprint, EveryTensorReadByExactlyOneNode) {
  auto fp = h3::deriveFingerprint(h3::namedConfig("full"), "full");
  std::map<std::string, int> reads;
  for (const auto &n : fp.nodes)
    for (const auto &t : n.tensors)
      ++reads[t];
  EXPECT_EQ(reads.size(), 638u);
  for (const auto &t : fp.tensors)
    EXPECT_EQ(reads[t.name], 1) << t.name;
}

TEST(Fingerprint, TinyAndSmallRoundTrip) {
  for (const char *name : {"tiny", "small", "full"}) {
    json j = derivedJson(name);
    auto fp = h3::fingerprintFromJson(j, std::string(name) + "#");
    EXPECT_TRUE(h3::fingerprintToJson(fp) == j) << name;
    // Through text too (doubles such as eps and the attention scale survive).
    auto fp2 = h3::fingerprintFromJson(json::parse(j.dump(1)), name);
    EXPECT_TRUE(h3::fingerprintToJson(fp2) == j) << name;
  }
  auto tiny = h3::deriveFingerprint(h3::namedConfig("tiny"), "tiny");
  EXPECT_EQ(tiny.nodes.size(), 2u * 17 + 2 * 14 + 15);
  auto small = h3::deriveFingerprint(h3::namedConfig("small"), "small");
  EXPECT_EQ(small.nodes.size(), 893u);  // the full topology
  EXPECT_EQ(tiny.findNode("transformer_blocks.1.attn.rope_q")->attrs["rotary_dim"], 12);
}

TEST(Fingerprint, CustomConfigNeedsCustomName) {
  auto c = h3::namedConfig("tiny");
  c.num_layers = 3;
  json j = h3::fingerprintToJson(h3::deriveFingerprint(c, "custom"));
  EXPECT_EQ(h3::fingerprintFromJson(j, "x#").nodes.size(), 3u * 17 + 2 * 14 + 15);
  j["config_name"] = "tiny";
  EXPECT_THROW(h3::fingerprintFromJson(j, "x#"), Error);
}

namespace {

struct Malformed {
  const char *name;
  std::function<void(json &)> mutate;
  std::string pointer;  // after "fp.json#"
  std::string message;  // substring of the message
};

} // namespace

TEST(Fingerprint, MalformedFilesRejectedWithPointer) {
  const json good = derivedJson("tiny");
  auto idx = [&](const std::string &id) { return nodeIndex(good, id); };
  const size_t attn = idx("transformer_blocks.0.attn.attention");
  const size_t ro = idx("token_refiner.refiner_blocks.0.residual_ff");
  const size_t ntensors = good["tensors"].size();
  const std::string N = "/nodes/";
  std::vector<Malformed> cases = {
      {"schema", [](json &j) { j["schema"] = "h3-arch-fingerprint-v2"; }, "/schema", "expected \"h3-arch-fingerprint-v1\""},
      {"schema type", [](json &j) { j["schema"] = 1; }, "/schema", "expected a string"},
      {"unknown top field", [](json &j) { j["extra"] = true; }, "/extra", "unknown field"},
      {"missing sampler", [](json &j) { j.erase("sampler"); }, "/sampler", "missing required field"},
      {"not an object", [](json &j) { j = json::array(); }, "", "expected an object"},
      {"revision", [](json &j) { j["model"]["revision"] = "deadbee"; }, "/model/revision", "pinned model"},
      {"config_name", [](json &j) { j["config_name"] = "huge"; }, "/config_name", "expected full, small, tiny or custom"},
      {"config type", [](json &j) { j["config"]["hidden_size"] = "24"; }, "/config/hidden_size", "expected an integer"},
      {"config unknown key", [](json &j) { j["config"]["_class_name"] = "X"; }, "/config/_class_name", "unknown field"},
      {"config missing key", [](json &j) { j["config"].erase("ffn_dim"); }, "/config/ffn_dim", "missing required config key"},
      {"config vs name", [](json &j) { j["config"]["ffn_dim"] = 64; }, "/config", "does not equal the named config"},
      {"precision", [](json &j) { j["precision"]["f32_modules"].erase(5); }, "/precision/f32_modules", "_keep_in_fp32_modules"},
      {"sampler kind", [](json &j) { j["sampler"]["kind"] = "ddim"; }, "/sampler/kind", "rectified_flow_euler"},
      {"sampler shift", [](json &j) { j["sampler"]["video_shift"] = 0; }, "/sampler/video_shift", "positive shift"},
      {"tensor shape", [](json &j) { j["tensors"][0]["shape"][0] = 7; }, "/tensors/0/shape", "expected shape [24,16]"},
      {"tensor dtype", [](json &j) { j["tensors"][0]["dtype"] = "BF16"; }, "/tensors/0/dtype", "expected dtype F32"},
      {"tensor dtype name", [](json &j) { j["tensors"][3]["dtype"] = "FP32"; }, "/tensors/3/dtype", "expected a dtype"},
      {"tensor negative dim", [](json &j) { j["tensors"][2]["shape"][1] = -4; }, "/tensors/2/shape/1", "positive dimension"},
      {"tensor duplicate", [](json &j) { j["tensors"][1]["name"] = j["tensors"][0]["name"]; }, "/tensors/1/name", "duplicate tensor name"},
      {"tensor renamed", [](json &j) { j["tensors"][4]["name"] = "context_embedder.weights"; }, "/tensors/4/name", "expected tensor \"context_embedder.weight\""},
      {"tensor dropped", [](json &j) { j["tensors"].erase(j["tensors"].size() - 1); }, "/tensors", fmt::format("expected {} tensors", ntensors)},
      {"tensor extra field", [](json &j) { j["tensors"][5]["init"] = "ones"; }, "/tensors/5/init", "unknown field"},
      {"graph input", [](json &j) { j["graph"]["inputs"][0]["name"] = "@video"; }, "/graph/inputs/0/name", "expected graph input \"@hidden_states\""},
      {"node not object", [](json &j) { j["nodes"][3] = 5; }, N + "3", "expected an object"},
      {"node unknown field", [](json &j) { j["nodes"][17]["color"] = "red"; }, N + "17/color", "unknown field"},
      {"node missing field", [](json &j) { j["nodes"][6].erase("reductions"); }, N + "6/reductions", "missing required field"},
      {"undefined input", [](json &j) { j["nodes"][17]["inputs"][0] = "nowhere"; }, N + "17/inputs/0", "not a graph input nor an output of an earlier node"},
      {"input before definition", [&](json &j) { j["nodes"][5]["inputs"][0] = j["nodes"][ro]["id"]; }, N + "5/inputs/0", "output of an earlier node"},
      {"duplicate id", [](json &j) { j["nodes"][5]["id"] = j["nodes"][4]["id"]; }, N + "5/id", "duplicate node id"},
      {"unknown kind", [](json &j) { j["nodes"][2]["kind"] = "conv3d"; }, N + "2/kind", "unknown node kind \"conv3d\""},
      {"block mismatch", [](json &j) { j["nodes"][5]["block"] = "token_refiner.refiner_blocks.1"; }, N + "5/block", "does not belong to block"},
      {"output name", [](json &j) { j["nodes"][1]["outputs"][0] = "other"; }, N + "1/outputs/0", "must be named \"proj_in\""},
      {"output redefined", [](json &j) { j["nodes"][1]["outputs"].push_back("proj_in"); j["nodes"][1]["output_rows"].push_back("Nv"); j["nodes"][1]["output_dtypes"].push_back("F32"); }, N + "1/outputs/1", "defined twice"},
      {"rows length", [](json &j) { j["nodes"][1]["output_rows"].push_back("S"); }, N + "1/output_rows", "one per output"},
      {"rows domain", [](json &j) { j["nodes"][1]["output_rows"][0] = "X"; }, N + "1/output_rows/0", "expected a row domain"},
      {"output dtype", [](json &j) { j["nodes"][1]["output_dtypes"][0] = "float"; }, N + "1/output_dtypes/0", "expected a dtype"},
      {"unknown tensor", [](json &j) { j["nodes"][1]["tensors"][0] = "proj_in.weightx"; }, N + "1/tensors/0", "not in the fingerprint's tensor list"},
      {"tensor read twice", [](json &j) { j["nodes"][2]["tensors"][0] = "proj_in.weight"; }, N + "2/tensors/0", "already read by node"},
      {"tensor unread", [](json &j) { j["nodes"][1]["tensors"].erase(1); }, "/tensors/1", "read by no node"},
      {"reduction kind", [](json &j) { j["nodes"][1]["reductions"][0]["kind"] = "max"; }, N + "1/reductions/0/kind", "expected one of dot"},
      {"reduction extent", [](json &j) { j["nodes"][1]["reductions"][0]["extent"] = "-5"; }, N + "1/reductions/0/extent", "positive integer as text or a row domain"},
      {"attr unknown", [](json &j) { j["nodes"][1]["attrs"]["foo"] = 1; }, N + "1/attrs/foo", "unknown field"},
      {"attr missing", [](json &j) { j["nodes"][1]["attrs"].erase("bias"); }, N + "1/attrs/bias", "missing required field"},
      {"attr type", [](json &j) { j["nodes"][1]["attrs"]["in_features"] = "16"; }, N + "1/attrs/in_features", "expected an integer"},
      {"attr enum", [&](json &j) { j["nodes"][attn]["attrs"]["domain"] = "Nv"; }, N + std::to_string(attn) + "/attrs/domain", "expected one of S|Nt"},
      {"attr value", [](json &j) { j["nodes"][1]["attrs"]["in_features"] = 17; }, N + "1/attrs", "does not match the derivation"},
      {"nodes swapped", [](json &j) { std::swap(j["nodes"][5], j["nodes"][6]); }, N + "5/id", "does not match the derivation"},
      {"last node dropped", [](json &j) { j["nodes"].erase(j["nodes"].size() - 1); }, "/graph/outputs/sample", "defined by no node"},
      {"totals", [](json &j) { j["totals"]["parameters"] = j["totals"]["parameters"].get<int64_t>() + 1; }, "/totals/parameters", "counted in this file"},
      {"totals nodes", [](json &j) { j["totals"]["nodes"] = 893; }, "/totals/nodes", "expected 77"},
  };
  ASSERT_GE(cases.size(), 20u);
  for (const auto &c : cases) {
    json j = good;
    c.mutate(j);
    try {
      h3::fingerprintFromJson(j, "fp.json#");
      ADD_FAILURE() << c.name << ": accepted";
    } catch (const Error &e) {
      EXPECT_EQ(e.where(), "fp.json#" + c.pointer) << c.name << ": " << e.what();
      EXPECT_NE(e.message().find(c.message), std::string::npos) << c.name << ": " << e.what();
    }
  }
}

TEST(Fingerprint, LoadRejectsInvalidJsonText) {
  fs::path dir = fs::temp_directory_path() / ("h3c-fp-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  writeFileAtomic(dir / "bad.json", "{\"schema\": ");
  try {
    h3::loadFingerprint((dir / "bad.json").string());
    ADD_FAILURE() << "accepted";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("invalid JSON"), std::string::npos);
  }
  EXPECT_THROW(h3::loadFingerprint((dir / "missing.json").string()), Error);
  fs::remove_all(dir);
}

namespace {
} // namespace

TEST(Fingerprint, CliDeriveAndValidate) {
  fs::path dir = fs::temp_directory_path() / ("h3c-fpcli-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string out;
  ASSERT_EQ(runTool("fingerprint derive --config tiny -o " + (dir / "tiny.json").string(), &out), 0) << out;
  EXPECT_TRUE(json::parse(readFile(dir / "tiny.json")) == derivedJson("tiny"));
  ASSERT_EQ(runTool("fingerprint validate " + (dir / "tiny.json").string(), &out), 0) << out;
  EXPECT_NE(out.find("nodes:       77 (62 in blocks, 15 top-level)"), std::string::npos) << out;
  // stdout form equals the file form.
  ASSERT_EQ(runTool("fingerprint derive --config tiny", &out), 0);
  EXPECT_TRUE(json::parse(out) == derivedJson("tiny"));
  // A config file derives a "custom" fingerprint.
  json cfg = h3::configToJson(h3::namedConfig("tiny"));
  cfg["_class_name"] = "MiniMaxH3Transformer3DModel";
  cfg["num_layers"] = 1;
  writeFileAtomic(dir / "config.json", cfg.dump());
  ASSERT_EQ(runTool("fingerprint derive --config " + (dir / "config.json").string() + " -o " +
                        (dir / "c.json").string(), &out), 0) << out;
  EXPECT_EQ(json::parse(readFile(dir / "c.json"))["config_name"], "custom");
  // A corrupted file: exit 2, the pointer named.
  json bad = derivedJson("tiny");
  bad["nodes"][17]["inputs"][0] = "nowhere";
  writeFileAtomic(dir / "bad.json", bad.dump());
  EXPECT_EQ(runTool("fingerprint validate " + (dir / "bad.json").string(), &out), 2);
  EXPECT_NE(out.find("h3c: error: " + (dir / "bad.json").string() + "#/nodes/17/inputs/0"), std::string::npos)
      << out;
  // A bad config: no output written.
  EXPECT_EQ(runTool("fingerprint derive --config huge -o " + (dir / "huge.json").string(), &out), 2);
  EXPECT_FALSE(fs::exists(dir / "huge.json"));
  fs::remove_all(dir);
}
