// Tensor-core linear (mma.sync m16n8k16, bf16 x bf16 -> f32) in the contract's k_chunks order (docs/contract.md
// section 4): one accumulator per output starts at 0 and every mma adds the next 16-wide chunk, K ascending (the
// k-tile loop walks K in order and each tile issues its 16-wide chunks in order). Tiles are fixed per op, never
// chosen from the row count M. Epilogues per section 3 (bias, residual, gate_residual, swiglu).
//
// Defined by the emitter: GM_ENTRY H3C_PARAMS GM_K GM_BM GM_BN GM_BK GM_WM GM_WN GM_STAGES GM_XMODE (one of
// GM_X_*), and the epilogue's defines (gemm_epilogue.cuh, emitted before this file).
// Parameters (H3C_PARAMS, in this order): x; residual (epilogues residual, gate_residual); table, ts_index, tags
// (gate_residual); y0 (y1, y2 for qkv); w (qkv: [Wq; Wk; Wv] as one matrix); lora_t, lora_up (GM_LORA_K > 0: the
// unmerged LoRA input [rows, GM_LORA_K] and up slot [GM_N, GM_LORA_K], docs/contract.md section 13, whose k-tiles
// follow x's and W's in the same chain); bias (when GM_HAS_BIAS); rows; meta_rows (gate_residual).
#define GM_THREADS (GM_WM * GM_WN * 32)
#define GM_WTM (GM_BM / GM_WM)
#define GM_WTN (GM_BN / GM_WN)
#define GM_MF (GM_WTM / 16)
#define GM_NF (GM_WTN / 8)
#define GM_LDS (GM_BK + 8)
#if GM_EPI == GM_EPI_SWIGLU
#define GM_BNO (GM_BN / 2)
#else
#define GM_BNO GM_BN
#endif

typedef float gm_acc_t[GM_MF][GM_NF][4];

__device__ __forceinline__ void gm_zero(gm_acc_t &d) {
#pragma unroll
  for (int i = 0; i < GM_MF; ++i)
#pragma unroll
    for (int j = 0; j < GM_NF; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) d[i][j][e] = 0.0f;
}

// Weight row held by row r of the block's B tile (swiglu: each warp's columns are half value rows, half gate rows).
__device__ __forceinline__ long long gm_wrow(int n0, int r, bool &valid) {
#if GM_EPI == GM_EPI_SWIGLU
  int wn = r / GM_WTN, w = r % GM_WTN, half = GM_WTN / 2;
  long long oc = (long long)n0 + wn * half + (w % half);
  valid = oc < GM_OUTN;
  return w < half ? oc : GM_OUTN + oc;
#else
  long long n = (long long)n0 + r;
  valid = n < GM_N;
  return n;
#endif
}

// The k-tile at column k0 of x [M, ldk] and W [GM_N rows, ldk] (or of the LoRA input and up slot, ldk = GM_LORA_K).
__device__ __forceinline__ void gm_load_tile(h3bf *As, h3bf *Bs, const void *xv, const h3bf *W, long long M,
                                             long long m0, int n0, int k0, const int ldk = GM_K) {
  const int tid = threadIdx.x;
  // The weight tile first: its cp.async loads are in flight while an F32 x tile is loaded and converted below
  // (adaln_table: silu of temb), which stalls this thread on ordinary loads.
  for (int i = tid; i < GM_BN * (GM_BK / 8); i += GM_THREADS) {
    int r = i / (GM_BK / 8), c = (i % (GM_BK / 8)) * 8;
    bool valid;
    long long wr = gm_wrow(n0, r, valid);
    int kc = k0 + c;
    bool ok = valid && kc < ldk;
    cp_async16(Bs + r * GM_LDS + c, ok ? (const void *)(W + wr * ldk + kc) : (const void *)W, ok ? 16 : 0);
  }
#if GM_XMODE == GM_X_BF16
  const h3bf *X = (const h3bf *)xv;
  for (int i = tid; i < GM_BM * (GM_BK / 8); i += GM_THREADS) {
    int r = i / (GM_BK / 8), c = (i % (GM_BK / 8)) * 8;
    long long gr = m0 + r;
    int kc = k0 + c;
    bool ok = gr < M && kc < ldk;
    cp_async16(As + r * GM_LDS + c, ok ? (const void *)(X + gr * ldk + kc) : (const void *)X, ok ? 16 : 0);
  }
#else
  const float *X = (const float *)xv;
  for (int i = tid; i < GM_BM * (GM_BK / 8); i += GM_THREADS) {
    int r = i / (GM_BK / 8), c = (i % (GM_BK / 8)) * 8;
    long long gr = m0 + r;
    h3u32 pk[4];
#pragma unroll
    for (int e = 0; e < 8; e += 2) {
      float v0 = 0.0f, v1 = 0.0f;
      if (gr < M && k0 + c + e < ldk) v0 = X[gr * ldk + k0 + c + e];
      if (gr < M && k0 + c + e + 1 < ldk) v1 = X[gr * ldk + k0 + c + e + 1];
#if GM_XMODE == GM_X_SILU_F32
      if (gr < M && k0 + c + e < ldk) v0 = h3c::detmath::silu(v0);
      if (gr < M && k0 + c + e + 1 < ldk) v1 = h3c::detmath::silu(v1);
#endif
      pk[e / 2] = pack_bf2(v0, v1);
    }
    uint4 q;
    q.x = pk[0]; q.y = pk[1]; q.z = pk[2]; q.w = pk[3];
    *(uint4 *)(As + r * GM_LDS + c) = q;
  }
#endif
}

__device__ __forceinline__ void gm_compute(const h3bf *As, const h3bf *Bs, gm_acc_t &acc, int wm, int wn, int lane) {
#pragma unroll
  for (int kk = 0; kk < GM_BK / 16; ++kk) {
    h3u32 a[GM_MF][4];
#pragma unroll
    for (int i = 0; i < GM_MF; ++i)
      ldsm_x4(a[i][0], a[i][1], a[i][2], a[i][3],
              As + (wm * GM_WTM + i * 16 + (lane & 15)) * GM_LDS + kk * 16 + (lane >> 4) * 8);
#pragma unroll
    for (int j = 0; j < GM_NF; j += 2) {
      h3u32 b0, b1, b2, b3;
      ldsm_x4(b0, b1, b2, b3,
              Bs + (wn * GM_WTN + j * 8 + (lane >> 4) * 8 + (lane & 7)) * GM_LDS + kk * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
      for (int i = 0; i < GM_MF; ++i) {
        mma16816(acc[i][j], a[i], b0, b1);
        mma16816(acc[i][j + 1], a[i], b2, b3);
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(GM_THREADS) GM_ENTRY(H3C_PARAMS) {
  h3c_grid_dependency_wait();  // (common.cuh) before any global memory access
  extern __shared__ __align__(16) unsigned char gm_smem[];
  h3bf *As = (h3bf *)gm_smem;
  h3bf *Bs = As + GM_STAGES * GM_BM * GM_LDS;
  const long long M = rows;
  const long long m0 = (long long)blockIdx.x * GM_BM;
  const int n0 = blockIdx.y * GM_BNO;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wm = warp / GM_WN, wn = warp % GM_WN;
  const h3bf *W = (const h3bf *)w;
  const void *X = x;
  const void *B = GM_BIAS_PARAM;
  const GmEpilogue ep = GM_EPILOGUE_PARAMS;
  const int KTX = (GM_K + GM_BK - 1) / GM_BK;  // x's k-tiles (the last zero-filled past K)
  const int KT = KTX + GM_LORA_K / GM_BK;     // then the LoRA input's (contract section 13)
#if GM_LORA_K
  static_assert(GM_LORA_K % GM_BK == 0, "the LoRA width is a multiple of the k-tile");
  const h3bf *const U = (const h3bf *)lora_up;
  // k-tile kt of the chain: x's and W's, then the LoRA input's and the up slot's.
#define GM_TILE(s, kt)                                                                                          \
  ((kt) < KTX ? gm_load_tile(As + (s) * GM_BM * GM_LDS, Bs + (s) * GM_BN * GM_LDS, X, W, M, m0, n0, (kt) * GM_BK)  \
              : gm_load_tile(As + (s) * GM_BM * GM_LDS, Bs + (s) * GM_BN * GM_LDS, lora_t, U, M, m0, n0,             \
                             ((kt) - KTX) * GM_BK, GM_LORA_K))
#else
#define GM_TILE(s, kt) gm_load_tile(As + (s) * GM_BM * GM_LDS, Bs + (s) * GM_BN * GM_LDS, X, W, M, m0, n0, (kt) * GM_BK)
#endif

  gm_acc_t acc;
  gm_zero(acc);
#pragma unroll
  for (int s = 0; s < GM_STAGES - 1; ++s) {
    if (s < KT) GM_TILE(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < KT; ++kt) {
    cp_async_wait<GM_STAGES - 2>();
    __syncthreads();
    int nk = kt + GM_STAGES - 1;
    if (nk < KT) {
      int s = nk % GM_STAGES;
      GM_TILE(s, nk);
    }
    cp_async_commit();
    int s = kt % GM_STAGES;
    gm_compute(As + s * GM_BM * GM_LDS, Bs + s * GM_BN * GM_LDS, acc, wm, wn, lane);
  }
  cp_async_wait<0>();
#undef GM_TILE
  gm_acc_t &res = acc;

  const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int i = 0; i < GM_MF; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      long long r = m0 + wm * GM_WTM + i * 16 + g + h * 8;
      if (r >= M) continue;
#if GM_EPI == GM_EPI_SWIGLU
#pragma unroll
      for (int j = 0; j < GM_NF / 2; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          long long c = (long long)n0 + wn * (GM_WTN / 2) + j * 8 + t4 * 2 + e;
          if (c >= GM_OUTN) continue;
          ((h3bf *)ep.y[0])[r * GM_OUTN + c] = gm_swiglu(B, res[i][j][h * 2 + e], res[i][j + GM_NF / 2][h * 2 + e], c);
#if GM_SWIGLU_X
          // the linear's own output beside y (the swiglu's x for the backward): bf(sum + bias), as gm_swiglu_x2
          ((h3bf *)ep.y[1])[r * GM_N + c] = f2bf(gm_bias(B, res[i][j][h * 2 + e], c));
          ((h3bf *)ep.y[1])[r * GM_N + GM_OUTN + c] = f2bf(gm_bias(B, res[i][j + GM_NF / 2][h * 2 + e], GM_OUTN + c));
#endif
        }
      }
#else
#pragma unroll
      for (int j = 0; j < GM_NF; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          long long c = (long long)n0 + wn * GM_WTN + j * 8 + t4 * 2 + e;
          if (c >= GM_N) continue;
          gm_store(ep, r, c, gm_bias(B, res[i][j][h * 2 + e], c));
        }
      }
#endif
    }
  }
}
