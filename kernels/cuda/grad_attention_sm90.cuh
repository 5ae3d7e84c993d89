// Attention's backward on Hopper (sm_90a, wgmma), operation for operation grad_attention_mma.cuh's, so both kernels
// give the same bits (the GPU checks compare them byte for byte; that file states the arithmetic and
// docs/contract.md section 14 the order). What changes is who multiplies: a warpgroup's wgmma (m64nNk16, 16-wide
// chunks in the same ascending order, chained on the same accumulators; wgmma's chunk function is mma.sync's,
// ../shared/HOPPER-KERNELS.md section 1) where there 4 warps issued m16n8k16 one by one, and the accumulator layout
// per warp is mma.sync's (row 16 * warp + g (+ 8), column 8 * j + 2 * t4 (+ 1)), so every per-element step (masks,
// ex2, the products with D, the roundings, the fold) runs on the same values in the same order.
//
// Operands live in shared memory as TMA's SWIZZLE_128B writes them (two boxes of 64 columns, 16-byte chunk c of row r
// at chunk c ^ (r % 8)), filled by cp.async from all threads through rings of GB_STAGES buffers: a [rows, 128] bf16
// tile is at once wgmma's K-major operand (S = Q K^T: both) and its N-major operand (P V-like products: dq += dS K,
// dv += P^T dO, dk += dS^T Q).
// Speed (bench/NOTES.md, 2026-12-06): 21.0 ms at S = 8,349 x 56 heads on an H100 (phase 0 9.1) against the mma.sync
// form's 62.4 and SDPA's cuDNN backward's 9.7-10.2 in the same run. Both phases were bound by the instructions they
// issue, not by the tensor core (ncu: two warps a scheduler, IPC 1.5-1.7, the ALU pipe the busiest): every
// instruction in the per-element steps and the loads counts (halving them took the kernel from 51.4 to 22.8 ms; phase
// 1 as one loop per warpgroup, no P^T hand-over, to 21.6). What was left is latency: within a step the products
// waited for the element steps and the reverse. So every walk is software-pipelined (2026-12-06; 21.6 -> 21.0): the
// next block's S (and dP) is issued before this block's element steps, in a second set of registers (the walks
// unrolled by two), and a step's last product (dq, dv or dk) is waited for within the step (left in flight across
// the loop, ptxas serializes the wgmmas: C7515). Each walk ends with a wait, so no wgmma is in flight on a path out
// of it (ptxas would insert one in a divergent path and serialize: C7518).
// Where it stands (bench/NOTES.md, 2026-12-06 08:00): 17.3 ms reading the forward's lse (phase 0 5.8, phase 1 11.5)
// against SDPA's 9.8. Fewer element instructions (no masks) gained nothing; phase 1 is latency-bound with two warps
// a scheduler (ncu: 7.1 cycles a warp between issues, issue slots 28 % busy) beside a busy shared-memory pipe (65 %:
// its SS products, the ring and the folds), so warpgroup 0 folds dv in registers (-3 %). What is left needs fewer
// products (FlashAttention-2's 5 against these 7: S and dP twice), which the contract's dq chain fixes today.
//
// Phase 0 (GB_ENTRY, 256 threads): one (128-query tile, head, item) per CTA, each warpgroup 64 query rows: bf(dO)
// into shared memory and the scratch `dob`, D, the forward's key walk for l and mc (blocks of GB_KVB keys), L and D
// into `stats`, then dq over key sub-blocks of 64 (S and dP by wgmma from shared memory, dS packed in registers as
// the A operand of dq += dS K).
// Phase 1 (GB_ENTRY_P1, 256 threads): one (64-key tile, head, item) per CTA; the query rows in sub-tiles of 64. The
// two warpgroups split the work of the same 64 keys, one loop each: warpgroup 0 computes S^T = K Q^T, P^T and dv;
// warpgroup 1 its own S^T beside dP^T = V dO^T, then P^T, dS^T and dk. Each holds its partial in registers and its
// fold in shared memory. (P^T handed over from warpgroup 0 through shared memory instead, the form before
// 2026-12-06, took 23.3 ms where this one took 21.0: removed.)
// A sub-tile whose rows end within its first 32 chains two more 16-row chunks than the 32-row sub-tiles there do: all
// products zero (P^T, dS^T and the rows past the end are zeros), which leave a chain's value as it is (the GPU checks
// include such lengths).
//
// Defined by the emitter: GB_ENTRY GB_ENTRY_P1 H3C_PARAMS GB_HEADS GB_KVB (the forward's kv_block: 64 or 128) GB_C
// GB_QK_SCALE GB_O_BF GB_STAGES (3) GB_LSE (1: the forward's row statistics are input `lse`, [rows][heads] F32, read
// instead of the statistics walk); head_dim 128. q, k, v are bf16 [B, L, heads * 128], o bf16 or F32, dout F32.
#define GB_D 128
#define GB_LD ((long long)GB_HEADS * GB_D)
#define GB_KSUB 64  // keys per sub-block of phase 0's dq pass
#define GB_QSUB 64  // query rows per sub-tile of phase 1
#define GB_TILE(rows) ((rows) * 256)  // bytes of a [rows, 128] bf16 tile
#if GB_STAGES < 3
#error "the pipelined walks need GB_STAGES >= 3: the next block landed one step ahead"
#endif
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

// Phase 1's fold of dk at a unit's last sub-tile: the unit's partial (acc, this thread's 64 values) into the item's
// sum in this thread's float4 slots of `fold` (the first unit's as it is, then acc added in F32); tid: the thread in
// its warpgroup.
__device__ __forceinline__ void gb_fold_unit(float4 *fold, const float *acc, bool first, int tid) {
#pragma unroll
  for (int i = 0; i < GB_D / 8; ++i) {
    float4 *f = fold + i * 128 + tid;
    const float4 a = make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]);
    if (first) {
      *f = a;
    } else {
      const float4 b = *f;
      *f = make_float4(__fadd_rn(b.x, a.x), __fadd_rn(b.y, a.y), __fadd_rn(b.z, a.z), __fadd_rn(b.w, a.w));
    }
  }
}

// Phase 0: statistics and dq of 128 query rows.
extern "C" __global__ void __launch_bounds__(256, 1) GB_ENTRY(H3C_PARAMS) {
  h3c_grid_dependency_wait();  // (common.cuh) before any global memory access
  extern __shared__ unsigned char gb_raw[];
  const h3u32 base = (smem_u32(gb_raw) + 1023u) & ~1023u;  // the 128-byte swizzle needs 1,024-byte aligned tiles
  const h3u32 sQ = base, sdO = sQ + GB_TILE(128), sKV = sdO + GB_TILE(128);
  // sKV: the statistics' ring of GB_STAGES K blocks of GB_KVB keys, then the dq pass's ring of (K, V) sub-blocks of
  // 64 keys (GB_STAGES x 32 KiB either way at GB_KVB = 128).
  float *Ds = (float *)(gb_raw + (sKV + GB_STAGES * 2 * GB_TILE(GB_KSUB) - smem_u32(gb_raw)));
  const long long L = item_rows;
  const long long rowBase = (long long)blockIdx.z * L;  // the item's first row
  const long long colBase = (long long)blockIdx.y * GB_D;
  const h3bf *Q = (const h3bf *)q + rowBase * GB_LD + colBase;
  const h3bf *K = (const h3bf *)k + rowBase * GB_LD + colBase;
  const h3bf *V = (const h3bf *)v + rowBase * GB_LD + colBase;
  const long long q0 = (long long)blockIdx.x * 128;
  const int tid = threadIdx.x & 127, wg = threadIdx.x >> 7;
  const int lane = tid & 31, warp = tid >> 5, g = lane >> 2, t4 = lane & 3;
  const float kNegInf = __int_as_float(0xff800000);
  GbLoader<128, 256> ld128;
  GbLoader<GB_KVB, 256> ldKv;
  GbLoader<64, 256> ld64;
  ld128.init(threadIdx.x);
  ldKv.init(threadIdx.x);
  ld64.init(threadIdx.x);

  // The ring (cp.async groups, one committed per step even when empty, so group n is step n's): steps 0 ..
  // GB_STAGES - 2 in flight before the walk, step n + GB_STAGES - 1 issued at step n into the buffer step n - 1 read.
  // With GB_LSE the forward wrote L (its attention op's lse output): no statistics walk, no key blocks for it.
  const int nkv = GB_LSE ? 0 : (int)((L + GB_KVB - 1) / GB_KVB);
  ld128.load(sQ, Q, q0, L);
#pragma unroll
  for (int n = 0; n < GB_STAGES - 1; ++n) {
    if (n < nkv) ldKv.load(sKV + n * GB_TILE(GB_KVB), K, (long long)n * GB_KVB, L);
    cp_async_commit();
  }
  // bf(dO) of the tile (zeros past L) into shared memory and the scratch; D by one thread per row.
  for (int i = threadIdx.x; i < 128 * 16; i += 256) {
    const int r = i >> 4, c = i & 15;
    uint4 pk = make_uint4(0u, 0u, 0u, 0u);
    if (q0 + r < L) {
      const float *src = (const float *)dout + (rowBase + q0 + r) * GB_LD + colBase + c * 8;
      const float4 lo = *(const float4 *)src, hi = *(const float4 *)(src + 4);
      pk = make_uint4(pack_bf2(lo.x, lo.y), pack_bf2(lo.z, lo.w), pack_bf2(hi.x, hi.y), pack_bf2(hi.z, hi.w));
      *(uint4 *)((h3bf *)dob + (rowBase + q0 + r) * GB_LD + colBase + c * 8) = pk;
    }
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(sdO + gb_swz(128, r, c)), "r"(pk.x), "r"(pk.y),
                 "r"(pk.z), "r"(pk.w) : "memory");
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

  // The statistics pass: the forward's key walk (attention.cuh), without o. Software-pipelined: block kb + 1's S is
  // issued before block kb's statistics step, so the tensor core works while this warpgroup runs its element steps
  // (the kernel was latency-bound: a step's products waited for its element steps and the reverse). The two S
  // registers alternate by unrolling the walk by two (distinct registers, so ptxas keeps the wgmmas asynchronous).
  // Ring: at step kb, block kb + 1 must have landed (its group was committed one step before: GB_STAGES >= 3) and
  // block kb - 1's buffer, which every thread is done with past the barrier, takes block kb + GB_STAGES - 1.
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};
#if !GB_LSE
  {
    float sA[GB_KVB / 2], sB[GB_KVB / 2];
    cp_async_wait<GB_STAGES - 2>();
    __syncthreads();
    gb_issue_qk<GB_KVB>(sA, sQ, 128, wg * 64, sKV);
    auto statStep = [&](int kb, float(&sc)[GB_KVB / 2], float(&sn)[GB_KVB / 2]) {
      wgmma_wait<0>();
      cp_async_wait<GB_STAGES - 3>();
      __syncthreads();
      if (kb + GB_STAGES - 1 < nkv)
        ldKv.load(sKV + ((kb + GB_STAGES - 1) % GB_STAGES) * GB_TILE(GB_KVB), K, (long long)(kb + GB_STAGES - 1) * GB_KVB,
                  L);
      cp_async_commit();
      if (kb + 1 < nkv) gb_issue_qk<GB_KVB>(sn, sQ, 128, wg * 64, sKV + ((kb + 1) % GB_STAGES) * GB_TILE(GB_KVB));
      gr_stats_block<GB_KVB / 8>(sc, (long long)kb * GB_KVB, L, t4, GB_C, m, l);
    };
    for (int kb = 0; kb < nkv; kb += 2) {
      statStep(kb, sA, sB);
      if (kb + 1 < nkv) statStep(kb + 1, sB, sA);
    }
    wgmma_wait<0>();  // (the prologue's S when there is no key block)
  }
#endif
  // The dq pass's first K and V sub-blocks stream in while the statistics finish (once every thread is past the
  // statistics' last block: the ring's buffers are reused).
  cp_async_wait<0>();
  __syncthreads();
  const int nsub = (int)((L + GB_KSUB - 1) / GB_KSUB);
  const h3u32 sK = sKV, sV = sKV + GB_STAGES * GB_TILE(GB_KSUB);
#pragma unroll
  for (int n = 0; n < GB_STAGES - 1; ++n) {
    if (n < nsub) {
      ld64.load(sK + n * GB_TILE(GB_KSUB), K, (long long)n * GB_KSUB, L);
      ld64.load(sV + n * GB_TILE(GB_KSUB), V, (long long)n * GB_KSUB, L);
    }
    cp_async_commit();
  }
  float Lr[2], Dr[2];
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    float lt = __fadd_rn(l[hh], __shfl_xor_sync(0xffffffffu, l[hh], 1));
    lt = __fadd_rn(lt, __shfl_xor_sync(0xffffffffu, lt, 2));
    const int r = wg * 64 + warp * 16 + g + hh * 8;
#if GB_LSE
    Lr[hh] = q0 + r < L ? ((const float *)lse)[(rowBase + q0 + r) * GB_HEADS + blockIdx.y] : 0.0f;
#else
    Lr[hh] = __fadd_rn(__fmul_rn(m[hh], GB_C), h3c_lg2(lt));
#endif
    Dr[hh] = Ds[r];
    if (t4 == 0 && q0 + r < L) {
      const long long sw = (rowBase + q0 + r) * GB_HEADS + blockIdx.y;
      ((float *)stats)[2 * sw] = Lr[hh];
      ((float *)stats)[2 * sw + 1] = Dr[hh];
    }
  }

  // The dq pass, pipelined as the walk: sub-block kb + 1's S and dP are issued before sub-block kb's dS; dq += dS K
  // is waited for within the step (in flight into the next, ptxas serializes the wgmmas: C7515).
  float dqa[GB_D / 2];
#pragma unroll
  for (int i = 0; i < GB_D / 2; ++i) dqa[i] = 0.0f;
  {
    float sA[GB_KSUB / 2], dpA[GB_KSUB / 2], sB[GB_KSUB / 2], dpB[GB_KSUB / 2];
    h3u32 pa[4][4];
    cp_async_wait<GB_STAGES - 2>();
    __syncthreads();
    gb_issue_qk<GB_KSUB>(sA, sQ, 128, wg * 64, sK);
    gb_issue_qk<GB_KSUB>(dpA, sdO, 128, wg * 64, sV);
    auto dqStep = [&](int kb, float(&s)[GB_KSUB / 2], float(&dp)[GB_KSUB / 2], float(&sn)[GB_KSUB / 2],
                      float(&dpn)[GB_KSUB / 2]) {
      wgmma_wait<0>();  // this sub-block's S and dP; the last step's dq product (pa and its buffer free)
      cp_async_wait<GB_STAGES - 3>();
      __syncthreads();
      if (kb + GB_STAGES - 1 < nsub) {
        const int nb = (kb + GB_STAGES - 1) % GB_STAGES;
        const long long k0n = (long long)(kb + GB_STAGES - 1) * GB_KSUB;
        ld64.load(sK + nb * GB_TILE(GB_KSUB), K, k0n, L);
        ld64.load(sV + nb * GB_TILE(GB_KSUB), V, k0n, L);
      }
      cp_async_commit();
      if (kb + 1 < nsub) {
        const int b1 = (kb + 1) % GB_STAGES;
        gb_issue_qk<GB_KSUB>(sn, sQ, 128, wg * 64, sK + b1 * GB_TILE(GB_KSUB));
        gb_issue_qk<GB_KSUB>(dpn, sdO, 128, wg * 64, sV + b1 * GB_TILE(GB_KSUB));
      }
      // dS = bf(P (dP - D)), 0 for keys past L, packed straight into dq's A fragments: bf2_rn of the F32 product is
      // pack_bf2 of its rbf for every value arithmetic returns (common.cuh), the mma.sync form's bits. Only the last
      // sub-block can hold keys past L: the others take the walk without the mask's compare and select (a uniform
      // branch around element steps only; the kernel is bound by the instructions it issues).
      const long long left = L - (long long)kb * GB_KSUB;
      auto dsStep = [&](const bool masked, const int lim) {
#pragma unroll
        for (int j = 0; j < GB_KSUB / 8; ++j)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            float ds[2];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int i = j * 4 + hh * 2 + e;
              const float P = h3c_ex2(__fmaf_rn(s[i], GB_C, -Lr[hh]));
              const float v = __fmul_rn(P, __fsub_rn(dp[i], Dr[hh]));
              ds[e] = !masked || j * 8 + t4 * 2 + e < lim ? v : 0.0f;
            }
            pa[j >> 1][(j & 1) * 2 + hh] = bf2_rn(ds[0], ds[1]);
          }
      };
      if (left >= GB_KSUB) dsStep(false, GB_KSUB);
      else dsStep(true, (int)left);
      gb_issue_pv(dqa, pa, sK + (kb % GB_STAGES) * GB_TILE(GB_KSUB));
      wgmma_wait<0>();
    };
    for (int kb = 0; kb < nsub; kb += 2) {
      dqStep(kb, sA, dpA, sB, dpB);
      if (kb + 1 < nsub) dqStep(kb + 1, sB, dpB, sA, dpA);
    }
    wgmma_wait<0>();
  }
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const long long r = q0 + wg * 64 + warp * 16 + g + hh * 8;
    if (r >= L) continue;
    float *out = (float *)dq + (rowBase + r) * GB_LD + colBase;
#pragma unroll
    for (int j = 0; j < GB_D / 8; ++j)
      *(float2 *)(out + j * 8 + t4 * 2) =
          make_float2(__fmul_rn(GB_QK_SCALE, dqa[j * 4 + hh * 2]), __fmul_rn(GB_QK_SCALE, dqa[j * 4 + hh * 2 + 1]));
  }
}

// Phase 1: dv (warpgroup 0) and dk (warpgroup 1) of 64 key rows.
extern "C" __global__ void __launch_bounds__(256, 1) GB_ENTRY_P1(H3C_PARAMS) {
  h3c_grid_dependency_wait();
  extern __shared__ unsigned char gb_raw[];
  const h3u32 base = (smem_u32(gb_raw) + 1023u) & ~1023u;
  // K, V; a ring of GB_STAGES (Q, bf(dO)) sub-tiles; their rows' (L, D) ([GB_STAGES][GB_QSUB][2], (+inf, 0) past the
  // item's end); warpgroup 1's fold of dk (warpgroup 0 folds dv in registers).
  const h3u32 sK = base, sV = sK + GB_TILE(64), sQ = sV + GB_TILE(64), sdO = sQ + GB_STAGES * GB_TILE(GB_QSUB);
  unsigned char *const rest = gb_raw + (sdO + GB_STAGES * GB_TILE(GB_QSUB) - smem_u32(gb_raw));
  float *LDs = (float *)rest;
  // [GB_D / 8][128]: each thread of warpgroup 1 its fold of dk, 4 a slot
  float4 *fold = (float4 *)(LDs + GB_STAGES * 2 * GB_QSUB);
  const long long L = item_rows;
  const long long rowBase = (long long)blockIdx.z * L;
  const long long colBase = (long long)blockIdx.y * GB_D;
  const h3bf *Q = (const h3bf *)q + rowBase * GB_LD + colBase;
  const h3bf *dO = (const h3bf *)dob + rowBase * GB_LD + colBase;
  const long long k0 = (long long)blockIdx.x * 64;
  const int tid = threadIdx.x & 127, wg = threadIdx.x >> 7;
  const int lane = tid & 31, warp = tid >> 5, g = lane >> 2, t4 = lane & 3;
  const bool w0 = wg == 0;
  GbLoader<64, 256> ld64;
  ld64.init(threadIdx.x);

  ld64.load(sK, (const h3bf *)k + rowBase * GB_LD + colBase, k0, L);
  ld64.load(sV, (const h3bf *)v + rowBase * GB_LD + colBase, k0, L);
  // Sub-tile t's query rows, their L and D (0 past the item's end, where P and dS are set to 0 below).
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
  // The ring as phase 0's: group n is sub-tile n (K and V ride with sub-tile 0).
  const int nsub = (int)((L + GB_QSUB - 1) / GB_QSUB);
#pragma unroll
  for (int n = 0; n < GB_STAGES - 1; ++n) {
    if (n < nsub) loadSub(n, (long long)n * GB_QSUB);
    cp_async_commit();
  }
  // This warpgroup's dv (0) or dk (1): the unit's partial, and its fold over the units. Warpgroup 0 folds in
  // registers (fr; it holds no dP^T, so they are free), warpgroup 1 in shared memory (`fold`): each fold reads and
  // writes 64 KiB a unit, and phase 1 is bound by shared memory's bandwidth more than by anything else (ncu,
  // bench/NOTES.md 2026-12-06: L1 65 % busy, the SS products read 96 KiB a sub-tile, the ring writes 32 KiB).
  float acc[GB_D / 2], fr[GB_D / 2];
  // One loop per warpgroup (the roles are the two branches of one if / else, as the forward kernel's producer and
  // consumers: their wgmmas stay asynchronous): warpgroup 0 S^T = K Q^T, P^T and dv += P^T dO; warpgroup 1 the same
  // S^T beside dP^T = V dO^T, then P^T, dS^T and dk += dS^T Q. No P^T hand-over, so neither waits for the other's
  // element steps; they meet only at the ring's barrier. The S^T of both is the same chain on the same operands, so
  // both hold the same P^T.
  // (A plain lambda, called with a constant at each branch: NVRTC takes no generic lambda in device code, and the
  // inlined calls specialize as `if constexpr` would; the NVRTC test checks no wgmma is serialized.)
  // Software-pipelined as phase 0: sub-tile t + 1's S^T (and dP^T) are issued before sub-tile t's element steps, so
  // the tensor core works while the warpgroup runs them; the two sets of registers alternate by unrolling by two.
  // Ring: at step t, sub-tile t + 1 must have landed (committed one step before: GB_STAGES >= 3) and sub-tile t - 1's
  // buffer, which both warpgroups are done with past the barrier, takes sub-tile t + GB_STAGES - 1.
  auto foldUnit = [&](const bool dkRole, const bool first) {
    if (dkRole) {
      gb_fold_unit(fold, acc, first, tid);
    } else {
#pragma unroll
      for (int i = 0; i < GB_D / 2; ++i) fr[i] = first ? acc[i] : __fadd_rn(fr[i], acc[i]);
    }
  };
  auto roleLoop = [&](const bool dkRole) {
    float sA[GB_QSUB / 2], dpA[GB_QSUB / 2], sB[GB_QSUB / 2], dpB[GB_QSUB / 2];
    cp_async_wait<GB_STAGES - 2>();
    asm volatile("bar.sync 0, 256;\n" ::: "memory");  // sub-tile 0 landed
    gb_issue_qk<GB_QSUB>(sA, sK, 64, 0, sQ);
    if (dkRole) gb_issue_qk<GB_QSUB>(dpA, sV, 64, 0, sdO);
    auto step = [&](int t, float(&s)[GB_QSUB / 2], float(&dp)[GB_QSUB / 2], float(&sn)[GB_QSUB / 2],
                    float(&dpn)[GB_QSUB / 2]) {
      wgmma_wait<0>();
      cp_async_wait<GB_STAGES - 3>();
      asm volatile("bar.sync 0, 256;\n" ::: "memory");  // both roles pass it once a step: sub-tile t + 1 landed
      if (t + GB_STAGES - 1 < nsub) loadSub((t + GB_STAGES - 1) % GB_STAGES, (long long)(t + GB_STAGES - 1) * GB_QSUB);
      cp_async_commit();
      {  // (past the last sub-tile on a stale buffer: unused, but no branch around a wgmma)
        const int b1 = (t + 1) % GB_STAGES;
        gb_issue_qk<GB_QSUB>(sn, sK, 64, 0, sQ + b1 * GB_TILE(GB_QSUB));
        if (dkRole) gb_issue_qk<GB_QSUB>(dpn, sV, 64, 0, sdO + b1 * GB_TILE(GB_QSUB));
      }
      const int buf = t % GB_STAGES;
      const h3u32 Qb = sQ + buf * GB_TILE(GB_QSUB), dOb = sdO + buf * GB_TILE(GB_QSUB);
      const float *LD = LDs + buf * 2 * GB_QSUB;
      // P^T, and on warpgroup 1 dS^T = P^T (dP^T - D), packed by one cvt a pair (bf2_rn == pack_bf2 of the rbf of
      // every value arithmetic returns, common.cuh): the one-loop form's values. The columns' L and D: one 16-byte
      // load of (L, D, L, D) a pair. No mask: a query row past the item's end has L = +inf and D = 0 (loadSub) and
      // zeros for q and bf(dO), so S^T = 0 there, P = ex2(fma(0, c, -inf)) = ex2(-inf) = +0 and dS^T = +0 * (0 - 0)
      // = +0: the masked form's +0 (the mma.sync form's bits), for two fewer instructions an element (the kernel is
      // bound by the instructions it issues). The step past the last sub-tile (stale buffer) is never folded.
      h3u32 pa[4][4];
#pragma unroll
      for (int j = 0; j < GB_QSUB / 8; ++j) {
        const float4 ld4 = *(const float4 *)(LD + 2 * (j * 8 + t4 * 2));
        const float Lc[2] = {ld4.x, ld4.z}, Dc[2] = {ld4.y, ld4.w};
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          float val[2];
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int i = j * 4 + hh * 2 + e;
            const float P = h3c_ex2(__fmaf_rn(s[i], GB_C, -Lc[e]));
            if (dkRole) val[e] = __fmul_rn(P, __fsub_rn(dp[i], Dc[e]));
            else val[e] = P;
          }
          pa[j >> 1][(j & 1) * 2 + hh] = bf2_rn(val[0], val[1]);
        }
      }
      gb_issue_pv(acc, pa, dkRole ? Qb : dOb);
      wgmma_wait<0>();
    };
    // Steps in pairs; an odd count ends with a step past the last sub-tile (on a stale buffer: no load, no fold), so that no wgmma sits behind a branch inside the roles' divergent paths (ptxas would serialize them).
    // A pair of steps is a unit (GR_UNIT rows): its partial starts from zero (nothing in flight here: the last
    // step waited for its products), and is folded after its last sub-tile.
    static_assert(GR_UNIT == 2 * GB_QSUB, "a unit is two sub-tiles");
    for (int t = 0; t < nsub; t += 2) {
#pragma unroll
      for (int i = 0; i < GB_D / 2; ++i) acc[i] = 0.0f;
      step(t, sA, dpA, sB, dpB);
      if (t + 1 == nsub) foldUnit(dkRole, t == 0);
      step(t + 1, sB, dpB, sA, dpA);
      if (t + 1 < nsub) foldUnit(dkRole, t == 0);
    }
    wgmma_wait<0>();  // (the prologue's S^T when there is no sub-tile)
  };
  if (w0) roleLoop(false);
  else roleLoop(true);
  if (L == 0) return;
  const float scale = w0 ? 1.0f : GB_QK_SCALE;  // dv as folded, dk scaled
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const long long r = k0 + warp * 16 + g + hh * 8;
    if (r >= L) continue;
    float *out = (float *)(w0 ? dv : dk) + (rowBase + r) * GB_LD + colBase;
#pragma unroll
    for (int j = 0; j < GB_D / 8; ++j) {
      // acc[j * 4 + hh * 2 + e] is slot (j * 4 + hh * 2) / 4 = j, lanes hh * 2 + e
      float a, b;
      if (w0) {
        a = fr[j * 4 + hh * 2], b = fr[j * 4 + hh * 2 + 1];
      } else {
        const float4 f = fold[j * 128 + tid];
        a = hh ? f.z : f.x, b = hh ? f.w : f.y;
      }
      *(float2 *)(out + j * 8 + t4 * 2) =
          w0 ? make_float2(a, b) : make_float2(__fmul_rn(scale, a), __fmul_rn(scale, b));
    }
  }
}
