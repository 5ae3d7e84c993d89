// Hopper linear with 256-row tiles (sm_90a; `h3c compile --tune gemm_bm=256`): the same k_chunks chain per output as
// gemm_sm90.cuh and gemm_bf16.cuh (every output's F32 sum starts at 0 and adds the 16-wide chunks of K in ascending
// order; wgmma's chunk function equals mma.sync's, whatever its N), so the same bits; only the tile differs.
//
// Why: the linears whose N is 5,376 (to_out, fc2) cut into 128 x 256 tiles give 66 x 21 = 1,386 tiles, 10.5 waves of
// 132 SMs, and each k-block of a tile is 2 x 4 wgmmas between two ring waits. A 256 x GT_BN tile (GT_BN = 168: 33 x 32
// = 1,056 tiles, exactly 8 waves; 192: 7 waves) loads 32 KiB of x and GT_BN x 128 bytes of W a stage for twice the
// rows (a fifth fewer bytes per multiply-add than 128 x 256) and gives each consumer warpgroup 2 x 4 wgmmas of 64 x
// GT_BN per k-block, so 4 stages fit beside nothing else: the shape of cuBLAS's kernels for these GEMMs (256 x 152, 4
// stages, bench/NOTES.md 2026-12-04).
//
// Shape: 384 threads. Warpgroup 0 is the producer (one thread issues the TMA loads: two 128 x 64 boxes of x and one
// GT_BN x 64 box of W a stage); warpgroups 1 and 2 each own 128 rows of the tile as two 64-row accumulator sets (acc0:
// rows 0-63 of its half, acc1: rows 64-127), GT_BN / 2 accumulators each. The grid is persistent (at most one CTA per
// SM) and walks the tiles in groups of G9_GROUP_M row tiles. Epilogues none, residual and gate_residual (swiglu pairs
// value and gate rows by 128, qk_norm_rope needs whole 128-channel heads: neither divides GT_BN in general).
//
// G9_CLUSTER = 2 launches pairs of CTAs (a 2 x 1 cluster) on column tiles 2p and 2p + 1 of the same row tile: each CTA
// loads one of the two 128-row boxes of x, multicast into both, and its own box of W, so the pair reads x from L2 once
// (cuBLAS's 1 x 2 clusters for these shapes). A stage is refilled only when the consumers of both CTAs released it.
// The second tile of a pair past the last column tile reads zeros and stores nothing. Timing only.
//
// The epilogue: in registers (gemm_epilogue.cuh's gm_store_block, 4-byte accesses), or with G9_EPI_SMEM staged
// through shared memory one 64-row block at a time (gemm_epilogue_smem.cuh: the same bits, 16-byte accesses), each
// consumer's area padded to whole 64-column boxes; 3 stages fit beside it. GT_EPI_BULK (gemm_epi_bulk=1): each
// consumer warp finishes 8 of its rows at a time in registers exactly as gm_store_block does (gm_final2 of each pair,
// packed), writes them into its own 8-row buffer and stores each row with one bulk copy (cp.async.bulk, issued by
// lanes 0-7 and waited for only when the buffer is written again), so the epilogue's global stores leave the
// consumers' instruction stream: ncu of to_out (H100, 2026-12-07) counted ~10 % of the consumers' samples in the
// register epilogue of this tile, its 4-byte stores with their addresses and bounds, against 1.9 % for cuBLAS's.
// The 8 buffers take 8 x 8 x GT_BN x 2 bytes: 4 stages fit beside them up to GT_BN = 152.
// Measured (H200, 2026-12-07, bench/NOTES.md): byte-equal to the register epilogue, and slower: to_out plain 1.369 M
// cycles at 256 x 152 (149 M instructions, cuBLAS 1.277 M and 64.5 M); with gate_residual, whose gate and residual
// it reads a bf16 pair a lane, 9 % slower than the default on to_out. Kept opt-in, as a measured form.
//
// Defined by the emitter: G9_ENTRY H3C_PARAMS GM_K GT_BN G9_BN (= GT_BN, for the staged epilogue) G9_STAGES
// G9_GROUP_M G9_INFLIGHT G9_CLUSTER (1 or 2), G9_EPI_SMEM and GT_EPI_BULK (each defined or not), the epilogue's defines
// (gemm_epilogue.cuh), and gt_wgmma / gt_wgmma_first (the m64nGT_BNk16 wgmma with and without the accumulator's
// previous value, as hopper.cuh's wgmma_256 / wgmma_256_first). Parameters as gemm_sm90.cuh, with x's and t's boxes
// 128 rows and W's and the up slot's GT_BN rows.
#define GT_BM 256
#define GT_BK 64
#define GT_THREADS 384
#define GT_A_BYTES (GT_BM * GT_BK * 2)
#define GT_B_BYTES (GT_BN * GT_BK * 2)
#define GT_KT ((GM_K + GT_BK - 1) / GT_BK)
// All k-blocks of a tile's chain: x's (the last zero-filled past K), then the LoRA input's (whole blocks of 64).
#define GT_KT_ALL (GT_KT + GM_LORA_K / GT_BK)
#define GT_TILES_N ((GM_N + GT_BN - 1) / GT_BN)
// The staged walk's rows per batch: acc1 stays live through acc0's walk, so a quarter of the 128-row kernel's 8 (an eighth at
// 192 accumulators: 4 rows spilled 64 bytes there, ptxas -v).
#define GT_WALK_BATCH (GT_BN > 176 ? 1 : 2)
#if GM_LORA_K % GT_BK
#error "the LoRA width is a multiple of the k-block"
#endif
#if GT_BN % 8 || GT_BN < 8 || GT_BN > 256
#error "wgmma's N is a multiple of 8 up to 256"
#endif
#if GM_EPI == GM_EPI_SWIGLU || GM_EPI == GM_EPI_QK_NORM_ROPE
#error "the 256-row tile serves the epilogues none, residual and gate_residual"
#endif

// A consumer warp's release of stage s (hopper.cuh): with G9_CLUSTER = 2 the peer multicasts half of x into it.
__device__ __forceinline__ void gt_release(h3u32 bar, h3u32 peer) { ring_release<G9_CLUSTER == 2>(bar, peer); }

// One k-block of a consumer warpgroup (stage s): for each 16-wide chunk, the wgmma of its rows 0-63 then of its rows
// 64-127 (each accumulator set's chain stays in chunk order), the first k-block of a tile (FIRST) starting both chains
// with write-only accumulators; then the stage's release once its wgmmas completed (with G9_INFLIGHT 1 the previous
// stage's, this k-block's staying in flight). G9_INFLIGHT 2 is cuBLAS's order (bench/NOTES.md, 2026-12-07 16:32): the
// four wgmmas of rows 0-63, then the wait for the previous k-block's group and its stage's release, then the four of
// rows 64-127 and the commit, so the tensor pipe always holds queued work while a stage is held no longer than
// without a k-block in flight; each set's chain keeps its chunk order (the same bits). Measured no faster than 0
// (to_out, 4 stages, 2-CTA, register epilogue: 1.373 M cycles against 1.364 M, H100 2026-12-07): opt-in only.
// LIVE: how many of this consumer's two 64-row blocks hold a row < M (2, 1: rows 0-63 only, 0: none); a block of rows
// past the end issues no wgmma (a request of 70 rows runs one 256-row tile per column tile: a quarter of its tensor
// work), and its accumulators, never stored, stay as they are. (LIVE is a template argument and the main loop is
// chosen once per tile: a wgmma under a run-time condition inside the loop made ptxas serialize them all.)
// sAw: this consumer's 128 rows of the A stage 0 (warp-uniform: from hopper.cuh's warpgroup_index).
template <int LIVE, bool FIRST>
__device__ __forceinline__ void gt_kblock(float *acc0, float *acc1, h3u32 sAw, h3u32 sB, h3u32 full, h3u32 empty,
                                          h3u32 peer, int lane, int &s, h3u32 &ph) {
  mbar_wait(full + 8 * s, ph);
  if constexpr (LIVE > 0) {
    wgmma_fence();
    const unsigned long long da0 = wgmma_desc_sw128(sAw + s * GT_A_BYTES);
    const unsigned long long da1 = wgmma_desc_sw128(sAw + s * GT_A_BYTES + 64 * 128);
    const unsigned long long db = wgmma_desc_sw128(sB + s * GT_B_BYTES);
    // The wgmma of 16-wide chunk kk on one accumulator set, the tile's first (FIRST, kk 0) starting its chain.
    auto chunk = [&](float *acc, unsigned long long da, int kk) {
      if (FIRST && kk == 0) gt_wgmma_first(acc, da, db);
      else gt_wgmma(acc, da + 2 * kk, db + 2 * kk, 1);
    };
#if G9_INFLIGHT == 2
    // With one live set, its first two chunks go before the wait and its last two after it.
    constexpr int kBefore = LIVE == 2 ? GT_BK / 16 : GT_BK / 32;
#pragma unroll
    for (int kk = 0; kk < kBefore; ++kk) chunk(acc0, da0, kk);
    if (!FIRST) {
      wgmma_wait<0>();
      if (lane == 0) gt_release(ring_before(empty, s, G9_STAGES), peer);
    }
#pragma unroll
    for (int kk = kBefore; kk < GT_BK / 16; ++kk) chunk(acc0, da0, kk);
    if constexpr (LIVE == 2) {
#pragma unroll
      for (int kk = 0; kk < GT_BK / 16; ++kk) chunk(acc1, da1, kk);
    }
#else
#pragma unroll
    for (int kk = 0; kk < GT_BK / 16; ++kk) {
      chunk(acc0, da0, kk);
      if constexpr (LIVE == 2) chunk(acc1, da1, kk);
    }
#endif
    wgmma_commit();
  }
#if G9_INFLIGHT == 2
  if (LIVE == 0 && !FIRST && lane == 0) gt_release(ring_before(empty, s, G9_STAGES), peer);
#elif G9_INFLIGHT
  if constexpr (LIVE > 0) wgmma_wait<1>();
  if (!FIRST && lane == 0) gt_release(ring_before(empty, s, G9_STAGES), peer);
#else
  if constexpr (LIVE > 0) wgmma_wait<0>();
  if (lane == 0) gt_release(empty + 8 * s, peer);
#endif
  if (++s == G9_STAGES) { s = 0; ph ^= 1; }
}

// One consumer warpgroup's main loop over the k-blocks of a tile (LIVE as gt_kblock); prefetch() is called before
// k-block G9_PREFETCH_AT (gemm_epilogue.cuh; gemm_sm90.cuh's g9_mainloop says why two loops).
template <int LIVE, class Prefetch>
__device__ __forceinline__ void gt_mainloop(float *acc0, float *acc1, h3u32 sAw, h3u32 sB, h3u32 full, h3u32 empty,
                                            h3u32 peer, int lane, int &s, h3u32 &ph, const Prefetch &prefetch) {
  gt_kblock<LIVE, true>(acc0, acc1, sAw, sB, full, empty, peer, lane, s, ph);
#pragma unroll 1
  for (int kb = 1; kb < G9_PREFETCH_AT(GT_KT_ALL); ++kb)
    gt_kblock<LIVE, false>(acc0, acc1, sAw, sB, full, empty, peer, lane, s, ph);
  prefetch();
#pragma unroll 1
  for (int kb = G9_PREFETCH_AT(GT_KT_ALL); kb < GT_KT_ALL; ++kb)
    gt_kblock<LIVE, false>(acc0, acc1, sAw, sB, full, empty, peer, lane, s, ph);
#if G9_INFLIGHT
  if constexpr (LIVE > 0) wgmma_wait<0>();
  if (lane == 0) gt_release(ring_before(empty, s, G9_STAGES), peer);
#endif
}

// Tile t of the persistent walk: row tiles vary fastest inside a group of G9_GROUP_M row tiles (with G9_CLUSTER = 2,
// t counts pairs of column tiles, and tn is this CTA's column tile of the pair: cluster rank `rank`).
__device__ __forceinline__ void gt_tile(int t, int tilesM, h3u32 rank, int &tm, int &tn) {
  grouped_tile(t, tilesM, (GT_TILES_N + G9_CLUSTER - 1) / G9_CLUSTER, G9_GROUP_M, tm, tn);
  tn = tn * G9_CLUSTER + (int)rank;
}

#ifdef GT_EPI_BULK
#if GM_OUT_F32 || GM_OUTN % 8 != 0 || defined(G9_EPI_SMEM)
#error "the bulk-row epilogue serves bf16 outputs with GM_OUTN % 8 == 0 (16-byte rows), instead of the staged one"
#endif
#define GT_BULK_PITCH (GT_BN * 2)         // a staged row: the tile's GT_BN outputs (a multiple of 16 bytes)
#define GT_BULK_BYTES (8 * GT_BULK_PITCH)  // one consumer warp's buffer of 8 rows
// One consumer warp's 16 rows of a 64-row accumulator block (rows r0 + 16 warp + g and + 8, g = lane / 4; fragment j
// holds columns c0 + 8 j + 2 t4, + 1) through the epilogue and out: 8 rows at a time, each pair finished by
// gm_final2 and packed as gm_store2 does (the same bits), written into the warp's buffer (buf, and bufp: the same as
// a generic pointer) at row g, then one bulk copy per row (one per output it spans: qkv's q, k and v) by lanes 0-7.
// The buffer is written again only after those lanes' copies have read it; rows >= M are neither written nor copied.
// The row pitch is GT_BN / 2 words: with GT_BN % 16 == 8 (136, 152, 168, 184) the 8 rows start on distinct 4-bank
// groups, so a warp's 4-byte writes (a quad on 4 consecutive words of each row) hit 32 banks; other widths conflict.
template <int NF>
__device__ __forceinline__ void gt_bulk_block(const GmEpilogue &ep, const void *bias, const float *acc, h3u32 buf,
                                              unsigned char *bufp, long long r0, long long c0, long long M, int warp,
                                              int lane) {
  const int g = lane >> 2, t4 = lane & 3;
  const long long cEnd = c0 + GT_BN < GM_N ? c0 + GT_BN : GM_N;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (lane < 8) bulk_wait_read();
    __syncwarp();
    const long long r = r0 + warp * 16 + g + 8 * h;
    if (r < M) {
      const long long trow = gm_trow(ep, r);
#pragma unroll
      for (int j = 0; j < NF; ++j) {
        const long long c = c0 + 8 * j + 2 * t4;
        if (c >= GM_N) continue;
        int o;
        const long long at = gm_at(ep, r, c, o);
        float y0, y1;
        gm_final2(ep, r, trow, at - r * GM_OUTN, gm_bias(bias, acc[j * 4 + h * 2], c),
                  gm_bias(bias, acc[j * 4 + h * 2 + 1], c + 1), y0, y1);
        *(h3u32 *)(bufp + g * GT_BULK_PITCH + (8 * j + 2 * t4) * 2) = pack_bf2(y0, y1);
      }
    }
    fence_proxy_async_shared();
    __syncwarp();
    const long long rr = r0 + warp * 16 + lane + 8 * h;
    if (lane < 8 && rr < M) {
      for (long long c = c0; c < cEnd;) {
        int o;
        const long long at = gm_at(ep, rr, c, o);
        const long long outEnd = ((long long)o + 1) * GM_OUTN;  // where output o's row ends (qkv: q, k, v)
        const long long end = outEnd < cEnd ? outEnd : cEnd;
        bulk_store((h3bf *)gm_out(ep, o) + at, buf + lane * GT_BULK_PITCH + (h3u32)(c - c0) * 2, (h3u32)(end - c) * 2);
        c = end;
      }
      bulk_commit();
    }
  }
}
#endif

extern "C" __global__ void __launch_bounds__(GT_THREADS, 1) G9_ENTRY(H3C_PARAMS) {
  h3c_grid_dependency_wait();  // (common.cuh) before any global memory access
  extern __shared__ unsigned char gt_raw[];
  const h3u32 base = (smem_u32(gt_raw) + 1023u) & ~1023u;  // the 128-byte swizzle needs 1,024-byte aligned tiles
  const h3u32 sA = base, sB = base + G9_STAGES * GT_A_BYTES;  // GT_B_BYTES is a multiple of 1,024 (GT_BN % 8 == 0)
#ifdef G9_EPI_SMEM
  // The consumers' staging areas after the ring (1,024-byte aligned like it), then the barriers, then gate_residual's
  // table rows (8 warps x 32).
  const h3u32 sOut = sB + G9_STAGES * GT_B_BYTES;
  unsigned char *const sOutPtr = gt_raw + (sOut - smem_u32(gt_raw));  // the same, as a generic pointer (the walks)
  const h3u32 full = sOut + 2 * G9_OUT_BYTES, empty = full + 8 * G9_STAGES;
  long long *const trows = (long long *)(gt_raw + (empty + 8 * G9_STAGES - smem_u32(gt_raw)));
#elif defined(GT_EPI_BULK)
  // The consumer warps' 8-row buffers after the ring, then the barriers.
  const h3u32 sBulk = sB + G9_STAGES * GT_B_BYTES;
  unsigned char *const sBulkPtr = gt_raw + (sBulk - smem_u32(gt_raw));
  const h3u32 full = sBulk + 8 * GT_BULK_BYTES, empty = full + 8 * G9_STAGES;
#else
  const h3u32 full = sB + G9_STAGES * GT_B_BYTES, empty = full + 8 * G9_STAGES;
#endif
  const int wg = warpgroup_index(), tid = threadIdx.x % 128;
  const long long M = rows;
  const int tilesM = (int)((M + GT_BM - 1) / GT_BM);
#if G9_CLUSTER == 2
  const h3u32 rank = cluster_rank(), peer = rank ^ 1u;
  const int first = blockIdx.x / 2, stride = gridDim.x / 2;
#else
  const h3u32 rank = 0, peer = 0;
  const int first = blockIdx.x, stride = gridDim.x;
#endif
  const int tiles = tilesM * ((GT_TILES_N + G9_CLUSTER - 1) / G9_CLUSTER);
  if (threadIdx.x == 0) {
    for (int s = 0; s < G9_STAGES; ++s) {
      mbar_init(full + 8 * s, 1);                // the producer's expect_tx; the TMA bytes complete the phase
      mbar_init(empty + 8 * s, 8 * G9_CLUSTER);  // one arrival per consumer warp of each CTA writing the stage
    }
    mbar_init_fence();
  }
#if G9_CLUSTER == 2
  cluster_sync();
#else
  __syncthreads();
#endif

  if (wg == 0) {
    // 24 x 128 + 240 x 256 = 168 x 384: the producer's one TMA thread fits in 24 (ptxas -v: no spills), the consumers
    // hold GT_BN accumulators each.
    regs_dealloc<24>();
    if (tid == 0) {
      tma_prefetch_map(&x_map);
      tma_prefetch_map(&w_map);
      int s = 0;
      h3u32 ph = 0;
      for (int t = first; t < tiles; t += stride) {
        int tm, tn;
        gt_tile(t, tilesM, rank, tm, tn);
        for (int kb = 0; kb < GT_KT_ALL; ++kb) {
          // x's and W's k-blocks, then (GM_LORA_K) the LoRA input's and the up slot's, at the same rows.
          const GmChainBlock cb = gm_chain_block(kb, GT_KT, GM_CHAIN_MAPS);
          const H3cTensorMap *const amap = cb.a, *const bmap = cb.b;
          const int kc = cb.col;
          mbar_wait(empty + 8 * s, ph ^ 1);  // a fresh barrier counts as released (parity 1 done)
          mbar_expect_tx(full + 8 * s, GT_A_BYTES + GT_B_BYTES);
#if G9_CLUSTER == 2
          // This CTA's 128 rows of x (rank 0: rows 0-127 of the tile, rank 1: 128-255) into both CTAs of the pair.
          tma_load_2d_multicast(sA + s * GT_A_BYTES + rank * (GT_A_BYTES / 2), amap, kc, tm * GT_BM + (int)rank * 128,
                                full + 8 * s, (unsigned short)3);
#else
          tma_load_2d(sA + s * GT_A_BYTES, amap, kc, tm * GT_BM, full + 8 * s);
          tma_load_2d(sA + s * GT_A_BYTES + GT_A_BYTES / 2, amap, kc, tm * GT_BM + 128, full + 8 * s);
#endif
          tma_load_2d(sB + s * GT_B_BYTES, bmap, kc, tn * GT_BN, full + 8 * s);
          if (++s == G9_STAGES) { s = 0; ph ^= 1; }
        }
      }
    }
  } else {
    // Consumers (the roles are the two branches of one if/else, so ptxas applies setmaxnreg).
    regs_alloc<240>();
    const int cw = wg - 1;  // this consumer's 128 rows of the tile
    const int warp = tid / 32, lane = tid % 32;
    const h3u32 sAw = sA + cw * 128 * 128;  // its rows of the A stage, for the main loop's descriptors
    const void *B = GM_BIAS_PARAM;
    const GmEpilogue ep = GM_EPILOGUE_PARAMS;
    // (Never zeroed: each tile's first wgmmas write them without reading.)
    float acc0[GT_BN / 2], acc1[GT_BN / 2];
    int s = 0;
    h3u32 ph = 0;
    for (int t = first; t < tiles; t += stride) {
      int tm, tn;
      gt_tile(t, tilesM, rank, tm, tn);
      const long long r0 = (long long)tm * GT_BM + cw * 128, c0 = (long long)tn * GT_BN;
#ifdef G9_RES_PREFETCH
      // One of this consumer's 128 rows a thread.
      const auto prefetch = [&] { gm_prefetch_residual_row(ep, r0 + tid, c0, GT_BN, M); };
#else
      const auto prefetch = [] {};
#endif
      // (r0 is warp-uniform, from hopper.cuh's warpgroup_index: this branch keeps the main loop on the uniform datapath)
      if (r0 + 64 < M) gt_mainloop<2>(acc0, acc1, sAw, sB, full, empty, peer, lane, s, ph, prefetch);
      else if (r0 < M) gt_mainloop<1>(acc0, acc1, sAw, sB, full, empty, peer, lane, s, ph, prefetch);
      else gt_mainloop<0>(acc0, acc1, sAw, sB, full, empty, peer, lane, s, ph, prefetch);
      // Rows 0-63 of this consumer's half from acc0, rows 64-127 from acc1. The producer refills the ring meanwhile,
      // so the next tile's main loop starts on full stages.
#ifdef G9_EPI_SMEM
      g9_stage_block_synced<GT_BN / 8>(ep, B, acc0, sOut + cw * G9_OUT_BYTES, r0, c0, M, cw, tid);
      g9_walk_block<GT_BN / 8, 4, GT_WALK_BATCH>(ep, sOutPtr + cw * G9_OUT_BYTES, trows + 128 * cw + 32 * warp, r0, c0,
                                                 M, warp, lane, GT_BN / 8);
      g9_stage_block_synced<GT_BN / 8>(ep, B, acc1, sOut + cw * G9_OUT_BYTES, r0 + 64, c0, M, cw, tid);
      g9_walk_block<GT_BN / 8, 4, GT_WALK_BATCH>(ep, sOutPtr + cw * G9_OUT_BYTES, trows + 128 * cw + 32 * warp,
                                                 r0 + 64, c0, M, warp, lane, GT_BN / 8);
#elif defined(GT_EPI_BULK)
      const int bw = cw * 4 + warp;  // this warp's buffer
      gt_bulk_block<GT_BN / 8>(ep, B, acc0, sBulk + bw * GT_BULK_BYTES, sBulkPtr + bw * GT_BULK_BYTES, r0, c0, M, warp,
                               lane);
      gt_bulk_block<GT_BN / 8>(ep, B, acc1, sBulk + bw * GT_BULK_BYTES, sBulkPtr + bw * GT_BULK_BYTES, r0 + 64, c0, M,
                               warp, lane);
#else
      gm_store_block<GT_BN / 8>(ep, B, acc0, r0, c0, M, warp, lane >> 2, lane & 3);
      gm_store_block<GT_BN / 8>(ep, B, acc1, r0 + 64, c0, M, warp, lane >> 2, lane & 3);
#endif
    }
#ifdef GT_EPI_BULK
    if (lane < 8) bulk_wait();  // the last copies' global writes done before the grid completes
#endif
  }
#if G9_CLUSTER == 2
  cluster_sync();  // the peer may still multicast into this CTA's stages or arrive on its barriers
#endif
}
