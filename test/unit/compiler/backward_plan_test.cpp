// `h3c compile --backward` (docs/contract.md sections 5 and 14): the plan's second function written, read back the
// same, with no kernel for its gradient ops and every weight's gradient an F32 output; the reader refuses a backward
// edited (and re-hashed) to read the wrong saved value, to size a loop past a value, to miss a gradient or to share a
// live slot; the compiler refuses the options the backward is not written for.
#include "h3c/Codegen/Compile.h"
#include "h3c/plan/io.h"
#include "h3c/support/error.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>

namespace fs = std::filesystem;
using nlohmann::json;
using namespace h3c;

// (a named namespace holding the tests too: the unity build compiles a binary's test files as one translation
// unit, where anonymous namespaces would merge)
namespace backward_plan_test {

codegen::CompileOptions backwardOptions() {
  codegen::CompileOptions o;
  o.fuse = false;
  o.backward = true;
  o.tokens = 256;
  return o;
}

// The tiny plan with its backward, written once into a folder (the forward's kernels are files the reader hashes).
struct TinyBackward {
  fs::path dir = fs::temp_directory_path() / ("h3c_backward_plan_" + std::to_string(::getpid()));
  plan::Plan plan;
  json doc;
  TinyBackward() {
    const h3::Fingerprint fp = h3::deriveFingerprint(h3::namedConfig("tiny"), "tiny");
    fs::remove_all(dir);
    plan::writePlanFolder(codegen::compile(fp, "0000", backwardOptions()).plan.plan, dir);
    plan = plan::loadPlan(dir);
    doc = plan::planToJson(plan);
  }
  ~TinyBackward() { fs::remove_all(dir); }
};

const TinyBackward &tiny() {
  static TinyBackward t;
  return t;
}

json rehash(json p) {
  p["plan_sha256"] = plan::computePlanSha256(p);
  return p;
}

void rejects(const json &p, const std::string &needle) {
  try {
    plan::planFromJson(rehash(p), tiny().dir, "plan.json");
    ADD_FAILURE() << "accepted a bad backward (expected: " << needle << ")";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// The index of the first backward op of `kind` (differentiating `node`, when given).
size_t bwdOp(const json &p, const std::string &kind, const std::string &node = "") {
  const json &ops = p["functions"]["backward"]["ops"];
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i]["op"] == kind && (node.empty() || ops[i]["nodes"][0] == node)) return i;
  ADD_FAILURE() << "no backward op " << kind << " " << node;
  return 0;
}


TEST(BackwardPlan, WrittenReadBackAndComplete) {
  const plan::Plan &p = tiny().plan;
  ASSERT_NE(p.backward(), nullptr);
  const plan::Function &b = *p.backward();
  // What is read is what was written (the writer spells the backward and row_units as the reader reads them).
  EXPECT_EQ(plan::planToJson(plan::planFromJson(tiny().doc, tiny().dir)), tiny().doc);
  // Inputs: the gradients of the two samples; outputs: the three activation inputs and every weight tensor.
  EXPECT_EQ(std::set<std::string>(b.inputs.begin(), b.inputs.end()),
            (std::set<std::string>{"@grad:unpack:sample", "@grad:unpack:audio_sample"}));
  size_t tensors = 0;
  for (const auto &buf : p.weights)
    for (const auto &t : buf.tensors) {
      ++tensors;
      ASSERT_TRUE(b.outputs.count("grad:" + t.name)) << t.name;
      const plan::Value &g = p.value(b.outputs.at("grad:" + t.name));
      EXPECT_EQ(g.dtype, DType::F32);
      EXPECT_EQ(g.rows, plan::Domain::One);
      EXPECT_EQ(g.cols, t.numel()) << t.name;
    }
  EXPECT_EQ(tensors, 62u);
  for (const char *in : {"grad:@hidden_states", "grad:@audio_hidden_states", "grad:@encoder_hidden_states"})
    EXPECT_TRUE(b.outputs.count(in)) << in;
  EXPECT_EQ(b.outputs.size(), tensors + 3);
  // A kernel for every gradient op, the forward's kernels kept: the tensor-core forms of the linear and attention
  // gradients in two phases (grad_linear_mma.cuh, grad_attention_mma.cuh), the AdaLN tables' gradients in three
  // (grad.cuh: the unit partials, their fold), the rest in one.
  for (const plan::Op &op : b.ops) {
    ASSERT_TRUE(op.kernel.has_value()) << op.where;
    const bool bf16Linear = op.attrs.wDtype == DType::BF16 &&
                            (op.kind == plan::OpKind::LinearGradX ||
                             (op.kind == plan::OpKind::LinearGradW && p.value(op.in[1]).dtype == DType::BF16));
    // (A linear gradient whose g is a grad_round's bf(g), h3-fuse-grad, has no rounding phase: the GEMM alone.)
    const bool roundsItsG = bf16Linear && p.value(op.in[0]).dtype == DType::F32;
    const size_t phases = op.kind == plan::OpKind::NormModulateGrad || op.kind == plan::OpKind::GateResidualGrad ? 2u
                          : op.kind == plan::OpKind::AttentionGrad || roundsItsG                                 ? 1u
                                                                                                                 : 0u;
    EXPECT_EQ(p.kernel(op).phases.size(), phases) << op.where << " " << p.kernel(op).id;
    EXPECT_EQ(op.order.kind, plan::requiredOrder(op.kind)) << op.where;
    if (op.order.kind == plan::OrderKind::RowUnits) {
      EXPECT_EQ(op.order.unit, 128);
      EXPECT_EQ(op.order.kStep, 16);
    }
  }
  size_t forwardKernels = 0;
  for (const plan::Op &op : p.forward().ops) forwardKernels += op.kernel.has_value();
  EXPECT_GT(forwardKernels, 0u);
  EXPECT_EQ(p.stats.at("backward_ops"), int64_t(b.ops.size()));
}

TEST(BackwardPlan, ReaderRefusesEditedBackwards) {
  const json &good = tiny().doc;
  {  // a forward op kind in the backward, a gradient op in the forward
    json p = good;
    p["functions"]["backward"]["ops"][0]["op"] = "unpack";
    rejects(p, "is no gradient op");
    p = good;
    p["functions"]["forward"]["ops"].push_back(p["functions"]["backward"]["ops"][0]);
    rejects(p, "only functions/backward holds");
  }
  {  // row_units with another unit
    json p = good;
    const size_t i = bwdOp(p, "linear_grad_w");
    p["functions"]["backward"]["ops"][i]["order"]["unit"] = 64;
    rejects(p, "/functions/backward/ops/" + std::to_string(i) + "/order/unit");
  }
  {  // a dW reading another saved activation than its linear's input
    json p = good;
    const size_t i = bwdOp(p, "linear_grad_w", "transformer_blocks.0.attn.to_out.0");
    p["functions"]["backward"]["ops"][i]["in"][1] = "transformer_blocks.0.norm1";
    rejects(p, "the forward op of transformer_blocks.0.attn.to_out.0 has");
  }
  {  // attrs that would size a loop past its values
    json p = good;
    const size_t i = bwdOp(p, "linear_grad_x", "transformer_blocks.0.ff.net.2");
    p["functions"]["backward"]["ops"][i]["attrs"]["N"] = 48;
    rejects(p, "/attrs/N");
    p = good;  // a gradient of other rows than its activation's
    const size_t x = bwdOp(p, "linear_grad_x", "transformer_blocks.0.ff.net.2");
    const std::string dx = p["functions"]["backward"]["ops"][x]["out"][0];
    p["values"][dx]["rows"] = "T";
    p["values"][dx]["batch"] = false;
    rejects(p, "they must agree");
    p = good;
    const size_t a = bwdOp(p, "attention_grad");
    p["functions"]["backward"]["ops"][a]["attrs"]["kv_block"] = 64;
    rejects(p, "kv_block");
  }
  {  // a weight gradient of the wrong size, a gradient left out, an unknown input
    json p = good;
    p["values"]["grad:proj_out.weight"]["cols"] = 7;
    rejects(p, "the gradient of 'proj_out.weight'");
    p = good;
    p["functions"]["backward"]["outputs"].erase("grad:proj_out.bias");
    rejects(p, "missing 'grad:proj_out.bias'");
    p = good;
    p["functions"]["backward"]["inputs"][0] = "@grad:pack";
    rejects(p, "not the gradient of a forward output");
  }
  {  // a backward value in the slot of a saved activation the backward still reads
    json p = good;
    const size_t i = bwdOp(p, "attention_grad", "transformer_blocks.0.attn.attention");
    const std::string q = p["functions"]["backward"]["ops"][i]["in"][0];  // rope_q, read here
    const size_t first = bwdOp(p, "unpack_grad");
    const std::string early = p["functions"]["backward"]["ops"][first]["out"][0];
    p["values"][early]["slot"] = p["values"][q]["slot"];
    rejects(p, "shares slot");
  }
  {  // the backward of a fused forward
    json p = good;
    p["options"]["fuse"] = true;
    rejects(p, "unfused one-rank forward");
  }
}

TEST(BackwardPlan, CompilerRefusesWhatTheBackwardIsNotWrittenFor) {
  const h3::Fingerprint fp = h3::deriveFingerprint(h3::namedConfig("tiny"), "tiny");
  auto refuses = [&](codegen::CompileOptions o, const std::string &needle) {
    try {
      codegen::compile(fp, "0000", o);
      ADD_FAILURE() << "compiled (expected: " << needle << ")";
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  codegen::CompileOptions o = backwardOptions();
  o.fuse = true;
  refuses(o, "--no-fuse");
  o = backwardOptions();
  o.tp = 2;
  refuses(o, "one rank");
  o = backwardOptions();
  o.sp = 2;
  refuses(o, "one rank");
  o = codegen::CompileOptions();
  o.trainable = {"*"};
  refuses(o, "--trainable: selects what the backward trains: it needs --backward");
  o = backwardOptions();
  o.trainable = {"lora"};
  refuses(o, "--trainable lora: the plan has no LoRA adapter slots");
  o = backwardOptions();
  o.trainable = {"*.to_qq.*"};  // a typo selects nothing: refused, not a silently frozen model
  refuses(o, "trainable pattern '*.to_qq.*' selects no weight tensor");
  o = backwardOptions();
  o.trainable = {""};
  refuses(o, "--trainable/0: is an empty pattern");
}

// A plan of the tiny config with LoRA slots of rank 64 and a backward training `trainable`, in a folder of its own
// (the reader hashes its kernel files).
struct LoraPlan {
  fs::path dir;
  plan::Plan plan;
  LoraPlan(const std::vector<std::string> &trainable, const std::string &name)
      : dir(tiny().dir.parent_path() / (tiny().dir.filename().string() + "_" + name)) {
    const h3::Fingerprint fp = h3::deriveFingerprint(h3::namedConfig("tiny"), "tiny");
    codegen::CompileOptions o = backwardOptions();
    o.loraRank = 64;
    o.trainable = trainable;
    fs::remove_all(dir);
    plan::writePlanFolder(codegen::compile(fp, "0000", o).plan.plan, dir);
    plan = plan::loadPlan(dir);
  }
  ~LoraPlan() { fs::remove_all(dir); }
};

// --lora-rank with --backward: every adapter slot's gradient by a linear_grad_w naming the base linear's node, the
// path's input gradient by linear_grad_x; --trainable keeps exactly the selected tensors' gradients and no op for a
// frozen one; the reader refuses edits that break the ties to the forward's LoRA path or to the patterns.
TEST(BackwardPlan, LoraPathsAndTrainableTensors) {
  const LoraPlan allPlan({}, "all");
  const plan::Plan &all = allPlan.plan;
  const plan::Function &b = *all.backward();
  EXPECT_EQ(b.trainable, std::vector<std::string>{"*"});
  size_t slots = 0;
  for (const auto &buf : all.weights)
    for (const auto &t : buf.tensors) {
      ASSERT_TRUE(b.outputs.count("grad:" + t.name)) << t.name;
      slots += t.adapter;
    }
  EXPECT_EQ(slots, 2u * (6 * 2 + 6 * 2));  // down + up of 6 linears in each of 2 blocks and 2 refiner blocks
  EXPECT_EQ(b.outputs.size(), 62u + slots + 3);
  // The up slot of block 0's to_q: dUp = bf(g)^T t (K = the rank), dt = bf(g) up; the down slot's against x.
  const std::string up = "transformer_blocks.0.attn.to_q.lora_up", down = "transformer_blocks.0.attn.to_q.lora_down";
  int seen = 0;
  for (const plan::Op &op : b.ops)
    if (op.weights == std::vector<std::string>{up} || op.weights == std::vector<std::string>{down}) {
      EXPECT_EQ(op.nodes, std::vector<std::string>{"transformer_blocks.0.attn.to_q"}) << op.where;
      EXPECT_EQ(op.weights[0] == up ? op.attrs.K : op.attrs.N, 64) << op.where;
      if (op.kind == plan::OpKind::LinearGradW) {
        EXPECT_EQ(op.grads, op.weights) << op.where;
        EXPECT_EQ(op.in[1], op.weights[0] == up ? "transformer_blocks.0.attn.to_q:lora_t" : "transformer_blocks.0.norm1")
            << op.where;
      }
      ++seen;
    }
  EXPECT_EQ(seen, 4);

  // Only the adapters: their gradients and the inputs', no op for a frozen tensor, fewer ops (the time embedder's
  // and the AdaLN tables' chains are dead without trained tensors).
  const LoraPlan loraFolder({"lora"}, "lora");
  const plan::Plan &lora = loraFolder.plan;
  const plan::Function &l = *lora.backward();
  EXPECT_EQ(l.outputs.size(), slots + 3);
  for (const auto &[key, v] : l.outputs)
    if (key.rfind("grad:@", 0) != 0) {
      EXPECT_TRUE(lora.weightTensor(key.substr(5)).adapter) << key;
    }
  for (const plan::Op &op : l.ops)
    for (const auto &t : op.grads) EXPECT_TRUE(lora.weightTensor(t).adapter) << op.where << " " << t;
  EXPECT_LT(l.ops.size(), b.ops.size());
  for (const plan::Op &op : l.ops)
    EXPECT_TRUE(op.kind != plan::OpKind::AdalnTableGrad && op.kind != plan::OpKind::SiluGrad) << op.where;

  // A glob: the q projections' weights (base and adapters), a bias left frozen beside its trained weight.
  const plan::Plan q = LoraPlan({"*.to_q.weight", "*.to_q.lora_*"}, "q").plan;
  std::set<std::string> keys;
  for (const auto &[key, v] : q.backward()->outputs)
    if (key.rfind("grad:@", 0) != 0) keys.insert(key.substr(5));
  std::set<std::string> want;
  for (const auto &buf : q.weights)
    for (const auto &t : buf.tensors)
      if (t.name.find(".to_q.weight") != std::string::npos || t.name.find(".to_q.lora_") != std::string::npos)
        want.insert(t.name);
  EXPECT_EQ(keys, want);
  EXPECT_EQ(want.size(), 4u * 3);

  // The reader ties the LoRA ops to the forward's path and the grads to the patterns.
  const json good = plan::planToJson(lora);
  auto refusesLora = [&](const json &p, const std::string &needle) {
    try {
      plan::planFromJson(rehash(p), loraFolder.dir, "plan.json");
      ADD_FAILURE() << "accepted a bad backward (expected: " << needle << ")";
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  EXPECT_EQ(plan::planToJson(plan::planFromJson(good, loraFolder.dir)), good);  // read back as written
  size_t w = 0;
  const json &ops = good["functions"]["backward"]["ops"];
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i]["op"] == "linear_grad_w" && ops[i]["weights"]["weight"][0] == up) w = i;
  ASSERT_GT(w, 0u);
  {  // the up slot's gradient against x instead of lora_t
    json p = good;
    p["functions"]["backward"]["ops"][w]["in"][1] = "transformer_blocks.0.norm1";
    refusesLora(p, "reads 'transformer_blocks.0.norm1'");
  }
  {  // another node's slot
    json p = good;
    p["functions"]["backward"]["ops"][w]["nodes"][0] = "transformer_blocks.0.attn.to_k";
    refusesLora(p, "is neither the up nor the down slot of transformer_blocks.0.attn.to_k");
  }
  {  // a K that is not the rank
    json p = good;
    p["functions"]["backward"]["ops"][w]["attrs"]["K"] = 24;
    refusesLora(p, "are not those of the up slot's GEMM");
  }
  {  // grads that the patterns do not select, and patterns that select more than the outputs (the op's kernel left
     // out: its parameters name the outputs these edits remove, which the reader would refuse first)
    json p = good;
    p["functions"]["backward"]["ops"][w]["kernel"] = nullptr;
    p["functions"]["backward"]["ops"][w]["weights"]["grads"] = json::array();
    refusesLora(p, "a 'linear_grad_w' op has 0 outputs (), got 1");  // the arity follows grads
    p["functions"]["backward"]["ops"][w]["out"] = json::array();
    p["functions"]["backward"]["outputs"].erase("grad:" + up);
    refusesLora(p, "selects [" + up + "]");
    p = good;
    p["functions"]["backward"]["trainable"] = {"*"};
    refusesLora(p, "but the function's trainable [*] selects");
    p = good;
    p["functions"]["backward"]["trainable"] = {"lora", "nothing.*"};
    refusesLora(p, "'nothing.*' selects no weight tensor of the plan");
  }
}


// The gradients of the bf16 linears (docs/contract.md section 14) in a small-config plan: on sm_90a the Hopper forms,
// dX (grad_linear_sm90.cuh) for every dX of more than 64 output columns and dW (grad_linear_w_sm90.cuh) for every dW,
// their bf(g) operand a tensor map over their own scratch (per item for dW, as x's), which the reader accepts from
// the plan folder; the skinny dX (64 columns or fewer), and every one on sm_100a or with `--tune grad_x_sm90=0` /
// `grad_w_sm90=0`, keep the mma.sync forms. Both forms give the same bits (Kernels.LinearGradX, Kernels.LinearGradW).
TEST(BackwardPlan, HopperLinearGradientsOfTheSmallConfig) {
  const h3::Fingerprint fp = h3::deriveFingerprint(h3::namedConfig("small"), "small");
  struct Case {
    const char *arch;
    int sm90;
  };
  for (const Case c : {Case{"sm_90a", 1}, Case{"sm_90a", 0}, Case{"sm_100a", 1}}) {
    codegen::CompileOptions o = backwardOptions();
    o.arch = c.arch;
    o.tuning.sm90GradX = c.sm90;
    o.tuning.sm90GradW = c.sm90;
    const fs::path dir = fs::temp_directory_path() /
                         fmt::format("h3c_backward_grad_sm90_{}_{}_{}", ::getpid(), c.arch, c.sm90);
    fs::remove_all(dir);
    plan::writePlanFolder(codegen::compile(fp, "0000", o).plan.plan, dir);
    const plan::Plan p = plan::loadPlan(dir);
    const bool hopper = std::string(c.arch) == "sm_90a" && c.sm90 == 1;
    int wideX = 0, w = 0;
    for (const plan::Op &op : p.backward()->ops) {
      const bool gx = op.kind == plan::OpKind::LinearGradX, gw = op.kind == plan::OpKind::LinearGradW;
      if ((!gx && !gw) || op.attrs.wDtype != DType::BF16) continue;
      if (gw && (op.grads.empty() || op.grads[0] != op.weights[0] || p.value(op.in[1]).dtype != DType::BF16)) continue;
      const plan::Kernel &k = p.kernel(op);
      const std::string kind = gx ? "linear_grad_x" : "linear_grad_w";
      const bool sm90 = k.id.rfind(fmt::format("{}_mma_sm90_n{}_k{}_", kind, op.attrs.N, op.attrs.K), 0) == 0;
      EXPECT_EQ(sm90, hopper && (gw || op.attrs.K > 64)) << c.arch << " " << op.where << " " << k.id;
      if (!sm90) {
        EXPECT_EQ(k.id.rfind(fmt::format("{}_mma_n{}_k{}_", kind, op.attrs.N, op.attrs.K), 0), 0u) << k.id;
      }
      wideX += gx && op.attrs.K > 64;
      w += gw;
      // g rounded by the op's own phase 0 into the scratch gb, or (h3-fuse-grad) a grad_round's bf16 g read by the
      // GEMM alone.
      const bool gbIn = p.value(op.in[0]).dtype == DType::BF16;
      ASSERT_EQ(k.phases.size(), gbIn ? 0u : 1u) << k.id;
      const plan::Launch &gemm = gbIn ? k.launch : k.phases[0].launch;
      const auto map = std::find_if(k.params.begin(), k.params.end(),
                                    [](const plan::KernelParam &q) { return q.name == "gb_map"; });
      ASSERT_EQ(map != k.params.end(), sm90) << k.id;
      if (sm90) {
        EXPECT_EQ(map->kind, plan::KernelParam::Kind::TensorMap);
        EXPECT_EQ(map->scratch, gbIn ? "" : "gb") << k.id;
        EXPECT_EQ(map->map.dims.size(), gx ? 2u : 3u) << k.id;  // dW: per item
        EXPECT_EQ(gemm.block[0], 384) << k.id;
        EXPECT_GT(gemm.grid[0].maxPerSm, 0) << k.id;  // persistent
      }
    }
    EXPECT_GT(wideX, 0) << c.arch;  // the small config's linears: K = 160 and wider
    EXPECT_GT(w, 0) << c.arch;
    fs::remove_all(dir);
  }
}

// h3-fuse-grad's LoRA down paths taken into the base dX (the small config: dX of more than 64 columns): 5 of a block's
// 6 (k's path into q's dX, whose residual it was), each reading its bf16 bf(dt) last and the down slot second, its
// kernel the Hopper dX with the path's maps on sm_90a and the mma.sync dX with the path on sm_100a; the reader refuses
// a lora_t that is not a rounded gradient, a down slot over another x, a lora_k that is not the slot's.
TEST(BackwardPlan, LoraDownPathsTakenIntoTheBaseDx) {
  const h3::Fingerprint fp = h3::deriveFingerprint(h3::namedConfig("small"), "small");
  for (const char *arch : {"sm_90a", "sm_100a"}) {
    codegen::CompileOptions o = backwardOptions();
    o.arch = arch;
    o.loraRank = 64;
    o.trainable = {"lora"};
    o.foldSwigluGrad = true;  // (off by default: --fold-swiglu-grad)
    const fs::path dir = fs::temp_directory_path() / fmt::format("h3c_backward_lora_fused_{}_{}", ::getpid(), arch);
    fs::remove_all(dir);
    plan::writePlanFolder(codegen::compile(fp, "0000", o).plan.plan, dir);
    const plan::Plan p = plan::loadPlan(dir);
    const bool hopper = std::string(arch) == "sm_90a";
    size_t fused = 0, paths = 0, q = 0, swiglus = 0;
    for (const plan::Op &op : p.backward()->ops) {
      EXPECT_NE(op.kind, plan::OpKind::SwigluGrad) << op.where << ": every swiglu_grad goes into fc2's dX";
      if (op.kind != plan::OpKind::LinearGradX) continue;
      // fc2's dX takes in the swiglu_grad its dX was the dy of (h3-fuse-grad): swiglu_x = the saved x = [v | g] of
      // 2K columns, dx bf16 [rows, 2K] (the rounding folded in as the swiglu_grad had it), the two nodes.
      if (op.attrs.epilogue == plan::Epilogue::Swiglu) {
        ++swiglus;
        EXPECT_EQ(op.nodes.size(), 2u) << op.where;
        EXPECT_NE(op.nodes[0].find(".ff.net.2"), std::string::npos) << op.where;
        EXPECT_NE(op.nodes.back().find(".ff.swiglu"), std::string::npos) << op.where;
        EXPECT_EQ(op.in.back().substr(op.in.back().size() - 14), ".ff.net.0.proj") << op.where;
        EXPECT_EQ(p.value(op.in.back()).cols, 2 * op.attrs.K) << op.where;
        EXPECT_EQ(p.value(op.out[0]).cols, 2 * op.attrs.K) << op.where;
        EXPECT_EQ(p.value(op.out[0]).dtype, DType::BF16) << op.where;
        EXPECT_NE(p.kernel(op).id.find("_swiglu_bfout"), std::string::npos) << p.kernel(op).id;
      }
      const bool path = op.weights.size() == 1 && p.weightTensor(op.weights[0]).adapter &&
                        op.weights[0].size() > 10 && op.weights[0].substr(op.weights[0].size() - 10) == ".lora_down";
      paths += path;
      if (op.attrs.loraK == 0) continue;
      ++fused;
      ASSERT_EQ(op.weights.size(), 2u) << op.where;
      EXPECT_EQ(op.attrs.loraK, 64) << op.where;
      EXPECT_EQ(op.weights[1].substr(op.weights[1].size() - 10), ".lora_down") << op.where;
      const std::string &t = op.in.at(op.attrs.epilogue == plan::Epilogue::Residual ? 2 : 1);  // lora_t
      EXPECT_EQ(p.value(t).dtype, DType::BF16) << op.where;
      EXPECT_EQ(p.value(t).cols, 64) << op.where;
      // q's dX takes k's path in (the sum over norm1's consumers), the others their own node's.
      if (op.nodes[0].find(".attn.to_q") != std::string::npos) {
        ++q;
        EXPECT_NE(op.weights[1].find(".attn.to_k.lora_down"), std::string::npos) << op.where;
      } else {
        EXPECT_EQ(op.weights[1].rfind(op.nodes[0] + ".lora_down", 0), 0u) << op.where << " " << op.weights[1];
      }
      const plan::Kernel &k = p.kernel(op);
      EXPECT_NE(k.id.find("_lora64_"), std::string::npos) << k.id;
      EXPECT_EQ(k.id.rfind(hopper ? "linear_grad_x_mma_sm90_" : "linear_grad_x_mma_n", 0), 0u) << k.id;
      for (const char *name : {"lora_t", hopper ? "d_map" : "down"})
        EXPECT_TRUE(std::any_of(k.params.begin(), k.params.end(), [&](const plan::KernelParam &kp) {
          return kp.name == name;
        })) << k.id << " " << name;
    }
    EXPECT_EQ(fused, 5u * 52) << arch;  // 50 blocks and 2 refiner blocks
    EXPECT_EQ(paths, 52u) << arch;      // q's own path: the last part of norm1's sum
    EXPECT_EQ(q, 52u) << arch;
    EXPECT_EQ(swiglus, 52u) << arch;
    if (!hopper) {
      fs::remove_all(dir);
      continue;
    }
    const json good = plan::planToJson(p);
    auto refuses = [&](const json &bad, const std::string &needle) {
      try {
        plan::planFromJson(rehash(bad), dir, "plan.json");
        ADD_FAILURE() << "accepted a bad fused dX (expected: " << needle << ")";
      } catch (const Error &e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      }
    };
    // (The edited op's kernel left out: its tensor maps would be refused first, by the kernel's own checks.)
    const json &ops = good["functions"]["backward"]["ops"];
    size_t f = 0, out = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i]["op"] != "linear_grad_x" || !ops[i]["attrs"].contains("lora_k")) continue;
      if (ops[i]["nodes"][0] == "transformer_blocks.3.ff.net.2") f = i;
      if (ops[i]["nodes"][0] == "transformer_blocks.3.attn.to_out.0") out = i;
    }
    ASSERT_GT(f, 0u);
    ASSERT_GT(out, 0u);
    {  // the forward's t (bf16, but no gradient) instead of the path's bf(dt), which its own dX stores rounded
      json b = good;
      b["functions"]["backward"]["ops"][f]["kernel"] = nullptr;
      std::string t = b["functions"]["backward"]["ops"][f]["in"][1];  // lora_t (then swiglu_x)
      ASSERT_EQ(t, "grad:transformer_blocks.3.ff.net.2:lora_t");
      ASSERT_EQ(p.value(t).dtype, DType::BF16);
      b["functions"]["backward"]["ops"][f]["in"][1] = t.substr(5);
      refuses(b, "must be a bf16 gradient");
    }
    // The swiglu_grad taken in: its x must be the swiglu's saved input, its second node the swiglu that the linear
    // reads, and the op names both nodes.
    {  // fc2's input (the swiglu's output) as swiglu_x
      json b = good;
      b["functions"]["backward"]["ops"][f]["kernel"] = nullptr;
      b["functions"]["backward"]["ops"][f]["in"].back() = "transformer_blocks.3.ff.swiglu";
      refuses(b, "but the forward op of transformer_blocks.3.ff.net.2 has 'transformer_blocks.3.ff.net.0.proj' there");
    }
    {  // another block's swiglu
      json b = good;
      b["functions"]["backward"]["ops"][f]["kernel"] = nullptr;
      b["functions"]["backward"]["ops"][f]["nodes"][1] = "transformer_blocks.4.ff.swiglu";
      refuses(b, "does not read the output of the swiglu 'transformer_blocks.4.ff.swiglu'");
    }
    {  // the swiglu's node left out
      json b = good;
      b["functions"]["backward"]["ops"][f]["kernel"] = nullptr;
      b["functions"]["backward"]["ops"][f]["nodes"].erase(1);
      refuses(b, "names the linear and the swiglu");
    }
    {  // to_out's down slot (over the attention output) in fc2's dX (over the swiglu output)
      json b = good;
      b["functions"]["backward"]["ops"][f]["kernel"] = nullptr;
      b["functions"]["backward"]["ops"][f]["weights"]["weight"][1] = ops[out]["weights"]["weight"][1];
      refuses(b, "reads 'transformer_blocks.3.attn.attention'");
    }
    {  // a lora_k that is not the slot's rows
      json b = good;
      b["functions"]["backward"]["ops"][f]["kernel"] = nullptr;
      b["functions"]["backward"]["ops"][f]["attrs"]["lora_k"] = 32;
      refuses(b, "are not the down slot's");
    }
    fs::remove_all(dir);
  }
}

} // namespace backward_plan_test
