// Tensor-core linear (mma.sync m16n8k16, bf16 x bf16 -> f32) in the contract's k_chunks order (docs/contract.md
// section 4): one accumulator per output starts at 0 and every mma adds the next 16-wide chunk, K ascending (the
// k-tile loop walks K in order and each tile issues its 16-wide chunks in order). Tiles are fixed per op, never
// chosen from the row count M. Epilogues per section 3 (bias, residual, gate_residual, swiglu).
//
// Defined by the emitter: GM_ENTRY H3C_PARAMS GM_K GM_N GM_BM GM_BN GM_BK GM_WM GM_WN GM_STAGES GM_XMODE (one of
// GM_X_*) GM_EPI (one of GM_EPI_*) GM_OUT_F32 GM_HAS_BIAS GM_NOUT (3 for qkv) GM_CHUNK GM_NUM_CHUNKS GM_RPT.
// Parameters (H3C_PARAMS, in this order): x; residual (epilogues residual, gate_residual); table, ts_index, tags
// (gate_residual); y0 (y1, y2 for qkv); w (qkv: [Wq; Wk; Wv] as one matrix); bias (when GM_HAS_BIAS); rows; meta_rows
// (gate_residual).
#define GM_X_BF16 0       // x is bf16
#define GM_X_F32 1        // x is f32, rounded to bf16
#define GM_X_SILU_F32 2   // x is f32: bf16(silu(x)) (the AdaLN tables)
#define GM_EPI_NONE 0
#define GM_EPI_RESIDUAL 1
#define GM_EPI_GATE_RESIDUAL 2
#define GM_EPI_SWIGLU 3
#define GM_THREADS (GM_WM * GM_WN * 32)
#define GM_WTM (GM_BM / GM_WM)
#define GM_WTN (GM_BN / GM_WN)
#define GM_MF (GM_WTM / 16)
#define GM_NF (GM_WTN / 8)
#define GM_LDS (GM_BK + 8)
#if GM_EPI == GM_EPI_SWIGLU
#define GM_OUTN (GM_N / 2)
#define GM_BNO (GM_BN / 2)
#elif GM_NOUT == 3
#define GM_OUTN (GM_N / 3)
#define GM_BNO GM_BN
#else
#define GM_OUTN GM_N
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

__device__ __forceinline__ void gm_load_tile(h3bf *As, h3bf *Bs, const void *xv, const h3bf *W, long long M,
                                             long long m0, int n0, int k0) {
  const int tid = threadIdx.x;
#if GM_XMODE == GM_X_BF16
  const h3bf *X = (const h3bf *)xv;
  for (int i = tid; i < GM_BM * (GM_BK / 8); i += GM_THREADS) {
    int r = i / (GM_BK / 8), c = (i % (GM_BK / 8)) * 8;
    long long gr = m0 + r;
    int kc = k0 + c;
    bool ok = gr < M && kc < GM_K;
    cp_async16(As + r * GM_LDS + c, ok ? (const void *)(X + gr * GM_K + kc) : (const void *)X, ok ? 16 : 0);
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
      if (gr < M && k0 + c + e < GM_K) v0 = X[gr * GM_K + k0 + c + e];
      if (gr < M && k0 + c + e + 1 < GM_K) v1 = X[gr * GM_K + k0 + c + e + 1];
#if GM_XMODE == GM_X_SILU_F32
      if (gr < M && k0 + c + e < GM_K) v0 = h3c::detmath::silu(v0);
      if (gr < M && k0 + c + e + 1 < GM_K) v1 = h3c::detmath::silu(v1);
#endif
      pk[e / 2] = pack_bf2(v0, v1);
    }
    uint4 q;
    q.x = pk[0]; q.y = pk[1]; q.z = pk[2]; q.w = pk[3];
    *(uint4 *)(As + r * GM_LDS + c) = q;
  }
#endif
  for (int i = tid; i < GM_BN * (GM_BK / 8); i += GM_THREADS) {
    int r = i / (GM_BK / 8), c = (i % (GM_BK / 8)) * 8;
    bool valid;
    long long wr = gm_wrow(n0, r, valid);
    int kc = k0 + c;
    bool ok = valid && kc < GM_K;
    cp_async16(Bs + r * GM_LDS + c, ok ? (const void *)(W + wr * GM_K + kc) : (const void *)W, ok ? 16 : 0);
  }
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

// acc + bias (one F32 add after the reduction); no add at all without a bias (keeps the sign of a zero sum).
__device__ __forceinline__ float gm_bias(const void *bias, float acc, long long wrow) {
#if GM_HAS_BIAS
  return __fadd_rn(acc, bf2f(((const h3bf *)bias)[wrow]));
#else
  return acc;
#endif
}

// Where the epilogue writes and what it reads besides the accumulator.
struct GmEpilogue {
  void *y[3];
  const void *residual, *table;
  const long long *ts, *tags;
  long long metaRows;
};

// Stores one output element of row r, output column c (pre-rounding value v already includes the bias).
__device__ __forceinline__ void gm_store(const GmEpilogue &e, long long r, long long c, float v) {
#if GM_OUT_F32 && GM_EPI == GM_EPI_NONE
  float y = v;
#else
  float y = rbf(v);
#endif
#if GM_EPI == GM_EPI_RESIDUAL
  y = rbf(__fadd_rn(bf2f(((const h3bf *)e.residual)[r * GM_OUTN + c]), y));
#elif GM_EPI == GM_EPI_GATE_RESIDUAL
  {
    long long trow = h3c_table_row(e.ts, e.tags, e.metaRows, r, GM_RPT);
    float g = bf2f(((const h3bf *)e.table)[trow * (long long)(GM_NUM_CHUNKS * GM_OUTN) + GM_CHUNK * GM_OUTN + c]);
    y = rbf(__fmaf_rn(g, y, bf2f(((const h3bf *)e.residual)[r * GM_OUTN + c])));
  }
#endif
#if GM_NOUT == 3
  int o = (int)(c / GM_OUTN);
  long long cc = c % GM_OUTN;
  ((h3bf *)e.y[o])[r * GM_OUTN + cc] = f2bf(y);
#elif GM_OUT_F32
  ((float *)e.y[0])[r * GM_OUTN + c] = y;
#else
  ((h3bf *)e.y[0])[r * GM_OUTN + c] = f2bf(y);
#endif
}

extern "C" __global__ void __launch_bounds__(GM_THREADS) GM_ENTRY(H3C_PARAMS) {
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
#if GM_HAS_BIAS
  const void *B = bias;
#else
  const void *B = nullptr;
#endif
  GmEpilogue ep = {};
#if GM_NOUT == 3
  ep.y[0] = y0; ep.y[1] = y1; ep.y[2] = y2;
#else
  ep.y[0] = y0;
#endif
#if GM_EPI == GM_EPI_RESIDUAL || GM_EPI == GM_EPI_GATE_RESIDUAL
  ep.residual = residual;
#endif
#if GM_EPI == GM_EPI_GATE_RESIDUAL
  ep.table = table; ep.ts = (const long long *)ts_index; ep.tags = (const long long *)tags; ep.metaRows = meta_rows;
#endif
  const int KT = (GM_K + GM_BK - 1) / GM_BK;

  gm_acc_t acc;
  gm_zero(acc);
#pragma unroll
  for (int s = 0; s < GM_STAGES - 1; ++s) {
    if (s < KT) gm_load_tile(As + s * GM_BM * GM_LDS, Bs + s * GM_BN * GM_LDS, X, W, M, m0, n0, s * GM_BK);
    cp_async_commit();
  }
  for (int kt = 0; kt < KT; ++kt) {
    cp_async_wait<GM_STAGES - 2>();
    __syncthreads();
    int nk = kt + GM_STAGES - 1;
    if (nk < KT) {
      int s = nk % GM_STAGES;
      gm_load_tile(As + s * GM_BM * GM_LDS, Bs + s * GM_BN * GM_LDS, X, W, M, m0, n0, nk * GM_BK);
    }
    cp_async_commit();
    int s = kt % GM_STAGES;
    gm_compute(As + s * GM_BM * GM_LDS, Bs + s * GM_BN * GM_LDS, acc, wm, wn, lane);
  }
  cp_async_wait<0>();
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
          float v = rbf(gm_bias(B, res[i][j][h * 2 + e], c));
          float gt = rbf(gm_bias(B, res[i][j + GM_NF / 2][h * 2 + e], GM_OUTN + c));
          float out = rbf(__fmul_rn(v, rbf(h3c::detmath::silu(gt))));
          ((h3bf *)ep.y[0])[r * GM_OUTN + c] = f2bf(out);
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
