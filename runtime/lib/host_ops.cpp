#include "h3c/runtime/host_ops.h"

#include <cmath>

namespace h3c::rt {

void ropeTable(const h3::Config &c, const int64_t *positions, int64_t S, std::vector<float> &cos,
               std::vector<float> &sin) {
  const int f = c.rope_freq_dim, R = 6 * f;
  // inv_freq as diffusers builds it: F32 buffer of 1/theta^(2i/(2f)) (computed in double here, rounded to F32).
  std::vector<float> inv(static_cast<size_t>(f));
  for (int i = 0; i < f; ++i)
    inv[size_t(i)] = float(1.0 / std::pow(c.rope_theta, double(2 * i) / double(2 * f)));
  cos.assign(size_t(S * R), 0.f);
  sin.assign(size_t(S * R), 0.f);
  for (int64_t s = 0; s < S; ++s)
    for (int axis = 0; axis < 3; ++axis) {
      // position_ids.to(float32) * inv_freq: one F32 product, as torch computes it.
      float pos = float(positions[s * 3 + axis]);
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
