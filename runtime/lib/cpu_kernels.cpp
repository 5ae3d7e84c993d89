#include "cpu_kernels.h"

#include "h3c/support/detmath.h"
#include "h3c/runtime/cpu_ops.h"
#include "h3c/support/dtype.h"
#include "h3c/support/error.h"

#include <algorithm>
#include <cstring>
#include <cmath>
#include <limits>

// The vector-extension helpers below pass 32-byte vectors between always-inlined functions; GCC warns about the
// non-AVX calling convention, which never applies since nothing crosses an ABI boundary.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace h3c::rt::cpu {

namespace {

constexpr int64_t kStep = 16;

// One 16-wide chunk in double: four strided lanes then (s0 + s1) + (s2 + s3). The products of bf16 or f32 values are
// exact in double, so only the additions round; the fixed shape makes the result independent of everything else.
inline float chunkDot(const float *a, const float *b, int64_t len) {
  double s[4] = {0, 0, 0, 0};
  if (len == kStep) {
    for (int j = 0; j < 16; j += 4)
      for (int l = 0; l < 4; ++l)
        s[l] += double(a[j + l]) * double(b[j + l]);
  } else {  // the last, zero-padded chunk: padding contributes exact zeros in the same positions
    for (int64_t j = 0; j < len; ++j)
      s[j & 3] += double(a[j]) * double(b[j]);
  }
  return float((s[0] + s[1]) + (s[2] + s[3]));
}

// Sum of one unit [k0, k1): F32 accumulator from 0 adding the chunks in ascending order.
inline float unitSum(const float *a, const float *b, int64_t k0, int64_t k1) {
  float acc = 0.f;
  for (int64_t k = k0; k < k1; k += kStep)
    acc = acc + chunkDot(a + k, b + k, std::min(kStep, k1 - k));
  return acc;
}

} // namespace

namespace {

typedef double v4d __attribute__((vector_size(32)));

// By reference, not by value: a vector passed by value to or from the non-AVX clone is an ABI change clang refuses.
inline void load4(v4d &v, const double *p) { std::memcpy(&v, p, sizeof v); }

// The chunk value for the lane layout of chunkDot: s = (((0 + p[0:4]) + p[4:8]) + p[8:12]) + p[12:16] per lane l,
// then (s0 + s1) + (s2 + s3), rounded to F32. Vector lanes are exactly chunkDot's s[l], so every ISA the clones
// target gives the same bits (no FMA: h3c builds with -ffp-contract=off, and the products are exact anyway).
inline float chunkValue(const v4d &s) { return float((s[0] + s[1]) + (s[2] + s[3])); }

// Chains of up to 4 rows against one weight row (both converted to double and zero-padded to whole chunks): out[r]
// = the F32 accumulator from 0 after adding the 16-wide chunks of [0, Kp) in ascending order.
__attribute__((target_clones("avx2", "default"))) void chainSums4(const double *const *xr, int rows, const double *wd,
                                                                    int64_t Kp, float *out) {
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int64_t k = 0; k < Kp; k += 16) {
    v4d w0, w1, w2, w3, x0, x1, x2, x3;
    load4(w0, wd + k);
    load4(w1, wd + k + 4);
    load4(w2, wd + k + 8);
    load4(w3, wd + k + 12);
    for (int r = 0; r < rows; ++r) {
      const double *x = xr[r] + k;
      v4d s = {0, 0, 0, 0};
      load4(x0, x);
      load4(x1, x + 4);
      load4(x2, x + 8);
      load4(x3, x + 12);
      s += x0 * w0;
      s += x1 * w1;
      s += x2 * w2;
      s += x3 * w3;
      acc[r] = acc[r] + chunkValue(s);
    }
  }
  for (int r = 0; r < rows; ++r)
    out[r] = acc[r];
}

} // namespace

void gemmKChunks(const float *x, int64_t M, int64_t K, const float *w, int64_t N, float *y, int threads) {
  // One chain over K with the last chunk zero-padded (padding contributes exact zeros).
  const int64_t Kp = (K + kStep - 1) / kStep * kStep;
  std::vector<double> xd(static_cast<size_t>(M * Kp), 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k)
      xd[size_t(m * Kp + k)] = double(x[m * K + k]);
  parallelFor(N, threads, [&](int64_t n0, int64_t n1) {
    std::vector<double> wd(static_cast<size_t>(Kp), 0.0);
    float out[4];
    const double *xr[4];
    for (int64_t n = n0; n < n1; ++n) {
      for (int64_t k = 0; k < K; ++k)
        wd[size_t(k)] = double(w[n * K + k]);
      for (int64_t m0 = 0; m0 < M; m0 += 4) {
        const int rows = int(std::min<int64_t>(4, M - m0));
        for (int r = 0; r < rows; ++r)
          xr[r] = xd.data() + (m0 + r) * Kp;
        chainSums4(xr, rows, wd.data(), Kp, out);
        for (int r = 0; r < rows; ++r)
          y[(m0 + r) * N + n] = out[r];
      }
    }
  });
}

void gemmSeqFma(const float *x, int64_t M, int64_t K, const float *w, int64_t N, float *y, int threads) {
  parallelFor(N, threads, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n)
      for (int64_t m = 0; m < M; ++m) {
        float acc = 0.f;
        for (int64_t k = 0; k < K; ++k)
          acc = std::fmaf(x[m * K + k], w[n * K + k], acc);
        y[m * N + n] = acc;
      }
  });
}

void gemmFp64(const float *x, int64_t M, int64_t K, const float *w, int64_t N, const float *bias, float *y,
              int threads) {
  parallelFor(N, threads, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n)
      for (int64_t m = 0; m < M; ++m) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k)
          s += double(x[m * K + k]) * double(w[n * K + k]);
        if (bias)
          s += double(bias[n]);
        y[m * N + n] = float(s);
      }
  });
}

float invRms(const float *x, int64_t n, double eps, bool exact) {
  if (exact) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i)
      ss += double(x[i]) * double(x[i]);
    return float(1.0 / std::sqrt(ss / double(n) + eps));
  }
  float ss = laneTreeSumSquares(x, n);
  return 1.0f / std::sqrt(ss / float(n) + float(eps));
}

void normRow(const float *x, int64_t n, const float *w, float inv, float *y) {
  for (int64_t i = 0; i < n; ++i) {
    float nv = roundBf16(x[i] * inv);
    y[i] = w ? roundBf16(nv * w[i]) : nv;
  }
}

void rmsRow(const float *x, int64_t n, const float *w, double eps, bool exact, float *y) {
  normRow(x, n, w, invRms(x, n, eps, exact), y);
}

float flashExp2Scale(int64_t d) { return float(1.0 / std::sqrt(double(d)) * 1.4426950408889634074); }

float laneTreeSumSquares(const float *x, int64_t n) { return laneTreeDot(x, x, n); }

float laneTreeDot(const float *a, const float *b, int64_t n) {
  float part[32];
  for (int l = 0; l < 32; ++l) {
    float acc = 0.f;
    for (int64_t j = l; j < n; j += 32)
      acc = std::fmaf(a[j], b[j], acc);
    part[l] = acc;
  }
  for (int off = 16; off >= 1; off /= 2)
    for (int l = 0; l < off; ++l)
      part[l] = part[l] + part[l + off];
  return part[0];
}

float siluF(float x) { return detmath::silu(x); }

float chainDot(const float *a, const float *b, int64_t n) { return unitSum(a, b, 0, n); }

void flashRow(const float *q, const float *k, const float *v, int64_t ld, int64_t n, int64_t d, float c,
              int64_t kBlock, float *out, float *stats) {
  float m = -std::numeric_limits<float>::infinity(), l = 0.f;
  std::vector<float> o(size_t(d), 0.f), s(kBlock), p(kBlock), pv(kBlock);
  for (int64_t b0 = 0; b0 < n; b0 += kBlock) {
    const int64_t bn = std::min(kBlock, n - b0);
    float mb = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < bn; ++j) {
      s[size_t(j)] = unitSum(q, k + (b0 + j) * ld, 0, d);  // raw scores: the scale is folded into c
      mb = std::max(mb, s[size_t(j)]);
    }
    const float mNew = std::max(m, mb), mc = mNew * c;
    // The GPU's ex2 is the MUFU instruction; std::exp2 differs from it by an ulp at most, inside the bound.
    const float alpha = std::exp2(std::fmaf(m, c, -mc));  // exp2(-inf) = 0 on the first block
    float rowSum = 0.f;
    for (int64_t j = 0; j < bn; ++j) {
      p[size_t(j)] = roundBf16(std::exp2(std::fmaf(s[size_t(j)], c, -mc)));
      rowSum = rowSum + p[size_t(j)];
    }
    l = l * alpha + rowSum;
    // o = o * alpha + P V: per channel, the block's keys summed as k_chunks (16-wide chunks in double, F32 acc).
    for (int64_t c = 0; c < d; ++c) {
      for (int64_t j = 0; j < bn; ++j)
        pv[size_t(j)] = v[(b0 + j) * ld + c];
      float acc = unitSum(p.data(), pv.data(), 0, bn);
      o[size_t(c)] = o[size_t(c)] * alpha + acc;
    }
    m = mNew;
  }
  for (int64_t c = 0; c < d; ++c)
    out[c] = o[size_t(c)] / l;
  if (stats) {
    stats[0] = m * c;
    stats[1] = l;
  }
}

void attentionRowFp64(const float *q, const float *k, const float *v, int64_t ld, int64_t n, int64_t d,
                      double scale, float *out) {
  std::vector<double> s(static_cast<size_t>(n));
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    double acc = 0;
    for (int64_t c = 0; c < d; ++c)
      acc += double(q[c]) * double(k[j * ld + c]);
    s[size_t(j)] = acc * scale;
    mx = std::max(mx, s[size_t(j)]);
  }
  double l = 0;
  for (auto &x : s) {
    x = std::exp(x - mx);
    l += x;
  }
  for (int64_t c = 0; c < d; ++c) {
    double acc = 0;
    for (int64_t j = 0; j < n; ++j)
      acc += s[size_t(j)] * double(v[j * ld + c]);
    out[c] = float(acc / l);
  }
}

} // namespace h3c::rt::cpu
