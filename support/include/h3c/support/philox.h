// Standard normal noise from a counter-based generator, identical on the CPU and on the GPU (docs/contract.md,
// "Sampler noise"): Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) and a
// Box-Muller transform evaluated in double with a fixed sequence of IEEE operations.
//
// Addressing: element e of the flat [rows, cols] latent of one batch item and one modality, draw d:
//   key     = (lo32(seed), hi32(seed))                the item's 64-bit seed
//   counter = (lo32(e / 2), hi32(e / 2), modality, d)  modality 0 video / 1 audio; d = 0 the initial noise,
//                                                       d = 1 + i the SDE noise of step i
//   x0..x3  = philox4x32_10(counter, key)
//   u1      = (((x0 << 32 | x1) >> 11) + 1) * 2^-53   in (0, 1]
//   n2      =  ((x2 << 32 | x3) >> 11)                 u2 = n2 * 2^-53 in [0, 1)
//   r       = sqrt(-2 * log(u1));  z0 = r * cos(2 pi u2),  z1 = r * sin(2 pi u2)
//   value   = float(z0) for even e, float(z1) for odd e    (round to nearest even)
// |value| <= sqrt(-2 log 2^-53) = 8.57: a true standard normal up to 8.5 sigma.
//
// log, cos and sin are evaluated here with the published fdlibm coefficients (Sun Microsystems, 1993) from add,
// sub, mul, div, fma and sqrt only, each correctly rounded by IEEE 754 on every conforming host and device,
// so the values are the same bits everywhere; the angle is reduced exactly in integers (2 pi u2 = q pi/2 + 2 pi r,
// |r| <= 1/8). Accuracy: within about 1 ulp of the true functions. Host code must be compiled without FP contraction
// (-ffp-contract=off, as h3c is); device code uses the _rn intrinsics. This header is also compiled by NVRTC: no
// includes, no standard library.
#pragma once

#ifndef H3C_HD
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define H3C_HD __host__ __device__
#else
#define H3C_HD
#endif
#endif

#if defined(__CUDA_ARCH__)
#define H3C_PX_ADD(a, b) __dadd_rn((a), (b))
#define H3C_PX_SUB(a, b) __dsub_rn((a), (b))
#define H3C_PX_MUL(a, b) __dmul_rn((a), (b))
#define H3C_PX_DIV(a, b) __ddiv_rn((a), (b))
#define H3C_PX_FMA(a, b, c) __fma_rn((a), (b), (c))
#define H3C_PX_SQRT(a) __dsqrt_rn((a))
#define H3C_PX_U64_TO_D(a) __ull2double_rn((a))
#define H3C_PX_I64_TO_D(a) __ll2double_rn((a))
#define H3C_PX_D_TO_F(a) __double2float_rn((a))
#else
#define H3C_PX_ADD(a, b) ((a) + (b))
#define H3C_PX_SUB(a, b) ((a) - (b))
#define H3C_PX_MUL(a, b) ((a) * (b))
#define H3C_PX_DIV(a, b) ((a) / (b))
#define H3C_PX_FMA(a, b, c) __builtin_fma((a), (b), (c))
#define H3C_PX_SQRT(a) __builtin_sqrt((a))
#define H3C_PX_U64_TO_D(a) ((double)(a))  // exact: every integer converted is below 2^53
#define H3C_PX_I64_TO_D(a) ((double)(a))
#define H3C_PX_D_TO_F(a) ((float)(a))
#endif

namespace h3c {
namespace philox {

typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

struct Block {
  u32 v[4];
};

// Philox4x32 with R rounds (Random123's philox4x32_R: the key is bumped before every round but the first).
H3C_HD inline Block philox4x32(Block c, u32 k0, u32 k1, int rounds = 10) {
  const u32 kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int r = 0; r < rounds; ++r) {
    if (r > 0) {
      k0 += kW0;
      k1 += kW1;
    }
    const u64 p0 = (u64)kM0 * c.v[0], p1 = (u64)kM1 * c.v[2];
    const u32 hi0 = (u32)(p0 >> 32), lo0 = (u32)p0, hi1 = (u32)(p1 >> 32), lo1 = (u32)p1;
    Block n;
    n.v[0] = hi1 ^ c.v[1] ^ k0;
    n.v[1] = lo1;
    n.v[2] = hi0 ^ c.v[3] ^ k1;
    n.v[3] = lo0;
    c = n;
  }
  return c;
}

H3C_HD inline u64 doubleBits(double x) {
  union {
    double d;
    u64 u;
  } v;
  v.d = x;
  return v.u;
}
H3C_HD inline double bitsDouble(u64 u) {
  union {
    double d;
    u64 u;
  } v;
  v.u = u;
  return v.d;
}

// log(x) for a positive normal double (fdlibm e_log.c's reduction and Lg1..Lg7 polynomial): x = 2^k m with
// m in [sqrt(2)/2, sqrt(2)), f = m - 1 (exact), s = f / (2 + f), log x = k ln2 + f - s^2... evaluated as
// k*ln2_hi - ((hfsq - (s*(hfsq + R) + k*ln2_lo)) - f).
H3C_HD inline double logPositive(double x) {
  const double kLn2Hi = 6.93147180369123816490e-01, kLn2Lo = 1.90821492927058770002e-10;
  const double kLg1 = 6.666666666666735130e-01, kLg2 = 3.999999999940941908e-01, kLg3 = 2.857142874366239149e-01,
               kLg4 = 2.222219843214978396e-01, kLg5 = 1.818357216161805012e-01, kLg6 = 1.531383769920937332e-01,
               kLg7 = 1.479819860511658591e-01;
  const u64 bits = doubleBits(x);
  int k = (int)((bits >> 52) & 0x7ff) - 1023;
  double m = bitsDouble((bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull);  // [1, 2)
  if (m > 1.4142135623730951) {
    m = H3C_PX_MUL(m, 0.5);
    k += 1;
  }
  const double f = H3C_PX_SUB(m, 1.0);
  const double s = H3C_PX_DIV(f, H3C_PX_ADD(2.0, f));
  const double z = H3C_PX_MUL(s, s), w = H3C_PX_MUL(z, z);
  const double t1 = H3C_PX_MUL(w, H3C_PX_ADD(kLg2, H3C_PX_MUL(w, H3C_PX_ADD(kLg4, H3C_PX_MUL(w, kLg6)))));
  const double t2 = H3C_PX_MUL(
      z, H3C_PX_ADD(kLg1, H3C_PX_MUL(w, H3C_PX_ADD(kLg3, H3C_PX_MUL(w, H3C_PX_ADD(kLg5, H3C_PX_MUL(w, kLg7)))))));
  const double R = H3C_PX_ADD(t2, t1);
  const double hfsq = H3C_PX_MUL(H3C_PX_MUL(0.5, f), f);
  const double dk = (double)k;  // |k| < 1100: exact on host and device
  const double inner = H3C_PX_ADD(H3C_PX_MUL(s, H3C_PX_ADD(hfsq, R)), H3C_PX_MUL(dk, kLn2Lo));
  return H3C_PX_SUB(H3C_PX_MUL(dk, kLn2Hi), H3C_PX_SUB(H3C_PX_SUB(hfsq, inner), f));
}

// sin and cos of a in [-pi/4, pi/4] (fdlibm k_sin.c / k_cos.c polynomials, tail y = 0).
H3C_HD inline double kernelSin(double a) {
  const double kS1 = -1.66666666666666324348e-01, kS2 = 8.33333333332248946124e-03,
               kS3 = -1.98412698298579493134e-04, kS4 = 2.75573137070700676789e-06,
               kS5 = -2.50507602534068634195e-08, kS6 = 1.58969099521155010221e-10;
  const double z = H3C_PX_MUL(a, a), v = H3C_PX_MUL(z, a);
  const double r =
      H3C_PX_ADD(kS2, H3C_PX_MUL(z, H3C_PX_ADD(kS3, H3C_PX_MUL(z, H3C_PX_ADD(kS4, H3C_PX_MUL(z, H3C_PX_ADD(kS5, H3C_PX_MUL(z, kS6))))))));
  return H3C_PX_ADD(a, H3C_PX_MUL(v, H3C_PX_ADD(kS1, H3C_PX_MUL(z, r))));
}
H3C_HD inline double kernelCos(double a) {
  const double kC1 = 4.16666666666666019037e-02, kC2 = -1.38888888888741095749e-03,
               kC3 = 2.48015872894767294178e-05, kC4 = -2.75573143513906633035e-07,
               kC5 = 2.08757232129817482790e-09, kC6 = -1.13596475577881948265e-11;
  const double z = H3C_PX_MUL(a, a), w = H3C_PX_MUL(z, z);
  const double r = H3C_PX_ADD(
      H3C_PX_MUL(z, H3C_PX_ADD(kC1, H3C_PX_MUL(z, H3C_PX_ADD(kC2, H3C_PX_MUL(z, kC3))))),
      H3C_PX_MUL(H3C_PX_MUL(w, w), H3C_PX_ADD(kC4, H3C_PX_MUL(z, H3C_PX_ADD(kC5, H3C_PX_MUL(z, kC6))))));
  const double hz = H3C_PX_MUL(0.5, z);
  const double one = H3C_PX_SUB(1.0, hz);
  return H3C_PX_ADD(one, H3C_PX_ADD(H3C_PX_SUB(H3C_PX_SUB(1.0, one), hz), H3C_PX_MUL(z, r)));
}

// sin and cos of 2 pi n 2^-53 for an integer 0 <= n < 2^53: q = round(n / 2^51) (the quarter turn), the remainder
// r = (n - q 2^51) 2^-53 in [-1/8, 1/8] exactly, a = 2 pi r with pi split in two parts, then the quadrant.
H3C_HD inline void sinCos2PiFraction(u64 n, double &sinOut, double &cosOut) {
  const double kTwoPiHi = 6.28318530717958623200e+00, kTwoPiLo = 2.44929359829470635445e-16;
  const u64 q = (n + (1ull << 50)) >> 51;  // 0..4
  const i64 rem = (i64)n - (i64)(q << 51);
  const double r = H3C_PX_MUL(H3C_PX_I64_TO_D(rem), 1.1102230246251565404e-16);  // * 2^-53, exact
  const double a = H3C_PX_FMA(r, kTwoPiHi, H3C_PX_MUL(r, kTwoPiLo));
  const double s = kernelSin(a), c = kernelCos(a);
  switch (q & 3) {
  case 0: sinOut = s; cosOut = c; break;
  case 1: sinOut = c; cosOut = -s; break;
  case 2: sinOut = -s; cosOut = -c; break;
  default: sinOut = -c; cosOut = s; break;
  }
}

// The two standard normals of one Philox block (see the header comment).
H3C_HD inline void normalPair(Block b, float &z0, float &z1) {
  const u64 a = ((u64)b.v[0] << 32) | b.v[1], n2 = (((u64)b.v[2] << 32) | b.v[3]) >> 11;
  const double u1 = H3C_PX_MUL(H3C_PX_U64_TO_D((a >> 11) + 1ull), 1.1102230246251565404e-16);  // (0, 1]
  const double r = H3C_PX_SQRT(H3C_PX_MUL(-2.0, logPositive(u1)));
  double s, c;
  sinCos2PiFraction(n2, s, c);
  z0 = H3C_PX_D_TO_F(H3C_PX_MUL(r, c));
  z1 = H3C_PX_D_TO_F(H3C_PX_MUL(r, s));
}

// Element `e` of the noise stream (seed, modality, draw).
H3C_HD inline float normal(u64 seed, u32 modality, u32 draw, u64 e) {
  const u64 pair = e >> 1;
  Block c;
  c.v[0] = (u32)pair;
  c.v[1] = (u32)(pair >> 32);
  c.v[2] = modality;
  c.v[3] = draw;
  float z0, z1;
  normalPair(philox4x32(c, (u32)seed, (u32)(seed >> 32)), z0, z1);
  return (e & 1ull) ? z1 : z0;
}

} // namespace philox
} // namespace h3c
