// The synthetic-value generator: counter-based, keyed by (seed, tensor name, element index), so any element can be
// produced independently, in any order, on the CPU or on the GPU, with identical bits.
//
//   key      = splitmix64(seed ^ fnv1a64(name))
//   h_j      = splitmix64(key + 0x9E3779B97F4A7C15 * (2 * index + j)),  j = 0, 1
//   u0..u3   = the high and low 32-bit halves of h_0 and h_1 (uniform integers in [0, 2^32))
//   c        = (u0 + u1 + u2 + u3) - 2^33                 (exact, in int64)
//   value    = float( double(c) * scale ),  scale = std * sqrt(3) * 2^-32   (one double product, one rounding)
//
// The sum of four uniforms (Irwin-Hall, n = 4) has variance 4/12, hence the sqrt(3): values have mean 0, standard
// deviation `std` and lie in (-2*sqrt(3)*std, 2*sqrt(3)*std). Only integer arithmetic, one exact int->double
// conversion, one correctly rounded double product and one double->float rounding are used, so host and device agree
// bit for bit (no transcendental functions). Stored as bf16, values are then rounded with h3c's floatToBf16.
//
// This header is also compiled by NVRTC: it uses no standard library headers.
#pragma once

#ifndef H3C_HD
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define H3C_HD __host__ __device__
#else
#define H3C_HD
#endif
#endif

namespace h3c {
namespace synth {

typedef unsigned long long u64;
typedef long long i64;

H3C_HD inline u64 splitmix64(u64 x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

H3C_HD inline u64 fnv1a64(const char *s, u64 len) {
  u64 h = 0xcbf29ce484222325ull;
  for (u64 i = 0; i < len; ++i) {
    h ^= (unsigned char)s[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

H3C_HD inline u64 tensorKey(u64 seed, const char *name, u64 len) { return splitmix64(seed ^ fnv1a64(name, len)); }

// 2^-32 * sqrt(3): multiply by the wanted standard deviation on the host to get `scale`.
#define H3C_SYNTH_UNIT_SCALE (1.7320508075688772 / 4294967296.0)

H3C_HD inline float normalish(u64 key, u64 index, double scale) {
  u64 h0 = splitmix64(key + 0x9E3779B97F4A7C15ull * (2ull * index));
  u64 h1 = splitmix64(key + 0x9E3779B97F4A7C15ull * (2ull * index + 1ull));
  u64 sum = (h0 >> 32) + (h0 & 0xffffffffull) + (h1 >> 32) + (h1 & 0xffffffffull);
  i64 c = (i64)sum - (i64)(1ull << 33);
  return (float)((double)c * scale);
}

} // namespace synth
} // namespace h3c
