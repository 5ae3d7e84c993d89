// The MiniMax-H3 samplers: diffusers' MiniMaxH3Scheduler (rectified-flow Euler, eta 0, the ODE), bit for bit in F32,
// the Flow-GRPO SDE step with its transition log-probability, and the noise. Model-independent: generate (tools/h3c/cmd_generate.cpp) drives it with the executor's velocities.
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
// The SDE sampler (Flow-GRPO, arXiv 2505.05470, sd3_sde_with_logprob), written in MiniMax-H3's data-ward velocity v
// (v_flow_grpo = -v) and in F32 like Flow-GRPO, noise level a (rounded to F32 once), for step i:
//   dt     = fl(sigma[i+1] - sigma[i])  (< 0);   s1 = sigma[1] if sigma[i] == 1 else sigma[i]
//   std    = fl( fl(sqrtf( fl(sigma[i] / fl(1 - s1)) )) * a )
//   scale  = fl( std * fl(sqrtf(fl(-dt))) )                         (the transition's standard deviation)
//   coef   = fl( fl( fl(std * std) / fl(2 * sigma[i]) ) * dt )
//   ode_k  = the Euler step above;   eps_k = fl(x_k - fl(t[i] * v_k))    (the predicted noise)
//   mean_k = fl(ode_k + fl(coef * eps_k))                          (= Flow-GRPO's prev_sample_mean, rearranged)
//   next_k = fl(mean_k + fl(scale * z_k)),  z ~ N(0, 1) from philoxNormals (draw 1 + i)
// Transition log-probability of one item and modality over its n generated elements, in double, fixed order:
//   sum_sq  = sum over k ascending (row-major over the item's generated rows) of (double(next_k) - double(mean_k))^2,
//             accumulated sequentially from 0 (no fma)
//   logprob = -(sum_sq / (2 * (double(scale) * double(scale)))) - double(n) * (log_scale + kLogSqrt2Pi)
// with log_scale = log(double(scale)) recorded beside it, so a trainer recomputes logprob bit for bit from the
// sealed record and its own sum_sq; Flow-GRPO's per-element mean is logprob / n.
//
// Initial noise (and the SDE noise): support/philox.h (on the device: runtime/cuda/noise.h, the same bits), a
// standard normal keyed by the item's seed, addressed by the element's index within the item's generated rows, the
// modality (0 video, 1 audio) and the draw (0 initial noise, 1 + i the SDE noise of step i).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace h3c::rt {

inline constexpr double kDefaultVideoShift = 12.0;
inline constexpr double kDefaultAudioShift = 3.0;
inline constexpr double kLogSqrt2Pi = 0.91893853320467274178;  // log(sqrt(2 pi)), the double nearest

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

// The constants of SDE step `i` at noise level `a` (> 0) for a scheduler's grid (see above).
struct SdeConstants {
  float std = 0, scale = 0, coef = 0;
  double logScale = 0;  // log(double(scale))
};
SdeConstants sdeConstants(const MiniMaxH3Scheduler &s, int64_t i, double noiseLevel);

// One SDE step over n elements: x <- next; mean receives the transition mean. Returns sum_sq (above).
double sdeStep(const MiniMaxH3Scheduler &s, int64_t i, const SdeConstants &k, const float *v, const float *z, float *x,
               float *mean, size_t n);
// logprob from sum_sq over n elements (above).
double sdeLogProb(double sumSq, const SdeConstants &k, int64_t n);

// `count` standard normals of the stream (seed, modality, draw), elements 0..count-1 (support/philox.h).
void philoxNormals(uint64_t seed, uint32_t modality, uint32_t draw, int64_t count, float *out);

} // namespace h3c::rt
