// Flash attention in the contract's `flash` order (docs/contract.md section 4), one (64-query block, head, batch
// item) per CTA of 4 warps (16 query rows each). Keys in canonical order in blocks of AT_KV (the order's kv_block, 64
// or 128), ascending; per block:
// s = q k^T (mma over d in 16-wide chunks, ascending, from 0), running max m of the raw scores and sum l,
// with c = fl(d^-0.5 * log2 e) and mc = fl(m_new * c): P = bf(ex2(fma(s, c, -mc))),
// o = o * ex2(fma(m_old, c, -mc)) + P v (mma over the block's keys in 16-wide chunks, ascending); finally o / l, bf16.
// l sums the rounded P that multiply v. K/V tiles are double-buffered with cp.async.
//
// Defined by the emitter: AT_ENTRY H3C_PARAMS AT_D (multiple of 16, <= 192: shared memory at AT_KV 128) AT_HEADS AT_C (c, a float literal) AT_KV.
// Parameters: q, out ([B, Lq, heads * d]), k, v ([B, Lk, heads * d]), item_rows = Lq and kv_rows = Lk (grid.x: query
// blocks, y: heads, z: items). Lq < Lk under sequence parallelism: a rank's query rows attend every key of S.
#define AT_LDS (AT_D + 8)
#define AT_DK (AT_D / 16)
#define AT_DN (AT_D / 8)
#define AT_SN (AT_KV / 8)  // 8-key column groups of a warp's S fragment

// `rows` rows of d columns from row row0 (rows past L read as zeros).
template <int rows>
__device__ __forceinline__ void at_load_rows(h3bf *dst, const h3bf *src, long long row0, long long L, long long ld) {
  for (int i = threadIdx.x; i < rows * (AT_D / 8); i += 128) {
    int r = i / (AT_D / 8), c = (i % (AT_D / 8)) * 8;
    bool ok = row0 + r < L;
    cp_async16(dst + r * AT_LDS + c, ok ? (const void *)(src + (row0 + r) * ld + c) : (const void *)src, ok ? 16 : 0);
  }
}

extern "C" __global__ void __launch_bounds__(128) AT_ENTRY(H3C_PARAMS) {
  h3c_grid_dependency_wait();  // (common.cuh) before any global memory access
  extern __shared__ __align__(16) unsigned char at_smem[];
  h3bf *Qs = (h3bf *)at_smem;
  h3bf *Ks = Qs + 64 * AT_LDS;
  h3bf *Vs = Ks + 2 * AT_KV * AT_LDS;
  const long long L = item_rows, Lk = kv_rows;
  const long long ld = (long long)AT_HEADS * AT_D;
  const long long base = (long long)blockIdx.z * L * ld + (long long)blockIdx.y * AT_D;
  const long long kvBase = (long long)blockIdx.z * Lk * ld + (long long)blockIdx.y * AT_D;
  const h3bf *Q = (const h3bf *)q + base;
  const h3bf *K = (const h3bf *)k + kvBase;
  const h3bf *V = (const h3bf *)v + kvBase;
  h3bf *O = (h3bf *)out + base;
  const long long q0 = (long long)blockIdx.x * 64;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
  const float kNegInf = __int_as_float(0xff800000);
  const int nkv = (int)((Lk + AT_KV - 1) / AT_KV);

  at_load_rows<64>(Qs, Q, q0, L, ld);
  at_load_rows<AT_KV>(Ks, K, 0, Lk, ld);
  at_load_rows<AT_KV>(Vs, V, 0, Lk, ld);
  cp_async_commit();

  float o[AT_DN][4];
#pragma unroll
  for (int j = 0; j < AT_DN; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[j][e] = 0.0f;
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};
  h3u32 qf[AT_DK][4];

  for (int kb = 0; kb < nkv; ++kb) {
    if (kb + 1 < nkv) {
      int nb = (kb + 1) & 1;
      at_load_rows<AT_KV>(Ks + nb * AT_KV * AT_LDS, K, (long long)(kb + 1) * AT_KV, Lk, ld);
      at_load_rows<AT_KV>(Vs + nb * AT_KV * AT_LDS, V, (long long)(kb + 1) * AT_KV, Lk, ld);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (kb == 0) {
#pragma unroll
      for (int kc = 0; kc < AT_DK; ++kc)
        ldsm_x4(qf[kc][0], qf[kc][1], qf[kc][2], qf[kc][3],
                Qs + (warp * 16 + (lane & 15)) * AT_LDS + kc * 16 + (lane >> 4) * 8);
    }
    const h3bf *Kb = Ks + (kb & 1) * AT_KV * AT_LDS;
    const h3bf *Vb = Vs + (kb & 1) * AT_KV * AT_LDS;

    float s[AT_SN][4];
#pragma unroll
    for (int j = 0; j < AT_SN; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < AT_DK; ++kc) {
#pragma unroll
      for (int j = 0; j < AT_SN; j += 2) {
        h3u32 b0, b1, b2, b3;
        ldsm_x4(b0, b1, b2, b3, Kb + (j * 8 + (lane >> 4) * 8 + (lane & 7)) * AT_LDS + kc * 16 + ((lane >> 3) & 1) * 8);
        mma16816(s[j], qf[kc], b0, b1);
        mma16816(s[j + 1], qf[kc], b2, b3);
      }
    }
    const long long k0 = (long long)kb * AT_KV;
#pragma unroll
    for (int j = 0; j < AT_SN; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        long long key = k0 + j * 8 + t4 * 2 + (e & 1);
        if (key >= Lk) s[j][e] = kNegInf;
      }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float mx = kNegInf;
#pragma unroll
      for (int j = 0; j < AT_SN; ++j) mx = fmaxf(mx, fmaxf(s[j][hh * 2], s[j][hh * 2 + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float mnew = fmaxf(m[hh], mx), mc = __fmul_rn(mnew, AT_C);
      const float alpha = h3c_ex2(__fmaf_rn(m[hh], AT_C, -mc));  // 0 on the first block (m = -inf)
      m[hh] = mnew;
      l[hh] = __fmul_rn(l[hh], alpha);
#pragma unroll
      for (int j = 0; j < AT_DN; ++j) {
        o[j][hh * 2] = __fmul_rn(o[j][hh * 2], alpha);
        o[j][hh * 2 + 1] = __fmul_rn(o[j][hh * 2 + 1], alpha);
      }
#pragma unroll
      for (int j = 0; j < AT_SN; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float p = rbf(h3c_ex2(__fmaf_rn(s[j][hh * 2 + e], AT_C, -mc)));
          s[j][hh * 2 + e] = p;
          l[hh] = __fadd_rn(l[hh], p);
        }
    }
#pragma unroll
    for (int kc = 0; kc < AT_KV / 16; ++kc) {
      h3u32 pa[4];
      pa[0] = pack_bf2(s[2 * kc][0], s[2 * kc][1]);
      pa[1] = pack_bf2(s[2 * kc][2], s[2 * kc][3]);
      pa[2] = pack_bf2(s[2 * kc + 1][0], s[2 * kc + 1][1]);
      pa[3] = pack_bf2(s[2 * kc + 1][2], s[2 * kc + 1][3]);
#pragma unroll
      for (int j = 0; j < AT_DN; j += 2) {
        h3u32 b0, b1, b2, b3;
        ldsm_x4_t(b0, b1, b2, b3, Vb + (kc * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * AT_LDS + j * 8 + (lane >> 4) * 8);
        mma16816(o[j], pa, b0, b1);
        mma16816(o[j + 1], pa, b2, b3);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    float lt = __fadd_rn(l[hh], __shfl_xor_sync(0xffffffffu, l[hh], 1));
    lt = __fadd_rn(lt, __shfl_xor_sync(0xffffffffu, lt, 2));
    long long q = q0 + warp * 16 + g + hh * 8;
    if (q >= L) continue;
#if AT_LSE  // the row statistics for the backward: L = mc + lg2(l) of the walk's final m and l
    if (t4 == 0) ((float *)lse)[((long long)blockIdx.z * L + q) * AT_HEADS + blockIdx.y] = __fadd_rn(__fmul_rn(m[hh], AT_C), h3c_lg2(lt));
#endif
#pragma unroll
    for (int j = 0; j < AT_DN; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) O[q * ld + j * 8 + t4 * 2 + e] = f2bf(__fdiv_rn(o[j][hh * 2 + e], lt));
  }
}
