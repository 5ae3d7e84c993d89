// rms_norm and norm_modulate, bitwise equal to the CPU reference (docs/contract.md sections 3, 4): one warp per row,
// ss by the lane_tree (lane l sums x_j^2 for j = l, l+32, ... ascending by fma from 0, then the explicit tree),
// inv = 1 / sqrt(ss / H + eps) with IEEE division and square root, n = bf(bf(x * inv) * w), and for norm_modulate
// y = bf(fma(n, bf(1 + scale), shift)) with scale/shift the table chunks of the row's (timestep, modality).
//
// RN_VEC (bf16 in and out, H % 256 == 0) is built to stream at the memory's speed (issue 14):
//   - the row stays in registers (RN_XREG): lane l loads the 16-byte chunks l + 32 i (RN_NC = H / 256 of them), all
//     in flight at once, bypassing L1 (read once); 16 rows per SM, whose registers hold 170 KB of rows in flight.
//     Rows too long for the registers (RN_XREG 0) read x twice, the second time mostly from the caches;
//   - the lane_tree wants lane l's chain over x_l, x_{l+32}, ... in ascending order, which is not the chunk layout
//     (a chunk holds 8 neighbours, 8 different chains). Piece i of the row (elements 256 i .. 256 i + 255, chunk i of
//     every lane) holds steps 8 i .. 8 i + 7 of every chain, so the warp writes RN_STAGE pieces at a time into a small
//     shared buffer and lane l reads its 8 steps of each: the chain's order, with RN_STAGE * 512 bytes per warp
//     instead of the whole row (which left L1 too little room for the weight and table rows);
//   - the elementwise pass takes x from registers and w, shift and scale through L1 (the same few rows for every
//     row of the launch), and computes two elements per instruction where the contract's rounding allows it:
//     bf2_rn for bf(F32 result), bf2_mul for bf(n * w), bf2_one_plus for bf(1 + scale) (common.cuh: each equals
//     its F32 form on every input it gets here); x * inv and the final fma stay F32 operations, as the contract says.
// The same operations on the same values as rn_one: the same bits.
//
// Defined by the emitter: RN_ENTRY H3C_PARAMS RN_H RN_EPS RN_HAS_W RN_XF32 RN_OUT_F32 RN_MOD (1 = norm_modulate)
// RN_SHIFT RN_SCALE RN_NUMCH RN_RPT RN_VEC RN_ROWS (rows per CTA, one warp each) RN_STAGE (RN_VEC: pieces staged at
// once, a divisor of H / 256) RN_XREG (RN_VEC: 1 = the row in registers). Parameters: x; table, ts_index (, tags
// when RN_RPT == 3) for norm_modulate; y; w (RN_HAS_W); rows; meta_rows (norm_modulate).
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

#if RN_VEC
#define RN_NC (RN_H / 256)  // 16-byte chunks per lane
#if RN_NC % RN_STAGE != 0
#error "RN_STAGE must divide RN_H / 256"
#endif
// A chunk of the row that is read once: not kept in L1, which holds the weight and table rows every row reads.
// Volatile: the compiler keeps the row's loads where they are written, all before the first __syncwarp (it sinks
// plain loads to their first use, which would issue one stage of the row per memory round trip).
__device__ __forceinline__ uint4 rn_ld_once(const uint4 *p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
// Two elements (one word of a chunk) of the elementwise pass, rn_one's operations on a bf16 pair.
__device__ __forceinline__ h3u32 rn_pair(h3u32 xw, float inv, h3u32 ww, h3u32 shw, h3u32 scw) {
  h3u32 n = bf2_rn(__fmul_rn(bf2_lo(xw), inv), __fmul_rn(bf2_hi(xw), inv));
#if RN_HAS_W
  n = bf2_mul(n, ww);
#endif
#if RN_MOD
  const h3u32 s1 = bf2_one_plus(scw);
  n = bf2_rn(__fmaf_rn(bf2_lo(n), bf2_lo(s1), bf2_lo(shw)), __fmaf_rn(bf2_hi(n), bf2_hi(s1), bf2_hi(shw)));
#endif
  return n;
}
#endif

// 16 warps per SM (the registers of 16 rows: RN_VEC keeps a row in 4 * RN_NC registers per lane), so the
// registers per thread are capped at 128.
extern "C" __global__ void __launch_bounds__(RN_ROWS * 32, RN_ROWS < 16 ? 16 / RN_ROWS : 1) RN_ENTRY(H3C_PARAMS) {
  h3c_grid_dependency_wait();  // (common.cuh) before any global memory access
  const long long row = (long long)blockIdx.x * RN_ROWS + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;  // whole warps leave together: the shuffles below stay full-warp, no CTA barrier follows
  const long long base = row * RN_H;
#if RN_VEC
  const uint4 *xg = (const uint4 *)((const h3bf *)x + base) + lane;
#if RN_XREG
  uint4 xr[RN_NC];
#pragma unroll
  for (int i = 0; i < RN_NC; ++i) xr[i] = rn_ld_once(xg + 32 * i);
#define RN_CHUNK(i) xr[i]
#else
#define RN_CHUNK(i) __ldg(xg + 32 * (i))
#endif
#endif
#if RN_MOD
#if RN_RPT == 3
  const long long *tg = (const long long *)tags;
#else
  const long long *tg = nullptr;
#endif
  const long long trow = h3c_table_row((const long long *)ts_index, tg, meta_rows, row, RN_RPT);
  const h3bf *tab = (const h3bf *)table + trow * (long long)(RN_NUMCH * RN_H);
#endif
  float p = 0.0f;
#if RN_VEC
  {
    __shared__ __align__(16) h3u32 rn_stage[RN_ROWS][RN_STAGE * 128];
    h3u32 *st = rn_stage[threadIdx.x >> 5];
    const h3bf *sh = (const h3bf *)st;
#pragma unroll
    for (int i0 = 0; i0 < RN_NC; i0 += RN_STAGE) {
#pragma unroll
      for (int s = 0; s < RN_STAGE; ++s) ((uint4 *)st)[32 * s + lane] = RN_CHUNK(i0 + s);
      __syncwarp();
#pragma unroll
      for (int s = 0; s < RN_STAGE; ++s)
#pragma unroll
        for (int m = 0; m < 8; ++m) {  // x_j, j = 256 (i0 + s) + 32 m + lane: step 8 (i0 + s) + m of this chain
          const float v = bf2f(sh[256 * s + 32 * m + lane]);
          p = __fmaf_rn(v, v, p);
        }
      __syncwarp();  // every lane has read the pieces before the next ones overwrite them
    }
  }
#else
  for (int j = lane; j < RN_H; j += 32) {
    float v = rn_x(x, base + j);
    p = __fmaf_rn(v, v, p);
  }
#endif
  const float ss = h3c_lane_tree(p);
  const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)RN_H), RN_EPS)));
#if RN_VEC
  uint4 *yg = (uint4 *)((h3bf *)y + base) + lane;
#pragma unroll
  for (int i = 0; i < RN_NC; ++i) {
    const int c = lane + 32 * i;
    uint4 wv = make_uint4(0, 0, 0, 0), shv = wv, scv = wv;
#if RN_HAS_W
    wv = __ldg((const uint4 *)w + c);
#endif
#if RN_MOD
    shv = __ldg((const uint4 *)(tab + RN_SHIFT * RN_H) + c);
    scv = __ldg((const uint4 *)(tab + RN_SCALE * RN_H) + c);
#endif
    const uint4 xv = RN_CHUNK(i);
    uint4 o;
    o.x = rn_pair(xv.x, inv, wv.x, shv.x, scv.x);
    o.y = rn_pair(xv.y, inv, wv.y, shv.y, scv.y);
    o.z = rn_pair(xv.z, inv, wv.z, shv.z, scv.z);
    o.w = rn_pair(xv.w, inv, wv.w, shv.w, scv.w);
    yg[32 * i] = o;
  }
#undef RN_CHUNK
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
}
