// The MiniMax-H3 sampler: diffusers' MiniMaxH3Scheduler (rectified-flow Euler, eta 0), bit for bit in F32, and the
// initial noise. Model-independent: generate (tools/h3c/cmd_generate.cpp) drives it with the executor's velocities.
//
// Schedule (set_timesteps(N)), every operation one F32 rounding, as torch evaluates it on the CPU:
//   base[i]  = torch.linspace(1, 0, N): step = fl(-1 / float(N-1)); i < N/2: fl(1 + step*i), else
//              fl(0 - step*(N-1-i)), each product-and-add fused (fma): PyTorch builds its CPU kernels with -mfma for
//              AVX2/AVX-512 and GCC contracts C++ expressions by default; checked bit for bit against torch 2.11
//              in test/fixtures/sampler/torch_sigmas.json (see linspaceF32 in sampler.cpp);
//   sigma[i] = fl( fl(s * base) / fl(1 + fl((s-1) * base)) ), s and s-1 rounded to F32 (torch's scalar operands);
//   consecutive equal sigmas collapsed (torch.unique_consecutive); timesteps t[i] = fl(1 - sigma[i]) for all but the
//   terminal sigma (0), so N grid points give N-1 model evaluations (fewer if the shift collapsed some).
// Step i (MiniMaxH3Scheduler.step), elementwise in F32:
//   s_t    = fl(1 - t[i])                     (the sigma the transformer was conditioned on; != sigma[i] below 0.5)
//   x0     = fl(x + fl(s_t * v))              (v points towards data)
//   r      = fl(sigma[i+1] / sigma[i])
//   x_next = fl( fl(r * x) + fl(fl(1 - r) * x0) )
// Latents are F32 (diffusers computes in F32 for half-precision samples; h3c keeps them F32 throughout).
//
// Initial noise: synth_rng (support/synth_rng.h) with std 1, key = tensorKey(seed, name), element index = the flat
// index of the [B, rows, cols] latent; names kVideoNoiseName / kAudioNoiseName.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace h3c::rt {

inline constexpr const char *kVideoNoiseName = "h3c/initial_noise/video";
inline constexpr const char *kAudioNoiseName = "h3c/initial_noise/audio";
inline constexpr double kDefaultVideoShift = 12.0;
inline constexpr double kDefaultAudioShift = 3.0;

// torch.linspace(start, end, steps, dtype=float32) on the CPU.
std::vector<float> linspaceF32(float start, float end, int64_t steps);

class MiniMaxH3Scheduler {
public:
  // Throws h3c::Error unless shift > 0 (finite).
  explicit MiniMaxH3Scheduler(double shift);
  // Builds the grid for `numInferenceSteps` >= 2 points (terminal 0 included).
  void setTimesteps(int64_t numInferenceSteps);
  double shift() const { return shift_; }
  const std::vector<float> &sigmas() const { return sigmas_; }        // strictly decreasing, ends at 0
  const std::vector<float> &timesteps() const { return timesteps_; }  // 1 - sigmas[:-1]
  int64_t numSteps() const { return int64_t(timesteps_.size()); }     // model evaluations
  // x <- the sample after step `i` (0-based) given the velocity v at timesteps()[i]. n elements, F32.
  void step(int64_t i, const float *v, float *x, size_t n) const;

private:
  double shift_;
  std::vector<float> sigmas_, timesteps_;
};

// `count` values of the documented initial noise for modality noise `name` (kVideoNoiseName / kAudioNoiseName).
std::vector<float> initialNoise(uint64_t seed, const std::string &name, int64_t count);

} // namespace h3c::rt
