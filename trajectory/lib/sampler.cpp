// MiniMaxH3Scheduler in F32, reproducing torch's CPU arithmetic (see sampler.h for the formulas). The build uses
// -ffp-contract=off, so every fused multiply-add below is explicit (std::fmaf) and every other product is rounded.
#include "h3c/trajectory/sampler.h"

#include "h3c/support/error.h"
#include "h3c/support/synth_rng.h"

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

std::vector<float> initialNoise(uint64_t seed, const std::string &name, int64_t count) {
  if (count < 0)
    fail(name, "negative element count {}", count);
  const auto key = synth::tensorKey(seed, name.data(), name.size());
  const double scale = 1.0 * H3C_SYNTH_UNIT_SCALE;
  std::vector<float> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    out[size_t(i)] = synth::normalish(key, uint64_t(i), scale);
  return out;
}

} // namespace h3c::rt
