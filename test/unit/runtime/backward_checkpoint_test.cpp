// Activation checkpointing per block (docs/contract.md section 14, `h3c compile --backward --checkpoint blocks`) on
// the CPU reference: a checkpointed plan's forward outputs, input gradients and weight gradients are byte-equal to
// those of the same plan compiled without segments (every parameter trained, and --trainable lora over random
// adapter slots; one item and a shuffled batch of two), while the activation bytes the value map holds at its peak are
// lower; the segments are one per block (the refiner's and the transformer's), each rerunning ops of its own block
// only.
#include "backward_test_util.h"
#include "tool.h"

#include "h3c/plan/checkpoint.h"
#include "h3c/plan/io.h"
#include "h3c/runtime/backward.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

using namespace h3c;
using namespace h3c::rt;

// (a named namespace holding the tests too: the unity build compiles a binary's test files as one translation
// unit, where anonymous namespaces would merge)
namespace backward_checkpoint_test {

using backward_test::Loss;
using backward_test::sameBytes;
using backward_test::tinyRequest;

struct Plans {
  testtool::TempDir t{"h3c_backward_checkpoint"};
  h3::Config c = h3::namedConfig("tiny");
  std::unique_ptr<WeightSource> base = makeSyntheticWeights(c, 7);
  std::unique_ptr<OverlayWeights> w;
  plan::Plan all, allCk, lora, loraCk, allKeep, loraKeepLast, loraKeepNone, loraKeepTables, loraKeepAllCap;
  Loss loss{size_t(8 * c.videoPatchDim()), size_t(3 * c.audio_in_channels), 9};
  bool ok = false;
  Plans() {
    std::string out;
    const std::string fp = t / "fp.json";
    const std::string bwd = " --backward --lora-rank 64";
    auto compile = [&](const std::string &args, const std::string &dir) {
      return testtool::runTool("compile " + fp + bwd + args + " -o " + t / dir, &out) == 0;
    };
    if (testtool::runTool("fingerprint derive --config tiny -o " + fp, &out) != 0 || !compile("", "all") ||
        !compile(" --checkpoint blocks", "all_ck") || !compile(" --trainable lora", "lora") ||
        !compile(" --trainable lora --checkpoint blocks", "lora_ck") ||
        !compile(" --checkpoint blocks --keep attention", "all_keep") ||
        // the cap: one transformer block's attention outputs at the report's 8,192 rows (bf16 [rows, heads * d] and
        // the row statistics h3-fuse-grad saves for the backward, F32 [rows, heads])
        !compile(" --trainable lora --checkpoint blocks --keep attention --keep-bytes " +
                     std::to_string(int64_t(8192) * c.num_attention_heads * (c.attention_head_dim * 2 + 4)),
                 "lora_keep_last") ||
        !compile(" --trainable lora --checkpoint blocks --keep attention --keep-bytes 1", "lora_keep_none") ||
        // one and a half such outputs with the adaLN tables too: the last block's attention output, and every
        // block's tables (3 rows of 6 x hidden F32 each, far less than half an attention output at 8,192 rows), which
        // still fit where a second attention output does not
        !compile(" --trainable lora --checkpoint blocks --keep attention --keep adaln_table --keep-bytes " +
                     std::to_string(int64_t(8192) * c.num_attention_heads * (c.attention_head_dim * 2 + 4) * 3 / 2),
                 "lora_keep_tables") ||
        // `--keep all` under the same cap: whole blocks only (less than one block's values fit, so none)
        !compile(" --trainable lora --checkpoint blocks --keep all --keep-bytes " +
                     std::to_string(int64_t(8192) * c.num_attention_heads * (c.attention_head_dim * 2 + 4) * 3 / 2),
                 "lora_keep_all_cap")) {
      ADD_FAILURE() << out;
      return;
    }
    all = plan::loadPlan(t / "all");
    allCk = plan::loadPlan(t / "all_ck");
    lora = plan::loadPlan(t / "lora");
    loraCk = plan::loadPlan(t / "lora_ck");
    allKeep = plan::loadPlan(t / "all_keep");
    loraKeepLast = plan::loadPlan(t / "lora_keep_last");
    loraKeepNone = plan::loadPlan(t / "lora_keep_none");
    loraKeepTables = plan::loadPlan(t / "lora_keep_tables");
    loraKeepAllCap = plan::loadPlan(t / "lora_keep_all_cap");
    w = backward_test::randomAdapters(*base, all, 5);
    ok = true;
  }
  BackwardResult run(const plan::Plan &p, const Request &r) {
    const int64_t B = r.tensors.at("hidden_states").shape[0];
    RunOptions o;
    o.threads = 2;
    return runBackward(p, *w, r, loss.grads(B, 8, c.videoPatchDim(), 3, c.audio_in_channels), o);
  }
};

Plans &plans() {
  static Plans m;
  return m;
}

// Every output of `want` in `got` with the same bytes, and nothing more.
void expectSameBits(const BackwardResult &got, const BackwardResult &want) {
  EXPECT_TRUE(sameBytes(got.outputs.sample, want.outputs.sample));
  EXPECT_TRUE(sameBytes(got.outputs.audio_sample, want.outputs.audio_sample));
  ASSERT_EQ(got.inputGrads.size(), want.inputGrads.size());
  for (const auto &[n, t] : want.inputGrads) {
    ASSERT_TRUE(got.inputGrads.count(n)) << n;
    EXPECT_TRUE(sameBytes(got.inputGrads.at(n), t)) << n;
  }
  ASSERT_EQ(got.weightGrads.size(), want.weightGrads.size());
  for (const auto &[n, t] : want.weightGrads) {
    ASSERT_TRUE(got.weightGrads.count(n)) << n;
    EXPECT_TRUE(sameBytes(got.weightGrads.at(n), t)) << n;
  }
}

TEST(BackwardCheckpoint, OneSegmentPerBlockRerunningItsOwnOps) {
  if (!testtool::toolHasCompile()) GTEST_SKIP() << "this h3c has no compile command (built without MLIR)";
  Plans &m = plans();
  ASSERT_TRUE(m.ok);
  EXPECT_TRUE(m.all.backward()->checkpoints.empty());
  for (const plan::Plan *p : {&m.allCk, &m.loraCk}) {
    const auto &cs = p->backward()->checkpoints;
    std::set<std::string> want;
    for (int b = 0; b < m.c.num_refiner_layers; ++b) want.insert("token_refiner.refiner_blocks." + std::to_string(b));
    for (int b = 0; b < m.c.num_layers; ++b) want.insert("transformer_blocks." + std::to_string(b));
    std::set<std::string> got;
    for (const plan::Checkpoint &c : cs) {
      got.insert(c.segment);
      for (size_t k : c.recompute) {
        const plan::Op &op = p->forward().ops[k];
        if (!op.nodes.empty()) {
          EXPECT_EQ(plan::blockOf(op.nodes[0]), c.segment) << op.where;
        }
      }
      EXPECT_FALSE(c.kept.empty()) << c.segment;
      EXPECT_LE(c.before, c.last) << c.segment;
    }
    EXPECT_EQ(got, want);
    // The report: the timeline's peak is lower with the segments (S = 256 rows of the compile's report).
    EXPECT_LT(p->stats.at("backward_peak_live_bytes_checkpointed"), p->stats.at("backward_peak_live_bytes"));
  }
  // Without segments the timeline is h3-plan-buffers' (its report counts the same values, the same lives).
  EXPECT_EQ(m.all.stats.at("backward_peak_live_bytes"), m.all.stats.at("peak_live_bytes"));
}

TEST(BackwardCheckpoint, GradientsByteEqualToTheUncheckpointedPlanWithLessLiveMemory) {
  if (!testtool::toolHasCompile()) GTEST_SKIP() << "this h3c has no compile command (built without MLIR)";
  Plans &m = plans();
  ASSERT_TRUE(m.ok);
  for (const Request &r : {tinyRequest(m.c, 1, false), tinyRequest(m.c, 2, true)}) {
    const BackwardResult a = m.run(m.all, r), ack = m.run(m.allCk, r);
    expectSameBits(ack, a);
    const BackwardResult l = m.run(m.lora, r), lck = m.run(m.loraCk, r);
    expectSameBits(lck, l);
    EXPECT_EQ(lck.weightGrads.size(), 48u);  // the adapter slots only
    std::printf("peak activation bytes, all parameters: %lld, checkpointed %lld; --trainable lora: %lld, checkpointed %lld\n",
                (long long)a.peakActivationBytes, (long long)ack.peakActivationBytes, (long long)l.peakActivationBytes,
                (long long)lck.peakActivationBytes);
    EXPECT_LT(ack.peakActivationBytes, a.peakActivationBytes);
    EXPECT_LT(lck.peakActivationBytes, l.peakActivationBytes);
  }
}

// The segments' ops of a kind (attention by default) that the recompute reruns, by segment name.
std::map<std::string, int> rerunAttention(const plan::Plan &p, plan::OpKind kind = plan::OpKind::Attention) {
  std::map<std::string, int> n;
  for (const plan::Checkpoint &c : p.backward()->checkpoints) {
    n[c.segment] = 0;
    for (size_t k : c.recompute) n[c.segment] += p.forward().ops[k].kind == kind;
  }
  return n;
}

// Selective recompute (`--keep attention`): the forward keeps every block's attention output, so no segment reruns
// an attention op and the output is what the rerun to_out reads from outside (kept); the cap of one block's output
// keeps it in the last block only; a cap below that keeps nothing (the plan's segments are --checkpoint's own).
TEST(BackwardCheckpoint, KeepAttentionLeavesItOutOfTheRecomputeWithinTheCap) {
  if (!testtool::toolHasCompile()) GTEST_SKIP() << "this h3c has no compile command (built without MLIR)";
  Plans &m = plans();
  ASSERT_TRUE(m.ok);
  const std::map<std::string, int> plain = rerunAttention(m.allCk), keep = rerunAttention(m.allKeep);
  ASSERT_EQ(plain.size(), size_t(m.c.num_refiner_layers + m.c.num_layers));
  ASSERT_EQ(keep.size(), plain.size());  // every segment still reruns its other ops
  for (const auto &[seg, n] : plain) {
    EXPECT_EQ(n, 1) << seg;
    EXPECT_EQ(keep.at(seg), 0) << seg;
  }
  for (const plan::Checkpoint &c : m.allKeep.backward()->checkpoints) {
    int keptAttention = 0;
    for (const std::string &v : c.kept)
      for (size_t k = c.first; k < c.end; ++k)
        keptAttention += m.allKeep.forward().ops[k].kind == plan::OpKind::Attention && m.allKeep.forward().ops[k].out[0] == v;
    EXPECT_EQ(keptAttention, 1) << c.segment;
  }
  const std::string last = "transformer_blocks." + std::to_string(m.c.num_layers - 1);
  for (const auto &[seg, n] : rerunAttention(m.loraKeepLast)) EXPECT_EQ(n, seg == last ? 0 : 1) << seg;
  for (const auto &[seg, n] : rerunAttention(m.loraKeepNone)) EXPECT_EQ(n, 1) << seg;
  // The cap applies op by op: with the adaLN tables, the last block keeps its attention output and every transformer
  // block its tables (the checkpointed plan reruns one a block).
  for (const auto &[seg, n] : rerunAttention(m.loraKeepTables)) EXPECT_EQ(n, seg == last ? 0 : 1) << seg;
  int tablesRerun = 0, tablesCk = 0;
  for (const auto &[seg, n] : rerunAttention(m.loraKeepTables, plan::OpKind::AdalnTable)) tablesRerun += n;
  for (const auto &[seg, n] : rerunAttention(m.loraCk, plan::OpKind::AdalnTable)) tablesCk += n;
  EXPECT_EQ(tablesRerun, 0);
  EXPECT_EQ(tablesCk, int(m.c.num_layers));
  // `--keep all` keeps whole blocks: a cap below one block's values leaves every segment as --checkpoint made it.
  const auto &capped = m.loraKeepAllCap.backward()->checkpoints, &ckSegs = m.loraCk.backward()->checkpoints;
  ASSERT_EQ(capped.size(), ckSegs.size());
  for (size_t s = 0; s < capped.size(); ++s) EXPECT_EQ(capped[s].recompute, ckSegs[s].recompute) << capped[s].segment;
  // The report: more live bytes than the checkpointed plan's, fewer than without segments.
  const auto &s = m.allKeep.stats, &ck = m.allCk.stats;
  EXPECT_GT(s.at("backward_peak_live_bytes_checkpointed"), ck.at("backward_peak_live_bytes_checkpointed"));
  EXPECT_LT(s.at("backward_peak_live_bytes_checkpointed"), ck.at("backward_peak_live_bytes"));
}

// The kept values are the forward's own: outputs and gradients byte-equal to the plan without segments, and the
// peak activation bytes between the checkpointed plan's and those of the plan without segments.
TEST(BackwardCheckpoint, KeepAttentionGradientsByteEqualToTheUncheckpointedPlan) {
  if (!testtool::toolHasCompile()) GTEST_SKIP() << "this h3c has no compile command (built without MLIR)";
  Plans &m = plans();
  ASSERT_TRUE(m.ok);
  const Request r = tinyRequest(m.c, 2, true);
  const BackwardResult a = m.run(m.all, r), ack = m.run(m.allCk, r), akeep = m.run(m.allKeep, r);
  expectSameBits(akeep, a);
  EXPECT_GT(akeep.peakActivationBytes, ack.peakActivationBytes);
  EXPECT_LT(akeep.peakActivationBytes, a.peakActivationBytes);
  const BackwardResult l = m.run(m.lora, r);
  expectSameBits(m.run(m.loraKeepLast, r), l);
  expectSameBits(m.run(m.loraKeepTables, r), l);
}

} // namespace backward_checkpoint_test
