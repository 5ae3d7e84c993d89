// The backward's CPU reference (grad_ops.h; docs/contract.md section 14). The bf16 GEMMs are the forward's
// k_chunks kernel (cpu_kernels.h) on transposed operands: dX reduces over N, a dW unit over its rows, so both are
// the same chain with another axis as K. Row units are folded per item, then items in batch order.
#include "h3c/runtime/grad_ops.h"

#include "cpu_kernels.h"
#include "h3c/runtime/cpu_ops.h"
#include "h3c/support/detmath.h"
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
  std::vector<float> t(static_cast<size_t>(cols * R));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < cols; ++c) t[size_t(c * R + r)] = f(a[(r0 + r) * cols + c]);
  return t;
}

// row_units per table row: for every table row, the fold of its token rows' unit chains (`term(r, acc)` adds row
// r's C terms to acc), the token rows of other table rows left out; a table row no token reads stays 0.
template <class Term>
std::vector<float> foldTableRows(const TableRows &rows, const ItemRows &items, int64_t C, Term term) {
  checkItems(items, "table gradient");
  if (int64_t(rows.row.size()) != items.back())
    fail("table gradient", "{} table row indices for {} token rows", rows.row.size(), items.back());
  for (int64_t t : rows.row)
    if (t < 0 || t >= rows.count) fail("table gradient", "table row {} outside [0, {})", t, rows.count);
  std::vector<float> out(size_t(rows.count * C), 0.f);
  std::vector<float> part(static_cast<size_t>(C));
  for (int64_t t = 0; t < rows.count; ++t) {
    const std::vector<float> s = foldUnits(items, size_t(C), [&](int64_t r0, int64_t r1, float *u) {
      std::fill(u, u + C, 0.f);
      for (int64_t r = r0; r < r1; ++r)
        if (rows.row[size_t(r)] == t) term(r, u);
    });
    std::copy(s.begin(), s.end(), out.begin() + t * C);
  }
  return out;
}

// silu'(x) = s * (1 + x * (1 - s)), s = 1 / (1 + expf(-x)) (the forward's expf), innermost first.
float siluDerivative(float x) {
  const float s = 1.0f / (1.0f + detmath::expf(-x));
  return s * (1.0f + x * (1.0f - s));
}

} // namespace grad_detail

float addFtz(float a, float b) {
  auto flush = [](float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; };
  return flush(flush(a) + flush(b));
}

std::vector<float> linearDx(const float *g, int64_t M, int64_t N, const float *w, int64_t K, int threads) {
  std::vector<float> gb(g, g + M * N);
  for (float &v : gb) v = roundBf16(v);
  // dX[m][k] = sum over n of gb[m][n] * w[n][k]: the k_chunks GEMM of gb [M][N] against W^T [K][N].
  const std::vector<float> wt = grad_detail::transposeRows(w, K, 0, N, [](float v) { return v; });
  std::vector<float> dx(static_cast<size_t>(M * K));
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
  std::vector<float> dx(static_cast<size_t>(M * K));
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

GateResidualGrad gateResidualGrad(const float *dz, const float *y, const float *gate, const TableRows &rows,
                                  const ItemRows &items, int64_t C) {
  GateResidualGrad g;
  if (y)
    g.dgate = grad_detail::foldTableRows(rows, items, C, [&](int64_t r, float *acc) {
      for (int64_t c = 0; c < C; ++c) acc[c] = std::fmaf(dz[r * C + c], y[r * C + c], acc[c]);
    });
  const int64_t M = items.back();
  g.dy.resize(size_t(M * C));
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < C; ++c) g.dy[size_t(r * C + c)] = dz[r * C + c] * gate[rows.row[size_t(r)] * C + c];
  return g;
}

std::vector<float> swigluGrad(const float *dy, const float *x, int64_t M, int64_t F) {
  std::vector<float> dx(static_cast<size_t>(M * 2 * F));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t f = 0; f < F; ++f) {
      const float v = x[m * 2 * F + f], g = x[m * 2 * F + F + f], d = dy[m * F + f];
      dx[size_t(m * 2 * F + f)] = d * roundBf16(detmath::silu(g));
      dx[size_t(m * 2 * F + F + f)] = (d * v) * grad_detail::siluDerivative(g);
    }
  return dx;
}

namespace grad_detail {

// The forward's inv (cpu::invRms, ordered) of each d-channel group of every row of x [M][C], row-major.
std::vector<float> groupInverses(const float *x, int64_t M, int64_t C, int64_t d, double eps) {
  std::vector<float> inv(static_cast<size_t>(M * (C / d)));
  for (size_t u = 0; u < inv.size(); ++u) inv[u] = cpu::invRms(x + int64_t(u) * d, d, eps, false);
  return inv;
}

// rmsNormGrad with the groups' inv given: per group dx = inv * (dn - xu * (d / n)), xu = x * inv, dn = dy * w; dw by
// row_units over the (row, group) pairs of dy * bf(xu).
NormGrad rmsNormGradWith(const float *dy, const float *x, const float *w, const std::vector<float> &inv,
                         const ItemRows &items, int64_t C, int64_t d, bool wantW) {
  const int64_t M = items.back(), G = C / d;
  NormGrad g;
  g.dx.resize(size_t(M * C));
  std::vector<float> dn(static_cast<size_t>(d)), xu(static_cast<size_t>(d));
  for (int64_t u = 0; u < M * G; ++u) {
    const float *xr = x + u * d, *dr = dy + u * d, iv = inv[size_t(u)];
    for (int64_t j = 0; j < d; ++j) {
      dn[size_t(j)] = w ? dr[j] * w[j] : dr[j];
      xu[size_t(j)] = xr[j] * iv;
    }
    const float mean = cpu::laneTreeDot(dn.data(), xu.data(), d) / float(d);
    for (int64_t j = 0; j < d; ++j) g.dx[size_t(u * d + j)] = iv * (dn[size_t(j)] - xu[size_t(j)] * mean);
  }
  if (w && wantW)
    g.dw = foldUnits(items, size_t(d), [&](int64_t r0, int64_t r1, float *acc) {
      std::fill(acc, acc + d, 0.f);
      for (int64_t u = r0 * G; u < r1 * G; ++u)
        for (int64_t j = 0; j < d; ++j)
          acc[j] = std::fmaf(dy[u * d + j], roundBf16(x[u * d + j] * inv[size_t(u)]), acc[j]);
    });
  return g;
}

} // namespace grad_detail

NormGrad rmsNormGrad(const float *dy, const float *x, const float *w, const ItemRows &items, int64_t C, int64_t d,
                     double eps, bool wantW) {
  grad_detail::checkItems(items, "rmsNormGrad");
  if (d <= 0 || C % d) fail("rmsNormGrad", "{} columns are no whole number of {}-channel groups", C, d);
  return grad_detail::rmsNormGradWith(dy, x, w, grad_detail::groupInverses(x, items.back(), C, d, eps), items, C, d,
                                      wantW);
}

NormModulateGrad normModulateGrad(const float *dy, const float *x, const float *w, const float *scale,
                                  const TableRows &rows, const ItemRows &items, int64_t H, double eps, bool wantW,
                                  bool wantTable) {
  grad_detail::checkItems(items, "normModulateGrad");
  // n = rms_norm(x) as the forward stored it (bf16), the modulation's input; inv once per row for n and the norm's
  // gradient.
  const int64_t M = items.back();
  const std::vector<float> inv = grad_detail::groupInverses(x, M, H, H, eps);
  std::vector<float> n(static_cast<size_t>(M * H));
  for (int64_t r = 0; r < M; ++r) cpu::normRow(x + r * H, H, w, inv[size_t(r)], &n[size_t(r * H)]);
  NormModulateGrad g;
  if (wantTable) {
    g.dshift = grad_detail::foldTableRows(rows, items, H, [&](int64_t r, float *acc) {
      for (int64_t c = 0; c < H; ++c) acc[c] = acc[c] + dy[r * H + c];
    });
    g.dscale = grad_detail::foldTableRows(rows, items, H, [&](int64_t r, float *acc) {
      for (int64_t c = 0; c < H; ++c) acc[c] = std::fmaf(dy[r * H + c], n[size_t(r * H + c)], acc[c]);
    });
  }
  // The norm's gradient: dn = dy * bf(1 + scale), then rms_norm's dx and dw.
  std::vector<float> dn(static_cast<size_t>(M * H));
  for (int64_t r = 0; r < M; ++r) {
    const float *sc = scale + rows.row[size_t(r)] * H;
    for (int64_t c = 0; c < H; ++c) dn[size_t(r * H + c)] = dy[r * H + c] * roundBf16(1.0f + sc[c]);
  }
  NormGrad ng = grad_detail::rmsNormGradWith(dn.data(), x, w, inv, items, H, H, wantW);
  g.dx = std::move(ng.dx);
  g.dw = std::move(ng.dw);
  return g;
}

std::vector<float> ropeGrad(const float *dy, const float *cos, const float *sin, int64_t M, int64_t heads, int64_t d,
                            int64_t R) {
  if (R % 2 || R > d) fail("ropeGrad", "rotary width {} must be even and at most the head's {}", R, d);
  const int64_t C = heads * d, h2 = R / 2;
  std::vector<float> dx(dy, dy + M * C);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t h = 0; h < heads; ++h) {
      const float *g = dy + m * C + h * d;
      float *o = &dx[size_t(m * C + h * d)];
      const float *cr = cos + m * R, *sr = sin + m * R;
      for (int64_t i = 0; i < h2; ++i) {
        const float c0 = roundBf16(cr[i]), c1 = roundBf16(cr[i + h2]), s0 = roundBf16(sr[i]),
                    s1 = roundBf16(sr[i + h2]);
        o[i] = g[i] * c0 + g[i + h2] * s1;
        o[i + h2] = g[i + h2] * c1 - g[i] * s0;
      }
    }
  return dx;
}

AttentionGrad attentionGrad(const float *q, const float *k, const float *v, const float *o, const float *dO,
                            const ItemRows &items, int64_t heads, int64_t d, int64_t kvBlock, const float *lse) {
  grad_detail::checkItems(items, "attentionGrad");
  const int64_t C = heads * d, M = items.back();
  // The forward's pinned constant (section 4) and the backward's scale of dS (in double, rounded once).
  const float c = cpu::flashExp2Scale(d), scale = float(1.0 / std::sqrt(double(d)));
  AttentionGrad g;
  g.dq.assign(size_t(M * C), 0.f);
  g.dk.assign(size_t(M * C), 0.f);
  g.dv.assign(size_t(M * C), 0.f);
  for (size_t b = 0; b + 1 < items.size(); ++b) {
    const int64_t r0 = items[b], n = items[b + 1] - r0;
    if (n == 0) continue;
    for (int64_t h = 0; h < heads; ++h) {
      auto at = [&](const float *a, int64_t r) { return a + (r0 + r) * C + h * d; };
      // P and bf(dS) of this item and head, [query][key].
      std::vector<float> dSb(size_t(n * n)), Pb(size_t(n * n)), outRow(static_cast<size_t>(d)),
          dOb(static_cast<size_t>(d)), stats(2);
      for (int64_t i = 0; i < n; ++i) {
        if (!lse) cpu::flashRow(at(q, i), at(k, 0), at(v, 0), C, n, d, c, kvBlock, outRow.data(), stats.data());
        const float L = lse ? lse[(r0 + i) * heads + h] : stats[0] + std::log2(stats[1]);
        float D = 0.f;
        for (int64_t e = 0; e < d; ++e) D = std::fmaf(at(dO, i)[e], at(o, i)[e], D);
        for (int64_t e = 0; e < d; ++e) dOb[size_t(e)] = roundBf16(at(dO, i)[e]);
        for (int64_t j = 0; j < n; ++j) {
          const float s = cpu::chainDot(at(q, i), at(k, j), d);
          const float p = std::exp2(std::fmaf(s, c, -L));
          const float dP = cpu::chainDot(dOb.data(), at(v, j), d);
          Pb[size_t(i * n + j)] = roundBf16(p);
          dSb[size_t(i * n + j)] = roundBf16(p * (dP - D));
        }
      }
      // dq_i: per block of 128 keys (ascending) the chain over its keys of bf(dS_ij) k_j, the blocks' partials
      // folded from +0 in block order by flush-to-zero adds (s = 0 + b_0, then s + b_1, ...), then the scale.
      std::vector<float> col(static_cast<size_t>(n)), col2(static_cast<size_t>(n));
      for (int64_t e = 0; e < d; ++e) {
        for (int64_t j = 0; j < n; ++j) col[size_t(j)] = at(k, j)[e];
        for (int64_t i = 0; i < n; ++i) {
          float s = 0.f;
          for (int64_t j0 = 0; j0 < n; j0 += kDqKeyBlock)
            s = addFtz(s, cpu::chainDot(&dSb[size_t(i * n + j0)], &col[size_t(j0)], std::min(kDqKeyBlock, n - j0)));
          g.dq[size_t((r0 + i) * C + h * d + e)] = scale * s;
        }
      }
      // dk_j and dv_j: one chain over the item's query rows (16-row chunks ascending from 0) of w[i] * value(i, e).
      std::vector<float> x(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t i = 0; i < n; ++i) {
          col[size_t(i)] = dSb[size_t(i * n + j)];
          col2[size_t(i)] = Pb[size_t(i * n + j)];
        }
        for (int64_t e = 0; e < d; ++e) {
          for (int64_t i = 0; i < n; ++i) x[size_t(i)] = at(q, i)[e];
          g.dk[size_t((r0 + j) * C + h * d + e)] = scale * cpu::chainDot(col.data(), x.data(), n);
          for (int64_t i = 0; i < n; ++i) x[size_t(i)] = roundBf16(at(dO, i)[e]);
          g.dv[size_t((r0 + j) * C + h * d + e)] = cpu::chainDot(col2.data(), x.data(), n);
        }
      }
    }
  }
  return g;
}

std::vector<float> siluGrad(const float *dy, const float *x, int64_t n) {
  std::vector<float> dx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) dx[size_t(i)] = dy[i] * grad_detail::siluDerivative(x[i]);
  return dx;
}

AdalnTableGrad adalnTableGrad(const float *g, const float *temb, const float *w, int64_t T, int64_t N, int64_t E,
                              int threads, bool wantW, bool wantBias) {
  std::vector<float> a(static_cast<size_t>(T * E));
  for (int64_t i = 0; i < T * E; ++i) a[size_t(i)] = roundBf16(detmath::silu(temb[i]));
  const ItemRows one = {0, T};
  AdalnTableGrad r;
  if (wantW) r.dw = linearDw(g, a.data(), one, N, E, threads);
  if (wantBias) r.dbias = biasGrad(g, one, N);
  r.dtemb = linearDx(g, T, N, w, E, threads);
  for (int64_t i = 0; i < T * E; ++i) r.dtemb[size_t(i)] = r.dtemb[size_t(i)] * grad_detail::siluDerivative(temb[i]);
  return r;
}

} // namespace h3c::rt::grad
