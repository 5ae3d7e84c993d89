// rms_norm and norm_modulate, bitwise equal to the CPU reference (docs/contract.md sections 3, 4): one warp per row,
// ss by the lane_tree (lane l sums x_j^2 for j = l, l+32, ... ascending by fma from 0, then the explicit tree),
// inv = 1 / sqrt(ss / H + eps) with IEEE division and square root, n = bf(bf(x * inv) * w), and for norm_modulate
// y = bf(fma(n, bf(1 + scale), shift)) with scale/shift the table chunks of the row's (timestep, modality).
//
// RN_VEC (bf16 in and out, H % 256 == 0): the warp first copies its row into shared memory with 16-byte loads, all in
// flight at once, and reads it from there twice (the lane_tree's strided order from shared memory, the elementwise
// pass with 16-byte vectors of x, w, the table chunks and y); without it every access is a 2-byte load per lane and
// the kernel runs at a third of the memory bandwidth. Same operations on the same values: the same bits.
//
// Defined by the emitter: RN_ENTRY H3C_PARAMS RN_H RN_EPS RN_HAS_W RN_XF32 RN_OUT_F32 RN_MOD (1 = norm_modulate)
// RN_SHIFT RN_SCALE RN_NUMCH RN_RPT RN_VEC (dynamic shared memory 8 * RN_H * 2 bytes when 1). Parameters: x; table, ts_index (, tags when RN_RPT == 3) for norm_modulate; y;
// w (RN_HAS_W); rows; meta_rows (norm_modulate).
__device__ __forceinline__ float rn_x(const void *x, long long i) {
#if RN_XF32
  return ((const float *)x)[i];
#else
  return bf2f(((const h3bf *)x)[i]);
#endif
}

// One element of the elementwise pass: n = bf(bf(x * inv) * w), then the modulation (norm_modulate).
__device__ __forceinline__ float rn_one(float xv, float inv, float wv, float shift, float scale) {
  float n = rbf(__fmul_rn(xv, inv));
#if RN_HAS_W
  n = rbf(__fmul_rn(n, wv));
#endif
#if RN_MOD
  n = rbf(__fmaf_rn(n, rbf(__fadd_rn(1.0f, scale)), shift));
#endif
  return n;
}

extern "C" __global__ void __launch_bounds__(256) RN_ENTRY(H3C_PARAMS) {
  const long long row = (long long)blockIdx.x * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;  // whole warps leave together: the shuffles below stay full-warp
  const long long base = row * RN_H;
#if RN_VEC
  extern __shared__ __align__(16) unsigned char rn_smem[];
  h3bf *xs = (h3bf *)rn_smem + (threadIdx.x >> 5) * RN_H;
  {
    const uint4 *xg = (const uint4 *)((const h3bf *)x + base);
    uint4 buf[RN_H / 256];
#pragma unroll
    for (int i = 0; i < RN_H / 256; ++i) buf[i] = __ldg(xg + lane + 32 * i);
#pragma unroll
    for (int i = 0; i < RN_H / 256; ++i) ((uint4 *)xs)[lane + 32 * i] = buf[i];
    __syncwarp();
  }
#define RN_XAT(j) bf2f(xs[j])
#else
#define RN_XAT(j) rn_x(x, base + (j))
#endif
  float p = 0.0f;
  // Unrolled so that the shared-memory reads of 8 steps issue together; the fma chain keeps its order.
#pragma unroll 8
  for (int j = lane; j < RN_H; j += 32) {
    float v = RN_XAT(j);
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
#if RN_VEC
  // RN_H / 256 chunks of 8 per lane (21 at H = 5376), unrolled by 7 so that the weight and table loads of 7 chunks
  // are in flight together instead of one L2 round trip per chunk (elementwise: no order to keep).
#pragma unroll 7
  for (int c = lane; c < RN_H / 8; c += 32) {
    const uint4 xv = ((const uint4 *)xs)[c];
    uint4 wv = make_uint4(0, 0, 0, 0), sh = wv, sc = wv;
#if RN_HAS_W
    wv = __ldg((const uint4 *)w + c);
#endif
#if RN_MOD
    sh = __ldg((const uint4 *)(tab + RN_SHIFT * RN_H) + c);
    sc = __ldg((const uint4 *)(tab + RN_SCALE * RN_H) + c);
#endif
    const h3u32 xa[4] = {xv.x, xv.y, xv.z, xv.w}, wa[4] = {wv.x, wv.y, wv.z, wv.w};
    const h3u32 sha[4] = {sh.x, sh.y, sh.z, sh.w}, sca[4] = {sc.x, sc.y, sc.z, sc.w};
    h3u32 o[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float lo = rn_one(__uint_as_float(xa[e] << 16), inv, __uint_as_float(wa[e] << 16),
                              __uint_as_float(sha[e] << 16), __uint_as_float(sca[e] << 16));
      const float hi = rn_one(__uint_as_float(xa[e] & 0xffff0000u), inv, __uint_as_float(wa[e] & 0xffff0000u),
                              __uint_as_float(sha[e] & 0xffff0000u), __uint_as_float(sca[e] & 0xffff0000u));
      o[e] = pack_bf2(lo, hi);
    }
    ((uint4 *)((h3bf *)y + base))[c] = make_uint4(o[0], o[1], o[2], o[3]);
  }
#else
  for (int j = lane; j < RN_H; j += 32) {
    float wv = 0.0f, shift = 0.0f, scale = 0.0f;
#if RN_HAS_W
    wv = bf2f(((const h3bf *)w)[j]);
#endif
#if RN_MOD
    shift = bf2f(tab[RN_SHIFT * RN_H + j]);
    scale = bf2f(tab[RN_SCALE * RN_H + j]);
#endif
    const float n = rn_one(rn_x(x, base + j), inv, wv, shift, scale);
#if RN_OUT_F32
    ((float *)y)[base + j] = n;
#else
    ((h3bf *)y)[base + j] = f2bf(n);
#endif
  }
#endif
#undef RN_XAT
}
