// What the gradient kernels share (grad.cuh, grad_linear_mma.cuh, grad_linear_sm90.cuh, grad_attention_mma.cuh;
// emitted before the body): swiglu's gradient of an element and the dX kernels' store with it,
// row_units' fold (docs/contract.md section 14: each batch item's canonical rows in units of GR_UNIT, a unit's
// partial, the item's sum the left fold of its partials, the first as it is, the batch's the left fold of the items'
// sums in batch order) and the hardware's log2 of attention's row statistics.
#define GR_UNIT 128  // row_units' unit
#define GR_DQ_KEYS 128  // attention_grad's dq: the keys' blocks, whose chains are folded in block order
// The addition of dq's fold (docs/contract.md section 14): round to nearest even, subnormal inputs and result flushed
// to zero of their sign, as the global reduction red.add.f32 that the Hopper form adds with.
__device__ __forceinline__ float gr_add_ftz(float a, float b) {
  float r;
  asm("add.rn.ftz.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

// silu'(x) = s * (1 + x * (1 - s)), s = 1 / (1 + expf(-x)) (the forward's expf), innermost first.
__device__ __forceinline__ float gr_silu_derivative(float x) {
  const float s = __fdiv_rn(1.0f, __fadd_rn(1.0f, h3c::detmath::expf(-x)));
  return __fmul_rn(s, __fadd_rn(1.0f, __fmul_rn(x, __fsub_rn(1.0f, s))));
}

// swiglu_grad of one element of x = [v | g] (swiglu_grad's kernel, and the dX kernels that took it in):
// dv = dy * bf(silu(g)), dg = (dy * v) * silu'(g).
__device__ __forceinline__ void gr_swiglu_dx(float dy, float v, float g, float &dv, float &dg) {
  dv = __fmul_rn(dy, rbf(h3c::detmath::silu(g)));
  dg = __fmul_rn(__fmul_rn(dy, v), gr_silu_derivative(g));
}

// A pair of gradient elements i, i + 1 (i even): F32, or (BF 1, h3-fuse-grad's fused rounding) bf16, each rounded to
// nearest even as gr_st stores it (pack_bf2: f2bf of each half).
template <int BF>
__device__ __forceinline__ void gr_st2(void *p, long long i, float a, float b) {
  if (BF) *(h3u32 *)((h3bf *)p + i) = pack_bf2(a, b);
  else *(float2 *)((float *)p + i) = make_float2(a, b);
}

// The pairs of x = [v | g] (sx, bf16 [rows][2K]) at columns c, c + 1 (v) and K + c, K + c + 1 (g) of row r.
// The Hopper dX kernels load a batch of them before storing any (gr_dx_store2_x): the compiler may not move a load of
// sx above a store to dx, which it cannot tell apart, so a load made beside each store waits out its latency alone
// (fc2's dX with swiglu_grad taken in ran 4.98 ms against 1.84 + 0.54 for the two ops apart, H100, bench/NOTES.md
// 2026-12-07 session of 06:34).
struct GrSwigluX {
  h3u32 v, g;
};
__device__ __forceinline__ GrSwigluX gr_swiglu_x(const void *sx, long long r, long long c, long long K) {
  const h3bf *x = (const h3bf *)sx + r * 2 * K + c;
  return {*(const h3u32 *)x, *(const h3u32 *)(x + K)};
}
// gr_dx_store2's swiglu form (SW 1) with the pair x loaded already.
template <int BF>
__device__ __forceinline__ void gr_dx_store2_x(void *dx, GrSwigluX x, long long r, long long c, long long K,
                                               float2 d) {
  float dv0, dg0, dv1, dg1;
  gr_swiglu_dx(d.x, bf2_lo(x.v), bf2_lo(x.g), dv0, dg0);
  gr_swiglu_dx(d.y, bf2_hi(x.v), bf2_hi(x.g), dv1, dg1);
  gr_st2<BF>(dx, r * 2 * K + c, dv0, dv1);
  gr_st2<BF>(dx, r * 2 * K + K + c, dg0, dg1);
}
// A dX kernel's store of dX's columns c, c + 1 (c even) of row r, dX [rows][K]: as they are (SW 0), or with the
// swiglu_grad of that dX taken in (SW 1, h3-fuse-grad) that op's dx at columns c, c + 1 (dv) and K + c, K + c + 1
// (dg) of [rows][2K], from x = [v | g] (sx, bf16 [rows][2K]); F32, or bf16 (BF 1: the rounding of a grad_round, or
// of the swiglu_grad, folded in).
template <int SW, int BF>
__device__ __forceinline__ void gr_dx_store2(void *dx, const void *sx, long long r, long long c, long long K,
                                             float2 d) {
  if (!SW) {
    gr_st2<BF>(dx, r * K + c, d.x, d.y);
    return;
  }
  gr_dx_store2_x<BF>(dx, gr_swiglu_x(sx, r, c, K), r, c, K, d);
}

// The fold of row_units over `items` items of `itemRows` rows each: fold.unit(partial) for each unit in order.
struct GrFold {
  float item, total;
  bool anyItem;
  __device__ __forceinline__ void begin() { anyItem = false; total = 0.f; }
  // A unit's partial; `first`: the item's first unit.
  __device__ __forceinline__ void unit(float part, bool first) { item = first ? part : __fadd_rn(item, part); }
  __device__ __forceinline__ void endItem() {
    total = anyItem ? __fadd_rn(total, item) : item;
    anyItem = true;
  }
};

// row_units over `items` items of `itemRows` rows each: unit(u0, u1) returns the partial of rows [u0, u1).
template <class Unit>
__device__ __forceinline__ float gr_fold_units(long long items, long long itemRows, Unit unit) {
  GrFold f;
  f.begin();
  for (long long b = 0; b < items && itemRows > 0; ++b) {
    const long long r0 = b * itemRows, r1 = r0 + itemRows;
    for (long long u = r0; u < r1; u += GR_UNIT) f.unit(unit(u, u + GR_UNIT < r1 ? u + GR_UNIT : r1), u == r0);
    f.endItem();
  }
  return f.total;
}

// One key block of attention's statistics pass (grad_attention_mma.cuh, grad_attention_sm90.cuh): the forward's
// step on this thread's S fragment s[j * 4 + e] (row g (+ 8 for e >= 2), key k0 + 8 * j + 2 * t4 + (e & 1); NJ
// 8-key groups), exactly attention.cuh's: keys at or past L masked to -inf, the running max over the quad, l rescaled
// and the block's bf(ex2(fma(s, c, -mc))) added in (j, e) order. m and l: the thread's two rows.
template <int NJ>
__device__ __forceinline__ void gr_stats_block(const float *s, long long k0, long long L, int t4, float c, float *m,
                                               float *l) {
  const float kNegInf = __int_as_float(0xff800000);
  const long long left = L - k0;  // keys of the block before L: one 32-bit compare per element
  const int lim = left < NJ * 8 ? (int)left : NJ * 8;
  // Masked as read, s left as it is: the Hopper walk's next S is in flight meanwhile, and ptxas serializes the wgmmas
  // when other instructions write a wgmma's accumulator registers (C7515) or a copy takes too many registers (C7512).
  auto x = [&](int i) { return (i >> 2) * 8 + t4 * 2 + (i & 1) >= lim ? kNegInf : s[i]; };
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    float mx = kNegInf;
#pragma unroll
    for (int j = 0; j < NJ; ++j) mx = fmaxf(mx, fmaxf(x(j * 4 + hh * 2), x(j * 4 + hh * 2 + 1)));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mnew = fmaxf(m[hh], mx), mc = __fmul_rn(mnew, c);
    const float alpha = h3c_ex2(__fmaf_rn(m[hh], c, -mc));
    m[hh] = mnew;
    l[hh] = __fmul_rn(l[hh], alpha);
    // Each pair rounded by one cvt (bf2_rn == rbf's bits for every value ex2 returns, common.cuh), added in order.
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const h3u32 p2 =
          bf2_rn(h3c_ex2(__fmaf_rn(x(j * 4 + hh * 2), c, -mc)), h3c_ex2(__fmaf_rn(x(j * 4 + hh * 2 + 1), c, -mc)));
      l[hh] = __fadd_rn(__fadd_rn(l[hh], bf2_lo(p2)), bf2_hi(p2));
    }
  }
}
