// The backward of unmerged LoRA paths and of frozen tensors (docs/contract.md sections 13 and 14) on the CPU
// reference, over `h3c compile --backward --lora-rank 64` plans of the tiny config with random adapter slots: the
// adapters' gradients (and the base weights' and inputs' beside them) agree with central differences of the
// independent fp64 model with the low-rank term (fp64_reference.h) within the bound of backward_model_test.cpp, and
// a wrong gradient would not; they are bitwise the same over runs and thread counts, a batch's adapter gradients
// are the F32 fold of its items' in batch order, each item's input gradients its own run's, and a packed-row
// permutation changes no bit; plans compiled with --trainable lora or a glob give exactly the selected tensors'
// gradients, bit for bit those of the all-parameters plan.
#include "backward_test_util.h"
#include "fp64_reference.h"
#include "tool.h"

#include "h3c/plan/io.h"
#include "h3c/runtime/backward.h"
#include "h3c/support/error.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace h3c;
using namespace h3c::rt;

// (a named namespace holding the tests too: the unity build compiles a binary's test files as one translation
// unit, where anonymous namespaces would merge)
namespace backward_lora_test {

using backward_test::itemOf;
using backward_test::Loss;
using backward_test::relErr;
using backward_test::sameBytes;
using backward_test::tinyRequest;

// The tiny config's LoRA plans: all parameters, the adapters only (--trainable lora), and a glob; the weights are
// the synthetic ones with every adapter slot random (down std 0.1, up std 0.02: the low-rank term the size of the
// base linear's), held by an engine-style overlay.
struct Plans {
  testtool::TempDir t{"h3c_backward_lora"};
  h3::Config c = h3::namedConfig("tiny");
  std::unique_ptr<WeightSource> base = makeSyntheticWeights(c, 7);
  std::unique_ptr<OverlayWeights> w;
  plan::Plan all, lora, glob, temb;
  Loss loss{size_t(8 * c.videoPatchDim()), size_t(3 * c.audio_in_channels), 9};
  bool ok = false;
  Plans() {
    std::string out;
    const std::string fp = t / "fp.json";
    if (testtool::runTool("fingerprint derive --config tiny -o " + fp, &out) != 0 ||
        testtool::runTool("compile " + fp + " --backward --lora-rank 64 -o " + t / "all", &out) != 0 ||
        testtool::runTool("compile " + fp + " --backward --lora-rank 64 --trainable lora -o " + t / "lora", &out) != 0 ||
        testtool::runTool("compile " + fp + " --backward --lora-rank 64 --trainable '*.to_q.*' --trainable "
                          "'transformer_blocks.1.ff.net.2.lora_up' -o " + t / "glob", &out) != 0 ||
        testtool::runTool("compile " + fp + " --backward --lora-rank 64 --trainable 'time_embedder.*' -o " + t / "temb",
                          &out) != 0) {
      ADD_FAILURE() << out;
      return;
    }
    all = plan::loadPlan(t / "all");
    lora = plan::loadPlan(t / "lora");
    glob = plan::loadPlan(t / "glob");
    temb = plan::loadPlan(t / "temb");
    w = backward_test::randomAdapters(*base, all, 3);
    ok = true;
  }
  BackwardResult run(const plan::Plan &p, const Request &r, int threads = 2) {
    const int64_t B = r.tensors.at("hidden_states").shape[0];
    RunOptions o;
    o.threads = threads;
    return runBackward(p, *w, r, loss.grads(B, 8, c.videoPatchDim(), 3, c.audio_in_channels), o);
  }
};

Plans &plans() {
  static Plans m;
  return m;
}

TEST(BackwardLora, AdapterGradientsAgreeWithCentralDifferencesOfTheFp64Model) {
  if (!testtool::toolHasCompile()) GTEST_SKIP() << "this h3c has no compile command (built without MLIR)";
  Plans &m = plans();
  ASSERT_TRUE(m.ok);
  const Request r = tinyRequest(m.c, 1, false);
  const BackwardResult g = m.run(m.all, r);
  fp64ref::Ref ref{m.c, *m.w, {}};
  ASSERT_TRUE(std::isfinite(m.loss.of(ref.forward(r, 0))));
  // The bound of backward_model_test.cpp (2^-4: bf16 roundings of the activations, t among them, summed over the
  // tiny model's paths), and the same discrimination check.
  const double tol = std::ldexp(1.0, -4);
  // Adapter slots of every kind of targeted linear (q/k/v, to_out, fc1, fc2; blocks and refiner), both factors, and
  // base weights whose gradient flows through a LoRA path's input gradient.
  const std::vector<std::string> tensors = {
      "transformer_blocks.0.attn.to_q.lora_down", "transformer_blocks.0.attn.to_q.lora_up",
      "transformer_blocks.1.attn.to_v.lora_down", "transformer_blocks.0.attn.to_out.0.lora_up",
      "transformer_blocks.1.ff.net.0.proj.lora_down", "transformer_blocks.0.ff.net.2.lora_up",
      "transformer_blocks.1.ff.net.2.lora_down", "token_refiner.refiner_blocks.0.attn.to_k.lora_up",
      "token_refiner.refiner_blocks.1.ff.net.0.proj.lora_down", "transformer_blocks.0.attn.to_q.weight",
      "transformer_blocks.0.norm1.weight", "proj_in.weight", "context_embedder.weight"};
  for (const std::string &name : tensors) {
    ASSERT_TRUE(g.weightGrads.count(name)) << name;
    const backward_test::Sampled d = backward_test::weightDifferences(ref, m.loss, r, name, g.weightGrads.at(name));
    const double e = relErr(d.got, d.fd), ew = relErr(d.wrong, d.fd);
    EXPECT_LT(e, tol) << name << ": gradient relative error " << e;
    EXPECT_GT(ew, tol) << name << ": a wrong gradient passes (" << ew << ")";
    std::printf("%-55s rel err %.4f (wrong %.3f)\n", name.c_str(), e, ew);
  }
  // The adapters matter: with their slots zero the same loss has another gradient of the base weights.
  const Tensor &withLora = g.weightGrads.at("transformer_blocks.0.attn.to_q.weight");
  OverlayWeights zero(*m.base);
  zero.holdAdapterSlots(m.all);
  RunOptions o;
  const BackwardResult z = runBackward(m.all, zero, r, m.loss.grads(1, 8, m.c.videoPatchDim(), 3, m.c.audio_in_channels), o);
  EXPECT_FALSE(sameBytes(withLora, z.weightGrads.at("transformer_blocks.0.attn.to_q.weight")));
}

TEST(BackwardLora, BitwiseRunsThreadsBatchAndPermutation) {
  if (!testtool::toolHasCompile()) GTEST_SKIP() << "this h3c has no compile command (built without MLIR)";
  Plans &m = plans();
  ASSERT_TRUE(m.ok);
  const Request batch = tinyRequest(m.c, 2, false);
  const BackwardResult g = m.run(m.all, batch, 2), again = m.run(m.all, batch, 1);
  size_t adapters = 0;
  for (const auto &[n, t] : g.weightGrads) {
    EXPECT_TRUE(sameBytes(t, again.weightGrads.at(n))) << n;
    adapters += m.all.weightTensor(n).adapter;
  }
  EXPECT_EQ(adapters, 48u);
  for (const auto &[n, t] : g.inputGrads) EXPECT_TRUE(sameBytes(t, again.inputGrads.at(n))) << n;
  // Items: input gradients are the items' own runs'; an adapter's gradient (a sum over token rows) is the F32 fold of
  // the items' in batch order.
  const BackwardResult i0 = m.run(m.all, itemOf(batch, 0)), i1 = m.run(m.all, itemOf(batch, 1));
  for (const auto &[n, t] : g.inputGrads) {
    const std::vector<float> all = t.toFloats(), a = i0.inputGrads.at(n).toFloats(), b = i1.inputGrads.at(n).toFloats();
    ASSERT_EQ(all.size(), a.size() + b.size()) << n;
    EXPECT_TRUE(std::equal(a.begin(), a.end(), all.begin())) << n;
    EXPECT_TRUE(std::equal(b.begin(), b.end(), all.begin() + long(a.size()))) << n;
  }
  for (const auto &[n, t] : g.weightGrads) {
    if (!m.all.weightTensor(n).adapter) continue;
    const std::vector<float> all = t.toFloats(), a = i0.weightGrads.at(n).toFloats(), b = i1.weightGrads.at(n).toFloats();
    bool same = true, nonzero = false;
    for (size_t k = 0; k < all.size(); ++k) {
      same &= all[k] == a[k] + b[k];
      nonzero |= all[k] != 0;
    }
    EXPECT_TRUE(same) << n << " is not the fold of its items' gradients";
    EXPECT_TRUE(nonzero) << n << " is zero";
  }
  // A packed-row permutation changes no bit.
  const Request shuffled = tinyRequest(m.c, 2, true);
  ASSERT_FALSE(sameBytes(shuffled.tensors.at("video_indices"), batch.tensors.at("video_indices")));
  const BackwardResult p = m.run(m.all, shuffled);
  for (const auto &[n, t] : g.weightGrads) EXPECT_TRUE(sameBytes(t, p.weightGrads.at(n))) << n;
  for (const auto &[n, t] : g.inputGrads) EXPECT_TRUE(sameBytes(t, p.inputGrads.at(n))) << n;
}

TEST(BackwardLora, FrozenPlansGiveTheSelectedGradientsBitForBit) {
  if (!testtool::toolHasCompile()) GTEST_SKIP() << "this h3c has no compile command (built without MLIR)";
  Plans &m = plans();
  ASSERT_TRUE(m.ok);
  const Request batch = tinyRequest(m.c, 2, false);
  const BackwardResult all = m.run(m.all, batch);
  for (const plan::Plan *p : {&m.lora, &m.glob, &m.temb}) {
    const BackwardResult f = m.run(*p, batch);
    const std::vector<std::string> &pats = p->backward()->trainable;
    size_t want = 0;
    for (const auto &[n, t] : all.weightGrads) {
      const bool trained = p == &m.lora   ? m.all.weightTensor(n).adapter
                           : p == &m.temb ? n.rfind("time_embedder.", 0) == 0
                                          : (n.find(".to_q.") != std::string::npos ||
                                             n == "transformer_blocks.1.ff.net.2.lora_up");
      want += trained;
      EXPECT_EQ(f.weightGrads.count(n), size_t(trained)) << n << " (" << pats[0] << ")";
      if (trained && f.weightGrads.count(n)) {
        EXPECT_TRUE(sameBytes(t, f.weightGrads.at(n))) << n;
      }
    }
    EXPECT_EQ(f.weightGrads.size(), want);
    for (const auto &[n, t] : all.inputGrads) EXPECT_TRUE(sameBytes(t, f.inputGrads.at(n))) << n;
  }
  EXPECT_EQ(m.run(m.lora, batch).weightGrads.size(), 48u);
  EXPECT_EQ(m.run(m.glob, batch).weightGrads.size(), 4u * 3 + 1);  // to_q's weight, down, up in 4 blocks, + one
  // The time embedder trained, the AdaLN tables it feeds frozen: their gradient ops stay (temb's gradient flows
  // through them) and emit no gradient of their own tensors.
  EXPECT_EQ(m.run(m.temb, batch).weightGrads.size(), 4u);
  size_t tables = 0;
  for (const plan::Op &op : m.temb.backward()->ops)
    if (op.kind == plan::OpKind::AdalnTableGrad) {
      ++tables;
      EXPECT_TRUE(op.grads.empty()) << op.where;
      EXPECT_EQ(op.out.size(), 1u) << op.where;
    }
  EXPECT_EQ(tables, 3u);  // the 2 blocks' and norm_out's
}

} // namespace backward_lora_test
