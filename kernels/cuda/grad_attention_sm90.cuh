// Attention's backward on Hopper (sm_90a, wgmma): FlashAttention-2's five products, with dq's key blocks added in a
// fixed order instead of by atomics. Operation for operation the arithmetic of grad_attention_mma.cuh, so both
// kernels give the same bits (the GPU checks compare them byte for byte; that file states the arithmetic and
// docs/contract.md section 14 the order). What changes is who multiplies: a warpgroup's wgmma (m64nNk16, 16-wide
// chunks in the same ascending order, chained on the same accumulators; wgmma's chunk function is mma.sync's,
// ../shared/HOPPER-KERNELS.md section 1) where there 4 warps issued m16n8k16 one by one; the accumulator layout per
// warp is mma.sync's (row 16 * warp + g (+ 8), column 8 * j + 2 * t4 (+ 1)), so every per-element step (ex2, the
// products with D, the roundings) runs on the same values.
//
// Operands live in shared memory as TMA's SWIZZLE_128B writes them (two boxes of 64 columns, 16-byte chunk c of row r
// at chunk c ^ (r % 8)), filled by cp.async from all threads through a ring of GB_STAGES buffers: a [rows, 128] bf16
// tile is at once wgmma's K-major operand (S^T = K Q^T: both) and its N-major operand (dv += P^T dO, dk += dS^T Q,
// dq += dS K).
//
// Why this form (bench/NOTES.md, 2026-12-06): the two-walk form before it (dq in a walk over the keys per query tile,
// dk and dv in a walk over the queries per key tile) computed S and dP twice, 7 GEMM-sized products (8 with phase 1's
// S^T on both warpgroups) where FlashAttention-2 needs 5, and took 17.3 ms at S = 8,349 x 56 heads on an H100 where
// SDPA's backward took 9.7. Here one walk over the query rows per 128-key tile computes all three gradients (8.8 ms
// without dq's adds). dq's elements get a part from every key tile; the contract makes each tile's part a partial (a
// chain over its 128 keys from 0) and dq their fold in key-tile order from +0 by flush-to-zero adds, so the tiles add
// their parts into dq in that order: tile x waits until x tiles have added into a query block (a counter per query
// block, head and half of the channels, zeroed by phase 0), adds (the first tile stores 0 + part, the middle ones by
// red.global.add, the last reads the sum and stores it scaled), and counts itself in. The sum lives in dq itself
// (F32, in L2 while a head runs: 4.3 MB), no scratch. CTAs are dispatched in blockIdx order, key tiles fastest, so
// the tile a CTA waits for was dispatched before it: it runs or has finished, and the wait ends. Measured (H100,
// bench/NOTES.md 2026-12-06 10:24): 12.8 ms with the sync warpgroup (GB_SYNC_WARP) where SDPA takes 9.7; the five
// products alone 8.8 ms, the reductions ~3.8 ms of the difference wherever they are issued. Not the TMA's bulk
// reduction either (measured 2026-12-06 13:46 on an H100, the form reverted): the middle tiles' parts staged in shared
// memory and added by cp.reduce.async.bulk .add.f32 from the sync warp took 13.29 ms against 12.90, and that add
// keeps subnormal inputs and results (a 1.77e-39 sum where red.global.add.f32 and the contract's fold give +0).
//
// Phase 0 (GB_ENTRY, 256 threads): one (128-query tile, head, item) per CTA: bf(dO) into the scratch `dob`, D, L (the
// forward's lse, or its key walk for l and mc), L and D into `stats`, and the tile's dq counters to 0.
// Phase 1 (GB_ENTRY_P1, 256 threads): one (128-key tile, head, item) per CTA, warpgroup w its 64 keys k0 + 64 w ..;
// per step of 64 query rows: S^T = K_w Q^T and dP^T = V_w dO^T (SS), P^T and dS^T in registers, dv += P^T dO and
// dk += dS^T Q (RS), dS^T stored transposed (stmatrix) as the A operand of the step's dq part, and after a barrier
// with the other warpgroup dq_part = dS K[:, 64 w ..] (SS, all 128 keys, 64 of the channels), added into dq at the
// step's end. Rows past the item's end carry L = +inf and D = 0 (so P^T and dS^T are +0 with no mask); keys past it
// (the last tile) get dS = 0, so their zero K rows add nothing to dq, not even inf * 0. dv and dk are one chain each
// over the item's query rows (64-row steps: a step whose rows end within its first 48 chains zero chunks past the
// end, which leave a chain's value as it is; the GPU checks include such lengths).
//
// Defined by the emitter: GB_ENTRY GB_ENTRY_P1 H3C_PARAMS GB_PREV_LD (the row stride, floats, of phase 1's copy of
// dq's sum) GB_HEADS GB_KVB (the forward's kv_block: 64 or 128) GB_C
// GB_QK_SCALE GB_O_BF GB_STAGES (phase 1's ring: 2 or 3) GB_LSE (1: the forward's row statistics are input `lse`,
// [rows][heads] F32, read instead of the statistics walk); head_dim 128. q, k, v are bf16 [B, L, heads * 128], o
// bf16 or F32, dout F32.
#define GB_D 128
#define GB_LD ((long long)GB_HEADS * GB_D)
#define GB_QSUB 64  // query rows per step of phase 1
#define GB_KT 128   // keys per CTA of phase 1: one block of dq's fold (GR_DQ_KEYS)
#define GB_TILE(rows) ((rows) * 256)  // bytes of a [rows, 128] bf16 tile
#if GB_STAGES < 2 || GB_STAGES > 3
#error "phase 1's ring takes 2 or 3 stages"
#endif
// Phase 0's statistics walk (without lse) is software-pipelined: the next block landed one step ahead needs 3.
#define GB_STAT_STAGES 3
// Timing diagnostics of h3c_kernel_bench only (never emitted into a plan; each gives a wrong dq): 1 = dq's adds in
// no order (no poll), 2 = no adds at all (dq's products computed and dropped), 3 = as 1 without the count (no fence
// or counter), 4 = as 1 without the adds (the count alone), 5 = as 3 with the middle tiles adding half of each step's
// rows (warps 0 and 1's: whether dq's reduction bytes or their instructions in the compute warps cost the time).
#ifndef GB_DQ_DIAG
#define GB_DQ_DIAG 0
#endif
#define GB_DQ_NOWAIT (GB_DQ_DIAG == 1 || GB_DQ_DIAG == 3 || GB_DQ_DIAG == 4 || GB_DQ_DIAG == 5)
// GB_SYNC_WARP (attn_grad_sync): phase 1 takes a third warpgroup whose first warp waits for dq's counts and counts the
// tile in (the compute warpgroups only meet it at two named barriers a step: no fence or poll in their path).
#ifndef GB_SYNC_WARP
#define GB_SYNC_WARP 0
#endif
#if GB_SYNC_WARP && GB_DQ_DIAG
#error "the dq diagnostics time the form without the sync warp"
#endif
// GB_DQ_ROWS (attn_grad_rows): the middle tiles' red.global.add of dq a row at a time: each warp stores its 16 rows
// of the part (the accumulator layout: 8 rows of 32 bytes an instruction) into the shared memory the last tile's
// copy of the sum takes, and adds them back row by row, one 256-byte row of its warpgroup's channels a warp
// instruction (two whole 128-byte lines where the accumulator layout's instruction touches eight rows' sectors).
// The same adds of the same values in the same order. GB_DQ_ROWS 2: red.global.add.v4.f32, two rows a warp instruction
// (half the instructions; the same flush-to-zero add per element, PTX ISA).
#ifndef GB_DQ_ROWS
#define GB_DQ_ROWS 0
#endif
#define GB_P1_THREADS (GB_SYNC_WARP ? 384 : 256)
#if GB_KVB == 64
#define gb_wgmma_stat wgmma_64
#elif GB_KVB == 128
#define gb_wgmma_stat wgmma_128
#else
#error "GB_KVB must be 64 or 128"
#endif

// Byte offset of row r's 16-byte chunk c (0-15) in a swizzled [R, 128] tile.
__device__ __forceinline__ h3u32 gb_swz(int R, int r, int c) {
  return (h3u32)((c >> 3) * R * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// Rows row0.. row0 + R - 1 of src (row stride GB_LD) into the swizzled tile at dst by NT threads; rows at or past L
// read as zeros. Thread t moves chunk t % 16 of rows t / 16 + (NT / 16) k: rows NT / 16 apart (a multiple of 8) keep
// their swizzle, so a thread's offsets are fixed at init and a load is one add and one cp.async per chunk (the
// kernels are bound by instructions issued, not by the tensor core: ncu, bench/NOTES.md 2026-12-05 21:44).
template <int R, int NT> struct GbLoader {
  static_assert(NT % 128 == 0 && (R * 16) % NT == 0, "a [R, 128] tile in whole passes of NT threads");
  h3u32 soff;      // the thread's first chunk in the tile
  long long goff;  // and in the source, from the tile's first row
  int r0;
  __device__ __forceinline__ void init(int tid) {
    r0 = tid >> 4;
    soff = gb_swz(R, r0, tid & 15);
    goff = (long long)r0 * GB_LD + (tid & 15) * 8;
  }
  __device__ __forceinline__ void load(h3u32 dst, const h3bf *src, long long row0, long long L) const {
    const h3bf *g = src + row0 * GB_LD + goff;
    const long long left = L - row0;
    const int lim = left < R ? (int)left : R;
#pragma unroll
    for (int k = 0; k < R * 16 / NT; ++k) {
      const bool ok = r0 + k * (NT / 16) < lim;
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst + soff + k * (NT / 16) * 128),
                   "l"(ok ? (const void *)(g + (long long)k * (NT / 16) * GB_LD) : (const void *)src), "r"(ok ? 16 : 0));
    }
  }
};

// acc (64 x N) = A (64 rows of a K-major tile of `aRows` rows, from row aRow0) times B (the N rows of a K-major tile)^T:
// eight chained 16-wide chunks over d, the first with scale_d = 0. Issued and committed, not waited for.
template <int N>
__device__ __forceinline__ void gb_issue_qk(float *acc, h3u32 aTile, int aRows, int aRow0, h3u32 bTile) {
  const unsigned long long da = wgmma_desc_sw128(aTile + aRow0 * 128), db = wgmma_desc_sw128(bTile);
  wgmma_fence();
#pragma unroll
  for (int kc = 0; kc < 8; ++kc) {
    const unsigned long long a = da + (kc >> 2) * ((aRows * 128) >> 4) + 2 * (kc & 3);
    const unsigned long long b = db + (kc >> 2) * ((N * 128) >> 4) + 2 * (kc & 3);
    if constexpr (N == 64) wgmma_64(acc, a, b, kc != 0);
    else gb_wgmma_stat(acc, a, b, kc != 0);
  }
  wgmma_commit();
}

// acc (64 x 128) += X (64 x 64, registers: the packed mma.sync A fragments pa[kc] of the S-like fragment x[j * 4 + e],
// kc = j / 2: (x[8kc], x[8kc+1]), (x[8kc+2], x[8kc+3]), (x[8kc+4], x[8kc+5]), (x[8kc+6], x[8kc+7]), low half first)
// times the N-major tile bTile (64 rows): four chunks of 16 rows ascending. Issued and committed, not waited for.
__device__ __forceinline__ void gb_issue_pv(float *acc, const h3u32 (*pa)[4], h3u32 bTile) {
  wgmma_fence();
#pragma unroll
  for (int kc = 0; kc < 4; ++kc)
    wgmma_128_rs_nmajor(acc, pa[kc], wgmma_desc_sw128_nmajor(bTile + kc * 2048, GB_TILE(64) / 2), 1);
  wgmma_commit();
}


// Phase 0: bf(dO), D and L of 128 query rows; their dq counters to 0.
extern "C" __global__ void __launch_bounds__(256, 1) GB_ENTRY(H3C_PARAMS) {
  h3c_grid_dependency_wait();  // (common.cuh) before any global memory access
  extern __shared__ unsigned char gb_raw[];
  float *Ds = (float *)gb_raw;  // [128]: D of the tile's rows
  const long long L = item_rows;
  const long long rowBase = (long long)blockIdx.z * L;  // the item's first row
  const long long colBase = (long long)blockIdx.y * GB_D;
  const long long q0 = (long long)blockIdx.x * 128;
  const int tid = threadIdx.x & 127, wg = warpgroup_index();
  const int lane = tid & 31, warp = tid >> 5, g = lane >> 2, t4 = lane & 3;
  // The counters of this tile's two 64-row query blocks (phase 1 counts the key tiles that added into them), one per
  // head and half of dq's channels: entries 2 * ((row0 * heads + head)) + half of the scratch `dqsem`.
  if (threadIdx.x < 4 && q0 + (threadIdx.x >> 1) * 64 < L)
    ((int *)dqsem)[2 * ((rowBase + q0 + (threadIdx.x >> 1) * 64) * GB_HEADS + blockIdx.y) + (threadIdx.x & 1)] = 0;
  // bf(dO) of the tile into the scratch (phase 1 streams it); D by one thread per row.
  for (int i = threadIdx.x; i < 128 * 16; i += 256) {
    const int r = i >> 4, c = i & 15;
    if (q0 + r < L) {
      const float *src = (const float *)dout + (rowBase + q0 + r) * GB_LD + colBase + c * 8;
      const float4 lo = *(const float4 *)src, hi = *(const float4 *)(src + 4);
      *(uint4 *)((h3bf *)dob + (rowBase + q0 + r) * GB_LD + colBase + c * 8) =
          make_uint4(pack_bf2(lo.x, lo.y), pack_bf2(lo.z, lo.w), pack_bf2(hi.x, hi.y), pack_bf2(hi.z, hi.w));
    }
  }
  if (threadIdx.x < 128) {  // the fma chain over c ascending; loads four columns at a time, eight groups in flight
    float D = 0.f;
    const long long row = rowBase + q0 + threadIdx.x;
    if (q0 + threadIdx.x < L) {
      const float *dr = (const float *)dout + row * GB_LD + colBase;
#pragma unroll 8
      for (int c = 0; c < GB_D; c += 4) {
        const float4 dv4 = *(const float4 *)(dr + c);
        float o4[4];
        if (GB_O_BF) {
          const uint2 ob = *(const uint2 *)((const h3bf *)o + row * GB_LD + colBase + c);
          o4[0] = bf2_lo(ob.x), o4[1] = bf2_hi(ob.x), o4[2] = bf2_lo(ob.y), o4[3] = bf2_hi(ob.y);
        } else {
          const float4 of = *(const float4 *)((const float *)o + row * GB_LD + colBase + c);
          o4[0] = of.x, o4[1] = of.y, o4[2] = of.z, o4[3] = of.w;
        }
        D = __fmaf_rn(dv4.x, o4[0], D);
        D = __fmaf_rn(dv4.y, o4[1], D);
        D = __fmaf_rn(dv4.z, o4[2], D);
        D = __fmaf_rn(dv4.w, o4[3], D);
      }
    }
    Ds[threadIdx.x] = D;
  }
#if GB_LSE
  __syncthreads();
  // L is the forward's (its attention op's lse output): no statistics walk.
  if (threadIdx.x < 128 && q0 + threadIdx.x < L) {
    const long long sw = (rowBase + q0 + threadIdx.x) * GB_HEADS + blockIdx.y;
    ((float *)stats)[2 * sw] = ((const float *)lse)[sw];
    ((float *)stats)[2 * sw + 1] = Ds[threadIdx.x];
  }
  (void)wg, (void)lane, (void)warp, (void)g, (void)t4;
#else
  // The statistics pass: the forward's key walk (attention.cuh), without o. Software-pipelined: block kb + 1's S is
  // issued before block kb's statistics step, so the tensor core works while this warpgroup runs its element steps.
  // The two S registers alternate by unrolling the walk by two (distinct registers, so ptxas keeps the wgmmas
  // asynchronous). Ring (cp.async groups, one committed per step even when empty, so group n is step n's): at step
  // kb, block kb + 1 must have landed (its group was committed one step before: GB_STAT_STAGES >= 3) and block kb - 1's
  // buffer, which every thread is done with past the barrier, takes block kb + GB_STAT_STAGES - 1.
  const h3u32 base = (smem_u32(gb_raw + 512) + 1023u) & ~1023u;  // the 128-byte swizzle needs 1,024-byte aligned tiles
  const h3u32 sQ = base, sKV = sQ + GB_TILE(128);  // Q, then a ring of GB_STAT_STAGES K blocks of GB_KVB keys
  const h3bf *Q = (const h3bf *)q + rowBase * GB_LD + colBase;
  const h3bf *K = (const h3bf *)k + rowBase * GB_LD + colBase;
  GbLoader<128, 256> ld128;
  GbLoader<GB_KVB, 256> ldKv;
  ld128.init(threadIdx.x);
  ldKv.init(threadIdx.x);
  const int nkv = (int)((L + GB_KVB - 1) / GB_KVB);
  ld128.load(sQ, Q, q0, L);
#pragma unroll
  for (int n = 0; n < GB_STAT_STAGES - 1; ++n) {
    if (n < nkv) ldKv.load(sKV + n * GB_TILE(GB_KVB), K, (long long)n * GB_KVB, L);
    cp_async_commit();
  }
  const float kNegInf = __int_as_float(0xff800000);
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};
  {
    float sA[GB_KVB / 2], sB[GB_KVB / 2];
    cp_async_wait<GB_STAT_STAGES - 2>();
    __syncthreads();
    gb_issue_qk<GB_KVB>(sA, sQ, 128, wg * 64, sKV);
    auto statStep = [&](int kb, float(&sc)[GB_KVB / 2], float(&sn)[GB_KVB / 2]) {
      wgmma_wait<0>();
      cp_async_wait<GB_STAT_STAGES - 3>();
      __syncthreads();
      if (kb + GB_STAT_STAGES - 1 < nkv)
        ldKv.load(sKV + ((kb + GB_STAT_STAGES - 1) % GB_STAT_STAGES) * GB_TILE(GB_KVB), K, (long long)(kb + GB_STAT_STAGES - 1) * GB_KVB,
                  L);
      cp_async_commit();
      if (kb + 1 < nkv) gb_issue_qk<GB_KVB>(sn, sQ, 128, wg * 64, sKV + ((kb + 1) % GB_STAT_STAGES) * GB_TILE(GB_KVB));
      gr_stats_block<GB_KVB / 8>(sc, (long long)kb * GB_KVB, L, t4, GB_C, m, l);
    };
    for (int kb = 0; kb < nkv; kb += 2) {
      statStep(kb, sA, sB);
      if (kb + 1 < nkv) statStep(kb + 1, sB, sA);
    }
    wgmma_wait<0>();  // (the prologue's S when there is no key block)
  }
  cp_async_wait<0>();
  __syncthreads();  // (Ds)
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    float lt = __fadd_rn(l[hh], __shfl_xor_sync(0xffffffffu, l[hh], 1));
    lt = __fadd_rn(lt, __shfl_xor_sync(0xffffffffu, lt, 2));
    const int r = wg * 64 + warp * 16 + g + hh * 8;
    if (t4 == 0 && q0 + r < L) {
      const long long sw = (rowBase + q0 + r) * GB_HEADS + blockIdx.y;
      ((float *)stats)[2 * sw] = __fadd_rn(__fmul_rn(m[hh], GB_C), h3c_lg2(lt));
      ((float *)stats)[2 * sw + 1] = Ds[r];
    }
  }
#endif
}

// The stmatrix of a warp's dS^T fragments (pa[kc], the A layout of 16 keys x 16 queries, kc over the step's 64
// queries) into dS (the step's [64 queries][128 keys] K-major tile at sdS), transposed: matrix m of fragment kc holds
// keys 16 * warp + 8 (m & 1) .. and queries 16 kc + 8 (m >> 1) ..; lane 8 m + c gives the address of its row c (query
// 16 kc + 8 (m >> 1) + c), keys from kw0 = 64 * (warpgroup) + 16 * warp + 8 (m & 1): the 16-byte chunk kw0 / 8.
__device__ __forceinline__ void gb_store_ds(h3u32 sdS, const h3u32 (*pa)[4], int keyChunk0, int lane) {
  const int m = lane >> 3, c = lane & 7;
#pragma unroll
  for (int kc = 0; kc < 4; ++kc) {
    const h3u32 addr = sdS + gb_swz(64, kc * 16 + (m >> 1) * 8 + c, keyChunk0 + (m & 1));
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(pa[kc][0]),
                 "r"(pa[kc][1]), "r"(pa[kc][2]), "r"(pa[kc][3]) : "memory");
  }
}

// The counter of a query block: acquire-load by one thread (the adds it counts, released by the tiles before, are
// visible to it and, past the warpgroup's barrier, to the others: they read with ld.global.cg, from L2).
__device__ __forceinline__ int gb_ld_acquire(const int *p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// Polls dq's counter at `sem` until x tiles have counted themselves in; false when it gave up after ~2^24 polls
// (seconds: a tile that never comes, which the dispatch order rules out). The caller traps then, but only where no
// wgmma is in flight (a trap beside them in a divergent path would serialize them).
__device__ __forceinline__ bool gb_await_count(const int *sem, int x) {
  unsigned polls = 0;
  while (gb_ld_acquire(sem) != x)
    if (++polls >= (1u << 24)) return false;
  return true;
}
__device__ __forceinline__ void gb_wg_bar(int wg) { asm volatile("bar.sync %0, 128;\n" ::"r"(2 + wg) : "memory"); }

// Phase 1: dv, dk and the dq parts of 128 key rows.
extern "C" __global__ void __launch_bounds__(GB_P1_THREADS, 1) GB_ENTRY_P1(H3C_PARAMS) {
  h3c_grid_dependency_wait();
  extern __shared__ unsigned char gb_raw[];
  const h3u32 base = (smem_u32(gb_raw) + 1023u) & ~1023u;
  // K, V (128 keys); a ring of GB_STAGES (Q, bf(dO)) steps of 64 query rows; the step's dS [64 queries][128 keys];
  // the ring's rows' (L, D) ([GB_STAGES][GB_QSUB][2], (+inf, 0) past the item's end).
  const h3u32 sK = base, sV = sK + GB_TILE(GB_KT), sQ = sV + GB_TILE(GB_KT), sdO = sQ + GB_STAGES * GB_TILE(GB_QSUB);
  const h3u32 sdS = sdO + GB_STAGES * GB_TILE(GB_QSUB);
  // The last tile's copy of dq's sum so far, each warpgroup its 64 rows x 64 channels (rows GB_PREV_LD floats apart:
  // the accumulator layout's float2 reads fall into distinct banks), then the ring's (L, D).
  float *prevAll = (float *)(gb_raw + (sdS + GB_TILE(GB_QSUB) - smem_u32(gb_raw)));
  float *LDs = prevAll + 2 * 64 * GB_PREV_LD;
  static_assert(GB_KT == GR_DQ_KEYS, "a CTA's keys are one block of dq's fold");
  const long long L = item_rows;
  const long long rowBase = (long long)blockIdx.z * L;
  const long long colBase = (long long)blockIdx.y * GB_D;
  const h3bf *Q = (const h3bf *)q + rowBase * GB_LD + colBase;
  const h3bf *dO = (const h3bf *)dob + rowBase * GB_LD + colBase;
  const int x = blockIdx.x, ntiles = (int)((L + GB_KT - 1) / GB_KT);
  const long long k0 = (long long)x * GB_KT;
  const int tid = threadIdx.x & 127, wg = warpgroup_index();
  const int lane = tid & 31, warp = tid >> 5, g = lane >> 2, t4 = lane & 3;
  const int nsub = (int)((L + GB_QSUB - 1) / GB_QSUB);
  const bool firstTile = x == 0, lastTile = x + 1 == ntiles;
  // dq's counters of this head (`dqsem`, zeroed by phase 0): entry 2 (row0 * heads + head) + half for the query block
  // at row0 (the sync warp keeps the first entry, the compute warpgroups each their own half).
  int *const semBase = (int *)dqsem + 2 * (rowBase * GB_HEADS + blockIdx.y);
#if GB_SYNC_WARP
  // The sync warpgroup: its first warp, per block t in order, waits for the count of the tiles before (lane 0), lets
  // the compute warpgroups add (barrier 6), waits until they have issued their adds (barrier 5: bar.sync orders
  // them before it for its participants) and counts the tile in (lane 0: a fence at GPU scope, cumulative, then the
  // counter; the CUTLASS semaphore's pattern). One counter a block (its first entry).
  if (threadIdx.x >= 256) {
    regs_dealloc<24>();
    if (threadIdx.x >= 256 + 32) return;
    for (int t = 0; t < nsub; ++t) {
      int *const sem = semBase + 2 * (long long)t * GB_QSUB * GB_HEADS;
      if (!firstTile && lane == 0 && !gb_await_count(sem, x)) __trap();  // an error, not a hang
      __syncwarp();
      asm volatile("bar.arrive 6, 288;\n" ::: "memory");
      asm volatile("bar.sync 5, 288;\n" ::: "memory");
      if (!lastTile && lane == 0) {
        asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
        asm volatile("red.relaxed.gpu.global.add.s32 [%0], 1;\n" ::"l"(sem) : "memory");
      }
    }
    return;
  }
  regs_alloc<240>();
#endif
  GbLoader<GB_KT, 256> ldKt;
  GbLoader<GB_QSUB, 256> ld64;
  ldKt.init(threadIdx.x);
  ld64.init(threadIdx.x);

  ldKt.load(sK, (const h3bf *)k + rowBase * GB_LD + colBase, k0, L);
  ldKt.load(sV, (const h3bf *)v + rowBase * GB_LD + colBase, k0, L);
  // Step t's query rows, their L and D.
  const float *statsHead = (const float *)stats + 2 * (rowBase * GB_HEADS + blockIdx.y);
  auto loadSub = [&](int buf, long long i0) {
    ld64.load(sQ + buf * GB_TILE(GB_QSUB), Q, i0, L);
    ld64.load(sdO + buf * GB_TILE(GB_QSUB), dO, i0, L);
    if (threadIdx.x < GB_QSUB) {  // (L, D) of the row, 8 bytes by cp.async (a plain load would stall the CTA)
      const long long i = i0 + threadIdx.x;
      float *dst = LDs + (buf * GB_QSUB + threadIdx.x) * 2;
      if (i < L)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem_u32(dst)), "l"(statsHead + 2 * i * GB_HEADS));
      else  // past the item's end: (+inf, 0), so that P^T and dS^T come out +0 with no mask (below)
        *(float2 *)dst = make_float2(__int_as_float(0x7f800000), 0.0f);
    }
  };
  // The ring (cp.async groups, one committed per step even when empty, so group n is step n's; K and V ride with
  // step 0): at step t, step t's group has landed and step t - 1's buffer, which every thread is done with past the
  // barrier, takes step t + GB_STAGES - 1.
#pragma unroll
  for (int n = 0; n < GB_STAGES - 1; ++n) {
    if (n < nsub) loadSub(n, (long long)n * GB_QSUB);
    cp_async_commit();
  }
  // Keys past the item's end (the last tile only): dS = 0 there.
  const int keyRow0 = wg * 64 + warp * 16 + g;  // this thread's key rows keyRow0 and keyRow0 + 8 of the tile
  const bool maskKeys = k0 + GB_KT > L;
  int *const semHead = semBase + wg;
  float *const dqHead = (float *)dq + rowBase * GB_LD + colBase + wg * 64;

  // dq's part of step t (query rows i0 = 64 t, this warpgroup's 64 channels) goes into dq in key-tile order: the
  // first tile stores 0 + part, tile x adds its part once tiles 0 .. x - 1 have counted themselves in, the last
  // stores scale * (sum + part). Every add is the contract's flush-to-zero F32 add (gr_add_ftz): the middle tiles add
  // by red.global.add.v2.f32, which adds so on global memory (PTX ISA: subnormal inputs and results flushed), and
  // whose traffic is the parts alone. (Reading the sum into the SM and storing it back, the form before, moved twice
  // the bytes through L2 and took 18.5 ms where the products alone take 8.8: bench/NOTES.md 2026-12-06.) No latency
  // of the order sits in a step's path. With the sync warpgroup (GB_SYNC_WARP, the default) its warp polls and counts,
  // and the compute warpgroups meet it at barrier 6 (block t's turn, before their adds at the step's end) and barrier
  // 5 (their adds issued); the last tile waits for its turn beside dv, dk and dq's products and copies the sum so far
  // into shared memory (dqPoll). Without it (attn_grad_sync=0) the compute warpgroups do both beside products: beside
  // S^T and dP^T of step t one thread fences and counts block t - 1 (dqRelease), beside dv, dk and dq's products one
  // thread polls for block t (dqPoll). No code here branches on a thread's own values while wgmmas are in flight
  // (ptxas would wait for them in such a divergent path and serialize: C7518) but the one thread's poll: rows past the
  // item's end are zero-size copies and predicated adds and stores, the count a predicated reduction.
  float dqp[32];
  bool stuck = false;
  float *const prev = prevAll + wg * 64 * GB_PREV_LD;
  auto dqPoll = [&](long long i0) {
    if (firstTile || GB_DQ_DIAG == 2) return;
    if (GB_SYNC_WARP) {
      if (!lastTile) return;  // the others wait at barrier 6 after their products (and the first tile adds onto 0)
      asm volatile("bar.sync 6, 288;\n" ::: "memory");
    } else if (tid == 0 && !GB_DQ_NOWAIT) {
      stuck = !gb_await_count(semHead + 2 * i0 * GB_HEADS, x);  // trapped after the products (an error, not a hang)
    }
    if (!GB_SYNC_WARP) gb_wg_bar(wg);
    if (!lastTile) return;
#pragma unroll
    for (int k = 0; k < 8; ++k) {  // 64 rows x 16 chunks of 16 bytes, from L2 (.cg: L1 may hold a stale line)
      const int i = tid + 128 * k, r = i >> 4, c = i & 15;
      const bool in = i0 + r < L;
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(prev + r * GB_PREV_LD + c * 4)),
                   "l"(dqHead + (in ? i0 + r : 0) * GB_LD + c * 4), "r"(in ? 16 : 0));
    }
  };
  auto dqAdd = [&](long long i0) {  // the last tile: after cp.async's wait and this warpgroup's barrier
    if (GB_DQ_DIAG == 2 || GB_DQ_DIAG == 4) {
      if (dqp[0] == 1.2345f) dqHead[0] = dqp[1];  // (kept alive, never true in the bench's data)
      return;
    }
    if (GB_DQ_ROWS == 2 && !firstTile && !lastTile) {  // the warp's 16 rows, two rows an instruction of 16 bytes a lane
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const int rl = warp * 16 + 2 * k + (lane >> 4), c = (lane & 15) * 4;
        const long long r = i0 + rl;
        const int in = r < L;
        const float4 v = *(const float4 *)(prev + rl * GB_PREV_LD + c);
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %0, 0;\n@p red.relaxed.gpu.global.add.v4.f32 [%1], {%2, %3, %4, %5};\n}\n" ::"r"(in),
                     "l"(dqHead + (in ? r : 0) * GB_LD + c), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
      }
      return;
    }
    if (GB_DQ_ROWS && !firstTile && !lastTile) {  // the warp's 16 rows, staged at the step's end, a row an instruction
#pragma unroll
      for (int k = 0; k < 16; ++k) {
        const int rl = warp * 16 + k;
        const long long r = i0 + rl;
        const int in = r < L;
        const float2 v = *(const float2 *)(prev + rl * GB_PREV_LD + lane * 2);
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %0, 0;\n@p red.relaxed.gpu.global.add.v2.f32 [%1], {%2, %3};\n}\n" ::"r"(in),
                     "l"(dqHead + (in ? r : 0) * GB_LD + lane * 2), "f"(v.x), "f"(v.y) : "memory");
      }
      return;
    }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int rl = warp * 16 + g + hh * 8;
      const long long r = i0 + rl;
      const int in = r < L && (GB_DQ_DIAG != 5 || firstTile || lastTile || warp < 2);
      float *row = dqHead + (in ? r : 0) * GB_LD;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        float *at = row + j * 8 + t4 * 2;
        const float px = dqp[j * 4 + hh * 2], py = dqp[j * 4 + hh * 2 + 1];
        if (!firstTile && !lastTile) {
          asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %0, 0;\n@p red.relaxed.gpu.global.add.v2.f32 [%1], {%2, %3};\n}\n" ::"r"(in),
                       "l"(at), "f"(px), "f"(py) : "memory");
        } else {
          float2 sum = make_float2(0.0f, 0.0f);
          if (!firstTile) sum = *(const float2 *)(prev + rl * GB_PREV_LD + j * 8 + t4 * 2);
          float sx = gr_add_ftz(sum.x, px), sy = gr_add_ftz(sum.y, py);
          if (lastTile) sx = __fmul_rn(GB_QK_SCALE, sx), sy = __fmul_rn(GB_QK_SCALE, sy);
          asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %0, 0;\n@p st.global.cg.v2.f32 [%1], {%2, %3};\n}\n" ::"r"(in),
                       "l"(at), "f"(sx), "f"(sy) : "memory");
        }
      }
    }
  };
  // The count of block i0, by one thread (the CUTLASS semaphore's pattern): after a barrier of the CTA that every
  // thread passed after issuing its adds of the block (bar.sync orders them before the barrier for its
  // participants), a fence at GPU scope, cumulative, then the counter's increment. One thread stalls on the fence,
  // beside S^T and dP^T, where every thread fencing its own adds stalled all (bench/NOTES.md 2026-12-06).
  auto dqRelease = [&](long long i0) {
    if (lastTile || GB_SYNC_WARP || GB_DQ_DIAG == 2 || GB_DQ_DIAG == 3 || GB_DQ_DIAG == 5) return;
    asm volatile("{\n.reg .pred p;\nsetp.eq.b32 p, %0, 0;\n@p fence.acq_rel.gpu;\n@p red.relaxed.gpu.global.add.s32 [%1], 1;\n}\n" ::"r"(tid),
                 "l"(semHead + 2 * i0 * GB_HEADS) : "memory");
  };

  float dva[GB_D / 2], dka[GB_D / 2];
#pragma unroll
  for (int i = 0; i < GB_D / 2; ++i) dva[i] = dka[i] = 0.0f;
  const unsigned long long dsDesc = wgmma_desc_sw128(sdS);
  for (int t = 0; t < nsub; ++t) {
    cp_async_wait<GB_STAGES - 2>();  // (step 0's; later steps' were waited for at the step before's end)
    asm volatile("bar.sync 4, 256;\n" ::: "memory");  // step t landed; both warpgroups are done with step t - 1 (its buffer, dS, the sum so far)
    if (t + GB_STAGES - 1 < nsub) loadSub((t + GB_STAGES - 1) % GB_STAGES, (long long)(t + GB_STAGES - 1) * GB_QSUB);
    cp_async_commit();
    const int buf = t % GB_STAGES;
    const h3u32 Qb = sQ + buf * GB_TILE(GB_QSUB), dOb = sdO + buf * GB_TILE(GB_QSUB);
    const long long i0 = (long long)t * GB_QSUB;
    float s[GB_QSUB / 2], dp[GB_QSUB / 2];
    gb_issue_qk<GB_QSUB>(s, sK, GB_KT, wg * 64, Qb);    // S^T: this warpgroup's 64 keys x the step's queries
    gb_issue_qk<GB_QSUB>(dp, sV, GB_KT, wg * 64, dOb);  // dP^T
    if (t > 0) dqRelease(i0 - GB_QSUB);  // beside them: the last step's adds (issued before the barrier) counted in
    wgmma_wait<0>();
    // P^T and dS^T = P^T (dP^T - D), packed by one cvt a pair (bf2_rn == pack_bf2 of the rbf of every value
    // arithmetic returns, common.cuh). The columns' L and D: one 16-byte load of (L, D, L, D) a pair.
    const float *LD = LDs + buf * 2 * GB_QSUB;
    h3u32 pP[4][4], pS[4][4];
    auto elementSteps = [&](const bool masked) {
#pragma unroll
      for (int j = 0; j < GB_QSUB / 8; ++j) {
        const float4 ld4 = *(const float4 *)(LD + 2 * (j * 8 + t4 * 2));
        const float Lc[2] = {ld4.x, ld4.z}, Dc[2] = {ld4.y, ld4.w};
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          float pv[2], dv[2];
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int i = j * 4 + hh * 2 + e;
            pv[e] = h3c_ex2(__fmaf_rn(s[i], GB_C, -Lc[e]));
            const float ds = __fmul_rn(pv[e], __fsub_rn(dp[i], Dc[e]));
            dv[e] = !masked || k0 + keyRow0 + hh * 8 < L ? ds : 0.0f;
          }
          pP[j >> 1][(j & 1) * 2 + hh] = bf2_rn(pv[0], pv[1]);
          pS[j >> 1][(j & 1) * 2 + hh] = bf2_rn(dv[0], dv[1]);
        }
      }
    };
    if (maskKeys) elementSteps(true);
    else elementSteps(false);
    gb_store_ds(sdS, pS, wg * 8 + warp * 2, lane);
    gb_issue_pv(dva, pP, dOb);  // dv += P^T dO
    gb_issue_pv(dka, pS, Qb);   // dk += dS^T Q
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // dS's generic stores before wgmma reads them
    asm volatile("bar.sync 1, 256;\n" ::: "memory");                  // both warpgroups' keys of dS stored
    // dq's part: dS (64 queries x 128 keys) times K's 128 keys x this warpgroup's 64 channels (box wg, N-major):
    // eight chunks of 16 keys chained from 0.
    wgmma_fence();
#pragma unroll
    for (int kc = 0; kc < 8; ++kc)
      wgmma_64<1>(dqp, dsDesc + (kc >> 2) * ((64 * 128) >> 4) + 2 * (kc & 3),
                  wgmma_desc_sw128_nmajor(sK + wg * (GB_TILE(GB_KT) / 2) + kc * 2048, GB_TILE(GB_KT) / 2), kc != 0);
    wgmma_commit();
    dqPoll(i0);  // beside dv, dk and dq's products: this step's count awaited (the last tile: its sum on the way)
    cp_async_commit();
    wgmma_wait<0>();
    if (stuck) __trap();
    cp_async_wait<0>();  // the ring's next step (issued at the top), the last tile's sum so far
    if (lastTile) gb_wg_bar(wg);
    if (GB_DQ_ROWS && !firstTile && !lastTile) {  // dqAdd's rows: the warp's own 16, so the warp's barrier suffices
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float *const row = prev + (warp * 16 + g + hh * 8) * GB_PREV_LD + t4 * 2;
#pragma unroll
        for (int j = 0; j < 8; ++j) *(float2 *)(row + j * 8) = make_float2(dqp[j * 4 + hh * 2], dqp[j * 4 + hh * 2 + 1]);
      }
      __syncwarp();
    }
    // Block t's turn (the last tile waited for it beside the products, before its copy of the sum).
    if (GB_SYNC_WARP && (!lastTile || firstTile)) asm volatile("bar.sync 6, 288;\n" ::: "memory");
    dqAdd(i0);
    if (GB_SYNC_WARP) asm volatile("bar.arrive 5, 288;\n" ::: "memory");  // the adds issued: the sync warp counts
  }
  if (nsub > 0 && !GB_SYNC_WARP) {
    asm volatile("bar.sync 4, 256;\n" ::: "memory");  // every thread's adds of the last block issued
    dqRelease((long long)(nsub - 1) * GB_QSUB);
  }
  if (L == 0) return;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const long long r = k0 + keyRow0 + hh * 8;
    if (r >= L) continue;
    const long long dvr = (rowBase + r) * GB_LD + colBase;  // (dv F32, or bf16 with GR_DV_BF: gr_st2)
    float *dkr = (float *)dk + (rowBase + r) * GB_LD + colBase;
#pragma unroll
    for (int j = 0; j < GB_D / 8; ++j) {
      gr_st2<GR_DV_BF>(dv, dvr + j * 8 + t4 * 2, dva[j * 4 + hh * 2], dva[j * 4 + hh * 2 + 1]);
      *(float2 *)(dkr + j * 8 + t4 * 2) =
          make_float2(__fmul_rn(GB_QK_SCALE, dka[j * 4 + hh * 2]), __fmul_rn(GB_QK_SCALE, dka[j * 4 + hh * 2 + 1]));
    }
  }
}
