// h3c::detmath (shared by the CPU reference and every kernel) against correctly rounded references.
#include "h3c/support/detmath.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>

// detmath::expf against the correctly rounded exp (from double): within 1 ulp over the whole finite range, and the
// special cases exact.
TEST(DetMath, ExpWithinOneUlp) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-103.0f, 88.7f);
  auto ulpDiff = [](float a, float b) {
    int32_t ia, ib;
    std::memcpy(&ia, &a, 4);
    std::memcpy(&ib, &b, 4);
    return std::abs((long long)ia - (long long)ib);
  };
  int worst = 0;
  for (int i = 0; i < 200000; ++i) {
    float x = i < 1000 ? -10.0f + i * 0.02f : d(rng);
    float ref = (float)std::exp((double)x);
    float got = h3c::detmath::expf(x);
    if (ref < 1e-37f) continue;  // subnormal outputs: checked separately below
    worst = std::max<int>(worst, (int)ulpDiff(got, ref));
  }
  EXPECT_LE(worst, 1);
  EXPECT_EQ(h3c::detmath::expf(0.0f), 1.0f);
  EXPECT_TRUE(std::isinf(h3c::detmath::expf(100.0f)));
  EXPECT_EQ(h3c::detmath::expf(-200.0f), 0.0f);
  EXPECT_TRUE(std::isnan(h3c::detmath::expf(NAN)));
  float sub = h3c::detmath::expf(-100.0f);
  EXPECT_NEAR(sub / (float)std::exp(-100.0), 1.0, 1e-3);
  // silu(x) = x / (1 + exp(-x)) against double.
  for (float x : {-20.0f, -1.5f, -0.01f, 0.0f, 0.3f, 2.0f, 15.0f}) {
    double ref = x / (1.0 + std::exp(-(double)x));
    EXPECT_NEAR(h3c::detmath::silu(x), ref, std::fabs(ref) * 3e-7 + 1e-30) << x;
  }
}

