// The backward's CPU reference (runtime/grad_ops.h) against docs/contract.md section 14 written out as plain loops
// (independent of the GEMM kernels the reference uses) and against fp64 gradients with derived bounds.
#include "h3c/runtime/grad_ops.h"
#include "h3c/support/dtype.h"
#include "h3c/support/error.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace h3c::rt::grad {
namespace grad_ops_test {

std::vector<float> randomBf16(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (float &x : v) x = roundBf16(d(rng));
  return v;
}

std::vector<float> randomF32(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (float &x : v) x = d(rng);
  return v;
}

bool sameBits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// The contract's chunk sum: 16 products of bf16 values (exact in double), their sum in double (exact here: the
// test's values span few binades, so any order gives the same double), rounded once to F32.
float chunk(const std::vector<double> &prods, size_t j0) {
  double s = 0;
  for (size_t j = j0; j < std::min(prods.size(), j0 + 16); ++j) s += prods[j];
  return float(s);
}
float chain(const std::vector<double> &prods) {
  float acc = 0.f;
  for (size_t j = 0; j < prods.size(); j += 16) acc = acc + chunk(prods, j);
  return acc;
}

// sum a[i * sa] * b[i * sb] over i < n in double, and the sum of the terms' magnitudes.
std::pair<double, double> dotFp64(const float *a, int64_t sa, const float *b, int64_t sb, int64_t n) {
  double s = 0, m = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double p = double(a[i * sa]) * double(b[i * sb]);
    s += p;
    m += std::fabs(p);
  }
  return {s, m};
}

// Per element, contract section 14 as written: dW[n][k] = fold over items of (fold over 128-row units of the chain of
// bf(g) * bf(x) over the unit's rows), and dX[m][k] = the chain over n of bf(g[m][n]) * w[n][k].
TEST(GradOps, LinearBf16FollowsTheContractElementByElement) {
  const int64_t N = 24, K = 40;
  const ItemRows items = {0, 300, 300, 317};  // units 128 + 128 + 44, an empty item, then 17 rows
  const int64_t M = items.back();
  const std::vector<float> g = randomF32(size_t(M * N), 1), x = randomF32(size_t(M * K), 2),
                           w = randomBf16(size_t(N * K), 3);
  const std::vector<float> dw = linearDw(g.data(), x.data(), items, N, K, 2);
  const std::vector<float> dx = linearDx(g.data(), M, N, w.data(), K, 2);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      float batch = 0.f;
      bool first = true;
      for (size_t b = 0; b + 1 < items.size(); ++b) {
        if (items[b] == items[b + 1]) continue;
        float item = 0.f;
        for (int64_t u = items[b]; u < items[b + 1]; u += 128) {
          std::vector<double> prods;
          for (int64_t r = u; r < std::min(items[b + 1], u + 128); ++r)
            prods.push_back(double(roundBf16(g[size_t(r * N + n)])) * double(roundBf16(x[size_t(r * K + k)])));
          item = u == items[b] ? chain(prods) : item + chain(prods);
        }
        batch = first ? item : batch + item;
        first = false;
      }
      ASSERT_EQ(dw[size_t(n * K + k)], batch) << "dW[" << n << "][" << k << "]";
    }
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) {
      std::vector<double> prods;
      for (int64_t n = 0; n < N; ++n)
        prods.push_back(double(roundBf16(g[size_t(m * N + n)])) * double(w[size_t(n * K + k)]));
      ASSERT_EQ(dx[size_t(m * K + k)], chain(prods)) << "dX[" << m << "][" << k << "]";
    }
}

// Against the fp64 gradient of y = x W^T on the same bf16 operands: the F32 chain's error stays within
// (chunks + units + items) * 2^-24 * sum |terms| per element (one rounding per F32 addition, each at most that).
TEST(GradOps, LinearBf16WithinTheFp64Bound) {
  const int64_t N = 48, K = 72;
  const ItemRows items = {0, 261, 400};
  const int64_t M = items.back();
  const std::vector<float> g = randomBf16(size_t(M * N), 4, 3.f), x = randomBf16(size_t(M * K), 5),
                           w = randomBf16(size_t(N * K), 6, 0.05f);
  const std::vector<float> dw = linearDw(g.data(), x.data(), items, N, K, 2);
  const std::vector<float> dx = linearDx(g.data(), M, N, w.data(), K, 2);
  const double u = std::ldexp(1.0, -24);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      const auto [s, a] = dotFp64(&g[size_t(n)], N, &x[size_t(k)], K, M);
      const double ops = double(M) / 16 + 4 + 2 + 2;  // chunk roundings and additions, unit and item folds
      ASSERT_LE(std::fabs(dw[size_t(n * K + k)] - s), ops * u * a + 1e-30) << n << " " << k;
    }
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) {
      const auto [s, a] = dotFp64(&g[size_t(m * N)], 1, &w[size_t(k)], K, N);
      ASSERT_LE(std::fabs(dx[size_t(m * K + k)] - s), (double(N) / 16 + 2) * u * a + 1e-30) << m << " " << k;
    }
}

// The invariances the contract promises: an item's sum depends on its own rows only (a batch = the F32 sum of its
// items' one-item gradients, in batch order), a unit on its own 128 rows (one item = the fold of its units computed
// one at a time), and nothing on the thread count.
TEST(GradOps, ItemsAndUnitsComposeBitwise) {
  const int64_t N = 16, K = 32, A = 200, B = 77;
  const std::vector<float> g = randomF32(size_t((A + B) * N), 7), x = randomF32(size_t((A + B) * K), 8);
  const std::vector<float> both = linearDw(g.data(), x.data(), {0, A, A + B}, N, K, 1);
  const std::vector<float> a = linearDw(g.data(), x.data(), {0, A}, N, K, 2);
  const std::vector<float> b = linearDw(g.data() + A * N, x.data() + A * K, {0, B}, N, K, 2);
  std::vector<float> sum(a.size());
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = a[i] + b[i];
  EXPECT_TRUE(sameBits(both, sum));
  const std::vector<float> u0 = linearDw(g.data(), x.data(), {0, 128}, N, K, 1);
  const std::vector<float> u1 = linearDw(g.data() + 128 * N, x.data() + 128 * K, {0, A - 128}, N, K, 1);
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = u0[i] + u1[i];
  EXPECT_TRUE(sameBits(a, sum));
  // The same rows as one 200-row chain without units would differ somewhere: the units are real.
  EXPECT_FALSE(sameBits(linearDw(g.data(), x.data(), {0, A, A + B}, N, K, 2), linearDw(g.data(), x.data(), {0, A + B}, N, K, 2)));
  // Reversing the batch changes only the fold's order: the items' own sums are the same.
  std::vector<float> gr(g.size()), xr(x.size());
  std::memcpy(gr.data(), g.data() + A * N, size_t(B * N) * 4);
  std::memcpy(gr.data() + B * N, g.data(), size_t(A * N) * 4);
  std::memcpy(xr.data(), x.data() + A * K, size_t(B * K) * 4);
  std::memcpy(xr.data() + B * K, x.data(), size_t(A * K) * 4);
  const std::vector<float> rev = linearDw(gr.data(), xr.data(), {0, B, A + B}, N, K, 2);
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = b[i] + a[i];
  EXPECT_TRUE(sameBits(rev, sum));
}

TEST(GradOps, BiasAndF32LinearFollowTheContract) {
  const int64_t N = 12, K = 20;
  const ItemRows items = {0, 130, 180};
  const int64_t M = items.back();
  const std::vector<float> g = randomF32(size_t(M * N), 9), x = randomF32(size_t(M * K), 10),
                           w = randomF32(size_t(N * K), 11);
  const std::vector<float> db = biasGrad(g.data(), items, N);
  const std::vector<float> dw = linearDwF32(g.data(), x.data(), items, N, K, 2);
  const std::vector<float> dx = linearDxF32(g.data(), M, N, w.data(), K, 2);
  // Units: rows [0, 128), [128, 130) of item 0, then [130, 180) of item 1.
  const int64_t units[][2] = {{0, 128}, {128, 130}, {130, 180}};
  for (int64_t n = 0; n < N; ++n) {
    float part[3];
    for (int i = 0; i < 3; ++i) {
      float acc = 0.f;
      for (int64_t r = units[i][0]; r < units[i][1]; ++r) acc = acc + g[size_t(r * N + n)];
      part[i] = acc;
    }
    ASSERT_EQ(db[size_t(n)], (part[0] + part[1]) + part[2]) << n;
    for (int64_t k = 0; k < K; ++k) {
      for (int i = 0; i < 3; ++i) {
        float acc = 0.f;
        for (int64_t r = units[i][0]; r < units[i][1]; ++r)
          acc = std::fmaf(g[size_t(r * N + n)], x[size_t(r * K + k)], acc);
        part[i] = acc;
      }
      ASSERT_EQ(dw[size_t(n * K + k)], (part[0] + part[1]) + part[2]) << n << " " << k;
    }
  }
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) {
      float acc = 0.f;
      for (int64_t n = 0; n < N; ++n) acc = std::fmaf(g[size_t(m * N + n)], w[size_t(n * K + k)], acc);
      ASSERT_EQ(dx[size_t(m * K + k)], acc);
    }
}

TEST(GradOps, RefusesBadItemRows) {
  const std::vector<float> g(8, 1.f), x(8, 1.f);
  EXPECT_THROW(linearDw(g.data(), x.data(), {1, 2}, 2, 2, 1), Error);
  EXPECT_THROW(biasGrad(g.data(), {0, 3, 2}, 2), Error);
  EXPECT_THROW(biasGrad(g.data(), {0}, 2), Error);
}

} // namespace grad_ops_test
} // namespace h3c::rt::grad
