// The compiler end to end on the tiny and full fingerprints: node coverage, op counts from the fusion rules
// (counted by hand from docs/contract.md sections 2-3 and 5.2), the plan read back by the runtime's strict loader,
// buffer slots never shared by two live values, reduction orders independent of sp / tp, the layout of the
// parallel plans, determinism, atomic output.
#include "h3c/Codegen/Compile.h"
#include "h3c/Codegen/Importer.h"
#include "h3c/kernels/emit.h"
#include "h3c/plan/io.h"
#include "h3c/support/canonical_json.h"
#include "h3c/support/error.h"
#include "h3c/support/files.h"
#include "h3c/support/sha256.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

namespace fs = std::filesystem;
using nlohmann::json;
using namespace h3c;

namespace {

h3::Fingerprint fingerprint(const std::string &name) { return h3::deriveFingerprint(h3::namedConfig(name), name); }

codegen::CompileResult compileWith(const h3::Fingerprint &fp, int64_t tp, bool fuse, int64_t tokens = 4096,
                                   int64_t sp = 1, bool qkEpilogue = false) {
  codegen::CompileOptions o;
  o.sp = sp;
  o.tp = tp;
  o.fuse = fuse;
  o.qkEpilogue = qkEpilogue;
  o.tokens = tokens;
  return codegen::compile(fp, "0000", o);
}

// The plan as it is written to plan.json.
json planJson(const codegen::CompileResult &r) { return plan::planToJson(r.plan.plan); }
const json &opsOf(const json &p) { return p["functions"]["forward"]["ops"]; }

fs::path tempDir(const std::string &name) {
  fs::path d = fs::temp_directory_path() / ("h3c_compile_test_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(d);
  return d;
}

// Ops of the fused graph: a transformer block is 9 ops (adaln, norm1, qkv, qk_norm_rope, attention,
// to_out+gate_residual, norm2, fc1+swiglu, fc2+gate_residual), a refiner block 8 (no adaln; residual epilogues),
// the top level 13 (rope_table, the three input projections, final_norm, pack, time_proj, the time MLP, norm_out's
// table and norm, the two output projections, unpack). Section 5.2: tp > 1 adds five column all-gathers per block
// (the AdaLN table, the attention output, the stream after to_out, the swiglu output, the stream after fc2) and one
// split of the packed stream; sp > 1 adds five row splits (pack's stream, ts_index and tags, rope cos and sin), two
// row all-gathers per block (k, v) and two before unpack (the output heads). sm_90a (the default) with tp = 1 and
// heads of 128 channels (full, small): qk_norm_rope is qkv's epilogue, one op less per block of either kind.
// qkEpilogue: compiled with --qk-epilogue (sm_90a; off by default), which folds each qk_norm_rope into its qkv_linear.
size_t fusedOps(const h3::Config &c, int64_t tp, int64_t sp = 1, bool qkEpilogue = false) {
  const bool qkvEpilogue = qkEpilogue && tp == 1 && c.attention_head_dim == 128 && c.rotaryDim() % 16 == 0;
  return 9 * c.num_layers + 8 * c.num_refiner_layers + 13 + (tp > 1 ? 5 * c.num_layers + 1 : 0) +
         (sp > 1 ? 5 + 2 * c.num_layers + 2 : 0) - (qkvEpilogue ? c.num_layers + c.num_refiner_layers : 0);
}

} // namespace

TEST(Importer, OneOpPerNodeWithIdsInOrder) {
  for (const char *name : {"tiny", "full"}) {
    h3::Fingerprint fp = fingerprint(name);
    const h3::Config &c = fp.config;
    size_t expect = 17 * c.num_layers + 14 * c.num_refiner_layers + 15;
    if (std::string(name) == "full") {
      EXPECT_EQ(expect, 893u);
    }
    mlir::MLIRContext ctx;
    auto m = codegen::importFingerprint(ctx, fp);
    std::vector<std::string> ids;
    m->walk([&](mlir::Operation *op) {
      if (auto n = op->getAttrOfType<mlir::ArrayAttr>("nodes"))
        for (auto a : n) ids.push_back(mlir::cast<mlir::StringAttr>(a).str());
    });
    ASSERT_EQ(ids.size(), expect) << name;
    for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i], fp.nodes[i].id);
  }
}

TEST(Importer, RejectsBrokenWiring) {
  h3::Fingerprint fp = fingerprint("tiny");
  fp.nodes[5].inputs[0] = "no_such_value";
  mlir::MLIRContext ctx;
  try {
    codegen::importFingerprint(ctx, fp);
    FAIL() << "expected an error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find(fp.nodes[5].id), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no_such_value"), std::string::npos) << e.what();
  }
}

TEST(Importer, ReductionsMustMatchTheOps) {
  h3::Fingerprint fp = fingerprint("tiny");
  for (auto &n : fp.nodes)
    if (n.kind == "rms_norm") {
      n.reductions[0].extent = "999";
      break;
    }
  mlir::MLIRContext ctx;
  try {
    codegen::importFingerprint(ctx, fp);
    FAIL() << "expected an error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("reduction sum_squares has extent 999, the op reduces over 24"),
              std::string::npos)
        << e.what();
  }
  h3::Fingerprint fp2 = fingerprint("tiny");
  fp2.nodes[0].reductions.push_back({"dot", "3"});  // rope_table reduces nothing
  EXPECT_THROW(codegen::importFingerprint(ctx, fp2), Error);
}

TEST(Compile, OpCountsFollowTheFusionRules) {
  for (const char *name : {"tiny", "full"}) {
    h3::Fingerprint fp = fingerprint(name);
    std::vector<int64_t> tps = std::string(name) == "tiny" ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{1, 2, 4, 8};
    for (int64_t tp : tps)
      for (int64_t sp : {1, 2, 8}) {
        auto r = compileWith(fp, tp, true, 4096, sp);
        EXPECT_EQ(r.plan.plan.forward().ops.size(), fusedOps(fp.config, tp, sp)) << name << " tp " << tp << " sp " << sp;
        auto q = compileWith(fp, tp, true, 4096, sp, /*qkEpilogue=*/true);
        EXPECT_EQ(q.plan.plan.forward().ops.size(), fusedOps(fp.config, tp, sp, true))
            << name << " tp " << tp << " sp " << sp << " --qk-epilogue";
      }
    auto unfused = compileWith(fp, 1, false);
    EXPECT_EQ(unfused.plan.plan.forward().ops.size(), fp.nodes.size()) << name;
  }
}

TEST(Compile, FullFingerprintUnderTwoSeconds) {
  h3::Fingerprint fp = fingerprint("full");
  auto r = compileWith(fp, 8, true, 4096, 8);
  std::printf("full fingerprint, sp 8 x tp 8: %.3f s\n", r.seconds);
  EXPECT_LT(r.seconds, 2.0);
}

TEST(Compile, RuntimeLoaderAcceptsThePlans) {
  h3::Fingerprint fp = fingerprint("tiny");
  for (auto [tp, fuse] : std::vector<std::pair<int64_t, bool>>{{1, true}, {2, true}, {1, false}, {2, false}}) {
    auto r = compileWith(fp, tp, fuse, 4096, tp == 2 && fuse ? 4 : 1);
    fs::path d = tempDir("load");
    plan::writePlanFolder(r.plan.plan, d);
    plan::Plan p = plan::loadPlan(d);  // throws on any contract violation, checks node coverage and kernel hashes
    EXPECT_EQ(p.options.tp, tp);
    EXPECT_EQ(p.options.fuse, fuse);
    EXPECT_EQ(p.kernels.size(), r.plan.plan.kernels.size());
    // plan_sha256 over the canonical JSON without itself, recomputed here from the file.
    json j = json::parse(readFile(d / "plan.json"));
    std::string recorded = j["plan_sha256"];
    j.erase("plan_sha256");
    EXPECT_EQ(recorded, sha256Hex(j.dump()));
    fs::remove_all(d);
  }
}

// Every op's kernel, as the plan records it (source, launch grid and parameters), is the one the emitter makes for
// that op from the plan's own values: ops that share a kernel id share its whole launch ABI (a qkv over the text
// rows and one over all packed rows have the same source but different row counts, so different kernels).
TEST(Compile, EveryOpRunsTheKernelMadeForIt) {
  for (bool wgmma : {true, false}) {
    codegen::CompileOptions o;
    o.wgmma = wgmma;
    for (const char *cfg : {"tiny", "small"}) {
      const plan::Plan &p = codegen::compile(fingerprint(cfg), "0000", o).plan.plan;
      std::set<std::string> rowExtents;
      for (const plan::Op &op : p.forward().ops) {
        if (!op.kernel) continue;
        kernels::OperandValues vals;
        for (const auto &n : op.in) vals.in.push_back(p.value(n));
        for (const auto &n : op.out) vals.out.push_back(p.value(n));
        kernels::EmitOptions eo = kernels::EmitOptions::planDefaults();  // what compile starts from
        eo.wgmma = wgmma;
        auto k = kernels::emitKernel(op, vals, p.options.arch, eo);
        ASSERT_TRUE(k) << op.where;
        EXPECT_EQ(k->id, *op.kernel) << op.where;
        if (op.kind == plan::OpKind::QkvLinear)
          for (const auto &prm : p.kernel(op).params)
            if (prm.name == "rows") rowExtents.insert(prm.value.text());
      }
      EXPECT_EQ(rowExtents, (std::set<std::string>{"B*Nt", "B*S"})) << cfg << ": refiner and block qkv rows";
    }
  }
}

TEST(Compile, SlotsAreNeverSharedByLiveValues) {
  for (int64_t tp : {1, 8}) {
    auto r = compileWith(fingerprint("full"), tp, true, 4096, tp == 8 ? 2 : 1);
    const json plan = planJson(r);
    std::map<int64_t, std::pair<std::string, int64_t>> slotSize;  // id -> (domain, bytes per row)
    for (const auto &s : plan["slots"]) {
      ASSERT_EQ(s["bytes_per_row"].size(), 1u);
      slotSize[s["id"]] = {s["bytes_per_row"].begin().key(), s["bytes_per_row"].begin().value()};
    }
    auto bytes = [](const std::string &dt) { return dt == "BF16" ? 2 : dt == "F32" ? 4 : 8; };
    const json &values = plan["values"];
    for (auto it = values.begin(); it != values.end(); ++it) {
      const json &v = it.value();
      auto [dom, bpr] = slotSize.at(v["slot"]);
      EXPECT_EQ(dom, v["rows"].get<std::string>()) << it.key();
      EXPECT_GE(bpr, v["cols"].get<int64_t>() * bytes(v["dtype"])) << it.key();
    }
    // Liveness from the op list alone: a value lives from its definition to its last reader (outputs to the end).
    const json &ops = opsOf(plan);
    std::map<std::string, size_t> def, last;
    for (const auto &n : plan["functions"]["forward"]["inputs"]) def[n] = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
      for (const auto &n : ops[i]["in"]) last[n] = i;
      for (const auto &n : ops[i]["out"]) def[n] = i;
    }
    const json &outs = plan["functions"]["forward"]["outputs"];
    for (auto it = outs.begin(); it != outs.end(); ++it) last[it.value()] = ops.size();
    std::map<int64_t, std::vector<std::pair<size_t, size_t>>> bySlot;
    for (auto &[n, d] : def) {
      size_t end = last.count(n) ? last[n] : d;
      for (auto [a, b] : bySlot[values[n]["slot"].get<int64_t>()])
        EXPECT_TRUE(end < a || b < d || (end == a && d < a) || (b == d && a < d))
            << n << " overlaps another value in slot " << values[n]["slot"];
      bySlot[values[n]["slot"].get<int64_t>()].push_back({d, end});
    }
  }
}

TEST(Compile, OrdersDoNotDependOnSpTpOrArch) {
  h3::Fingerprint fp = fingerprint("full");
  std::map<std::string, json> first;
  for (auto [sp, tp] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {1, 2}, {1, 4}, {1, 8}, {4, 1}, {2, 4}}) {
    for (const char *arch : {"sm_90a", "sm_100a"}) {
      codegen::CompileOptions o;
      o.sp = sp;
      o.tp = tp;
      o.arch = arch;
      auto r = codegen::compile(fp, "0000", o);
      const json pj = planJson(r);
      for (const auto &op : opsOf(pj)) {
        if (op["nodes"].empty()) {
          EXPECT_TRUE(op["op"] == "all_gather" || op["op"] == "split") << op["op"];
          continue;
        }
        std::string n = op["nodes"][0];
        if (!first.count(n)) first[n] = op["order"];
        EXPECT_EQ(first[n], op["order"]) << n << " sp " << sp << " tp " << tp << " " << arch;
      }
    }
  }
  // Section 4: every k_chunks op has one unit.
  for (auto &[n, order] : first)
    if (!order.is_null() && order["kind"] == "k_chunks") {
      EXPECT_EQ(order["units"], 1) << n;
    }
}

// Section 5.2, tp: every GEMM of a block is column-parallel with the full K and the rank's N, every collective is
// a bf16 all-gather of columns (a copy), and nothing is reduced across ranks.
TEST(Compile, TensorParallelIsColumnsAndBf16AllGathers) {
  const h3::Config c = h3::namedConfig("full");
  auto r = compileWith(fingerprint("full"), 4, true);
  const json pj = planJson(r);
  size_t gathers = 0, splits = 0;
  for (const auto &op : opsOf(pj)) {
    const std::string kind = op["op"], node = op["nodes"].empty() ? "" : op["nodes"][0].get<std::string>();
    if (kind == "all_gather") {
      ++gathers;
      EXPECT_EQ(op["attrs"]["axis"], "cols");
      EXPECT_EQ(op["attrs"]["dtype"], "BF16");
      EXPECT_EQ(op["attrs"]["parts"], 4);
      EXPECT_EQ(op["kernel"], nullptr);
      continue;
    }
    if (kind == "split") {
      ++splits;
      continue;
    }
    if (node.rfind("transformer_blocks.", 0) != 0 || kind == "norm_modulate") {
      EXPECT_EQ(op["attrs"]["shard"]["kind"], "replicated") << node;
      continue;
    }
    EXPECT_EQ(op["attrs"]["shard"]["kind"], "column") << node;
    EXPECT_EQ(op["attrs"]["shard"]["tp"], 4) << node;
    if (node.find(".attn.to_out.0") != std::string::npos) {
      EXPECT_EQ(op["attrs"]["K"], c.innerDim());
      EXPECT_EQ(op["attrs"]["N"], c.hidden_size / 4);
      EXPECT_EQ(op["in"][0].get<std::string>(), node.substr(0, node.size() - 8) + "attention:gather_cols");
    }
    if (node.find(".ff.net.2") != std::string::npos) {
      EXPECT_EQ(op["attrs"]["K"], c.ffn_dim);
      EXPECT_EQ(op["attrs"]["N"], c.hidden_size / 4);
    }
    if (kind == "qkv_linear") {
      EXPECT_EQ(op["attrs"]["heads"], c.num_attention_heads / 4);
    }
  }
  EXPECT_EQ(gathers, size_t(5 * c.num_layers));
  EXPECT_EQ(splits, 1u);
  // The split weights: rank j holds part j of every segment of the tensor's rows.
  for (const auto &b : pj["weights"])
    for (const auto &t : b["tensors"]) {
      const std::string name = t["name"];
      bool gemm = name.rfind("transformer_blocks.", 0) == 0 && name.find("norm") == std::string::npos;
      EXPECT_EQ(t.contains("split"), gemm) << name;
      if (name == "transformer_blocks.0.ff.net.0.proj.weight") {
        EXPECT_EQ(t["split"]["segments"], json::parse("[[0, 14336], [14336, 28672]]"));
      }
      if (name == "transformer_blocks.0.adaln_proj.linear.bias") {
        EXPECT_EQ(t["split"]["segments"].size(), 18u);
      }
    }
}

// Section 5.2, sp: the stream and its row metadata are split by rows after pack / rope_table, the blocks run on the
// rank's rows (Sr), attention reads all-gathered k and v, unpack all-gathered output heads.
TEST(Compile, SequenceParallelSplitsRowsAndGathersKeys) {
  auto r = compileWith(fingerprint("tiny"), 1, true, 4096, 4);
  const plan::Plan &p = r.plan.plan;
  const json pj = planJson(r);
  EXPECT_EQ(pj["ranks"]["count"], 4);
  EXPECT_EQ(pj["ranks"]["list"][3]["rows"]["begin"], json::parse("[3, 4]"));
  size_t rowSplits = 0;
  for (const plan::Op &op : p.forward().ops) {
    if (op.kind == plan::OpKind::Split) {
      ++rowSplits;
      EXPECT_EQ(op.attrs.axis, plan::Axis::Rows);
      EXPECT_EQ(op.attrs.parts, 4);
    }
    if (op.kind == plan::OpKind::Attention && op.firstNode().rfind("transformer_blocks.", 0) == 0) {
      EXPECT_EQ(p.value(op.in[0]).rows, plan::Domain::Sr);
      for (int i : {1, 2}) {
        EXPECT_EQ(p.value(op.in[size_t(i)]).rows, plan::Domain::S);
        EXPECT_EQ(op.in[size_t(i)].substr(op.in[size_t(i)].size() - 12), ":gather_rows");
      }
    }
    if (op.kind == plan::OpKind::Attention && op.firstNode().rfind("token_refiner.", 0) == 0) {
      EXPECT_EQ(p.value(op.in[0]).rows, plan::Domain::Nt);  // the refiner is replicated
    }
    if (op.kind == plan::OpKind::Unpack) {
      for (const auto &in : op.in)
        EXPECT_EQ(p.value(in).rows, plan::Domain::S);
    }
    if (op.kind == plan::OpKind::NormModulate) {
      EXPECT_EQ(p.value(op.in[0]).rows, plan::Domain::Sr);
      EXPECT_EQ(p.value(op.in[2]).rows, plan::Domain::Sr);  // ts_index: the rank's rows
    }
  }
  EXPECT_EQ(rowSplits, 5u);
}

TEST(Compile, Deterministic) {
  h3::Fingerprint fp = fingerprint("full");
  auto a = compileWith(fp, 2, true), b = compileWith(fp, 2, true);
  EXPECT_EQ(canonicalJson(planJson(a)), canonicalJson(planJson(b)));
}

TEST(Compile, RefusesToReplaceAFolderThatIsNotAPlan) {
  fs::path d = tempDir("foreign");
  fs::create_directories(d);
  writeFileAtomic(d / "keep.txt", "mine");
  auto r = compileWith(fingerprint("tiny"), 1, true);
  EXPECT_THROW(plan::writePlanFolder(r.plan.plan, d), Error);
  EXPECT_EQ(readFile(d / "keep.txt"), "mine");
  EXPECT_FALSE(fs::exists(d / "plan.json"));
  fs::remove_all(d);
}

TEST(Compile, RejectsUnsupportedOptions) {
  h3::Fingerprint fp = fingerprint("tiny");
  codegen::CompileOptions o;
  o.tp = 3;
  EXPECT_THROW(codegen::compile(fp, "0000", o), Error);
  o.tp = 4;  // tiny has 2 heads: the pipeline names the op it cannot split
  try {
    codegen::compile(fp, "0000", o);
    FAIL() << "expected an error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("transformer_blocks.0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cannot split 2 heads over tp = 4"), std::string::npos) << e.what();
  }
  o.tp = 1;
  o.arch = "sm_80";
  EXPECT_THROW(codegen::compile(fp, "0000", o), Error);
  o.arch = "sm_90a";
  o.sp = 3;
  EXPECT_THROW(codegen::compile(fp, "0000", o), Error);
}
