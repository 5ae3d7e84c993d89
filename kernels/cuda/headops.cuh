// qk_norm, rope and the fused qk_norm_rope (docs/contract.md section 3), bitwise equal to the CPU reference: a warp
// per HO_G consecutive (row, head) units of one tensor (grid.y picks q or k). The per-head RMS norm uses the lane_tree over head_dim
// channels; rope rotates the first HO_R channels (rotate-half: rot = cat(-x2, x1)) with cos/sin rounded to bf16,
// y = bf(x * cos + rot * sin) (two products, one add, no fma), channels HO_R..d copied.
//
// Defined by the emitter: HO_ENTRY H3C_PARAMS HO_HEADS HO_D HO_NORM HO_EPS HO_R (0 = no rope) HO_NT (tensors: 1 or 2)
// HO_G (units a warp).
// Parameters: x0 (x1 when HO_NT == 2); rope_cos, rope_sin (HO_R > 0); y0 (y1); w0 (w1) when HO_NORM; rows; meta_rows (rope).
// HO_G (the emitter's, 1-8): the (row, head) units a warp takes, consecutive units (a row's consecutive heads), their
// loads all issued before the first unit's sums: one 256-byte head a warp in flight held the unfused qk_norm_rope of
// the training plan at ~0.9 TB/s (0.55 ms an op at 8,349 rows x 56 heads on an H100, bench/NOTES.md 2026-12-06).
// Each unit's values are the one-unit form's.
extern "C" __global__ void __launch_bounds__(256) HO_ENTRY(H3C_PARAMS) {
  h3c_grid_dependency_wait();  // (common.cuh) before any global memory access
  __shared__ float buf[8][HO_D];
  const int lane = threadIdx.x & 31, wib = threadIdx.x >> 5;
  const long long unit0 = ((long long)blockIdx.x * 8 + wib) * HO_G;
  const int t = blockIdx.y;
  if (unit0 >= rows * HO_HEADS) return;
#if HO_NT == 2
  const h3bf *x = (const h3bf *)(t == 0 ? x0 : x1);
  h3bf *y = (h3bf *)(t == 0 ? y0 : y1);
#else
  const h3bf *x = (const h3bf *)x0;
  h3bf *y = (h3bf *)y0;
#endif
  float *b = buf[wib];
#if HO_D % 128 == 0
  // The heads' channels with one 8-byte load per lane per 128 channels (all the warp's units in flight), staged
  // through shared memory a unit at a time and read in the lane_tree's strided order: 2-byte loads per lane left the
  // kernel at a third of the bandwidth. The same values in the same order: the same bits.
  __shared__ __align__(8) h3bf xstage[8][HO_D];
  uint2 v[HO_G][HO_D / 128];
#pragma unroll
  for (int g = 0; g < HO_G; ++g)
    if (unit0 + g < rows * HO_HEADS)
#pragma unroll
      for (int i = 0; i < HO_D / 128; ++i)
        v[g][i] = __ldg((const uint2 *)(x + (unit0 + g) * HO_D) + lane + 32 * i);
#endif
#pragma unroll
  for (int g = 0; g < HO_G; ++g) {
    const long long unit = unit0 + g;
    if (unit >= rows * HO_HEADS) break;
    const long long row = unit / HO_HEADS;
    // (units are rows x heads of HO_D channels, back to back: a head's base is its unit's)
    const long long base = unit * HO_D;
    if (g > 0) __syncwarp();  // the unit before is done with the staging and b
#if HO_D % 128 == 0
#pragma unroll
    for (int i = 0; i < HO_D / 128; ++i) ((uint2 *)xstage[wib])[lane + 32 * i] = v[g][i];
    __syncwarp();
#define HO_XAT(j) xstage[wib][j]
#else
#define HO_XAT(j) x[base + (j)]
#endif
#if HO_NORM
    float p = 0.0f;
    for (int j = lane; j < HO_D; j += 32) {
      float xv = bf2f(HO_XAT(j));
      p = __fmaf_rn(xv, xv, p);
    }
    const float ss = h3c_lane_tree(p);
    const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)HO_D), HO_EPS)));
#if HO_NT == 2
    const h3bf *w = (const h3bf *)(t == 0 ? w0 : w1);
#else
    const h3bf *w = (const h3bf *)w0;
#endif
    for (int j = lane; j < HO_D; j += 32) b[j] = rbf(__fmul_rn(rbf(__fmul_rn(bf2f(HO_XAT(j)), inv)), bf2f(w[j])));
#else
    for (int j = lane; j < HO_D; j += 32) b[j] = bf2f(HO_XAT(j));
#endif
#undef HO_XAT
    __syncwarp();
    // Channel j's output value (before the bf16 store): rope's rotation of the first HO_R channels, y = bf(x * cos +
    // rot * sin) with rot = cat(-x2, x1), the rest as they are.
#if HO_R > 0
    const long long mrow = row % meta_rows;
    const float *cs = (const float *)rope_cos + mrow * HO_R;
    const float *sn = (const float *)rope_sin + mrow * HO_R;
    auto out = [&](int j) {
      if (j >= HO_R) return b[j];
      const float rot = j < HO_R / 2 ? -b[j + HO_R / 2] : b[j - HO_R / 2];
      return rbf(__fadd_rn(__fmul_rn(b[j], rbf(cs[j])), __fmul_rn(rot, rbf(sn[j]))));
    };
#else
    (void)row;
    auto out = [&](int j) { return b[j]; };
#endif
#if HO_D % 128 == 0
    // The outputs four channels a lane, one 8-byte store each (2-byte stores, coalesced but an instruction a value,
    // kept the training plan's unfused qk_norm and rope at ~1.3 TB/s: 0.19 and 0.17 ms an op at 8,349 rows x 56 heads
    // on an H100, bench/NOTES.md 2026-12-06). Each channel's value is the strided form's.
#pragma unroll
    for (int i = 0; i < HO_D / 128; ++i) {
      const int j0 = 128 * i + 4 * lane;
      const h3u32 lo = (h3u32)f2bf(out(j0)) | ((h3u32)f2bf(out(j0 + 1)) << 16);
      const h3u32 hi = (h3u32)f2bf(out(j0 + 2)) | ((h3u32)f2bf(out(j0 + 3)) << 16);
      *(uint2 *)(y + base + j0) = make_uint2(lo, hi);
    }
#else
    for (int j = lane; j < HO_D; j += 32) y[base + j] = f2bf(out(j));
#endif
  }
}
