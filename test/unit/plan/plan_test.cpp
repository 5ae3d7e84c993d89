// plan.json reading fails closed, naming the JSON pointer of the problem; the writer's output reads back as written.
#include "test_plans.h"

#include "h3c/runtime/nodes.h"
#include "h3c/support/error.h"
#include "h3c/support/files.h"
#include "h3c/support/sha256.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

namespace fs = std::filesystem;
using namespace h3c;
using nlohmann::json;
using rt::testplans::opsOf;
using rt::testplans::rehash;

namespace {

json tinyPlan(bool fuse = false, int tp = 1, int sp = 1) {
  return rt::testplans::modelPlan(h3::namedConfig("tiny"), fuse, tp, sp);
}

const std::string kOps = "#/functions/forward/ops/";

void rejects(const json &p, const std::string &needle, const fs::path &dir = "/nonexistent") {
  try {
    plan::planFromJson(p, dir, "plan.json");
    ADD_FAILURE() << "accepted a bad plan (expected: " << needle << ")";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

size_t opIndexOf(json &p, const std::string &node) {
  json &ops = opsOf(p);
  for (size_t i = 0; i < ops.size(); ++i)
    for (const auto &n : ops[i]["nodes"])
      if (n == node)
        return i;
  return SIZE_MAX;
}

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("h3c_plan_" + std::to_string(::getpid()) + "_" +
                                               ::testing::UnitTest::GetInstance()->current_test_info()->name());
  TempDir() { fs::create_directories(path / "kernels"); }
  ~TempDir() { fs::remove_all(path); }
};

} // namespace

TEST(PlanRead, ValidPlansLoad) {
  for (bool fuse : {false, true}) {
    plan::Plan p = plan::planFromJson(tinyPlan(fuse), "/nonexistent");
    EXPECT_EQ(p.options.tp, 1);
    EXPECT_EQ(p.options.fuse, fuse);
    const plan::Function &fn = p.forward();
    EXPECT_EQ(fn.outputs.at("sample"), "unpack:sample");
    size_t nodes = 0;
    for (const auto &op : fn.ops)
      nodes += op.nodes.size();
    EXPECT_EQ(nodes, rt::expectedNodes(p.config).size());
    EXPECT_EQ(fn.ops.front().kind, plan::OpKind::RopeTable);
    auto last = p.lastUse(fn);
    EXPECT_EQ(last.at("unpack:sample"), SIZE_MAX);
  }
  EXPECT_EQ(rt::expectedNodes(h3::namedConfig("full")).size(), 893u);
}

TEST(PlanRead, TypedAttrsAndOperandPositions) {
  json j = tinyPlan(true, 2);
  plan::Plan p = plan::planFromJson(j, "/nonexistent");
  const plan::Op *fc1 = nullptr, *gate = nullptr, *qkv = nullptr;
  for (const auto &op : p.forward().ops) {
    if (op.firstNode() == "transformer_blocks.0.ff.net.0.proj") fc1 = &op;
    if (op.firstNode() == "transformer_blocks.0.attn.to_out.0") gate = &op;
    if (op.kind == plan::OpKind::QkvLinear && op.firstNode() == "transformer_blocks.1.attn.to_q") qkv = &op;
  }
  ASSERT_TRUE(fc1 && gate && qkv);
  const h3::Config c = h3::namedConfig("tiny");
  EXPECT_EQ(fc1->attrs.epilogue, plan::Epilogue::Swiglu);
  EXPECT_EQ(fc1->attrs.shard.kind, plan::ShardKind::Column);
  ASSERT_EQ(fc1->attrs.shard.segments.size(), 2u);
  const std::pair<int64_t, int64_t> gateHalf{c.ffn_dim, 2 * c.ffn_dim};
  EXPECT_EQ(fc1->attrs.shard.segments[1], gateHalf);
  EXPECT_EQ(qkv->attrs.shard.segments.size(), 3u);
  EXPECT_EQ(qkv->attrs.heads, c.num_attention_heads / 2);  // the rank's heads
  // tp 2: to_out is column-parallel with the full K over the all-gathered attention output, its epilogue reads the
  // rank's columns of the stream and of the AdaLN table.
  EXPECT_EQ(gate->kind, plan::OpKind::Linear);
  EXPECT_EQ(gate->attrs.epilogue, plan::Epilogue::GateResidual);
  EXPECT_EQ(gate->attrs.chunk, 2);
  EXPECT_EQ(gate->attrs.K, c.innerDim());
  EXPECT_EQ(gate->attrs.N, c.hidden_size / 2);
  auto roles = plan::inputRoles(gate->kind, gate->attrs);
  EXPECT_EQ(roles, (std::vector<std::string>{"x", "residual", "table", "ts_index", "tags"}));
  EXPECT_EQ(gate->in[0], "transformer_blocks.0.attn.attention:gather_cols");
  EXPECT_EQ(gate->in[1], "pack:split_cols");
  EXPECT_EQ(gate->in[3], "pack:ts_index");
  EXPECT_EQ(p.value(gate->out[0]).cols, c.hidden_size / 2);
  const plan::Op &next = p.forward().ops[gate->index + 1];
  EXPECT_EQ(next.kind, plan::OpKind::AllGather);
  EXPECT_EQ(next.attrs.axis, plan::Axis::Cols);
  EXPECT_EQ(next.attrs.dtype, DType::BF16);
  EXPECT_EQ(next.in[0], gate->out[0]);
}

TEST(PlanRead, HashIsCheckedAgainstTheContent) {
  json p = tinyPlan();
  // plan_sha256 = sha256 of the canonical JSON of the plan without plan_sha256 (computed here independently).
  json copy = p;
  copy.erase("plan_sha256");
  EXPECT_EQ(p["plan_sha256"], sha256Hex(copy.dump()));
  opsOf(p)[3]["order"]["units"] = 2;
  rejects(p, "#/plan_sha256");
}

TEST(PlanRead, StructuralErrorsNameTheirPointer) {
  json p = tinyPlan();
  json a = p;
  a["schema"] = "h3c-plan-v1";
  rejects(rehash(a), "#/schema");
  json b = p;
  b["surprise"] = 1;
  rejects(rehash(b), "#/surprise");
  json c = p;
  opsOf(c)[2]["op"] = "conv2d";
  rejects(rehash(c), kOps + "2/op");
  size_t i = opIndexOf(p, "proj_in");
  const std::string at = kOps + std::to_string(i);
  json d = p;
  opsOf(d)[i]["order"] = {{"kind", "lane_tree"}, {"lanes", 32}, {"acc", "f32"}};
  rejects(rehash(d), "must carry a 'k_chunks'");
  json e = p;
  opsOf(e)[i]["order"]["k_step"] = 32;
  rejects(rehash(e), at + "/order/k_step");
  json f = p;
  opsOf(f)[i]["order"] = nullptr;
  rejects(rehash(f), at + "/order");
  json g = p;
  opsOf(g)[i]["in"][0] = "@nothing";
  rejects(rehash(g), "unknown value '@nothing'");
  // Use before definition: the first block's norm1 reads a value defined later.
  size_t n1 = opIndexOf(p, "transformer_blocks.0.norm1");
  json h = p;
  opsOf(h)[n1]["in"][0] = "transformer_blocks.1.gate_residual_ff";
  rejects(rehash(h), "read before any op defines it");
  json k = p;
  k["values"]["pack"]["rows"] = "Q";
  rejects(rehash(k), "#/values/pack/rows");
  json m = p;
  m["values"]["@timestep"]["batch"] = true;
  rejects(rehash(m), "#/values/@timestep/batch");
  json o = p;
  o["options"]["tp"] = 3;
  rejects(rehash(o), "#/options/tp");
  json q = p;
  q["values"]["pack"]["slot"] = 9999;
  rejects(rehash(q), "#/values/pack/slot");
}

// Section 5.2: the ranks, the layout ops, the rank-local values and the weight splits are all checked.
TEST(PlanRead, RanksLayoutOpsAndSplitsAreChecked) {
  for (bool fuse : {false, true}) {
    plan::Plan p = plan::planFromJson(tinyPlan(fuse, 2, 2), "/nonexistent");
    EXPECT_EQ(p.options.sp, 2);
    EXPECT_EQ(p.options.tp, 2);
    ASSERT_EQ(p.ranks.size(), 4u);
    EXPECT_EQ(p.ranks[3].spIndex, 1);
    EXPECT_EQ(p.ranks[3].tpIndex, 1);
    EXPECT_EQ(p.value("transformer_blocks.0.norm1").rows, plan::Domain::Sr);
    EXPECT_EQ(p.value("transformer_blocks.0.attn.rope_k:gather_rows").rows, plan::Domain::S);
  }
  // floor(i*S/sp): 21 rows over 4 ranks -> 5, 5, 5, 6.
  EXPECT_EQ(plan::rankRows(0, 4, 21), (std::pair<int64_t, int64_t>{0, 5}));
  EXPECT_EQ(plan::rankRows(3, 4, 21), (std::pair<int64_t, int64_t>{15, 21}));
  EXPECT_EQ(plan::partOf({{0, 4}, {4, 8}}, 1, 2), (plan::Segments{{2, 4}, {6, 8}}));

  json p = tinyPlan(true, 2, 2);
  json a = p;
  a["ranks"]["list"][1]["sp_index"] = 1;
  rejects(rehash(a), "#/ranks/list/1/sp_index");
  json b = p;
  b["ranks"]["list"][2]["rows"]["end"] = {1, 2};
  rejects(rehash(b), "#/ranks/list/2/rows/end");
  json c = tinyPlan(true);
  c["values"]["pack"]["rows"] = "Sr";
  rejects(rehash(c), "exists only under sequence parallelism");
  size_t kv = opIndexOf(p, "transformer_blocks.0.attn.attention") - 2;  // the row gather of rope_k
  ASSERT_EQ(opsOf(p)[kv]["op"], "all_gather");
  const std::string at = kOps + std::to_string(kv);
  json d = p;
  opsOf(d)[kv]["attrs"]["parts"] = 4;
  rejects(rehash(d), at + "/attrs/parts");
  json e = p;
  opsOf(e)[kv]["nodes"] = {"transformer_blocks.0.attn.rope_k"};
  rejects(rehash(e), "a layout op implements no node");
  json f = p;
  opsOf(f)[kv]["in"][0] = "transformer_blocks.0.attn.rope_k:gather_rows";
  opsOf(f)[kv]["out"][0] = "transformer_blocks.0.attn.rope_k";
  rejects(rehash(f), "read before any op defines it");
  json g = p;
  g["values"]["transformer_blocks.0.attn.rope_k:gather_rows"]["rows"] = "Sr";
  rejects(rehash(g), "moves between a rank's rows (Sr) and all of S");
  json h = p;
  opsOf(h)[kv]["attrs"]["axis"] = "diagonal";
  rejects(rehash(h), at + "/attrs/axis");
  // Column gathers: segments tile the full width and split over tp.
  size_t tg = opIndexOf(p, "transformer_blocks.0.adaln_proj") + 1;
  ASSERT_EQ(opsOf(p)[tg]["op"], "all_gather");
  json k = p;
  opsOf(k)[tg]["attrs"]["segments"][5][1] = 143;
  rejects(rehash(k), kOps + std::to_string(tg) + "/attrs/segments");
  json m = p;
  m["values"]["transformer_blocks.0.adaln_proj:gather_cols"]["cols"] = 72;
  rejects(rehash(m), kOps + std::to_string(tg) + "/attrs/cols");
  // A column-parallel GEMM reads its tensors split by its own segments; widths are the rank's.
  size_t fc1 = opIndexOf(p, "transformer_blocks.0.ff.net.0.proj");
  auto tensorOf = [](json &plan, const std::string &name) -> json & {
    for (auto &buf : plan["weights"])
      if (buf["tensors"][0]["name"] == name)
        return buf["tensors"][0];
    throw std::runtime_error(name);
  };
  json n = p;
  tensorOf(n, "transformer_blocks.0.ff.net.0.proj.weight").erase("split");
  rejects(rehash(n), "is not split but the op is column");
  json o = p;
  tensorOf(o, "transformer_blocks.0.ff.net.0.proj.weight")["split"]["segments"] = {{0, 64}};
  rejects(rehash(o), "differs from attrs/shard/segments");
  json q = p;
  tensorOf(q, "transformer_blocks.0.norm1.weight")["split"] = {{"parts", 2}, {"segments", {{0, 24}}}};
  rejects(rehash(q), "is split but the op is replicated");
  json r = p;
  opsOf(r)[fc1]["attrs"]["N"] = 64;
  rejects(rehash(r), "the rank holds 32 rows");
  json s = p;
  opsOf(s)[fc1]["order"]["units"] = 8;
  rejects(rehash(s), kOps + std::to_string(fc1) + "/order/units");
}

TEST(PlanRead, AttrsAreTypedAndComplete) {
  json p = tinyPlan(true);
  size_t i = opIndexOf(p, "transformer_blocks.0.attn.to_out.0");
  const std::string at = kOps + std::to_string(i) + "/attrs/";
  json a = p;
  opsOf(a)[i]["attrs"].erase("chunk");
  rejects(rehash(a), at + "chunk");
  json b = p;
  opsOf(b)[i]["attrs"]["epilogue"] = "gelu";
  rejects(rehash(b), at + "epilogue");
  json c = p;
  opsOf(c)[i]["attrs"]["chunk"] = 6;
  rejects(rehash(c), "out of [0, num_chunks = 6)");
  json d = p;
  opsOf(d)[i]["attrs"]["heads"] = 2;
  rejects(rehash(d), at + "heads");
  json e = p;
  opsOf(e)[i]["attrs"]["shard"] = {{"kind", "diagonal"}, {"tp", 1}};
  rejects(rehash(e), at + "shard/kind");
  json f = p;
  opsOf(f)[i]["attrs"]["K"] = "32";
  rejects(rehash(f), at + "K");
  // A column shard's segments must tile the columns and split over tp.
  json g = tinyPlan(true, 2);
  size_t fc1 = opIndexOf(g, "transformer_blocks.0.ff.net.0.proj");
  opsOf(g)[fc1]["attrs"]["shard"]["segments"][1][0] = 5;
  rejects(rehash(g), "segments must tile");
}

TEST(PlanRead, OperandArityFollowsTheKind) {
  json p = tinyPlan(true);
  size_t i = opIndexOf(p, "transformer_blocks.0.attn.to_out.0");
  json a = p;
  opsOf(a)[i]["in"].erase(4);  // gate_residual needs tags
  rejects(rehash(a), "takes 5 inputs (x, residual, table, ts_index, tags), got 4");
  json b = p;
  opsOf(b)[i]["attrs"]["epilogue"] = "residual";
  for (const char *k : {"chunk", "num_chunks", "row_index"})
    opsOf(b)[i]["attrs"].erase(k);
  rejects(rehash(b), "takes 2 inputs (x, residual), got 5");
}

TEST(PlanRead, EveryNodeExactlyOnce) {
  json p = tinyPlan();
  size_t i = opIndexOf(p, "transformer_blocks.1.ff.swiglu");
  json a = p;
  opsOf(a)[i]["nodes"] = json::array({"transformer_blocks.1.ff.swiglu", "transformer_blocks.1.norm2"});
  rejects(rehash(a), "already implemented");
  json b = p;
  opsOf(b)[i]["nodes"] = json::array({"transformer_blocks.7.ff.swiglu"});
  rejects(rehash(b), "not a node of this config");
  json c = p;
  opsOf(c).erase(opsOf(c).size() - 1);
  rejects(rehash(c), "never defined");
  json d = p;
  opsOf(d)[i]["nodes"] = json::array();
  rejects(rehash(d), "at least one node");
}

TEST(PlanRead, OpsImplementNodesOfTheirKindWithTheirTensors) {
  json p = tinyPlan();
  size_t i = opIndexOf(p, "context_embedder");
  const std::string at = kOps + std::to_string(i);
  json a = p;
  opsOf(a)[i]["weights"]["bias"] = json::array();  // the config's context_embedder has a bias
  rejects(rehash(a), at + "/weights/bias");
  json b = p;
  opsOf(b)[i]["weights"]["weight"] = {"proj_in.weight"};
  rejects(rehash(b), at + "/weights/weight");
  // A linear over the pack node (a node of another kind) swapped with the pack op's node.
  json c = p;
  size_t pk = opIndexOf(p, "pack");
  opsOf(c)[i]["nodes"] = {"pack"};
  opsOf(c)[pk]["nodes"] = {"context_embedder"};
  rejects(rehash(c), "implements nodes of kinds [linear], got [pack]");
}

TEST(PlanRead, WeightBuffersMatchTheConfig) {
  json p = tinyPlan();
  json a = p;
  a["weights"][0]["tensors"][0]["shape"][0] = 7;
  rejects(rehash(a), "differs from the config");
  json b = p;
  b["weights"].push_back(b["weights"][0]);
  rejects(rehash(b), "is in two weight buffers");
  json c = p;
  c["weights"].erase(0);
  rejects(rehash(c), "is in no weight buffer");
}

namespace {

// A plan with one kernel on proj_in, written into `dir`.
json withKernel(const fs::path &dir) {
  writeFileAtomic(dir / "kernels/k1.cu", "extern \"C\" __global__ void k1(const void *x, void *y, long long rows) {}\n");
  json p = tinyPlan();
  size_t i = opIndexOf(p, "proj_in");
  opsOf(p)[i]["kernel"] = "k1";
  p["kernels"]["k1"] = {
      {"file", "kernels/k1.cu"},
      {"sha256", sha256File(dir / "kernels/k1.cu")},
      {"entry", "k1"},
      {"arch", "sm_90a"},
      {"nvrtc_options", {"--gpu-architecture=sm_90a"}},
      {"launch",
       {{"block", {256, 1, 1}},
        {"smem_bytes", 0},
        {"cluster", {1, 1, 1}},
        {"grid",
         {{{"extent", "B*Nv"}, {"div", 64}, {"max_per_sm", 0}},
          {{"extent", "1"}, {"div", 1}, {"max_per_sm", 0}},
          {{"extent", "1"}, {"div", 1}, {"max_per_sm", 0}}}}}},
      {"params",
       {{{"kind", "buffer"}, {"name", "x"}, {"role", "in"}, {"index", 0}, {"span", 1}},
        {{"kind", "buffer"}, {"name", "y"}, {"role", "out"}, {"index", 0}, {"span", 1}},
        {{"kind", "scalar"}, {"name", "rows"}, {"type", "i64"}, {"value", "B*Nv"}}}}};
  return rehash(p);
}

} // namespace

TEST(PlanRead, KernelsAreHashCheckedAndFitTheirOps) {
  TempDir t;
  json p = withKernel(t.path);
  size_t i = opIndexOf(p, "proj_in");
  plan::Plan ok = plan::planFromJson(p, t.path);
  const plan::Kernel &k = ok.kernel(ok.forward().ops[i]);
  EXPECT_EQ(k.params.size(), 3u);
  EXPECT_EQ(k.params[2].value.eval({2, 10, 3, 4, 3, 1}), 8);  // B * Nv
  EXPECT_EQ(k.source.rfind("extern", 0), 0u);
  json bad = p;
  bad["kernels"]["k1"]["sha256"] = std::string(64, 'a');
  rejects(rehash(bad), "#/kernels/k1/sha256", t.path);
  json missing = p;
  missing["kernels"]["k1"]["file"] = "kernels/k2.cu";
  rejects(rehash(missing), "does not exist", t.path);
  json escape = p;
  escape["kernels"]["k1"]["file"] = "../k1.cu";
  rejects(rehash(escape), "kernels/ folder", t.path);
  json unknown = p;
  opsOf(unknown)[i]["kernel"] = "k9";
  rejects(rehash(unknown), kOps + std::to_string(i) + "/kernel", t.path);
  json arity = p;
  arity["kernels"]["k1"]["params"][0]["index"] = 1;  // proj_in has one input
  rejects(rehash(arity), "reads operand 1..1 of a role the op has 1 of", t.path);
  json grid = p;
  grid["kernels"]["k1"]["launch"]["grid"][0]["extent"] = "B*Q";
  rejects(rehash(grid), "launch/grid/0/extent", t.path);
  // Programmatic dependent launch: absent is plain stream order; a boolean when present.
  EXPECT_FALSE(ok.kernels.at("k1").launch.gridDependency);
  json pdl = p;
  pdl["kernels"]["k1"]["launch"]["grid_dependency"] = true;
  EXPECT_TRUE(plan::planFromJson(rehash(pdl), t.path).kernels.at("k1").launch.gridDependency);
  pdl["kernels"]["k1"]["launch"]["grid_dependency"] = "yes";
  rejects(rehash(pdl), "launch/grid_dependency", t.path);
  json arch = p;
  arch["kernels"]["k1"]["arch"] = "sm_100a";
  rejects(rehash(arch), "kernel built for sm_100a in a plan for sm_90a", t.path);
  json unused = p;
  opsOf(unused)[i]["kernel"] = nullptr;
  rejects(rehash(unused), "no op launches this kernel", t.path);
  json host = p;
  opsOf(host)[0]["kernel"] = "k1";  // rope_table runs on the host
  rejects(rehash(host), "runs on the host", t.path);
  // A tensor map over weights stays inside the tensors it spans (proj_in.weight: F32 [24, 16], 1,536 bytes).
  json map = p;
  map["kernels"]["k1"]["params"].push_back({{"kind", "tensor_map"}, {"name", "w_map"}, {"role", "weight"},
                                            {"index", 0}, {"span", 1}, {"dtype", "F32"}, {"dims", {"16", "24"}},
                                            {"strides", {"64"}}, {"box", {16, 24}}, {"swizzle", "none"},
                                            {"l2_promotion", "none"}, {"oob", "zero"}});
  EXPECT_EQ(plan::planFromJson(rehash(map), t.path).kernels.at("k1").params.back().span, 1);
  json wide = map;
  wide["kernels"]["k1"]["params"].back()["dims"][1] = "72";  // three matrices' worth (the qkv map without span 3)
  rejects(rehash(wide), "tensor map 'w_map' addresses 4608 bytes, but the 1 weight tensor(s) it spans hold 1536", t.path);
  json symbolic = map;
  symbolic["kernels"]["k1"]["params"].back()["dims"][1] = "S";
  rejects(rehash(symbolic), "must be a constant", t.path);
  // Phases (later launches of the same module) and scratch parameters (plan::Kernel::phases, KernelParam::Scratch):
  // read as written, written back the same; a phase named twice, an empty list or a bad scratch size is refused.
  json phased = p;
  phased["kernels"]["k1"]["phases"] = json::array({{{"entry", "k1_p1"}, {"launch", p["kernels"]["k1"]["launch"]}}});
  phased["kernels"]["k1"]["params"].push_back({{"kind", "scratch"}, {"name", "stats"}, {"bytes", "S*8"}});
  const plan::Plan ph = plan::planFromJson(rehash(phased), t.path);
  ASSERT_EQ(ph.kernels.at("k1").phases.size(), 1u);
  EXPECT_EQ(ph.kernels.at("k1").phases[0].entry, "k1_p1");
  EXPECT_EQ(ph.kernels.at("k1").params.back().kind, plan::KernelParam::Kind::Scratch);
  EXPECT_EQ(ph.kernels.at("k1").params.back().value.eval({2, 10, 3, 4, 3, 1}), 80);  // S * 8
  const json back = plan::planToJson(ph)["kernels"]["k1"]["phases"];
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0]["entry"], "k1_p1");
  EXPECT_EQ(back[0]["launch"]["grid"], p["kernels"]["k1"]["launch"]["grid"]);
  EXPECT_EQ(plan::planFromJson(plan::planToJson(ph), t.path).kernels.at("k1").params.back().kind,
            plan::KernelParam::Kind::Scratch);
  EXPECT_FALSE(plan::planToJson(ok)["kernels"]["k1"].contains("phases"));  // none: the key is left out
  json twice = phased;
  twice["kernels"]["k1"]["phases"][0]["entry"] = p["kernels"]["k1"]["entry"];
  rejects(rehash(twice), "is launched twice", t.path);
  json empty = phased;
  empty["kernels"]["k1"]["phases"] = json::array();
  rejects(rehash(empty), "phases", t.path);
  json size = phased;
  size["kernels"]["k1"]["params"].back()["bytes"] = "S*Q";
  rejects(rehash(size), "params/3/bytes", t.path);
  // A tensor map over a scratch parameter (the Hopper dX's bf(g), KernelParam::scratch): no role, index or span; read
  // and written back the same; refused when the kernel has no scratch of that name, when it would address more bytes
  // than the scratch holds (S*8 bytes: S rows of 4 bf16), or when it carries an operand's keys too.
  json smap = phased;
  smap["kernels"]["k1"]["params"].push_back({{"kind", "tensor_map"}, {"name", "stats_map"}, {"scratch", "stats"},
                                             {"dtype", "BF16"}, {"dims", {"4", "S"}}, {"strides", {"8"}},
                                             {"box", {4, 64}}, {"swizzle", "none"}, {"l2_promotion", "none"},
                                             {"oob", "zero"}});
  const plan::Plan sm = plan::planFromJson(rehash(smap), t.path);
  EXPECT_EQ(sm.kernels.at("k1").params.back().kind, plan::KernelParam::Kind::TensorMap);
  EXPECT_EQ(sm.kernels.at("k1").params.back().scratch, "stats");
  const json smBack = plan::planToJson(sm)["kernels"]["k1"]["params"].back();
  EXPECT_EQ(smBack["scratch"], "stats");
  EXPECT_FALSE(smBack.contains("role"));
  EXPECT_FALSE(smBack.contains("index"));
  EXPECT_EQ(plan::planFromJson(plan::planToJson(sm), t.path).kernels.at("k1").params.back().scratch, "stats");
  json noScratch = smap;
  noScratch["kernels"]["k1"]["params"].back()["scratch"] = "gb";
  rejects(rehash(noScratch), "tensor map 'stats_map' is over scratch 'gb', which the kernel has no parameter of",
          t.path);
  json tooWide = smap;
  tooWide["kernels"]["k1"]["params"].back()["dims"][0] = "8";  // 16 bytes a row where the scratch holds 8
  rejects(rehash(tooWide), "tensor map 'stats_map' addresses 16 bytes, but scratch 'stats' holds 8", t.path);
  json both = smap;
  both["kernels"]["k1"]["params"].back()["role"] = "in";
  rejects(rehash(both), "role", t.path);
  // On disk: loadPlan(dir) reads dir/plan.json.
  writeFileAtomic(t.path / "plan.json", p.dump());
  EXPECT_EQ(plan::loadPlan(t.path).forward().ops.size(), ok.forward().ops.size());
  writeFileAtomic(t.path / "plan.json", "{not json");
  EXPECT_THROW(plan::loadPlan(t.path), Error);
}

TEST(PlanWrite, WhatIsWrittenReadsBackTheSame) {
  TempDir t;
  json p = withKernel(t.path);
  plan::Plan a = plan::planFromJson(p, t.path);
  fs::path out = t.path / "copy";
  std::string sha = plan::writePlanFolder(a, out);
  plan::Plan b = plan::loadPlan(out);
  EXPECT_EQ(b.planSha256, sha);
  // The reader's document and the writer's are the same JSON (field for field), so the hashes agree.
  EXPECT_EQ(plan::planToJson(b), plan::planToJson(a));
  EXPECT_EQ(readFile(out / "kernels/k1.cu"), readFile(t.path / "kernels/k1.cu"));
  // Replacing a plan folder is allowed; a folder holding anything else is never replaced.
  EXPECT_NO_THROW(plan::writePlanFolder(a, out));
  writeFileAtomic(out / "notes.txt", "mine");
  EXPECT_THROW(plan::writePlanFolder(a, out), Error);
  EXPECT_TRUE(fs::exists(out / "notes.txt"));
  fs::create_directories(t.path / "other");
  EXPECT_THROW(plan::writePlanFolder(a, t.path / "other"), Error);
}

TEST(PlanExtent, ParsesEvaluatesAndRejects) {
  plan::Extents e{2, 30, 5, 20, 5, 3};
  EXPECT_EQ(plan::Extent::parse("B*S", "t").eval(e), 60);
  EXPECT_EQ(plan::Extent::parse("96*B*Nv + 32*B*Na", "t").eval(e), 96 * 40 + 32 * 10);
  EXPECT_EQ(plan::Extent::parse("T3", "t").eval(e), 9);
  plan::Extents rank = e;
  rank.Sr = 7;  // a sequence-parallel rank's rows of S
  EXPECT_EQ(plan::Extent::parse("B*Sr", "t").eval(rank), 14);
  EXPECT_EQ(plan::Extent::rowsOf(plan::Domain::Sr, true).text(), "B*Sr");
  EXPECT_EQ(plan::Extent::parse(" 7 ", "t").eval(e), 7);
  EXPECT_EQ(plan::Extent::parse("B*Nv + B*Na", "t").scaled(4).text(), "4*B*Nv + 4*B*Na");
  EXPECT_EQ(plan::Extent::rowsOf(plan::Domain::S, true).text(), "B*S");
  EXPECT_EQ(plan::Extent::rowsOf(plan::Domain::One, false).eval(e), 1);
  for (const char *bad : {"", "B*", "+S", "S+", "B**S", "Q", "S3", "2*(B+S)", "99999999999999999999"})
    EXPECT_THROW(plan::Extent::parse(bad, "t"), Error) << bad;
  EXPECT_THROW(plan::Extent::parse("B*S*S*S", "t").eval({1 << 30, 1 << 30, 0, 0, 0, 0}), Error);
}

// A plan edited and re-hashed cannot change the model (issue 18): rewired operands, attrs that differ from the
// nodes, values of the wrong width are refused, for every layout (fused or not, tp, sp).
TEST(PlanModel, EditedAndRehashedPlansThatChangeTheModelAreRefused) {
  for (auto [fuse, tp, sp] : {std::tuple{false, 1, 1}, {true, 1, 1}, {true, 2, 1}, {false, 2, 2}, {true, 1, 2}})
    EXPECT_NO_THROW(plan::planFromJson(tinyPlan(fuse, tp, sp), "/nonexistent")) << fuse << tp << sp;
  for (bool fuse : {false, true}) {
    json p = tinyPlan(fuse);
    // Skip block 1: its first op reads block 0's input stream instead of block 0's output.
    json a = p;
    size_t n1 = opIndexOf(a, "transformer_blocks.1.norm1");
    opsOf(a)[n1]["in"][0] = "pack";
    rejects(rehash(a), kOps + std::to_string(n1) + "/in");
    // Swap q and k into attention.
    json b = p;
    size_t at = opIndexOf(b, "transformer_blocks.0.attn.attention");
    std::swap(opsOf(b)[at]["in"][0], opsOf(b)[at]["in"][1]);
    rejects(rehash(b), "the plan does not compute the model");
    // Another eps than the node's.
    json c = p;
    size_t rn = opIndexOf(c, "token_refiner.refiner_blocks.0.norm1");
    opsOf(c)[rn]["attrs"]["eps"] = 1e-3;
    rejects(rehash(c), kOps + std::to_string(rn) + "/attrs/eps");
    // A gate reading chunk 0 (shift) instead of 2.
    json d = p;
    size_t g = opIndexOf(d, "transformer_blocks.0.gate_residual_attn");
    opsOf(d)[g]["attrs"]["chunk"] = 0;
    rejects(rehash(d), kOps + std::to_string(g) + "/attrs/chunk");
    // The AdaLN table declared narrower than the chunks the gate reads: an out-of-bounds read before.
    json e = p;
    e["values"]["transformer_blocks.0.adaln_proj"]["cols"] = 2 * 24;
    rejects(rehash(e), "transformer_blocks.0.adaln_proj");
  }
  // Two values live at once in one slot: the second would overwrite the first on the GPU.
  json s = tinyPlan(true);
  s["values"]["transformer_blocks.0.attn.to_q"]["slot"] = s["values"]["transformer_blocks.0.attn.to_k"]["slot"];
  rejects(rehash(s), "which is still live");
  // Unfused: a bias-carrying linear's N (sizes its bias read) must be the node's out_features.
  json f = tinyPlan(false);
  size_t pi = opIndexOf(f, "proj_in");
  opsOf(f)[pi]["attrs"]["N"] = 8;
  rejects(rehash(f), kOps + std::to_string(pi) + "/attrs");
}

TEST(PlanWrite, ReplacingAFolderKeepsWhatIsNotThePlans) {
  TempDir t;
  plan::Plan p = plan::planFromJson(tinyPlan(), "/nonexistent");
  const fs::path out = t.path / "plan";
  plan::writePlanFolder(p, out);
  plan::writePlanFolder(p, out);  // a previous plan folder is replaced
  fs::create_directories(out / "kernels");
  writeFileAtomic(out / "kernels" / "notes.txt", "mine");
  EXPECT_THROW(plan::writePlanFolder(p, out), Error);
  EXPECT_EQ(readFile(out / "kernels" / "notes.txt"), "mine");
  fs::remove(out / "kernels" / "notes.txt");
  writeFileAtomic(out / "README", "mine");
  EXPECT_THROW(plan::writePlanFolder(p, out), Error);
  EXPECT_EQ(readFile(out / "README"), "mine");
}

// The backward function (docs/contract.md section 14) without the compiler: the gradient ops belong to it alone, it
// is read after the forward and checked against it, and no third function exists. (Whole backwards, their round
// trip and their edits: test/unit/compiler/backward_plan_test.cpp, over `h3c compile --backward`'s plans.)
TEST(PlanRead, TheBackwardIsAFunctionOfItsOwn) {
  json p = tinyPlan();
  json a = p;
  json add = opsOf(a)[0];
  add["op"] = "grad_add";
  opsOf(a).push_back(add);
  rejects(rehash(a), "only functions/backward holds");
  json b = p;
  b["functions"]["sideways"] = b["functions"]["forward"];
  rejects(rehash(b), "#/functions/sideways");
  json c = p;  // an empty backward: its inputs are the gradients of the forward's outputs
  c["functions"]["backward"] = {
      {"inputs", json::array()}, {"outputs", json::object()}, {"ops", json::array()}, {"trainable", {"*"}}};
  rejects(rehash(c), "#/functions/backward/inputs: missing '@grad:unpack:");
  json d = c;
  d["functions"]["backward"]["inputs"] = {"@hidden_states"};
  rejects(rehash(d), "is not the gradient of a forward output");
  json t = c;  // what it trains: a list of patterns, none empty
  t["functions"]["backward"].erase("trainable");
  rejects(rehash(t), "#/functions/backward/trainable: missing");
  t["functions"]["backward"]["trainable"] = json::array();
  rejects(rehash(t), "#/functions/backward/trainable: names no tensor to train");
  t["functions"]["backward"]["trainable"] = {"*", ""};
  rejects(rehash(t), "#/functions/backward/trainable/1: is an empty pattern");
  json e = c;  // a forward op in the backward
  e["functions"]["backward"]["ops"].push_back(opsOf(e)[0]);
  rejects(rehash(e), "is no gradient op");
}
