// The compiler end to end on the tiny and full fingerprints: node coverage, op counts from the fusion rules
// (counted by hand from docs/contract.md sections 2-3), the plan read back by the runtime's strict loader, buffer
// slots never shared by two live values, reduction orders independent of tp, determinism, atomic output.
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

codegen::CompileResult compileWith(const h3::Fingerprint &fp, int64_t tp, bool fuse, int64_t tokens = 4096) {
  codegen::CompileOptions o;
  o.tp = tp;
  o.fuse = fuse;
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
// table and norm, the two output projections, unpack). tp > 1 adds one allreduce_tree per row-parallel linear.
size_t fusedOps(const h3::Config &c, int64_t tp) {
  return 9 * c.num_layers + 8 * c.num_refiner_layers + 13 + (tp > 1 ? 2 * c.num_layers : 0);
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
    for (int64_t tp : tps) {
      auto r = compileWith(fp, tp, true);
      EXPECT_EQ(r.plan.plan.forward().ops.size(), fusedOps(fp.config, tp)) << name << " tp " << tp;
    }
    auto unfused = compileWith(fp, 1, false);
    EXPECT_EQ(unfused.plan.plan.forward().ops.size(), fp.nodes.size()) << name;
  }
}

TEST(Compile, FullFingerprintUnderTwoSeconds) {
  h3::Fingerprint fp = fingerprint("full");
  auto r = compileWith(fp, 8, true);
  std::printf("full fingerprint, tp 8: %.3f s\n", r.seconds);
  EXPECT_LT(r.seconds, 2.0);
}

TEST(Compile, RuntimeLoaderAcceptsThePlans) {
  h3::Fingerprint fp = fingerprint("tiny");
  for (auto [tp, fuse] : std::vector<std::pair<int64_t, bool>>{{1, true}, {2, true}, {1, false}, {2, false}}) {
    auto r = compileWith(fp, tp, fuse);
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
        kernels::EmitOptions eo;
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
    auto r = compileWith(fingerprint("full"), tp, true);
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
      EXPECT_GE(bpr, v["cols"].get<int64_t>() * bytes(v["dtype"]) * v.value("ranks", 1)) << it.key();
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

TEST(Compile, OrdersDoNotDependOnTpOrArch) {
  h3::Fingerprint fp = fingerprint("full");
  std::map<std::string, json> first;
  for (int64_t tp : {1, 2, 4, 8}) {
    for (const char *arch : {"sm_90a", "sm_100a"}) {
      codegen::CompileOptions o;
      o.tp = tp;
      o.arch = arch;
      auto r = codegen::compile(fp, "0000", o);
      const json pj = planJson(r);
      for (const auto &op : opsOf(pj)) {
        if (op["nodes"].empty() || op["op"] == "allreduce_tree") continue;
        std::string n = op["nodes"][0];
        if (!first.count(n)) first[n] = op["order"];
        EXPECT_EQ(first[n], op["order"]) << n << " tp " << tp << " " << arch;
      }
    }
  }
  // The contract's units: 8 for the block to_out / fc2, 1 for every other k_chunks op.
  for (auto &[n, order] : first) {
    if (order.is_null() || order["kind"] != "k_chunks") continue;
    bool rowParallel = n.rfind("transformer_blocks.", 0) == 0 &&
                       (n.find(".attn.to_out.0") != std::string::npos || n.find(".ff.net.2") != std::string::npos);
    EXPECT_EQ(order["units"], rowParallel ? 8 : 1) << n;
  }
}

TEST(Compile, RowParallelOpsAreSplitWithAnAllreduce) {
  auto r = compileWith(fingerprint("full"), 4, true);
  const json pj = planJson(r);
  const json &ops = opsOf(pj);
  size_t allreduce = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i]["op"] != "allreduce_tree") continue;
    ++allreduce;
    const json &lin = ops[i - 1];
    EXPECT_EQ(lin["op"], "linear");
    EXPECT_EQ(lin["attrs"]["shard"]["kind"], "row");
    EXPECT_EQ(lin["attrs"]["shard"]["tp"], 4);
    EXPECT_EQ(ops[i]["in"][0], lin["out"][0]);
    EXPECT_EQ(pj["values"][lin["out"][0].get<std::string>()]["ranks"], 4);
    EXPECT_EQ(ops[i]["attrs"]["epilogue"], "gate_residual");
    EXPECT_EQ(ops[i]["order"]["units"], 8);
  }
  EXPECT_EQ(allreduce, 100u);
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
}
