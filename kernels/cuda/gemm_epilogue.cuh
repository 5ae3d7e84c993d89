// The fused epilogues of the bf16 linears (docs/contract.md section 3), shared by the mma.sync kernel
// (gemm_bf16.cuh) and the Hopper kernel (gemm_sm90.cuh): both turn the same F32 sums into the same bits here.
// Defined by the emitter: GM_N (all weight rows) GM_EPI (one of GM_EPI_*) GM_OUT_F32 GM_HAS_BIAS GM_NOUT (3 for qkv)
// GM_CHUNK GM_NUM_CHUNKS GM_RPT (gate_residual's table geometry); for GM_EPI_QK_NORM_ROPE (qkv on the Hopper kernels
// only) GM_QK_EPS GM_QK_R (the rotary width, 0: no rope), head_dim being 128; GM_SWIGLU_X (swiglu only, h3-fuse
// training=true: the linear's own output [v | g] stored beside y as the second output y1, [rows, GM_N] bf16).
#ifndef GM_SWIGLU_X
#define GM_SWIGLU_X 0
#endif
#define GM_X_BF16 0       // x is bf16
#define GM_X_F32 1        // x is f32, rounded to bf16
#define GM_X_SILU_F32 2   // x is f32: bf16(silu(x)) (the AdaLN tables)
#define GM_EPI_NONE 0
#define GM_EPI_RESIDUAL 1
#define GM_EPI_GATE_RESIDUAL 2
#define GM_EPI_SWIGLU 3
#define GM_EPI_QK_NORM_ROPE 4
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
  const void *qkw[2];              // qk_norm_rope: the norm weights of q and k [128]
  const float *cosT, *sinT;        // qk_norm_rope with rope: the F32 tables [metaRows, GM_QK_R]
};

// The epilogue's operands from the kernel's parameters (named by H3C_PARAMS; which exist depends on the epilogue):
// `const GmEpilogue ep = GM_EPILOGUE_PARAMS; const void *B = GM_BIAS_PARAM;` inside a GEMM kernel.
#if GM_NOUT == 3
#define GM_Y_PARAMS {y0, y1, y2}
#elif GM_SWIGLU_X
#define GM_Y_PARAMS {y0, y1, nullptr}
#else
#define GM_Y_PARAMS {y0, nullptr, nullptr}
#endif
#if GM_EPI == GM_EPI_GATE_RESIDUAL
#define GM_EPILOGUE_PARAMS {GM_Y_PARAMS, residual, table, (const long long *)ts_index, (const long long *)tags, meta_rows}
#elif GM_EPI == GM_EPI_RESIDUAL
#define GM_EPILOGUE_PARAMS {GM_Y_PARAMS, residual, nullptr, nullptr, nullptr, 0}
#elif GM_EPI == GM_EPI_QK_NORM_ROPE && GM_QK_R > 0
#define GM_EPILOGUE_PARAMS \
  {GM_Y_PARAMS, nullptr, nullptr, nullptr, nullptr, meta_rows, {qk_w0, qk_w1}, (const float *)rope_cos, (const float *)rope_sin}
#elif GM_EPI == GM_EPI_QK_NORM_ROPE
#define GM_EPILOGUE_PARAMS {GM_Y_PARAMS, nullptr, nullptr, nullptr, nullptr, 0, {qk_w0, qk_w1}, nullptr, nullptr}
#else
#define GM_EPILOGUE_PARAMS {GM_Y_PARAMS, nullptr, nullptr, nullptr, nullptr, 0}
#endif
#if GM_HAS_BIAS
#define GM_BIAS_PARAM bias
#else
#define GM_BIAS_PARAM nullptr
#endif

// The Hopper kernels' chain over k-blocks (docs/contract.md sections 4 and 13): x's and W's GM_K columns first (kt
// blocks of 64, the last zero-filled past K), then the unmerged LoRA input's and up slot's GM_LORA_K columns (whole
// blocks). Which tensor maps k-block kb reads and at which column: `GmChainBlock b = gm_chain_block(kb, kt,
// GM_CHAIN_MAPS);` in a TMA producer.
struct GmChainBlock {
  const H3cTensorMap *a, *b;
  int col;
};
__device__ __forceinline__ GmChainBlock gm_chain_block(int kb, int kt, const H3cTensorMap *x, const H3cTensorMap *w,
                                                       const H3cTensorMap *t, const H3cTensorMap *u) {
  const bool lora = t != nullptr && kb >= kt;
  return {lora ? t : x, lora ? u : w, (lora ? kb - kt : kb) * 64};
}
#if GM_LORA_K
#define GM_CHAIN_MAPS &x_map, &w_map, &t_map, &u_map
#else
#define GM_CHAIN_MAPS &x_map, &w_map, nullptr, nullptr
#endif

// The AdaLN table row of output row r (gate_residual; computed once per row, it costs a 64-bit division).
__device__ __forceinline__ long long gm_trow(const GmEpilogue &e, long long r) {
#if GM_EPI == GM_EPI_GATE_RESIDUAL
  return h3c_table_row(e.ts, e.tags, e.metaRows, r, GM_RPT);
#else
  return 0;
#endif
}

// Where the residual and the AdaLN gate of output element (r, c) lie (residual, gate_residual; trow = gm_trow(e, r)).
__device__ __forceinline__ const h3bf *gm_residual_at(const GmEpilogue &e, long long r, long long c) {
  return (const h3bf *)e.residual + r * GM_OUTN + c;
}
__device__ __forceinline__ const h3bf *gm_gate_at(const GmEpilogue &e, long long trow, long long c) {
  return (const h3bf *)e.table + trow * (long long)(GM_NUM_CHUNKS * GM_OUTN) + GM_CHUNK * GM_OUTN + c;
}

#ifdef G9_RES_PREFETCH
#if (GM_EPI != GM_EPI_RESIDUAL && GM_EPI != GM_EPI_GATE_RESIDUAL) || GM_OUTN % 8 != 0
#error "the residual prefetch serves the epilogues residual and gate_residual with 16-byte rows (GM_OUTN % 8 == 0)"
#endif
// The L2 prefetch of output row r's residual at columns c0 .. c0 + cols - 1 below GM_OUTN (c0 a multiple of 8, so
// the bytes are a 16-byte aligned multiple of 16; nothing for r >= M): one bulk prefetch (hopper.cuh). The Hopper
// consumers issue it for their rows G9_RES_PREFETCH k-blocks before the end of a tile's main loop, one row a thread,
// so that the epilogue's residual loads, which every SM issues at about the same time, hit L2 instead of waiting for
// HBM. A prefetch reads nothing into the kernel: the bits are unchanged.
__device__ __forceinline__ void gm_prefetch_residual_row(const GmEpilogue &e, long long r, long long c0, int cols,
                                                         long long M) {
  const long long cEnd = c0 + cols < GM_OUTN ? c0 + cols : GM_OUTN;
  if (r < M && c0 < cEnd) l2_prefetch_bulk(gm_residual_at(e, r, c0), (h3u32)(cEnd - c0) * 2);
}
#endif
// The k-block of a Hopper tile's main loop of kt k-blocks before which its consumers issue that prefetch:
// G9_RES_PREFETCH before the end, at the earliest after the first; without the prefetch, none (kt).
#ifdef G9_RES_PREFETCH
#define G9_PREFETCH_AT(kt) ((kt) > G9_RES_PREFETCH + 1 ? (kt) - G9_RES_PREFETCH : 1)
#else
#define G9_PREFETCH_AT(kt) (kt)
#endif

// The residual step of the contract (section 3) on the rounded sum y, before its final bf16 rounding: residual + y,
// or gate * y + residual; y itself for the other epilogues. The one place this arithmetic is written: gm_final,
// gm_final2 and the staged epilogue (gemm_epilogue_smem.cuh) all call it.
__device__ __forceinline__ float gm_mix(float y, float residual, float gate) {
#if GM_EPI == GM_EPI_RESIDUAL
  return __fadd_rn(residual, y);
#elif GM_EPI == GM_EPI_GATE_RESIDUAL
  return __fmaf_rn(gate, y, residual);
#else
  return y;
#endif
}

// The final value of output element (r, c) before its store: v is the F32 sum plus bias; trow = gm_trow(e, r).
__device__ __forceinline__ float gm_final(const GmEpilogue &e, long long r, long long trow, long long c, float v) {
#if GM_OUT_F32 && GM_EPI == GM_EPI_NONE
  float y = v;
#else
  float y = rbf(v);
#endif
#if GM_EPI == GM_EPI_RESIDUAL || GM_EPI == GM_EPI_GATE_RESIDUAL
#if GM_EPI == GM_EPI_GATE_RESIDUAL
  const float gate = bf2f(*gm_gate_at(e, trow, c));
#else
  const float gate = 0.0f;
#endif
  y = rbf(gm_mix(y, bf2f(*gm_residual_at(e, r, c)), gate));
#endif
  return y;
}

// gm_final of the output columns c and c + 1 of one output tensor (c even, GM_OUTN even, c + 1 < GM_OUTN): the same
// operations on each element, with the residual and the gate of the pair read by one 4-byte load each.
__device__ __forceinline__ void gm_final2(const GmEpilogue &e, long long r, long long trow, long long c, float v0,
                                          float v1, float &y0, float &y1) {
#if GM_OUT_F32 && GM_EPI == GM_EPI_NONE
  y0 = v0;
  y1 = v1;
#else
  y0 = rbf(v0);
  y1 = rbf(v1);
#endif
#if GM_EPI == GM_EPI_RESIDUAL || GM_EPI == GM_EPI_GATE_RESIDUAL
  const h3u32 res = *(const h3u32 *)gm_residual_at(e, r, c);
#if GM_EPI == GM_EPI_GATE_RESIDUAL
  const h3u32 gate = *(const h3u32 *)gm_gate_at(e, trow, c);
#else
  const h3u32 gate = 0;
#endif
  y0 = rbf(gm_mix(y0, bf2_lo(res), bf2_lo(gate)));
  y1 = rbf(gm_mix(y1, bf2_hi(res), bf2_hi(gate)));
#endif
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
  int o;
  long long at = gm_at(e, r, c, o);
  if (GM_OUTN % 2 == 0 && c + 1 < GM_N) {
    float y0, y1;
    gm_final2(e, r, trow, at - r * GM_OUTN, gm_bias(bias, s0, c), gm_bias(bias, s1, c + 1), y0, y1);
#if GM_OUT_F32
    *(float2 *)((float *)gm_out(e, o) + at) = make_float2(y0, y1);
#else
    *(h3u32 *)((h3bf *)gm_out(e, o) + at) = pack_bf2(y0, y1);
#endif
    return;
  }
  const float y0 = gm_final(e, r, trow, c, gm_bias(bias, s0, c));
#if GM_OUT_F32
  ((float *)gm_out(e, o))[at] = y0;
#else
  ((h3bf *)gm_out(e, o))[at] = f2bf(y0);
#endif
  if (c + 1 < GM_N) gm_store(e, r, c + 1, gm_bias(bias, s1, c + 1));
}

// swiglu of one output column c: value and gate sums (weight rows c and GM_OUTN + c), each with its bias and rounded,
// then bf16(value * bf16(silu(gate))).
// gm_swiglu_mix is value * bf16(silu(gate)) on the rounded value and gate, before the final rounding (also the staged
// epilogue's); gm_swiglu_f is the output as an F32 (already bf16), for a paired store.
__device__ __forceinline__ float gm_swiglu_mix(float value, float gate) {
  return __fmul_rn(value, rbf(h3c::detmath::silu(gate)));
}
__device__ __forceinline__ float gm_swiglu_f(const void *bias, float vsum, float gsum, long long c) {
  float v = rbf(gm_bias(bias, vsum, c));
  float gt = rbf(gm_bias(bias, gsum, GM_OUTN + c));
  return rbf(gm_swiglu_mix(v, gt));
}
__device__ __forceinline__ h3bf gm_swiglu(const void *bias, float vsum, float gsum, long long c) {
  return f2bf(gm_swiglu_f(bias, vsum, gsum, c));
}

#if GM_EPI == GM_EPI_SWIGLU
#if GM_SWIGLU_X
// The linear's own output (GM_SWIGLU_X: the swiglu's x that the backward reads) at columns c, c + 1 (values, weight
// rows c) and GM_OUTN + c, + 1 (gates) of row r: bf(sum + bias), what the unfused linear stores there (gm_store2 with
// the epilogue none: f2bf of rbf(v) is f2bf(v), f2bf being idempotent on its results). One 4-byte store per pair
// where both columns exist, else one per column.
__device__ __forceinline__ void gm_swiglu_x2(const GmEpilogue &e, const void *bias, long long r, long long c, float v0,
                                             float v1, float g0, float g1) {
  h3bf *x = (h3bf *)e.y[1] + r * GM_N;
  if (GM_OUTN % 2 == 0 && c + 1 < GM_OUTN) {
    *(h3u32 *)(x + c) = pack_bf2(gm_bias(bias, v0, c), gm_bias(bias, v1, c + 1));
    *(h3u32 *)(x + GM_OUTN + c) = pack_bf2(gm_bias(bias, g0, GM_OUTN + c), gm_bias(bias, g1, GM_OUTN + c + 1));
  } else {
    if (c < GM_OUTN) {
      x[c] = f2bf(gm_bias(bias, v0, c));
      x[GM_OUTN + c] = f2bf(gm_bias(bias, g0, GM_OUTN + c));
    }
    if (c + 1 < GM_OUTN) {
      x[c + 1] = f2bf(gm_bias(bias, v1, c + 1));
      x[GM_OUTN + c + 1] = f2bf(gm_bias(bias, g1, GM_OUTN + c + 1));
    }
  }
}
#endif
// Output columns c and c + 1 of row r from their value sums (v0, v1) and gate sums (g0, g1): one 4-byte store where
// both columns exist and the row's pair is aligned, else one store per column (and with GM_SWIGLU_X the pairs of x).
__device__ __forceinline__ void gm_swiglu2(const GmEpilogue &e, const void *bias, long long r, long long c, float v0,
                                           float v1, float g0, float g1) {
  h3bf *y = (h3bf *)e.y[0] + r * GM_OUTN + c;
  if (GM_OUTN % 2 == 0 && c + 1 < GM_OUTN) {
    *(h3u32 *)y = pack_bf2(gm_swiglu_f(bias, v0, g0, c), gm_swiglu_f(bias, v1, g1, c + 1));
  } else {
    if (c < GM_OUTN) y[0] = gm_swiglu(bias, v0, g0, c);
    if (c + 1 < GM_OUTN) y[1] = gm_swiglu(bias, v1, g1, c + 1);
  }
#if GM_SWIGLU_X
  gm_swiglu_x2(e, bias, r, c, v0, v1, g0, g1);
#endif
}
#endif

#if GM_EPI == GM_EPI_QK_NORM_ROPE
#if GM_NOUT != 3 || GM_HAS_BIAS || GM_OUT_F32 || GM_OUTN % 128 || GM_QK_R % 16 || GM_QK_R > 128
#error "the qk_norm_rope epilogue needs bf16 q/k/v without bias, head_dim 128 and a rotary width % 16 == 0"
#endif
// The qk_norm_rope epilogue (docs/contract.md section 3: exactly qk_norm_rope's operations on the GEMM's bf16 q and
// k, qk_norm_rope in headops.cuh) on one row's 128-channel head in the wgmma accumulator layout, in place in x, then
// handed to gm_qk_block's put (rows past M are normed only: neither rotated nor stored). The head's columns
// are fragments j = 0..15 of the head; thread t4 of the row's quad holds channels c = 8j + 2 t4 + e (e = 0, 1) in
// x[2j + e]. The contract's lane l (lane_tree, 32 lanes) sums channels l, l + 32, l + 64, l + 96, which all have
// c % 8 = l % 8, so all four lie in one thread: t4 = (l % 8) / 2, e = l % 2, fragments j = l / 8 + 4m. Each thread
// runs the fma chains of its eight lanes l = 2 t4 + e + 8q (q = 0..3) in the contract's order, the tree steps off = 16
// and 8 (l + off: the same thread, q + 2 and q + 1), off = 4 and 2 by shuffles with the quad's threads t4 ^ 2 and
// t4 ^ 1 (lanes l + 4 and l + 2: same e), off = 1 in the thread (e = 1 into e = 0). The threads that the tree would
// leave out compute the same sums with the operands swapped (IEEE addition commutes), so the whole quad ends with
// lane 0's bits. A rotation partner c +- R/2 is fragment j +- R/16 of the same thread (R % 16 == 0). Every thread of
// the warp runs the shuffles (rows past M included: their zero rows are computed, never stored).
// qk_norm_rope's per-head arithmetic in gm_qk_head (headops.cuh's, contract section 3): the scale from a head's sum of
// squares, one channel normed and weighted, and one rotated channel, bf(mine * bf(cos) + other * bf(sin)) with other =
// -partner for the first half's channels and +partner for the second's.
__device__ __forceinline__ float gm_qk_inv(float ss) {
  return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, 128.0f), GM_QK_EPS)));
}
__device__ __forceinline__ float gm_qk_normed(float x, float inv, float w) {
  return rbf(__fmul_rn(rbf(__fmul_rn(x, inv)), w));
}
__device__ __forceinline__ float gm_qk_rotated(float mine, float other, float cosv, float sinv) {
  return rbf(__fadd_rn(__fmul_rn(mine, rbf(cosv)), __fmul_rn(other, rbf(sinv))));
}
template <class Put>
__device__ __forceinline__ void gm_qk_head(const GmEpilogue &e, int o, float *x, long long r, long long M, int t4,
                                           int row, int b, const Put &put) {
  float p[4][2];
#pragma unroll
  for (int q = 0; q < 4; ++q)
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      float a = 0.0f;
#pragma unroll
      for (int m = 0; m < 4; ++m) a = __fmaf_rn(x[2 * (q + 4 * m) + s], x[2 * (q + 4 * m) + s], a);
      p[q][s] = a;
    }
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    p[0][s] = __fadd_rn(p[0][s], p[2][s]);  // off = 16
    p[1][s] = __fadd_rn(p[1][s], p[3][s]);
    p[0][s] = __fadd_rn(p[0][s], p[1][s]);  // off = 8
    p[0][s] = __fadd_rn(p[0][s], __shfl_xor_sync(0xffffffffu, p[0][s], 2));  // off = 4
    p[0][s] = __fadd_rn(p[0][s], __shfl_xor_sync(0xffffffffu, p[0][s], 1));  // off = 2
  }
  const float ss = __fadd_rn(p[0][0], p[0][1]);  // off = 1
  const float inv = gm_qk_inv(ss);
  const h3bf *w = (const h3bf *)(o == 0 ? e.qkw[0] : e.qkw[1]);  // a select, as gm_out
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int s = 0; s < 2; ++s) x[2 * j + s] = gm_qk_normed(x[2 * j + s], inv, bf2f(w[8 * j + 2 * t4 + s]));
  if (r >= M) return;
#if GM_QK_R > 0
  // Rotate-half in place, one partner pair (fragments j and j + R/16) at a time: both from the normed values.
  const long long mrow = r % e.metaRows;
  const float *cs = e.cosT + mrow * GM_QK_R + 2 * t4, *sn = e.sinT + mrow * GM_QK_R + 2 * t4;
#pragma unroll
  for (int j = 0; j < GM_QK_R / 16; ++j) {
    const int k = j + GM_QK_R / 16;
    const float2 c1 = *(const float2 *)(cs + 8 * j), s1 = *(const float2 *)(sn + 8 * j);
    const float2 c2 = *(const float2 *)(cs + 8 * k), s2 = *(const float2 *)(sn + 8 * k);
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const float a = x[2 * j + s], b = x[2 * k + s];
      x[2 * j + s] = gm_qk_rotated(a, -b, s ? c1.y : c1.x, s ? s1.y : s1.x);
      x[2 * k + s] = gm_qk_rotated(b, a, s ? c2.y : c2.x, s ? s2.y : s2.x);
    }
  }
#endif
  put(o, r, row, b, x);
}

// The qkv tile's 64-row block (NF 8-column fragments from output column c0, a multiple of 128): q and k heads through
// gm_qk_head, v heads as the plain qkv rounds them (bf16 of the sum). A head lies in one of q, k, v (GM_OUTN % 128 ==
// 0), so the branch is uniform over the warpgroup. Each row's finished head of 16 bf16 pairs (row < M only) goes to
// put(o, r, row, b, x): output o, row r, the block's row `row`, the tile's head b (columns 128 b from c0), the pair of
// fragment j in x[2 j], x[2 j + 1], channels 8 j + 2 t4 and 8 j + 2 t4 + 1. gm_store_block's put stores it to the
// output; the staged epilogue's (gemm_epilogue_smem.cuh) writes it into its staging area.
template <int NF, class Put>
__device__ __forceinline__ void gm_qk_block(const GmEpilogue &ep, const float *acc, long long r0, long long c0,
                                            long long M, int warp, int g, int t4, const Put &put) {
#pragma unroll
  for (int b = 0; b < NF / 16; ++b) {
    const long long c = c0 + 128 * b;
    if (c >= GM_N) continue;
    const int o = (int)(c / GM_OUTN);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = warp * 16 + g + h * 8;
      const long long r = r0 + row;
      float x[32];
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        x[2 * j] = rbf(acc[(16 * b + j) * 4 + h * 2]);
        x[2 * j + 1] = rbf(acc[(16 * b + j) * 4 + h * 2 + 1]);
      }
      if (o < 2) {
        gm_qk_head(ep, o, x, r, M, t4, row, b, put);
      } else if (r < M) {
        put(2, r, row, b, x);
      }
    }
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
#if GM_EPI == GM_EPI_QK_NORM_ROPE
  gm_qk_block<NF>(ep, acc, r0, c0, M, warp, g, t4, [&](int o, long long r, int, int b, const float *x) {
    h3bf *out = (h3bf *)gm_out(ep, o) + r * GM_OUTN + (c0 + 128 * b - (long long)o * GM_OUTN);
#pragma unroll
    for (int j = 0; j < 16; ++j) *(h3u32 *)(out + 8 * j + 2 * t4) = pack_bf2(x[2 * j], x[2 * j + 1]);
  });
#else
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
#endif
}
