// The tensor-core forms of a bf16 linear's gradients (docs/contract.md section 14), mma.sync m16n8k16 (bf16 x bf16
// -> F32) on sm_90a and sm_100a:
//   dX [rows][K] = bf(g) W: one F32 accumulator per element from 0, each mma adding the next 16-wide chunk of N,
//     ascending (the k-tile loop walks N in order; a tile's chunks in order): section 14's k_chunks over N;
//   dW [N][K] = row_units over rows of bf(g[r][n]) * x[r][k]: per batch item, per unit of 128 canonical rows, a
//     partial from 0 chained over the unit's 16-row chunks in ascending order (zero-filled past the unit's end), the
//     item's sum the left fold of its partials (the first as it is), the batch's the left fold of the items' sums in
//     batch order (kept in dw itself: each thread adds to the elements it wrote, no other thread touches them).
// A chunk's 16 products are summed by the tensor core, as in the forward (section 4): these are the GPU's bits of the
// contract; the one-thread form of grad.cuh computes the CPU's model of them, so the two agree within a bound.
// Nothing depends on the row count, the batch or the launch: every element's sequence of operations is fixed.
//
// Two phases. Phase 0 (GL_ENTRY, grad_linear_round.cuh): bf(g) into the scratch `gb` ([rows][N] bf16, so phase 1
// streams it with cp.async), and for dW with a bias the bias gradient (GL_G_BF16: g is a grad_round's bf16 bf(g),
// h3-fuse-grad; no phase 0, phase 1 reads g). Phase 1 (GL_ENTRY_P1): the GEMM,
// in tiles of GL_BM x GL_BN (128 x 128 of 8 warps, 64 x 32 each, k-tiles of 32 in a 3-stage cp.async ring; a
// skinny dX, 64 output columns or fewer (LoRA's dt = bf(g) up), 32 x 64 of 4 warps with k-tiles of 128 in 4 stages, so
// that its long chain over N runs on M / 32 CTAs with a deep ring). The operands come as
// stored: dX's A is bf(g) row-major (ldmatrix), its B is W [N][K] with the reduction along rows (ldmatrix.trans); dW's
// A is bf(g)^T and its B is x, both with the reduction along rows (ldmatrix.trans).
//
// GL_LORA_K > 0 (dX, h3-fuse-grad: a LoRA down path's dX taken in): after its own chain the block computes the path's,
// bf(dt) [rows][GL_LORA_K] times the down slot [GL_LORA_K][K] from 0 over the same k-tiles of 32 (the path's own op's
// chunks), and stores (residual + path) + dX: the two ops' additions in their order. GR_DX_SWIGLU (dX, h3-fuse-grad:
// the swiglu_grad whose dy this dX was taken in) stores that op's dx instead, [rows][2K] (gr_dx_store2); GR_DX_BF
// stores dx as bf16 (h3-fuse-grad: the rounding of the grad_round or swiglu_grad after it folded in).
//
// Defined by the emitter: GL_ENTRY GL_ENTRY_P1 H3C_PARAMS GL_DW (0: dX, 1: dW) GR_N GR_K GR_BIAS (dW: the bias's
// gradient too) GL_LORA_K (dX: 0 or the path's width). N and K are multiples of 8 (16-byte rows for cp.async).
// Parameters: g (F32 [rows][N]); dX: w (bf16 [N][K]), down (GL_LORA_K: the down slot), residual (GR_RESIDUAL: F32
// [rows][K], added to dX's value as grad_add adds it), lora_t (GL_LORA_K), swiglu_x (GR_DX_SWIGLU: bf16 [rows][2K]),
// dx, rows; dW: x (bf16 [rows][K]), dw and /
// or dbias, items,
// item_rows; gb (scratch). The weight's gradient is always an output here (a bias-only gradient keeps grad.cuh).
// The tile (emitter: GL_BM x GL_BN outputs, k-tiles of GL_BK, GL_STAGES stages, GL_WM x GL_WN warps); none changes a
// bit: every element's chain is the same sequence of chunks whatever the tile.
#define GL_THREADS (GL_WM * GL_WN * 32)
#define GL_WTM (GL_BM / GL_WM)  // a warp's rows of the output tile
#define GL_WTN (GL_BN / GL_WN)  // and columns
#define GL_MF (GL_WTM / 16)
#define GL_NF (GL_WTN / 8)
#if GL_DW
#define GL_LDA (GL_BM + 8)  // A stored [k][m]: k-tile rows of the tile's GL_BM output rows
#define GL_ASZ (GL_BK * GL_LDA)
#else
#define GL_LDA (GL_BK + 8)  // A stored [m][k]
#define GL_ASZ (GL_BM * GL_LDA)
#endif
#define GL_LDB (GL_BN + 8)  // B stored [k][n]
#define GL_BSZ (GL_BK * GL_LDB)

typedef float gl_acc_t[GL_MF][GL_NF][4];

__device__ __forceinline__ void gl_zero(gl_acc_t &d) {
#pragma unroll
  for (int i = 0; i < GL_MF; ++i)
#pragma unroll
    for (int j = 0; j < GL_NF; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) d[i][j][e] = 0.0f;
}

// rows x 128 columns of a bf16 row-major matrix [.., ld] from (row0, col0) into dst [rows][GL_LDB-like ld_s]; rows
// at or past rowEnd and columns at or past cols read as zeros (cols a multiple of 8).
template <int ROWS, int COLS, int LDS>
__device__ __forceinline__ void gl_load(h3bf *dst, const h3bf *src, long long row0, long long rowEnd, long long col0,
                                        long long cols, long long ld) {
  for (int i = threadIdx.x; i < ROWS * (COLS / 8); i += GL_THREADS) {
    const int r = i / (COLS / 8), c = (i % (COLS / 8)) * 8;
    const bool ok = row0 + r < rowEnd && col0 + c < cols;
    cp_async16(dst + r * LDS + c, ok ? (const void *)(src + (row0 + r) * ld + col0 + c) : (const void *)src, ok ? 16 : 0);
  }
}

// One k-tile (GL_BK / 16 chunks, ascending) into acc.
__device__ __forceinline__ void gl_compute(const h3bf *As, const h3bf *Bs, gl_acc_t &acc, int wm, int wn, int lane) {
#pragma unroll
  for (int kk = 0; kk < GL_BK / 16; ++kk) {
    h3u32 a[GL_MF][4];
#pragma unroll
    for (int i = 0; i < GL_MF; ++i) {
#if GL_DW
      ldsm_x4_t(a[i][0], a[i][1], a[i][2], a[i][3],
                As + (kk * 16 + (lane & 7) + ((lane >> 4) & 1) * 8) * GL_LDA + wm * GL_WTM + i * 16 + ((lane >> 3) & 1) * 8);
#else
      ldsm_x4(a[i][0], a[i][1], a[i][2], a[i][3],
              As + (wm * GL_WTM + i * 16 + (lane & 15)) * GL_LDA + kk * 16 + (lane >> 4) * 8);
#endif
    }
#pragma unroll
    for (int j = 0; j < GL_NF; j += 2) {
      h3u32 b0, b1, b2, b3;
      ldsm_x4_t(b0, b1, b2, b3,
                Bs + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * GL_LDB + wn * GL_WTN + j * 8 + (lane >> 4) * 8);
#pragma unroll
      for (int i = 0; i < GL_MF; ++i) {
        mma16816(acc[i][j], a[i], b0, b1);
        mma16816(acc[i][j + 1], a[i], b2, b3);
      }
    }
  }
}

// Phase 1: the GEMM. dX: block (x, y) computes rows [GL_BM x, +GL_BM) and columns [GL_BN y, +GL_BN) of dx; dW: the
// same of dw (its rows the weight's rows n).
extern "C" __global__ void __launch_bounds__(GL_THREADS) GL_ENTRY_P1(H3C_PARAMS) {
  static_assert(GL_WTM % 16 == 0 && GL_WTN % 16 == 0 && (GL_BM * GL_BK / 8) % GL_THREADS == 0, "tile");
  h3c_grid_dependency_wait();
  extern __shared__ __align__(16) unsigned char gl_smem[];
  h3bf *As = (h3bf *)gl_smem;
  h3bf *Bs = As + GL_STAGES * GL_ASZ;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wm = warp / (GL_BN / GL_WTN), wn = warp % (GL_BN / GL_WTN);
  const long long m0 = (long long)blockIdx.x * GL_BM, n0 = (long long)blockIdx.y * GL_BN;
#if GL_G_BF16
  const h3bf *G = (const h3bf *)g;  // a grad_round's bf(g): no phase 0
#else
  const h3bf *G = (const h3bf *)gb;
#endif
  gl_acc_t acc;
  gl_zero(acc);
#if GL_DW
  // The k-tiles of the walk: per item, its units of 128 rows, each 4 k-tiles of 32 (the last unit fewer).
  const long long lastUnitRows = item_rows - (item_rows - 1) / GR_UNIT * GR_UNIT;
  const long long tilesPerItem = (item_rows - 1) / GR_UNIT * (GR_UNIT / GL_BK) + (lastUnitRows + GL_BK - 1) / GL_BK;
  const long long KT = item_rows > 0 ? items * tilesPerItem : 0;
  const h3bf *X = (const h3bf *)x;
  // Tile t's first row and the end of its unit.
#define GL_TILE_ROWS(t, r0, u1)                                                                    \
  const long long gl_b = (t) / tilesPerItem, gl_tt = (t) % tilesPerItem;                           \
  const long long gl_u = gl_tt / (GR_UNIT / GL_BK);                                                \
  const long long r0 = gl_b * item_rows + gl_u * GR_UNIT + (gl_tt % (GR_UNIT / GL_BK)) * GL_BK;     \
  const long long u1 = gl_b * item_rows + ((gl_u + 1) * GR_UNIT < item_rows ? (gl_u + 1) * GR_UNIT : item_rows)
#define GL_LOAD(s, t)                                                                  \
  do {                                                                                 \
    GL_TILE_ROWS(t, r0, u1);                                                           \
    gl_load<GL_BK, GL_BM, GL_LDA>(As + (s) * GL_ASZ, G, r0, u1, m0, GR_N, GR_N);       \
    gl_load<GL_BK, GL_BN, GL_LDB>(Bs + (s) * GL_BSZ, X, r0, u1, n0, GR_K, GR_K);       \
  } while (0)
  gl_acc_t run;  // the item's fold of its unit partials
  gl_zero(run);
#else
  const long long KT = (GR_N + GL_BK - 1) / GL_BK;
  const h3bf *W = (const h3bf *)w;
#define GL_LOAD(s, t)                                                                                    \
  do {                                                                                                   \
    gl_load<GL_BM, GL_BK, GL_LDA>(As + (s) * GL_ASZ, G + (long long)(t) * GL_BK, m0, rows, 0,            \
                                  GR_N - (long long)(t) * GL_BK, GR_N);                                  \
    gl_load<GL_BK, GL_BN, GL_LDB>(Bs + (s) * GL_BSZ, W, (long long)(t) * GL_BK, GR_N, n0, GR_K, GR_K);   \
  } while (0)
#endif

#pragma unroll
  for (int s = 0; s < GL_STAGES - 1; ++s) {
    if (s < KT) GL_LOAD(s, s);
    cp_async_commit();
  }
  for (long long kt = 0; kt < KT; ++kt) {
    cp_async_wait<GL_STAGES - 2>();
    __syncthreads();
    const long long nk = kt + GL_STAGES - 1;
    if (nk < KT) GL_LOAD(nk % GL_STAGES, nk);
    cp_async_commit();
    const int s = int(kt % GL_STAGES);
    gl_compute(As + s * GL_ASZ, Bs + s * GL_BSZ, acc, wm, wn, lane);
#if GL_DW
    GL_TILE_ROWS(kt, r0, u1);
    if (r0 + GL_BK >= u1) {  // the unit's last k-tile: fold its partial into the item's sum
      const bool firstUnit = gl_u == 0, lastOfItem = u1 == (gl_b + 1) * item_rows;
#pragma unroll
      for (int i = 0; i < GL_MF; ++i)
#pragma unroll
        for (int j = 0; j < GL_NF; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            run[i][j][e] = firstUnit ? acc[i][j][e] : __fadd_rn(run[i][j][e], acc[i][j][e]);
            acc[i][j][e] = 0.0f;
          }
      if (lastOfItem) {  // the batch's fold: item 0's sum as it is, then + each next item's
        const int gq = lane >> 2, t4 = lane & 3;
#pragma unroll
        for (int i = 0; i < GL_MF; ++i)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const long long r = m0 + wm * GL_WTM + i * 16 + gq + h * 8;
            if (r >= GR_N) continue;
#pragma unroll
            for (int j = 0; j < GL_NF; ++j) {
              const long long c = n0 + wn * GL_WTN + j * 8 + t4 * 2;
              if (c >= GR_K) continue;  // GR_K is a multiple of 8: c + 1 is inside too
              float2 *p = (float2 *)((float *)dw + r * GR_K + c);
              float2 v = make_float2(run[i][j][h * 2], run[i][j][h * 2 + 1]);
              if (gl_b > 0) {
                const float2 o = *p;
                v.x = __fadd_rn(o.x, v.x);
                v.y = __fadd_rn(o.y, v.y);
              }
              *p = v;
            }
          }
      }
    }
#endif
  }
  cp_async_wait<0>();
#undef GL_LOAD
#if GL_DW
#undef GL_TILE_ROWS
  if (KT == 0) {  // no rows: the sum of nothing
    for (long long i = threadIdx.x; i < (long long)GL_BM * GL_BN; i += GL_THREADS) {
      const long long r = m0 + i / GL_BN, c = n0 + i % GL_BN;
      if (r < GR_N && c < GR_K) ((float *)dw)[r * GR_K + c] = 0.0f;
    }
  }
#else
#if GL_LORA_K
  // The LoRA down path's chain (the ring is idle: every cp.async group has landed): its k-tiles of 32, one at a time.
  gl_acc_t path;
  gl_zero(path);
  const h3bf *T = (const h3bf *)lora_t, *D = (const h3bf *)down;
  for (int kt = 0; kt < (GL_LORA_K + GL_BK - 1) / GL_BK; ++kt) {
    __syncthreads();  // every warp is done with the stage the tile is loaded into
    gl_load<GL_BM, GL_BK, GL_LDA>(As, T + (long long)kt * GL_BK, m0, rows, 0, GL_LORA_K - (long long)kt * GL_BK,
                                  GL_LORA_K);
    gl_load<GL_BK, GL_BN, GL_LDB>(Bs, D, (long long)kt * GL_BK, GL_LORA_K, n0, GR_K, GR_K);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    gl_compute(As, Bs, path, wm, wn, lane);
  }
#endif
  const int gq = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int i = 0; i < GL_MF; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const long long r = m0 + wm * GL_WTM + i * 16 + gq + h * 8;
      if (r >= rows) continue;
#pragma unroll
      for (int j = 0; j < GL_NF; ++j) {
        const long long c = n0 + wn * GL_WTN + j * 8 + t4 * 2;
        if (c < GR_K) {
          float2 v = make_float2(acc[i][j][h * 2], acc[i][j][h * 2 + 1]);
#if GL_LORA_K  // the part dX is added to: the path's dX, after the residual the path's op added
          float2 part = make_float2(path[i][j][h * 2], path[i][j][h * 2 + 1]);
#if GR_RESIDUAL
          const float2 o = *(const float2 *)((const float *)residual + r * GR_K + c);
          part = make_float2(__fadd_rn(o.x, part.x), __fadd_rn(o.y, part.y));
#endif
          v = make_float2(__fadd_rn(part.x, v.x), __fadd_rn(part.y, v.y));
#elif GR_RESIDUAL  // h3-fuse-grad: residual + dX, grad_add's sum
          const float2 o = *(const float2 *)((const float *)residual + r * GR_K + c);
          v = make_float2(__fadd_rn(o.x, v.x), __fadd_rn(o.y, v.y));
#endif
#if GR_DX_SWIGLU  // the swiglu_grad of this dX taken in (h3-fuse-grad): its dx of the pair
          gr_dx_store2<1, GR_DX_BF>(dx, swiglu_x, r, c, GR_K, v);
#else
          gr_dx_store2<0, GR_DX_BF>(dx, nullptr, r, c, GR_K, v);
#endif
        }
      }
    }
#endif
}
