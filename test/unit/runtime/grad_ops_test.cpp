// The backward's CPU reference (runtime/grad_ops.h) against docs/contract.md section 14 written out as plain loops
// (independent of the GEMM kernels the reference uses) and against fp64 gradients with derived bounds.
#include "h3c/runtime/grad_ops.h"
#include "h3c/support/dtype.h"
#include "h3c/support/error.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
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

// ---- elementwise and row-wise ops: against central differences of fp64 forwards written from section 3's math (no
// roundings, so their gradient is the straight-through one; the bound covers the bf16 values the contract's
// gradients read in place of exact ones, ~2^-8 relative).

using Fwd = std::function<double(const std::vector<double> &)>;

// d loss / d p[i] for every i by central differences in double.
std::vector<double> numericGrad(const Fwd &loss, std::vector<double> p) {
  std::vector<double> g(p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    const double h = 1e-4 * std::max(1.0, std::fabs(p[i])), p0 = p[i];
    p[i] = p0 + h;
    const double a = loss(p);
    p[i] = p0 - h;
    const double b = loss(p);
    p[i] = p0;
    g[i] = (a - b) / (2 * h);
  }
  return g;
}

void expectNear(const std::vector<float> &got, const std::vector<double> &want, size_t offset, const char *what,
                double tol = 1e-2) {
  double scale = 0;
  for (size_t i = 0; i < got.size(); ++i) scale = std::max(scale, std::fabs(want[offset + i]));
  ASSERT_GT(scale, 0) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::fabs(double(got[i]) - want[offset + i]), tol * scale) << what << "[" << i << "]";
}

std::vector<double> toDouble(const std::vector<float> &a, const std::vector<float> &b = {}) {
  std::vector<double> p(a.begin(), a.end());
  p.insert(p.end(), b.begin(), b.end());
  return p;
}

TEST(GradOps, SwigluAgainstCentralDifferences) {
  const int64_t M = 3, F = 8;
  const std::vector<float> x = randomBf16(size_t(M * 2 * F), 12, 2.f), dy = randomF32(size_t(M * F), 13);
  const std::vector<float> dx = swigluGrad(dy.data(), x.data(), M, F);
  const std::vector<double> num = numericGrad([&](const std::vector<double> &p) {
    double l = 0;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t f = 0; f < F; ++f) {
        const double v = p[size_t(m * 2 * F + f)], g = p[size_t(m * 2 * F + F + f)];
        l += dy[size_t(m * F + f)] * v * g / (1 + std::exp(-g));
      }
    return l;
  }, toDouble(x));
  expectNear(dx, num, 0, "swiglu dx");
}

TEST(GradOps, RmsNormAndQkNormAgainstCentralDifferences) {
  for (const int64_t d : {int64_t(24), int64_t(8)}) {  // rms_norm over the row, then qk_norm's 3 heads of 8
    const int64_t M = 4, C = 24, G = C / d;
    const float eps = 1e-6f;
    const std::vector<float> x = randomBf16(size_t(M * C), 14), w = randomBf16(size_t(d), 15),
                             dy = randomF32(size_t(M * C), 16);
    const NormGrad g = rmsNormGrad(dy.data(), x.data(), w.data(), {0, M}, C, d, eps);
    const std::vector<double> num = numericGrad([&](const std::vector<double> &p) {
      double l = 0;
      for (int64_t m = 0; m < M; ++m)
        for (int64_t h = 0; h < G; ++h) {
          double ss = 0;
          for (int64_t j = 0; j < d; ++j) ss += p[size_t(m * C + h * d + j)] * p[size_t(m * C + h * d + j)];
          const double inv = 1 / std::sqrt(ss / double(d) + eps);
          for (int64_t j = 0; j < d; ++j)
            l += dy[size_t(m * C + h * d + j)] * p[size_t(m * C + h * d + j)] * inv * p[size_t(M * C + j)];
        }
      return l;
    }, toDouble(x, w));
    expectNear(g.dx, num, 0, "rms dx");
    expectNear(g.dw, num, size_t(M * C), "rms dw");
  }
}

TEST(GradOps, NormModulateAndGateResidualAgainstCentralDifferences) {
  const int64_t M = 5, H = 16, T = 2;
  const float eps = 1e-6f;
  const TableRows rows{{0, 1, 1, 0, 1}, T};
  const std::vector<float> x = randomBf16(size_t(M * H), 17), scale = randomBf16(size_t(T * H), 18, 0.3f),
                           shift = randomBf16(size_t(T * H), 19), dy = randomF32(size_t(M * H), 20),
                           y = randomBf16(size_t(M * H), 21), gate = randomBf16(size_t(T * H), 22);
  const std::vector<float> w = randomBf16(size_t(H), 34);
  const NormModulateGrad g = normModulateGrad(dy.data(), x.data(), w.data(), scale.data(), rows, {0, M}, H, eps);
  std::vector<double> p = toDouble(x, scale);
  p.insert(p.end(), shift.begin(), shift.end());
  p.insert(p.end(), w.begin(), w.end());
  const std::vector<double> num = numericGrad([&](const std::vector<double> &q) {
    double l = 0;
    for (int64_t m = 0; m < M; ++m) {
      double ss = 0;
      for (int64_t c = 0; c < H; ++c) ss += q[size_t(m * H + c)] * q[size_t(m * H + c)];
      const double inv = 1 / std::sqrt(ss / double(H) + eps);
      const int64_t t = rows.row[size_t(m)];
      for (int64_t c = 0; c < H; ++c)
        l += dy[size_t(m * H + c)] * (q[size_t(m * H + c)] * inv * q[size_t(M * H + 2 * T * H + c)] *
                                          (1 + q[size_t(M * H + t * H + c)]) +
                                      q[size_t(M * H + T * H + t * H + c)]);
    }
    return l;
  }, p);
  expectNear(g.dx, num, 0, "norm_modulate dx");
  expectNear(g.dscale, num, size_t(M * H), "norm_modulate dscale");
  expectNear(g.dshift, num, size_t(M * H + T * H), "norm_modulate dshift");
  expectNear(g.dw, num, size_t(M * H + 2 * T * H), "norm_modulate dw");
  // gate_residual z = x + gate * y: dy = dz * gate, dgate = the sum of dz * y over the table row's token rows.
  const GateResidualGrad gr = gateResidualGrad(dy.data(), y.data(), gate.data(), rows, {0, M}, H);
  const std::vector<double> gnum = numericGrad([&](const std::vector<double> &q) {
    double l = 0;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t c = 0; c < H; ++c)
        l += dy[size_t(m * H + c)] * q[size_t(M * H + rows.row[size_t(m)] * H + c)] * q[size_t(m * H + c)];
    return l;
  }, toDouble(y, gate));
  expectNear(gr.dy, gnum, 0, "gate_residual dy", 1e-5);
  expectNear(gr.dgate, gnum, size_t(M * H), "gate_residual dgate", 1e-5);
}

// The table rows' row_units, element by element: token rows of other table rows left out, units of 128 per item.
TEST(GradOps, TableRowsFoldTheirOwnRowsByUnits) {
  const int64_t C = 3;
  const ItemRows items = {0, 200, 260};
  TableRows rows{{}, 3};
  for (int64_t r = 0; r < items.back(); ++r) rows.row.push_back(r % 7 == 0 ? 2 : r % 2);
  const std::vector<float> dz = randomF32(size_t(items.back() * C), 23), y = randomF32(size_t(items.back() * C), 24),
                           gate(size_t(3 * C), 1.f);
  const GateResidualGrad g = gateResidualGrad(dz.data(), y.data(), gate.data(), rows, items, C);
  const int64_t units[][2] = {{0, 128}, {128, 200}, {200, 260}};
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t c = 0; c < C; ++c) {
      float part[3];
      for (int u = 0; u < 3; ++u) {
        float acc = 0.f;
        for (int64_t r = units[u][0]; r < units[u][1]; ++r)
          if (rows.row[size_t(r)] == t) acc = std::fmaf(dz[size_t(r * C + c)], y[size_t(r * C + c)], acc);
        part[u] = acc;
      }
      ASSERT_EQ(g.dgate[size_t(t * C + c)], (part[0] + part[1]) + part[2]) << t << " " << c;
    }
  EXPECT_THROW(gateResidualGrad(dz.data(), y.data(), gate.data(), TableRows{rows.row, 2}, items, C), Error);
}

TEST(GradOps, RopeAgainstCentralDifferences) {
  const int64_t M = 3, heads = 2, d = 12, R = 8, C = heads * d;
  const std::vector<float> x = randomBf16(size_t(M * C), 25), dy = randomF32(size_t(M * C), 26),
                           cs = randomF32(size_t(M * R), 27), sn = randomF32(size_t(M * R), 28);
  const std::vector<float> dx = ropeGrad(dy.data(), cs.data(), sn.data(), M, heads, d, R);
  const std::vector<double> num = numericGrad([&](const std::vector<double> &p) {
    double l = 0;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t j = 0; j < d; ++j) {
          const double xj = p[size_t(m * C + h * d + j)];
          double yj = xj;
          if (j < R) {
            const int64_t o = j < R / 2 ? j + R / 2 : j - R / 2;
            const double rot = j < R / 2 ? -p[size_t(m * C + h * d + o)] : p[size_t(m * C + h * d + o)];
            yj = xj * roundBf16(cs[size_t(m * R + j)]) + rot * roundBf16(sn[size_t(m * R + j)]);
          }
          l += dy[size_t(m * C + h * d + j)] * yj;
        }
    return l;
  }, toDouble(x));
  expectNear(dx, num, 0, "rope dx", 1e-5);
}

// Attention over two items (keys of one item never meet the other's queries), against central differences of the
// fp64 softmax attention: L = sum of dO * o. The key count 150 > 128 exercises the kv blocks' rescale and the query
// row units.
TEST(GradOps, AttentionAgainstCentralDifferences) {
  const int64_t heads = 2, d = 16, C = heads * d;
  const ItemRows items = {0, 150, 157};
  const int64_t M = items.back();
  const std::vector<float> q = randomBf16(size_t(M * C), 29), k = randomBf16(size_t(M * C), 30),
                           v = randomBf16(size_t(M * C), 31), dO = randomF32(size_t(M * C), 32);
  std::vector<float> o(size_t(M * C));  // the forward's output, rounded as the op stores it
  std::vector<double> od(size_t(M * C));
  // The forward of the heads [h0, h1) (a perturbed element moves its own head's outputs only).
  auto forward = [&](const std::vector<double> &p, std::vector<double> &out, int64_t h0, int64_t h1) {
    for (size_t b = 0; b + 1 < items.size(); ++b)
      for (int64_t h = h0; h < h1; ++h)
        for (int64_t i = items[b]; i < items[b + 1]; ++i) {
          std::vector<double> s;
          double mx = -1e300, l = 0;
          for (int64_t j = items[b]; j < items[b + 1]; ++j) {
            double a = 0;
            for (int64_t e = 0; e < d; ++e) a += p[size_t(i * C + h * d + e)] * p[size_t(M * C + j * C + h * d + e)];
            s.push_back(a / std::sqrt(double(d)));
            mx = std::max(mx, s.back());
          }
          for (double &x : s) l += (x = std::exp(x - mx));
          for (int64_t e = 0; e < d; ++e) {
            double a = 0;
            for (int64_t j = items[b]; j < items[b + 1]; ++j)
              a += s[size_t(j - items[b])] * p[size_t(2 * M * C + j * C + h * d + e)];
            out[size_t(i * C + h * d + e)] = a / l;
          }
        }
  };
  std::vector<double> p = toDouble(q, k);
  p.insert(p.end(), v.begin(), v.end());
  forward(p, od, 0, heads);
  for (size_t i = 0; i < o.size(); ++i) o[i] = roundBf16(float(od[i]));
  const AttentionGrad g = attentionGrad(q.data(), k.data(), v.data(), o.data(), dO.data(), items, heads, d, 128);
  std::vector<double> out(size_t(M * C));
  // Central differences of every input would take M * C * 3 forwards: a sample of 16 elements per tensor (the
  // ASan build runs this test too).
  std::mt19937 rng(33);
  for (int t = 0; t < 3; ++t) {
    const std::vector<float> &got = t == 0 ? g.dq : t == 1 ? g.dk : g.dv;
    double scale = 0;
    for (float x : got) scale = std::max(scale, std::fabs(double(x)));
    for (int s = 0; s < 16; ++s) {
      const size_t i = size_t(t) * size_t(M * C) + rng() % size_t(M * C);
      const int64_t head = int64_t(i % size_t(C)) / d;
      const double p0 = p[i], h = 1e-4;
      double l[2];
      for (int side = 0; side < 2; ++side) {
        p[i] = p0 + (side ? -h : h);
        forward(p, out, head, head + 1);
        l[side] = 0;
        for (int64_t r = 0; r < M; ++r)
          for (int64_t e = head * d; e < (head + 1) * d; ++e) l[side] += dO[size_t(r * C + e)] * out[size_t(r * C + e)];
      }
      p[i] = p0;
      const double num = (l[0] - l[1]) / (2 * h);
      ASSERT_LE(std::fabs(double(got[i - size_t(t) * size_t(M * C)]) - num), 2e-2 * scale) << "tensor " << t << " element " << i;
    }
  }
}

// The AdaLN table `table = silu(temb) W^T + b` (and the time embedder's silu) against central differences.
TEST(GradOps, AdalnTableAndSiluAgainstCentralDifferences) {
  const int64_t T = 3, E = 16, N = 20;
  const std::vector<float> temb = randomF32(size_t(T * E), 35), w = randomBf16(size_t(N * E), 36, 0.2f),
                           b = randomBf16(size_t(N), 37), g = randomF32(size_t(T * N), 38);
  const AdalnTableGrad r = adalnTableGrad(g.data(), temb.data(), w.data(), T, N, E, 2);
  std::vector<double> p = toDouble(temb, w);
  p.insert(p.end(), b.begin(), b.end());
  const std::vector<double> num = numericGrad([&](const std::vector<double> &q) {
    double l = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < N; ++n) {
        double y = q[size_t(T * E + N * E + n)];
        for (int64_t e = 0; e < E; ++e) {
          const double x = q[size_t(t * E + e)];
          y += x / (1 + std::exp(-x)) * q[size_t(T * E + n * E + e)];
        }
        l += g[size_t(t * N + n)] * y;
      }
    return l;
  }, p);
  expectNear(r.dtemb, num, 0, "adaln dtemb");
  expectNear(r.dw, num, size_t(T * E), "adaln dW");
  expectNear(r.dbias, num, size_t(T * E + N * E), "adaln dbias", 1e-5);
  const std::vector<float> dx = siluGrad(g.data(), temb.data(), T * E);
  const std::vector<double> snum = numericGrad([&](const std::vector<double> &q) {
    double l = 0;
    for (int64_t i = 0; i < T * E; ++i) l += g[size_t(i)] * q[size_t(i)] / (1 + std::exp(-q[size_t(i)]));
    return l;
  }, toDouble(temb));
  expectNear(dx, snum, 0, "silu dx", 1e-5);
}

// dq's fold adds (docs/contract.md section 14): round to nearest even, subnormal inputs and results flushed to zero of
// their sign, as PTX add.rn.ftz.f32 and red.global.add.f32 add. Expected values written out: FLT_MIN = 2^-126 is the
// smallest normal float.
TEST(GradOps, DqFoldAddFlushesSubnormals) {
  const float tiny = std::ldexp(1.0f, -130);  // subnormal
  const float fmin = std::ldexp(1.0f, -126);
  EXPECT_EQ(addFtz(1.5f, 2.25f), 3.75f);
  EXPECT_EQ(addFtz(1.0f, std::ldexp(1.0f, -24)), 1.0f);  // a tie: to even
  EXPECT_EQ(addFtz(fmin, tiny), fmin);                    // the subnormal input counts as 0 (plain addition: more)
  EXPECT_NE(fmin + tiny, fmin);
  const float z = addFtz(tiny, 0.0f);  // +tiny flushed to +0, +0 + +0
  EXPECT_EQ(z, 0.0f);
  EXPECT_FALSE(std::signbit(z));
  const float nz = addFtz(-tiny, -0.0f);  // -tiny flushed to -0, -0 + -0 = -0
  EXPECT_EQ(nz, 0.0f);
  EXPECT_TRUE(std::signbit(nz));
  const float r = addFtz(1.5f * fmin, -fmin);  // the result 2^-127 is subnormal: flushed
  EXPECT_EQ(r, 0.0f);
  EXPECT_FALSE(std::signbit(r));
  EXPECT_EQ(1.5f * fmin - fmin, std::ldexp(1.0f, -127));  // (plain addition keeps it)
  EXPECT_EQ(addFtz(0.0f, -0.0f), 0.0f);
  EXPECT_FALSE(std::signbit(addFtz(0.0f, -0.0f)));  // s = 0 + b_0 with b_0 = -0 is +0
}

// dq's fold in the CPU reference flushes a subnormal block partial (docs/contract.md section 14): keys 0-127 are
// zero, so block 0's chain is 0, and keys 128-199 are 2^-130 in every channel, so block 1's chain of bf(dS) k is
// subnormal (|dS| < 1, 72 keys). The fold 0 + b_0 + b_1 with flush-to-zero adds is +0, so dq is +0 everywhere; a
// plain fold would leave scale * b_1, not 0.
TEST(GradOps, AttentionDqFoldFlushesASubnormalBlock) {
  const int64_t heads = 1, d = 16, n = 200;
  const ItemRows items = {0, n};
  const float tiny = std::ldexp(1.0f, -130);
  std::vector<float> q = randomBf16(size_t(n * d), 41), v = randomBf16(size_t(n * d), 42),
                     o = randomBf16(size_t(n * d), 43), dO = randomF32(size_t(n * d), 44);
  std::vector<float> k(size_t(n * d), 0.0f);
  for (int64_t j = 128; j < n; ++j)
    for (int64_t e = 0; e < d; ++e) k[size_t(j * d + e)] = tiny;
  ASSERT_EQ(roundBf16(tiny), tiny);  // a bf16 value: the kernels' operand as given
  const AttentionGrad g = attentionGrad(q.data(), k.data(), v.data(), o.data(), dO.data(), items, heads, d, 128);
  size_t nonzeroDv = 0;
  for (float x : g.dv) nonzeroDv += x != 0.0f;
  EXPECT_GT(nonzeroDv, size_t(0));  // the backward ran on real values
  for (size_t i = 0; i < g.dq.size(); ++i) {
    ASSERT_EQ(g.dq[i], 0.0f) << "dq element " << i;
    ASSERT_FALSE(std::signbit(g.dq[i])) << "dq element " << i;
  }
}

} // namespace grad_ops_test
} // namespace h3c::rt::grad
