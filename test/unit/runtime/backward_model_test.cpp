// The plan's backward on the CPU reference (runtime/backward.h, docs/contract.md section 14) over `h3c compile
// --backward`'s tiny plan: the gradients of a scalar loss (the outputs against fixed random weights) agree with
// central differences of the independent fp64 model (fp64_reference.h) within a bound derived from bf16 rounding,
// for the inputs and tensors of every kind, and a wrong gradient would not; and the bitwise promises: two runs and
// two thread counts equal, a batch item's input gradients equal to its own run's, the token-row weight gradients of
// a batch equal to the F32 fold of its items' in batch order, a packed-row permutation changing no gradient bit.
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
namespace backward_model_test {

using backward_test::itemOf;
using backward_test::Loss;
using backward_test::relErr;
using backward_test::sameBytes;
using backward_test::tinyRequest;

struct Tiny {
  testtool::TempDir t{"h3c_backward_model"};
  h3::Config c = h3::namedConfig("tiny");
  std::unique_ptr<WeightSource> w = makeSyntheticWeights(c, 7);
  plan::Plan plan;
  Loss loss{size_t(8 * c.videoPatchDim()), size_t(3 * c.audio_in_channels), 5};
  bool ok = false;
  Tiny() {
    std::string out;
    if (testtool::runTool("fingerprint derive --config tiny -o " + t / "fp.json", &out) != 0 ||
        testtool::runTool("compile " + t / "fp.json --backward -o " + t / "plan", &out) != 0) {
      ADD_FAILURE() << out;
      return;
    }
    plan = plan::loadPlan(t / "plan");
    ok = true;
  }
  BackwardResult run(const Request &r, int threads = 2) {
    const int64_t B = r.tensors.at("hidden_states").shape[0];
    RunOptions o;
    o.threads = threads;
    return runBackward(plan, *w, r, loss.grads(B, 8, c.videoPatchDim(), 3, c.audio_in_channels), o);
  }
};

// One compiled plan for the file's tests (compiling is the tool's work, not what they test).
Tiny &tiny() {
  static Tiny m;
  return m;
}

TEST(BackwardModel, GradientsAgreeWithCentralDifferencesOfTheFp64Model) {
  if (!testtool::toolHasCompile()) GTEST_SKIP() << "this h3c has no compile command (built without MLIR)";
  Tiny &m = tiny();
  ASSERT_TRUE(m.ok);
  const Request r = tinyRequest(m.c, 1, false);
  const BackwardResult g = m.run(r);
  fp64ref::Ref ref{m.c, *m.w, {}};
  const double L0 = m.loss.of(ref.forward(r, 0));
  ASSERT_TRUE(std::isfinite(L0));
  // bf16 keeps 8 significant bits: every stored activation is off by up to 2^-9 relative, the weights are the same
  // bf16 values in both models, and the straight-through gradient of the rounded forward differs from the exact
  // gradient by such errors summed over the few ops of the tiny model's paths. 2^-4 (6 %) is 16 x one rounding of
  // the gradient vector: far below what a wrong gradient gives (checked below).
  const double tol = std::ldexp(1.0, -4);
  auto check = [&](const std::string &what, const std::vector<double> &h3c, const std::vector<double> &fd,
                   const std::vector<double> &wrong) {
    const double e = relErr(h3c, fd), ew = relErr(wrong, fd);
    EXPECT_LT(e, tol) << what << ": gradient relative error " << e;
    // The same comparison of a wrong gradient (each element's neighbour's) fails: the bound discriminates.
    EXPECT_GT(ew, tol) << what << ": a wrong gradient passes (" << ew << ")";
    std::printf("%-55s rel err %.4f (wrong %.3f)\n", what.c_str(), e, ew);
  };
  const std::vector<std::string> tensors = {
      "proj_in.weight", "proj_in.bias", "context_embedder.weight", "time_embedder.linear_1.weight",
      "time_embedder.linear_2.bias", "token_refiner.refiner_blocks.0.attn.to_v.weight",
      "token_refiner.refiner_blocks.1.norm1.weight", "token_refiner.final_norm.weight",
      "transformer_blocks.0.attn.to_q.weight", "transformer_blocks.1.ff.net.0.proj.weight",
      "transformer_blocks.0.attn.norm_k.weight", "transformer_blocks.1.norm2.weight",
      "transformer_blocks.0.adaln_proj.linear.weight", "transformer_blocks.1.adaln_proj.linear.bias",
      "norm_out.linear.weight", "norm_out.norm.weight", "proj_out.weight", "audio_proj_out.bias"};
  for (const std::string &name : tensors) {
    ASSERT_TRUE(g.weightGrads.count(name)) << name;
    const backward_test::Sampled d = backward_test::weightDifferences(ref, m.loss, r, name, g.weightGrads.at(name));
    check(name, d.got, d.fd, d.wrong);
  }
  // The activation inputs (F32 requests: a perturbation is the difference of the two stored floats).
  for (const char *name : {"hidden_states", "audio_hidden_states", "encoder_hidden_states"}) {
    const Tensor &gt = g.inputGrads.at(name);
    ASSERT_EQ(gt.shape, r.tensors.at(name).shape) << name;
    std::vector<double> h3c, fd, wrong;
    for (int64_t i : backward_test::picks(gt.numel())) {
      std::vector<float> x = r.tensors.at(name).toFloats();
      const float x0 = x[size_t(i)], xp = x0 + 0.01f, xm = x0 - 0.01f;
      Request rp = r, rm = r;
      x[size_t(i)] = xp;
      rp.tensors[name] = Tensor::fromFloats(DType::F32, gt.shape, x.data());
      x[size_t(i)] = xm;
      rm.tensors[name] = Tensor::fromFloats(DType::F32, gt.shape, x.data());
      fd.push_back((m.loss.of(ref.forward(rp, 0)) - m.loss.of(ref.forward(rm, 0))) / (double(xp) - double(xm)));
      h3c.push_back(gt.getFloat(i));
      wrong.push_back(gt.getFloat((i + 1) % gt.numel()));
    }
    check(std::string("@") + name, h3c, fd, wrong);
  }
}

TEST(BackwardModel, BitwiseRunsThreadsBatchAndPermutation) {
  if (!testtool::toolHasCompile()) GTEST_SKIP() << "this h3c has no compile command (built without MLIR)";
  Tiny &m = tiny();
  ASSERT_TRUE(m.ok);
  const Request batch = tinyRequest(m.c, 2, false);
  const BackwardResult g = m.run(batch, 2), again = m.run(batch, 1);
  ASSERT_EQ(g.weightGrads.size(), 62u);
  for (const auto &[n, t] : g.weightGrads) EXPECT_TRUE(sameBytes(t, again.weightGrads.at(n))) << n;
  for (const auto &[n, t] : g.inputGrads) EXPECT_TRUE(sameBytes(t, again.inputGrads.at(n))) << n;

  // Items: each item's input gradients are its own run's; a weight gradient summed over token rows is the F32 fold
  // of the items' in batch order. (The AdaLN tables' and the time embedder's gradients are functions of the tables'
  // summed gradients, rounded to bf16 on the way: they are no fold of the items' and are left out.)
  const BackwardResult i0 = m.run(itemOf(batch, 0)), i1 = m.run(itemOf(batch, 1));
  for (const auto &[n, t] : g.inputGrads) {
    const std::vector<float> all = t.toFloats(), a = i0.inputGrads.at(n).toFloats(), b = i1.inputGrads.at(n).toFloats();
    ASSERT_EQ(all.size(), a.size() + b.size()) << n;
    EXPECT_TRUE(std::equal(a.begin(), a.end(), all.begin())) << n;
    EXPECT_TRUE(std::equal(b.begin(), b.end(), all.begin() + long(a.size()))) << n;
  }
  size_t folded = 0;
  for (const auto &[n, t] : g.weightGrads) {
    if (n.find("adaln_proj") != std::string::npos || n.rfind("norm_out.linear", 0) == 0 ||
        n.rfind("time_embedder.", 0) == 0)
      continue;
    const std::vector<float> all = t.toFloats(), a = i0.weightGrads.at(n).toFloats(), b = i1.weightGrads.at(n).toFloats();
    bool same = true;
    for (size_t k = 0; k < all.size(); ++k) same &= all[k] == a[k] + b[k];
    EXPECT_TRUE(same) << n << " is not the fold of its items' gradients";
    ++folded;
  }
  EXPECT_EQ(folded, 62u - 2 * 2 - 2 - 4);  // every tensor but the 2 x 2 block tables, norm_out's and the time MLP's

  // A packed-row permutation (the same values, indices permuted to match) changes no gradient bit.
  const Request shuffled = tinyRequest(m.c, 2, true);
  ASSERT_TRUE(sameBytes(shuffled.tensors.at("hidden_states"), batch.tensors.at("hidden_states")));
  ASSERT_FALSE(sameBytes(shuffled.tensors.at("video_indices"), batch.tensors.at("video_indices")));
  const BackwardResult p = m.run(shuffled);
  for (const auto &[n, t] : g.weightGrads) EXPECT_TRUE(sameBytes(t, p.weightGrads.at(n))) << n;
  for (const auto &[n, t] : g.inputGrads) EXPECT_TRUE(sameBytes(t, p.inputGrads.at(n))) << n;
}

TEST(BackwardModel, RefusesPartialGpuBackwardsAndPlansWithoutABackward) {
  if (!testtool::toolHasCompile()) GTEST_SKIP() << "this h3c has no compile command (built without MLIR)";
  Tiny &m = tiny();
  ASSERT_TRUE(m.ok);
  const Request r = tinyRequest(m.c, 1, false);
  RunOptions o;
  o.device = "gpu";
  // Every gradient op of the plan has a kernel; one without is refused before anything runs, naming it.
  for (const plan::Op &op : m.plan.backward()->ops) EXPECT_TRUE(op.kernel.has_value()) << op.where;
  plan::Plan partial = m.plan;
  partial.functions.at("backward").ops.at(3).kernel.reset();
  try {
    runBackward(partial, *m.w, r, m.loss.grads(1, 8, m.c.videoPatchDim(), 3, m.c.audio_in_channels), o);
    ADD_FAILURE() << "ran a backward without kernels on the GPU";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("backward/ops/3/kernel: gradient op"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("has no gpu kernel"), std::string::npos) << e.what();
  }
  plan::Plan forwardOnly = m.plan;
  forwardOnly.functions.erase("backward");
  try {
    runBackward(forwardOnly, *m.w, r, m.loss.grads(1, 8, m.c.videoPatchDim(), 3, m.c.audio_in_channels), {});
    ADD_FAILURE() << "ran the backward of a plan without one";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("compile it with h3c compile --backward"), std::string::npos) << e.what();
  }
  // Output gradients of the wrong shape are refused, not read past.
  try {
    runBackward(m.plan, *m.w, r, m.loss.grads(2, 8, m.c.videoPatchDim(), 3, m.c.audio_in_channels), {});
    ADD_FAILURE() << "accepted a gradient of another shape";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("expected an F32 [1, "), std::string::npos) << e.what();
  }
  // Gradients left in device memory (DeviceGrads: the package's CUDA parameters) name tensors the plan trains, each
  // with an address, and need a GPU backward: refused before anything runs, naming the tensor.
  const std::string trained = m.plan.backward()->outputs.rbegin()->first.substr(5);
  ASSERT_NE(trained.rfind("@", 0), 0u) << trained;  // a weight's gradient ("grad:<tensor>"), not an input's
  const auto refusal = [&](const DeviceGrads &into) {
    try {
      runBackward(m.plan, *m.w, r, m.loss.grads(1, 8, m.c.videoPatchDim(), 3, m.c.audio_in_channels), {}, nullptr, 0,
                  &into);
    } catch (const Error &e) {
      return std::string(e.what());
    }
    return std::string("(ran)");
  };
  EXPECT_NE(refusal({{{"no.such.weight", 64}}, 0}).find("backward:no.such.weight: is not a tensor this plan trains"),
            std::string::npos);
  EXPECT_NE(refusal({{{"@hidden_states", 64}}, 0}).find("backward:@hidden_states: is not a tensor this plan trains"),
            std::string::npos);
  EXPECT_NE(refusal({{{trained, 0}}, 0}).find("backward:" + trained + ": has no device address"), std::string::npos);
  EXPECT_NE(refusal({{{trained, 64}}, 0}).find("need a GPU backward"), std::string::npos);
}

} // namespace backward_model_test
