// MiniMaxH3Scheduler against diffusers' formulas, recomputed here independently: every F32 operation is evaluated in
// double and rounded to float once (exact for products of floats, and innocuous double rounding for + - * / since
// double has more than 2*24+2 bits), instead of the float arithmetic and fmaf that sampler.cpp uses.
#include "h3c/support/error.h"
#include "h3c/support/philox.h"
#include "h3c/trajectory/sampler.h"
#include "rollout_test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>
#include <vector>

using namespace h3c;

namespace {

using testtraj::r32;

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
        if (i > 0) {
          EXPECT_LT(s.sigmas()[size_t(i)], s.sigmas()[size_t(i - 1)]);
        }
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

TEST(Sampler, NoiseIsThePhiloxStream) {
  std::vector<float> n(4097);
  rt::philoxNormals(42, 1, 3, int64_t(n.size()), n.data());
  double s = 0, s2 = 0;
  for (size_t i = 0; i < n.size(); ++i) {
    ASSERT_EQ(n[i], philox::normal(42, 1, 3, i)) << i;
    s += n[i];
    s2 += double(n[i]) * n[i];
  }
  EXPECT_NEAR(s / n.size(), 0.0, 0.08);
  EXPECT_NEAR(std::sqrt(s2 / n.size()), 1.0, 0.05);
}

// The SDE step (sampler.h), recomputed here in the double-rounded form, bit for bit; and against Flow-GRPO's own
// expression of the mean (in double, unrearranged) and a direct Gaussian log-density.
TEST(Sampler, SdeStepEqualsTheFlowGrpoTransition) {
  for (double shift : {12.0, 3.0}) {
    rt::MiniMaxH3Scheduler s(shift);
    s.setTimesteps(12);
    const double a = 0.7;
    const float af = r32(a);
    const std::vector<float> x0 = {0.5f, -1.25f, 3.0f, 1e-3f, -7.5f, 0.0f}, v = {0.1f, 2.0f, -0.7f, 5.0f, 0.33f, -1.0f},
                             z = {0.3f, -1.1f, 2.2f, 0.0f, -0.4f, 1.7f};
    for (int64_t i = 0; i < s.numSteps(); ++i) {
      const float sig = s.sigmas()[size_t(i)], nx = s.sigmas()[size_t(i) + 1], t = s.timesteps()[size_t(i)];
      const float dt = r32(double(nx) - double(sig));
      const float s1 = sig == 1.0f ? s.sigmas()[1] : sig;
      const float stdv = r32(double(r32(std::sqrt(double(r32(double(sig) / double(r32(1.0 - double(s1)))))))) * af);
      const float scale = r32(double(stdv) * double(r32(std::sqrt(double(r32(-double(dt)))))));
      const float coef = r32(double(r32(double(r32(double(stdv) * stdv)) / double(r32(2.0 * sig)))) * double(dt));
      rt::SdeConstants k = rt::sdeConstants(s, i, a);
      EXPECT_TRUE(sameBits(k.std, stdv) && sameBits(k.scale, scale) && sameBits(k.coef, coef)) << "step " << i;
      std::vector<float> x = x0, mean(x.size());
      const double sumSq = rt::sdeStep(s, i, k, v.data(), z.data(), x.data(), mean.data(), x.size());
      const float sigT = r32(1.0 - double(t)), r = r32(double(nx) / double(sig)), omr = r32(1.0 - double(r));
      double ss = 0.0;
      long double lpDirect = 0;
      for (size_t e = 0; e < x.size(); ++e) {
        const float den = r32(double(x0[e]) + double(r32(double(sigT) * double(v[e]))));
        const float ode = r32(double(r32(double(r) * double(x0[e]))) + double(r32(double(omr) * double(den))));
        const float eps = r32(double(x0[e]) - double(r32(double(t) * double(v[e]))));
        const float mu = r32(double(ode) + double(r32(double(coef) * double(eps))));
        const float next = r32(double(mu) + double(r32(double(scale) * double(z[e]))));
        ASSERT_TRUE(sameBits(mean[e], mu)) << "step " << i << " e " << e;
        ASSERT_TRUE(sameBits(x[e], next)) << "step " << i << " e " << e;
        const double d = double(next) - double(mu);
        ss = ss + d * d;
        // Flow-GRPO: prev_sample_mean = x (1 + std^2/(2 sigma) dt) + u (1 + std^2 (1 - sigma)/(2 sigma)) dt with its
        // noise-ward velocity u = -v; equal to the rearranged F32 form within F32 rounding.
        const double sd = stdv, sg = sig, u = -double(v[e]), ddt = double(nx) - sg;
        const double fg = x0[e] * (1 + sd * sd / (2 * sg) * ddt) + u * (1 + sd * sd * (1 - sg) / (2 * sg)) * ddt;
        EXPECT_NEAR(mu, fg, 2e-6 * (1 + std::fabs(fg)) * (1 + std::fabs(v[e]) + std::fabs(x0[e]))) << i << " " << e;
        lpDirect += -(long double)(d * d) / (2.0L * scale * scale) - std::log((long double)scale) -
                    0.5L * std::log(2.0L * 3.14159265358979323846264338327950288L);
      }
      EXPECT_EQ(sumSq, ss) << "step " << i;
      const double lp = rt::sdeLogProb(sumSq, k, int64_t(x.size()));
      EXPECT_NEAR(lp, double(lpDirect), 1e-12 * (1 + std::fabs(double(lpDirect))));
      EXPECT_EQ(k.logScale, std::log(double(scale)));
    }
  }
  rt::MiniMaxH3Scheduler s(12.0);
  s.setTimesteps(5);
  EXPECT_THROW(rt::sdeConstants(s, 0, 0.0), Error);
  EXPECT_THROW(rt::sdeConstants(s, 0, -1.0), Error);
  EXPECT_THROW(rt::sdeConstants(s, 4, 0.7), Error);
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
