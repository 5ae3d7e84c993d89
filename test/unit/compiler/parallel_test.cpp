// Issue 11's promise on compiled plans (docs/contract.md section 5.2): for every sp x tp in {1, 2, 4, 8} that
// divides the shapes, the CPU reference's rank simulation of the compiled plan gives the bytes of the one-rank plan.
// tiny and small (2 heads: tp 1, 2; small at sp 1, 2, 8) and an 8-head variant of tiny (tp up to 8), shuffled packed rows, batch 2, two
// timesteps, S not a multiple of sp (uneven row ranges). The expectation is the sp = tp = 1 run: another plan, other
// ops, other buffers; only the numerics are shared, by contract.
#include "h3c/Codegen/Compile.h"
#include "h3c/models/fingerprint.h"
#include "h3c/runtime/executor.h"
#include "test_plans.h"

#include <gtest/gtest.h>

using namespace h3c;

namespace {

plan::Plan compiled(const h3::Config &c, int64_t sp, int64_t tp, bool fuse) {
  codegen::CompileOptions o;
  o.sp = sp;
  o.tp = tp;
  o.fuse = fuse;
  o.tokens = 64;
  return codegen::compile(h3::deriveFingerprint(c, "test"), "0000", o).plan.plan;
}

rt::RunResult run(const plan::Plan &p, rt::WeightSource &w, const rt::Request &r) {
  rt::RunOptions o;
  o.sp = p.options.sp;
  o.tp = p.options.tp;
  o.threads = 2;
  return rt::runModel(p, w, r, o);
}

void expectAllDegreesEqual(const h3::Config &c, const std::vector<int64_t> &tps, std::vector<bool> fuses,
                           const std::vector<int64_t> &sps = {1, 2, 4, 8}) {
  auto w = rt::makeSyntheticWeights(c, 21);
  rt::RequestShape sh;
  sh.text = 5;
  sh.audio = 4;
  sh.videoT = 2;
  sh.videoH = 2;
  sh.videoW = 3;  // S = 5 + 12 + 4 = 21
  sh.batch = 2;
  sh.timesteps = 2;
  sh.shuffle = true;
  rt::Request r = rt::makeRequest(c, sh, 33);
  for (bool fuse : fuses) {
    rt::RunResult base = run(compiled(c, 1, 1, fuse), *w, r);
    for (int64_t sp : sps)
      for (int64_t tp : tps) {
        if (sp * tp == 1)
          continue;
        plan::Plan p = compiled(c, sp, tp, fuse);
        rt::RunResult t = run(p, *w, r);
        EXPECT_EQ(t.outputs.sample.bytes, base.outputs.sample.bytes) << "sp " << sp << " tp " << tp << " fuse " << fuse;
        EXPECT_EQ(t.outputs.audio_sample.bytes, base.outputs.audio_sample.bytes) << "sp " << sp << " tp " << tp;
        EXPECT_TRUE(t.ledger["accepted"].get<bool>());
      }
  }
}

} // namespace

TEST(CompiledParallel, TinyEverySpTpIsByteEqual) { expectAllDegreesEqual(h3::namedConfig("tiny"), {1, 2}, {true, false}); }

// small at sp 1, 2 and 8 (8 ranks over 21 rows: uneven and empty ranges; tiny runs sp 4 too): the test's time
// is the CPU reference's, once per degree.
TEST(CompiledParallel, SmallEverySpTpIsByteEqual) {
  expectAllDegreesEqual(h3::namedConfig("small"), {1, 2}, {true}, {1, 2, 8});
}

TEST(CompiledParallel, EightHeadsUpToTp8IsByteEqual) { expectAllDegreesEqual(rt::testplans::eightHeadConfig(), {1, 2, 4, 8}, {true}); }
