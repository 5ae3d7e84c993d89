// The Hopper form of a bf16 linear's input gradient dX [rows][K] = bf(g) W (sm_90a: TMA + mbarrier ring + wgmma,
// warp-specialized, persistent), chunk for chunk grad_linear_mma.cuh's dX, so both give the same bits (the GPU check
// Kernels.LinearGradX compares them byte for byte): every output is one F32 chain from 0 over the 16-wide chunks of N
// in ascending order (docs/contract.md section 14, k_chunks over N). wgmma m64nNk16 chained over ascending 16-wide
// chunks computes mma.sync m16n8k16's chain (measured, ../shared/HOPPER-KERNELS.md section 1), whatever the tile, its
// place in the walk or the SM; N is never split across CTAs. The chain has as many chunks as the mma.sync form's
// (2 ceil(N / 32): its k-tiles of 32, zero-filled past N): this kernel's last k-block of 64 issues only the chunks
// that remain.
//
// Phase 0 (GL_ENTRY, grad_linear_round.cuh) rounds g into the scratch gb (where g is a grad_round's bf16 bf(g),
// h3-fuse-grad, there is no phase 0: the GEMM is the kernel's one entry and gb_map lies over g); phase 1
// (GX_ENTRY_P1) is this GEMM, the
// skeleton of the forward's gemm_sm90.cuh: 384 threads, warpgroup 0 the producer (one thread issues the TMA loads of
// a GX_STAGES-deep ring), warpgroups 1 and 2 each 64 rows of a 128 x GX_BN output tile (m64nGX_BNk16 wgmmas). A is
// bf(g): gb_map over the scratch, [rows][N] boxes of 128 rows x 64 of N (K-major, 128-byte swizzle, rows past the
// end zero-filled). B is W [N][K] as stored, the reduction along its rows: w_map boxes of 64 rows of N x 64 output
// columns, each box an N-major 128-byte-swizzled atom of 64 output columns (wgmma's transposed B, imm-trans-b = 1;
// the atoms of a stage GX_BOX_BYTES apart), boxes starting at or past K left unloaded (their columns are never
// stored). The grid is persistent (at most one CTA per SM) and walks the tiles in groups of GX_GROUP_M row tiles,
// so the CTAs running at once share their tiles of W in L2. The epilogue stores each thread's F32 accumulators (the
// mma.sync fragment layout) straight from registers.
//
// GX_CLUSTER = 2 (`--tune grad_x_cluster=2`) launches pairs of CTAs on row tiles 2p and 2p + 1 of the same column
// tile: each CTA loads its own A and every other box of W, multicast into both, so the pair reads W from L2 once; a
// stage is refilled only when the consumers of both CTAs released it; the second tile of a pair past the last row
// tile reads zeros and stores nothing (as the forward's 2-CTA linears). Timing only: the chains are the same.
//
// GX_LORA_K > 0 (h3-fuse-grad: a LoRA down path's dX taken in, docs/contract.md section 14): after a tile's own
// k-blocks the producer loads one more stage, the tile's rows of bf(dt) (t_map, lora_t [rows][GX_LORA_K]) and its
// columns of the down slot (d_map, [GX_LORA_K][K], boxes as W's), and each consumer computes the path's chain on it,
// 64 columns at a time into 32 more accumulators (m64n64k16 from 0 over GX_LORA_CHUNKS chunks: the path's own op's
// chain), then stores (residual + path) + dX for those columns: the two ops' additions in their order.
//
// GR_DX_SWIGLU = 1 (h3-fuse-grad: the swiglu_grad whose dy this dX was taken in, no residual): each pair of dX values
// (with the path's) goes through swiglu_grad's operations with the pair's v and g of swiglu_x = [v | g] as it is
// stored (gr_dx_store2, grad_common.cuh): dx is that op's [rows][2 GR_K]. GR_DX_BF: dx stored as bf16 (the rounding
// of the grad_round, or of that swiglu_grad, that read it: h3-fuse-grad), each element as gr_st rounds it.
//
// Defined by the emitter: GL_ENTRY GX_ENTRY_P1 H3C_PARAMS GL_DW (0) GR_N GR_K GR_BIAS (0) GX_BN (128, 192 or 256;
// 64 for a K of 64, LoRA's dt) GX_STAGES GX_GROUP_M GX_INFLIGHT (0: wait for each k-block's wgmmas before releasing
// its stage; 1: keep one in flight) GX_CLUSTER (1 or 2) GR_RESIDUAL (1: the epilogue stores residual + dX,
// h3-fuse-grad's grad_add) GX_LORA_K (0, or the path's width, 16 to 64) GR_DX_SWIGLU GR_DX_BF. Parameters (H3C_PARAMS,
// in this order): g (F32 [rows][N], phase 0's), residual (GR_RESIDUAL: F32 [rows][K]), lora_t (GX_LORA_K), swiglu_x
// (GR_DX_SWIGLU: bf16 [rows][2K]), dx (F32 [rows][K]; with GR_DX_SWIGLU [rows][2K], bf16 with GR_DX_BF), rows,
// gb (scratch, bf16 [rows][N]), gb_map (the tensor map over gb: boxes of 64 x 128 rows), w_map (W's: boxes of 64 x
// 64), t_map and d_map (GX_LORA_K: lora_t's, boxes of 64 x 128 rows, and the down slot's, as W's).
#define GX_BM 128
#define GX_BK 64
#define GX_THREADS 384
#define GX_A_BYTES (GX_BM * GX_BK * 2)
#define GX_BOX_BYTES (64 * GX_BK * 2)  // one box of W: 64 rows of N x 64 output columns
#define GX_BOXES (GX_BN / 64)
#define GX_B_BYTES (GX_BOXES * GX_BOX_BYTES)
#define GX_KT ((GR_N + GX_BK - 1) / GX_BK)
#define GX_TILES_N ((GR_K + GX_BN - 1) / GX_BN)
// The chunks of the last k-block: the mma.sync form's 2 ceil(N / 32) less the 4 of each earlier k-block (2 or 4).
#define GX_LAST_CHUNKS (2 * ((GR_N + 31) / 32) - 4 * (GX_KT - 1))
// setmaxnreg's split of 168 x 384 registers (the forward's): 40 x 128 + 232 x 256.
#define GX_REGS_PRODUCER 40
#define GX_REGS_CONSUMER 232
// The LoRA down path's chain (GX_LORA_K): the chunks of its own op, 2 ceil(GX_LORA_K / 32), in one k-block of 64.
#define GX_LORA_CHUNKS (2 * ((GX_LORA_K + 31) / 32))
#if GX_LORA_K < 0 || GX_LORA_K > 64 || GX_LORA_K % 16 || (GX_LORA_K && GX_BN == 64)
#error "GX_LORA_K is 0 or 16 to 64 in steps of 16, on a dX tile of 128 columns or more"
#endif
#if GX_BN != 256 && GX_BN != 192 && GX_BN != 128 && !(GX_BN == 64 && GR_K == 64)
#error "GX_BN is 128, 192 or 256 (64: a dX of 64 columns, LoRA's dt)"
#endif
#if GL_DW || GR_BIAS
#error "grad_linear_sm90.cuh computes dX only"
#endif

// A consumer warp's release of stage barrier `bar` (hopper.cuh): with GX_CLUSTER = 2 the peer's too, which multicasts
// half of W into this CTA's stage.
__device__ __forceinline__ void gx_release(h3u32 bar, h3u32 peer) { ring_release<GX_CLUSTER == 2>(bar, peer); }

// The producer's B operand of one stage (W's boxes, or the LoRA down slot's): `boxes` boxes of 64 rows of the
// reduction (from `row`) x 64 output columns (from c0) into `dst`, GX_BOX_BYTES apart, completing barrier `bar`. With
// GX_CLUSTER = 2 box j by CTA j % 2 of the pair, multicast into both (each CTA's barrier expects every box's bytes).
__device__ __forceinline__ void gx_load_boxes(h3u32 dst, const H3cTensorMap *map, int c0, int row, int boxes,
                                              h3u32 bar, h3u32 rank) {
  for (int j = 0; j < boxes; ++j) {
#if GX_CLUSTER == 2
    if ((h3u32)(j & 1) == rank)
      tma_load_2d_multicast(dst + j * GX_BOX_BYTES, map, c0 + 64 * j, row, bar, (unsigned short)3);
#else
    (void)rank;
    tma_load_2d(dst + j * GX_BOX_BYTES, map, c0 + 64 * j, row, bar);
#endif
  }
}

// One 16-wide chunk of the chain on this warpgroup's GX_BN / 2 accumulators (FIRST: the chain's first, scale-d 0).
template <bool FIRST>
__device__ __forceinline__ void gx_wgmma(float *acc, unsigned long long da, unsigned long long db) {
#if GX_BN == 256
  if (FIRST) wgmma_256_first<1>(acc, da, db);
  else wgmma_256<1>(acc, da, db, 1);
#elif GX_BN == 192
  if (FIRST) wgmma_192_first<1>(acc, da, db);
  else wgmma_192<1>(acc, da, db, 1);
#elif GX_BN == 128
  if (FIRST) wgmma_128_first<1>(acc, da, db);
  else wgmma_128<1>(acc, da, db, 1);
#else
  wgmma_64<1>(acc, da, db, FIRST ? 0 : 1);
#endif
}

// One k-block of a consumer warpgroup's main loop (stage s): its CH chunks in ascending order (A's descriptor
// advances 32 bytes a chunk inside the swizzled row; B's 16 rows of N = 2,048 bytes), then the release of the stage
// to the producer once its wgmmas completed (with GX_INFLIGHT the previous stage's, this one's staying in flight).
template <int CH, bool FIRST>
__device__ __forceinline__ void gx_kblock(float *acc, h3u32 sAw, h3u32 sB, h3u32 full, h3u32 empty, h3u32 peer,
                                          int lane, int &s, h3u32 &ph) {
  mbar_wait(full + 8 * s, ph);
  wgmma_fence();
  const unsigned long long da = wgmma_desc_sw128(sAw + s * GX_A_BYTES);
  const h3u32 b = sB + s * GX_B_BYTES;
#pragma unroll
  for (int kk = 0; kk < CH; ++kk) {
    const unsigned long long db = wgmma_desc_sw128_nmajor(b + kk * 2048, GX_BOX_BYTES);
    if (FIRST && kk == 0) gx_wgmma<true>(acc, da, db);
    else gx_wgmma<false>(acc, da + 2 * kk, db);
  }
  wgmma_commit();
#if GX_INFLIGHT
  wgmma_wait<1>();
  if (!FIRST && lane == 0) gx_release(ring_before(empty, s, GX_STAGES), peer);
#else
  wgmma_wait<0>();
  if (lane == 0) gx_release(empty + 8 * s, peer);
#endif
  if (++s == GX_STAGES) {
    s = 0;
    ph ^= 1;
  }
}

// A consumer warpgroup's chain over all k-blocks of a tile (the first starts it, the last holds GX_LAST_CHUNKS).
__device__ __forceinline__ void gx_mainloop(float *acc, h3u32 sAw, h3u32 sB, h3u32 full, h3u32 empty, h3u32 peer,
                                            int lane, int &s, h3u32 &ph) {
  if constexpr (GX_KT == 1) {
    gx_kblock<GX_LAST_CHUNKS, true>(acc, sAw, sB, full, empty, peer, lane, s, ph);
  } else {
    gx_kblock<4, true>(acc, sAw, sB, full, empty, peer, lane, s, ph);
#pragma unroll 1
    for (int kb = 1; kb < GX_KT - 1; ++kb) gx_kblock<4, false>(acc, sAw, sB, full, empty, peer, lane, s, ph);
    gx_kblock<GX_LAST_CHUNKS, false>(acc, sAw, sB, full, empty, peer, lane, s, ph);
  }
#if GX_INFLIGHT
  wgmma_wait<0>();
  if (lane == 0) gx_release(ring_before(empty, s, GX_STAGES), peer);
#endif
}

#if GX_LORA_K
// The fused LoRA down path (stage s: bf(dt) rows and the down slot's boxes of this tile): per 64 columns of the tile,
// the path's chain into pa, then (residual + path) + dX stored for those columns (acc holds dX). Releases the stage.
__device__ __forceinline__ void gx_lora_epilogue(const float *acc, h3u32 sAw, h3u32 sB, h3u32 full, h3u32 empty,
                                                 h3u32 peer, int lane, int &s, h3u32 &ph,
                                                 long long r0, long long c0, long long M, void *out,
                                                 const float *res, const void *sx) {
  mbar_wait(full + 8 * s, ph);
  const unsigned long long da = wgmma_desc_sw128(sAw + s * GX_A_BYTES);
#pragma unroll  // (acc's indices must be constants: a runtime index would put acc in local memory)
  for (int jb = 0; jb < GX_BOXES; ++jb) {
    float pa[32];
#if GR_DX_SWIGLU
    // The box's pairs of x, loaded before the path's products so their latency passes under them (gr_swiglu_x).
    GrSwigluX xs[2][8];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const long long r = r0 + 8 * h, c = c0 + 64 * jb + 8 * j;
        if (r < M && c < GR_K) xs[h][j] = gr_swiglu_x(sx, r, c, GR_K);
      }
#endif
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < GX_LORA_CHUNKS; ++kk)
      wgmma_64<1>(pa, da + 2 * kk, wgmma_desc_sw128_nmajor(sB + s * GX_B_BYTES + jb * GX_BOX_BYTES + kk * 2048,
                                                           GX_BOX_BYTES),
                  kk == 0 ? 0 : 1);
    wgmma_commit();
    wgmma_wait<0>();
    // pa 4 j + 2 h + e: row 16 warp + gq + 8 h, column 64 jb + 8 j + 2 t4 + e; acc's index of it 32 jb + 4 j + 2 h + e.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const long long r = r0 + 8 * h;
      if (r >= M) continue;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const long long c = c0 + 64 * jb + 8 * j;
        if (c < GR_K) {
          float2 p = make_float2(pa[4 * j + 2 * h], pa[4 * j + 2 * h + 1]);
#if GR_RESIDUAL  // the path's op added its residual: residual + path
          const float2 o = *(const float2 *)(res + r * GR_K + c);
          p = make_float2(__fadd_rn(o.x, p.x), __fadd_rn(o.y, p.y));
#endif
          const int i = 32 * jb + 4 * j + 2 * h;
          const float2 d = make_float2(__fadd_rn(p.x, acc[i]), __fadd_rn(p.y, acc[i + 1]));
#if GR_DX_SWIGLU
          gr_dx_store2_x<GR_DX_BF>(out, xs[h][j], r, c, GR_K, d);
#else
          gr_dx_store2<0, GR_DX_BF>(out, sx, r, c, GR_K, d);
#endif
        }
      }
    }
  }
  if (lane == 0) gx_release(empty + 8 * s, peer);
  if (++s == GX_STAGES) {
    s = 0;
    ph ^= 1;
  }
}
#endif

// Tile (pair) t of the persistent walk: row tiles vary fastest inside a group of GX_GROUP_M (pairs of) row tiles; with
// GX_CLUSTER = 2, tm is this CTA's row tile of the pair (cluster rank `rank`).
__device__ __forceinline__ void gx_tile(int t, int walkM, h3u32 rank, int &tm, int &tn) {
  grouped_tile(t, walkM, GX_TILES_N, GX_GROUP_M, tm, tn);
  tm = tm * GX_CLUSTER + (int)rank;
}

extern "C" __global__ void __launch_bounds__(GX_THREADS, 1) GX_ENTRY_P1(H3C_PARAMS) {
  h3c_grid_dependency_wait();  // (common.cuh) before any global memory access: gb is phase 0's
  extern __shared__ unsigned char gx_raw[];
  const h3u32 base = (smem_u32(gx_raw) + 1023u) & ~1023u;  // the 128-byte swizzle needs 1,024-byte aligned tiles
  const h3u32 sA = base, sB = base + GX_STAGES * GX_A_BYTES;
  const h3u32 full = sB + GX_STAGES * GX_B_BYTES, empty = full + 8 * GX_STAGES;
  const int wg = warpgroup_index(), tid = threadIdx.x % 128;
  const long long M = rows;
  const int tilesM = (int)((M + GX_BM - 1) / GX_BM);
#if GX_CLUSTER == 2
  const h3u32 rank = cluster_rank(), peer = rank ^ 1u;
  const int walkM = (tilesM + 1) / 2;  // pairs of row tiles
  const int first = blockIdx.x / 2, stride = gridDim.x / 2;
#else
  const h3u32 rank = 0, peer = 0;
  const int walkM = tilesM;
  const int first = blockIdx.x, stride = gridDim.x;
#endif
  const int tiles = walkM * GX_TILES_N;  // (pairs of) tiles
  if (threadIdx.x == 0) {
    for (int s = 0; s < GX_STAGES; ++s) {
      mbar_init(full + 8 * s, 1);                // the producer's expect_tx; the TMA bytes complete the phase
      mbar_init(empty + 8 * s, 8 * GX_CLUSTER);  // one arrival per consumer warp of each CTA reading the stage
    }
    mbar_init_fence();
  }
#if GX_CLUSTER == 2
  cluster_sync();
#else
  __syncthreads();
#endif

  if (wg == 0) {
    regs_dealloc<GX_REGS_PRODUCER>();
    if (tid == 0) {
      tma_prefetch_map(&gb_map);
      tma_prefetch_map(&w_map);
#if GX_LORA_K
      tma_prefetch_map(&t_map);
      tma_prefetch_map(&d_map);
#endif
      int s = 0;
      h3u32 ph = 0;
      for (int t = first; t < tiles; t += stride) {
        int tm, tn;
        gx_tile(t, walkM, rank, tm, tn);
        const int c0 = tn * GX_BN;
        // The boxes of W inside K (a last column tile may end early; its other columns are never stored).
        const int boxes = min(GX_BOXES, (GR_K - c0 + 63) / 64);
        for (int kb = 0; kb < GX_KT; ++kb) {
          mbar_wait(empty + 8 * s, ph ^ 1);  // a fresh barrier counts as released (parity 1 done)
          mbar_expect_tx(full + 8 * s, GX_A_BYTES + boxes * GX_BOX_BYTES);
          tma_load_2d(sA + s * GX_A_BYTES, &gb_map, kb * GX_BK, tm * GX_BM, full + 8 * s);
          gx_load_boxes(sB + s * GX_B_BYTES, &w_map, c0, kb * GX_BK, boxes, full + 8 * s, rank);
          if (++s == GX_STAGES) {
            s = 0;
            ph ^= 1;
          }
        }
#if GX_LORA_K
        // The LoRA down path's stage: the tile's rows of bf(dt) (zero past lora_k and past the rows) and the down
        // slot's rows for the tile's columns, boxes as W's.
        mbar_wait(empty + 8 * s, ph ^ 1);
        mbar_expect_tx(full + 8 * s, GX_A_BYTES + boxes * GX_BOX_BYTES);
        tma_load_2d(sA + s * GX_A_BYTES, &t_map, 0, tm * GX_BM, full + 8 * s);
        gx_load_boxes(sB + s * GX_B_BYTES, &d_map, c0, 0, boxes, full + 8 * s, rank);
        if (++s == GX_STAGES) {
          s = 0;
          ph ^= 1;
        }
#endif
      }
    }
  } else {
    // Consumers (the roles are the two branches of one if/else, so ptxas applies setmaxnreg).
    regs_alloc<GX_REGS_CONSUMER>();
    const int cw = wg - 1;  // this consumer's 64 rows of the tile
    const int lane = tid % 32, warp = tid / 32, gq = lane >> 2, t4 = lane & 3;
    const h3u32 sAw = sA + cw * 64 * 128;  // its rows of the A stage 0
    float acc[GX_BN / 2];  // never zeroed: each tile's first wgmma writes them without reading
    int s = 0;
    h3u32 ph = 0;
    void *const out = dx;
#if GR_DX_SWIGLU
    const void *const sx = swiglu_x;
#else
    const void *const sx = nullptr;
#endif
    for (int t = first; t < tiles; t += stride) {
      int tm, tn;
      gx_tile(t, walkM, rank, tm, tn);
      gx_mainloop(acc, sAw, sB, full, empty, peer, lane, s, ph);
      // Accumulator 4 j + 2 h + e: row 16 warp + gq + 8 h, column 8 j + 2 t4 + e of the warpgroup's 64 x GX_BN block.
      const long long r0 = (long long)tm * GX_BM + cw * 64 + warp * 16 + gq;
      const long long c0 = (long long)tn * GX_BN + 2 * t4;
#if GX_LORA_K
#if GR_RESIDUAL
      const float *res = (const float *)residual;
#else
      const float *res = nullptr;
#endif
      gx_lora_epilogue(acc, sAw, sB, full, empty, peer, lane, s, ph, r0, c0, M, out, res, sx);
#else
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const long long r = r0 + 8 * h;
        if (r >= M) continue;
#if GR_DX_SWIGLU
        // (no residual with the swiglu): 8 column pairs' x loaded before their stores (gr_swiglu_x)
#pragma unroll
        for (int j0 = 0; j0 < GX_BN / 8; j0 += 8) {
          GrSwigluX xs[8];
#pragma unroll
          for (int j = 0; j < 8; ++j)
            if (c0 + 8 * (j0 + j) < GR_K) xs[j] = gr_swiglu_x(sx, r, c0 + 8 * (j0 + j), GR_K);
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            const long long c = c0 + 8 * (j0 + j);
            if (c < GR_K)
              gr_dx_store2_x<GR_DX_BF>(out, xs[j], r, c, GR_K,
                                       make_float2(acc[4 * (j0 + j) + 2 * h], acc[4 * (j0 + j) + 2 * h + 1]));
          }
        }
#else
#pragma unroll
        for (int j = 0; j < GX_BN / 8; ++j) {
          const long long c = c0 + 8 * j;
          if (c < GR_K) {  // GR_K is a multiple of 8: c + 1 is inside too
            float2 v = make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
#if GR_RESIDUAL  // h3-fuse-grad: residual + dX, grad_add's sum
            const float2 o = *(const float2 *)((const float *)residual + r * GR_K + c);
            v = make_float2(__fadd_rn(o.x, v.x), __fadd_rn(o.y, v.y));
#endif
            gr_dx_store2<0, GR_DX_BF>(out, sx, r, c, GR_K, v);
          }
        }
#endif
      }
#endif
    }
  }
#if GX_CLUSTER == 2
  cluster_sync();  // the peer may still multicast into this CTA's stages or arrive on its barriers
#endif
}
