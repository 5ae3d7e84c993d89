// The fused epilogues of the bf16 linears (docs/contract.md section 3), shared by the mma.sync kernel
// (gemm_bf16.cuh) and the Hopper kernel (gemm_sm90.cuh): both turn the same F32 sums into the same bits here.
// Defined by the emitter: GM_N (all weight rows) GM_EPI (one of GM_EPI_*) GM_OUT_F32 GM_HAS_BIAS GM_NOUT (3 for qkv)
// GM_CHUNK GM_NUM_CHUNKS GM_RPT (gate_residual's table geometry).
#define GM_X_BF16 0       // x is bf16
#define GM_X_F32 1        // x is f32, rounded to bf16
#define GM_X_SILU_F32 2   // x is f32: bf16(silu(x)) (the AdaLN tables)
#define GM_EPI_NONE 0
#define GM_EPI_RESIDUAL 1
#define GM_EPI_GATE_RESIDUAL 2
#define GM_EPI_SWIGLU 3
// Output columns per output tensor.
#if GM_EPI == GM_EPI_SWIGLU
#define GM_OUTN (GM_N / 2)
#elif GM_NOUT == 3
#define GM_OUTN (GM_N / 3)
#else
#define GM_OUTN GM_N
#endif

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

// The epilogue's operands from the kernel's parameters (named by H3C_PARAMS; which exist depends on the epilogue):
// `const GmEpilogue ep = GM_EPILOGUE_PARAMS; const void *B = GM_BIAS_PARAM;` inside a GEMM kernel.
#if GM_NOUT == 3
#define GM_Y_PARAMS {y0, y1, y2}
#else
#define GM_Y_PARAMS {y0, nullptr, nullptr}
#endif
#if GM_EPI == GM_EPI_GATE_RESIDUAL
#define GM_EPILOGUE_PARAMS {GM_Y_PARAMS, residual, table, (const long long *)ts_index, (const long long *)tags, meta_rows}
#elif GM_EPI == GM_EPI_RESIDUAL
#define GM_EPILOGUE_PARAMS {GM_Y_PARAMS, residual, nullptr, nullptr, nullptr, 0}
#else
#define GM_EPILOGUE_PARAMS {GM_Y_PARAMS, nullptr, nullptr, nullptr, nullptr, 0}
#endif
#if GM_HAS_BIAS
#define GM_BIAS_PARAM bias
#else
#define GM_BIAS_PARAM nullptr
#endif

// The AdaLN table row of output row r (gate_residual; computed once per row, it costs a 64-bit division).
__device__ __forceinline__ long long gm_trow(const GmEpilogue &e, long long r) {
#if GM_EPI == GM_EPI_GATE_RESIDUAL
  return h3c_table_row(e.ts, e.tags, e.metaRows, r, GM_RPT);
#else
  return 0;
#endif
}

// The final value of output element (r, c) before its store: v is the F32 sum plus bias; trow = gm_trow(e, r).
__device__ __forceinline__ float gm_final(const GmEpilogue &e, long long r, long long trow, long long c, float v) {
#if GM_OUT_F32 && GM_EPI == GM_EPI_NONE
  float y = v;
#else
  float y = rbf(v);
#endif
#if GM_EPI == GM_EPI_RESIDUAL
  y = rbf(__fadd_rn(bf2f(((const h3bf *)e.residual)[r * GM_OUTN + c]), y));
#elif GM_EPI == GM_EPI_GATE_RESIDUAL
  float g = bf2f(((const h3bf *)e.table)[trow * (long long)(GM_NUM_CHUNKS * GM_OUTN) + GM_CHUNK * GM_OUTN + c]);
  y = rbf(__fmaf_rn(g, y, bf2f(((const h3bf *)e.residual)[r * GM_OUTN + c])));
#endif
  return y;
}

// Output tensor o (selects, not an indexed load: a run-time index would put the pointer array in local memory).
__device__ __forceinline__ void *gm_out(const GmEpilogue &e, int o) { return o == 0 ? e.y[0] : o == 1 ? e.y[1] : e.y[2]; }

// Where output element (r, c) lives (qkv: c in [0, 3 * GM_OUTN) picks the output tensor).
__device__ __forceinline__ long long gm_at(const GmEpilogue &e, long long r, long long c, int &o) {
#if GM_NOUT == 3
  o = (int)(c / GM_OUTN);
  return r * GM_OUTN + c % GM_OUTN;
#else
  o = 0;
  return r * GM_OUTN + c;
#endif
}

// Stores one output element of row r, output column c (v already includes the bias).
__device__ __forceinline__ void gm_store(const GmEpilogue &e, long long r, long long c, float v) {
  float y = gm_final(e, r, gm_trow(e, r), c, v);
  int o;
  long long at = gm_at(e, r, c, o);
#if GM_OUT_F32
  ((float *)gm_out(e, o))[at] = y;
#else
  ((h3bf *)gm_out(e, o))[at] = f2bf(y);
#endif
}

// Stores the output elements (r, c) and (r, c + 1), c even, from their F32 sums s0 and s1, each computed exactly as
// gm_store does (bias first), with one 4-byte (bf16) or 8-byte (F32) store when both exist and share an output.
// Columns >= GM_N are not touched (nor their bias read).
__device__ __forceinline__ void gm_store2(const GmEpilogue &e, const void *bias, long long r, long long trow,
                                          long long c, float s0, float s1) {
  if (c >= GM_N) return;
  float y0 = gm_final(e, r, trow, c, gm_bias(bias, s0, c));
  int o;
  long long at = gm_at(e, r, c, o);
  if (GM_OUTN % 2 == 0 && c + 1 < GM_N) {
    float y1 = gm_final(e, r, trow, c + 1, gm_bias(bias, s1, c + 1));
#if GM_OUT_F32
    *(float2 *)((float *)gm_out(e, o) + at) = make_float2(y0, y1);
#else
    *(h3u32 *)((h3bf *)gm_out(e, o) + at) = (h3u32)f2bf(y0) | ((h3u32)f2bf(y1) << 16);
#endif
    return;
  }
#if GM_OUT_F32
  ((float *)gm_out(e, o))[at] = y0;
#else
  ((h3bf *)gm_out(e, o))[at] = f2bf(y0);
#endif
  if (c + 1 < GM_N) gm_store(e, r, c + 1, gm_bias(bias, s1, c + 1));
}

// swiglu of one output column c: value and gate sums (weight rows c and GM_OUTN + c), each with its bias and rounded,
// then bf16(value * bf16(silu(gate))).
__device__ __forceinline__ h3bf gm_swiglu(const void *bias, float vsum, float gsum, long long c) {
  float v = rbf(gm_bias(bias, vsum, c));
  float gt = rbf(gm_bias(bias, gsum, GM_OUTN + c));
  return f2bf(rbf(__fmul_rn(v, rbf(h3c::detmath::silu(gt)))));
}

#if GM_EPI == GM_EPI_SWIGLU
// Output columns c and c + 1 of row r from their value sums (v0, v1) and gate sums (g0, g1): one 4-byte store where
// both columns exist and the row's pair is aligned, else one store per column.
__device__ __forceinline__ void gm_swiglu2(const GmEpilogue &e, const void *bias, long long r, long long c, float v0,
                                           float v1, float g0, float g1) {
  h3bf *y = (h3bf *)e.y[0] + r * GM_OUTN + c;
  if (GM_OUTN % 2 == 0 && c + 1 < GM_OUTN) {
    *(h3u32 *)y = (h3u32)gm_swiglu(bias, v0, g0, c) | ((h3u32)gm_swiglu(bias, v1, g1, c + 1) << 16);
  } else {
    if (c < GM_OUTN) y[0] = gm_swiglu(bias, v0, g0, c);
    if (c + 1 < GM_OUTN) y[1] = gm_swiglu(bias, v1, g1, c + 1);
  }
}
#endif

// One warpgroup's 64-row block of wgmma accumulators (NF 8-column fragments in the mma.sync layout: accumulator i is
// row 16 * warp + g + 8 * ((i >> 1) & 1), column 8 * (i >> 2) + 2 * t4 + (i & 1)) through the epilogue, rows from
// r0 (rows >= M skipped), output columns from c0; for swiglu the first NF / 2 fragments are values, the rest their
// gates. Used by the Hopper kernels (gemm_sm90*.cuh).
template <int NF>
__device__ __forceinline__ void gm_store_block(const GmEpilogue &ep, const void *bias, const float *acc, long long r0,
                                               long long c0, long long M, int warp, int g, int t4) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const long long r = r0 + warp * 16 + g + h * 8;
    if (r >= M) continue;
#if GM_EPI == GM_EPI_SWIGLU
#pragma unroll
    for (int j = 0; j < NF / 2; ++j)
      gm_swiglu2(ep, bias, r, c0 + j * 8 + t4 * 2, acc[j * 4 + h * 2], acc[j * 4 + h * 2 + 1],
                 acc[(j + NF / 2) * 4 + h * 2], acc[(j + NF / 2) * 4 + h * 2 + 1]);
#else
    const long long trow = gm_trow(ep, r);
#pragma unroll
    for (int j = 0; j < NF; ++j)
      gm_store2(ep, bias, r, trow, c0 + j * 8 + t4 * 2, acc[j * 4 + h * 2], acc[j * 4 + h * 2 + 1]);
#endif
  }
}
