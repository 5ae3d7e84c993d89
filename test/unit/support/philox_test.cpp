// The sampler's noise generator (support/philox.h): Philox4x32-10 against the published Random123 known-answer
// vectors, the deterministic log / sin / cos against long-double references, and the normals against the standard
// normal distribution (moments, tails, Kolmogorov-Smirnov). The device computes the same bits: test/gpu (GpuPhilox).
#include "h3c/support/philox.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace px = h3c::philox;

// Random123 1.14, examples/kat_vectors, the three "philox4x32 10" lines: counter, key -> output.
TEST(Philox, Random123KnownAnswers) {
  struct Kat {
    px::u32 ctr[4], key[2], out[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat &k : kats) {
    px::Block c{{k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]}};
    px::Block o = px::philox4x32(c, k.key[0], k.key[1]);
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(o.v[i], k.out[i]) << std::hex << k.ctr[0] << " word " << i;
  }
}

double ulpOf(double x) { return std::nextafter(std::fabs(x), INFINITY) - std::fabs(x); }

TEST(Philox, LogIsWithinAnUlp) {
  std::mt19937_64 g(7);
  std::vector<double> xs = {1.0, 0.5, 0.25, 0.7071067811865476, 0.7071067811865475, 1.1102230246251565e-16,
                            0.999999999999, 1e-300, 2.0, 1234.5};
  for (int i = 0; i < 200000; ++i)
    xs.push_back(double((g() >> 11) + 1) * 0x1p-53);
  EXPECT_EQ(px::logPositive(1.0), 0.0);
  for (double x : xs) {
    const long double ref = std::log((long double)x);
    const double got = px::logPositive(x);
    EXPECT_LE(std::fabs((long double)got - ref), (long double)ulpOf(double(ref))) << x;
  }
}

TEST(Philox, SinCosOfTheTurnFractionAreWithinTwoUlps) {
  std::mt19937_64 g(9);
  std::vector<px::u64> ns = {0, 1ull << 50, (1ull << 51) - 1, 1ull << 51, 3ull << 50, 1ull << 52, (1ull << 53) - 1};
  for (int i = 0; i < 200000; ++i)
    ns.push_back(g() >> 11);
  const long double twoPi = 6.283185307179586476925286766559005768L;
  for (px::u64 n : ns) {
    double s, c;
    px::sinCos2PiFraction(n, s, c);
    const long double a = twoPi * ((long double)n * 0x1p-53L);
    // absolute error: near a zero the ulp of the result is tiny, the argument's own error is not
    EXPECT_LE(std::fabs((long double)s - std::sin(a)), 2.3e-16L) << n;
    EXPECT_LE(std::fabs((long double)c - std::cos(a)), 2.3e-16L) << n;
  }
  double s, c;
  px::sinCos2PiFraction(0, s, c);
  EXPECT_EQ(s, 0.0);
  EXPECT_EQ(c, 1.0);
  px::sinCos2PiFraction(1ull << 51, s, c);  // a quarter turn
  EXPECT_EQ(s, 1.0);
  EXPECT_EQ(c, 0.0);
}

double normalCdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

TEST(Philox, NormalsAreStandardNormal) {
  const size_t n = 1u << 20;
  std::vector<double> v(n);
  for (size_t e = 0; e < n; ++e)
    v[e] = px::normal(0x1234567890abcdefull, 0, 0, e);
  double sum = 0, sq = 0, q4 = 0;
  size_t over3 = 0, over4 = 0;
  for (double x : v) {
    sum += x;
    sq += x * x;
    q4 += x * x * x * x;
    over3 += std::fabs(x) > 3.0;
    over4 += std::fabs(x) > 4.0;
  }
  const double mean = sum / n, var = sq / n - mean * mean, kurt = q4 / n;
  EXPECT_LT(std::fabs(mean), 5e-3);            // 5 standard errors (1e-3)
  EXPECT_LT(std::fabs(var - 1.0), 7e-3);       // 5 standard errors (sqrt(2/n) = 1.4e-3)
  EXPECT_LT(std::fabs(kurt - 3.0), 0.05);      // E z^4 = 3 (a sum of 4 uniforms gives 2.4)
  const double p3 = 2 * normalCdf(-3.0) * n;   // 2831 expected
  EXPECT_LT(std::fabs(double(over3) - p3), 5 * std::sqrt(p3));
  const double p4 = 2 * normalCdf(-4.0) * n;   // 66 expected; the old sum of uniforms never exceeded 3.47
  EXPECT_LT(std::fabs(double(over4) - p4), 5 * std::sqrt(p4));
  // Kolmogorov-Smirnov against the normal CDF: D < 1.95 / sqrt(n) is the 0.1% critical value.
  std::sort(v.begin(), v.end());
  double d = 0;
  for (size_t i = 0; i < n; ++i) {
    const double F = normalCdf(v[i]);
    d = std::max({d, F - double(i) / n, double(i + 1) / n - F});
  }
  EXPECT_LT(d, 1.95 / std::sqrt(double(n))) << "KS distance " << d;
}

TEST(Philox, StreamsAreAddressedBySeedModalityDrawAndElement) {
  // Even and odd elements are the two halves of one block; the block is addressed by e / 2.
  float z0, z1;
  px::normalPair(px::philox4x32(px::Block{{5, 0, 1, 3}}, 42u, 0u), z0, z1);
  EXPECT_EQ(px::normal(42, 1, 3, 10), z0);
  EXPECT_EQ(px::normal(42, 1, 3, 11), z1);
  // The high seed word is the second key word; the high pair word the second counter word.
  px::normalPair(px::philox4x32(px::Block{{7, 2, 0, 0}}, 9u, 1u), z0, z1);
  EXPECT_EQ(px::normal((1ull << 32) | 9, 0, 0, (2ull << 33) | 14), z0);
  // Changing any coordinate changes the values, and streams are uncorrelated.
  const size_t n = 20000;
  auto stream = [&](px::u64 seed, px::u32 m, px::u32 d) {
    std::vector<double> s(n);
    for (size_t e = 0; e < n; ++e)
      s[e] = px::normal(seed, m, d, e);
    return s;
  };
  auto corr = [&](const std::vector<double> &a, const std::vector<double> &b) {
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < n; ++i) {
      ab += a[i] * b[i];
      aa += a[i] * a[i];
      bb += b[i] * b[i];
    }
    return ab / std::sqrt(aa * bb);
  };
  auto base = stream(1, 0, 0);
  for (auto other : {stream(2, 0, 0), stream(1, 1, 0), stream(1, 0, 1), stream(1ull << 32 | 1, 0, 0)}) {
    EXPECT_NE(0, std::memcmp(base.data(), other.data(), n * sizeof(double)));
    EXPECT_LT(std::fabs(corr(base, other)), 5.0 / std::sqrt(double(n)));
  }
}
