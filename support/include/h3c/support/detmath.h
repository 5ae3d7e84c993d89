// Deterministic transcendental functions shared by the CPU reference and the GPU kernels (docs/contract.md section 6).
// std::expf (glibc) and CUDA's expf are different approximations, so silu/swiglu would differ by an ulp between CPU
// and GPU. These use only IEEE-exact basic operations (add, mul, fma, each correctly rounded, and exact scaling by
// powers of two), so every conforming compiler and device gives the same bits. Accuracy: about 1 ulp.
//
// Host code must be compiled without FP contraction (-ffp-contract=off, as h3c is). This header is also embedded in
// NVRTC sources: no includes, no standard library.
#pragma once

#ifndef H3C_HD
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define H3C_HD __host__ __device__
#else
#define H3C_HD
#endif
#endif

#if defined(__CUDA_ARCH__)
#define H3C_DM_ADD(a, b) __fadd_rn((a), (b))
#define H3C_DM_MUL(a, b) __fmul_rn((a), (b))
#define H3C_DM_FMA(a, b, c) __fmaf_rn((a), (b), (c))
#define H3C_DM_DIV(a, b) __fdiv_rn((a), (b))
#else
#define H3C_DM_ADD(a, b) ((a) + (b))
#define H3C_DM_MUL(a, b) ((a) * (b))
#define H3C_DM_FMA(a, b, c) __builtin_fmaf((a), (b), (c))  // = std::fmaf, no header needed
#define H3C_DM_DIV(a, b) ((a) / (b))
#endif

namespace h3c {
namespace detmath {

H3C_HD inline float bitsToFloat(unsigned int u) {
  union {
    unsigned int u;
    float f;
  } v;
  v.u = u;
  return v.f;
}
H3C_HD inline unsigned int floatToBits(float f) {
  union {
    unsigned int u;
    float f;
  } v;
  v.f = f;
  return v.u;
}

// 2^e for e in [-126, 127], exactly.
H3C_HD inline float pow2i(int e) { return bitsToFloat((unsigned int)(e + 127) << 23); }

// exp(x): k = round(x / ln2) (round-half-even through the 1.5 * 2^23 trick), r = x - k ln2 in two fma steps
// (Cody-Waite, ln2 split so k * ln2_hi is exact), exp(r) by a degree-7 Taylor polynomial in Horner form with fma,
// then scaled by 2^k in two exact steps (so results down to the subnormal range round once, deterministically).
H3C_HD inline float expf(float x) {
  unsigned int ux = floatToBits(x);
  if ((ux & 0x7fffffffu) > 0x7f800000u) return x;  // NaN
  if (x > 88.72283935546875f) return bitsToFloat(0x7f800000u);
  if (x < -103.97208404541015625f) return 0.0f;
  const float kLog2e = 1.44269502162933349609375f;
  const float kLn2Hi = 0.693145751953125f;       // 12 significant bits: k * kLn2Hi is exact for |k| < 2^12
  const float kLn2Lo = 1.428606765330187045e-06f;  // ln2 - kLn2Hi
  const float kShifter = 12582912.0f;             // 1.5 * 2^23
  float t = H3C_DM_ADD(H3C_DM_MUL(x, kLog2e), kShifter);
  float kf = H3C_DM_ADD(t, -kShifter);
  float r = H3C_DM_FMA(-kf, kLn2Hi, x);
  r = H3C_DM_FMA(-kf, kLn2Lo, r);
  float p = 1.98412701138295233e-04f;  // 1/5040
  p = H3C_DM_FMA(p, r, 1.38888889551162720e-03f);  // 1/720
  p = H3C_DM_FMA(p, r, 8.33333376795053482e-03f);  // 1/120
  p = H3C_DM_FMA(p, r, 4.16666679084300995e-02f);  // 1/24
  p = H3C_DM_FMA(p, r, 1.66666671633720398e-01f);  // 1/6
  p = H3C_DM_FMA(p, r, 0.5f);
  p = H3C_DM_FMA(p, r, 1.0f);
  p = H3C_DM_FMA(p, r, 1.0f);
  int k = (int)kf;
  // Split 2^k so each factor is a normal power of two; the first product is exact, the second rounds once.
  int k1 = k / 2;
  int k2 = k - k1;
  return H3C_DM_MUL(H3C_DM_MUL(p, pow2i(k1)), pow2i(k2));
}

// silu(x) = x / (1 + exp(-x)), IEEE division.
H3C_HD inline float silu(float x) { return H3C_DM_DIV(x, H3C_DM_ADD(1.0f, expf(-x))); }

} // namespace detmath
} // namespace h3c
