#include "h3c/runtime/host_ops.h"

#include "h3c/runtime/cpu_ops.h"

#include <cmath>

namespace h3c::rt {

void ropeTable(const h3::Config &c, const float *positions, int64_t S, std::vector<float> &cos,
               std::vector<float> &sin, int threads) {
  const int f = c.rope_freq_dim, R = 6 * f;
  const std::vector<float> inv = rt::ropeInvFreq(c);  // not h3::ropeInvFreq (found by ADL)
  cos.assign(size_t(S * R), 0.f);
  sin.assign(size_t(S * R), 0.f);
  parallelFor(S, threads, [&](int64_t s0, int64_t s1) {
  for (int64_t s = s0; s < s1; ++s)
    for (int axis = 0; axis < 3; ++axis) {
      // position_ids (already F32) * inv_freq: one F32 product, as torch computes it.
      const float pos = positions[s * 3 + axis];
      for (int i = 0; i < f; ++i) {
        float angle = pos * inv[size_t(i)];
        float cv = float(std::cos(double(angle))), sv = float(std::sin(double(angle)));
        for (int rep = 0; rep < 2; ++rep) {
          size_t col = size_t(rep * 3 * f + axis * f + i);
          cos[size_t(s * R) + col] = cv;
          sin[size_t(s * R) + col] = sv;
        }
      }
    }
  });
}

std::vector<float> ropeInvFreq(const h3::Config &c) {
  // diffusers: 1.0 / (theta ** (torch.arange(0, 2f, 2, dtype=float32) / (2f))), all in float32: the exponent
  // fl(2i / 2f), the power rounded to F32 (computed in double and rounded once; torch's float32 pow is within an
  // ulp of it: scripts/gpu-diffusers-check.sh compares this buffer with diffusers'), then one F32 division.
  const int f = c.rope_freq_dim;
  const float theta = float(c.rope_theta);
  std::vector<float> inv(static_cast<size_t>(f));
  for (int i = 0; i < f; ++i) {
    const float e = float(2 * i) / float(2 * f);
    const float p = float(std::pow(double(theta), double(e)));
    inv[size_t(i)] = 1.0f / p;
  }
  return inv;
}

std::vector<float> timestepSinusoid(const h3::Config &c, const std::vector<float> &t) {
  const int half = c.freq_dim / 2;
  std::vector<float> out(t.size() * size_t(c.freq_dim));
  for (size_t r = 0; r < t.size(); ++r)
    for (int i = 0; i < half; ++i) {
      // freq_i = exp(-ln(10000) * i / half) as an F32 value; arg = t * freq in F32; cos/sin in double, rounded.
      float freq = float(std::exp(-std::log(10000.0) * double(i) / double(half)));
      float arg = t[r] * freq;
      out[r * size_t(c.freq_dim) + size_t(i)] = float(std::cos(double(arg)));
      out[r * size_t(c.freq_dim) + size_t(half + i)] = float(std::sin(double(arg)));
    }
  return out;
}

} // namespace h3c::rt
