// The tensor-core form of attention's backward (docs/contract.md section 14), FlashAttention-2 style with P
// recomputed and no atomics, mma.sync m16n8k16 on sm_90a and sm_100a. Per batch item and head:
//   L_i = mc_i + lg2(l_i), the forward's own row statistics: phase 0 walks the keys exactly as the forward's kernel
//     (attention.cuh: blocks of GA_KVB keys, the running max, P = bf(ex2(fma(s, c, -mc))) added to l in fragment
//     order, the butterfly at the end), so l and mc are the forward's bits;
//   D_i = the fma chain of dO_ic * o_ic over c ascending;
//   P_ij = ex2(fma(s_ij, c, -L_i)) (s by k_chunks over d), dP_ij = k_chunks over d of bf(dO_i) . v_j,
//   dS_ij = bf(P_ij * (dP_ij - D_i));
//   dq_i = scale * s_i, s_i the fold from +0 (s = 0 + b_0, then s + b_1, ...; flush-to-zero adds, gr_add_ftz) over
//     the item's blocks of GR_DQ_KEYS keys ascending of each block's chain (k_chunks from 0) of dS_ij k_j (phase 0);
//   dk_j = scale * (one chain over the item's query rows i, 16-row chunks ascending from 0, of dS_ij q_i), dv_j = the
//     same chain of bf(P_ij) bf(dO_i) (phase 1).
// A chunk's 16 products are summed by the tensor core (as in the forward): these are the GPU's bits of the contract;
// the one-thread form of grad.cuh computes the CPU's model, within a bound of these.
//
// Phase 0 (GA_ENTRY): one (64-query tile, head, item) per CTA of 4 warps (16 query rows each): bf(dO) of the tile
// into the scratch `dob` (phase 1 streams it), D, the statistics pass, L and D into `stats`, then dq over the keys in
// sub-blocks of 64. Phase 1 (GA_ENTRY_P1): one (64-key tile, head, item) per CTA of 4 warps (16 keys each): the
// item's query rows in sub-tiles of 32 (double-buffered), S^T = K Q^T and dP^T = V bf(dO)^T per warp, then dv and dk.
//
// GA_LSE (1: the forward's row statistics are input `lse`, [rows][heads] F32, read instead of the statistics walk).
// Defined by the emitter: GA_ENTRY GA_ENTRY_P1 H3C_PARAMS GA_D (a multiple of 16, at most 128) GA_HEADS GA_KVB (the
// forward's kv_block) GA_C GA_QK_SCALE GA_O_BF. q, k, v are bf16 [B, L, heads * d], o bf16 or F32, dout F32.
#define GA_LDS (GA_D + 8)
#define GA_DK (GA_D / 16)  // 16-wide chunks of d
#define GA_DN (GA_D / 8)   // 8-column groups of d
#define GA_LD ((long long)GA_HEADS * GA_D)
#define GA_KSUB 64         // keys per sub-block of phase 0's dq pass
#define GA_QSUB 32         // query rows per sub-tile of phase 1
#define GA_STAT_ROWS (2 * GA_KVB > 4 * GA_KSUB ? 2 * GA_KVB : 4 * GA_KSUB)

// `rows` rows of d bf16 columns from row row0 of src (row stride GA_LD) into dst; rows at or past L read as zeros.
template <int ROWS>
__device__ __forceinline__ void ga_load(h3bf *dst, const h3bf *src, long long row0, long long L) {
  for (int i = threadIdx.x; i < ROWS * (GA_D / 8); i += 128) {
    const int r = i / (GA_D / 8), c = (i % (GA_D / 8)) * 8;
    const bool ok = row0 + r < L;
    cp_async16(dst + r * GA_LDS + c, ok ? (const void *)(src + (row0 + r) * GA_LD + c) : (const void *)src, ok ? 16 : 0);
  }
}

// acc[j] (j over 8-column groups of n) += A (16 x d, fragments from As rows row0.., ldmatrix) times the rows of Bs
// (n x d, ldmatrix): the S = Q K^T form (k_chunks over d, ascending).
template <int NF>
__device__ __forceinline__ void ga_qk(float (*acc)[4], const h3bf *As, int arow0, const h3bf *Bs, int lane) {
#pragma unroll
  for (int kc = 0; kc < GA_DK; ++kc) {
    h3u32 a[4];
    ldsm_x4(a[0], a[1], a[2], a[3], As + (arow0 + (lane & 15)) * GA_LDS + kc * 16 + (lane >> 4) * 8);
#pragma unroll
    for (int j = 0; j < NF; j += 2) {
      h3u32 b0, b1, b2, b3;
      ldsm_x4(b0, b1, b2, b3, Bs + (j * 8 + (lane >> 4) * 8 + (lane & 7)) * GA_LDS + kc * 16 + ((lane >> 3) & 1) * 8);
      mma16816(acc[j], a, b0, b1);
      mma16816(acc[j + 1], a, b2, b3);
    }
  }
}

// acc[j] (j over d's 8-column groups) += P (16 x 16*KC, the accumulator layout of p: 8-column groups) times the rows
// of Bs (16*KC x d, ldmatrix.trans): the O += P V form (chunks of 16 rows of Bs, ascending).
template <int KC>
__device__ __forceinline__ void ga_pv(float (*acc)[4], const float (*p)[4], const h3bf *Bs, int lane) {
#pragma unroll
  for (int kc = 0; kc < KC; ++kc) {
    h3u32 pa[4];
    pa[0] = pack_bf2(p[2 * kc][0], p[2 * kc][1]);
    pa[1] = pack_bf2(p[2 * kc][2], p[2 * kc][3]);
    pa[2] = pack_bf2(p[2 * kc + 1][0], p[2 * kc + 1][1]);
    pa[3] = pack_bf2(p[2 * kc + 1][2], p[2 * kc + 1][3]);
#pragma unroll
    for (int j = 0; j < GA_DN; j += 2) {
      h3u32 b0, b1, b2, b3;
      ldsm_x4_t(b0, b1, b2, b3, Bs + (kc * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * GA_LDS + j * 8 + (lane >> 4) * 8);
      mma16816(acc[j], pa, b0, b1);
      mma16816(acc[j + 1], pa, b2, b3);
    }
  }
}

template <int NF>
__device__ __forceinline__ void ga_zero(float (*a)[4]) {
#pragma unroll
  for (int j = 0; j < NF; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) a[j][e] = 0.0f;
}

// Phase 0: statistics and dq of 64 query rows.
extern "C" __global__ void __launch_bounds__(128) GA_ENTRY(H3C_PARAMS) {
  h3c_grid_dependency_wait();  // (common.cuh) before any global memory access
  extern __shared__ __align__(16) unsigned char ga_smem[];
  h3bf *Qs = (h3bf *)ga_smem;
  h3bf *dOs = Qs + 64 * GA_LDS;
  h3bf *KVs = dOs + 64 * GA_LDS;  // GA_STAT_ROWS rows: the statistics' K blocks, then the dq pass's K and V
  float *Ds = (float *)(KVs + GA_STAT_ROWS * GA_LDS);
  const long long L = item_rows;
  const long long rowBase = (long long)blockIdx.z * L;  // the item's first row
  const long long colBase = (long long)blockIdx.y * GA_D;
  const h3bf *Q = (const h3bf *)q + rowBase * GA_LD + colBase;
  const h3bf *K = (const h3bf *)k + rowBase * GA_LD + colBase;
  const h3bf *V = (const h3bf *)v + rowBase * GA_LD + colBase;
  const long long q0 = (long long)blockIdx.x * 64;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
  const float kNegInf = __int_as_float(0xff800000);

  ga_load<64>(Qs, Q, q0, L);
  if (!GA_LSE) ga_load<GA_KVB>(KVs, K, 0, L);  // (GA_LSE: no statistics walk)
  cp_async_commit();
  // bf(dO) of the tile (zeros past L) into shared memory and the scratch; D by one thread per row.
  for (int i = threadIdx.x; i < 64 * (GA_D / 8); i += 128) {
    const int r = i / (GA_D / 8), c = (i % (GA_D / 8)) * 8;
    uint4 pk = make_uint4(0u, 0u, 0u, 0u);
    if (q0 + r < L) {
      const float *src = (const float *)dout + (rowBase + q0 + r) * GA_LD + colBase + c;
      const float4 lo = *(const float4 *)src, hi = *(const float4 *)(src + 4);
      pk = make_uint4(pack_bf2(lo.x, lo.y), pack_bf2(lo.z, lo.w), pack_bf2(hi.x, hi.y), pack_bf2(hi.z, hi.w));
      *(uint4 *)((h3bf *)dob + (rowBase + q0 + r) * GA_LD + colBase + c) = pk;
    }
    *(uint4 *)(dOs + r * GA_LDS + c) = pk;
  }
  if (threadIdx.x < 64) {
    float D = 0.f;
    const long long row = rowBase + q0 + threadIdx.x;
    if (q0 + threadIdx.x < L)
      for (int c = 0; c < GA_D; ++c) {
        const long long e = row * GA_LD + colBase + c;
        const float ov = GA_O_BF ? bf2f(((const h3bf *)o)[e]) : ((const float *)o)[e];
        D = __fmaf_rn(((const float *)dout)[e], ov, D);
      }
    Ds[threadIdx.x] = D;
  }

  // The statistics pass: the forward's key walk (attention.cuh), without o.
  // With GA_LSE the forward wrote L (its attention op's lse output): no walk, L read below.
  const int nkv = GA_LSE ? 0 : (int)((L + GA_KVB - 1) / GA_KVB);
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};
  if (GA_LSE) {  // Q landed and D written (the walk's waits and barriers otherwise)
    cp_async_wait<0>();
    __syncthreads();
  }
  for (int kb = 0; kb < nkv; ++kb) {
    if (kb + 1 < nkv) {
      ga_load<GA_KVB>(KVs + ((kb + 1) & 1) * GA_KVB * GA_LDS, K, (long long)(kb + 1) * GA_KVB, L);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    float s[GA_KVB / 8][4];
    ga_zero<GA_KVB / 8>(s);
    ga_qk<GA_KVB / 8>(s, Qs, warp * 16, KVs + (kb & 1) * GA_KVB * GA_LDS, lane);
    gr_stats_block<GA_KVB / 8>(&s[0][0], (long long)kb * GA_KVB, L, t4, GA_C, m, l);
    __syncthreads();
  }
  // The dq pass's first K and V sub-block can stream in while the statistics finish.
  const int nsub = (int)((L + GA_KSUB - 1) / GA_KSUB);
  h3bf *Ksub = KVs, *Vsub = KVs + 2 * GA_KSUB * GA_LDS;
  ga_load<GA_KSUB>(Ksub, K, 0, L);
  ga_load<GA_KSUB>(Vsub, V, 0, L);
  cp_async_commit();
  float Lr[2], Dr[2];
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    float lt = __fadd_rn(l[hh], __shfl_xor_sync(0xffffffffu, l[hh], 1));
    lt = __fadd_rn(lt, __shfl_xor_sync(0xffffffffu, lt, 2));
    const int r = warp * 16 + g + hh * 8;
#if GA_LSE
    Lr[hh] = q0 + r < L ? ((const float *)lse)[(rowBase + q0 + r) * GA_HEADS + blockIdx.y] : 0.0f;
#else
    Lr[hh] = __fadd_rn(__fmul_rn(m[hh], GA_C), h3c_lg2(lt));
#endif
    Dr[hh] = Ds[r];
    if (t4 == 0 && q0 + r < L) {
      const long long sw = (rowBase + q0 + r) * GA_HEADS + blockIdx.y;
      ((float *)stats)[2 * sw] = Lr[hh];
      ((float *)stats)[2 * sw + 1] = Dr[hh];
    }
  }

  // dqa: the chain of the current block of GR_DQ_KEYS keys; dqs: the fold of the blocks before it.
  static_assert(GR_DQ_KEYS % GA_KSUB == 0, "a dq key block is whole sub-blocks");
  float dqa[GA_DN][4], dqs[GA_DN][4];
  ga_zero<GA_DN>(dqa);
  ga_zero<GA_DN>(dqs);
  for (int kb = 0; kb < nsub; ++kb) {
    if (kb > 0 && kb % (GR_DQ_KEYS / GA_KSUB) == 0) {  // a block's chain ends: into the fold, the next from 0
#pragma unroll
      for (int j = 0; j < GA_DN; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) dqs[j][e] = gr_add_ftz(dqs[j][e], dqa[j][e]), dqa[j][e] = 0.0f;
    }
    if (kb + 1 < nsub) {
      const int nb = (kb + 1) & 1;
      ga_load<GA_KSUB>(Ksub + nb * GA_KSUB * GA_LDS, K, (long long)(kb + 1) * GA_KSUB, L);
      ga_load<GA_KSUB>(Vsub + nb * GA_KSUB * GA_LDS, V, (long long)(kb + 1) * GA_KSUB, L);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const h3bf *Kb = Ksub + (kb & 1) * GA_KSUB * GA_LDS, *Vb = Vsub + (kb & 1) * GA_KSUB * GA_LDS;
    float s[GA_KSUB / 8][4], dp[GA_KSUB / 8][4];
    ga_zero<GA_KSUB / 8>(s);
    ga_zero<GA_KSUB / 8>(dp);
    ga_qk<GA_KSUB / 8>(s, Qs, warp * 16, Kb, lane);
    ga_qk<GA_KSUB / 8>(dp, dOs, warp * 16, Vb, lane);
    const long long k0 = (long long)kb * GA_KSUB;
#pragma unroll
    for (int j = 0; j < GA_KSUB / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int hh = e >> 1;
        const float P = h3c_ex2(__fmaf_rn(s[j][e], GA_C, -Lr[hh]));
        s[j][e] = k0 + j * 8 + t4 * 2 + (e & 1) < L ? rbf(__fmul_rn(P, __fsub_rn(dp[j][e], Dr[hh]))) : 0.0f;
      }
    ga_pv<GA_KSUB / 16>(dqa, s, Kb, lane);
    __syncthreads();
  }
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const long long r = q0 + warp * 16 + g + hh * 8;
    if (r >= L) continue;
    float *out = (float *)dq + (rowBase + r) * GA_LD + colBase;
#pragma unroll
    for (int j = 0; j < GA_DN; ++j)
      *(float2 *)(out + j * 8 + t4 * 2) =
          make_float2(__fmul_rn(GA_QK_SCALE, gr_add_ftz(dqs[j][hh * 2], dqa[j][hh * 2])),
                      __fmul_rn(GA_QK_SCALE, gr_add_ftz(dqs[j][hh * 2 + 1], dqa[j][hh * 2 + 1])));
  }
}

// Phase 1: dk and dv of 64 key rows.
extern "C" __global__ void __launch_bounds__(128) GA_ENTRY_P1(H3C_PARAMS) {
  h3c_grid_dependency_wait();
  extern __shared__ __align__(16) unsigned char ga_smem[];
  h3bf *Ks = (h3bf *)ga_smem;
  h3bf *Vs = Ks + 64 * GA_LDS;
  h3bf *Qsub = Vs + 64 * GA_LDS;             // 2 x GA_QSUB rows
  h3bf *dOsub = Qsub + 2 * GA_QSUB * GA_LDS;  // 2 x GA_QSUB rows
  float *LDs = (float *)(dOsub + 2 * GA_QSUB * GA_LDS);  // 2 x GA_QSUB x (L, D)
  const long long L = item_rows;
  const long long rowBase = (long long)blockIdx.z * L;
  const long long colBase = (long long)blockIdx.y * GA_D;
  const h3bf *Q = (const h3bf *)q + rowBase * GA_LD + colBase;
  const h3bf *dO = (const h3bf *)dob + rowBase * GA_LD + colBase;
  const long long k0 = (long long)blockIdx.x * 64;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;

  ga_load<64>(Ks, (const h3bf *)k + rowBase * GA_LD + colBase, k0, L);
  ga_load<64>(Vs, (const h3bf *)v + rowBase * GA_LD + colBase, k0, L);
  // Sub-tile t's query rows, their L and D (0 past the item's end, where P and dS are set to 0 below).
  auto loadSub = [&](int buf, long long i0) {
    ga_load<GA_QSUB>(Qsub + buf * GA_QSUB * GA_LDS, Q, i0, L);
    ga_load<GA_QSUB>(dOsub + buf * GA_QSUB * GA_LDS, dO, i0, L);
    if (threadIdx.x < GA_QSUB) {
      const long long i = i0 + threadIdx.x;
      const long long sw = (rowBase + i) * GA_HEADS + blockIdx.y;
      LDs[buf * 2 * GA_QSUB + threadIdx.x] = i < L ? ((const float *)stats)[2 * sw] : 0.0f;
      LDs[buf * 2 * GA_QSUB + GA_QSUB + threadIdx.x] = i < L ? ((const float *)stats)[2 * sw + 1] : 0.0f;
    }
  };
  // The walk: the item's query rows in sub-tiles of GA_QSUB, one chain for dk and one for dv.
  const long long nsub = (L + GA_QSUB - 1) / GA_QSUB;
  loadSub(0, 0);
  cp_async_commit();
  float dka[GA_DN][4], dva[GA_DN][4];
  ga_zero<GA_DN>(dka);
  ga_zero<GA_DN>(dva);
  for (long long t = 0; t < nsub; ++t) {
    if (t + 1 < nsub) {
      __syncthreads();  // the buffer loaded next was read in step t - 1
      loadSub(int((t + 1) & 1), (t + 1) * GA_QSUB);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int buf = int(t & 1);
    const h3bf *Qb = Qsub + buf * GA_QSUB * GA_LDS, *dOb = dOsub + buf * GA_QSUB * GA_LDS;
    const float *Lb = LDs + buf * 2 * GA_QSUB, *Db = Lb + GA_QSUB;
    float st[GA_QSUB / 8][4], dpt[GA_QSUB / 8][4];
    ga_zero<GA_QSUB / 8>(st);
    ga_zero<GA_QSUB / 8>(dpt);
    ga_qk<GA_QSUB / 8>(st, Ks, warp * 16, Qb, lane);   // S^T: this warp's 16 keys x the sub-tile's queries
    ga_qk<GA_QSUB / 8>(dpt, Vs, warp * 16, dOb, lane);  // dP^T
    const long long i0 = t * GA_QSUB;
#pragma unroll
    for (int j = 0; j < GA_QSUB / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = j * 8 + t4 * 2 + (e & 1);
        const bool in = i0 + c < L;
        const float P = h3c_ex2(__fmaf_rn(st[j][e], GA_C, -Lb[c]));
        dpt[j][e] = in ? rbf(__fmul_rn(P, __fsub_rn(dpt[j][e], Db[c]))) : 0.0f;  // dS^T
        st[j][e] = in ? P : 0.0f;                                                 // P^T (rounded by the pack)
      }
    ga_pv<GA_QSUB / 16>(dva, st, dOb, lane);
    ga_pv<GA_QSUB / 16>(dka, dpt, Qb, lane);
  }
  if (L == 0) return;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const long long r = k0 + warp * 16 + g + hh * 8;
    if (r >= L) continue;
    float *dkr = (float *)dk + (rowBase + r) * GA_LD + colBase;
    const long long dvr = (rowBase + r) * GA_LD + colBase;  // (dv F32, or bf16 with GR_DV_BF: gr_st2)
#pragma unroll
    for (int j = 0; j < GA_DN; ++j) {
      *(float2 *)(dkr + j * 8 + t4 * 2) =
          make_float2(__fmul_rn(GA_QK_SCALE, dka[j][hh * 2]), __fmul_rn(GA_QK_SCALE, dka[j][hh * 2 + 1]));
      gr_st2<GR_DV_BF>(dv, dvr + j * 8 + t4 * 2, dva[j][hh * 2], dva[j][hh * 2 + 1]);
    }
  }
}
