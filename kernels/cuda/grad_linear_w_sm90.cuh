// The Hopper form of a bf16 linear's weight gradient dW [N][K] = row_units over rows of bf(g[r][n]) * x[r][k]
// (sm_90a: TMA + mbarrier ring + wgmma, warp-specialized, persistent), chunk for chunk grad_linear_mma.cuh's dW, so
// both give the same bits (Kernels.LinearGradW compares them byte for byte; docs/contract.md section 14): per batch
// item, per unit of 128 canonical rows a partial from 0 chained over the unit's 16-row chunks in ascending order
// (wgmma m64n128k16, scale-d 0 at the unit's first chunk; the chunks of the mma.sync form's k-tiles of 32 rows, the
// last unit's zero-filled past the item's end), the item's sum the left fold of its partials (the first as it is;
// kept in registers), the batch's the left fold of the items' sums in batch order (in dw itself: each thread adds to
// the elements it wrote). wgmma's chunk function is mma.sync's (../shared/HOPPER-KERNELS.md section 1).
//
// Phase 0 (GL_ENTRY, grad_linear_round.cuh) rounds g into the scratch gb (and sums dbias; with a grad_round's bf16 g,
// h3-fuse-grad, no phase 0 and no dbias: the GEMM alone, gb_map over g); phase 1 (GW_ENTRY_P1) is
// this GEMM over 128 x 128 output tiles (weight rows n x input columns k) of 384 threads: warpgroup 0 the producer (one
// thread issues the TMA loads of a GW_STAGES-deep ring), warpgroups 1 and 2 each 64 rows n of the tile. Both operands
// have the reduction (the token rows) as their outer dimension, so both are MN-major for wgmma: A = bf(g)^T through
// gb_map ([items][item_rows][N], boxes of 64 n x 64 rows: one 128-byte-swizzled atom of 64 n per box, each consumer's
// 64 rows n one box; imm-trans-a), B = x through x_map ([items][item_rows][K], boxes of 64 k x 64 rows; imm-trans-b).
// The 3-D maps read rows past an item's end as zeros, and a k-block of 64 rows never crosses a unit (units start every
// 128 rows of an item). After a unit's last k-block each consumer waits for its wgmmas and folds the partial into the
// item's sum (64 F32 per thread beside the 64 accumulators). The last unit of an item has the mma.sync form's chunk
// count (2 ceil(L / 32) for its L rows), by one of four unit forms chosen per unit.
//
// GW_NARROW (grad_w_narrow, where N or K is at most 64: LoRA's dA = dt^T x and dB = g^T t at rank 64): 64 x 64 tiles
// (one box of each operand a stage), both consumer warpgroups on the tile's 64 rows n, taking the units in turn
// (unit v of the CTA's walk is consumer v % 2's), so the wgmmas of two units run at once and the fold stays the left
// fold in unit order: each unit's owner adds its partial to the sum so far, which the other consumer handed over
// through shared memory (thread i to thread i: the same accumulator positions), and hands the new sum on. Why: the
// 128 x 128 tile computed half its wgmma work past N = 64 (or K = 64) and gave the LoRA shapes only 42-56 CTAs on 132
// SMs (N or K / 128); 64 x 64 tiles give twice the CTAs and no dead work. Not yet measured: the first GPU run's
// producer loaded two boxes of each operand into stages of one (bench/NOTES.md, 2026-12-06 20:35), so opt-in.
//
// Defined by the emitter: GL_ENTRY GW_ENTRY_P1 H3C_PARAMS GL_DW (1) GR_N GR_K GR_BIAS GW_STAGES GW_GROUP_M GW_NARROW.
// Parameters (H3C_PARAMS): g (F32 [rows][N], phase 0's), dw (F32 [N][K]), dbias (with GR_BIAS, phase 0's), items,
// item_rows, gb (scratch, bf16 [rows][N]), gb_map (over gb), x_map (over x, bf16 [rows][K]).
#ifndef GW_NARROW
#define GW_NARROW 0
#endif
#define GW_BM (GW_NARROW ? 64 : 128)  // weight rows n of a tile
#define GW_BN (GW_NARROW ? 64 : 128)  // input columns k of a tile
#define GW_BK 64                      // token rows of a k-block
#define GW_THREADS 384
#define GW_BOX_BYTES (64 * GW_BK * 2)  // one box: 64 n (or k) x 64 rows
#define GW_A_BYTES (GW_BM / 64 * GW_BOX_BYTES)
#define GW_B_BYTES (GW_BN / 64 * GW_BOX_BYTES)
// The warps that release a stage: both consumers' (each its own 64 rows n), or with GW_NARROW the unit's owner's.
#define GW_RELEASE_WARPS (GW_NARROW ? 4 : 8)
#define GW_TILES_M ((GR_N + GW_BM - 1) / GW_BM)
#define GW_TILES_N ((GR_K + GW_BN - 1) / GW_BN)
// setmaxnreg's split of 168 x 384 registers: 40 x 128 + 232 x 256.
#define GW_REGS_PRODUCER 40
#define GW_REGS_CONSUMER 232
#if !GL_DW
#error "grad_linear_w_sm90.cuh computes dW"
#endif

// The rows of unit u of an item: L = min(128, item_rows - 128 u), in 1 or 2 k-blocks of 64; its chunks are the
// mma.sync form's, 2 per 32-row k-tile: 2 ceil(L / 32).
__device__ __forceinline__ int gw_unit_rows(long long itemRows, long long u) {
  const long long left = itemRows - u * GR_UNIT;
  return (int)(left < GR_UNIT ? left : GR_UNIT);
}

// One k-block of a consumer warpgroup (stage s): its CH chunks in ascending order (FIRST: the unit's first k-block,
// whose first chunk starts the chain), the descriptors advancing 16 rows (2,048 bytes) a chunk. LAST (the unit's last
// k-block): waits for the unit's wgmmas and releases its stages (this one and, with PREV, the one before, whose
// k-block stayed in flight while this one was issued: the chain's order is the issue order).
template <int CH, bool FIRST, bool LAST, bool PREV>
__device__ __forceinline__ void gw_kblock(float *acc, h3u32 sAw, h3u32 sB, h3u32 full, h3u32 empty, int lane,
                                          int &s, h3u32 &ph) {
  mbar_wait(full + 8 * s, ph);
  wgmma_fence();
  const h3u32 a = sAw + s * GW_A_BYTES, b = sB + s * GW_B_BYTES;
#pragma unroll
  for (int kk = 0; kk < CH; ++kk) {
    const unsigned long long da = wgmma_desc_sw128_nmajor(a + kk * 2048, GW_BOX_BYTES);
    const unsigned long long db = wgmma_desc_sw128_nmajor(b + kk * 2048, GW_BOX_BYTES);
#if GW_NARROW
    wgmma_64<1, 1>(acc, da, db, FIRST && kk == 0 ? 0 : 1);  // (scale_d 0 starts the chain)
#else
    if (FIRST && kk == 0) wgmma_128_first<1, 1>(acc, da, db);
    else wgmma_128<1, 1>(acc, da, db, 1);
#endif
  }
  wgmma_commit();
  if constexpr (LAST) {
    wgmma_wait<0>();
    if (lane == 0) {
      if (PREV) mbar_arrive(ring_before(empty, s, GW_STAGES));
      mbar_arrive(empty + 8 * s);
    }
  }
  if (++s == GW_STAGES) {
    s = 0;
    ph ^= 1;
  }
}

// One unit of CH0 + CH1 chunks (its k-blocks' chunk counts; CH1 = 0: one k-block) into a partial of its own, given
// to `fold` (into the item's sum). The partial lives inside this call only: a chunk count chosen at run time must not
// merge the accumulators of different wgmma sequences (ptxas then injects warpgroup.arrive).
template <int CH0, int CH1, class Fold>
__device__ __forceinline__ void gw_unit(const Fold &fold, h3u32 sAw, h3u32 sB, h3u32 full, h3u32 empty,
                                        int lane, int &s, h3u32 &ph) {
  float acc[GW_BN / 2];  // never zeroed: scale-d 0 starts the chain
  gw_kblock<CH0, true, CH1 == 0, false>(acc, sAw, sB, full, empty, lane, s, ph);
  if constexpr (CH1 > 0) gw_kblock<CH1, false, true, true>(acc, sAw, sB, full, empty, lane, s, ph);
  fold(acc);
}

// A unit of L rows by the unit form of its chunk count (2 ceil(L / 32)).
template <class Fold>
__device__ __forceinline__ void gw_unit_of(int L, const Fold &fold, h3u32 sAw, h3u32 sB, h3u32 full, h3u32 empty,
                                           int lane, int &s, h3u32 &ph) {
  if (L > 96) gw_unit<4, 4>(fold, sAw, sB, full, empty, lane, s, ph);
  else if (L > 64) gw_unit<4, 2>(fold, sAw, sB, full, empty, lane, s, ph);
  else if (L > 32) gw_unit<4, 0>(fold, sAw, sB, full, empty, lane, s, ph);
  else gw_unit<2, 0>(fold, sAw, sB, full, empty, lane, s, ph);
}

// The item's sum (this thread's accumulator positions) into dw: item 0's as it is, then + each next item's.
__device__ __forceinline__ void gw_store_item(float *out, const float *run, long long b, long long n0, long long k0) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const long long n = n0 + 8 * h;
    if (n >= GR_N) continue;
#pragma unroll
    for (int j = 0; j < GW_BN / 8; ++j) {
      const long long k = k0 + 8 * j;
      if (k >= GR_K) continue;  // GR_K is a multiple of 8: k + 1 is inside too
      float2 *p = (float2 *)(out + n * GR_K + k);
      float2 v = make_float2(run[4 * j + 2 * h], run[4 * j + 2 * h + 1]);
      if (b > 0) {
        const float2 o = *p;
        v.x = __fadd_rn(o.x, v.x);
        v.y = __fadd_rn(o.y, v.y);
      }
      *p = v;
    }
  }
}

extern "C" __global__ void __launch_bounds__(GW_THREADS, 1) GW_ENTRY_P1(H3C_PARAMS) {
  h3c_grid_dependency_wait();  // (common.cuh) before any global memory access: gb is phase 0's
  extern __shared__ unsigned char gw_raw[];
  const h3u32 base = (smem_u32(gw_raw) + 1023u) & ~1023u;  // the 128-byte swizzle needs 1,024-byte aligned tiles
  const h3u32 sA = base, sB = base + GW_STAGES * GW_A_BYTES;
  const h3u32 full = sB + GW_STAGES * GW_B_BYTES, empty = full + 8 * GW_STAGES;
  // GW_NARROW: the hand-over of the sum so far between the consumers (two barriers, even and odd hand-overs: a
  // barrier's phase then never runs two ahead of a waiting thread), and its buffer, [GW_BN / 2][128] F32.
  const h3u32 hand = empty + 8 * GW_STAGES, hbufAt = hand + 16;
  const int wg = warpgroup_index(), tid = threadIdx.x % 128;
  const int tiles = GW_TILES_M * GW_TILES_N;
  const long long units = (item_rows + GR_UNIT - 1) / GR_UNIT;  // per item
  if (threadIdx.x == 0) {
    for (int s = 0; s < GW_STAGES; ++s) {
      mbar_init(full + 8 * s, 1);   // the producer's expect_tx; the TMA bytes complete the phase
      mbar_init(empty + 8 * s, GW_RELEASE_WARPS);  // one arrival per releasing consumer warp
    }
    if (GW_NARROW) {
      mbar_init(hand, 128);  // every thread of the handing consumer
      mbar_init(hand + 8, 128);
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (wg == 0) {
    regs_dealloc<GW_REGS_PRODUCER>();
    if (tid == 0) {
      tma_prefetch_map(&gb_map);
      tma_prefetch_map(&x_map);
      int s = 0;
      h3u32 ph = 0;
      for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int tm, tn;
        grouped_tile(t, GW_TILES_M, GW_TILES_N, GW_GROUP_M, tm, tn);
        // The boxes inside N and K (boxes past the end stay unloaded: their rows n / columns k are never stored).
        const int boxesA = min(GW_BM / 64, (GR_N - tm * GW_BM + 63) / 64),
                  boxesB = min(GW_BN / 64, (GR_K - tn * GW_BN + 63) / 64);
        for (long long b = 0; b < items; ++b)
          for (long long u = 0; u < units; ++u) {
            const int L = gw_unit_rows(item_rows, u);
            for (int kb = 0; kb * GW_BK < L; ++kb) {
              const int r = (int)(u * GR_UNIT) + kb * GW_BK;
              mbar_wait(empty + 8 * s, ph ^ 1);  // a fresh barrier counts as released (parity 1 done)
              mbar_expect_tx(full + 8 * s, (boxesA + boxesB) * GW_BOX_BYTES);
              for (int j = 0; j < boxesA; ++j)
                tma_load_3d(sA + s * GW_A_BYTES + j * GW_BOX_BYTES, &gb_map, tm * GW_BM + 64 * j, r, (int)b, full + 8 * s);
              for (int j = 0; j < boxesB; ++j)
                tma_load_3d(sB + s * GW_B_BYTES + j * GW_BOX_BYTES, &x_map, tn * GW_BN + 64 * j, r, (int)b, full + 8 * s);
              if (++s == GW_STAGES) {
                s = 0;
                ph ^= 1;
              }
            }
          }
      }
    }
  } else {
    // Consumers (the roles are the two branches of one if/else, so ptxas applies setmaxnreg).
    regs_alloc<GW_REGS_CONSUMER>();
    const int cw = wg - 1;  // this consumer's 64 rows n of the tile
    const int lane = tid % 32, warp = tid / 32, gq = lane >> 2, t4 = lane & 3;
    const h3u32 sAw = sA + (GW_NARROW ? 0 : cw * GW_BOX_BYTES);  // its box of the A stage 0
    int s = 0;
    h3u32 ph = 0;
    float *const out = (float *)dw;
#if GW_NARROW
    float *const hbuf = (float *)(gw_raw + (hbufAt - smem_u32(gw_raw)));
    long long v = 0;   // the units of this CTA's walk so far: unit v is consumer v % 2's
    long long hk = 0;  // the hand-overs so far
#endif
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
      int tm, tn;
      grouped_tile(t, GW_TILES_M, GW_TILES_N, GW_GROUP_M, tm, tn);
      // Accumulator 4 j + 2 h + e: row n 16 warp + gq + 8 h, column k 8 j + 2 t4 + e of the warpgroup's 64 x GW_BN.
      const long long n0 = (long long)tm * GW_BM + (GW_NARROW ? 0 : cw * 64) + warp * 16 + gq,
                      k0 = (long long)tn * GW_BN + 2 * t4;
      for (long long b = 0; b < items && item_rows > 0; ++b) {
#if GW_NARROW
        for (long long u = 0; u < units; ++u, ++v) {
          const int L = gw_unit_rows(item_rows, u);
          const bool last = u + 1 == units;
          if ((v & 1) == cw) {
            // The unit's partial onto the sum of the units before (handed over by the other consumer), then the new
            // sum handed on, or with the item's last unit stored.
            auto fold = [&](const float *acc) {
              float run[GW_BN / 2];
              if (u == 0) {
#pragma unroll
                for (int i = 0; i < GW_BN / 2; ++i) run[i] = acc[i];
              } else {
                mbar_wait(hand + 8 * ((hk - 1) & 1), (h3u32)(((hk - 1) >> 1) & 1));
#pragma unroll
                for (int i = 0; i < GW_BN / 2; ++i) run[i] = __fadd_rn(hbuf[i * 128 + tid], acc[i]);
              }
              if (!last) {
#pragma unroll
                for (int i = 0; i < GW_BN / 2; ++i) hbuf[i * 128 + tid] = run[i];
                mbar_arrive(hand + 8 * (hk & 1));
              } else {
                gw_store_item(out, run, b, n0, k0);
              }
            };
            gw_unit_of(L, fold, sAw, sB, full, empty, lane, s, ph);
          } else {
            for (int kb = 0; kb * GW_BK < L; ++kb)  // the other consumer's stages
              if (++s == GW_STAGES) {
                s = 0;
                ph ^= 1;
              }
          }
          if (!last) ++hk;
        }
        // The next item's sum adds onto this one's in dw, which either consumer stored.
        if (items > 1) asm volatile("bar.sync 1, 256;\n" ::: "memory");
#else
        float run[GW_BN / 2];  // the item's sum of its unit partials
        for (long long u = 0; u < units; ++u) {
          auto fold = [&](const float *acc) {
#pragma unroll
            for (int i = 0; i < GW_BN / 2; ++i) run[i] = u == 0 ? acc[i] : __fadd_rn(run[i], acc[i]);
          };
          gw_unit_of(gw_unit_rows(item_rows, u), fold, sAw, sB, full, empty, lane, s, ph);
        }
        gw_store_item(out, run, b, n0, k0);
#endif
      }
      if (items <= 0 || item_rows <= 0) {  // no rows: the sum of nothing
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int j = 0; j < GW_BN / 8; ++j)
            if (n0 + 8 * h < GR_N && k0 + 8 * j < GR_K)
              *(float2 *)(out + (n0 + 8 * h) * GR_K + k0 + 8 * j) = make_float2(0.0f, 0.0f);
      }
    }
  }
}
