// The backward's CPU reference (grad_ops.h; docs/contract.md section 14). The bf16 GEMMs are the forward's
// k_chunks kernel (cpu_kernels.h) on transposed operands: dX reduces over N, a dW unit over its rows, so both are
// the same chain with another axis as K. Row units are folded per item, then items in batch order.
#include "h3c/runtime/grad_ops.h"

#include "cpu_kernels.h"
#include "h3c/runtime/cpu_ops.h"
#include "h3c/support/dtype.h"
#include "h3c/support/error.h"

#include <algorithm>
#include <cmath>

namespace h3c::rt::grad {

namespace grad_detail {

void checkItems(const ItemRows &items, const char *what) {
  if (items.size() < 2 || items.front() != 0)
    fail(what, "the item rows must start at 0 and name at least one item");
  for (size_t b = 1; b < items.size(); ++b)
    if (items[b] < items[b - 1]) fail(what, "item {} ends before it begins", b - 1);
}

// The left fold of row_units: `unit(r0, r1, out)` writes one unit's partial (n elements); units in order per item
// (s = u_0, then s = s + u_j), then items in batch order. An item without rows adds nothing.
template <class Unit>
std::vector<float> foldUnits(const ItemRows &items, size_t n, Unit unit) {
  std::vector<float> total, item, part(n);
  bool anyItem = false;
  for (size_t b = 0; b + 1 < items.size(); ++b) {
    const int64_t r0 = items[b], r1 = items[b + 1];
    if (r1 == r0) continue;
    item.assign(n, 0.f);
    for (int64_t u = r0; u < r1; u += kRowUnit) {
      unit(u, std::min(r1, u + kRowUnit), part.data());
      if (u == r0) item = part;
      else
        for (size_t i = 0; i < n; ++i) item[i] = item[i] + part[i];
    }
    if (!anyItem) total = item;
    else
      for (size_t i = 0; i < n; ++i) total[i] = total[i] + item[i];
    anyItem = true;
  }
  if (!anyItem) total.assign(n, 0.f);
  return total;
}

// rows [r0, r1) of a [.][cols] matrix, transposed to [cols][r1 - r0], each value through `f`.
template <class F>
std::vector<float> transposeRows(const float *a, int64_t cols, int64_t r0, int64_t r1, F f) {
  const int64_t R = r1 - r0;
  std::vector<float> t(size_t(cols * R));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < cols; ++c) t[size_t(c * R + r)] = f(a[(r0 + r) * cols + c]);
  return t;
}

} // namespace grad_detail

std::vector<float> linearDx(const float *g, int64_t M, int64_t N, const float *w, int64_t K, int threads) {
  std::vector<float> gb(g, g + M * N);
  for (float &v : gb) v = roundBf16(v);
  // dX[m][k] = sum over n of gb[m][n] * w[n][k]: the k_chunks GEMM of gb [M][N] against W^T [K][N].
  const std::vector<float> wt = grad_detail::transposeRows(w, K, 0, N, [](float v) { return v; });
  std::vector<float> dx(size_t(M * K));
  cpu::gemmKChunks(gb.data(), M, N, wt.data(), K, dx.data(), threads);
  return dx;
}

std::vector<float> linearDw(const float *g, const float *x, const ItemRows &items, int64_t N, int64_t K,
                            int threads) {
  grad_detail::checkItems(items, "linearDw");
  auto bf = [](float v) { return roundBf16(v); };
  return grad_detail::foldUnits(items, size_t(N * K), [&](int64_t r0, int64_t r1, float *out) {
    // The unit's rows are the GEMM's K: gb^T [N][R] against xb^T [K][R].
    const std::vector<float> gt = grad_detail::transposeRows(g, N, r0, r1, bf);
    const std::vector<float> xt = grad_detail::transposeRows(x, K, r0, r1, bf);
    cpu::gemmKChunks(gt.data(), N, r1 - r0, xt.data(), K, out, threads);
  });
}

std::vector<float> biasGrad(const float *g, const ItemRows &items, int64_t N) {
  grad_detail::checkItems(items, "biasGrad");
  return grad_detail::foldUnits(items, size_t(N), [&](int64_t r0, int64_t r1, float *out) {
    for (int64_t n = 0; n < N; ++n) {
      float acc = 0.f;
      for (int64_t r = r0; r < r1; ++r) acc = acc + g[r * N + n];
      out[n] = acc;
    }
  });
}

std::vector<float> linearDxF32(const float *g, int64_t M, int64_t N, const float *w, int64_t K, int threads) {
  std::vector<float> dx(size_t(M * K));
  parallelFor(M, threads, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m)
      for (int64_t k = 0; k < K; ++k) {
        float acc = 0.f;
        for (int64_t n = 0; n < N; ++n) acc = std::fmaf(g[m * N + n], w[n * K + k], acc);
        dx[size_t(m * K + k)] = acc;
      }
  });
  return dx;
}

std::vector<float> linearDwF32(const float *g, const float *x, const ItemRows &items, int64_t N, int64_t K,
                               int threads) {
  grad_detail::checkItems(items, "linearDwF32");
  return grad_detail::foldUnits(items, size_t(N * K), [&](int64_t r0, int64_t r1, float *out) {
    parallelFor(N, threads, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n)
        for (int64_t k = 0; k < K; ++k) {
          float acc = 0.f;
          for (int64_t r = r0; r < r1; ++r) acc = std::fmaf(g[r * N + n], x[r * K + k], acc);
          out[n * K + k] = acc;
        }
    });
  });
}

} // namespace h3c::rt::grad
