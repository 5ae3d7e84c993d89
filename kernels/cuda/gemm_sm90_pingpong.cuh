// Hopper linear, ping-pong schedule (sm_90a; `h3c compile --tune gemm_pingpong=1`): the same k_chunks chain per
// output as gemm_sm90.cuh and gemm_bf16.cuh (every output's F32 sum starts at 0 and adds the 16-wide chunks of K in
// ascending order; wgmma's chunk function equals mma.sync's), so the same bits; only the schedule differs.
//
// Why: in the cooperative kernel both consumer warpgroups finish a 128 x 256 tile together and run its epilogue
// together, so the tensor core idles for every tile's epilogue (about 6 % of a tile of to_out, K = 5,376; fc2 with
// K = 14,336 hides it and is the one linear at cuBLAS speed). Here each consumer warpgroup owns whole 128 x 128
// tiles (two m64n128k16 wgmmas per 16-wide chunk, 128 accumulators per thread) and the two take the CTA's tiles in
// turns: while one runs its epilogue, the other's main loop keeps the tensor core busy. The producer fills one ring
// with the tiles' k-blocks in tile order (CTA-local tile i belongs to consumer i % 2), so the consumers' main loops
// follow each other through the ring.
//
// The main loops take strict turns (tile i's starts after tile i-1's has waited for all its k-blocks; one mbarrier
// per consumer, `turn`): a ring stage's `full` barrier is then never more than one phase behind the phase its
// consumer waits for. Without the turns, consumer 1 would wait on phases G9_KT / G9_STAGES ahead of the barrier, and a
// parity wait cannot tell phase n from phase n - 2: it would read stages the producer had not filled.
//
// Shape: 384 threads; a stage holds a 128 x 64 A box and a 128 x 64 B box (32 KiB). swiglu tiles hold 64 value rows
// and the 64 matching gate rows of W (64 output columns per tile).
//
// Defined by the emitter: G9_ENTRY H3C_PARAMS GM_K G9_STAGES G9_GROUP_M G9_INFLIGHT, and the epilogue's defines
// (gemm_epilogue.cuh). Parameters as gemm_sm90.cuh (the B box is 128 rows there too).
#define G9_BM 128
#define G9_BK 64
#define G9_THREADS 384
#define G9_A_BYTES (G9_BM * G9_BK * 2)
#define G9_B_BYTES (128 * G9_BK * 2)
#define G9_KT ((GM_K + G9_BK - 1) / G9_BK)
#if GM_EPI == GM_EPI_SWIGLU
#define G9_TILES_N ((GM_OUTN + 63) / 64)  // 64 output columns per tile (value + gate = 128 weight rows)
#else
#define G9_TILES_N ((GM_N + 127) / 128)
#endif

// wgmma_128 (m64n128k16, both operands K-major in shared memory): hopper.cuh.

extern "C" __global__ void __launch_bounds__(G9_THREADS, 1) G9_ENTRY(H3C_PARAMS) {
  h3c_grid_dependency_wait();  // (common.cuh) before any global memory access
  extern __shared__ unsigned char g9_raw[];
  const h3u32 base = (smem_u32(g9_raw) + 1023u) & ~1023u;  // the 128-byte swizzle needs 1,024-byte aligned tiles
  const h3u32 sA = base, sB = base + G9_STAGES * G9_A_BYTES;
  const h3u32 full = sB + G9_STAGES * G9_B_BYTES, empty = full + 8 * G9_STAGES, turn = empty + 8 * G9_STAGES;
  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  const long long M = rows;
  const int tilesM = (int)((M + G9_BM - 1) / G9_BM);
  const int tiles = tilesM * G9_TILES_N;
  if (threadIdx.x == 0) {
    for (int s = 0; s < G9_STAGES; ++s) {
      mbar_init(full + 8 * s, 1);   // the producer's expect_tx; the TMA bytes complete the phase
      mbar_init(empty + 8 * s, 4);  // one arrival per warp of the consumer that owns the stage's tile
    }
    mbar_init(turn, 4);  // consumer 0's main loop of its j-th tile is done (phase j); one arrival per warp
    mbar_init(turn + 8, 4);  // consumer 1's
    mbar_init_fence();
  }
  __syncthreads();

  if (wg == 0) {
    regs_dealloc<40>();
    if (tid == 0) {
      tma_prefetch_map(&x_map);
      tma_prefetch_map(&w_map);
      int s = 0;
      h3u32 ph = 0;
      for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int tm, tn;
        grouped_tile(t, tilesM, G9_TILES_N, G9_GROUP_M, tm, tn);
#if GM_EPI == GM_EPI_SWIGLU
        const int w0 = tn * 64, w1 = GM_OUTN + tn * 64;  // 64 value rows, then the 64 matching gate rows
#endif
        for (int kb = 0; kb < G9_KT; ++kb) {
          mbar_wait(empty + 8 * s, ph ^ 1);  // a fresh barrier counts as released (parity 1 done)
          mbar_expect_tx(full + 8 * s, G9_A_BYTES + G9_B_BYTES);
          tma_load_2d(sA + s * G9_A_BYTES, &x_map, kb * G9_BK, tm * G9_BM, full + 8 * s);
#if GM_EPI == GM_EPI_SWIGLU
          // Two 64-row boxes of the 128-row W map: the emitter encodes w_map with 64-row boxes for this kernel.
          tma_load_2d(sB + s * G9_B_BYTES, &w_map, kb * G9_BK, w0, full + 8 * s);
          tma_load_2d(sB + s * G9_B_BYTES + G9_B_BYTES / 2, &w_map, kb * G9_BK, w1, full + 8 * s);
#else
          tma_load_2d(sB + s * G9_B_BYTES, &w_map, kb * G9_BK, tn * 128, full + 8 * s);
#endif
          if (++s == G9_STAGES) { s = 0; ph ^= 1; }
        }
      }
    }
  } else {
    // Consumers (the roles are the two branches of one if/else, so ptxas applies setmaxnreg).
    regs_alloc<232>();
    const int cw = wg - 1;  // this consumer takes the CTA-local tiles i with i % 2 == cw
    const int warp = tid / 32, lane = tid % 32, g = lane >> 2, t4 = lane & 3;
    const void *B = GM_BIAS_PARAM;
    const GmEpilogue ep = GM_EPILOGUE_PARAMS;
    float acc0[64], acc1[64];  // rows 0-63 and 64-127 of the tile, 128 columns each
    for (int i = cw, j = 0, t = blockIdx.x + cw * gridDim.x; t < tiles; i += 2, ++j, t += 2 * gridDim.x) {
      int tm, tn;
      grouped_tile(t, tilesM, G9_TILES_N, G9_GROUP_M, tm, tn);
      // Wait for the main loop of CTA-local tile i - 1 (the other consumer's tile j - 1 + cw, its phase j - 1 + cw).
      if (i > 0) mbar_wait(turn + 8 * (1 - cw), (h3u32)((j - 1 + cw) & 1));
      // The ring position of this tile's first k-block: every earlier CTA-local tile used G9_KT stages.
      long long q = (long long)i * G9_KT;
      for (int kb = 0; kb < G9_KT; ++kb, ++q) {
        const int s = (int)(q % G9_STAGES);
        mbar_wait(full + 8 * s, (h3u32)((q / G9_STAGES) & 1));
        wgmma_fence();
        const unsigned long long da = wgmma_desc_sw128(sA + s * G9_A_BYTES);
        const unsigned long long db = wgmma_desc_sw128(sB + s * G9_B_BYTES);
#pragma unroll
        for (int kk = 0; kk < G9_BK / 16; ++kk) {
          wgmma_128(acc0, da + 2 * kk, db + 2 * kk, (kb | kk) != 0);
          wgmma_128(acc1, da + ((64 * 128) >> 4) + 2 * kk, db + 2 * kk, (kb | kk) != 0);
        }
        wgmma_commit();
#if G9_INFLIGHT
        wgmma_wait<1>();
        if (kb > 0 && lane == 0) mbar_arrive(empty + 8 * (int)((q - 1) % G9_STAGES));
#else
        wgmma_wait<0>();
        if (lane == 0) mbar_arrive(empty + 8 * s);
#endif
      }
#if G9_INFLIGHT
      wgmma_wait<0>();
      if (lane == 0) mbar_arrive(empty + 8 * (int)((q - 1) % G9_STAGES));
#endif
      if (lane == 0) mbar_arrive(turn + 8 * cw);  // the other consumer's next main loop may start
      // Epilogue in registers (gemm_epilogue.cuh) while the other consumer's main loop runs: rows 0-63 from acc0,
      // rows 64-127 from acc1.
#if GM_EPI == GM_EPI_SWIGLU
      const long long c0 = (long long)tn * 64;
#else
      const long long c0 = (long long)tn * 128;
#endif
      gm_store_block<16>(ep, B, acc0, (long long)tm * G9_BM, c0, M, warp, g, t4);
      gm_store_block<16>(ep, B, acc1, (long long)tm * G9_BM + 64, c0, M, warp, g, t4);
    }
  }
}
