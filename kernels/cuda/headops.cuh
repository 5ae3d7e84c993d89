// qk_norm, rope and the fused qk_norm_rope (docs/contract.md section 3), bitwise equal to the CPU reference: a warp
// per HO_G consecutive (row, head) units of one tensor (grid.y picks q or k). The per-head RMS norm uses the
// lane_tree over head_dim channels; rope rotates the first HO_R channels (rotate-half: rot = cat(-x2, x1)) with
// cos/sin rounded to bf16, y = bf(x * cos + rot * sin) (two products, one add, no fma), channels HO_R..d copied.
//
// Defined by the emitter: HO_ENTRY H3C_PARAMS HO_HEADS HO_D HO_NORM HO_EPS HO_R (0 = no rope) HO_NT (tensors: 1 or 2)
// HO_G (units a warp: consecutive units, a row's consecutive heads), HO_PAIRS (1: the pairs form below, head_dim 128
// and HO_R % 4 == 0 only; 0 the forms after it).
// Parameters: x0 (x1 when HO_NT == 2); rope_cos, rope_sin (HO_R > 0); y0 (y1); w0 (w1) when HO_NORM; rows;
// meta_rows (rope).
// Why several units a warp, with the norm weights and a row's rope tables taken once: one 256-byte head a warp, each
// paying a 64-bit division and modulo and its weights' and tables' scalar loads and roundings, held the training
// plan's unfused qk_norm_rope at 0.48 ms an op (~1.0 TB/s) at 8,349 rows x 56 heads on an H100; 4 units a warp take
// 0.31 ms (bench/NOTES.md 2026-12-06, session of 16:01). Each unit's values are the one-unit form's.
// The contract's per-head operations, one definition for both paths below: the norm's inverse RMS from the lane
// tree's sum of squares, a channel normed and weighted (bf(bf(x * inv) * w)), and channel j < HO_R (its value bj)
// rotated with the head's normed channels b and the bf16-rounded tables' c and s (bj * c + rot * s, rounded at the store).
__device__ __forceinline__ float ho_inv_rms(float ss) {
  return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)HO_D), HO_EPS)));
}
__device__ __forceinline__ float ho_normed(float xv, float inv, float wj) {
  return rbf(__fmul_rn(rbf(__fmul_rn(xv, inv)), wj));
}
__device__ __forceinline__ float ho_rope(const float *b, int j, float bj, float c, float s) {
  const float rot = j < HO_R / 2 ? -b[j + HO_R / 2] : b[j - HO_R / 2];
  return __fadd_rn(__fmul_rn(bj, c), __fmul_rn(rot, s));
}

// The tensor a CTA works on: with two (q and k) grid.y picks one, its input, output and norm weights alike.
#if HO_NT == 2
#define HO_PICK(a, b) (blockIdx.y == 0 ? (a) : (b))
#else
#define HO_PICK(a, b) (a)
#endif

#if HO_PAIRS
// The pairs form (head_dim 128): a warp takes HO_G units as HO_G / 2 passes of two, lanes 16 h + m (h = 0, 1) on unit
// 2 p + h of pass p, lane m holding the channel pairs q = m + 16 i (channels 2 q, 2 q + 1; i = 0..3) as bf16x2 words.
// Why: the strided form spends ~200 warp instructions a unit (a division and a square root a unit in every lane, five
// shuffle levels, two shared-memory round trips), so the op ran at ~1.2 TB/s (0.31 ms at 8,349 rows x 56 heads x 2 on
// an H100, bench/NOTES.md 2026-12-06) where its bytes take ~0.12 ms; here a unit costs ~50: 4-byte loads and stores of
// pairs, the pair instructions (common.cuh bf2_rn, bf2_mul: equal to the F32 forms for the values they get), four
// shuffle levels for two units at once, and one inverse RMS a lane for all HO_G units of the warp.
// The same bits as the strided form: the contract's lane l (channels l, l + 32, l + 64, l + 96 in that order) is pair
// q = l / 2's element l % 2 in lane m = l / 2 (i = 0..3), so each lane runs the fma chains of lanes 2 m and 2 m + 1;
// the tree's levels off = 16, 8, 4, 2 pair lanes m and m ^ 8, 4, 2, 1 (l + off = 2 (m + off / 2) + e for l < off),
// run as xor shuffles inside each half, so every lane of a half ends with the root's operations on the same operands
// (IEEE addition commutes); off = 1 adds the lane's two chains. Rope's partner of channel j is j +- R / 2, pair
// q +- R / 4, read from the pass's normed pairs in shared memory.
#if HO_D != 128 || HO_R % 4 != 0 || HO_G % 2 != 0
#error "the pairs form is for head_dim 128, a rotary width in whole pairs of pairs and an even unit count a warp"
#endif
#define HO_P (HO_G / 2)
extern "C" __global__ void __launch_bounds__(256) HO_ENTRY(H3C_PARAMS) {
  h3c_grid_dependency_wait();  // (common.cuh) before any global memory access
  const int lane = threadIdx.x & 31, wib = threadIdx.x >> 5, h = lane >> 4, m = lane & 15;
  const long long unit0 = ((long long)blockIdx.x * 8 + wib) * HO_G, total = rows * HO_HEADS;
  if (unit0 >= total) return;
  const h3u32 *x = (const h3u32 *)HO_PICK(x0, x1);
  h3u32 *y = (h3u32 *)HO_PICK(y0, y1);
#if HO_NORM
  const h3u32 *w = (const h3u32 *)HO_PICK(w0, w1);
#endif
  // Every pass's pairs first, all loads in flight (units past the end read as zeros and are never stored).
  h3u32 xv[HO_P][4];
#pragma unroll
  for (int p = 0; p < HO_P; ++p) {
    const long long u = unit0 + 2 * p + h;
#pragma unroll
    for (int i = 0; i < 4; ++i) xv[p][i] = u < total ? __ldg(x + u * 64 + m + 16 * i) : 0u;
  }
#if HO_NORM
  h3u32 wp[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) wp[i] = __ldg(w + m + 16 * i);
  // Sums of squares: the fma chains of lanes 2 m and 2 m + 1, then the tree (above).
  float ss[HO_P];
#pragma unroll
  for (int p = 0; p < HO_P; ++p) {
    float p0 = 0.0f, p1 = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float lo = bf2_lo(xv[p][i]), hi = bf2_hi(xv[p][i]);
      p0 = __fmaf_rn(lo, lo, p0);
      p1 = __fmaf_rn(hi, hi, p1);
    }
#pragma unroll
    for (int off = 8; off >= 1; off >>= 1) {
      p0 = __fadd_rn(p0, __shfl_xor_sync(0xffffffffu, p0, off));
      p1 = __fadd_rn(p1, __shfl_xor_sync(0xffffffffu, p1, off));
    }
    ss[p] = __fadd_rn(p0, p1);
  }
  // One inverse RMS a lane: lane k takes unit k's sum (pass k / 2, half k % 2), computes its inverse; each pass reads
  // its two back.
  float mine = 0.0f;
#pragma unroll
  for (int p = 0; p < HO_P; ++p) {
    const float v = __shfl_sync(0xffffffffu, ss[p], (lane & 1) << 4);
    if ((lane >> 1) == p) mine = v;
  }
  const float invK = ho_inv_rms(mine);
#endif
#if HO_R > 0
  __shared__ h3u32 bstage[8][2][64];  // a pass's rounded (normed) pairs of both units, for rope's partners
  h3u32 *const bs = bstage[wib][h];
  // The row's rope tables for this lane's rotated pairs (pairs q < R / 2 with -sin for the first half's channels, rope's
  // cat(-x2, x1)), taken when the unit's row changes.
  float cf[4][2], sf[4][2];
  long long tabRow = -1;
  const long long row0 = unit0 / HO_HEADS;
  const int head0 = (int)(unit0 - row0 * HO_HEADS);
#endif
#pragma unroll
  for (int p = 0; p < HO_P; ++p) {
    const long long u = unit0 + 2 * p + h;
    h3u32 b[4];
#if HO_NORM
    const float inv = __shfl_sync(0xffffffffu, invK, 2 * p + h);
#pragma unroll
    for (int i = 0; i < 4; ++i)
      b[i] = bf2_mul(bf2_rn(__fmul_rn(bf2_lo(xv[p][i]), inv), __fmul_rn(bf2_hi(xv[p][i]), inv)), wp[i]);
#else
#pragma unroll
    for (int i = 0; i < 4; ++i) b[i] = xv[p][i];
#endif
#if HO_R > 0
    const long long row = row0 + (head0 + 2 * p + h) / HO_HEADS;
    if (row != tabRow) {
      tabRow = row;
      const long long mrow = row % meta_rows;
      const float *cs = (const float *)rope_cos + mrow * HO_R, *sn = (const float *)rope_sin + mrow * HO_R;
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int j = 2 * (m + 16 * i) + e;
          cf[i][e] = j < HO_R ? rbf(cs[j]) : 0.0f;
          sf[i][e] = j < HO_R ? (j < HO_R / 2 ? -rbf(sn[j]) : rbf(sn[j])) : 0.0f;
        }
    }
    __syncwarp();  // the pass before is done reading the stage
#pragma unroll
    for (int i = 0; i < 4; ++i) bs[m + 16 * i] = b[i];
    __syncwarp();
#endif
    if (u < total) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int q = m + 16 * i;
        h3u32 o;
#if HO_R > 0
        if (2 * q < HO_R) {
          // y = bf(b * cos + rot * sin): rot * sin as partner * (+-sin), the same product with the sign moved.
          const h3u32 pr = bs[2 * q < HO_R / 2 ? q + HO_R / 4 : q - HO_R / 4];
          o = bf2_rn(__fadd_rn(__fmul_rn(bf2_lo(b[i]), cf[i][0]), __fmul_rn(bf2_lo(pr), sf[i][0])),
                     __fadd_rn(__fmul_rn(bf2_hi(b[i]), cf[i][1]), __fmul_rn(bf2_hi(pr), sf[i][1])));
        } else
#endif
        {
#if HO_NORM
          o = b[i];  // bf2_mul's bits: a NaN is 0x7fff, as f2bf makes it
#else
          o = pack_bf2(bf2_lo(b[i]), bf2_hi(b[i]));  // the input's NaN made quiet, as f2bf does
#endif
        }
        y[u * 64 + q] = o;
      }
    }
  }
}
#else
extern "C" __global__ void __launch_bounds__(256) HO_ENTRY(H3C_PARAMS) {
  h3c_grid_dependency_wait();  // (common.cuh) before any global memory access
  __shared__ float buf[8][HO_D];
  const int lane = threadIdx.x & 31, wib = threadIdx.x >> 5;
  const long long unit0 = ((long long)blockIdx.x * 8 + wib) * HO_G;
  if (unit0 >= rows * HO_HEADS) return;
  const h3bf *x = (const h3bf *)HO_PICK(x0, x1);
  h3bf *y = (h3bf *)HO_PICK(y0, y1);
#if HO_NORM
  const h3bf *w = (const h3bf *)HO_PICK(w0, w1);
#endif
  float *b = buf[wib];
#if HO_D % 128 == 0
  // The warp's units: their channels loaded first (one 8-byte load per lane per 128 channels, all in flight), staged
  // through shared memory a unit at a time and read in the lane_tree's strided order (2-byte loads per lane left the
  // kernel at a third of the bandwidth); the norm weights of the lane's strided channels and the row's rope tables
  // (bf16-rounded, for the four channels j0 = 128 i + 4 lane.. the lane stores) once per warp and row.
  __shared__ __align__(8) h3bf xstage[8][HO_D];
  uint2 v[HO_G][HO_D / 128];
#pragma unroll
  for (int g = 0; g < HO_G; ++g)
    if (unit0 + g < rows * HO_HEADS)
#pragma unroll
      for (int i = 0; i < HO_D / 128; ++i)
        v[g][i] = __ldg((const uint2 *)(x + (unit0 + g) * HO_D) + lane + 32 * i);
#if HO_NORM
  float wv[HO_D / 32];
#pragma unroll
  for (int i = 0; i < HO_D / 32; ++i) wv[i] = bf2f(w[lane + 32 * i]);
#endif
  long long row = unit0 / HO_HEADS;
  int head = (int)(unit0 - row * HO_HEADS);
#if HO_R == 0
  (void)row;
#endif
#if HO_R > 0
  float c4[HO_D / 128][4], s4[HO_D / 128][4];
  auto tables = [&](long long r) {
    const long long mrow = r % meta_rows;
    const float *cs = (const float *)rope_cos + mrow * HO_R, *sn = (const float *)rope_sin + mrow * HO_R;
#pragma unroll
    for (int i = 0; i < HO_D / 128; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = 128 * i + 4 * lane + e;
        c4[i][e] = j < HO_R ? rbf(cs[j]) : 0.0f;
        s4[i][e] = j < HO_R ? rbf(sn[j]) : 0.0f;
      }
  };
  tables(row);
#endif
  // (the last warp's group may be partial: the units past the end are skipped, warp-uniformly, without a break, so
  // that the loop unrolls and v stays in registers)
  const int units = rows * HO_HEADS - unit0 < HO_G ? (int)(rows * HO_HEADS - unit0) : HO_G;
#pragma unroll
  for (int g = 0; g < HO_G; ++g) {
    const long long unit = unit0 + g;
    if (g >= units) continue;
    if (g > 0) {
      __syncwarp();  // the unit before is done with the staging and b
      if (++head == HO_HEADS) {
        head = 0;
        ++row;
#if HO_R > 0
        tables(row);
#endif
      }
    }
    const long long base = unit * HO_D;  // (units are rows x heads of HO_D channels, back to back)
#pragma unroll
    for (int i = 0; i < HO_D / 128; ++i) ((uint2 *)xstage[wib])[lane + 32 * i] = v[g][i];
    __syncwarp();
#if HO_NORM
    float p = 0.0f;
#pragma unroll
    for (int i = 0; i < HO_D / 32; ++i) {
      const float xv = bf2f(xstage[wib][lane + 32 * i]);
      p = __fmaf_rn(xv, xv, p);
    }
    const float inv = ho_inv_rms(h3c_lane_tree(p));
#pragma unroll
    for (int i = 0; i < HO_D / 32; ++i) b[lane + 32 * i] = ho_normed(bf2f(xstage[wib][lane + 32 * i]), inv, wv[i]);
#else
#pragma unroll
    for (int i = 0; i < HO_D / 32; ++i) b[lane + 32 * i] = bf2f(xstage[wib][lane + 32 * i]);
#endif
    __syncwarp();
    // Channel j's output (rope's rotation of the first HO_R channels, y = bf(x * cos + rot * sin), rot = cat(-x2, x1);
    // the rest as they are), four channels a lane, one 8-byte store each (2-byte stores, coalesced but an instruction
    // a value, kept the unfused qk_norm and rope at ~1.3 TB/s). Each channel's value is the strided form's.
#pragma unroll
    for (int i = 0; i < HO_D / 128; ++i) {
      const int j0 = 128 * i + 4 * lane;
      float o[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = j0 + e;
        o[e] = b[j];
#if HO_R > 0
        if (j < HO_R) o[e] = ho_rope(b, j, o[e], c4[i][e], s4[i][e]);
#endif
      }
      *(uint2 *)(y + base + j0) = make_uint2(pack_bf2(o[0], o[1]), pack_bf2(o[2], o[3]));
    }
  }
#else
  // Any head_dim: a unit at a time, 2-byte accesses.
  for (int g = 0; g < HO_G; ++g) {
    const long long unit = unit0 + g;
    if (unit >= rows * HO_HEADS) break;
    if (g > 0) __syncwarp();  // the unit before is done with b
    const long long row = unit / HO_HEADS;
    const long long base = unit * HO_D;
#if HO_NORM
    float p = 0.0f;
    for (int j = lane; j < HO_D; j += 32) {
      const float xv = bf2f(x[base + j]);
      p = __fmaf_rn(xv, xv, p);
    }
    const float inv = ho_inv_rms(h3c_lane_tree(p));
    for (int j = lane; j < HO_D; j += 32) b[j] = ho_normed(bf2f(x[base + j]), inv, bf2f(w[j]));
#else
    for (int j = lane; j < HO_D; j += 32) b[j] = bf2f(x[base + j]);
#endif
    __syncwarp();
#if HO_R > 0
    const long long mrow = row % meta_rows;
    const float *cs = (const float *)rope_cos + mrow * HO_R;
    const float *sn = (const float *)rope_sin + mrow * HO_R;
    for (int j = lane; j < HO_D; j += 32) {
      float o = b[j];
      if (j < HO_R) o = ho_rope(b, j, o, rbf(cs[j]), rbf(sn[j]));
      y[base + j] = f2bf(o);
    }
#else
    (void)row;
    for (int j = lane; j < HO_D; j += 32) y[base + j] = f2bf(b[j]);
#endif
  }
#endif
}
#endif
