// The backward's gradient kernels on the GPU against the CPU reference, op by op on the same inputs (GpuBackward*):
// the CPU reference runs the tiny `--backward` plan (runCpuBackward, docs/contract.md section 14) and, after each
// gradient op, the op's kernel runs on the device on exactly the values the CPU op read (uploaded in their plan
// dtypes) and the synthetic weights; every output must be byte-equal to the CPU's, except attention_grad's, whose
// ex2 / lg2 are the hardware's approximations (the CPU's exp2 / log2 differ by an ulp or so): those within a relative
// error of 1e-4. Then the whole backward on the GPU executor: two runs byte-equal, and every gradient within 1e-2 of
// the CPU's (attention's differences travel upstream). Then the same plans compiled with `--checkpoint blocks`
// (GpuBackwardCheckpoint): the executor's outputs and gradients byte-equal to the unsegmented plan's, in an arena of
// exactly the checkpointed plan's slots. Needs the plans compiled elsewhere ($H3C_PLANS/tiny-backward, and
// tiny-backward-ckpt, tiny-backward-lora(-ckpt): scripts/gpu-plans.sh); skips without them or without a GPU.
#include "h3c/plan/io.h"
#include "h3c/runtime/backward.h"
#include "h3c/runtime/cuda/driver.h"
#include "h3c/runtime/cuda/kernel_runner.h"
#include "h3c/runtime/request.h"
#include "h3c/runtime/weights.h"
#include "h3c/support/dtype.h"
#include "h3c/support/error.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace hc = h3c::runtime::cuda;
namespace plan = h3c::plan;
using namespace h3c::rt;
using h3c::DType;

namespace {

std::filesystem::path planDir(const std::string &name = "tiny-backward") {
  const char *p = std::getenv("H3C_PLANS");
  return std::filesystem::path(p ? p : "carry/plans") / name;
}

// A host value as the device holds it in its plan dtype (bf16 values are exact in their floats).
std::vector<unsigned char> deviceBytes(const HostValue &h, DType dt) {
  std::vector<unsigned char> b;
  if (dt == DType::I64) {
    b.resize(h.i.size() * 8);
    std::memcpy(b.data(), h.i.data(), b.size());
  } else if (dt == DType::F32) {
    b.resize(h.f.size() * 4);
    std::memcpy(b.data(), h.f.data(), b.size());
  } else {
    b.resize(h.f.size() * 2);
    for (size_t i = 0; i < h.f.size(); ++i) {
      const uint16_t v = h3c::floatToBf16(h.f[i]);
      std::memcpy(&b[2 * i], &v, 2);
    }
  }
  return b;
}

// A two-timestep request of text, audio and video (T, H, W) rows: {text, audio, T, H, W}.
Request tinyRequest(const h3c::h3::Config &c, std::array<int64_t, 5> rows, int64_t batch, uint64_t seed) {
  RequestShape sh;
  sh.text = rows[0];
  sh.audio = rows[1];
  sh.videoT = rows[2];
  sh.videoH = rows[3];
  sh.videoW = rows[4];
  sh.batch = batch;
  sh.timesteps = 2;
  return makeRequest(c, sh, seed);
}

OutputGrads lossGrads(const CanonicalRequest &q, const h3c::h3::Config &c) {
  std::mt19937_64 g(5);
  std::normal_distribution<float> n;
  auto make = [&](int64_t rows, int64_t cols) {
    std::vector<float> v(size_t(q.B * rows * cols));
    for (float &x : v) x = n(g);
    return Tensor::fromFloats(DType::F32, {q.B, rows, cols}, v.data());
  };
  OutputGrads d;
  d.sample = make(q.Nv, c.videoPatchDim());
  d.audioSample = make(q.Na, c.audio_in_channels);
  return d;
}

double relFrob(const std::vector<float> &ref, const std::vector<float> &got) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

} // namespace

TEST(GpuBackward, EveryGradientKernelEqualsTheCpuReferenceOnItsInputs) {
  std::string why;
  if (!hc::driverAvailable(&why)) GTEST_SKIP() << "no GPU: " << why;
  if (!std::filesystem::exists(planDir() / "plan.json")) GTEST_SKIP() << "no plan at " << planDir();
  const plan::Plan p = plan::loadPlan(planDir());
  auto weights = makeSyntheticWeights(p.config, 7);
  const Request r = tinyRequest(p.config, {5, 4, 2, 2, 3}, 2, 3);
  const CanonicalRequest q = canonicalize(r, p.config);
  const plan::Extents ext = q.extents();
  hc::KernelRunner runner;
  std::map<std::string, hc::DeviceBuffer> w;  // the weights a gradient op reads, by name
  std::map<std::string, std::vector<int>> failures;
  int checked = 0;
  auto observe = [&](const plan::Op &op, const ValueMap &vals) {
    std::vector<hc::DeviceBuffer> in, out;
    for (const auto &n : op.in) {
      const std::vector<unsigned char> b = deviceBytes(vals.at(n), p.value(n).dtype);
      in.emplace_back(std::max<size_t>(b.size(), 4));
      if (!b.empty()) in.back().upload(b.data(), b.size());
    }
    for (const auto &n : op.out) out.emplace_back(std::max<size_t>(vals.at(n).f.size() * 4, 4));
    for (const auto *names : {&op.weights, &op.biases})
      for (const auto &n : *names)
        if (!w.count(n)) {
          const Tensor t = weights->load(n);
          w[n] = hc::DeviceBuffer(t.bytes.size());
          w[n].upload(t.bytes.data(), t.bytes.size());
        }
    runner.launch(runner.load(p.kernel(op)), ext, [&](plan::OperandRole role, int64_t i) -> CUdeviceptr {
      switch (role) {
      case plan::OperandRole::In: return in.at(size_t(i)).get();
      case plan::OperandRole::Out: return out.at(size_t(i)).get();
      case plan::OperandRole::Weight: return w.at(op.weights.at(size_t(i))).get();
      case plan::OperandRole::Bias: return w.at(op.biases.at(size_t(i))).get();
      }
      return 0;
    });
    hc::check(hc::driver().cuCtxSynchronize(), "running " + op.where);
    for (size_t k = 0; k < op.out.size(); ++k) {
      const std::vector<float> &want = vals.at(op.out[k]).f;
      std::vector<float> got(want.size());
      if (!got.empty()) out[k].download(got.data(), got.size() * 4);
      ++checked;
      if (op.kind == plan::OpKind::AttentionGrad) {
        const double e = relFrob(want, got);
        std::printf("%s %s attention_grad output %zu: rel_frob %.3e (bound 1e-4)\n", e <= 1e-4 ? "PASS" : "FAIL",
                    op.where.c_str(), k, e);
        if (!(e <= 1e-4)) failures[plan::opKindName(op.kind)].push_back(int(op.index));
      } else if (std::memcmp(want.data(), got.data(), want.size() * 4) != 0) {
        size_t at = 0;
        while (at < want.size() && std::memcmp(&want[at], &got[at], 4) == 0) ++at;
        std::printf("FAIL %s %s output %zu (%s): first difference at %zu of %zu: cpu %.9g gpu %.9g\n",
                    op.where.c_str(), plan::opKindName(op.kind), k, op.out[k].c_str(), at, want.size(), want[at],
                    got[at]);
        failures[plan::opKindName(op.kind)].push_back(int(op.index));
      }
    }
  };
  runCpuBackward(p, *weights, q, lossGrads(q, p.config), 0, observe);
  for (const auto &[kind, ops] : failures)
    ADD_FAILURE() << kind << ": " << ops.size() << " ops differ from the CPU reference (first: backward op "
                  << ops.front() << ")";
  std::printf("%s every gradient kernel of the tiny backward (%d outputs) == the CPU reference on its inputs "
              "(attention_grad within 1e-4)\n", failures.empty() ? "PASS" : "FAIL", checked);
  EXPECT_GT(checked, 100);
}

TEST(GpuBackward, TheExecutorsBackwardRepeatsAndFollowsTheCpu) {
  std::string why;
  if (!hc::driverAvailable(&why)) GTEST_SKIP() << "no GPU: " << why;
  if (!std::filesystem::exists(planDir() / "plan.json")) GTEST_SKIP() << "no plan at " << planDir();
  const plan::Plan p = plan::loadPlan(planDir());
  auto weights = makeSyntheticWeights(p.config, 7);
  const Request r = tinyRequest(p.config, {6, 5, 2, 3, 4}, 1, 9);
  const CanonicalRequest q = canonicalize(r, p.config);
  const OutputGrads dy = lossGrads(q, p.config);
  RunOptions o;
  o.device = "gpu";
  const BackwardResult g1 = runBackward(p, *weights, r, dy, o), g2 = runBackward(p, *weights, r, dy, o);
  const BackwardResult c = runCpuBackward(p, *weights, q, dy, 0);
  bool same = true, near = true;
  double worst = -1;
  std::string worstName;
  auto compare = [&](const std::map<std::string, Tensor> &a, const std::map<std::string, Tensor> &b,
                     const std::map<std::string, Tensor> &ref) {
    ASSERT_EQ(a.size(), ref.size());
    for (const auto &[n, t] : ref) {
      same &= a.at(n).bytes == b.at(n).bytes;
      const double e = relFrob(t.toFloats(), a.at(n).toFloats());
      if (!(e <= worst)) {  // (a NaN is the worst)
        worst = e;
        worstName = n;
      }
      near &= e <= 1e-2;
    }
  };
  compare(g1.inputGrads, g2.inputGrads, c.inputGrads);
  compare(g1.weightGrads, g2.weightGrads, c.weightGrads);
  std::printf("%s two GPU backwards byte-equal (%zu gradients)\n", same ? "PASS" : "FAIL",
              g1.inputGrads.size() + g1.weightGrads.size());
  std::printf("%s GPU backward within 1e-2 of the CPU reference (worst %s: %.3e)\n", near ? "PASS" : "FAIL",
              worstName.c_str(), worst);
  EXPECT_TRUE(same);
  EXPECT_TRUE(near);
}

namespace {

// The arena the GPU executor lays out for a plan's backward: each slot its own region of its bytes at the request's
// extents (bytes per row x rows x B, plus fixed bytes), rounded up to 256 bytes.
int64_t plannedArena(const plan::Plan &p, const CanonicalRequest &q) {
  const plan::Extents e = q.extents();
  int64_t total = 0;
  for (const plan::Slot &s : p.slots) {
    int64_t b = s.fixedBytes;
    for (const auto &[dom, bpr] : s.bytesPerRow) b += bpr * e.rows(dom) * q.B;
    total += (std::max<int64_t>(b, 1) + 255) / 256 * 256;
  }
  return total;
}

} // namespace

// A checkpointed plan (docs/contract.md section 14) runs the same kernels on the same operands as the plan without
// segments, the recompute's included: every output and gradient byte-equal; and the executor's arena is the
// checkpointed plan's slot table, smaller than the whole-life one.
TEST(GpuBackwardCheckpoint, GradientsByteEqualToTheUnsegmentedPlanInThePlannedArena) {
  std::string why;
  if (!hc::driverAvailable(&why)) GTEST_SKIP() << "no GPU: " << why;
  int pairs = 0;
  for (const char *base : {"tiny-backward", "tiny-backward-lora"}) {
    const std::string ckName = std::string(base) + "-ckpt";
    if (!std::filesystem::exists(planDir(base) / "plan.json") || !std::filesystem::exists(planDir(ckName) / "plan.json")) {
      std::printf("SKIP %s / %s: no plans at %s\n", base, ckName.c_str(), planDir(base).parent_path().c_str());
      continue;
    }
    ++pairs;
    const plan::Plan p = plan::loadPlan(planDir(base)), pc = plan::loadPlan(planDir(ckName));
    ASSERT_TRUE(p.backward()->checkpoints.empty()) << base;
    ASSERT_FALSE(pc.backward()->checkpoints.empty()) << ckName;
    auto weights = makeSyntheticWeights(p.config, 7);
    for (const Request &r : {tinyRequest(p.config, {6, 5, 2, 3, 4}, 1, 9), tinyRequest(p.config, {5, 4, 2, 2, 3}, 2, 3)}) {
      const CanonicalRequest q = canonicalize(r, p.config);
      const OutputGrads dy = lossGrads(q, p.config);
      RunOptions o;
      o.device = "gpu";
      const BackwardResult a = runBackward(p, *weights, r, dy, o), b = runBackward(pc, *weights, r, dy, o);
      bool same = a.outputs.sample.bytes == b.outputs.sample.bytes &&
                  a.outputs.audio_sample.bytes == b.outputs.audio_sample.bytes &&
                  a.inputGrads.size() == b.inputGrads.size() && a.weightGrads.size() == b.weightGrads.size();
      std::string first;
      for (const auto *m : {&a.inputGrads, &a.weightGrads})
        for (const auto &[n, t] : *m) {
          const auto &other = m == &a.inputGrads ? b.inputGrads : b.weightGrads;
          const bool eq = other.count(n) && other.at(n).bytes == t.bytes;
          if (!eq && first.empty()) first = n;
          same &= eq;
        }
      std::printf("%s %s B=%lld: outputs and %zu gradients byte-equal to %s's%s%s\n", same ? "PASS" : "FAIL",
                  ckName.c_str(), (long long)q.B, a.inputGrads.size() + a.weightGrads.size(), base,
                  first.empty() ? "" : ", first different: ", first.c_str());
      EXPECT_TRUE(same) << ckName << " " << first;
      const int64_t want = plannedArena(pc, q), wantWhole = plannedArena(p, q);
      const bool arenaOk = b.arenaBytes == want && a.arenaBytes == wantWhole && want < wantWhole;
      std::printf("%s %s B=%lld: arena %lld bytes, the plan's slots %lld (without segments %lld, the plan's %lld)\n",
                  arenaOk ? "PASS" : "FAIL", ckName.c_str(), (long long)q.B, (long long)b.arenaBytes,
                  (long long)want, (long long)a.arenaBytes, (long long)wantWhole);
      EXPECT_TRUE(arenaOk);
    }
  }
  if (!pairs) GTEST_SKIP() << "no checkpointed plans at " << planDir().parent_path();
}
