// MiniMaxH3Scheduler against diffusers' formulas, recomputed here independently: every F32 operation is evaluated in
// double and rounded to float once (exact for products of floats, and innocuous double rounding for + - * / since
// double has more than 2*24+2 bits), instead of the float arithmetic and fmaf that sampler.cpp uses.
#include "h3c/support/error.h"
#include "h3c/support/synth_rng.h"
#include "h3c/trajectory/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>
#include <vector>

using namespace h3c;

namespace {

float r32(double x) { return static_cast<float>(x); }

bool sameBits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

// torch.linspace(1, 0, n) in F32: step = fl(-1/(n-1)); first half fl(1 + step*i), second half fl(0 - step*(n-1-i)),
// each with one rounding of the exact value.
std::vector<float> expectedLinspace(int64_t n) {
  const float step = r32(-1.0 / double(n - 1));
  std::vector<float> out;
  for (int64_t i = 0; i < n; ++i)
    out.push_back(i < n / 2 ? r32(1.0 + double(step) * double(i)) : r32(-(double(step) * double(n - 1 - i))));
  return out;
}

std::vector<float> expectedSigmas(int64_t n, double shift) {
  const float s = r32(shift), sm1 = r32(shift - 1.0);
  std::vector<float> out;
  for (float b : expectedLinspace(n)) {
    const float num = r32(double(s) * double(b));
    const float den = r32(1.0 + double(r32(double(sm1) * double(b))));
    const float sigma = r32(double(num) / double(den));
    if (out.empty() || out.back() != sigma)
      out.push_back(sigma);
  }
  return out;
}

} // namespace

TEST(Sampler, LinspaceMatchesTorchCpuKernel) {
  for (int64_t n : {2, 3, 10, 11, 50, 51, 1000}) {
    auto got = rt::linspaceF32(1.0f, 0.0f, n);
    auto exp = expectedLinspace(n);
    ASSERT_EQ(got.size(), size_t(n));
    EXPECT_EQ(got.front(), 1.0f);
    EXPECT_EQ(got.back(), 0.0f);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_TRUE(sameBits(got[size_t(i)], exp[size_t(i)])) << "n=" << n << " i=" << i;
  }
  // The fused form matters: an unfused evaluation (product rounded first) differs in some elements.
  int differ = 0;
  for (int64_t n : {10, 50}) {
    const float step = -1.0f / float(n - 1);
    auto got = rt::linspaceF32(1.0f, 0.0f, n);
    for (int64_t i = 0; i < n / 2; ++i) {
      volatile float p = step * float(i);
      differ += got[size_t(i)] != 1.0f + p;
    }
  }
  EXPECT_GT(differ, 0);
}

TEST(Sampler, SigmaGridsEqualTheFormula) {
  for (double shift : {12.0, 3.0})
    for (int64_t n : {2, 10, 50}) {
      rt::MiniMaxH3Scheduler s(shift);
      s.setTimesteps(n);
      auto exp = expectedSigmas(n, shift);
      ASSERT_EQ(s.sigmas().size(), exp.size()) << "shift " << shift << " n " << n;
      EXPECT_EQ(s.sigmas().size(), size_t(n));  // no collisions at these sizes
      for (size_t i = 0; i < exp.size(); ++i) {
        EXPECT_TRUE(sameBits(s.sigmas()[i], exp[i])) << "shift " << shift << " n " << n << " i " << i;
        // And the real-valued formula, within F32 rounding.
        double b = 1.0 - double(i) / double(n - 1);
        EXPECT_NEAR(s.sigmas()[i], shift * b / (1 + (shift - 1) * b), 4e-7);
      }
      EXPECT_EQ(s.sigmas().front(), 1.0f);
      EXPECT_EQ(s.sigmas().back(), 0.0f);
      ASSERT_EQ(s.numSteps(), n - 1);
      for (int64_t i = 0; i < s.numSteps(); ++i) {
        EXPECT_TRUE(sameBits(s.timesteps()[size_t(i)], r32(1.0 - double(exp[size_t(i)]))));
        if (i > 0)
          EXPECT_LT(s.sigmas()[size_t(i)], s.sigmas()[size_t(i - 1)]);
      }
    }
  // Known values: two points are [1, 0] with one evaluation at t = 0 (pure noise).
  rt::MiniMaxH3Scheduler two(12.0);
  two.setTimesteps(2);
  EXPECT_EQ(two.sigmas(), (std::vector<float>{1.0f, 0.0f}));
  EXPECT_EQ(two.timesteps(), (std::vector<float>{0.0f}));
  // Shift 12 pushes the grid towards 1: the midpoint 0.5 maps to 12*0.5/(1+11*0.5) = 6/6.5.
  rt::MiniMaxH3Scheduler three(12.0);
  three.setTimesteps(3);
  EXPECT_FLOAT_EQ(three.sigmas()[1], float(6.0 / 6.5));
}

TEST(Sampler, ConsecutiveDuplicatesCollapse) {
  // A huge shift and a fine grid: near sigma = 1 neighbouring points round to the same float.
  rt::MiniMaxH3Scheduler s(1000.0);
  s.setTimesteps(200000);
  auto exp = expectedSigmas(200000, 1000.0);
  EXPECT_LT(exp.size(), 200000u);
  ASSERT_EQ(s.sigmas().size(), exp.size());
  for (size_t i = 0; i < exp.size(); ++i)
    ASSERT_TRUE(sameBits(s.sigmas()[i], exp[i])) << i;
  // Only *consecutive* duplicates go (torch.unique_consecutive): F32 rounding can even step back up by an ulp here,
  // which diffusers keeps, and so does h3c.
  for (size_t i = 1; i < exp.size(); ++i)
    ASSERT_NE(s.sigmas()[i], s.sigmas()[i - 1]);
  EXPECT_EQ(s.numSteps(), int64_t(exp.size()) - 1);
}

TEST(Sampler, EulerStepEqualsDiffusersUpdate) {
  rt::MiniMaxH3Scheduler s(12.0);
  s.setTimesteps(10);
  std::vector<float> x0 = {0.5f, -1.25f, 3.0f, 1e-3f, -7.5f, 0.0f}, v = {0.1f, 2.0f, -0.7f, 5.0f, 0.33f, -1.0f};
  for (int64_t i = 0; i < s.numSteps(); ++i) {
    std::vector<float> x = x0;
    s.step(i, v.data(), x.data(), x.size());
    const float t = s.timesteps()[size_t(i)];
    const float sigmaT = r32(1.0 - double(t));
    const float r = r32(double(s.sigmas()[size_t(i) + 1]) / double(s.sigmas()[size_t(i)]));
    const float omr = r32(1.0 - double(r));
    for (size_t k = 0; k < x.size(); ++k) {
      const float den = r32(double(x0[k]) + double(r32(double(sigmaT) * double(v[k]))));
      const float expect = r32(double(r32(double(r) * double(x0[k]))) + double(r32(double(omr) * double(den))));
      EXPECT_TRUE(sameBits(x[k], expect)) << "step " << i << " k " << k << ": " << x[k] << " vs " << expect;
    }
  }
  // The last step (sigma_next = 0) lands exactly on the denoised estimate x + (1 - t) * v.
  std::vector<float> x = x0;
  const int64_t last = s.numSteps() - 1;
  s.step(last, v.data(), x.data(), x.size());
  const float sigmaT = 1.0f - s.timesteps()[size_t(last)];
  for (size_t k = 0; k < x.size(); ++k)
    EXPECT_EQ(x[k], x0[k] + sigmaT * v[k]);
  EXPECT_THROW(s.step(s.numSteps(), v.data(), x.data(), x.size()), Error);
}

TEST(Sampler, RectifiedFlowReachesTheData) {
  // x_t = (1 - sigma) * data + sigma * noise has the data-ward velocity v = data - noise; the sampler integrates it
  // exactly (up to F32 rounding), for both shifts.
  for (double shift : {12.0, 3.0}) {
    rt::MiniMaxH3Scheduler s(shift);
    s.setTimesteps(50);
    const std::vector<float> data = {0.3f, -0.8f, 1.7f, 0.0f}, noise = {1.1f, 0.4f, -2.0f, 0.9f};
    std::vector<float> x = noise, v(data.size());
    for (int64_t i = 0; i < s.numSteps(); ++i) {
      for (size_t k = 0; k < x.size(); ++k)
        v[k] = data[k] - noise[k];
      s.step(i, v.data(), x.data(), x.size());
      const double sig = s.sigmas()[size_t(i) + 1];
      for (size_t k = 0; k < x.size(); ++k)
        EXPECT_NEAR(x[k], (1 - sig) * data[k] + sig * noise[k], 2e-6) << shift << " step " << i;
    }
    for (size_t k = 0; k < x.size(); ++k)
      EXPECT_NEAR(x[k], data[k], 2e-6);
  }
}

TEST(Sampler, InitialNoiseIsTheDocumentedGenerator) {
  auto n = rt::initialNoise(42, rt::kVideoNoiseName, 4096);
  const std::string name = "h3c/initial_noise/video";
  const auto key = synth::tensorKey(42, name.data(), name.size());
  double s = 0, s2 = 0;
  for (size_t i = 0; i < n.size(); ++i) {
    ASSERT_EQ(n[i], synth::normalish(key, i, H3C_SYNTH_UNIT_SCALE));
    s += n[i];
    s2 += double(n[i]) * n[i];
  }
  EXPECT_NEAR(s / n.size(), 0.0, 0.05);
  EXPECT_NEAR(std::sqrt(s2 / n.size()), 1.0, 0.05);
  EXPECT_NE(rt::initialNoise(42, rt::kAudioNoiseName, 8), rt::initialNoise(42, rt::kVideoNoiseName, 8));
  EXPECT_NE(rt::initialNoise(43, rt::kVideoNoiseName, 8), rt::initialNoise(42, rt::kVideoNoiseName, 8));
}

TEST(Sampler, RejectsBadParameters) {
  EXPECT_THROW(rt::MiniMaxH3Scheduler(0.0), Error);
  EXPECT_THROW(rt::MiniMaxH3Scheduler(-3.0), Error);
  EXPECT_THROW(rt::MiniMaxH3Scheduler(NAN), Error);
  rt::MiniMaxH3Scheduler s(3.0);
  EXPECT_THROW(s.setTimesteps(1), Error);
  EXPECT_THROW(s.setTimesteps(0), Error);
}

// Grids printed by test/fixtures/sampler/torch_sigmas.py on a machine with torch (bit patterns); skipped until that
// JSON is committed.
TEST(Sampler, MatchesTorchFixture) {
  const std::string path = std::string(H3C_SOURCE_DIR) + "/test/fixtures/sampler/torch_sigmas.json";
  std::ifstream in(path);
  if (!in)
    GTEST_SKIP() << "no " << path << " (run torch_sigmas.py where torch is installed)";
  nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_FALSE(j["grids"].empty());
  for (const auto &g : j["grids"]) {
    rt::MiniMaxH3Scheduler s(g["shift"].get<double>());
    s.setTimesteps(g["steps"].get<int64_t>());
    auto toBits = [](const std::vector<float> &v) {
      std::vector<uint32_t> b;
      for (float f : v) {
        uint32_t u;
        std::memcpy(&u, &f, 4);
        b.push_back(u);
      }
      return b;
    };
    EXPECT_EQ(toBits(s.sigmas()), g["sigmas"].get<std::vector<uint32_t>>())
        << "shift " << g["shift"] << " steps " << g["steps"] << " (torch " << j["torch"] << ")";
    EXPECT_EQ(toBits(s.timesteps()), g["timesteps"].get<std::vector<uint32_t>>());
  }
}
