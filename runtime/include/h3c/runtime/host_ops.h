// Tables computed on the host in double and rounded to F32 (docs/contract.md section 3): the rope cos/sin table and
// the timestep sinusoid. Both executors use these exact bytes (the GPU uploads them).
#pragma once

#include "h3c/models/config.h"

#include <cstdint>
#include <vector>

namespace h3c::rt {

// positions [S,3] (t,h,w) -> cos, sin [S, R], R = 6 * rope_freq_dim.
void ropeTable(const h3::Config &c, const int64_t *positions, int64_t S, std::vector<float> &cos,
               std::vector<float> &sin);
// t [T] -> [T, freq_dim]: cat(cos(t*freq), sin(t*freq)) (flip_sin_to_cos, shift 0).
std::vector<float> timestepSinusoid(const h3::Config &c, const std::vector<float> &t);

} // namespace h3c::rt
