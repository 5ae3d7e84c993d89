// Tables computed on the host in double and rounded to F32 (docs/contract.md section 3): the rope cos/sin table and
// the timestep sinusoid. Both executors use these exact bytes (the GPU uploads them).
#pragma once

#include "h3c/models/config.h"

#include <cstdint>
#include <vector>

namespace h3c::rt {

// positions [S,3] (t,h,w) F32 -> cos, sin [S, R], R = 6 * rope_freq_dim: angle = fl(pos * inv_freq[i]) in F32,
// cos/sin of it computed in double and rounded to F32.
// Rows are independent: `threads` > 1 splits them over std::threads (the same values).
void ropeTable(const h3::Config &c, const float *positions, int64_t S, std::vector<float> &cos,
               std::vector<float> &sin, int threads = 1);
// The rotary inv_freq buffer [rope_freq_dim] as diffusers computes it in float32.
std::vector<float> ropeInvFreq(const h3::Config &c);
// t [T] -> [T, freq_dim]: cat(cos(t*freq), sin(t*freq)) (flip_sin_to_cos, shift 0).
std::vector<float> timestepSinusoid(const h3::Config &c, const std::vector<float> &t);

} // namespace h3c::rt
