// MiniMaxH3Scheduler in F32, reproducing torch's CPU arithmetic (see sampler.h for the formulas). The build uses
// -ffp-contract=off, so every fused multiply-add below is explicit (std::fmaf) and every other product is rounded.
#include "h3c/trajectory/sampler.h"

#include "h3c/support/error.h"
#include "h3c/support/philox.h"

#include <cmath>

namespace h3c::rt {

// ATen's linspace_kernel (aten/src/ATen/native/cpu/RangeFactoriesKernel.cpp): step = (end - start) / (steps - 1)
// in the tensor's dtype, then the symmetric form `start + step*idx` for the first half and `end - step*(steps-idx-1)`
// for the second. That file is compiled once per CPU capability; the AVX2 and AVX-512 variants (what torch runs on
// any current x86 host) get -mfma, and GCC contracts a*b+c into an fma in C++ at its default -ffp-contract=fast
// (PyTorch issue #47043 shows the same contraction in arange). So each element is one fused operation. Confirmed
// against torch 2.11 (CPU capability AVX512) on the H200 host: test/fixtures/sampler/torch_sigmas.json, 186 grids,
// all equal bit for bit (an unfused evaluation matches only 74 of them).
std::vector<float> linspaceF32(float start, float end, int64_t steps) {
  if (steps < 1)
    fail("linspace", "steps must be >= 1, got {}", steps);
  std::vector<float> out(static_cast<size_t>(steps));
  if (steps == 1) {
    out[0] = start;
    return out;
  }
  const float step = (end - start) / float(steps - 1);
  const int64_t halfway = steps / 2;
  for (int64_t i = 0; i < steps; ++i)
    out[size_t(i)] = i < halfway ? std::fmaf(step, float(i), start) : std::fmaf(-step, float(steps - i - 1), end);
  return out;
}

MiniMaxH3Scheduler::MiniMaxH3Scheduler(double shift) : shift_(shift) {
  if (!(shift > 0) || !std::isfinite(shift))
    fail("--shift", "the sigma shift must be positive, got {}", shift);
}

void MiniMaxH3Scheduler::setTimesteps(int64_t n) {
  if (n < 2)
    fail("--steps", "the sampler needs at least 2 grid points (terminal 0 included), got {}", n);
  const std::vector<float> base = linspaceF32(1.0f, 0.0f, n);
  // torch promotes the Python-float scalars to the tensor's F32: s and (s - 1) (computed in double first).
  const float s = float(shift_), sm1 = float(shift_ - 1.0);
  sigmas_.clear();
  for (float b : base) {
    float num = s * b;
    float den = 1.0f + sm1 * b;
    float sigma = num / den;
    if (sigmas_.empty() || sigma != sigmas_.back())  // unique_consecutive
      sigmas_.push_back(sigma);
  }
  if (sigmas_.size() < 2 || sigmas_.back() != 0.0f)
    fail("--steps", "degenerate sigma grid for {} points and shift {}", n, shift_);
  timesteps_.clear();
  for (size_t i = 0; i + 1 < sigmas_.size(); ++i)
    timesteps_.push_back(1.0f - sigmas_[i]);
}

void MiniMaxH3Scheduler::step(int64_t i, const float *v, float *x, size_t n) const {
  if (i < 0 || i >= numSteps())
    fail("sampler", "step {} out of range [0, {})", i, numSteps());
  const float sigmaT = 1.0f - timesteps_[size_t(i)];
  const float r = sigmas_[size_t(i) + 1] / sigmas_[size_t(i)];
  const float oneMinusR = 1.0f - r;
  for (size_t k = 0; k < n; ++k) {
    const float sv = sigmaT * v[k];
    const float x0 = x[k] + sv;
    const float a = r * x[k];
    const float b = oneMinusR * x0;
    x[k] = a + b;
  }
}

SdeConstants sdeConstants(const MiniMaxH3Scheduler &s, int64_t i, double noiseLevel) {
  if (i < 0 || i >= s.numSteps())
    fail("sampler", "step {} out of range [0, {})", i, s.numSteps());
  if (!(noiseLevel > 0) || !std::isfinite(noiseLevel))
    fail("--noise-level", "the SDE noise level must be positive, got {}", noiseLevel);
  const float a = float(noiseLevel);
  const float sigma = s.sigmas()[size_t(i)], next = s.sigmas()[size_t(i) + 1];
  const float dt = next - sigma;
  const float s1 = sigma == 1.0f ? s.sigmas()[1] : sigma;
  SdeConstants k;
  const float ratio = sigma / (1.0f - s1);
  k.std = std::sqrt(ratio) * a;
  const float sq = std::sqrt(-dt);
  k.scale = k.std * sq;
  const float var = k.std * k.std;
  const float twoSigma = 2.0f * sigma;
  const float q = var / twoSigma;
  k.coef = q * dt;
  if (!(k.scale > 0) || !std::isfinite(k.scale) || !std::isfinite(k.coef))
    fail("sampler", "step {}: degenerate SDE noise scale {} (sigma {}, noise level {})", i, k.scale, sigma, noiseLevel);
  k.logScale = std::log(double(k.scale));
  return k;
}

double sdeStep(const MiniMaxH3Scheduler &s, int64_t i, const SdeConstants &k, const float *v, const float *z, float *x,
               float *mean, size_t n) {
  const float t = s.timesteps()[size_t(i)];
  double sumSq = 0.0;
  for (size_t e = 0; e < n; ++e) {
    const float tv = t * v[e];
    const float eps = x[e] - tv;
    float ode = x[e];
    s.step(i, &v[e], &ode, 1);  // the Euler update, the same F32 operations
    const float drift = k.coef * eps;
    const float mu = ode + drift;
    const float noise = k.scale * z[e];
    const float nx = mu + noise;
    mean[e] = mu;
    x[e] = nx;
    const double d = double(nx) - double(mu);
    const double d2 = d * d;
    sumSq = sumSq + d2;
  }
  return sumSq;
}

double sdeLogProb(double sumSq, const SdeConstants &k, int64_t n) {
  const double q = double(k.scale) * double(k.scale);
  const double quad = sumSq / (2.0 * q);
  const double norm = double(n) * (k.logScale + kLogSqrt2Pi);
  return -quad - norm;
}

void philoxNormals(uint64_t seed, uint32_t modality, uint32_t draw, int64_t count, float *out) {
  if (count < 0)
    fail("noise", "negative element count {}", count);
  for (int64_t e = 0; e < count; e += 2) {
    const uint64_t pair = uint64_t(e) >> 1;
    philox::Block c{{uint32_t(pair), uint32_t(pair >> 32), modality, draw}};
    float z0, z1;
    philox::normalPair(philox::philox4x32(c, uint32_t(seed), uint32_t(seed >> 32)), z0, z1);
    out[e] = z0;
    if (e + 1 < count)
      out[e + 1] = z1;
  }
}

} // namespace h3c::rt
