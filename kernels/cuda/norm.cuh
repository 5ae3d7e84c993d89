// rms_norm and norm_modulate, bitwise equal to the CPU reference (docs/contract.md sections 3, 4): one warp per row,
// ss by the lane_tree (lane l sums x_j^2 for j = l, l+32, ... ascending by fma from 0, then the explicit tree),
// inv = 1 / sqrt(ss / H + eps) with IEEE division and square root, n = bf(bf(x * inv) * w), and for norm_modulate
// y = bf(fma(n, bf(1 + scale), shift)) with scale/shift the table chunks of the row's (timestep, modality).
//
// Defined by the emitter: RN_ENTRY H3C_PARAMS RN_H RN_EPS RN_HAS_W RN_XF32 RN_OUT_F32 RN_MOD (1 = norm_modulate)
// RN_SHIFT RN_SCALE RN_NUMCH RN_RPT. Parameters: x; table, ts_index (, tags when RN_RPT == 3) for norm_modulate; y;
// w (RN_HAS_W); rows; meta_rows (norm_modulate).
__device__ __forceinline__ float rn_x(const void *x, long long i) {
#if RN_XF32
  return ((const float *)x)[i];
#else
  return bf2f(((const h3bf *)x)[i]);
#endif
}

extern "C" __global__ void __launch_bounds__(256) RN_ENTRY(H3C_PARAMS) {
  const long long row = (long long)blockIdx.x * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;  // whole warps leave together: the shuffles below stay full-warp
  const long long base = row * RN_H;
  float p = 0.0f;
  for (int j = lane; j < RN_H; j += 32) {
    float v = rn_x(x, base + j);
    p = __fmaf_rn(v, v, p);
  }
  const float ss = h3c_lane_tree(p);
  const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)RN_H), RN_EPS)));
#if RN_MOD
#if RN_RPT == 3
  const long long *tg = (const long long *)tags;
#else
  const long long *tg = nullptr;
#endif
  const long long trow = h3c_table_row((const long long *)ts_index, tg, meta_rows, row, RN_RPT);
  const h3bf *tab = (const h3bf *)table + trow * (long long)(RN_NUMCH * RN_H);
#endif
  for (int j = lane; j < RN_H; j += 32) {
    float n = rbf(__fmul_rn(rn_x(x, base + j), inv));
#if RN_HAS_W
    n = rbf(__fmul_rn(n, bf2f(((const h3bf *)w)[j])));
#endif
#if RN_MOD
    float shift = bf2f(tab[RN_SHIFT * RN_H + j]);
    float scale1 = rbf(__fadd_rn(1.0f, bf2f(tab[RN_SCALE * RN_H + j])));
    n = rbf(__fmaf_rn(n, scale1, shift));
#endif
#if RN_OUT_F32
    ((float *)y)[base + j] = n;
#else
    ((h3bf *)y)[base + j] = f2bf(n);
#endif
  }
}
