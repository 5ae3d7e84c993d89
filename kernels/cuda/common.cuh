// h3c kernel prelude (NVRTC, no includes). Emitted before every kernel: bf16 as raw bits with h3c's own rounding
// (support/dtype.h: RNE, quiet NaN), the row-metadata lookup, cp.async / ldmatrix / mma.sync wrappers. Kernel
// parameters are typed and named (docs/contract.md section 6): the emitter defines H3C_PARAMS, the parameter list of
// the kernel's signature, from the plan's parameter list, so the signature and the plan cannot disagree.
typedef unsigned short h3bf;
typedef long long h3i64;
typedef unsigned int h3u32;

// A CUtensorMap as a kernel parameter (128 bytes, 64-byte aligned; NVRTC has no <cuda.h>). Passed by value as
// `const __grid_constant__ H3cTensorMap`; the runtime encodes it on the host from the plan's tensor-map spec.
struct __align__(64) H3cTensorMap {
  unsigned long long opaque[16];
};

// Programmatic dependent launch: every kernel calls this first, before it reads or writes global memory.
// griddepcontrol.wait returns once the grids before this one in the stream have completed and their writes are
// visible (at once when the kernel was launched without the attribute, plan::Launch::gridDependency); then
// launch_dependents lets the stream's next kernel be launched, so its CTAs take the SMs this grid's last wave leaves
// and wait there in turn. Only when the kernels start changes, never what they compute.
__device__ __forceinline__ void h3c_grid_dependency_wait() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

__device__ __forceinline__ float bf2f(h3bf b) { return __uint_as_float(((h3u32)b) << 16); }
// h3c's bf16 rounding (support/dtype.h: RNE; a NaN keeps its sign and payload top and is made quiet). For every
// input but a NaN the hardware's RNE conversion (cvt.rn.bf16.f32) gives the contract's bits; a NaN takes the
// contract's (u >> 16) | 0x40 by a select (the cvt returns the canonical 0x7fff). Checked for all 2^32 inputs on the GPU
// against the integer formula (test/gpu/gpu_bf16_rounding_test.cpp). Branch-free: a branch per rounding (tried first)
// made the qk_norm_rope epilogue, which rounds 128 values per head twice, a third slower (bench/NOTES.md,
// 2026-12-04); the formula itself takes about ten instructions, this five.
__device__ __forceinline__ h3bf f2bf(float f) {
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(h) : "f"(f));
  const h3u32 u = __float_as_uint(f);
  return f != f ? (h3bf)((u >> 16) | 0x0040u) : (h3bf)h;
}
__device__ __forceinline__ float rbf(float f) { return bf2f(f2bf(f)); }
// 2^x by the PTX ex2.approx.ftz.f32 instruction (MUFU.EX2): one fixed hardware function, the contract's exp of the
// flash order (docs/contract.md section 4). Not volatile: the compiler may schedule it, never replace it.
__device__ __forceinline__ float h3c_ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Row metadata: table row of a packed row (docs/contract.md section 1: adaln row = ts * 3 + tag; norm_out row = ts).
// The metadata vectors have no batch axis: `metaRows` (S) rows shared by every batch item.
__device__ __forceinline__ long long h3c_table_row(const long long *ts, const long long *tags, long long metaRows,
                                                   long long row, int rowsPerTs) {
  long long m = row % metaRows;
  return rowsPerTs == 3 ? ts[m] * 3 + tags[m] : ts[m];
}

__device__ __forceinline__ h3u32 smem_u32(const void *p) { return (h3u32)__cvta_generic_to_shared(p); }
// 16-byte async copy; src_bytes 0 fills the destination with zeros (out-of-range rows/columns).
__device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldsm_x4(h3u32 &r0, h3u32 &r1, h3u32 &r2, h3u32 &r3, const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_t(h3u32 &r0, h3u32 &r1, h3u32 &r2, h3u32 &r3, const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(smem_u32(p)));
}
// D = A(16x16 bf16) * B(16x8 bf16) + C, F32 accumulators: one k_step = 16 chunk added to the running accumulator.
__device__ __forceinline__ void mma16816(float *c, const h3u32 *a, h3u32 b0, h3u32 b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// log2 by lg2.approx.ftz.f32 (MUFU.LG2): attention's L = mc + lg2(l), the hardware's, as ex2 (section 4); the forward
// writes it (its row statistics, for the backward) and the backward reruns it with the same instruction.
__device__ __forceinline__ float h3c_lg2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// f2bf of two values, low half first: one cvt for the pair unless one of them is a NaN.
// f2bf of two values, low half first: one cvt for the pair, NaN halves replaced by selects as in f2bf.
__device__ __forceinline__ h3u32 pack_bf2(float lo, float hi) {
  h3u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  const h3u32 ul = __float_as_uint(lo), uh = __float_as_uint(hi);
  r = lo != lo ? (r & 0xffff0000u) | (ul >> 16) | 0x0040u : r;
  return hi != hi ? (r & 0x0000ffffu) | (uh & 0xffff0000u) | 0x00400000u : r;
}

// Pairs of bf16 values in one 32-bit word (low half first) and the hardware's bf16x2 instructions, one instruction
// per pair where f2bf and F32 arithmetic take about ten. Each equals its F32 form for every input that reaches it
// (test/gpu/gpu_bf16_pairs_test.cpp checks every such input on the device):
//   bf2_rn(lo, hi) == pack_bf2(lo, hi) for every non-NaN F32 value and for the canonical NaN 0x7fffffff, the only NaN
//     F32 arithmetic returns on the GPU (0x7fff both); apply it to arithmetic results only (f2bf keeps other NaN
//     payloads, the cvt returns 0x7fff);
//   bf2_mul(a, b) == pack_bf2(lo(a) * lo(b), hi(a) * hi(b)) for every a that bf2_rn returns (any non-NaN value or
//     0x7fff) and every b: the F32 product of two bf16 values is exact unless it is below 2^-134 (then both forms
//     round it to a zero of its sign), so the F32 form rounds once, as the bf16 instruction does;
//   bf2_one_plus(s) == pack_bf2(1 + lo(s), 1 + hi(s)) for every non-NaN s: 1 + s is exact in F32 for |s| >= 2^-16
//     and rounds to 1 in both forms below; a NaN s gives a NaN (feed it to F32 arithmetic only, which makes every
//     NaN the canonical one).
__device__ __forceinline__ float bf2_lo(h3u32 v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf2_hi(h3u32 v) { return __uint_as_float(v & 0xffff0000u); }
__device__ __forceinline__ h3u32 bf2_rn(float lo, float hi) {
  h3u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ h3u32 bf2_mul(h3u32 a, h3u32 b) {
  h3u32 r;
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
__device__ __forceinline__ h3u32 bf2_one_plus(h3u32 s) {
  h3u32 r;
  asm("fma.rn.bf16x2 %0, %1, %2, %2;\n" : "=r"(r) : "r"(s), "r"(0x3f803f80u));
  return r;
}

// The contract's lane_tree: for off = 16..1, lanes l < off add lane l + off; the result is lane 0's, broadcast.
__device__ __forceinline__ float h3c_lane_tree(float p) {
#pragma unroll
  for (int off = 16; off >= 1; off >>= 1) {
    float o = __shfl_down_sync(0xffffffffu, p, off);
    if ((int)(threadIdx.x & 31) < off) p = __fadd_rn(p, o);
  }
  return __shfl_sync(0xffffffffu, p, 0);
}
