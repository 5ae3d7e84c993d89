// Hopper tensor-core linear (sm_90a: TMA + mbarrier ring + wgmma, warp-specialized, persistent) in the contract's
// k_chunks order with one unit (docs/contract.md section 4): every output's F32 sum starts at 0 and adds the 16-wide
// chunks of K in ascending order, exactly the chain of gemm_bf16.cuh at units 1. wgmma's chunk function equals
// mma.sync's (measured, ../shared/HOPPER-KERNELS.md section 1), so both kernels give the same bits, whatever the tile,
// the tile order or the SM; the epilogue is the same code (gemm_epilogue.cuh). K is never split across CTAs.
//
// Shape: 384 threads. Warpgroup 0 is the producer (one thread issues the TMA loads of a G9_STAGES-deep ring of 128 x 64
// A and G9_BN x 64 B tiles); warpgroups 1 and 2 each own 64 rows of the 128 x G9_BN tile and issue m64nG9_BNk16 wgmmas.
// G9_BN is 256, or 192 for the linears whose N is an odd multiple of 256 (to_out and fc2, N = 5,376 = 21 x 256: 66 x 21
// tiles of 128 x 256 take 10.5 waves of 132 SMs, 66 x 28 tiles of 128 x 192 exactly 14), or 64 for a lora_down of rank
// <= 64 (epilogue none): on the 256-wide tile three quarters of its wgmma work and B's stage are zeros past N. The
// 192-wide tile serves the epilogues none, residual and gate_residual only (swiglu pairs value and gate rows by 128,
// qk_norm_rope needs whole 128-channel heads). The grid is persistent (at most one CTA per SM) and walks the tiles in
// groups of G9_GROUP_M row tiles, so the CTAs running at once share their A and B tiles in L2. swiglu tiles hold 128
// value rows and the 128 matching gate rows of W, so each thread finishes value and gate of the same output column in
// registers.
//
// G9_CLUSTER = 2 launches pairs of CTAs (a 2 x 1 cluster) on row tiles 2p and 2p + 1 of the same column tile: each
// CTA loads its own A and one of the two 128-row halves of B, multicast into both CTAs, so the pair reads B from L2
// once (a third less L2 traffic per tile). A stage is refilled only when the consumers of both CTAs released it. The
// second tile of a pair past the last row tile reads zeros and stores nothing. Timing only: the chains are the same.
//
// G9_EPI_SMEM stages each consumer's rounded 64-row block in shared memory (gemm_epilogue_smem.cuh). With G9_EPI_WARPS
// too, the consumers only write that stage (qkv's qk_norm_rope: its finished outputs) and go on to their next tile's
// main loop; warps 1-3 of the producer warpgroup (idle otherwise: one thread issues the TMA loads) wait for it on a
// full barrier, walk it (residual and gate loads, swiglu, the 16-byte stores) and free it on an empty barrier, so the
// tensor cores idle only while the stage is written (measured on fc1 + swiglu: tensor pipe 80.8 -> 93.8 %,
// bench/NOTES.md).
//
// G9_EPI_SHARED (with G9_EPI_WARPS) keeps one staging area instead of two, which the consumers take in turns: consumer
// 0 writes its block once the epilogue warps have walked consumer 1's block of the previous tile, consumer 1 once they
// have walked consumer 0's block of this tile (consumer 0 meanwhile goes on to the next tile's main loop alone). The
// 32 KiB it frees at width 256 hold a fourth ring stage: ncu of to_out (bench/NOTES.md, 2026-12-07 10:46) counted a
// third of the consumers' samples waiting for the ring's data at 3 stages with a k-block in flight (one stage being
// filled while two are read), where cuBLAS's kernel of 4 stages waits on the tensor core. Timing only. Measured
// slower than the default on every linear (to_out 1.07 against 1.02 ms, fc1 + swiglu 4.4 against 3.9; bench/NOTES.md,
// 2026-12-07 13:24): consumer 1 waits each tile for the walk of consumer 0's block, and the ring's release holds
// consumer 0 to its pace, which costs more than the fourth stage gains. Kept opt-in as a tuning axis.
//
// G9_HALF_TAIL (the staged 256-wide tiles of the epilogues none, residual and gate_residual): when the tiles of the
// walk leave a last partial wave of at most half the grid, those tiles run as two 128-wide halves each (m64n128k16
// wgmmas on the first 128 rows of B's stage, one 128-row box of B a stage), so the last wave takes half a tile's time
// on every SM instead of a whole one on half of them, and a walk with fewer tiles than the grid runs as halves on twice
// the CTAs. Measured (bench/NOTES.md, 2026-12-04): 6-7 % off to_out / fc2 at M = 925; at M = 8,349 (10.5 waves of
// whole tiles) within noise, likely because a half tile's k-block (512 tensor cycles) is too short for 3 stages to
// cover the ring's refill latency. A half's block is staged from its 64 accumulators and walked by the whole tile's
// walk, 16 chunks a row. Timing only.
//
// Defined by the emitter: G9_ENTRY H3C_PARAMS GM_K G9_BN G9_STAGES G9_GROUP_M G9_INFLIGHT (0: wait for each k-block's
// wgmmas before releasing its stage; 1: keep one k-block in flight; 2: half of one, g9_kblock) G9_CLUSTER (1 or 2),
// G9_EPI_SMEM, G9_EPI_WARPS, G9_EPI_SHARED and G9_HALF_TAIL (each defined or not), and the epilogue's defines (gemm_epilogue.cuh). Parameters
// (H3C_PARAMS, in this order): x_map (tensor map of x [rows, K]); residual (residual, gate_residual); table, ts_index, tags (gate_residual);
// y0 (y1, y2 for qkv); w_map (tensor map of W [GM_N, K], boxes of G9_BN / 2 rows); t_map and u_map (GM_LORA_K > 0:
// the unmerged LoRA input t [rows, GM_LORA_K] and up slot [GM_N, GM_LORA_K], docs/contract.md section 13: the
// producer loads their k-blocks after x's and W's, into the same ring, and the consumers' chain goes on over them);
// bias (when GM_HAS_BIAS); qk_w0,
// qk_w1, rope_cos, rope_sin (qkv's qk_norm_rope epilogue, the tables with rope only); rows; meta_rows (gate_residual;
// qk_norm_rope with rope).
#define G9_BM 128
#define G9_BK 64
#define G9_THREADS 384
#define G9_A_BYTES (G9_BM * G9_BK * 2)
#define G9_B_BYTES (G9_BN * G9_BK * 2)
#define G9_KT ((GM_K + G9_BK - 1) / G9_BK)
// All k-blocks of a tile's chain: x's (the last zero-filled past K), then the LoRA input's (whole blocks of 64).
#define G9_KT_ALL (G9_KT + GM_LORA_K / G9_BK)
#if GM_LORA_K % G9_BK
#error "the LoRA width is a multiple of the k-block"
#endif
#ifdef G9_EPI_WARPS
#ifndef G9_EPI_SMEM
#error "G9_EPI_WARPS walks the staged epilogue (G9_EPI_SMEM)"
#endif
#elif defined(G9_EPI_SHARED)
#error "G9_EPI_SHARED is a form of the epilogue warps' hand-over (G9_EPI_WARPS)"
#endif
// The staging areas (gemm_epilogue_smem.cuh's G9_OUT_BYTES each): one per consumer, or one for both (G9_EPI_SHARED).
#ifdef G9_EPI_SHARED
#define G9_OUT_AREAS 1
#else
#define G9_OUT_AREAS 2
#endif
#define G9_OUT_AT(cw) ((G9_OUT_AREAS - 1) * (cw) * G9_OUT_BYTES)
// setmaxnreg's split of the 168 x 384 registers of the launch: the producer warpgroup (one TMA thread; with
// G9_EPI_WARPS also the three epilogue warps, whose walk needs more than 40) and the two consumer warpgroups
// (128 accumulators each). 88 x 128 + 208 x 256 = 40 x 128 + 232 x 256 = 168 x 384.
#ifdef G9_EPI_WARPS
#define G9_REGS_PRODUCER 88
#define G9_REGS_CONSUMER 208
#elif defined(G9_HALF_TAIL)
// The half tiles' second main loop and staging spilled 12 bytes at the consumers' 232 (1-CTA, no k-block in flight);
// the producer's one TMA thread fits in 24 (ptxas -v: no spills). 24 x 128 + 240 x 256 = 168 x 384.
#define G9_REGS_PRODUCER 24
#define G9_REGS_CONSUMER 240
#else
#define G9_REGS_PRODUCER 40
#define G9_REGS_CONSUMER 232
#endif
#if G9_BN != 256 && (GM_EPI == GM_EPI_SWIGLU || GM_EPI == GM_EPI_QK_NORM_ROPE)
#error "swiglu and qk_norm_rope tiles are 256 wide"
#endif
#if defined(G9_HALF_TAIL) && (G9_BN != 256 || GM_EPI == GM_EPI_SWIGLU || GM_EPI == GM_EPI_QK_NORM_ROPE || \
                               !defined(G9_EPI_SMEM))
#error "G9_HALF_TAIL splits the staged 256-wide tiles of the epilogues none, residual and gate_residual"
#endif
#if GM_EPI == GM_EPI_SWIGLU
#define G9_TILES_N ((GM_OUTN + 127) / 128)  // 128 output columns per tile (value + gate = 256 weight rows)
#else
#define G9_TILES_N ((GM_N + G9_BN - 1) / G9_BN)
#endif

// Tile t of the persistent walk: row tiles vary fastest inside a group of G9_GROUP_M row tiles (with G9_CLUSTER = 2,
// t counts pairs of row tiles, and tm is this CTA's row tile of the pair: cluster rank `rank`).
__device__ __forceinline__ void g9_tile(int t, int walkM, h3u32 rank, int &tm, int &tn) {
  grouped_tile(t, walkM, G9_TILES_N, G9_GROUP_M, tm, tn);
  tm = tm * G9_CLUSTER + (int)rank;
}

// The persistent walk's items: items 0 .. full - 1 are tiles 0 .. full - 1, whole; with G9_HALF_TAIL the tiles of a
// last partial wave that fills at most half the grid (`stride` CTAs, or pairs) follow as halves: item full + 2 u + h
// is half h of tile full + u, so each CTA (pair) gets at most one half in that wave.
struct G9Walk {
  int full, items;
};
__device__ __forceinline__ G9Walk g9_walk(int tiles, int stride) {
  G9Walk w{tiles, tiles};
#ifdef G9_HALF_TAIL
  const int rem = tiles % stride;
  if (2 * rem <= stride) {
    w.full = tiles - rem;
    w.items = tiles + rem;
  }
#else
  (void)stride;
#endif
  return w;
}
// Item `it`'s tile (tm, tn as g9_tile) and part: -1 the whole tile, 0 or 1 its first or second 128 columns.
__device__ __forceinline__ int g9_item(int it, const G9Walk &w, int walkM, h3u32 rank, int &tm, int &tn) {
  const bool half = it >= w.full;
  g9_tile(half ? w.full + ((it - w.full) >> 1) : it, walkM, rank, tm, tn);
  return half ? (it - w.full) & 1 : -1;
}

// The first output column of column tile tn (swiglu: 128 output columns a tile, from 256 weight rows), and of its
// part (g9_item): the tile's, or its half's.
__device__ __forceinline__ long long g9_col0(int tn) { return (long long)tn * (GM_EPI == GM_EPI_SWIGLU ? 128 : G9_BN); }
__device__ __forceinline__ long long g9_part_col0(int tn, int part) { return g9_col0(tn) + (part > 0 ? 128 : 0); }
// The 16-byte chunks a row of the part's staged block holds: the tile's G9_BN / 8, a half's 16.
__device__ __forceinline__ int g9_part_chunks(int part) { return part < 0 ? G9_BN / 8 : 16; }

// The two weight boxes (G9_BN / 2 rows each) of output tile tn (swiglu: value rows, then the matching gate rows).
__device__ __forceinline__ void g9_wrows(int tn, int &w0, int &w1) {
#if GM_EPI == GM_EPI_SWIGLU
  w0 = tn * 128;
  w1 = GM_OUTN + tn * 128;
#else
  w0 = tn * G9_BN;
  w1 = tn * G9_BN + G9_BN / 2;
#endif
}

// A consumer warp's release of stage s (hopper.cuh): with G9_CLUSTER = 2 the peer multicasts half of B into it.
__device__ __forceinline__ void g9_release(h3u32 bar, h3u32 peer) { ring_release<G9_CLUSTER == 2>(bar, peer); }

// The wgmma of 16-wide chunk kk of a k-block on B's stage rows 0 .. N - 1 (N / 2 accumulators), the first of a tile
// (FIRST, kk 0) starting the chain with write-only accumulators.
template <int N, bool FIRST>
__device__ __forceinline__ void g9_wgmma(float *acc, unsigned long long da, unsigned long long db, int kk) {
  if constexpr (N == 256) {
    if (FIRST && kk == 0) wgmma_256_first(acc, da, db);
    else wgmma_256(acc, da + 2 * kk, db + 2 * kk, 1);
  } else if constexpr (N == 192) {
    if (FIRST && kk == 0) wgmma_192_first(acc, da, db);
    else wgmma_192(acc, da + 2 * kk, db + 2 * kk, 1);
  } else if constexpr (N == 64) {
    wgmma_64(acc, da + 2 * kk, db + 2 * kk, FIRST && kk == 0 ? 0 : 1);  // (scale_d 0 starts the chain)
  } else {
    if (FIRST && kk == 0) wgmma_128_first(acc, da, db);
    else wgmma_128(acc, da + 2 * kk, db + 2 * kk, 1);
  }
}

// One k-block of a consumer warpgroup's main loop (stage s): its four wgmmas of the 16-wide chunks on B's stage rows
// 0 .. N - 1 (N = G9_BN, or 128 for a half tile), then the release of a stage to its producer (and the peer's) once
// the wgmmas reading it completed. G9_INFLIGHT 0: this k-block's, waiting for them; 1: the previous k-block's, this
// one's staying in flight; 2 (cuBLAS's order, bench/NOTES.md 2026-12-07 16:32): the first two wgmmas are queued, then
// the previous k-block's group is waited for and its stage released, then the last two are issued and committed, so
// the tensor pipe always holds queued work while a stage is held no longer than with 0. The wgmmas chain on the same
// accumulators in issue order (an uncommitted wgmma is in no group: wait_group does not wait for it), so every
// output's chunk order, and its bits, are the same in the three forms. Measured (H100, 2026-12-07): 2 is slower on
// this tile (to_out 1.51 M cycles against 1.32 M at 0), not understood: cuBLAS splits its k-block between two
// accumulator sets where both halves here chain on one, but the 256-row tile, which splits as cuBLAS does, ran no
// faster either (gemm_sm90_tall.cuh). Opt-in only.
// sAw: this consumer's 64 rows of the A stage 0 (warp-uniform, hopper.cuh's warp_uniform).
template <int N, bool FIRST>
__device__ __forceinline__ void g9_kblock(float *acc, h3u32 sAw, h3u32 sB, h3u32 full, h3u32 empty, h3u32 peer,
                                          int lane, int &s, h3u32 &ph) {
  mbar_wait(full + 8 * s, ph);
  wgmma_fence();
  const unsigned long long da = wgmma_desc_sw128(sAw + s * G9_A_BYTES);
  const unsigned long long db = wgmma_desc_sw128(sB + s * G9_B_BYTES);
#if G9_INFLIGHT == 2
  g9_wgmma<N, FIRST>(acc, da, db, 0);
  g9_wgmma<N, FIRST>(acc, da, db, 1);
  if (!FIRST) {
    wgmma_wait<0>();
    if (lane == 0) g9_release(ring_before(empty, s, G9_STAGES), peer);
  }
  g9_wgmma<N, FIRST>(acc, da, db, 2);
  g9_wgmma<N, FIRST>(acc, da, db, 3);
  wgmma_commit();
#else
#pragma unroll
  for (int kk = 0; kk < G9_BK / 16; ++kk) g9_wgmma<N, FIRST>(acc, da, db, kk);
  wgmma_commit();
#if G9_INFLIGHT
  // Keep this k-block's wgmmas in flight and release the stage of the previous one, which has completed.
  wgmma_wait<1>();
  if (!FIRST && lane == 0) g9_release(ring_before(empty, s, G9_STAGES), peer);
#else
  wgmma_wait<0>();
  if (lane == 0) g9_release(empty + 8 * s, peer);
#endif
#endif
  if (++s == G9_STAGES) { s = 0; ph ^= 1; }
}

// One consumer warpgroup's main loop over the k-blocks of a tile: the k_chunks chain of its 64 rows into acc;
// prefetch() is called before k-block G9_PREFETCH_AT (gemm_epilogue.cuh): two loops around it, since a branch among
// the wgmmas could make ptxas serialize them.
template <int N, class Prefetch>
__device__ __forceinline__ void g9_mainloop(float *acc, h3u32 sAw, h3u32 sB, h3u32 full, h3u32 empty, h3u32 peer,
                                            int lane, int &s, h3u32 &ph, const Prefetch &prefetch) {
  g9_kblock<N, true>(acc, sAw, sB, full, empty, peer, lane, s, ph);
#pragma unroll 1
  for (int kb = 1; kb < G9_PREFETCH_AT(G9_KT_ALL); ++kb)
    g9_kblock<N, false>(acc, sAw, sB, full, empty, peer, lane, s, ph);
  prefetch();
#pragma unroll 1
  for (int kb = G9_PREFETCH_AT(G9_KT_ALL); kb < G9_KT_ALL; ++kb)
    g9_kblock<N, false>(acc, sAw, sB, full, empty, peer, lane, s, ph);
#if G9_INFLIGHT
  wgmma_wait<0>();
  if (lane == 0) g9_release(ring_before(empty, s, G9_STAGES), peer);
#endif
}

// One consumer warpgroup's epilogue of its 64 x 8 NF block at rows from r0, columns from c0 (NF = G9_BN / 8, or 16
// for a half tile), up to the stores: with G9_EPI_WARPS rounded into the staging area and handed to the epilogue
// warps; with G9_EPI_SMEM rounded into it (the walk follows, one code for whole and half tiles); else finished and
// stored in registers.
template <int NF>
__device__ __forceinline__ void g9_finish(const GmEpilogue &ep, const void *bias, const float *acc, long long M, int cw,
                                          int tid,
#if defined(G9_EPI_WARPS)
                                          h3u32 sOut, h3u32 stFull, h3u32 stEmpty, h3u32 &eph,
#elif defined(G9_EPI_SMEM)
                                          h3u32 sOut,
#endif
                                          long long r0, long long c0) {
#if defined(G9_EPI_WARPS)
  // Round into the staging area once the epilogue warps have walked the block it held last, hand it to them and go
  // on to the next tile. Each barrier of the pair completes once a tile, so a parity names the tile: with its own
  // area, consumer cw waits for the walk of its previous block (stEmpty[cw], the previous tile's phase: a fresh
  // barrier counts as released, parity 1 done); with the shared area consumer 0 waits for consumer 1's block of the
  // previous tile (stEmpty[1], the same parity) and consumer 1 for consumer 0's of this tile (stEmpty[0], this tile's
  // phase). Neither barrier can be two phases behind its waiter: each waiter passed the phase before.
#ifdef G9_EPI_SHARED
  mbar_wait(stEmpty + 8 * (cw ^ 1), cw ? eph : eph ^ 1);
#else
  mbar_wait(stEmpty + 8 * cw, eph ^ 1);
#endif
  g9_stage_any_block<NF>(ep, bias, acc, sOut + G9_OUT_AT(cw), r0, c0, M, tid);
  mbar_arrive(stFull + 8 * cw);
  eph ^= 1;
#elif defined(G9_EPI_SMEM)
  // Epilogue staged through shared memory (gemm_epilogue_smem.cuh): the same bits, 16-byte global accesses.
  g9_stage_block_synced<NF>(ep, bias, acc, sOut + G9_OUT_AT(cw), r0, c0, M, cw, tid);
#else
  // Epilogue in registers (gemm_epilogue.cuh).
  (void)cw;
  const int lane = tid % 32;
  gm_store_block<NF>(ep, bias, acc, r0, c0, M, tid / 32, lane >> 2, lane & 3);
#endif
}

extern "C" __global__ void __launch_bounds__(G9_THREADS, 1) G9_ENTRY(H3C_PARAMS) {
  h3c_grid_dependency_wait();  // (common.cuh) before any global memory access
  extern __shared__ unsigned char g9_raw[];
  const h3u32 base = (smem_u32(g9_raw) + 1023u) & ~1023u;  // the 128-byte swizzle needs 1,024-byte aligned tiles
  const h3u32 sA = base, sB = base + G9_STAGES * G9_A_BYTES;
#ifdef G9_EPI_SMEM
  // The consumers' staging areas (gemm_epilogue_smem.cuh) after the ring, 1,024-byte aligned like it; with
  // G9_EPI_WARPS each area's full / empty barriers after the ring's; gate_residual's table rows after the barriers.
  const h3u32 sOut = sB + G9_STAGES * G9_B_BYTES;
  unsigned char *const sOutPtr = g9_raw + (sOut - smem_u32(g9_raw));  // the same, as a generic pointer (the walks)
  const h3u32 full = sOut + G9_OUT_AREAS * G9_OUT_BYTES, empty = full + 8 * G9_STAGES;
#ifdef G9_EPI_WARPS
  const h3u32 stFull = empty + 8 * G9_STAGES, stEmpty = stFull + 16;
  const h3u32 sTrows = stEmpty + 16;
#else
  const h3u32 sTrows = empty + 8 * G9_STAGES;
#endif
  // 32 rows for each warp that walks: the 8 consumer warps, or the 3 epilogue warps
  long long *const trows = (long long *)(g9_raw + (sTrows - smem_u32(g9_raw)));
#else
  const h3u32 full = sB + G9_STAGES * G9_B_BYTES, empty = full + 8 * G9_STAGES;
#endif
  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  const long long M = rows;
  const int tilesM = (int)((M + G9_BM - 1) / G9_BM);
#if G9_CLUSTER == 2
  const h3u32 rank = cluster_rank(), peer = rank ^ 1u;
  const int walkM = (tilesM + 1) / 2;  // pairs of row tiles
  const int first = blockIdx.x / 2, stride = gridDim.x / 2;
#else
  const h3u32 rank = 0, peer = 0;
  const int walkM = tilesM;
  const int first = blockIdx.x, stride = gridDim.x;
#endif
  const G9Walk walk = g9_walk(walkM * G9_TILES_N, stride);
  if (threadIdx.x == 0) {
    for (int s = 0; s < G9_STAGES; ++s) {
      mbar_init(full + 8 * s, 1);                // the producer's expect_tx; the TMA bytes complete the phase
      mbar_init(empty + 8 * s, 8 * G9_CLUSTER);  // one arrival per consumer warp of each CTA writing the stage
    }
#ifdef G9_EPI_WARPS
    for (int cw = 0; cw < 2; ++cw) {
      mbar_init(stFull + 8 * cw, 128);  // every consumer thread, after its writes into the staging area
      mbar_init(stEmpty + 8 * cw, 96);  // every epilogue thread, after its reads of it
    }
#endif
    mbar_init_fence();
  }
#if G9_CLUSTER == 2
  cluster_sync();
#else
  __syncthreads();
#endif

  if (wg == 0) {
    regs_dealloc<G9_REGS_PRODUCER>();
#ifdef G9_EPI_WARPS
    if (tid >= 32) {
      // The epilogue warps (1-3): walk each consumer's staged block of every tile this CTA owns, in the consumers'
      // order, while the consumers run the next tile's main loop.
      const int wi = tid / 32 - 1, lane = tid % 32;
      const GmEpilogue ep = GM_EPILOGUE_PARAMS;
      h3u32 eph = 0;
      constexpr int kBatch = GM_EPI == GM_EPI_GATE_RESIDUAL ? 2 : 4;
      for (int it = first; it < walk.items; it += stride) {
        int tm, tn;
        const int part = g9_item(it, walk, walkM, rank, tm, tn);
        for (int cw = 0; cw < 2; ++cw) {
          const long long r0 = (long long)tm * G9_BM + cw * 64;
          mbar_wait(stFull + 8 * cw, eph);
          g9_walk_block<G9_BN / 8, 3, kBatch>(ep, sOutPtr + G9_OUT_AT(cw), trows + 32 * wi, r0,
                                              g9_part_col0(tn, part), M, wi, lane, g9_part_chunks(part));
          mbar_arrive(stEmpty + 8 * cw);
        }
        eph ^= 1;
      }
    }
#endif
    if (tid == 0) {
      tma_prefetch_map(&x_map);
      tma_prefetch_map(&w_map);
#if GM_LORA_K
      tma_prefetch_map(&t_map);
      tma_prefetch_map(&u_map);
#endif
      int s = 0;
      h3u32 ph = 0;
      for (int it = first; it < walk.items; it += stride) {
        int tm, tn, w0, w1;
        const int part = g9_item(it, walk, walkM, rank, tm, tn);
        g9_wrows(tn, w0, w1);
        for (int kb = 0; kb < G9_KT_ALL; ++kb) {
          // x's and W's k-blocks, then (GM_LORA_K) the LoRA input's and the up slot's, at the same rows.
          const GmChainBlock cb = gm_chain_block(kb, G9_KT, GM_CHAIN_MAPS);
          const H3cTensorMap *const amap = cb.a, *const bmap = cb.b;
          const int kc = cb.col;
          mbar_wait(empty + 8 * s, ph ^ 1);  // a fresh barrier counts as released (parity 1 done)
          mbar_expect_tx(full + 8 * s, G9_A_BYTES + (part < 0 ? G9_B_BYTES : G9_B_BYTES / 2));
          tma_load_2d(sA + s * G9_A_BYTES, amap, kc, tm * G9_BM, full + 8 * s);
          if (part < 0) {
#if G9_CLUSTER == 2
            // This CTA's half of B (rank 0: rows w0, rank 1: rows w1) into both CTAs of the pair.
            tma_load_2d_multicast(sB + s * G9_B_BYTES + rank * (G9_B_BYTES / 2), bmap, kc, rank ? w1 : w0,
                                  full + 8 * s, (unsigned short)3);
#else
            tma_load_2d(sB + s * G9_B_BYTES, bmap, kc, w0, full + 8 * s);
            tma_load_2d(sB + s * G9_B_BYTES + G9_B_BYTES / 2, bmap, kc, w1, full + 8 * s);
#endif
          } else {
            // A half tile: its 128 rows of B (one box) at the stage's start; with pairs, rank 0 loads them into both.
#if G9_CLUSTER == 2
            if (rank == 0)
              tma_load_2d_multicast(sB + s * G9_B_BYTES, bmap, kc, part ? w1 : w0, full + 8 * s,
                                    (unsigned short)3);
#else
            tma_load_2d(sB + s * G9_B_BYTES, bmap, kc, part ? w1 : w0, full + 8 * s);
#endif
          }
          if (++s == G9_STAGES) { s = 0; ph ^= 1; }
        }
      }
    }
  } else {
    // Consumers (the roles are the two branches of one if/else, so ptxas applies setmaxnreg).
    regs_alloc<G9_REGS_CONSUMER>();
    const int cw = wg - 1;  // this consumer's 64 rows of the tile
    const int lane = tid % 32;
    const h3u32 sAw = warp_uniform(sA + cw * 64 * 128);  // its rows of the A stage, for the main loop's descriptors
    const void *B = GM_BIAS_PARAM;
    const GmEpilogue ep = GM_EPILOGUE_PARAMS;
    // (Never zeroed: each tile's first wgmma writes them without reading, and a half tile uses and stages the first
    // 64 only. Zeroing them here made ptxas serialize the wgmmas of a small 1-CTA variant.)
    float acc[G9_BN / 2];
    int s = 0;
    h3u32 ph = 0;
#if defined(G9_EPI_WARPS)
    h3u32 eph = 0;  // the staging area's phase
#define G9_FINISH_ARGS ep, B, acc, M, cw, tid, sOut, stFull, stEmpty, eph
#elif defined(G9_EPI_SMEM)
#define G9_FINISH_ARGS ep, B, acc, M, cw, tid, sOut
#else
#define G9_FINISH_ARGS ep, B, acc, M, cw, tid
#endif
    for (int it = first; it < walk.items; it += stride) {
      int tm, tn;
      const int part = g9_item(it, walk, walkM, rank, tm, tn);
      const long long r0 = (long long)tm * G9_BM + cw * 64, c0 = g9_part_col0(tn, part);
#ifdef G9_RES_PREFETCH
      // Threads 0-63: one of this consumer's 64 rows each, the part's columns.
      const auto prefetch = [&] {
        if (tid < 64) gm_prefetch_residual_row(ep, r0 + tid, c0, part < 0 ? G9_BN : 128, M);
      };
#else
      const auto prefetch = [] {};
#endif
      if (part < 0) {
        g9_mainloop<G9_BN>(acc, sAw, sB, full, empty, peer, lane, s, ph, prefetch);
        g9_finish<G9_BN / 8>(G9_FINISH_ARGS, r0, c0);
      }
#ifdef G9_HALF_TAIL
      else {
        g9_mainloop<128>(acc, sAw, sB, full, empty, peer, lane, s, ph, prefetch);
        g9_finish<16>(G9_FINISH_ARGS, r0, c0);
      }
#endif
#if defined(G9_EPI_SMEM) && !defined(G9_EPI_WARPS)
      // Step 3 of the staged epilogue: the block's rows, 16 bytes a lane (a half tile's first 16 chunks).
      g9_walk_block<G9_BN / 8, 4, G9_WALK_BATCH>(ep, sOutPtr + G9_OUT_AT(cw), trows + 128 * cw + 32 * (tid / 32),
                                                 r0, c0, M, tid / 32, lane, g9_part_chunks(part));
#endif
    }
#undef G9_FINISH_ARGS
  }
#if G9_CLUSTER == 2
  cluster_sync();  // the peer may still multicast into this CTA's stages or arrive on its barriers
#endif
}
