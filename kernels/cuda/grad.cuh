// The backward's gradient ops on the GPU (docs/contract.md section 14), bitwise equal to the CPU reference
// (runtime/grad_ops.h) by computing each gradient element with the same F32 operations in the same order:
//   - a 16-wide chunk of a k_chunks / row_units sum is the CPU's model of the tensor core, written out: the products
//     (exact in double) added into four double lanes (term j into lane j % 4, j ascending), the value
//     (s0 + s1) + (s2 + s3) rounded once to F32 and added to the F32 chain (gr_chunk_*);
//   - a row reduction walks its batch item's canonical rows in units of 128, a unit's partial from +0, the item's sum
//     the left fold of its partials (the first as it is), the batch's the left fold of its items' (gr_fold);
//   - every other operation is one IEEE F32 operation (__f*_rn: nothing contracts).
// Only attention's ex2 and lg2 (the hardware's approximations, as in the forward) differ from the CPU's exp2 / log2.
// The linear and attention gradients here run one thread per gradient element, the CPU's model of the tensor core
// (`--tune grad_mma=0`); the plans' default runs them on the tensor cores (grad_linear_mma.cuh,
// grad_attention_mma.cuh), within a bound of these. The other kinds are these kernels in every plan.
//
// Defined by the emitter: GR_ENTRY (GR_ENTRY_P1, GR_ENTRY_P2: the later phases of attention, norm_modulate and
// gate_residual) H3C_PARAMS GR_KIND and the kind's shape constants (below). Every loop over elements is grid-strided,
// so any grid computes the same values.
#define GR_ADD 1
#define GR_LINEAR_X 2
#define GR_LINEAR_W 3
#define GR_SWIGLU 4
#define GR_SILU 5
#define GR_ROPE 6
#define GR_RMS_NORM 7
#define GR_NORM_MODULATE 8
#define GR_GATE_RESIDUAL 9
#define GR_ATTENTION 10
#define GR_PACK 11
#define GR_UNPACK 12
#define GR_ADALN_TABLE 13

// norm_modulate / gate_residual: GR_TABLE_GRAD 0 when nothing reads the AdaLN table's gradient (no dtable, and for
// gate_residual no y); GR_SUMS 0 when no sum over the rows remains (neither the table's nor the norm weight's): then
// phases 1 and 2 do not exist and phase 0 keeps no inverse RMS for them.
#ifndef GR_TABLE_GRAD
#define GR_TABLE_GRAD 1
#endif
#ifndef GR_SUMS
#define GR_SUMS 1
#endif

// An operand element as F32: a bf16 value widened exactly, or an F32 value.
__device__ __forceinline__ float gr_ld(const void *p, long long i, int bf) {
  return bf ? bf2f(((const h3bf *)p)[i]) : ((const float *)p)[i];
}

// A gradient output element: F32, or (bf = 1, h3-fuse-grad's fused rounding) bf(v), round to nearest even.
__device__ __forceinline__ void gr_st(void *p, long long i, float v, int bf) {
  if (bf) ((h3bf *)p)[i] = f2bf(v);
  else ((float *)p)[i] = v;
}

// The memory-bound kinds (grad_add, swiglu, rope, norm_modulate's dx, gate_residual's dy) move 16-byte vectors of
// GR_VEC consecutive elements where the emitter finds the columns a multiple of GR_VEC (GR_VEC 1: the scalar loops),
// and walk rows where an element needs its row's metadata (a table row, a rope row): measured on an H100 at S = 8,349,
// H = 5,376 (2026-12-06), their per-element 64-bit divisions and modulos (gate_residual's `r % meta_rows` and two
// metadata loads per element, rope's `m % item_rows`) and scalar 2- and 4-byte accesses held them at 1/3 of HBM
// bandwidth (norm_modulate 0.56 ms, gate_residual 0.54, swiglu 0.77, rope 0.32 an op). Each element's value is the
// same F32 operations as the scalar form's; only which thread computes it and the loads' widths differ. Buffers are
// 256-byte aligned (the arena, the scratch) and rows are whole vectors, so every vector is 16-byte aligned.
// 8 consecutive operand elements from element i (a multiple of 8) as F32: bf16 one 16-byte load (widened exactly),
// F32 two.
template <int BF>
__device__ __forceinline__ void gr_ld8(const void *p, long long i, float *v) {
  if (BF) {
    const uint4 q = *(const uint4 *)((const h3bf *)p + i);
    const h3u32 w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      v[2 * k] = bf2_lo(w[k]);
      v[2 * k + 1] = bf2_hi(w[k]);
    }
  } else {
    const float4 a = *(const float4 *)((const float *)p + i), b = *(const float4 *)((const float *)p + i + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  }
}
// 8 gradient elements from element i (a multiple of 8): F32 two 16-byte stores, or bf16 (gr_st's f2bf of each:
// pack_bf2 gives f2bf's bits for every value, NaN payloads included) one.
template <int BF>
__device__ __forceinline__ void gr_st8(void *p, long long i, const float *v) {
  if (BF) {
    uint4 q;
    q.x = pack_bf2(v[0], v[1]);
    q.y = pack_bf2(v[2], v[3]);
    q.z = pack_bf2(v[4], v[5]);
    q.w = pack_bf2(v[6], v[7]);
    ((uint4 *)p)[i >> 3] = q;  // (indexed as uint4: `*(uint4 *)((h3bf *)p + i)` compiled to 4 scalar stores)
  } else {
    ((float4 *)p)[i >> 2] = make_float4(v[0], v[1], v[2], v[3]);
    ((float4 *)p)[(i >> 2) + 1] = make_float4(v[4], v[5], v[6], v[7]);
  }
}

// One 16-wide chunk in the tensor core's model: gr_chunk_add(s, j, a, b) for j ascending, then gr_chunk_value.
__device__ __forceinline__ void gr_chunk_zero(double *s) { s[0] = s[1] = s[2] = s[3] = 0.0; }
__device__ __forceinline__ void gr_chunk_add(double *s, int j, float a, float b) {
  s[j & 3] = __dadd_rn(s[j & 3], __dmul_rn((double)a, (double)b));
}
__device__ __forceinline__ float gr_chunk_value(const double *s) {
  return __double2float_rn(__dadd_rn(__dadd_rn(s[0], s[1]), __dadd_rn(s[2], s[3])));
}

// The forward's inverse RMS of n values (cpu::invRms, ordered): the lane tree of x^2, then 1 / sqrt(ss / n + eps).
// Called by all 32 lanes of a warp; every lane gets the value.
// 1 / sqrt(ss / n + eps) of the lane tree's sum of squares ss.
__device__ __forceinline__ float gr_inv_of_sum(float ss, int n, float eps) {
  return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)n), eps)));
}
template <int BF>
__device__ __forceinline__ float gr_inv_rms(const void *x, long long base, int n, float eps) {
  const int lane = threadIdx.x & 31;
  float p = 0.f;
#pragma unroll 4
  for (int j = lane; j < n; j += 32) {  // (unrolled: 4 loads in flight ahead of the chain)
    const float v = gr_ld(x, base + j, BF);
    p = __fmaf_rn(v, v, p);
  }
  return gr_inv_of_sum(h3c_lane_tree(p), n, eps);
}

// The norm weight's element j (1 where the node has no weight, never read then).
#if GR_HAS_W
#define GR_WV(j) gr_ld(w, j, GR_W_BF)
#else
#define GR_WV(j) 1.0f
#endif

#define GR_TID ((long long)blockIdx.x * blockDim.x + threadIdx.x)
#define GR_STRIDE ((long long)gridDim.x * blockDim.x)
// Warp w of the grid and the grid's warp count (row-per-warp parts).
#define GR_WARP (GR_TID >> 5)
#define GR_WARPS (GR_STRIDE >> 5)

#if GR_KIND == GR_RMS_NORM || GR_KIND == GR_NORM_MODULATE
// A unit's inverse RMS per (row, group) pair into shared memory (`inv`, GR_UNIT * groups entries), by the block's
// warps; the block synchronizes before and after.
template <int BF>
__device__ __forceinline__ void gr_unit_inv(float *inv, const void *x, long long r0, long long r1, int groups, int d,
                                            float eps) {
  __syncthreads();
  const int warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (long long u = warp; u < (r1 - r0) * groups; u += warps) {
    const float v = gr_inv_rms<BF>(x, (r0 * groups + u) * d, d, eps);
    if ((threadIdx.x & 31) == 0) inv[u] = v;
  }
  __syncthreads();
}
#endif

#ifndef GR_ROPE_IN
#define GR_ROPE_IN 0
#endif
#if GR_KIND == GR_ROPE || (GR_KIND == GR_RMS_NORM && GR_ROPE_IN)
// rope's gradient at channel j of one head's row (both forms): dyr the head's dy, own = dyr[j], cs / sn the rope
// tables' row. The first R channels rotate back with the bf16-rounded tables; the rest pass through.
__device__ __forceinline__ float gr_rope_back(float own, const float *dyr, int j, const float *cs, const float *sn) {
  constexpr int h2 = GR_R / 2;
  if (j >= GR_R) return own;
  if (j < h2) return __fadd_rn(__fmul_rn(own, rbf(cs[j])), __fmul_rn(dyr[j + h2], rbf(sn[j + h2])));
  const int k = j - h2;  // own is dyr[k + h2]
  return __fsub_rn(__fmul_rn(own, rbf(cs[k + h2])), __fmul_rn(dyr[k], rbf(sn[k])));
}
#endif

#if GR_KIND == GR_NORM_MODULATE || GR_KIND == GR_RMS_NORM
// An rms norm's dx at one channel (rms_norm_grad, norm_modulate_grad: every form): dx = inv * (dn - (x * inv) * mean),
// dn the gradient at the norm's output (times its weight), mean the group's sum of dn * (x * inv) over its channels.
__device__ __forceinline__ float gr_norm_dx(float dn, float xv, float inv, float mean) {
  return __fmul_rn(inv, __fsub_rn(dn, __fmul_rn(__fmul_rn(xv, inv), mean)));
}
#endif

#if GR_KIND == GR_NORM_MODULATE
// norm_modulate's first phase, per channel j of a row (both forms): dn = dy * bf(1 + scale), times the norm's weight
// where it has one (wj: GR_WV(j), the kernel's weight parameter); dx then gr_norm_dx over the row (H channels).
__device__ __forceinline__ float gr_nm_dn(float dy, float scale, float wj) {
  const float dn = __fmul_rn(dy, rbf(__fadd_rn(1.0f, scale)));
  return GR_HAS_W ? __fmul_rn(dn, wj) : dn;
}
#ifndef GR_RESIDUAL
#define GR_RESIDUAL 0
#endif
// GR_RESIDUAL (h3-fuse-grad): dx = residual + dx, element for element, as it is stored (grad_add's F32 sum; an
// addition's operands commute, so the bits are those of the grad_add it replaces). N elements from `at`.
#if GR_RESIDUAL
#define GR_RESIDUAL_PARAM residual
#else
#define GR_RESIDUAL_PARAM nullptr
#endif
template <int N = 8>
__device__ __forceinline__ void gr_nm_add_residual_at(const void *res, long long at, float *o) {
  if (!GR_RESIDUAL) return;
  float r[N];
  if constexpr (N == 8) gr_ld8<0>(res, at, r);
  else r[0] = ((const float *)res)[at];
#pragma unroll
  for (int e = 0; e < N; ++e) o[e] = __fadd_rn(r[e], o[e]);
}
#endif

#if GR_KIND == GR_NORM_MODULATE || GR_KIND == GR_GATE_RESIDUAL
// The tags parameter exists only for AdaLN rows (3 per timestep); gr_table_row reads it only then.
#if GR_RPT == 3
#define GR_TAGS tags
#else
#define GR_TAGS ts_index
#endif
__device__ __forceinline__ long long gr_table_row(const void *ts, const void *tags, long long metaRows, long long r) {
#if GR_RPT == 3
  return h3c_table_row((const long long *)ts, (const long long *)tags, metaRows, r, 3);
#else
  return h3c_table_row((const long long *)ts, (const long long *)ts, metaRows, r, 1);
#endif
}
#endif

#if GR_KIND == GR_NORM_MODULATE || GR_KIND == GR_GATE_RESIDUAL
// Sums per table row over the rows of that table row (dshift, dscale, dgate; docs/contract.md section 14) as
// row_units: each unit's partials are independent, so phase 1 computes them in parallel (a thread per channel, unit
// and item: one walk over the unit's 128 rows per window of GR_WIN table rows, each row adding to its own table row's
// GR_ACC chains only) into the scratch `parts`, and phase 2 folds them per (table row, channel) in unit and item
// order, as gr_fold_units does. (The first form walked every row once per table row and sum on 20 blocks: 1.7 s of a
// 2.4 s backward at S = 1,084; one walk per channel over all rows still 99 ms; bench/NOTES.md 2026-12-05.)
// parts: [unit of the batch][table row][GR_ACC][GR_H], then (norm_modulate's weight) [unit of the batch][GR_H].
#define GR_WIN 8  // (gr_unit_partials' switch has a case for each of the window's table rows)
#define GR_BATCH 8
// load(r, t) reads row r's operands for channel c (t its table row), add(v, j, acc) and addExtra(v, extra) add them to
// the chains. The unit's table rows are found once per block into shared memory (not gr_table_row's 64-bit modulo
// and two dependent metadata loads per row and thread, which held phase 1 in a serial walk), and every row's
// operands are loaded whatever its table row in the first window (which adds every row's extra), so the walk's loads
// do not wait on the window's compares; the chains still take the rows in ascending order. The block's threads past
// GR_H only help find the table rows.
template <class Load, class Add, class AddExtra>
__device__ __forceinline__ void gr_unit_partials(float *parts, long long c, long long tableRows, long long items,
                                                 long long itemRows, const void *ts, const void *tags,
                                                 long long metaRows, Load load, Add add, AddExtra addExtra) {
  const long long b = blockIdx.z, u0 = b * itemRows + (long long)blockIdx.y * GR_UNIT;
  if (b >= items || (long long)blockIdx.y * GR_UNIT >= itemRows) return;
  const long long u1 = u0 + GR_UNIT < (b + 1) * itemRows ? u0 + GR_UNIT : (b + 1) * itemRows;
  const long long unit = b * ((itemRows + GR_UNIT - 1) / GR_UNIT) + blockIdx.y;
  const long long units = items * ((itemRows + GR_UNIT - 1) / GR_UNIT);
  __shared__ long long trow[GR_UNIT];
  for (long long k = threadIdx.x; k < u1 - u0; k += blockDim.x) trow[k] = gr_table_row(ts, tags, metaRows, u0 + k);
  __syncthreads();
  if (c >= GR_H) return;
  for (long long w0 = 0; w0 < tableRows; w0 += GR_WIN) {
    float acc[GR_ACC * GR_WIN], extra = 0.f;
#pragma unroll
    for (int j = 0; j < GR_ACC * GR_WIN; ++j) acc[j] = 0.f;
    // GR_BATCH rows' operands loaded before any of them is added (the last batch's rows past the unit load the unit's
    // last row again and add nothing), and a batch of one table row added through the switch below: with a row's
    // loads, GR_WIN compares and predicated adds in turn, phase 1 ran at ~1.1 TB/s (norm_modulate_grad's 0.242 ms at
    // 8,349 x 5,376 on an H100; batched 0.225, with the switch 0.162: bench/NOTES.md 2026-12-06, session of 16:01).
    // The chains take the rows in ascending order as before.
    for (long long r0 = u0; r0 < u1; r0 += GR_BATCH) {
      decltype(load(u0, 0)) v[GR_BATCH];
      long long tb[GR_BATCH];
#pragma unroll
      for (int k = 0; k < GR_BATCH; ++k) {
        const long long r = r0 + k < u1 ? r0 + k : u1 - 1;
        tb[k] = trow[r - u0];
        v[k] = load(r, tb[k]);
      }
      // A whole batch of one table row (the common case: a unit's rows change table row only where the modality or
      // the item does; the same for every thread of the block) adds its rows to that row's chains in a switch with
      // the chain fixed per case, not through GR_WIN predicated adds and compares a row. Each chain (acc[j], extra)
      // still takes the rows in ascending order.
      bool one = r0 + GR_BATCH <= u1;
#pragma unroll
      for (int k = 1; k < GR_BATCH; ++k) one = one && tb[k] == tb[0];
      if (one) {
        if (w0 == 0)
#pragma unroll
          for (int k = 0; k < GR_BATCH; ++k) addExtra(v[k], extra);
        switch (tb[0] - w0) {
#define GR_BATCH_CASE(J)                                                                                             \
  case J:                                                                                                            \
    _Pragma("unroll") for (int k = 0; k < GR_BATCH; ++k) add(v[k], J, acc);                                          \
    break;
          GR_BATCH_CASE(0) GR_BATCH_CASE(1) GR_BATCH_CASE(2) GR_BATCH_CASE(3)
          GR_BATCH_CASE(4) GR_BATCH_CASE(5) GR_BATCH_CASE(6) GR_BATCH_CASE(7)
#undef GR_BATCH_CASE
          default: break;  // (a row of another window)
        }
        continue;
      }
#pragma unroll
      for (int k = 0; k < GR_BATCH; ++k) {
        const long long t = tb[k];
        if (r0 + k >= u1) continue;
        if (w0 != 0 && (t < w0 || t >= w0 + GR_WIN)) continue;  // (a later window: only its own rows)
        if (w0 == 0) addExtra(v[k], extra);
#pragma unroll
        for (int j = 0; j < GR_WIN; ++j)
          if (t - w0 == j) add(v[k], j, acc);
      }
    }
#pragma unroll
    for (int j = 0; j < GR_WIN; ++j)
      if (w0 + j < tableRows)
#pragma unroll
        for (int a = 0; a < GR_ACC; ++a) parts[((unit * tableRows + w0 + j) * GR_ACC + a) * GR_H + c] = acc[a * GR_WIN + j];
    if (w0 == 0) parts[(units * tableRows * GR_ACC + unit) * GR_H + c] = extra;
  }
}
// Phase 2's fold of sum `a` of table row t (t == tableRows: the extra sum) for channel c.
__device__ __forceinline__ float gr_fold_parts(const float *parts, long long c, long long t, int a, long long tableRows,
                                               long long items, long long itemRows) {
  const long long per = (itemRows + GR_UNIT - 1) / GR_UNIT, units = items * per;
  float total = 0.f, item = 0.f;
  for (long long b = 0; b < items && itemRows > 0; ++b) {
    for (long long u = 0; u < per; ++u) {
      const long long unit = b * per + u;
      const float p = t < tableRows ? parts[((unit * tableRows + t) * GR_ACC + a) * GR_H + c]
                                    : parts[(units * tableRows * GR_ACC + unit) * GR_H + c];
      item = u == 0 ? p : __fadd_rn(item, p);
    }
    total = b == 0 ? item : __fadd_rn(total, item);
  }
  return total;
}
#endif

// GR_MIN_BLOCKS (the emitter's; 1 unless it says otherwise): the blocks of 256 an SM must hold, which caps the
// registers (8: 32 registers, all 2,048 threads).
extern "C" __global__ void __launch_bounds__(256, GR_MIN_BLOCKS) GR_ENTRY(H3C_PARAMS) {
  h3c_grid_dependency_wait();  // (common.cuh) before any global memory access

#if GR_KIND == GR_ADD
  // c = a + b (F32). GR_VEC 4: a float4 of each per step (22.0 ms for 104 ops of 5,376 columns at S = 8,349 with 4-byte
  // accesses, ~85 % of HBM bandwidth).
#if GR_VEC == 4
  for (long long i = GR_TID; i < rows * (GR_COLS / 4); i += GR_STRIDE) {
    const float4 x = ((const float4 *)a)[i], y = ((const float4 *)b)[i];
    ((float4 *)c)[i] = make_float4(__fadd_rn(x.x, y.x), __fadd_rn(x.y, y.y), __fadd_rn(x.z, y.z), __fadd_rn(x.w, y.w));
  }
#else
  for (long long i = GR_TID; i < rows * GR_COLS; i += GR_STRIDE)
    ((float *)c)[i] = __fadd_rn(((const float *)a)[i], ((const float *)b)[i]);
#endif

#elif GR_KIND == GR_LINEAR_X
  // dX [rows][K] = g W: bf16 weight: k_chunks over N of bf(g) * w; F32 weight: the fma chain over N.
  for (long long i = GR_TID; i < rows * GR_K; i += GR_STRIDE) {
    const long long m = i / GR_K, k = i % GR_K;
    float acc = 0.f;
#if GR_W_F32
    const float *gm = (const float *)g + m * GR_N;
    for (int n = 0; n < GR_N; ++n) acc = __fmaf_rn(gm[n], ((const float *)w)[(long long)n * GR_K + k], acc);
#else
    for (int n0 = 0; n0 < GR_N; n0 += 16) {
      double s[4];
      gr_chunk_zero(s);
      for (int j = 0; j < 16 && n0 + j < GR_N; ++j)  // (a bf16 g, grad_round's, is bf(g) already: rbf keeps it)
        gr_chunk_add(s, j, rbf(gr_ld(g, m * GR_N + n0 + j, GR_G_BF)), bf2f(((const h3bf *)w)[(long long)(n0 + j) * GR_K + k]));
      acc = __fadd_rn(acc, gr_chunk_value(s));
    }
#endif
#if GR_RESIDUAL
    acc = __fadd_rn(((const float *)residual)[i], acc);  // h3-fuse-grad: grad_add's sum
#endif
    gr_st(dx, i, acc, GR_OUT_BF);  // (bf16: the rounding of the grad_round that read it, h3-fuse-grad)
  }

#elif GR_KIND == GR_LINEAR_W
  // dW [N][K] = row_units of bf(g[r][n]) * bf(x[r][k]) (bf16 weight; F32: the fma chain of g * x); dbias [N] =
  // row_units of g[r][n] (add chains).
#if GR_DW
  if (blockIdx.y == 0) {
    for (long long i = GR_TID; i < (long long)GR_N * GR_K; i += GR_STRIDE) {
      const long long n = i / GR_K, k = i % GR_K;
      ((float *)dw)[i] = gr_fold_units(items, item_rows, [&](long long u, long long u1) {
        float acc = 0.f;
#if GR_W_F32
        for (long long r = u; r < u1; ++r)
          acc = __fmaf_rn(((const float *)g)[r * GR_N + n], gr_ld(x, r * GR_K + k, GR_X_BF), acc);
#else
        for (long long c0 = u; c0 < u1; c0 += 16) {
          double s[4];
          gr_chunk_zero(s);
          for (int j = 0; j < 16 && c0 + j < u1; ++j)
            gr_chunk_add(s, j, rbf(gr_ld(g, (c0 + j) * GR_N + n, GR_G_BF)), rbf(gr_ld(x, (c0 + j) * GR_K + k, GR_X_BF)));
          acc = __fadd_rn(acc, gr_chunk_value(s));
        }
#endif
        return acc;
      });
    }
  }
#endif
#if GR_BIAS
  if (blockIdx.y == 1) {
    for (long long n = GR_TID; n < GR_N; n += GR_STRIDE)
      ((float *)dbias)[n] = gr_fold_units(items, item_rows, [&](long long u, long long u1) {
        float acc = 0.f;
        for (long long r = u; r < u1; ++r) acc = __fadd_rn(acc, ((const float *)g)[r * GR_N + n]);
        return acc;
      });
  }
#endif

#elif GR_KIND == GR_SWIGLU
  // x = [v | g] [rows][2F]: dv = dy * bf(silu(g)), dg = (dy * v) * silu'(g) (gr_swiglu_dx). GR_VEC 8: 8
  // consecutive f of a row per step (16-byte loads of v, g and dy, stores of dv and dg; one division by the constant
  // F / 8 per 8 elements).
#if GR_VEC == 8
  for (long long i = GR_TID; i < rows * (GR_F / 8); i += GR_STRIDE) {
    const long long m = i / (GR_F / 8), f = (i % (GR_F / 8)) * 8;
    float v[8], gv[8], d[8], dv[8], dg[8];
    gr_ld8<GR_X_BF>(x, m * 2 * GR_F + f, v);
    gr_ld8<GR_X_BF>(x, m * 2 * GR_F + GR_F + f, gv);
    gr_ld8<0>(dy, m * GR_F + f, d);
#pragma unroll
    for (int e = 0; e < 8; ++e) gr_swiglu_dx(d[e], v[e], gv[e], dv[e], dg[e]);
    gr_st8<GR_OUT_BF>(dx, m * 2 * GR_F + f, dv);
    gr_st8<GR_OUT_BF>(dx, m * 2 * GR_F + GR_F + f, dg);
  }
#else
  for (long long i = GR_TID; i < rows * GR_F; i += GR_STRIDE) {
    const long long m = i / GR_F, f = i % GR_F;
    const float v = gr_ld(x, m * 2 * GR_F + f, GR_X_BF), gv = gr_ld(x, m * 2 * GR_F + GR_F + f, GR_X_BF);
    float dv, dg;
    gr_swiglu_dx(((const float *)dy)[i], v, gv, dv, dg);
    gr_st(dx, m * 2 * GR_F + f, dv, GR_OUT_BF);
    gr_st(dx, m * 2 * GR_F + GR_F + f, dg, GR_OUT_BF);
  }
#endif

#elif GR_KIND == GR_SILU
  for (long long i = GR_TID; i < rows * GR_COLS; i += GR_STRIDE)
    ((float *)dx)[i] = __fmul_rn(((const float *)dy)[i], gr_silu_derivative(gr_ld(x, i, GR_X_BF)));

#elif GR_KIND == GR_ROPE
  // The first R channels of each head rotate back with the bf16-rounded tables (one row per canonical row, shared by
  // the batch items); the rest pass through. GR_VEC 4: a block per row (its table row once, not a 64-bit
  // `m % item_rows` per element: 31.5 ms for 100 ops at S = 8,349, 56 x 128 channels), a float4 of dy and of dx per
  // thread and step; each element's value as below (its own dy from the float4, its partner and the tables scalar).
#if GR_VEC == 4
  constexpr int HD = GR_HEADS * GR_D;
  for (long long m = blockIdx.x; m < rows; m += gridDim.x) {
    const long long t = (m % item_rows) * GR_R;
    const float *dym = (const float *)dy + m * HD, *cs = (const float *)cos_t + t, *sn = (const float *)sin_t + t;
    for (int q = threadIdx.x; q < HD / 4; q += blockDim.x) {
      const float4 o4 = ((const float4 *)dym)[q];
      const float own[4] = {o4.x, o4.y, o4.z, o4.w};  // dyr[j] of each element below
      float out[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = 4 * q + e, j = c % GR_D;
        out[e] = gr_rope_back(own[e], dym + (c - j), j, cs, sn);
      }
      ((float4 *)dx)[m * (HD / 4) + q] = make_float4(out[0], out[1], out[2], out[3]);
    }
  }
#else
  for (long long i = GR_TID; i < rows * (GR_HEADS * GR_D); i += GR_STRIDE) {
    const long long m = i / (GR_HEADS * GR_D), c = i % (GR_HEADS * GR_D);
    const int j = int(c % GR_D);
    const float *dyr = (const float *)dy + m * (GR_HEADS * GR_D) + (c - j);
    const long long t = (m % item_rows) * GR_R;
    ((float *)dx)[i] = gr_rope_back(dyr[j], dyr, j, (const float *)cos_t + t, (const float *)sin_t + t);
  }
#endif

#elif GR_KIND == GR_RMS_NORM
  // Groups of GR_G channels (rms_norm: the row; qk_norm: a head). y == 0: a warp per (row, group), dx; y >= 1 (block
  // x 0): the weight's gradient for channels 256 (y - 1) .., row_units over (row, group) pairs.
  constexpr int G = GR_COLS / GR_G;
  // Element j of the group at `base` (row m) of dy. GR_ROPE_IN (a qk_norm's, with the rope_grad before it folded
  // in): dy is the rope's output gradient, each element rotated back where it is read, by rope_grad's own operations
  // (gr_rope_back with the row's tables): the values rope_grad stored.
  auto dyAt = [&](long long base, int j, long long m) -> float {
#if GR_ROPE_IN
    const long long t = (m % item_rows) * GR_R;
    const float *dyr = (const float *)dy + base;
    return gr_rope_back(dyr[j], dyr, j, (const float *)cos_t + t, (const float *)sin_t + t);
#else
    (void)m;
    return ((const float *)dy)[base + j];
#endif
  };
  if (blockIdx.y == 0) {
    const int lane = threadIdx.x & 31;
#if GR_G % 32 == 0 && GR_G <= 256
    // The group in registers (a qk_norm's head of 128: 4 channels a lane): x and dn (dy rotated back, times the
    // weight) read once each, where the loop form below reads x three times and dy (with the rope, its pair and the
    // tables too) twice. The same operations in the same order: lane l's channels l, l + 32, ... ascending, then the
    // lane trees.
    constexpr int NPL = GR_G / 32;
    for (long long u = GR_WARP; u < rows * G; u += GR_WARPS) {
      const long long base = u * GR_G, m = u / G;
      float xv[NPL], dn[NPL];
#pragma unroll
      for (int i = 0; i < NPL; ++i) {
        const int j = lane + 32 * i;
        xv[i] = gr_ld(x, base + j, GR_X_BF);
        dn[i] = GR_HAS_W ? __fmul_rn(dyAt(base, j, m), GR_WV(j)) : dyAt(base, j, m);
      }
      float ss = 0.f;
#pragma unroll
      for (int i = 0; i < NPL; ++i) ss = __fmaf_rn(xv[i], xv[i], ss);
      const float inv = gr_inv_of_sum(h3c_lane_tree(ss), GR_G, GR_EPS);
      float p = 0.f;
#pragma unroll
      for (int i = 0; i < NPL; ++i) p = __fmaf_rn(dn[i], __fmul_rn(xv[i], inv), p);
      const float mean = __fdiv_rn(h3c_lane_tree(p), (float)GR_G);
#pragma unroll
      for (int i = 0; i < NPL; ++i) gr_st(dx, base + lane + 32 * i, gr_norm_dx(dn[i], xv[i], inv, mean), GR_OUT_BF);
    }
#else
    for (long long u = GR_WARP; u < rows * G; u += GR_WARPS) {
      const long long base = u * GR_G, m = u / G;
      const float inv = gr_inv_rms<GR_X_BF>(x, base, GR_G, GR_EPS);
      float p = 0.f;
      for (int j = lane; j < GR_G; j += 32) {
        const float dn = GR_HAS_W ? __fmul_rn(dyAt(base, j, m), GR_WV(j)) : dyAt(base, j, m);
        p = __fmaf_rn(dn, __fmul_rn(gr_ld(x, base + j, GR_X_BF), inv), p);
      }
      const float mean = __fdiv_rn(h3c_lane_tree(p), (float)GR_G);
      for (int j = lane; j < GR_G; j += 32) {
        const float dn = GR_HAS_W ? __fmul_rn(dyAt(base, j, m), GR_WV(j)) : dyAt(base, j, m);
        gr_st(dx, base + j, gr_norm_dx(dn, gr_ld(x, base + j, GR_X_BF), inv, mean), GR_OUT_BF);
      }
    }
#endif
  }
#if GR_DW
  if (blockIdx.y >= 1 && blockIdx.x == 0) {
    extern __shared__ float gr_inv[];  // GR_UNIT * G
    // Channel j0 + threadIdx.x (the plan's launch: 256 threads, blocks y = 1 .. ceil(GR_G / 256), one pass); a
    // smaller launch walks the channels in passes the whole block takes (gr_unit_inv synchronizes it).
    const int jStride = int(gridDim.y - 1) * int(blockDim.x);
    for (int j0 = int(blockIdx.y - 1) * int(blockDim.x); j0 < GR_G; j0 += jStride) {
      const int j = j0 + int(threadIdx.x);
      const float total = gr_fold_units(items, item_rows, [&](long long u, long long u1) {
        gr_unit_inv<GR_X_BF>(gr_inv, x, u, u1, G, GR_G, GR_EPS);
        float acc = 0.f;
        if (j < GR_G)
          for (long long q = 0; q < (u1 - u) * G; ++q) {
            const long long e = (u * G + q) * GR_G + j;
            acc = __fmaf_rn(dyAt(e - j, j, (u * G + q) / G), rbf(__fmul_rn(gr_ld(x, e, GR_X_BF), gr_inv[q])), acc);
          }
        return acc;
      });
      if (j < GR_G) ((float *)dw)[j] = total;
    }
  }
#endif

#elif GR_KIND == GR_NORM_MODULATE
  // y = bf(fma(n, bf(1 + scale), shift)), n the rms_norm of x. A warp per row: dx (the norm's gradient for
  // dn = dy * bf(1 + scale)), and the row's inverse RMS into the scratch `inv_rms` for phase 1 (the weight's and
  // the table's gradients, below).
#if GR_NM_BLOCK
  // GR_NM_BLOCK (bf16 x and table, H a multiple of 8, the row in 48 KiB; 256 threads): a block per row. Its threads
  // copy the row's x and dy into shared memory by 16-byte cp.async (all in flight at once, no registers held; each
  // read from HBM once: the warp form's three passes read x three times and dy twice, and with every row in flight at
  // once the second reads miss L2), load the scale chunk beside them and turn their own pieces of dy into dn = dy *
  // bf(1 + scale) (times the norm's weight) in place; warp 0 runs the two sums in the contract's lane order from
  // there (lane l: elements l, l + 32, ... ascending, then the lane tree, as gr_inv_rms and the warp form), and the
  // block writes dx 8 channels a thread. Staging dn rather than dy and the scale takes the scale's rounding out of
  // warp 0's serial walk and 11 KiB out of the block's shared memory (7 rows an SM, not 5). Each value's F32
  // operations are the warp form's.
  {
    constexpr int QN = (GR_H / 8 + 255) / 256;  // 8-channel pieces a thread of 256 converts
    __shared__ __align__(16) h3bf xs[GR_H];
    __shared__ __align__(16) float dns[GR_H];
    __shared__ float stat[2];
    const int lane = threadIdx.x & 31;
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
      const long long base = r * GR_H;
      __syncthreads();  // the row before is done with the staging
      for (int q = threadIdx.x; q < GR_H / 8; q += blockDim.x) {
        cp_async16(xs + 8 * q, (const h3bf *)x + base + 8 * q, 16);
        cp_async16(dns + 8 * q, (const float *)dy + base + 8 * q, 16);
        cp_async16(dns + 8 * q + 4, (const float *)dy + base + 8 * q + 4, 16);
      }
      cp_async_commit();
      // (the row's table row, two dependent metadata loads, while the copies are in flight)
      const long long t = gr_table_row(ts_index, GR_TAGS, meta_rows, r);
      const long long sc = t * (GR_NUMCH * GR_H) + GR_SCALE * GR_H;
      // Each thread turns the pieces it copied into dn, QN of them at a time with their scale loads in flight (one
      // round at 256 threads; any block size takes the same pieces, so any grid computes the same values).
      for (int q0 = threadIdx.x; q0 < GR_H / 8; q0 += QN * blockDim.x) {
        uint4 sq[QN];
#pragma unroll
        for (int k = 0; k < QN; ++k) {
          const int q = q0 + k * blockDim.x;
          if (q < GR_H / 8) sq[k] = ((const uint4 *)((const h3bf *)table + sc))[q];
        }
        cp_async_wait<0>();  // (this thread's copies)
#pragma unroll
        for (int k = 0; k < QN; ++k) {
          const int q = q0 + k * blockDim.x;
          if (q < GR_H / 8) {
            const int j0 = 8 * q;
            const h3u32 sw[4] = {sq[k].x, sq[k].y, sq[k].z, sq[k].w};
            float d[8];
            gr_ld8<0>(dns, j0, d);
#pragma unroll
            for (int e = 0; e < 8; ++e)
              d[e] = gr_nm_dn(d[e], (e & 1) ? bf2_hi(sw[e >> 1]) : bf2_lo(sw[e >> 1]), GR_WV(j0 + e));
            gr_st8<0>(dns, j0, d);
          }
        }
      }
      __syncthreads();
      if (threadIdx.x < 32) {
        float p = 0.f;
#pragma unroll 8
        for (int j = lane; j < GR_H; j += 32) {
          const float v = bf2f(xs[j]);
          p = __fmaf_rn(v, v, p);
        }
        const float inv = gr_inv_of_sum(h3c_lane_tree(p), GR_H, GR_EPS);
        float p2 = 0.f;
#pragma unroll 8
        for (int j = lane; j < GR_H; j += 32) p2 = __fmaf_rn(dns[j], __fmul_rn(bf2f(xs[j]), inv), p2);
        const float mean = __fdiv_rn(h3c_lane_tree(p2), (float)GR_H);
        if (lane == 0) {
          stat[0] = inv;
          stat[1] = mean;
#if GR_SUMS
          ((float *)inv_rms)[r] = inv;
#endif
        }
      }
      __syncthreads();
      const float inv = stat[0], mean = stat[1];
      for (int q = threadIdx.x; q < GR_H / 8; q += blockDim.x) {
        const int j0 = 8 * q;
        float dn[8], xv[8], o[8];
        gr_ld8<0>(dns, j0, dn);
        gr_ld8<1>(xs, j0, xv);
#pragma unroll
        for (int e = 0; e < 8; ++e) o[e] = gr_norm_dx(dn[e], xv[e], inv, mean);
        gr_nm_add_residual_at<8>(GR_RESIDUAL_PARAM, base + j0, o);
        gr_st8<GR_OUT_BF>(dx, base + j0, o);
      }
    }
  }
#else
  {
    const int lane = threadIdx.x & 31;
    for (long long r = GR_WARP; r < rows; r += GR_WARPS) {
      const long long base = r * GR_H;
      const long long t = gr_table_row(ts_index, GR_TAGS, meta_rows, r);
      const long long sc = t * (GR_NUMCH * GR_H) + GR_SCALE * GR_H;
      const float inv = gr_inv_rms<GR_X_BF>(x, base, GR_H, GR_EPS);
#if GR_SUMS
      if (lane == 0) ((float *)inv_rms)[r] = inv;
#endif
      float p = 0.f;
#pragma unroll 4
      for (int j = lane; j < GR_H; j += 32)
        p = __fmaf_rn(gr_nm_dn(((const float *)dy)[base + j], gr_ld(table, sc + j, GR_T_BF), GR_WV(j)),
                      __fmul_rn(gr_ld(x, base + j, GR_X_BF), inv), p);
      const float mean = __fdiv_rn(h3c_lane_tree(p), (float)GR_H);
#if GR_VEC == 8
      // dx is elementwise given inv and mean: 8 channels per lane and step in 16-byte vectors (the norm's weight,
      // which the weight buffer lays out without alignment, scalar).
      for (int q = lane; q < GR_H / 8; q += 32) {
        const int j0 = 8 * q;
        float d[8], s[8], xv[8], o[8];
        gr_ld8<0>(dy, base + j0, d);
        gr_ld8<GR_T_BF>(table, sc + j0, s);
        gr_ld8<GR_X_BF>(x, base + j0, xv);
#pragma unroll
        for (int e = 0; e < 8; ++e) o[e] = gr_norm_dx(gr_nm_dn(d[e], s[e], GR_WV(j0 + e)), xv[e], inv, mean);
        gr_nm_add_residual_at<8>(GR_RESIDUAL_PARAM, base + j0, o);
        gr_st8<GR_OUT_BF>(dx, base + j0, o);
      }
#else
      for (int j = lane; j < GR_H; j += 32) {
        float o[1] = {gr_norm_dx(gr_nm_dn(((const float *)dy)[base + j], gr_ld(table, sc + j, GR_T_BF), GR_WV(j)),
                               gr_ld(x, base + j, GR_X_BF), inv, mean)};
        gr_nm_add_residual_at<1>(GR_RESIDUAL_PARAM, base + j, o);
        gr_st(dx, base + j, o[0], GR_OUT_BF);
      }
#endif
    }
  }
#endif

#elif GR_KIND == GR_GATE_RESIDUAL
  // z = bf(fma(gate, y, x)): dy = dz * gate. Phases 1 and 2 (below): dgate per table row (fma chains of dz * y), zero
  // in the other chunks. GR_VEC 8: a block per row, its table row once (the grid-stride form's 64-bit `i / GR_H`,
  // `i % GR_H` and gr_table_row, a 64-bit modulo and two metadata loads, per element: 0.54 ms an op with phases 1 and
  // 2 at S = 8,349, H = 5,376), 8 channels per thread and step in 16-byte vectors.
#if GR_VEC == 8
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const long long t = gr_table_row(ts_index, GR_TAGS, meta_rows, r);
    const long long gate = t * (GR_NUMCH * GR_H) + GR_CHUNK * GR_H;
    for (int q = threadIdx.x; q < GR_H / 8; q += blockDim.x) {
      float d[8], g[8], o[8];
      gr_ld8<0>(dz, r * GR_H + 8 * q, d);
      gr_ld8<GR_T_BF>(table, gate + 8 * q, g);
#pragma unroll
      for (int e = 0; e < 8; ++e) o[e] = __fmul_rn(d[e], g[e]);
      gr_st8<GR_OUT_BF>(dy, r * GR_H + 8 * q, o);
    }
  }
#else
  for (long long i = GR_TID; i < rows * GR_H; i += GR_STRIDE) {
    const long long r = i / GR_H, c = i % GR_H;
    const long long t = gr_table_row(ts_index, GR_TAGS, meta_rows, r);
    gr_st(dy, i, __fmul_rn(((const float *)dz)[i], gr_ld(table, t * (GR_NUMCH * GR_H) + GR_CHUNK * GR_H + c, GR_T_BF)),
          GR_OUT_BF);
  }
#endif

#elif GR_KIND == GR_PACK
  // pack's gradient: each item's canonical rows [0, Nt), [Nt, Nt + Nv), [Nt + Nv, S) back to text, video, audio.
  const long long S = nt + nv + na;
  for (long long i = GR_TID; i < rows * GR_H; i += GR_STRIDE) {
    const long long r = i / GR_H, c = i % GR_H, b = r / S, s = r % S;
    const float d = ((const float *)dx)[i];
    if (s < nt) ((float *)dtext)[(b * nt + s) * GR_H + c] = d;
    else if (s < nt + nv) ((float *)dvideo)[(b * nv + s - nt) * GR_H + c] = d;
    else ((float *)daudio)[(b * na + s - nt - nv) * GR_H + c] = d;
  }

#elif GR_KIND == GR_UNPACK
  // unpack's gradient: the samples' gradients in their canonical rows of the heads' outputs, every other row 0.
  const long long S = nt + nv + na;
  if (blockIdx.y == 0)
    for (long long i = GR_TID; i < rows * GR_VCOLS; i += GR_STRIDE) {
      const long long r = i / GR_VCOLS, c = i % GR_VCOLS, b = r / S, s = r % S;
      ((float *)dvideo)[i] = s >= nt && s < nt + nv ? ((const float *)dsample)[(b * nv + s - nt) * GR_VCOLS + c] : 0.f;
    }
  else
    for (long long i = GR_TID; i < rows * GR_ACOLS; i += GR_STRIDE) {
      const long long r = i / GR_ACOLS, c = i % GR_ACOLS, b = r / S, s = r % S;
      ((float *)daudio)[i] = s >= nt + nv ? ((const float *)daudio_sample)[(b * na + s - nt - nv) * GR_ACOLS + c] : 0.f;
    }

#elif GR_KIND == GR_ADALN_TABLE
  // table = linear(bf(silu(temb))), its gradient read as [T][N]: y == 0: dtemb = (k_chunks over N of bf(g) W) *
  // silu'(temb); y == 1: dW = row_units over the T rows (one item) of bf(g) * bf(silu(temb)); y == 2: dbias.
  const float *gt = (const float *)dtable;
  if (blockIdx.y == 0) {
    for (long long i = GR_TID; i < ts * GR_K; i += GR_STRIDE) {
      const long long t = i / GR_K, e = i % GR_K;
      float acc = 0.f;
      for (int n0 = 0; n0 < GR_N; n0 += 16) {
        double s[4];
        gr_chunk_zero(s);
        for (int j = 0; j < 16 && n0 + j < GR_N; ++j)
          gr_chunk_add(s, j, rbf(gt[t * GR_N + n0 + j]), bf2f(((const h3bf *)w)[(long long)(n0 + j) * GR_K + e]));
        acc = __fadd_rn(acc, gr_chunk_value(s));
      }
      ((float *)dtemb)[i] = __fmul_rn(acc, gr_silu_derivative(((const float *)temb)[i]));
    }
  } else if (blockIdx.y == 1) {
#if GR_DW
    for (long long i = GR_TID; i < (long long)GR_N * GR_K; i += GR_STRIDE) {
      const long long n = i / GR_K, e = i % GR_K;
      ((float *)dw)[i] = gr_fold_units(1, ts, [&](long long u, long long u1) {
        float acc = 0.f;
        for (long long c0 = u; c0 < u1; c0 += 16) {
          double s[4];
          gr_chunk_zero(s);
          for (int j = 0; j < 16 && c0 + j < u1; ++j)
            gr_chunk_add(s, j, rbf(gt[(c0 + j) * GR_N + n]),
                         rbf(h3c::detmath::silu(((const float *)temb)[(c0 + j) * GR_K + e])));
          acc = __fadd_rn(acc, gr_chunk_value(s));
        }
        return acc;
      });
    }
#endif
  } else {
#if GR_BIAS
    for (long long n = GR_TID; n < GR_N; n += GR_STRIDE)
      ((float *)dbias)[n] = gr_fold_units(1, ts, [&](long long u, long long u1) {
        float acc = 0.f;
        for (long long r = u; r < u1; ++r) acc = __fadd_rn(acc, gt[r * GR_N + n]);
        return acc;
      });
#endif
  }

#elif GR_KIND == GR_ATTENTION
  // Phase 0: a warp per (query row, head): the forward's row statistics by its flash order (kv blocks of GR_KVB keys:
  // raw scores by k_chunks, the block max, mc = m * c, alpha = ex2(fma(m, c, -mc)), p = bf(ex2(fma(s, c, -mc))) summed
  // in key order, l = l * alpha + sum), L = mc + lg2(l), and D = the fma chain of dout * o; into `stats`.
  const int lane = threadIdx.x & 31;
  for (long long w = GR_WARP; w < rows * GR_HEADS; w += GR_WARPS) {
    const long long i = w / GR_HEADS, h = w % GR_HEADS;
    const long long item0 = (i / item_rows) * item_rows, n = item_rows;
    const long long qi = i * (GR_HEADS * GR_D) + h * GR_D;
    float m = -__int_as_float(0x7f800000), l = 0.f;
    for (long long b0 = 0; b0 < (GR_LSE ? 0 : n); b0 += GR_KVB) {  // (GR_LSE: the forward's L, read below)
      const long long bn = n - b0 < GR_KVB ? n - b0 : GR_KVB;
      float sj[(GR_KVB + 31) / 32];
      float mb = -__int_as_float(0x7f800000);
      for (int t = 0; t < (GR_KVB + 31) / 32; ++t) {
        const long long j = t * 32 + lane;
        sj[t] = mb;
        if (j < bn) {
          const long long kj = (item0 + b0 + j) * (GR_HEADS * GR_D) + h * GR_D;
          float acc = 0.f;
          for (int e0 = 0; e0 < GR_D; e0 += 16) {
            double s[4];
            gr_chunk_zero(s);
            for (int e = 0; e < 16 && e0 + e < GR_D; ++e)
              gr_chunk_add(s, e, gr_ld(q, qi + e0 + e, GR_Q_BF), gr_ld(k, kj + e0 + e, GR_K_BF));
            acc = __fadd_rn(acc, gr_chunk_value(s));
          }
          sj[t] = acc;
        }
      }
      for (int t = 0; t < (GR_KVB + 31) / 32; ++t)
        if (t * 32 + lane < bn) mb = fmaxf(mb, sj[t]);
      for (int off = 16; off >= 1; off >>= 1) mb = fmaxf(mb, __shfl_xor_sync(0xffffffffu, mb, off));
      const float mNew = fmaxf(m, mb), mc = __fmul_rn(mNew, GR_C);
      const float alpha = h3c_ex2(__fmaf_rn(m, GR_C, -mc));
      float rowSum = 0.f;
      for (int t = 0; t < (GR_KVB + 31) / 32; ++t) {
        const float p = t * 32 + lane < bn ? rbf(h3c_ex2(__fmaf_rn(sj[t], GR_C, -mc))) : 0.f;
        for (int src = 0; src < 32; ++src) {
          const float ps = __shfl_sync(0xffffffffu, p, src);
          if (t * 32 + src < bn) rowSum = __fadd_rn(rowSum, ps);
        }
      }
      l = __fadd_rn(__fmul_rn(l, alpha), rowSum);
      m = mNew;
    }
    float D = 0.f;
    for (int e = 0; e < GR_D; ++e) D = __fmaf_rn(((const float *)dout)[qi + e], gr_ld(o, qi + e, GR_O_BF), D);
    if (lane == 0) {
#if GR_LSE
      ((float *)stats)[2 * w] = ((const float *)lse)[w];  // the forward's row statistics, [rows][heads]
#else
      ((float *)stats)[2 * w] = __fadd_rn(__fmul_rn(m, GR_C), h3c_lg2(l));
#endif
      ((float *)stats)[2 * w + 1] = D;
    }
  }
#endif
}

#if (GR_KIND == GR_NORM_MODULATE || GR_KIND == GR_GATE_RESIDUAL) && GR_SUMS
// Phase 1: a thread per (channel c = 64 x + thread, unit y of item z): the unit's partials. norm_modulate: dshift (add
// chain of dy), dscale (fma chain of dy * n, n = bf(x * inv) times the norm's weight where it has one; inv from phase
// 0) and the weight's (fma chain of dn * n over every row, dn = dy * bf(1 + scale)); gate_residual: dgate (fma chain
// of dz * y).
extern "C" __global__ void __launch_bounds__(256) GR_ENTRY_P1(H3C_PARAMS) {
  h3c_grid_dependency_wait();
  const long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // (c >= GR_H: gr_unit_partials returns)
#if GR_KIND == GR_NORM_MODULATE
  // v: dy, the dscale factor (n, or bf(n * w) with the norm's weight), n, and (GR_DW) the row's scale.
  const float *inv = (const float *)inv_rms;
  gr_unit_partials(
      (float *)parts, c, table_rows, items, item_rows, ts_index, GR_TAGS, meta_rows,
      [&](long long r, long long t) {
        const float n = rbf(__fmul_rn(gr_ld(x, r * GR_H + c, GR_X_BF), inv[r]));
        return make_float4(((const float *)dy)[r * GR_H + c], GR_HAS_W ? rbf(__fmul_rn(n, GR_WV(c))) : n, n,
                           GR_DW ? gr_ld(table, t * (GR_NUMCH * GR_H) + GR_SCALE * GR_H + c, GR_T_BF) : 0.f);
      },
      [&](const float4 &v, long long j, float *acc) {
        acc[j] = __fadd_rn(acc[j], v.x);
        acc[GR_WIN + j] = __fmaf_rn(v.x, v.y, acc[GR_WIN + j]);
      },
      [&](const float4 &v, float &acc) {
        if (GR_DW) acc = __fmaf_rn(__fmul_rn(v.x, rbf(__fadd_rn(1.0f, v.w))), v.z, acc);
      });
#else
  gr_unit_partials(
      (float *)parts, c, table_rows, items, item_rows, ts_index, GR_TAGS, meta_rows,
      [&](long long r, long long) {
        return make_float2(((const float *)dz)[r * GR_H + c], gr_ld(y, r * GR_H + c, GR_Y_BF));
      },
      [&](const float2 &v, long long j, float *acc) { acc[j] = __fmaf_rn(v.x, v.y, acc[j]); },
      [](const float2 &, float &) {});
#endif
}

// Phase 2: a thread per (channel c = 256 x + thread, table row y): the fold of its partials; y == table_rows:
// norm_modulate's weight gradient.
extern "C" __global__ void __launch_bounds__(256) GR_ENTRY_P2(H3C_PARAMS) {
  h3c_grid_dependency_wait();
  const long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
  if (c >= GR_H) return;
  const float *P = (const float *)parts;
  if (t == table_rows) {
#if GR_KIND == GR_NORM_MODULATE && GR_DW
    ((float *)dw)[c] = gr_fold_parts(P, c, t, 0, table_rows, items, item_rows);
#endif
    return;
  }
#if GR_TABLE_GRAD
  float *row = (float *)dtable + t * (GR_NUMCH * GR_H);
  for (int k = 0; k < GR_NUMCH; ++k) row[k * GR_H + c] = 0.f;
#if GR_KIND == GR_NORM_MODULATE
  row[GR_SHIFT * GR_H + c] = gr_fold_parts(P, c, t, 0, table_rows, items, item_rows);
  row[GR_SCALE * GR_H + c] = gr_fold_parts(P, c, t, 1, table_rows, items, item_rows);
#else
  row[GR_CHUNK * GR_H + c] = gr_fold_parts(P, c, t, 0, table_rows, items, item_rows);
#endif
#endif
}
#endif

#if GR_KIND == GR_ATTENTION
// bf(dS_ij) and bf(P_ij) of query row i and key j (rows of the flattened batch) for head h, from the row's L and D:
// s by k_chunks over d, P = ex2(fma(s, c, -L)), dP = k_chunks of bf(dout_i) . v_j, dS = bf(P * (dP - D)).
__device__ __forceinline__ void gr_attention_ds(const void *q, const void *k, const void *v, const void *dout,
                                                long long i, long long j, long long h, float L, float D, float &dS,
                                                float &Pb) {
  const long long qi = i * (GR_HEADS * GR_D) + h * GR_D, kj = j * (GR_HEADS * GR_D) + h * GR_D;
  float sAcc = 0.f, dPAcc = 0.f;
  for (int e0 = 0; e0 < GR_D; e0 += 16) {
    double s[4], t[4];
    gr_chunk_zero(s);
    gr_chunk_zero(t);
    for (int e = 0; e < 16 && e0 + e < GR_D; ++e) {
      gr_chunk_add(s, e, gr_ld(q, qi + e0 + e, GR_Q_BF), gr_ld(k, kj + e0 + e, GR_K_BF));
      gr_chunk_add(t, e, rbf(((const float *)dout)[qi + e0 + e]), gr_ld(v, kj + e0 + e, GR_V_BF));
    }
    sAcc = __fadd_rn(sAcc, gr_chunk_value(s));
    dPAcc = __fadd_rn(dPAcc, gr_chunk_value(t));
  }
  const float P = h3c_ex2(__fmaf_rn(sAcc, GR_C, -L));
  dS = rbf(__fmul_rn(P, __fsub_rn(dPAcc, D)));
  Pb = rbf(P);
}

#define GR_DL ((GR_D + 31) / 32)  // channels per lane

// Phase 1: a warp per (query row i, head): dq_i = scale * s, s the fold from +0 (flush-to-zero adds) over the item's
// blocks of GR_DQ_KEYS keys, ascending, of each block's chain (k_chunks from 0) of bf(dS_ij) k_j.
extern "C" __global__ void __launch_bounds__(256) GR_ENTRY_P1(H3C_PARAMS) {
  h3c_grid_dependency_wait();
  const int lane = threadIdx.x & 31;
  for (long long w = GR_WARP; w < rows * GR_HEADS; w += GR_WARPS) {
    const long long i = w / GR_HEADS, h = w % GR_HEADS;
    const long long item0 = (i / item_rows) * item_rows, n = item_rows;
    const float L = ((const float *)stats)[2 * w], D = ((const float *)stats)[2 * w + 1];
    float acc[GR_DL], sum[GR_DL];
    for (int t = 0; t < GR_DL; ++t) acc[t] = sum[t] = 0.f;
    for (long long c0 = 0; c0 < n; c0 += 16) {
      if (c0 % GR_DQ_KEYS == 0 && c0 > 0)  // a block's chain ends: into the fold, the next from 0
        for (int t = 0; t < GR_DL; ++t) sum[t] = gr_add_ftz(sum[t], acc[t]), acc[t] = 0.f;
      float dS = 0.f, Pb = 0.f;
      if (lane < 16 && c0 + lane < n) gr_attention_ds(q, k, v, dout, i, item0 + c0 + lane, h, L, D, dS, Pb);
      for (int t = 0; t < GR_DL; ++t) {
        const int e = lane + 32 * t;
        double s[4];
        gr_chunk_zero(s);
        for (int jj = 0; jj < 16; ++jj) {
          const float d = __shfl_sync(0xffffffffu, dS, jj);
          if (e < GR_D && c0 + jj < n)
            gr_chunk_add(s, jj, d, gr_ld(k, (item0 + c0 + jj) * (GR_HEADS * GR_D) + h * GR_D + e, GR_K_BF));
        }
        acc[t] = __fadd_rn(acc[t], gr_chunk_value(s));
      }
    }
    for (int t = 0; t < GR_DL; ++t) {
      const int e = lane + 32 * t;
      if (e < GR_D) ((float *)dq)[i * (GR_HEADS * GR_D) + h * GR_D + e] = __fmul_rn(GR_QK_SCALE, gr_add_ftz(sum[t], acc[t]));
    }
  }
}

// Phase 2: a warp per (key row j, head): dk_j = scale * (one chain over the item's query rows i, 16-row chunks
// ascending from 0, of bf(dS_ij) q_i), dv_j = the same chain of bf(P_ij) bf(dout_i).
extern "C" __global__ void __launch_bounds__(256) GR_ENTRY_P2(H3C_PARAMS) {
  h3c_grid_dependency_wait();
  const int lane = threadIdx.x & 31;
  for (long long w = GR_WARP; w < rows * GR_HEADS; w += GR_WARPS) {
    const long long j = w / GR_HEADS, h = w % GR_HEADS;
    const long long item0 = (j / item_rows) * item_rows, n = item_rows;
    float ak[GR_DL], av[GR_DL];
    for (int t = 0; t < GR_DL; ++t) ak[t] = av[t] = 0.f;
    for (long long c0 = 0; c0 < n; c0 += 16) {
      float dS = 0.f, Pb = 0.f;
      const long long i = item0 + c0 + lane;
      if (lane < 16 && c0 + lane < n) {
        const long long sw = i * GR_HEADS + h;
        gr_attention_ds(q, k, v, dout, i, j, h, ((const float *)stats)[2 * sw], ((const float *)stats)[2 * sw + 1], dS,
                        Pb);
      }
      for (int t = 0; t < GR_DL; ++t) {
        const int e = lane + 32 * t;
        double sk[4], sv[4];
        gr_chunk_zero(sk);
        gr_chunk_zero(sv);
        for (int ii = 0; ii < 16; ++ii) {
          const float d = __shfl_sync(0xffffffffu, dS, ii), p = __shfl_sync(0xffffffffu, Pb, ii);
          if (e < GR_D && c0 + ii < n) {
            const long long qe = (item0 + c0 + ii) * (GR_HEADS * GR_D) + h * GR_D + e;
            gr_chunk_add(sk, ii, d, gr_ld(q, qe, GR_Q_BF));
            gr_chunk_add(sv, ii, p, rbf(((const float *)dout)[qe]));
          }
        }
        ak[t] = __fadd_rn(ak[t], gr_chunk_value(sk));
        av[t] = __fadd_rn(av[t], gr_chunk_value(sv));
      }
    }
    for (int t = 0; t < GR_DL; ++t) {
      const int e = lane + 32 * t;
      if (e < GR_D) {
        ((float *)dk)[j * (GR_HEADS * GR_D) + h * GR_D + e] = __fmul_rn(GR_QK_SCALE, ak[t]);
        gr_st(dv, j * (GR_HEADS * GR_D) + h * GR_D + e, av[t], GR_DV_BF);
      }
    }
  }
}
#endif

